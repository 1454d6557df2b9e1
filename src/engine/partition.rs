//! One assigned partition's state, shared by the poll loop (dispatch), its
//! worker (delivery and completions, see `worker/`), the committer and the
//! rebalance callbacks; and the committer's list of partitions with
//! something new to commit.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::tracker::OffsetTracker;
use crate::health::partition::PartitionHealth;
use crate::metrics::partition::PartitionInstruments;
use crate::record::Record;
use crate::trace::PartitionTrace;

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
    /// The record that blocks the partition (set with `blocked_since`),
    /// for the health report.
    pub(crate) blocked_record: Mutex<Option<crate::summary::BlockedRecord>>,
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
    /// A retry-tier partition's delay (zero for other partitions): its
    /// records wait this long by design, which health's lag-growth rule
    /// allows for.
    pub(crate) due_delay: std::time::Duration,
    /// The pauses set by the application, read by health.
    pub(crate) controls: Arc<crate::control::Controls>,
    /// Transactional outputs: the partition's handler calls wrote outputs
    /// into the open transaction (set by the worker under the
    /// transaction gate, cleared when the transaction ends).
    pub(crate) in_transaction: AtomicBool,
    /// Transactional outputs: the transaction the partition wrote into was
    /// aborted; its worker rewinds it to the last committed offset before
    /// its next handler call. Nothing is committed for it meanwhile.
    pub(crate) rewind: AtomicBool,
    /// Transactional outputs: the event times of the records that
    /// succeeded in the open transaction, whose event age is recorded when
    /// it commits (and dropped when it aborts: the records are handled
    /// again). At most one entry per record completed since the last
    /// commit (`commit_batch_records` bounds it, about 16 bytes each).
    pub(crate) ages: Mutex<Vec<crate::record::EventTime>>,
}

impl PartitionState {
    /// Locks the tracker to deliver records taken from librdkafka (by the
    /// poll loop or the partition's worker), see [`Delivery::is_new`]:
    /// several records under one lock.
    pub(crate) fn delivery<'a>(&'a self, event_time_header: Option<&'a str>) -> Delivery<'a> {
        Delivery {
            tracker: self.tracker.lock().unwrap_or_else(|e| e.into_inner()),
            event_time_header,
        }
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

    /// [`Self::completed`] for several offsets, under one lock.
    pub(crate) fn completed_all(
        self: &Arc<Self>,
        offsets: impl IntoIterator<Item = i64>,
        queue: &CommitQueue,
    ) {
        let advanced = {
            let mut tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            offsets
                .into_iter()
                .fold(false, |advanced, o| tracker.completed(o) | advanced)
        };
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

    /// The offset to commit if it is ahead of the last commit, with the
    /// leader epoch of the record before it (when known).
    pub(crate) fn pending_commit(&self) -> Option<(i64, Option<i32>)> {
        if self.revoked.load(Ordering::Acquire) || self.rewind.load(Ordering::Acquire) {
            return None;
        }
        let tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let c = tracker.committable()?;
        (c > self.committed.load(Ordering::Acquire)).then_some((c, tracker.committable_epoch()))
    }
}

/// The partition's tracker, locked to deliver records (see
/// [`PartitionState::delivery`]).
pub(crate) struct Delivery<'a> {
    tracker: std::sync::MutexGuard<'a, OffsetTracker>,
    event_time_header: Option<&'a str>,
}

impl Delivery<'_> {
    /// Tracks `record` as delivered with its event time (read with
    /// `event_time_header`, kept for the head-of-line age). `false` for a
    /// record at or below the last delivered offset: fetched again after
    /// the library restarted the partition (an offset reset), its worker
    /// has it already.
    pub(crate) fn is_new(&mut self, record: &Record) -> bool {
        let event_ms = crate::record::event_time_ms(self.event_time_header, record);
        self.tracker
            .delivered_at(record.offset(), event_ms, record.leader_epoch())
    }

    /// The next offset to take (see [`OffsetTracker::position`]), read
    /// under the same lock.
    pub(crate) fn position(&self) -> Option<i64> {
        self.tracker.position()
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
