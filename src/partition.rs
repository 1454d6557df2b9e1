//! One assigned partition: its shared state and the worker task that runs the
//! handler over its records in offset order.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::dead_letter::{DeadLetterWriter, FailureInfo};
use crate::failure::is_permanent;
use crate::handler::{BoxError, Handler};
use crate::instruments::{AttemptError, EventTime, PartitionInstruments, parse_event_time_header};
use crate::record::Record;
use crate::shared::{Ctrl, Decision, Shared};
use crate::tracker::OffsetTracker;

/// "No offset known yet" for [`PartitionState::committed`].
pub(crate) const NO_OFFSET: i64 = -1;

/// State of one assigned partition, shared by the poll loop (dispatch), the
/// worker (completions), the committer (commit) and the rebalance callback.
pub(crate) struct PartitionState {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    /// Delivered and completed offsets.
    pub(crate) tracker: Mutex<OffsetTracker>,
    /// The last offset this member committed for the partition (the next
    /// offset to read), or [`NO_OFFSET`].
    pub(crate) committed: AtomicI64,
    /// Set once the partition is revoked, lost or closed: nothing is committed
    /// for it any more, and a late completion is dropped.
    pub(crate) revoked: AtomicBool,
    /// Cancelled to stop the worker: it finishes the handler call that is
    /// running, abandons a retry backoff, and takes no more records.
    pub(crate) stop: CancellationToken,
    /// The worker's input: records in offset order.
    pub(crate) tx: mpsc::Sender<Record>,
    /// Set by the poll loop when it paused the partition; the worker asks for
    /// a resume once the buffer has drained to half.
    pub(crate) wants_resume: AtomicBool,
    /// The worker task's end, for waiting from synchronous code.
    pub(crate) done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// Milliseconds since the Unix epoch when the partition became blocked
    /// by a record whose attempts ran out and that is neither handled nor
    /// parked yet (block policy, or a dead-letter write that keeps failing);
    /// 0 when not blocked.
    pub(crate) blocked_since: AtomicU64,
    pub(crate) metrics: PartitionInstruments,
    /// Partition-health state: statistics, offset anomalies, last success.
    pub(crate) health: crate::health::PartitionHealth,
}

impl PartitionState {
    /// Creates the state and spawns the worker on the runtime.
    pub(crate) fn spawn<H: Handler>(
        shared: &Arc<Shared>,
        handler: &Arc<H>,
        topic: &str,
        partition: i32,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(shared.max_buffered_records);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let state = Arc::new(PartitionState {
            topic: Arc::from(topic),
            partition,
            tracker: Mutex::new(OffsetTracker::default()),
            committed: AtomicI64::new(NO_OFFSET),
            revoked: AtomicBool::new(false),
            stop: shared.shutdown.child_token(),
            tx,
            wants_resume: AtomicBool::new(false),
            done: Mutex::new(Some(done_rx)),
            blocked_since: AtomicU64::new(0),
            metrics: shared.instruments.partition(
                topic,
                partition,
                shared
                    .dead_letter
                    .as_ref()
                    .map(|d| d.topic_for(topic))
                    .as_deref(),
            ),
            health: crate::health::PartitionHealth::new(&shared.health),
        });
        let worker = Worker {
            state: Arc::clone(&state),
            shared: Arc::clone(shared),
            handler: Arc::clone(handler),
            rx,
            _done: done_tx,
        };
        shared.runtime.spawn(worker.run());
        state
    }

    /// Waits, blocking the thread, until the worker has ended or `deadline`
    /// passed. Returns `true` when it ended.
    pub(crate) fn wait_stopped_blocking(&self, deadline: Instant) -> bool {
        let rx = self.done.lock().unwrap_or_else(|e| e.into_inner());
        match rx.as_ref() {
            None => true,
            Some(rx) => matches!(
                rx.recv_timeout(deadline.saturating_duration_since(Instant::now())),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
            ),
        }
    }

    /// The offset to commit if it is ahead of the last commit.
    pub(crate) fn pending_commit(&self) -> Option<i64> {
        if self.revoked.load(Ordering::Acquire) {
            return None;
        }
        let c = self
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .committable()?;
        (c > self.committed.load(Ordering::Acquire)).then_some(c)
    }
}

struct Worker<H> {
    state: Arc<PartitionState>,
    shared: Arc<Shared>,
    handler: Arc<H>,
    rx: mpsc::Receiver<Record>,
    /// Dropped when the worker ends.
    _done: std::sync::mpsc::Sender<()>,
}

enum Attempt {
    Succeeded,
    Failed(AttemptError, BoxError),
}

impl<H: Handler> Worker<H> {
    async fn run(mut self) {
        let mut batch_start: Option<Instant> = None;
        loop {
            let record = if let Ok(r) = self.rx.try_recv() {
                r
            } else {
                // The buffer is empty: the batch ends here.
                if let Some(start) = batch_start.take() {
                    self.state.metrics.batch(start.elapsed());
                }
                tokio::select! {
                    biased;
                    _ = self.state.stop.cancelled() => break,
                    r = self.rx.recv() => match r {
                        Some(r) => r,
                        None => break,
                    },
                }
            };
            if self.state.stop.is_cancelled() {
                break;
            }
            // Pairs with the fence in the poll loop's `request_resume`.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.state.wants_resume.load(Ordering::Acquire)
                && self.rx.len() <= self.shared.max_buffered_records / 2
                && self.state.wants_resume.swap(false, Ordering::AcqRel)
            {
                let _ = self
                    .shared
                    .ctrl_tx
                    .send(Ctrl::Drained(Arc::clone(&self.state)));
            }
            batch_start.get_or_insert_with(Instant::now);
            if !self.handle_until_done(record).await {
                break;
            }
        }
        if let Some(start) = batch_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
        self.unblock();
    }

