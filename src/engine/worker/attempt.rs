//! One record's way through the handler: its attempts (with the handler
//! timeout, a panic caught as a failure, retries in place), its process
//! span, and the decision of the exhausted-record policy when its attempts
//! run out.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use futures_util::FutureExt;

use crate::error::error_chain;
use crate::failure::Decision;
use crate::failure::dead_letter::FailureInfo;
use crate::handler::{BoxError, Handler};
use crate::metrics::instruments::AttemptError;
use crate::record::{EventTime, Record};
use crate::trace::{AttemptSpan, Outcome, RecordTrace};

use crate::engine::commit::CommitCmd;
use crate::engine::transaction::{Doom, Inside, Transactions};

use super::outcome::{Retry, Succeeded};
use super::park::{BlockGuard, To};
use super::task::{Done, Worker};

/// What one handler attempt gave.
pub(super) enum Attempt {
    Succeeded,
    Failed(AttemptError, BoxError),
}

/// A failed attempt made before [`Worker::attempt_until_done`] took the
/// record over: the batch call that named the record as the first that
/// failed, or [`Worker::handle_plain`]'s first attempt. It counts as the
/// record's first attempt (its duration recorded by whoever made it).
pub(super) struct PriorFailure {
    pub(super) kind: AttemptError,
    pub(super) error: BoxError,
}

impl<H: Handler> Worker<H> {
    /// Runs one handler call (`call`, a record's or a batch's) inside
    /// `span`, with the handler timeout: the call's own result, or the
    /// failure of a call that panicked or timed out.
    pub(super) async fn guarded<F, T>(
        &self,
        span: &AttemptSpan<'_>,
        call: impl FnOnce() -> F,
    ) -> Result<T, (AttemptError, BoxError)>
    where
        F: Future<Output = T>,
    {
        // `call` is called inside the async block, so a handler that
        // panics before returning its future (a closure doing its work
        // synchronously) is caught like one that panics while polled.
        let run = span.instrument(AssertUnwindSafe(async { call().await }).catch_unwind());
        let panicked = |panic| (AttemptError::Panic, panic_message(panic).into());
        match self.engine.settings.handler_timeout {
            None => run.await.map_err(panicked),
            Some(limit) => match tokio::time::timeout(limit, run).await {
                Ok(result) => result.map_err(panicked),
                Err(_) => Err((
                    AttemptError::Timeout,
                    format!("handler did not finish within {limit:?}").into(),
                )),
            },
        }
    }

