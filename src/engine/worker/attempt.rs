//! One record's way through the handler: its attempts (with the handler
//! timeout, a panic caught as a failure, retries in place), its process
//! span, and the decision of the exhausted-record policy when its attempts
//! run out.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use futures_util::FutureExt;

use crate::failure::Decision;
use crate::failure::dead_letter::{FailureInfo, Origin};
use crate::failure::is_permanent;
use crate::handler::{BoxError, Handler};
use crate::metrics::instruments::AttemptError;
use crate::record::{EventTime, Record};
use crate::trace::{Outcome, RecordTrace};

use super::park::{BlockGuard, To, due_ms};
use super::task::{Done, Worker};

enum Attempt {
    Succeeded,
    Failed(AttemptError, BoxError),
}

impl<H: Handler> Worker<H> {
    /// Runs the handler on `record` until it succeeds or is parked (dead
    /// letter) or given up (skip), or the worker must stop (revoked or
    /// shutting down) with the record neither. `start` is the clock reading
    /// to start the first attempt at (the caller's, when it has one).
    pub(super) async fn handle_until_done(&self, record: Record, start: Option<Instant>) -> Done {
        let done = self.attempt_until_done(record, start).await;
        if matches!(done, Done::Stopped) {
            self.engine.counters.unassigned(1);
        }
        done
    }

