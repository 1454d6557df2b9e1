//! One assigned partition: its shared state and the worker task that runs the
//! handler over its records in offset order.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::handler::{BoxError, Handler};
use crate::instruments::{AttemptError, EventTime, PartitionInstruments, parse_event_time_header};
use crate::record::Record;
use crate::shared::{Ctrl, Shared};
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
    pub(crate) metrics: PartitionInstruments,
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
            metrics: shared.instruments.partition(topic, partition),
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
    }

    /// Runs the handler on `record` until it succeeds. Returns `false` when
    /// the worker must stop (revoked or shutting down).
    async fn handle_until_done(&self, record: Record) -> bool {
        let offset = record.offset();
        let event_time = self.event_time(&record);
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let outcome = {
                let result = AssertUnwindSafe(self.handler.handle(record.clone()))
                    .catch_unwind()
                    .await;
                classify::<H>(result)
            };
            let took = started.elapsed();
            match outcome {
                Attempt::Succeeded => {
                    self.state.metrics.attempt(took, None);
                    if self.state.revoked.load(Ordering::Acquire) {
                        // The partition moved on while the handler ran: the
                        // record will be redelivered to its new owner.
                        self.shared.counters.late_completion();
                        return false;
                    }
                    self.state.metrics.succeeded(event_time, SystemTime::now());
                    self.state
                        .tracker
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .completed(offset);
                    self.shared.counters.succeeded();
                    self.shared.record_completed();
                    return true;
                }
                Attempt::Failed(kind, error) => {
                    self.state.metrics.attempt(took, Some(kind));
                    self.shared.counters.failed_attempt();
                    let backoff = self.shared.backoff(attempt);
                    tracing::warn!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset,
                        attempt,
                        error.type = if kind == AttemptError::Panic { "panic" } else { "handler_error" },
                        error = %error,
                        retry_in = ?backoff,
                        "handler failed; retrying in place, the partition's commit holds at this offset"
                    );
                    if self.state.revoked.load(Ordering::Acquire) {
                        return false;
                    }
                    tokio::select! {
                        biased;
                        _ = self.state.stop.cancelled() => return false,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                }
            }
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
