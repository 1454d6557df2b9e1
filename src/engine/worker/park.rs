//! Where a record whose attempts ran out goes, and how long a retry-tier
//! record waits: the partition's blocked state, the dead-letter and
//! retry-tier writes (retried until the broker acknowledges them), and the
//! due-time wait of a tier record with its partition paused.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use crate::engine::shared::Ctrl;
use crate::failure::dead_letter::{self, DeadLetterWriter, Destination, FailureInfo, Origin};
use crate::handler::Handler;
use crate::record::Record;
use crate::summary::BlockedRecord;
use crate::trace::{AttemptSpan, Outcome};

use super::task::{Done, Worker};

/// One record's share of its partition's blocked state: set while the
/// record's attempts ran out and it is neither handled nor parked. Cleared
/// when the record moves on, or dropped with it.
pub(super) struct BlockGuard<'a, H> {
    pub(super) worker: &'a Worker<H>,
    pub(super) blocked: bool,
}

impl<H> BlockGuard<'_, H> {
    /// The record at `offset` stops the partition (after `attempts`
    /// handler attempts, with `error`). The first call for a record counts
    /// it and says so at ERROR; `true` then, `false` when it was blocked
    /// already (a capped-backoff retry that failed again).
    pub(super) fn block(&mut self, offset: i64, attempts: u32, error: &str) -> bool {
        if std::mem::replace(&mut self.blocked, true) {
            return false;
        }
        let since = SystemTime::now();
        let record = BlockedRecord {
            offset,
            attempts,
            error: error.to_owned(),
            since,
        };
        let state = &self.worker.state;
        if self.worker.blocked.fetch_add(1, Ordering::AcqRel) == 0 {
            let now = since
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(1)
                .max(1);
            if state
                .blocked_since
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                *state
                    .blocked_record
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(record.clone());
                state.metrics.blocked(true);
            }
        }
        state.metrics.record_blocked();
        self.worker
            .engine
            .counters
            .blocked(&state.topic, state.partition, record);
        true
    }

    /// The record moved on (handled, parked or skipped): the partition is
    /// no longer stopped at it, and the run summary forgets it.
    pub(super) fn unblock(&mut self, offset: i64) {
        if self.blocked {
            let state = &self.worker.state;
            self.worker
                .engine
                .counters
                .unblocked(&state.topic, state.partition, offset);
        }
        self.release();
    }

    /// Clears the partition's blocked state (gauge, health) without saying
    /// the record moved on: the worker stops (a revoke or the shutdown)
    /// with the record still blocking, so the run summary keeps it.
    fn release(&mut self) {
        if !std::mem::replace(&mut self.blocked, false) {
            return;
        }
        if self.worker.blocked.fetch_sub(1, Ordering::AcqRel) == 1 {
            let state = &self.worker.state;
            if state.blocked_since.swap(0, Ordering::AcqRel) != 0 {
                *state
                    .blocked_record
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = None;
                state.metrics.blocked(false);
            }
        }
    }
}