    pub(super) async fn attempt_until_done(
        &self,
        record: Record,
        mut start: Option<Instant>,
    ) -> Done {
        let offset = record.offset();
        let exhausted = &self.engine.exhausted;
        let tier = exhausted.tier_of(record.topic());
        // A record read from a retry tier: where it came from (its original
        // event time among it), and not before its due time.
        let origin = tier.map(|_| Origin::of_tier_record(&record));
        let event_time = match &origin {
            Some(o) if self.engine.settings.event_time_header.is_none() => {
                EventTime::Record(o.timestamp)
            }
            _ => self.event_time(&record),
        };
        if let Some(t) = tier {
            let delay = exhausted
                .retry_topics()
                .and_then(|rt| rt.delay(t.tier))
                .unwrap_or_default();
            if !self.wait_until_due(due_ms(&record, delay)).await {
                return Done::Stopped;
            }
            // The wait is not part of the first attempt.
            start = None;
        }
        let retry = &self.engine.settings.retry;
        let max_attempts = exhausted
            .attempts_in_place(record.topic())
            .unwrap_or(retry.max_attempts);
        let mut attempt: u32 = 0;
        let mut first_failure: Option<SystemTime> = None;
        let mut blocked = BlockGuard {
            worker: self,
            blocked: false,
        };
        let trace = RecordTrace::new(self.state.trace.as_ref(), &record);
        loop {
            attempt += 1;
            let started = start.take().unwrap_or_else(Instant::now);
            let span = trace.attempt(&record, attempt);
            let outcome = {
                // `handle` is called inside the async block, so a handler that
                // panics before returning its future (a closure doing its work
                // synchronously) is caught like one that panics while polled.
                let run = span.instrument(
                    AssertUnwindSafe(async { self.handler.handle(record.clone()).await })
                        .catch_unwind(),
                );
                match self.engine.settings.handler_timeout {
                    None => classify::<H>(run.await),
                    Some(limit) => match tokio::time::timeout(limit, run).await {
                        Ok(result) => classify::<H>(result),
                        Err(_) => Attempt::Failed(
                            AttemptError::Timeout,
                            format!("handler did not finish within {limit:?}").into(),
                        ),
                    },
                }
            };
            let ended = Instant::now();
            let took = ended.saturating_duration_since(started);
            let (kind, error) = match outcome {
                Attempt::Succeeded => {
                    blocked.unblock();
                    if self.state.revoked.load(Ordering::Acquire) {
                        // The partition moved on while the handler ran: the
                        // record will be redelivered to its new owner.
                        self.state.metrics.attempt(took, None);
                        self.engine.counters.late_completion();
                        span.end(Outcome::Stopped);
                        return Done::Late;
                    }
                    self.state.metrics.handler_succeeded(
                        &self.engine.wall_clock,
                        event_time,
                        took,
                        ended,
                    );
                    self.state.health.succeeded(ended);
                    self.state.completed(offset, &self.engine.committer.queue);
                    // Counted in the shared counters in bulk (`flush_counts`):
                    // atomics shared by every worker are costly per record.
                    self.unflushed.fetch_add(1, Ordering::Relaxed);
                    span.end(Outcome::Succeeded);
                    return Done::Completed {
                        succeeded_at: Some(ended),
                    };
                }
                Attempt::Failed(kind, error) => (kind, error),
            };
            let permanent = is_permanent(&error);
            let error_type = if permanent {
                "permanent"
            } else {
                kind.as_str()
            };
            span.failed(error_type, || error_chain(&*error));
            // The storm guard compares failures with successes: count the
            // successes so far first.
            self.flush_counts();
            self.state.metrics.attempt(took, Some(kind));
            self.engine.counters.failed_attempt();
            let now = SystemTime::now();
            if first_failure.is_none() {
                first_failure = Some(now);
                self.engine.counters.record_failed();
            }
            if self.state.revoked.load(Ordering::Acquire) || self.state.stop.is_cancelled() {
                span.end(Outcome::Stopped);
                return Done::Stopped;
            }
            if !permanent && attempt < max_attempts {
                let delay = retry.delay(attempt);
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
                self.state.metrics.retry();
                span.end(Outcome::Retried);
                if !self.sleep(delay).await {
                    return Done::Stopped;
                }
                continue;
            }
            // Attempts ran out (or the error is permanent): the policy decides.
            let failure = FailureInfo {
                attempts: attempt,
                error_type,
                error_message: error_chain(&*error),
                first_failure: first_failure.unwrap_or(now),
                last_failure: now,
            };
            match exhausted.decide(self.engine.counters.outcomes(), record.topic(), permanent) {
                Decision::Skip => {
                    tracing::error!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset,
                        attempts = attempt,
                        error.type = error_type,
                        error = %error,
                        "record given up after its last attempt and committed past (skip policy): it is lost to this consumer group"
                    );
                    blocked.unblock();
                    self.state.metrics.skipped();
                    self.engine.counters.skipped.fetch_add(1, Ordering::Relaxed);
                    self.complete(offset);
                    span.end(Outcome::Skipped);
                    return Done::Completed { succeeded_at: None };
                }
                Decision::DeadLetter(writer) => {
                    let topic = writer.topic_for(exhausted.source_of(record.topic()));
                    return self
                        .write_failed(
                            writer,
                            &record,
                            &origin,
                            &failure,
                            topic,
                            To::DeadLetter,
                            span,
                            &mut blocked,
                        )
                        .await;
                }
                Decision::RetryTier {
                    writer,
                    tier,
                    delay,
                } => {
                    let topic = exhausted
                        .retry_topics()
                        .map(|rt| rt.tier_topic(exhausted.source_of(record.topic()), tier))
                        .unwrap_or_default();
                    let to = To::Tier { tier, delay };
                    return self
                        .write_failed(
                            writer,
                            &record,
                            &origin,
                            &failure,
                            topic,
                            to,
                            span,
                            &mut blocked,
                        )
                        .await;
                }
                Decision::Block { storm } => {
                    blocked.block();
                    let delay = retry.max_backoff;
                    tracing::error!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset,
                        attempts = attempt,
                        error.type = error_type,
                        error = %error,
                        storm_guard = storm,
                        retry_in = ?delay,
                        "partition blocked at a record whose attempts ran out; retrying at the capped backoff"
                    );
                    self.state.metrics.retry();
                    span.end(Outcome::Blocked);
                    if !self.sleep(delay).await {
                        return Done::Stopped;
                    }
                }
            }
        }
    }
}

fn classify<H: Handler>(
    result: Result<Result<(), H::Error>, Box<dyn std::any::Any + Send>>,
) -> Attempt {
    match result {
        Ok(Ok(())) => Attempt::Succeeded,
        Ok(Err(e)) => Attempt::Failed(AttemptError::Handler, e.into()),
        Err(panic) => Attempt::Failed(AttemptError::Panic, panic_message(panic).into()),
    }
}

/// The error's message followed by its sources, `: `-separated.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    format!("handler panicked: {msg}")
}
