//! A record's outcome, stated once. The worker's loops (`attempt.rs`,
//! `batched.rs`, `stale.rs`) decide what became of a record or a batch and
//! call one method here; this file turns the decision into what the run
//! reports, always in the same order: the attempt's duration, the event age
//! and SLO result (or the late or failure counts), the partition's health,
//! completion for the committer, the bulk counters, and last the span's
//! end. A parked record (written to a retry tier, a dead-letter or a
//! stale-record topic) is stated here too, once `park.rs` has its write
//! acknowledged by the broker ([`Worker::parked`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::error_chain;
use crate::failure::is_permanent;
use crate::handler::{BoxError, Handler};
use crate::metrics::instruments::AttemptError;
use crate::record::{EventTime, Record};
use crate::trace::{AttemptSpan, Outcome};

use super::park::{BlockGuard, Outgoing, To};
use super::task::{Done, Worker};

/// A handler call that succeeded for one record.
pub(super) struct Succeeded {
    pub(super) offset: i64,
    /// The event time its age is recorded from.
    pub(super) age: EventTime,
    /// Its origin-time header could not be read (counted).
    pub(super) malformed: bool,
    /// The attempt's duration.
    pub(super) took: Duration,
    /// The clock reading at the attempt's end (the age is taken at it).
    pub(super) ended: Instant,
    /// The call ran inside an open transaction: the age is recorded when
    /// the transaction commits (`engine/transaction.rs`), not now.
    pub(super) in_transaction: bool,
}

/// How a batch handler call returned.
pub(super) struct Returned<'a> {
    /// The call's duration.
    pub(super) took: Duration,
    /// The clock reading at its end (the ages are taken at it).
    pub(super) ended: Instant,
    /// The index of the record it named as the first that failed (within
    /// the batch), and the error; `None` when every record succeeded.
    pub(super) failed: Option<(usize, &'a BoxError)>,
}

/// A failed attempt that is retried after a delay, with what its log line
/// says.
pub(super) enum Retry<'a> {
    /// One record, in place.
    Record { offset: i64, attempt: u32 },
    /// A whole batch, in place.
    Batch {
        first_offset: i64,
        records: usize,
        attempt: u32,
    },
    /// The record a partition stopped at (its attempts ran out, the
    /// policy blocks), at the capped backoff: an error with the record's
    /// last failure `message` when it `first` stopped the partition, a
    /// warning each time after.
    Blocked {
        offset: i64,
        attempts: u32,
        /// The storm guard decided it.
        storm: bool,
        first: bool,
        message: &'a str,
    },
}

impl<H: Handler> Worker<H> {
    /// A record's handler call succeeded: its age (now, or at the
    /// transaction's commit) and SLO result, the partition's last success,
    /// its offset completed, the bulk success count, the span ended
    /// `succeeded`. [`Done::Late`] instead when the partition was revoked
    /// while the handler ran (the record will be redelivered to its new
    /// owner): the attempt's duration and a late completion.
    #[inline(always)]
    pub(super) fn succeeded(&self, s: Succeeded, span: AttemptSpan<'_>) -> Done {
        if self.state.revoked.load(Ordering::Acquire) {
            self.state.metrics.attempt(s.took, None);
            self.late(1);
            span.end(Outcome::Stopped);
            return Done::Late;
        }
        if s.in_transaction {
            self.state.metrics.attempt(s.took, None);
            self.state
                .ages
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(s.age);
        } else {
            self.state
                .metrics
                .handler_succeeded(&self.engine.wall_clock, s.age, s.took, s.ended);
        }
        if s.malformed {
            self.state.metrics.origin_malformed();
        }
        self.state.health.succeeded(s.ended);
        self.state.completed(s.offset, &self.engine.committer.queue);
        // Counted in the shared counters in bulk (`flush_counts`): atomics
        // shared by every worker are costly per record.
        self.unflushed.fetch_add(1, Ordering::Relaxed);
        span.end(Outcome::Succeeded);
        Done::Completed {
            succeeded_at: Some(s.ended),
        }
    }

    /// A batch call over `records` returned: all of them succeeded, or the
    /// ones before the record it named failed (which goes on on its own:
    /// `None`, the span ended `retried`). The call's duration, the failure
    /// on the span, then the successes ([`Self::batch_succeeded`]), or,
    /// when the partition was revoked while the handler ran, late
    /// completions for them and the rest unassigned ([`Done::Late`]).
    pub(super) fn batch_returned(
        &self,
        records: &[Record],
        returned: Returned<'_>,
        span: AttemptSpan<'_>,
    ) -> Option<Done> {
        let (succeeded, kind) = match returned.failed {
            None => (records, None),
            Some((i, error)) => {
                let (_, error_type) = classify(AttemptError::Handler, error);
                span.failed(error_type, || error_chain(&**error));
                (&records[..i], Some(AttemptError::Handler))
            }
        };
        self.state.metrics.attempt(returned.took, kind);
        if self.state.revoked.load(Ordering::Acquire) {
            // The partition moved on while the handler ran: its new owner
            // gets the records again.
            self.late(succeeded.len());
            self.unhandled(records.len() - succeeded.len());
            span.end(Outcome::Stopped);
            return Some(Done::Late);
        }
        self.batch_succeeded(succeeded, returned.ended);
        if kind.is_some() {
            span.end(Outcome::Retried);
            return None;
        }
        span.end(Outcome::Succeeded);
        Some(Done::Completed {
            succeeded_at: Some(returned.ended),
        })
    }

