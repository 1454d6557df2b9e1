//! One assigned partition: its shared state and the worker task that runs the
//! handler over its records: one at a time in offset order
//! ([`ProcessingOrder::Partition`]), or concurrently across keys with each
//! key in offset order ([`ProcessingOrder::Key`]).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rdkafka::consumer::ConsumerContext;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) use crate::engine::queue::QueueHandle;
use crate::engine::queue::READ_BATCH;
use crate::engine::tracker::OffsetTracker;
use crate::engine::{Ctrl, Engine, IDLE_POLL_TICK};
use crate::failure::Decision;
use crate::failure::dead_letter::{self, DeadLetterWriter, Destination, FailureInfo, Origin};
use crate::failure::is_permanent;
use crate::handler::{BoxError, Handler};
use crate::health::partition::PartitionHealth;
use crate::metrics::instruments::{AttemptError, PartitionInstruments, PartitionRetry};
use crate::ordering::{KeyLanes, LaneId, ProcessingOrder};
use crate::record::EventTime;
use crate::record::Record;
use crate::trace::{AttemptSpan, Outcome, PartitionTrace, RecordTrace};

/// A partition's own librdkafka queue (`split_partition_queue`), split
/// before the partition is assigned.
/// Generic over the consumer's context `C` (as rust-rdkafka's queue is), so
/// the worker does not name the engine's concrete context type.
pub(crate) type PartitionQueue<C> = rdkafka::consumer::stream_consumer::StreamPartitionQueue<C>;

/// A worker's seek is tried at most this many times while librdkafka drops
/// it as outdated (a newer operation on the partition, such as a
/// rebalance's pause or resume, was served first).
const SEEK_ATTEMPTS: u32 = 5;

/// A partition's worker, created but not running yet.
pub(crate) struct PendingWorker {
    runtime: tokio::runtime::Handle,
    run: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl PendingWorker {
    /// Spawns the worker on the runtime.
    pub(crate) fn start(self) {
        self.runtime.spawn(self.run);
    }
}

/// A partition's split queue with the second handle on it, for its worker.
pub(crate) struct SplitQueue<C: ConsumerContext + 'static> {
    /// Declared (so dropped) before `queue`: the split queue holds the
    /// consumer, which must outlive the handle.
    pub(crate) handle: Option<QueueHandle>,
    pub(crate) queue: PartitionQueue<C>,
}

/// Where a worker takes its partition's records from.
enum Source<'a, C: ConsumerContext + 'static> {
    /// Handed over by the poll loop (the partition's queue could not be
    /// split).
    Channel(mpsc::Receiver<Record>),
    /// Read from the partition's own librdkafka queue: no hand-over, and
    /// librdkafka's per-partition queue is the buffer.
    Queue(SplitSource<'a, C>),
}

/// The unreadable record batch a worker is passing (see
/// [`Worker::unreadable`]).
#[derive(Debug, Default)]
struct Unreadable {
    /// The first offset of the last batch counted.
    batch: Option<i64>,
    /// The offset the worker last repositioned to past it, if it did.
    target: Option<i64>,
}

/// A partition's own queue, as its worker reads it.
struct SplitSource<'a, C: ConsumerContext + 'static> {
    /// Waits for the queue to fill (librdkafka's queue callback wakes the
    /// task); reads one message at a time when `handle` is `None`.
    stream: rdkafka::consumer::MessageStream<'a, C>,
    /// Reads ready messages in batches, and the queue's length.
    handle: Option<&'a QueueHandle>,
    /// Records read in a batch and not taken yet, in offset order.
    ready: std::collections::VecDeque<Record>,
    /// Whether a record was taken: batches are read only from then on (see
    /// [`QueueHandle::read_batch`]).
    started: bool,
    /// The unreadable record batch being passed (see
    /// [`Worker::unreadable`]), so that librdkafka's repeated reports of
    /// one record count once.
    unreadable: Unreadable,
}

impl<C: ConsumerContext> SplitSource<'_, C> {
    /// The next record read in a batch, if any. Refreshes how many records
    /// wait in the queue: health's position estimate adds them, and a slow
    /// handler can take a while to get through a batch.
    fn take_ready(&mut self, state: &PartitionState) -> Option<Record> {
        let r = self.ready.pop_front()?;
        if let Some(handle) = self.handle {
            state.waiting.store(handle.len(), Ordering::Relaxed);
        }
        Some(r)
    }
}

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
    /// The partition is on the committer's list of partitions with
    /// completions since its last commit (see [`PartitionState::completed`]).
    pub(crate) commit_queued: AtomicBool,
    /// Set once the partition is revoked, lost or closed: nothing is committed
    /// for it any more, and a late completion is dropped.
    pub(crate) revoked: AtomicBool,
    /// Wakes the worker when its queue's wake-up was turned off under it
    /// (`rewire`) and, from then on, when records arrive (see
    /// [`QueueHandle::wake_on_records`]).
    pub(crate) wake: Arc<tokio::sync::Notify>,
    /// Set with a `wake` notification when an earlier worker of this
    /// partition on this member dropped its split queue after this one
    /// split it: rust-rdkafka's drop turned off the queue's wake-up, which
    /// is librdkafka's one queue for the partition.
    pub(crate) rewire: AtomicBool,
    /// Cancelled to stop the worker: it finishes the handler calls that are
    /// running, abandons retry backoffs, drops records waiting behind a busy
    /// key, and takes no more records.
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
    /// Records waiting in the partition's own librdkafka queue (split
    /// queues only), as the worker last saw it: the partition's position is
    /// this far beyond the last record the worker took.
    pub(crate) waiting: AtomicU64,
    /// Partition-health state: statistics, offset anomalies, last success.
    pub(crate) health: PartitionHealth,
    /// Process spans (`None`: tracing off).
    pub(crate) trace: Option<PartitionTrace>,
    /// Records of this retry-tier partition waiting for their due time: the
    /// partition is paused ([`Ctrl::Hold`]) while it is above 0, and health
    /// does not count the wait as a stall.
    pub(crate) held: AtomicUsize,
}