    /// Runs the handler on `record` until it succeeds or is parked (dead
    /// letter) or given up (skip). Returns `false` when the worker must stop
    /// (revoked or shutting down) with the record neither.
    async fn handle_until_done(&self, record: Record) -> bool {
        let offset = record.offset();
        let event_time = self.event_time(&record);
        let retry = &self.shared.retry;
        let mut attempt: u32 = 0;
        let mut first_failure: Option<SystemTime> = None;
        loop {
            attempt += 1;
            let started = Instant::now();
            let outcome = {
                // `handle` is called inside the async block, so a handler that
                // panics before returning its future (a closure doing its work
                // synchronously) is caught like one that panics while polled.
                let run = AssertUnwindSafe(async { self.handler.handle(record.clone()).await })
                    .catch_unwind();
                match self.shared.handler_timeout {
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
            let took = started.elapsed();
            let (kind, error) = match outcome {
                Attempt::Succeeded => {
                    self.state.metrics.attempt(took, None);
                    self.unblock();
                    if self.state.revoked.load(Ordering::Acquire) {
                        // The partition moved on while the handler ran: the
                        // record will be redelivered to its new owner.
                        self.shared.counters.late_completion();
                        return false;
                    }
                    self.state.metrics.succeeded(event_time, SystemTime::now());
                    self.state.health.succeeded();
                    self.complete(offset);
                    self.shared.counters.succeeded();
                    return true;
                }
                Attempt::Failed(kind, error) => (kind, error),
            };
            self.state.metrics.attempt(took, Some(kind));
            self.shared.counters.failed_attempt();
            let now = SystemTime::now();
            if first_failure.is_none() {
                first_failure = Some(now);
                self.shared.counters.record_failed();
            }
            if self.state.revoked.load(Ordering::Acquire) || self.state.stop.is_cancelled() {
                return false;
            }
            let permanent = is_permanent(&error);
            let error_type = if permanent {
                "permanent"
            } else {
                kind.as_str()
            };
            if !permanent && attempt < retry.max_attempts {
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
                if !self.sleep(delay).await {
                    return false;
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
            match self.shared.decide() {
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
                    self.unblock();
                    self.state.metrics.skipped();
                    self.complete(offset);
                    return true;
                }
                Decision::DeadLetter(writer) => {
                    return self.park(writer, &record, failure).await;
                }
                Decision::Block { storm } => {
                    self.block();
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
                    if !self.sleep(delay).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Writes `record` to its dead-letter topic, retrying the write at the
    /// capped backoff until the broker acknowledges it; only then is the
    /// record's offset committable. The partition counts as blocked while a
    /// write fails.
    async fn park(&self, writer: &DeadLetterWriter, record: &Record, failure: FailureInfo) -> bool {
        let topic = writer.topic_for(record.topic());
        let mut write_attempt: u32 = 0;
        loop {
            write_attempt += 1;
            let sent = tokio::select! {
                biased;
                _ = self.state.stop.cancelled() => return false,
                r = writer.park(record, &topic, &failure) => r,
            };
            match sent {
                Ok(()) => {
                    self.state.metrics.dead_lettered(None);
                    self.unblock();
                    if self.state.revoked.load(Ordering::Acquire) {
                        // Parked, but the partition moved on: its new owner
                        // will handle the record again (at-least-once).
                        self.shared.counters.late_completion();
                        return false;
                    }
                    tracing::warn!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset = record.offset(),
                        attempts = failure.attempts,
                        error.type = failure.error_type,
                        dead_letter_topic = %topic,
                        "record dead-lettered after its last attempt"
                    );
                    self.complete(record.offset());
                    return true;
                }
                Err(e) => {
                    self.state
                        .metrics
                        .dead_lettered(Some(crate::instruments::kafka_error_name_of(&e)));
                    self.block();
                    let delay = self.shared.retry.delay(write_attempt);
                    tracing::error!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset = record.offset(),
                        dead_letter_topic = %topic,
                        error = %e,
                        retry_in = ?delay,
                        "writing to the dead-letter topic failed; the record stays uncommitted and the write is retried"
                    );
                    if !self.sleep(delay).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Marks `offset` completed: succeeded, parked or given up.
    fn complete(&self, offset: i64) {
        self.state
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .completed(offset);
        self.shared.record_completed();
    }

    fn block(&self) {
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(1)
            .max(1);
        if self
            .state
            .blocked_since
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.state.metrics.blocked(true);
        }
    }

    fn unblock(&self) {
        if self.state.blocked_since.swap(0, Ordering::AcqRel) != 0 {
            self.state.metrics.blocked(false);
        }
    }

    /// Sleeps unless the partition is stopped first. Returns `false` when
    /// stopped.
    async fn sleep(&self, delay: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.state.stop.cancelled() => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }

    fn event_time(&self, record: &Record) -> EventTime {
        match &self.shared.event_time_header {
            None => EventTime::Record(record.timestamp()),
            Some(name) => match record
                .header(name)
                .flatten()
                .and_then(parse_event_time_header)
            {
                Some(ms) => EventTime::Header(ms),
                None => EventTime::Missing,
            },
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

/// Exponential backoff: `initial * 2^(attempt-1)`, capped at `max`.
pub(crate) fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_and_caps() {
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        assert_eq!(backoff(i, m, 1), Duration::from_millis(100));
        assert_eq!(backoff(i, m, 2), Duration::from_millis(200));
        assert_eq!(backoff(i, m, 4), Duration::from_millis(800));
        assert_eq!(backoff(i, m, 5), m);
        assert_eq!(backoff(i, m, 200), m);
    }
}