    /// The success path of a batch (or of its prefix before a failed
    /// record), whose call's duration the caller recorded: every record's
    /// event age and SLO result at `ended`, the partition's last success,
    /// the offsets completed under one lock, the bulk success count.
    fn batch_succeeded(&self, records: &[Record], ended: Instant) {
        if records.is_empty() {
            return;
        }
        let now_ns = self.engine.wall_clock.unix_nanos(ended);
        let tier = self.engine.exhausted.tier_of(&self.state.topic).is_some();
        let header = self.engine.settings.event_time_header.as_deref();
        for r in records {
            let event_time = if tier {
                // A tier record's event time is its original record's.
                self.origin_and_event_time(r).1
            } else {
                EventTime::of(header, r)
            };
            let times = self.times(r, event_time);
            self.state.metrics.succeeded(times.age, now_ns);
            if times.malformed {
                self.state.metrics.origin_malformed();
            }
        }
        self.state.health.succeeded(ended);
        self.state.completed_all(
            records.iter().map(Record::offset),
            &self.engine.committer.queue,
        );
        self.unflushed
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }

    /// `n` records succeeded after their partition was revoked: counted as
    /// late completions (their new owner gets them again).
    pub(super) fn late(&self, n: usize) {
        for _ in 0..n {
            self.engine.counters.late_completion();
        }
    }

    /// A handler attempt (a record's, or a whole batch's) failed: the
    /// span's error status, the successes so far flushed first (the storm
    /// guard compares failures with them), the attempt's duration when
    /// `took` is given (a batch call that named this record recorded its
    /// own), the failed attempt counted. Returns whether the error is
    /// [`permanent`](crate::permanent), and its `error.type`.
    pub(super) fn attempt_failed(
        &self,
        kind: AttemptError,
        error: &BoxError,
        took: Option<Duration>,
        span: &AttemptSpan<'_>,
    ) -> (bool, &'static str) {
        let (permanent, error_type) = classify(kind, error);
        span.failed(error_type, || error_chain(&**error));
        self.flush_counts();
        if let Some(took) = took {
            self.state.metrics.attempt(took, Some(kind));
        }
        self.engine.counters.failed_attempt();
        (permanent, error_type)
    }