impl PartitionState {
    /// Creates the state and its worker, which runs once
    /// [`PendingWorker::start`] is called: after the state is registered in
    /// [`Shared`], so that the committer sees every record the worker
    /// completes (a worker reading a split queue starts at once).
    pub(crate) fn spawn<H: Handler, C: ConsumerContext + 'static>(
        engine: &Arc<Engine>,
        handler: &Arc<H>,
        topic: &str,
        partition: i32,
        queue: Option<SplitQueue<C>>,
    ) -> (Arc<Self>, PendingWorker) {
        let (tx, rx) = mpsc::channel(engine.settings.max_buffered_records);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let metrics = engine.instruments.partition(
            topic,
            partition,
            engine.exhausted.dead_letter_topic_for(topic).as_deref(),
            engine.exhausted.retry_topics().map(|rt| {
                let source = engine.exhausted.source_of(topic);
                PartitionRetry {
                    source,
                    tier: engine.exhausted.tier_of(topic).map(|t| t.tier),
                    tier_topics: (1..=rt.tiers()).map(|k| rt.tier_topic(source, k)).collect(),
                }
            }),
        );
        let trace =
            (engine.trace.as_ref()).map(|t| t.partition(topic, partition, metrics.attributes()));
        let state = Arc::new(PartitionState {
            topic: Arc::from(topic),
            partition,
            tracker: Mutex::new(OffsetTracker::default()),
            committed: AtomicI64::new(NO_OFFSET),
            commit_queued: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            wake: Arc::new(tokio::sync::Notify::new()),
            rewire: AtomicBool::new(false),
            stop: engine.shutdown.child_token(),
            tx,
            wants_resume: AtomicBool::new(false),
            done: Mutex::new(Some(done_rx)),
            blocked_since: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            metrics,
            health: PartitionHealth::new(engine.health.origin()),
            trace,
            held: AtomicUsize::new(0),
        });
        let worker = Worker {
            state: Arc::clone(&state),
            engine: Arc::clone(engine),
            handler: Arc::clone(handler),
            blocked: AtomicUsize::new(0),
            unflushed: AtomicU64::new(0),
            unflushed_received: AtomicU64::new(0),
            position_doubtful: AtomicBool::new(false),
            _done: done_tx,
        };
        let start = PendingWorker {
            runtime: engine.runtime.clone(),
            run: Box::pin(worker.run(rx, queue)),
        };
        (state, start)
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

    /// Marks `offset` completed in the tracker; when the committable offset
    /// advanced, puts the partition on the committer's list (once until
    /// the committer takes it), so periodic commits visit only partitions
    /// with something new.
    pub(crate) fn completed(self: &Arc<Self>, offset: i64, queue: &CommitQueue) {
        let advanced = self
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .completed(offset);
        if advanced {
            self.queue_commit(queue);
        }
    }

    /// Starts tracking again at `offset` when it is below the next offset
    /// to take (see [`OffsetTracker::restart_at`]): the member's last
    /// commit is forgotten too, so the new log's offsets are committed
    /// (the group's committed offset then moves down to them: health
    /// reports the rewind beside the anomaly that caused it).
    pub(crate) fn restart_tracking_at(&self, offset: i64) {
        let forgot = self
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .restart_at(offset);
        if forgot {
            self.committed.store(NO_OFFSET, Ordering::Release);
            tracing::warn!(
                topic = %self.topic,
                partition = self.partition,
                offset,
                "the partition restarts below the records already taken: the records from offset {offset} on are new and are handled"
            );
        }
    }

    /// Puts the partition on the committer's list, once until the committer
    /// takes it.
    pub(crate) fn queue_commit(self: &Arc<Self>, queue: &CommitQueue) {
        if !self.commit_queued.load(Ordering::Relaxed)
            && !self.commit_queued.swap(true, Ordering::AcqRel)
        {
            queue.push(Arc::clone(self));
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

/// The partitions whose committable offset advanced since the committer
/// last took them: what a periodic commit visits, instead of every
/// assigned partition (at 1,000 idle partitions the walk cost more than
/// everything else the committer does). A partition is on it at most once
/// ([`PartitionState::commit_queued`]).
#[derive(Default)]
pub(crate) struct CommitQueue(Mutex<Vec<Arc<PartitionState>>>);

impl CommitQueue {
    fn push(&self, state: Arc<PartitionState>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(state);
    }

    /// Takes the list. Each partition taken is off the list again (a
    /// completion after this puts it back), so the caller must read its
    /// pending commit after this returns.
    pub(crate) fn take(&self) -> Vec<Arc<PartitionState>> {
        let taken = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for s in &taken {
            s.commit_queued.store(false, Ordering::Release);
        }
        taken
    }

    /// Puts back partitions whose commit failed (unless a completion since
    /// put them back already).
    pub(crate) fn put_back(&self, states: impl IntoIterator<Item = Arc<PartitionState>>) {
        for s in states {
            if !s.commit_queued.swap(true, Ordering::AcqRel) {
                self.push(s);
            }
        }
    }
}

struct Worker<H> {
    state: Arc<PartitionState>,
    engine: Arc<Engine>,
    handler: Arc<H>,
    /// Records of this partition blocked now: at most one in partition
    /// order, one per key lane in key order. `blocked_since` is set while it
    /// is above 0. Only the worker's task touches it.
    blocked: AtomicUsize,
    /// Successes not yet added to the shared counters (only this worker's
    /// task touches it).
    unflushed: AtomicU64,
    /// Records read from the partition's own queue not yet added to the
    /// shared `received` counter.
    unflushed_received: AtomicU64,
    /// A reposition was needed and librdkafka did not confirm it: its
    /// position may be past records the worker never took, so it is not
    /// trusted to pass transaction markers ([`Worker::pass_markers`]) until
    /// a seek succeeds.
    position_doubtful: AtomicBool,
    /// Dropped when the worker ends, after every handler call it started.
    _done: std::sync::mpsc::Sender<()>,
}

/// A worker adds its successes to the shared counters at least every this
/// many records.
const FLUSH_EVERY: u64 = 64;

/// How [`Worker::handle_until_done`] left a record.
enum Done {
    /// Succeeded, parked or given up: its offset is committable.
    /// `succeeded_at` is the clock reading at the end of a successful
    /// attempt (`None` for a parked or given-up record).
    Completed { succeeded_at: Option<Instant> },
    /// The worker must stop (revoked, shutting down) with the record
    /// neither handled nor parked: counted as unassigned (redelivered to
    /// the next owner).
    Stopped,
    /// The handler succeeded after the partition was revoked: counted as a
    /// late completion (redelivered to the next owner too).
    Late,
}

enum Attempt {
    Succeeded,
    Failed(AttemptError, BoxError),
}

/// One record's share of its partition's blocked state: set while the
/// record's attempts ran out and it is neither handled nor parked. Cleared
/// when the record moves on, or dropped with it.
struct BlockGuard<'a, H> {
    worker: &'a Worker<H>,
    blocked: bool,
}

impl<H> BlockGuard<'_, H> {
    fn block(&mut self) {
        if std::mem::replace(&mut self.blocked, true) {
            return;
        }
        if self.worker.blocked.fetch_add(1, Ordering::AcqRel) == 0 {
            let now = SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(1)
                .max(1);
            let state = &self.worker.state;
            if state
                .blocked_since
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                state.metrics.blocked(true);
            }
        }
    }

    fn unblock(&mut self) {
        if !std::mem::replace(&mut self.blocked, false) {
            return;
        }
        if self.worker.blocked.fetch_sub(1, Ordering::AcqRel) == 1 {
            let state = &self.worker.state;
            if state.blocked_since.swap(0, Ordering::AcqRel) != 0 {
                state.metrics.blocked(false);
            }
        }
    }
}