impl<H> Drop for BlockGuard<'_, H> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<H: Handler> Worker<H> {
    /// Writes a record whose attempts ran out to `topic` (its dead-letter
    /// topic or its next retry tier) with [`Self::write_out`], the written
    /// record continuing the process span's trace, and ends the span with
    /// the outcome.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn write_failed(
        &self,
        writer: &DeadLetterWriter,
        record: &Record,
        origin: &Option<Origin>,
        failure: &FailureInfo,
        topic: String,
        to: To,
        span: AttemptSpan<'_>,
        blocked: &mut BlockGuard<'_, H>,
    ) -> Done {
        let origin = origin.clone().unwrap_or_else(|| Origin::of(record));
        let out = Outgoing {
            origin: &origin,
            failure,
            topic,
            to,
        };
        let headers = span.headers();
        let done = self.write_out(writer, record, out, blocked, &headers).await;
        span.end(match (&done, to) {
            (Done::Stopped, _) => Outcome::Stopped,
            (_, To::DeadLetter) => Outcome::DeadLettered,
            (_, To::Tier { .. }) => Outcome::RetryTier,
            // Never: a stale record has no process span.
            (_, To::Stale) => Outcome::DeadLettered,
        });
        done
    }

    /// Writes `record` to its dead-letter topic or its next retry tier,
    /// retrying the write at the capped backoff until the broker
    /// acknowledges it; only then is the record's offset committable. The
    /// partition counts as blocked while a write fails.
    pub(super) async fn write_out(
        &self,
        writer: &DeadLetterWriter,
        record: &Record,
        out: Outgoing<'_>,
        blocked: &mut BlockGuard<'_, H>,
        trace_headers: &[(String, String)],
    ) -> Done {
        let Outgoing {
            origin,
            failure,
            ref topic,
            to,
        } = out;
        let mut write_attempt: u32 = 0;
        loop {
            write_attempt += 1;
            let destination = match to {
                To::DeadLetter | To::Stale => Destination::DeadLetter,
                // Due a tier's delay after this write.
                To::Tier { tier, delay } => {
                    let written_ms = crate::record::unix_ms(SystemTime::now());
                    Destination::Tier {
                        tier,
                        written_ms,
                        due_ms: written_ms.saturating_add(delay.as_millis() as i64),
                    }
                }
            };
            let sent = tokio::select! {
                biased;
                _ = self.state.stop.cancelled() => return Done::Stopped,
                r = writer.write(record, origin, topic, failure, destination, trace_headers) => r,
            };
            match sent {
                Ok(()) => return self.parked(record, &out, blocked),
                Err(e) => {
                    self.park_write_failed(to, &e);
                    let delay = self.engine.settings.retry.delay(write_attempt);
                    let what = match to {
                        To::Tier { .. } => "retry tier",
                        To::DeadLetter => "dead-letter topic",
                        To::Stale => "stale-record topic",
                    };
                    blocked.block(
                        record.offset(),
                        out.failure.attempts,
                        &format!("writing to the {what} {topic} failed: {e}"),
                    );
                    tracing::error!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset = record.offset(),
                        destination = %topic,
                        error = %e,
                        retry_in = ?delay,
                        "writing to the {what} failed; the record stays uncommitted and the write is retried"
                    );
                    if !self.sleep(delay).await {
                        return Done::Stopped;
                    }
                }
            }
        }
    }

    /// The due time of `record` (ms since the Unix epoch, wall clock) when
    /// it was read from a retry tier (see [`due_ms`]); `None` for a record
    /// of a source topic.
    pub(super) fn due_ms_of(&self, record: &Record) -> Option<i64> {
        let exhausted = &self.engine.exhausted;
        let tier = exhausted.tier_of(record.topic())?;
        let delay = exhausted
            .retry_topics()
            .and_then(|rt| rt.delay(tier.tier))
            .unwrap_or_default();
        Some(due_ms(record, delay))
    }

    /// Waits until `record` is due (at once for a record of a source
    /// topic, see [`Self::due_ms_of`]), with the partition paused meanwhile
    /// ([`Ctrl::Hold`]), unless the partition is stopped first. Returns
    /// `false` when stopped. The worker's task waits on a timer: the poll
    /// loop and every other partition go on, and `max.poll.interval.ms` is
    /// not at stake.
    pub(super) async fn wait_until_due(&self, record: &Record) -> bool {
        let Some(due_ms) = self.due_ms_of(record) else {
            return true;
        };
        let mut hold: Option<HoldGuard<'_, H>> = None;
        loop {
            let now = crate::record::unix_ms(SystemTime::now());
            if now >= due_ms {
                return true;
            }
            if hold.is_none() {
                tracing::debug!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    wait_ms = due_ms - now,
                    "retry-tier record not due yet; pausing the partition until it is"
                );
                hold = Some(HoldGuard::new(self));
            }
            // Whole milliseconds, then checked again: never early.
            let wait = Duration::from_millis((due_ms - now) as u64);
            if !self.sleep(wait).await {
                return false;
            }
        }
    }
}

/// The due time of a record read from a retry tier, ms since the Unix
/// epoch: its [`RETRY_DUE`](dead_letter::RETRY_DUE) header, or (written
/// there without one) its timestamp plus the tier's `delay`, or now.
fn due_ms(record: &Record, delay: Duration) -> i64 {
    record
        .header(dead_letter::RETRY_DUE)
        .flatten()
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| {
            record
                .timestamp()
                .millis()
                .map(|ms| ms.saturating_add(delay.as_millis() as i64))
        })
        .unwrap_or(0)
}

/// Where [`Worker::write_out`] writes a record.
#[derive(Clone, Copy)]
pub(super) enum To {
    DeadLetter,
    /// A stale record ([`OnStale`](crate::failure::OnStale)), to the dead-letter or
    /// the stale-record topic.
    Stale,
    Tier {
        tier: usize,
        delay: Duration,
    },
}

/// A write of a failed record: from where, after which failure, to which
/// topic.
pub(super) struct Outgoing<'a> {
    pub(super) origin: &'a Origin,
    pub(super) failure: &'a FailureInfo,
    pub(super) topic: String,
    pub(super) to: To,
}

/// One waiting record's share of its retry-tier partition's pause: the
/// partition is paused while any record holds one (several can with
/// [`ProcessingOrder::Key`]).
pub(super) struct HoldGuard<'a, H> {
    worker: &'a Worker<H>,
}

impl<'a, H> HoldGuard<'a, H> {
    pub(super) fn new(worker: &'a Worker<H>) -> Self {
        if worker.state.held.fetch_add(1, Ordering::AcqRel) == 0 {
            let _ = worker
                .engine
                .ctrl_tx
                .send(Ctrl::Hold(Arc::clone(&worker.state), true));
        }
        HoldGuard { worker }
    }
}

impl<H> Drop for HoldGuard<'_, H> {
    fn drop(&mut self) {
        let w = self.worker;
        if w.state.held.fetch_sub(1, Ordering::AcqRel) == 1 && !w.state.stop.is_cancelled() {
            let _ = w
                .engine
                .ctrl_tx
                .send(Ctrl::Hold(Arc::clone(&w.state), false));
        }
    }
}