    /// A failed attempt is retried after `delay` (the caller waits): its
    /// log line (a warning for an in-place retry), the retry counted, the
    /// span ended (`retried`, or `blocked` for a stopped partition's
    /// record). Not async on purpose: the wait stays the caller's own
    /// await, so the record's future (moved once per record on the plain
    /// path) does not grow by this one's.
    pub(super) fn retrying(
        &self,
        retry: Retry<'_>,
        delay: Duration,
        error_type: &'static str,
        error: &BoxError,
        span: AttemptSpan<'_>,
    ) {
        let outcome = match retry {
            Retry::Record { offset, attempt } => {
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset,
                    attempt,
                    error.type = error_type,
                    error = %error,
                    retry_in = ?delay,
                    "handler failed; retrying in place, the partition's commit holds at this offset"
                );
                Outcome::Retried
            }
            Retry::Batch {
                first_offset,
                records,
                attempt,
            } => {
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    first_offset,
                    records,
                    attempt,
                    error.type = error_type,
                    error = %error,
                    retry_in = ?delay,
                    "batch handler failed; retrying the batch in place, the partition's commit holds at its first offset"
                );
                Outcome::Retried
            }
            Retry::Blocked {
                offset,
                attempts,
                storm,
                first: true,
                message,
            } => {
                tracing::error!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset,
                    attempts,
                    error.type = error_type,
                    error = %error,
                    storm_guard = storm,
                    retry_in = ?delay,
                    "partition stopped at a record whose attempts ran out: nothing after it is committed until it succeeds; retrying at the capped backoff"
                );
                crate::error::say_without_subscriber(|| {
                    format!(
                        "partition {}/{} stopped at offset {offset} after {attempts} attempts ({error_type}): {message}; nothing after it is committed until it succeeds (retried every {delay:?}). Give failing records a dead-letter topic with .on_exhausted(OnExhausted::DeadLetter(DeadLetter::default())) sends them to <topic>.dlt",
                        self.state.topic, self.state.partition
                    )
                });
                Outcome::Blocked
            }
            Retry::Blocked { offset, .. } => {
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset,
                    error.type = error_type,
                    error = %error,
                    retry_in = ?delay,
                    "partition still stopped: the blocking record failed again"
                );
                Outcome::Blocked
            }
        };
        self.state.metrics.retry();
        span.end(outcome);
    }

    /// A record given up after its last attempt (the skip policy): logged
    /// as an error, unblocked, counted skipped, its offset completed (the
    /// group commits past it), the span ended `skipped`.
    pub(super) fn given_up(
        &self,
        offset: i64,
        attempts: u32,
        error_type: &'static str,
        error: &BoxError,
        blocked: &mut BlockGuard<'_, H>,
        span: AttemptSpan<'_>,
    ) -> Done {
        tracing::error!(
            topic = %self.state.topic,
            partition = self.state.partition,
            offset,
            attempts,
            error.type = error_type,
            error = %error,
            "record given up after its last attempt and committed past (skip policy): it is lost to this consumer group"
        );
        blocked.unblock(offset);
        self.state.metrics.skipped();
        self.engine.counters.skipped.fetch_add(1, Ordering::Relaxed);
        self.complete(offset);
        span.end(Outcome::Skipped);
        Done::Completed { succeeded_at: None }
    }

    /// A record written out (its retry tier, dead-letter or stale-record
    /// topic) and acknowledged by the broker: the write counted, the
    /// partition unblocked, the move logged (a stale run is logged by
    /// `stale.rs`) and counted, its offset completed. [`Done::Late`] when
    /// the partition was revoked meanwhile (its new owner handles the
    /// record again: at-least-once).
    pub(super) fn parked(
        &self,
        record: &Record,
        out: &Outgoing<'_>,
        blocked: &mut BlockGuard<'_, H>,
    ) -> Done {
        let Outgoing {
            origin,
            failure,
            ref topic,
            to,
        } = *out;
        match to {
            To::Tier { tier, .. } => self.state.metrics.retry_tier_written(tier, None),
            To::DeadLetter => self.state.metrics.dead_lettered(None),
            To::Stale => self.state.metrics.stale(None),
        }
        blocked.unblock(record.offset());
        if self.state.revoked.load(Ordering::Acquire) {
            // Written, but the partition moved on: its new owner will
            // handle the record again (at-least-once).
            self.late(1);
            return Done::Late;
        }
        let moved = match to {
            To::Tier { tier, delay } => {
                tracing::info!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset = record.offset(),
                    attempts = failure.attempts,
                    error.type = failure.error_type,
                    retry_topic = %topic,
                    tier,
                    retry_in = ?delay,
                    "record moved to a retry tier; its partition moves on"
                );
                &self.engine.counters.retried
            }
            To::DeadLetter => {
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset = record.offset(),
                    attempts = failure.attempts,
                    error.type = failure.error_type,
                    dead_letter_topic = %topic,
                    retried = !origin.history.is_empty(),
                    "record dead-lettered after its last attempt"
                );
                &self.engine.counters.dead_lettered
            }
            // Logged once per run of stale records (`stale.rs`).
            To::Stale => &self.engine.counters.stale,
        };
        moved.fetch_add(1, Ordering::Relaxed);
        self.complete(record.offset());
        Done::Completed { succeeded_at: None }
    }

    /// A write out (see [`Self::parked`]) failed: counted with the error's
    /// name (the caller blocks the partition and retries it).
    pub(super) fn park_write_failed(&self, to: To, e: &rdkafka::error::KafkaError) {
        let name = crate::metrics::instruments::kafka_error_name_of(e);
        match to {
            To::Tier { tier, .. } => self.state.metrics.retry_tier_written(tier, Some(name)),
            To::DeadLetter => self.state.metrics.dead_lettered(Some(name)),
            To::Stale => self.state.metrics.stale(Some(name)),
        }
    }

    /// The worker stops with `n` records it took that were neither
    /// handled nor parked (revoked, shutting down, rewound): counted as
    /// unassigned, the next owner gets them.
    pub(super) fn unhandled(&self, n: usize) {
        if n > 0 {
            self.engine.counters.unassigned(n as u64);
        }
    }

    /// A record's (or a batch's) attempt ends with the worker stopping
    /// (revoked or shutting down): the span ended `stopped`, `unhandled`
    /// records counted ([`Self::unhandled`]).
    pub(super) fn stopped(&self, span: AttemptSpan<'_>, unhandled: usize) -> Done {
        span.end(Outcome::Stopped);
        self.unhandled(unhandled);
        Done::Stopped
    }

    /// A stale record shed without a write (`OnStale::Skip`): counted
    /// stale, its offset completed.
    pub(super) fn shed_skipped(&self, offset: i64) -> Done {
        self.state.metrics.stale(None);
        self.engine.counters.stale.fetch_add(1, Ordering::Relaxed);
        self.complete(offset);
        Done::Completed { succeeded_at: None }
    }
}

/// Whether a failed attempt's error is [`permanent`](crate::permanent),
/// and its `error.type`: `permanent`, else the attempt's kind.
pub(super) fn classify(kind: AttemptError, error: &BoxError) -> (bool, &'static str) {
    if is_permanent(error) {
        (true, "permanent")
    } else {
        (false, kind.as_str())
    }
}