impl<H> Drop for BlockGuard<'_, H> {
    fn drop(&mut self) {
        self.unblock();
    }
}

/// The worker's state under [`ProcessingOrder::Key`] (the running handler
/// pipelines are a local of [`Worker::run_by_key`]).
struct Keyed {
    /// Busy lanes and the records waiting behind them.
    lanes: KeyLanes<Record>,
    /// Records taken from the buffer that are not yet in the completed
    /// prefix: running, waiting, or completed after an unfinished earlier
    /// record. The look-ahead bound.
    window: OffsetTracker,
    /// At most this many records in `window` (`max_buffered_records`).
    window_limit: usize,
    max_in_flight: usize,
    batch_start: Option<Instant>,
    /// Stopped (revoke, shutdown): no record starts any more; the running
    /// ones finish.
    stopping: bool,
}

impl Keyed {
    /// `true` when the worker may take another record while `running`
    /// handler pipelines run.
    fn has_room(&self, running: usize) -> bool {
        !self.stopping
            && running < self.max_in_flight
            && self.window.outstanding() < self.window_limit
    }
}

/// What a finished handler pipeline reports: its lane, its offset, and
/// whether the record completed (`false`: stopped with the record neither
/// handled nor parked).
type PipelineDone = (LaneId, i64, bool);

/// A record's handler pipeline in key order, boxed so it can be polled once
/// in place before it joins the running set (see `Worker::launch`).
type Pipeline<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = PipelineDone> + Send + 'a>>;