    /// Enters the transaction gate for a handler call. `Err` with
    /// [`Done::Rewind`] when the partition must rewind first (a
    /// transaction it wrote into was aborted), [`Done::Stopped`] when the
    /// worker must stop. While the open transaction is doomed and this
    /// partition wrote into it, waits for the committer's abort (a call
    /// now would only write more outputs into a transaction that cannot
    /// commit): the committer aborts it at its cycle's end, with the gate
    /// closed, and the gate's opening wakes the call.
    async fn enter_transaction<'t>(&self, tx: &'t Transactions) -> Result<Inside<'t>, Done> {
        let must_wait = || {
            !self.state.rewind.load(Ordering::Acquire)
                && tx.is_doomed()
                && self.state.in_transaction.load(Ordering::Acquire)
        };
        loop {
            let inside = tx.gate.enter().await;
            if self.state.rewind.load(Ordering::Acquire) {
                return Err(Done::Rewind);
            }
            if !must_wait() {
                return Ok(inside);
            }
            drop(inside);
            // Registered only now (a call that need not wait takes no
            // waiter slot), then the doom is read again: an abort between
            // the first look and the registration is seen here, and one
            // after it wakes the wait.
            let opened = tx.gate.next_opening();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if !must_wait() {
                continue;
            }
            tokio::select! {
                biased;
                _ = self.state.stop.cancelled() => return Err(Done::Stopped),
                () = &mut opened => {}
            }
        }
    }

    /// Runs the handler on `record` until it succeeds or is parked (dead
    /// letter) or given up (skip), or the worker must stop (revoked or
    /// shutting down) with the record neither. `start` is the clock reading
    /// to start the first attempt at (the caller's, when it has one).
    /// While the application paused the partition (`ControlHandle`), the
    /// record waits here first.
    pub(super) async fn handle_until_done(
        &self,
        record: Record,
        mut start: Option<Instant>,
    ) -> Done {
        if self.may_wait_for_turn() && !self.wait_for_turn(&mut start).await {
            return Done::Stopped;
        }
        self.attempt_counted(record, start, None).await
    }

    /// Whether a record may have to wait for its turn (the application
    /// paused some partition, or set a rate limit): two atomic loads, so a
    /// record that need not wait awaits no future for it (an extra await
    /// per record read 3-4 % more CPU per record in two paired sittings of
    /// the peers workload).
    fn may_wait_for_turn(&self) -> bool {
        let controls = &self.state.controls;
        controls.is_limited() || controls.is_paused(&self.state.topic, self.state.partition)
    }

    /// Waits for a record's turn: while the application paused the
    /// partition (`ControlHandle`), then under its rate limit. A wait is
    /// not part of the first attempt (`start` is cleared). `false` when the
    /// partition stopped meanwhile (the record is counted as unassigned).
    async fn wait_for_turn(&self, start: &mut Option<Instant>) -> bool {
        if self
            .state
            .controls
            .is_paused(&self.state.topic, self.state.partition)
        {
            if !self.wait_while_paused().await {
                self.unhandled(1);
                return false;
            }
            *start = None;
        }
        if !self.take_turn(1, start).await {
            self.unhandled(1);
            return false;
        }
        true
    }

    /// [`Self::attempt_until_done`] for a record the worker took on its
    /// own (not a batch's): a stopped record is counted as unassigned.
    async fn attempt_counted(
        &self,
        record: Record,
        start: Option<Instant>,
        prior: Option<PriorFailure>,
    ) -> Done {
        let done = self.attempt_until_done(record, start, prior, true).await;
        if matches!(done, Done::Stopped) {
            self.unhandled(1);
        }
        done
    }

    /// [`Self::handle_until_done`] for a partition whose records need none
    /// of the per-record machinery (`Worker::plain`: no traces, outputs,
    /// transactions, handler timeout, origin-time ages, retry tier or stale
    /// policy): the first attempt runs here, without the attempt loop's
    /// setup (a span, the due time, the stale check, the transaction gate,
    /// the output handle), so a record that succeeds at once costs what its
    /// bookkeeping costs (issue 28: 0.08 us of CPU per record less on the
    /// peers workload). Its outcome is the same as through
    /// [`Self::attempt_until_done`]: a panic is caught as a failure, and a
    /// failed attempt (its duration recorded here) goes on there as the
    /// record's first attempt ([`PriorFailure`]), with the retry policy
    /// and the exhausted-record decision.
    pub(super) async fn handle_plain(&self, record: Record, start: Instant) -> Done {
        let mut start = Some(start);
        if self.may_wait_for_turn() && !self.wait_for_turn(&mut start).await {
            return Done::Stopped;
        }
        let started = start.unwrap_or_else(Instant::now);
        let event_time = EventTime::of(self.engine.settings.event_time_header.as_deref(), &record);
        let offset = record.offset();
        // Into a `BoxError` (which is `Send`) at once: the handler's own
        // error type is not held across the awaits below. The handler is
        // called inside the async block, so one that panics before
        // returning its future is caught too (as in `guarded`).
        let result: Result<(), (AttemptError, BoxError)> =
            match AssertUnwindSafe(async { self.handler.handle(record.clone()).await })
                .catch_unwind()
                .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err((AttemptError::Handler, e.into())),
                Err(panic) => Err((AttemptError::Panic, panic_message(panic).into())),
            };
        let ended = Instant::now();
        let took = ended.saturating_duration_since(started);
        let (kind, error) = match result {
            Ok(()) => {
                let s = Succeeded {
                    offset,
                    age: event_time,
                    malformed: false,
                    took,
                    ended,
                    in_transaction: false,
                };
                return self.succeeded(s, AttemptSpan::none());
            }
            Err(failed) => failed,
        };
        self.state.metrics.attempt(took, Some(kind));
        let prior = PriorFailure { kind, error };
        self.attempt_counted(record, None, Some(prior)).await
    }

    /// [`Self::handle_until_done`] without counting a stopped record;
    /// `prior` is the record's first attempt when it was made already (in
    /// a batch, which also waited for a retry-tier record's due time).
    /// `shed_stale`: a stale record is shed instead of handled (not for a
    /// record a batch handler saw already).
    pub(super) async fn attempt_until_done(
        &self,
        record: Record,
        mut start: Option<Instant>,
        mut prior: Option<PriorFailure>,
        shed_stale: bool,
    ) -> Done {
        let offset = record.offset();
        let exhausted = &self.engine.exhausted;
        let (origin, event_time) = self.origin_and_event_time(&record);
        let times = self.times(&record, event_time);
        if prior.is_none() && !self.wait_until_due(&record).await {
            return Done::Stopped;
        }
        if shed_stale && let Some(age) = self.stale_age(&record, event_time) {
            return self.shed(&record, &origin, age).await;
        }
        if origin.is_some() {
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
            // Transactional outputs: inside the transaction gate from
            // before the call until the record is completed (or its
            // failure has doomed the transaction).
            let mut inside = match (&self.engine.transactions, &prior) {
                (Some(tx), None) => match self.enter_transaction(tx).await {
                    Ok(inside) => Some(inside),
                    Err(done) => return done,
                },
                _ => None,
            };
            let started = start.take().unwrap_or_else(Instant::now);
            let span = trace.attempt(&record, attempt);
            // The batch call that failed at this record recorded its own
            // duration.
            let (outcome, recorded, sent, refused) = match prior.take() {
                Some(p) => (Attempt::Failed(p.kind, p.error), false, 0, false),
                None => {
                    if self.engine.settings.batch.is_some() {
                        // A batch handler's record on its own: a batch of one.
                        self.state.metrics.batch_handled(1);
                    }
                    let (outcome, sent, refused) =
                        self.call_handler(&span, &record, times.origin_ms).await;
                    (outcome, true, sent, refused)
                }
            };
            if refused && let Some(tx) = &self.engine.transactions {
                // The open transaction failed under the call (librdkafka
                // refused an output): whatever the handler made of that,
                // the call says nothing about the record, and is not one
                // of its attempts. The transaction is aborted and this
                // partition, now one of its members, rewound: the next
                // turn waits for the abort (`enter_transaction`) and the
                // record comes again from the last committed offset.
                tx.joined(&self.state, started);
                tx.doom(Doom::TransactionFailed);
                let _ = self.engine.committer.send(CommitCmd::Now);
                drop(inside);
                span.failed("transaction_failed", || {
                    "the open transaction failed: aborted, the partition rewound".to_owned()
                });
                span.end(Outcome::Stopped);
                attempt -= 1;
                continue;
            }
            if sent > 0
                && let Some(tx) = &self.engine.transactions
            {
                tx.joined(&self.state, started);
                if !matches!(outcome, Attempt::Succeeded) {
                    // Its outputs are in the transaction: it must not
                    // commit. The committer aborts it now.
                    tx.doom(Doom::HandlerFailed);
                    let _ = self.engine.committer.send(CommitCmd::Now);
                }
            }
            let ended = Instant::now();
            let took = ended.saturating_duration_since(started);
            let (kind, error) = match outcome {
                Attempt::Succeeded => {
                    blocked.unblock(offset);
                    let s = Succeeded {
                        offset,
                        age: times.age,
                        malformed: times.malformed,
                        took,
                        ended,
                        in_transaction: inside.is_some(),
                    };
                    // Left after the record is completed.
                    let done = self.succeeded(s, span);
                    drop(inside);
                    return done;
                }
                Attempt::Failed(kind, error) => (kind, error),
            };
            inside.take();
            let (permanent, error_type) =
                self.attempt_failed(kind, &error, recorded.then_some(took), &span);
            let now = SystemTime::now();
            if first_failure.is_none() {
                first_failure = Some(now);
                self.engine.counters.record_failed();
            }
            if self.state.revoked.load(Ordering::Acquire) || self.state.stop.is_cancelled() {
                return self.stopped(span, 0);
            }
            if !permanent && attempt < max_attempts {
                let delay = retry.delay(attempt);
                let step = Retry::Record { offset, attempt };
                self.retrying(step, delay, error_type, &error, span);
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
            let (writer, topic, to) = match exhausted.decide(
                self.engine.counters.outcomes(),
                record.topic(),
                permanent,
            ) {
                Decision::Skip => {
                    return self.given_up(offset, attempt, error_type, &error, &mut blocked, span);
                }
                Decision::DeadLetter(writer) => {
                    let topic = writer.topic_for(exhausted.source_of(record.topic()));
                    (writer, topic, To::DeadLetter)
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
                    (writer, topic, To::Tier { tier, delay })
                }
                Decision::Block { storm } => {
                    let delay = retry.max_backoff;
                    let step = Retry::Blocked {
                        offset,
                        attempts: attempt,
                        storm,
                        first: blocked.block(offset, attempt, &failure.error_message),
                        message: &failure.error_message,
                    };
                    self.retrying(step, delay, error_type, &error, span);
                    if !self.sleep(delay).await {
                        return Done::Stopped;
                    }
                    continue;
                }
            };
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
    }
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    format!("handler panicked: {msg}")
}
