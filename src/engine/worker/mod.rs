//! A partition's worker: the task that takes its records (handed over by
//! the poll loop, or read from the partition's own librdkafka queue) and
//! runs the handler over them: one at a time in offset order
//! ([`ProcessingOrder::Partition`]), concurrently across keys with each
//! key in offset order ([`ProcessingOrder::Key`]), or in batches in offset
//! order ([`FreshConsumer::batched`](crate::FreshConsumer::batched)).
//!
//! Calls run one way, file by file: this file starts the worker and picks
//! its loop; `in_order.rs`, `by_key.rs` and `batched.rs` are the loops
//! (`batched.rs` hands a record that failed on its own to `attempt.rs`),
//! which take
//! records from `source.rs` and hand each to `attempt.rs` (the handler's
//! attempts and the exhausted-record decision), which writes a record that
//! moves on to `park.rs` (dead-letter and retry-tier writes, due times);
//! `outputs.rs` makes the handler call itself (with the call's output
//! handle and the wait for its outputs' acknowledgements when outputs are
//! on);
//! `stale.rs` sheds a record too old to be handled (the batch loop and
//! `attempt.rs` ask it before the handler sees a record, and it writes
//! through `park.rs`);
//! `task.rs` holds the worker's own state that all of them share.

mod attempt;
mod batched;
mod by_key;
mod in_order;
mod outcome;
mod outputs;
mod park;
mod source;
mod stale;
mod task;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::consumer::ConsumerContext;
use tokio::sync::mpsc;

use crate::engine::partition::{NO_OFFSET, PartitionState};
use crate::engine::queue::{QueueHandle, READ_BATCH};
use crate::engine::shared::Engine;
use crate::engine::tracker::OffsetTracker;
use crate::handler::Handler;
use crate::health::partition::PartitionHealth;
use crate::metrics::partition::{PartitionRetry, PartitionStale};
use crate::ordering::ProcessingOrder;
use crate::record::Record;
use source::{Source, SplitSource, Unreadable};
use task::Worker;

/// A partition's own librdkafka queue (`split_partition_queue`), split
/// before the partition is assigned.
/// Generic over the consumer's context `C` (as rust-rdkafka's queue is), so
/// the worker does not name the engine's concrete context type.
pub(crate) type PartitionQueue<C> = rdkafka::consumer::stream_consumer::StreamPartitionQueue<C>;

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

/// Creates a partition's state and its worker, which runs once
/// [`PendingWorker::start`] is called: after the state is registered in
/// the assignment, so that the committer sees every record the worker
/// completes (a worker reading a split queue starts at once).
pub(crate) fn spawn<H: Handler, C: ConsumerContext + 'static>(
    engine: &Arc<Engine>,
    handler: &Arc<H>,
    topic: &str,
    partition: i32,
    queue: Option<SplitQueue<C>>,
) -> (Arc<PartitionState>, PendingWorker) {
    let (tx, rx) = mpsc::channel(engine.settings.max_buffered_records);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let stale = (engine.stale.as_ref())
        .filter(|s| s.applies_to(&engine.exhausted, topic))
        .map(|s| (s.action.as_str(), s.topic_for(&engine.exhausted, topic)));
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
        stale.as_ref().map(|(action, topic)| PartitionStale {
            action,
            topic: topic.as_deref(),
        }),
    );
    metrics.bind_on_assignment(queue.is_some());
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
        blocked_record: Mutex::new(None),
        waiting: AtomicU64::new(0),
        metrics,
        health: PartitionHealth::new(engine.health.origin()),
        trace,
        held: AtomicUsize::new(0),
        due_delay: engine
            .exhausted
            .tier_of(topic)
            .and_then(|t| engine.exhausted.retry_topics()?.delay(t.tier))
            .unwrap_or_default(),
        controls: Arc::clone(&engine.controls),
        in_transaction: AtomicBool::new(false),
        rewind: AtomicBool::new(false),
        ages: Mutex::new(Vec::new()),
    });
    let plain = task::plain_attempts(
        engine,
        state.trace.is_some(),
        engine.exhausted.tier_of(topic).is_some(),
        stale.is_some(),
    );
    let worker = Worker {
        plain,
        state: Arc::clone(&state),
        engine: Arc::clone(engine),
        handler: Arc::clone(handler),
        blocked: AtomicUsize::new(0),
        unflushed: AtomicU64::new(0),
        unflushed_received: AtomicU64::new(0),
        position_doubtful: AtomicBool::new(false),
        stale_run: Mutex::new(None),
        _done: done_tx,
    };
    let start = PendingWorker {
        runtime: engine.runtime.clone(),
        run: Box::pin(worker.run(rx, queue)),
    };
    (state, start)
}

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
        self.end_stale_run();
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
        self.unhandled(n);
    }

    async fn run_from<C: ConsumerContext>(&self, src: &mut Source<'_, C>) {
        if let Some(batch) = &self.engine.settings.batch {
            // Validated: never with key order.
            return self.run_batched(src, batch).await;
        }
        match self.engine.settings.processing_order {
            ProcessingOrder::Key { max_in_flight } if max_in_flight > 1 => {
                self.run_by_key(src, max_in_flight).await;
            }
            // `Key { max_in_flight: 1 }` is partition order.
            _ => self.run_in_order(src).await,
        }
    }
}