impl<H: Handler> Worker<H> {
    async fn run<C: ConsumerContext + 'static>(
        self,
        rx: mpsc::Receiver<Record>,
        queue: Option<SplitQueue<C>>,
    ) {
        match queue {
            // Borrowed, not taken apart: the struct drops its handle before
            // its queue, also when this future is dropped mid-way.
            Some(split) => {
                // The poll loop never sees this partition's records: the
                // channel is not needed (a send to it fails as closed).
                drop(rx);
                let mut src = Source::Queue(SplitSource {
                    stream: split.queue.stream(),
                    handle: split.handle.as_ref(),
                    ready: std::collections::VecDeque::with_capacity(READ_BATCH),
                    started: false,
                    unreadable: Unreadable::default(),
                });
                self.run_from(&mut src).await;
                self.drop_unhandled(src);
                drop(split);
                self.rewire_successor();
            }
            None => {
                let mut src = Source::<C>::Channel(rx);
                self.run_from(&mut src).await;
                self.drop_unhandled(src);
            }
        }
        self.flush_counts();
    }

    /// After this worker's split queue was dropped (which turned off the
    /// partition queue's wake-up): when the partition was handed back to
    /// this member meanwhile (this worker outlived `revoke_timeout`), its
    /// new worker splits the same librdkafka queue and would be woken only
    /// by its idle re-poll (measured: produce-to-handled 59-953 ms instead
    /// of 2-11 ms). Tells that worker to turn the wake-up back on.
    fn rewire_successor(&self) {
        let key: crate::engine::assignment::PartitionKey =
            (Arc::clone(&self.state.topic), self.state.partition);
        let successor = self.engine.assignment.partitions().get(&key).cloned();
        if let Some(next) = successor
            && !Arc::ptr_eq(&next, &self.state)
        {
            tracing::debug!(
                topic = %self.state.topic,
                partition = self.state.partition,
                "an earlier worker of the partition ended after its new worker started; turning the queue's wake-up back on"
            );
            next.rewire.store(true, Ordering::Release);
            next.wake.notify_one();
        }
    }

    /// Counts the records the worker received but never handled because
    /// its partition stopped (revoked, lost, or closed at shutdown): read
    /// ahead in a batch, or waiting in the hand-over buffer. They are not
    /// committed, so the next owner gets them again.
    fn drop_unhandled<C: ConsumerContext>(&self, src: Source<'_, C>) {
        let n = match src {
            Source::Queue(q) => q.ready.len(),
            Source::Channel(mut rx) => {
                rx.close();
                let mut n = 0;
                while rx.try_recv().is_ok() {
                    n += 1;
                }
                n
            }
        };
        if n > 0 {
            self.engine.counters.unassigned(n as u64);
        }
    }

    async fn run_from<C: ConsumerContext>(&self, src: &mut Source<'_, C>) {
        match self.engine.settings.processing_order {
            ProcessingOrder::Key { max_in_flight } if max_in_flight > 1 => {
                self.run_by_key(src, max_in_flight).await;
            }
            // `Key { max_in_flight: 1 }` is partition order.
            _ => self.run_in_order(src).await,
        }
    }

    /// The next record that is ready now, if any.
    fn try_next<C: ConsumerContext>(&self, src: &mut Source<'_, C>) -> Option<Record> {
        match src {
            Source::Channel(rx) => {
                let r = rx.try_recv().ok()?;
                self.resume_if_drained(rx);
                Some(r)
            }
            Source::Queue(q) => {
                if let Some(r) = q.take_ready(&self.state) {
                    return Some(r);
                }
                // A poll that returns at once (`messaging.client.operation.duration`).
                let started = Instant::now();
                match q.handle {
                    Some(handle) if q.started => {
                        self.read_batch(handle, &mut q.ready, &mut q.unreadable);
                        let r = q.ready.pop_front()?;
                        self.state.metrics.polled(started.elapsed());
                        Some(r)
                    }
                    _ => loop {
                        let m = q.stream.next().now_or_never().flatten()?;
                        if let Some(r) = self.accept(m, q.handle, q.started, &mut q.unreadable) {
                            q.started = true;
                            self.state.metrics.polled(started.elapsed());
                            return Some(r);
                        }
                    },
                }
            }
        }
    }

    /// Waits for the next record. `None` when the source ended.
    /// Cancel-safe: a record is only taken when it is returned.
    async fn next<C: ConsumerContext>(&self, src: &mut Source<'_, C>) -> Option<Record> {
        match src {
            Source::Channel(rx) => {
                let r = rx.recv().await?;
                self.resume_if_drained(rx);
                Some(r)
            }
            Source::Queue(q) => {
                if let Some(r) = q.take_ready(&self.state) {
                    return Some(r);
                }
                // A poll (`messaging.client.operation.duration`): from here
                // to a record in hand, re-polled every `IDLE_POLL_TICK`
                // while the queue stays empty (an empty poll, not
                // recorded), as a client polling with a timeout would. The
                // re-poll also bounds any lost wake-up to a tick (one CI
                // run once left an error event unread for 15 s: likely the
                // wake-up an earlier worker's late queue drop turned off,
                // see `rewire_successor`, which now turns it back on).
                let mut started = Instant::now();
                loop {
                    let polled = tokio::select! {
                        biased;
                        m = tokio::time::timeout(IDLE_POLL_TICK, q.stream.next()) => m,
                        _ = self.state.wake.notified() => {
                            if let Some(handle) = q.handle
                                && self.state.rewire.swap(false, Ordering::AcqRel)
                            {
                                handle.wake_on_records(&self.state.wake);
                            }
                            // Records may have arrived: poll again.
                            continue;
                        }
                    };
                    let m = match polled {
                        Ok(m) => m?,
                        Err(_empty) => {
                            if let Some(handle) = q.handle
                                && q.started
                            {
                                self.pass_markers(handle);
                            }
                            started = Instant::now();
                            continue;
                        }
                    };
                    if let Some(r) = self.accept(m, q.handle, q.started, &mut q.unreadable) {
                        q.started = true;
                        self.state.metrics.polled(started.elapsed());
                        return Some(r);
                    }
                    // An error event, or a record delivered before: that
                    // poll returned no record.
                    started = Instant::now();
                }
            }
        }
    }

    /// What the partition's own queue gave: a record is copied out, counted
    /// and tracked with its event time (what the poll loop's `stage` and
    /// `hand_over` do for a channel source); an error goes to
    /// `queue_error`. `None` for an error, and for a record at or below the
    /// last delivered offset (fetched again after the library restarted the
    /// partition).
    ///
    /// An unreadable record reported here (an idle worker reads one message
    /// at a time) comes without its offset (rust-rdkafka reports only the
    /// error code): once a record was taken (`started`) it is the next one,
    /// as the records before it in the queue were taken before it.
    fn accept(
        &self,
        m: Result<rdkafka::message::BorrowedMessage<'_>, rdkafka::error::KafkaError>,
        handle: Option<&QueueHandle>,
        started: bool,
        noted: &mut Unreadable,
    ) -> Option<Record> {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                // A single poll does not move the position for an error.
                let next = self
                    .state
                    .tracker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .position();
                match (handle, is_unreadable(&e)) {
                    // rust-rdkafka reports no offset with the error: it is
                    // the next record to take (once one was taken), else
                    // the partition's start.
                    (Some(handle), true) => {
                        let at = if started {
                            next
                        } else {
                            self.start_offset(handle)
                        };
                        match at {
                            Some(at) => {
                                if let Some(target) = self.unreadable(at, next, noted) {
                                    self.reposition(handle, target);
                                }
                            }
                            None => {
                                self.queue_error(e);
                            }
                        }
                    }
                    _ => {
                        self.queue_error(e);
                    }
                }
                return None;
            }
        };
        let depth = handle;
        let record = Record::from_message(&self.state.topic, &m, self.engine.settings.read_headers);
        drop(m);
        if let Some(depth) = depth {
            self.state.waiting.store(depth.len(), Ordering::Relaxed);
        }
        self.unflushed_received.fetch_add(1, Ordering::Relaxed);
        let event_ms = crate::record::event_time_ms(
            self.engine.settings.event_time_header.as_deref(),
            &record,
        );
        self.state
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .delivered_at(record.offset(), event_ms)
            .then_some(record)
    }

    /// Reads the records ready in the partition's own queue, up to
    /// [`READ_BATCH`], into `ready`: copied out, counted and tracked with
    /// their event times under one lock (as `accept` does one by one). An
    /// error goes to `queue_error`; a record at or below the last delivered
    /// offset is skipped.
    fn read_batch(
        &self,
        handle: &QueueHandle,
        ready: &mut std::collections::VecDeque<Record>,
        noted: &mut Unreadable,
    ) {
        let mut read: Vec<(Record, i64)> = Vec::with_capacity(READ_BATCH);
        // Whether an error event moved librdkafka's position past the next
        // record (see `QueueHandle::read_batch`).
        let mut reposition = false;
        // The offset of a record librdkafka could not read, if any.
        let mut unreadable: Option<i64> = None;
        handle.read_batch(self.engine.settings.max_buffered_records, |m| {
            // SAFETY: a live message for the duration of this call.
            let (err, offset) = unsafe { ((*m).err, (*m).offset) };
            if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__BAD_MSG {
                // Its offset is the unreadable record's own (the first of
                // its record batch), not the fetch position.
                unreadable = unreadable.max(Some(offset));
            } else if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                // SAFETY: a live consumer message without error.
                let record = unsafe {
                    Record::from_native(&self.state.topic, m, self.engine.settings.read_headers)
                };
                let event_ms = crate::record::event_time_ms(
                    self.engine.settings.event_time_header.as_deref(),
                    &record,
                );
                read.push((record, event_ms));
            } else {
                // As rust-rdkafka reports it for a `BorrowedMessage` (no
                // partition EOF: `enable.partition.eof` is refused).
                let handled_elsewhere =
                    self.queue_error(rdkafka::error::KafkaError::MessageConsumption(err.into()));
                reposition |= !handled_elsewhere;
            }
        });
        let mut tracker = self.state.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if !read.is_empty() {
            self.unflushed_received
                .fetch_add(read.len() as u64, Ordering::Relaxed);
            for (record, event_ms) in read {
                if tracker.delivered_at(record.offset(), event_ms) {
                    ready.push_back(record);
                }
            }
        }
        // Under the tracker's lock, as health reads them: the position
        // moved past the records taken, and those left wait in the queue.
        self.state.waiting.store(handle.len(), Ordering::Relaxed);
        // The next record to take (known: the batch path runs only once a
        // record was taken).
        let next = tracker.position();
        drop(tracker);
        let mut target = if reposition { next } else { None };
        if let Some(u) = unreadable
            && let Some(past) = self.unreadable(u, next, noted)
        {
            target = Some(past);
        }
        // At once, before the next read: records fetched from the wrong
        // position can then never be taken (the seek's new version makes
        // them outdated).
        if let Some(offset) = target {
            self.reposition(handle, offset);
        }
    }

    /// A record batch librdkafka cannot read (it failed the CRC check of
    /// `check.crcs`) reported at offset `u` (the batch's first offset), with
    /// `next` the next offset the worker takes (`None` before the first
    /// record). Its records cannot be handled and are never delivered.
    /// Counted and logged once per batch; returns the offset to reposition
    /// to (else `None`).
    ///
    /// librdkafka 2.12.1 does not skip a v2 batch that fails the check (its
    /// reader takes the batch's length for an absolute position), and a
    /// fetch from any offset inside the batch returns the whole batch: so
    /// the worker steps past it one offset at a time. The first step goes
    /// to `u + 1`; each report of the same batch after a step (nothing
    /// taken since: the fetch at the step's offset hit the batch again)
    /// steps one further, until a fetch lands past the batch's end. Each
    /// step is one seek and one fetch; a report that comes after records
    /// past the batch were taken is stale and ignored.
    fn unreadable(&self, u: i64, next: Option<i64>, skip: &mut Unreadable) -> Option<i64> {
        if let Some(batch) = skip.batch
            && u <= batch
        {
            return match skip.target {
                Some(t) if next.is_none_or(|n| n <= t) => {
                    tracing::debug!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        batch,
                        offset = t,
                        "offset inside the unreadable record batch; stepping past it"
                    );
                    skip.target = Some(t + 1);
                    skip.target
                }
                _ => {
                    tracing::debug!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset = u,
                        "unreadable record batch reported again"
                    );
                    None
                }
            };
        }
        skip.batch = Some(u);
        self.engine
            .counters
            .unreadable
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            topic = %self.state.topic,
            partition = self.state.partition,
            offset = u,
            "record cannot be read (its record batch failed librdkafka's CRC check); the batch is skipped and committed past: it is lost to this consumer group"
        );
        // Past it already when the worker took a record after it.
        skip.target = next.is_none_or(|n| u >= n).then_some(u + 1);
        skip.target
    }

    /// Where the partition's records start when none was taken yet: the
    /// offset it was assigned (or restarted) at, or for a logical start the
    /// log start or end offset librdkafka last saw (cached from fetch
    /// responses, no request). `None` when unknown.
    fn start_offset(&self, handle: &QueueHandle) -> Option<i64> {
        match self.state.health.start() {
            rdkafka::Offset::Offset(o) if o >= 0 => Some(o),
            rdkafka::Offset::Beginning => handle.cached_watermarks().map(|(lo, _)| lo),
            rdkafka::Offset::End => handle.cached_watermarks().map(|(_, hi)| hi),
            _ => None,
        }
    }

    /// Called when the partition's queue stayed empty for a tick: when
    /// every record taken completed and librdkafka's position is past them,
    /// the offsets in between hold transaction markers (or, under
    /// `read_committed`, records of aborted transactions), which no consumer
    /// receives. The committable offset moves to the position, so an idle
    /// partition of a transactional topic commits at its end (lag 0) as the
    /// Java consumer's position-based commit does, instead of one below it
    /// for ever (a stall). Not while a reposition is unconfirmed.
    fn pass_markers(&self, handle: &QueueHandle) {
        if self.position_doubtful.load(Ordering::Relaxed)
            || self.state.revoked.load(Ordering::Acquire)
            || handle.len() > 0
        {
            return;
        }
        let Some(position) = handle.position() else {
            return;
        };
        let passed = {
            let mut tracker = self.state.tracker.lock().unwrap_or_else(|e| e.into_inner());
            tracker.pass_to(position)
        };
        if passed {
            tracing::debug!(
                topic = %self.state.topic,
                partition = self.state.partition,
                position,
                "passed offsets without records (transaction markers)"
            );
            self.state.queue_commit(&self.engine.committer.queue);
        }
    }

    /// Seeks the partition to `offset`, the next record the worker takes,
    /// and makes sure librdkafka served the seek: a seek that librdkafka
    /// dropped as outdated (a rebalance's pause or resume, called in the
    /// same instant, got a newer version and was served first) is sent
    /// again, up to [`SEEK_ATTEMPTS`] times. Under
    /// [`Assignment::seeking`](crate::engine::assignment::Assignment::seeking),
    /// so that the seek never makes librdkafka drop a rebalance's resume.
    /// Not once the partition is stopping (revoked, lost or shutting down):
    /// it may already be someone else's, or this member's again with a new
    /// position. Blocks the task's thread (in `block_in_place` on a
    /// multi-thread runtime) until librdkafka answered: normally well
    /// under a millisecond, at most [`SEEK_TIMEOUT`] per attempt.
    fn reposition(&self, handle: &QueueHandle, offset: i64) {
        use rdkafka::types::RDKafkaRespErr as E;
        let stopping =
            || self.state.stop.is_cancelled() || self.state.revoked.load(Ordering::Acquire);
        self.position_doubtful.store(true, Ordering::Relaxed);
        let seek = || {
            for attempt in 1..=SEEK_ATTEMPTS {
                if stopping() {
                    return;
                }
                let result = {
                    let _seeking = self.engine.assignment.seeking();
                    handle.seek(offset)
                };
                match result {
                    Ok(()) => {
                        self.position_doubtful.store(false, Ordering::Relaxed);
                        return;
                    }
                    Err((E::RD_KAFKA_RESP_ERR__OUTDATED, _)) => {
                        tracing::info!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            offset,
                            attempt,
                            "repositioning seek dropped by librdkafka as outdated (a newer operation on the partition, such as a rebalance's pause or resume, was served first); seeking again"
                        );
                    }
                    Err((
                        E::RD_KAFKA_RESP_ERR__STATE
                        | E::RD_KAFKA_RESP_ERR__PREV_IN_PROGRESS
                        | E::RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                        | E::RD_KAFKA_RESP_ERR__DESTROY,
                        reason,
                    )) => {
                        tracing::debug!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            %reason,
                            "repositioning seek not served: the partition is not fetching (stopping or restarting)"
                        );
                        return;
                    }
                    Err((_, reason)) => {
                        tracing::warn!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            offset,
                            %reason,
                            "repositioning the partition failed"
                        );
                        return;
                    }
                }
            }
            tracing::warn!(
                topic = %self.state.topic,
                partition = self.state.partition,
                offset,
                attempts = SEEK_ATTEMPTS,
                "repositioning seek dropped as outdated every time; left to librdkafka"
            );
        };
        if stopping() {
            return;
        }
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(seek),
            _ => seek(),
        }
    }

    /// An error on the partition's own queue (librdkafka puts a partition's
    /// consume errors there, not on the main queue). `true` when the
    /// library restarts the partition's fetch for it anyway (an offset out
    /// of range).
    fn queue_error(&self, e: rdkafka::error::KafkaError) -> bool {
        use rdkafka::error::RDKafkaErrorCode;
        match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::AutoOffsetReset) => {
                // As in the poll loop: librdkafka stopped the partition's
                // fetcher; the health thread decides and restarts it.
                tracing::debug!(error = %e, "offset out of range; handled by the library");
                self.engine.resets.offset_reset_error();
                true
            }
            _ => {
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    error = %e,
                    "consume error"
                );
                false
            }
        }
    }

    /// [`ProcessingOrder::Partition`]: one record at a time, in offset order.
    async fn run_in_order<C: ConsumerContext>(&self, src: &mut Source<'_, C>) {
        let mut batch_start: Option<Instant> = None;
        // When the previous record succeeded and the next one is taken
        // without waiting, the clock read that ended the one starts the
        // other: one clock read per record on the success path.
        let mut last_end: Option<Instant> = None;
        loop {
            let record = if let Some(r) = self.try_next(src) {
                r
            } else {
                // The buffer is empty: the batch ends here.
                last_end = None;
                self.flush_counts();
                if let Some(start) = batch_start.take() {
                    self.state.metrics.batch(start.elapsed());
                }
                tokio::select! {
                    biased;
                    _ = self.state.stop.cancelled() => break,
                    r = self.next(src) => match r {
                        Some(r) => r,
                        None => break,
                    },
                }
            };
            if self.state.stop.is_cancelled() {
                // Taken, never handled: the next owner gets it.
                self.engine.counters.unassigned(1);
                break;
            }
            let start = last_end.take().unwrap_or_else(Instant::now);
            batch_start.get_or_insert(start);
            match self.handle_until_done(record, Some(start)).await {
                Done::Completed { succeeded_at } => last_end = succeeded_at,
                Done::Stopped | Done::Late => break,
            }
            if self.unflushed.load(Ordering::Relaxed) >= FLUSH_EVERY {
                self.flush_counts();
            }
        }
        if let Some(start) = batch_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
    }

    /// [`ProcessingOrder::Key`]: up to `max_in_flight` handler pipelines at
    /// once on this task, one per key lane, each lane in offset order.
    async fn run_by_key<C: ConsumerContext>(&self, src: &mut Source<'_, C>, max_in_flight: usize) {
        let mut k = Keyed {
            lanes: KeyLanes::default(),
            window: OffsetTracker::default(),
            window_limit: self.engine.settings.max_buffered_records,
            max_in_flight,
            batch_start: None,
            stopping: false,
        };
        let mut running = FuturesUnordered::new();
        let cancelled = self.state.stop.clone().cancelled_owned();
        tokio::pin!(cancelled);
        loop {
            // Start what can start without waiting.
            while k.has_room(running.len()) {
                let Some(r) = self.try_next(src) else {
                    break;
                };
                let start = self.take(&mut k, r);
                self.launch(&mut k, &mut running, start);
            }
            if k.stopping {
                let dropped = k.lanes.drop_waiting();
                if dropped > 0 {
                    self.engine.counters.unassigned(dropped as u64);
                }
                if running.is_empty() {
                    break;
                }
            }
            if running.is_empty() {
                // Idle: no record runs, so none waits (a waiting record
                // always has a running one ahead of it in its lane), and the
                // buffer is empty. The batch ends here.
                self.flush_counts();
                if let Some(start) = k.batch_start.take() {
                    self.state.metrics.batch(start.elapsed());
                }
                tokio::select! {
                    biased;
                    () = &mut cancelled => k.stopping = true,
                    r = self.next(src) => match r {
                        Some(r) => {
                            let start = self.take(&mut k, r);
                            self.launch(&mut k, &mut running, start);
                        }
                        None => k.stopping = true,
                    },
                }
                continue;
            }
            let can_take = k.has_room(running.len());
            let next = tokio::select! {
                biased;
                Some(done) = running.next() => self.finished(&mut k, done),
                () = &mut cancelled, if !k.stopping => {
                    k.stopping = true;
                    None
                }
                r = self.next(src), if can_take => match r {
                    Some(r) => self.take(&mut k, r),
                    None => {
                        k.stopping = true;
                        None
                    }
                },
            };
            self.launch(&mut k, &mut running, next);
        }
        if let Some(start) = k.batch_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
        // `running` is empty: every handler call this worker started ended
        // before `_done` drops with `self`.
    }

    /// Starts `next`'s handler pipeline. It is polled once in place: one
    /// that completes at once (a handler that does not wait) is finished
    /// here, and the next record of its lane started the same way, without
    /// the task bookkeeping of `running` (measured: 4-6 % of the CPU of
    /// key order with a no-op handler, `benches/throughput.rs`). One that
    /// waits joins `running`, which polls it again with its waker (a
    /// pushed future is polled on the next `poll_next`), so no wake-up is
    /// lost.
    fn launch<'a>(
        &'a self,
        k: &mut Keyed,
        running: &mut FuturesUnordered<Pipeline<'a>>,
        mut next: Option<(LaneId, Record)>,
    ) {
        while let Some((lane, r)) = next.take() {
            let mut pipeline: Pipeline<'a> = Box::pin(self.pipeline(lane, r));
            match (&mut pipeline).now_or_never() {
                Some(done) => next = self.finished(k, done),
                None => running.push(pipeline),
            }
        }
    }

    /// A record taken from the buffer in key order: returns it with its
    /// lane when it may start now; queues it behind its busy lane otherwise.
    fn take(&self, k: &mut Keyed, record: Record) -> Option<(LaneId, Record)> {
        if self.state.stop.is_cancelled() {
            k.stopping = true;
            // Taken, never handled: the next owner gets it.
            self.engine.counters.unassigned(1);
            return None;
        }
        k.batch_start.get_or_insert_with(Instant::now);
        k.window.delivered_at(record.offset(), 0);
        let lane = k.lanes.lane_of(&record);
        k.lanes.admit(lane, record).map(|r| (lane, r))
    }

    /// A handler pipeline ended: returns the next record of its lane to
    /// start, if any and not stopping.
    fn finished(
        &self,
        k: &mut Keyed,
        (lane, offset, completed): PipelineDone,
    ) -> Option<(LaneId, Record)> {
        // As in partition order: the shared counters every FLUSH_EVERY
        // records and when the worker goes idle (a failure flushes first
        // itself), not once per record.
        if self.unflushed.load(Ordering::Relaxed) >= FLUSH_EVERY {
            self.flush_counts();
        }
        if completed {
            k.window.completed(offset);
        } else {
            k.stopping = true;
        }
        let next = k.lanes.finish(lane)?;
        if k.stopping {
            // The waiting record is dropped, uncommitted.
            self.engine.counters.unassigned(1);
            return None;
        }
        Some((lane, next))
    }

    /// One record's handler pipeline in key order.
    async fn pipeline(&self, lane: LaneId, record: Record) -> PipelineDone {
        let offset = record.offset();
        let done = self.handle_until_done(record, None).await;
        (lane, offset, matches!(done, Done::Completed { .. }))
    }

    /// Asks the poll loop to refill and resume the partition when it paused
    /// it and the buffer has drained to half. Called as a record is taken.
    fn resume_if_drained(&self, rx: &mpsc::Receiver<Record>) {
        // Pairs with the fence in the poll loop's `request_resume`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.state.wants_resume.load(Ordering::Acquire)
            && rx.len() <= self.engine.settings.max_buffered_records / 2
            && self.state.wants_resume.swap(false, Ordering::AcqRel)
        {
            let _ = self
                .engine
                .ctrl_tx
                .send(Ctrl::Drained(Arc::clone(&self.state)));
        }
    }

    /// Runs the handler on `record` until it succeeds or is parked (dead
    /// letter) or given up (skip), or the worker must stop (revoked or
    /// shutting down) with the record neither. `start` is the clock reading
    /// to start the first attempt at (the caller's, when it has one).
    async fn handle_until_done(&self, record: Record, start: Option<Instant>) -> Done {
        let done = self.attempt_until_done(record, start).await;
        if matches!(done, Done::Stopped) {
            self.engine.counters.unassigned(1);
        }
        done
    }

    async fn attempt_until_done(&self, record: Record, mut start: Option<Instant>) -> Done {
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

    /// Writes a record whose attempts ran out to `topic` (its dead-letter
    /// topic or its next retry tier) with [`Self::write_out`], the written
    /// record continuing the process span's trace, and ends the span with
    /// the outcome.
    #[allow(clippy::too_many_arguments)]
    async fn write_failed(
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
        });
        done
    }

    /// Writes `record` to its dead-letter topic or its next retry tier,
    /// retrying the write at the capped backoff until the broker
    /// acknowledges it; only then is the record's offset committable. The
    /// partition counts as blocked while a write fails.
    async fn write_out(
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
            topic,
            to,
        } = out;
        let mut write_attempt: u32 = 0;
        loop {
            write_attempt += 1;
            let destination = match to {
                To::DeadLetter => Destination::DeadLetter,
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
                r = writer.write(record, origin, &topic, failure, destination, trace_headers) => r,
            };
            match sent {
                Ok(()) => {
                    match to {
                        To::Tier { tier, .. } => self.state.metrics.retry_tier_written(tier, None),
                        To::DeadLetter => self.state.metrics.dead_lettered(None),
                    }
                    blocked.unblock();
                    if self.state.revoked.load(Ordering::Acquire) {
                        // Written, but the partition moved on: its new owner
                        // will handle the record again (at-least-once).
                        self.engine.counters.late_completion();
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
                    };
                    moved.fetch_add(1, Ordering::Relaxed);
                    self.complete(record.offset());
                    return Done::Completed { succeeded_at: None };
                }
                Err(e) => {
                    let name = crate::metrics::instruments::kafka_error_name_of(&e);
                    match to {
                        To::Tier { tier, .. } => {
                            self.state.metrics.retry_tier_written(tier, Some(name))
                        }
                        To::DeadLetter => self.state.metrics.dead_lettered(Some(name)),
                    }
                    blocked.block();
                    let delay = self.engine.settings.retry.delay(write_attempt);
                    let what = match to {
                        To::Tier { .. } => "retry tier",
                        To::DeadLetter => "dead-letter topic",
                    };
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

    /// Marks `offset` completed: parked or given up (a success is counted
    /// in bulk, see `flush_counts`).
    fn complete(&self, offset: i64) {
        self.state.completed(offset, &self.engine.committer.queue);
        self.engine.committer.records_completed(1);
    }

    /// Adds the successes counted since the last flush to the shared
    /// counters (the run summary, the storm guard, the commit-by-count
    /// trigger). Called when the worker's buffer runs empty, every
    /// [`FLUSH_EVERY`] records, before a failed record is decided on, and
    /// when the worker ends.
    fn flush_counts(&self) {
        let received = self.unflushed_received.swap(0, Ordering::Relaxed);
        if received > 0 {
            self.state.metrics.consumed(received);
            self.engine
                .counters
                .received
                .fetch_add(received, Ordering::Relaxed);
        }
        let n = self.unflushed.swap(0, Ordering::Relaxed);
        if n > 0 {
            self.engine.counters.succeeded(n);
            self.engine.committer.records_completed(n as usize);
        }
    }

    /// Waits until `due_ms` (ms since the Unix epoch, wall clock) has
    /// passed, with the partition paused meanwhile ([`Ctrl::Hold`]), unless
    /// the partition is stopped first. Returns `false` when stopped. The
    /// worker's task waits on a timer: the poll loop and every other
    /// partition go on, and `max.poll.interval.ms` is not at stake.
    async fn wait_until_due(&self, due_ms: i64) -> bool {
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
        EventTime::of(self.engine.settings.event_time_header.as_deref(), record)
    }
}

/// Whether a consume error reports a record librdkafka could not read
/// (`__BAD_MSG`: its record batch failed the CRC check).
fn is_unreadable(e: &rdkafka::error::KafkaError) -> bool {
    e.rdkafka_error_code() == Some(rdkafka::error::RDKafkaErrorCode::BadMessage)
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
enum To {
    DeadLetter,
    Tier { tier: usize, delay: Duration },
}

/// A write of a failed record: from where, after which failure, to which
/// topic.
struct Outgoing<'a> {
    origin: &'a Origin,
    failure: &'a FailureInfo,
    topic: String,
    to: To,
}

/// One waiting record's share of its retry-tier partition's pause: the
/// partition is paused while any record holds one (several can with
/// [`ProcessingOrder::Key`]).
struct HoldGuard<'a, H> {
    worker: &'a Worker<H>,
}

impl<'a, H> HoldGuard<'a, H> {
    fn new(worker: &'a Worker<H>) -> Self {
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
