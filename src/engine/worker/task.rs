//! The worker's own state, shared by its loops, its attempts and its
//! write-outs: the partition and engine it works for, the handler, and
//! what it counts before adding to the shared counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::engine::partition::PartitionState;
use crate::engine::shared::Engine;
use crate::failure::dead_letter::Origin;
use crate::handler::Handler;
use crate::output::ORIGIN_TIME_HEADER;
use crate::record::{EventTime, OriginHeader, Record};

pub(super) struct Worker<H> {
    pub(super) state: Arc<PartitionState>,
    pub(super) engine: Arc<Engine>,
    pub(super) handler: Arc<H>,
    /// Records of this partition blocked now: at most one in partition
    /// order, one per key lane in key order. `blocked_since` is set while it
    /// is above 0. Only the worker's task touches it.
    pub(super) blocked: AtomicUsize,
    /// Successes not yet added to the shared counters (only this worker's
    /// task touches it).
    pub(super) unflushed: AtomicU64,
    /// Records read from the partition's own queue not yet added to the
    /// shared `received` counter.
    pub(super) unflushed_received: AtomicU64,
    /// A reposition was needed and librdkafka did not confirm it: its
    /// position may be past records the worker never took, so it is not
    /// trusted to pass transaction markers ([`Worker::pass_markers`]) until
    /// a seek succeeds.
    pub(super) position_doubtful: AtomicBool,
    /// The partition's open run of stale records (see `stale.rs`).
    pub(super) stale_run: std::sync::Mutex<Option<StaleRun>>,
    /// Whether a record's first attempt may take
    /// [`Worker::handle_plain`]: none of the per-record machinery it skips
    /// is on for this partition (see [`plain_attempts`]).
    pub(super) plain: bool,
    /// Dropped when the worker ends, after every handler call it started.
    pub(super) _done: std::sync::mpsc::Sender<()>,
}

/// A run of consecutive stale records of the partition, logged when it
/// starts and when a fresh record ends it (or the worker does); kept by
/// `stale.rs`.
#[derive(Clone, Copy)]
pub(super) struct StaleRun {
    /// Its first offset.
    pub(super) first: i64,
    /// Its last offset so far.
    pub(super) last: i64,
    /// Its records so far.
    pub(super) records: u64,
}

/// Whether a partition's records can take [`Worker::handle_plain`] for
/// their first attempt: no traces (`trace_on`), no handler outputs or
/// transactions, no handler timeout, no origin-time ages, no retry tier
/// (`tier`: the topic is a tier, whose records wait for their due time),
/// and no stale-record policy for the topic (`stale_applies`). A failed
/// first attempt goes on through [`Worker::attempt_until_done`] either way.
pub(super) fn plain_attempts(
    engine: &Engine,
    trace_on: bool,
    tier: bool,
    stale_applies: bool,
) -> bool {
    !trace_on
        && !tier
        && !stale_applies
        && engine.outputs.is_none()
        && engine.transactions.is_none()
        && engine.settings.handler_timeout.is_none()
        && !engine.settings.origin_time
}

/// A worker adds its successes to the shared counters at least every this
/// many records.
pub(super) const FLUSH_EVERY: u64 = 64;

/// A record's times beyond its event time: what its age is recorded with,
/// the origin time its outputs carry, and whether its origin-time header
/// was unreadable (counted at its success).
pub(super) struct Times {
    pub(super) age: EventTime,
    pub(super) origin_ms: Option<i64>,
    pub(super) malformed: bool,
}

/// How [`Worker::handle_until_done`] left a record.
pub(super) enum Done {
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
    /// Transactional outputs: a transaction the partition wrote into was
    /// aborted. The record is neither handled nor parked; the worker
    /// rewinds the partition to its last committed offset (the record is
    /// read again).
    Rewind,
}

impl<H: Handler> Worker<H> {
    /// Marks `offset` completed: parked or given up (a success is counted
    /// in bulk, see `flush_counts`).
    pub(super) fn complete(&self, offset: i64) {
        self.state.completed(offset, &self.engine.committer.queue);
        self.engine.committer.records_completed(1);
    }

    /// Adds the successes counted since the last flush to the shared
    /// counters (the run summary, the storm guard, the commit-by-count
    /// trigger). Called when the worker's buffer runs empty, every
    /// [`FLUSH_EVERY`] records, before a failed record is decided on, and
    /// when the worker ends.
    pub(super) fn flush_counts(&self) {
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

    /// Waits while the application paused the partition
    /// (`ControlHandle`), unless the partition is stopped first. Returns
    /// `false` when stopped.
    pub(super) async fn wait_while_paused(&self) -> bool {
        let (topic, partition) = (&self.state.topic, self.state.partition);
        if !self.state.controls.is_paused(topic, partition) {
            return true;
        }
        tracing::info!(
            topic = %topic,
            partition,
            "partition paused by the application: the next record waits until it is resumed"
        );
        // Successes counted so far reach the summary during the pause.
        self.flush_counts();
        let resumed = (self.state.controls)
            .wait_while_paused(topic, partition, &self.state.stop)
            .await;
        if resumed {
            tracing::info!(
                topic = %topic,
                partition,
                "partition resumed by the application"
            );
        }
        resumed
    }

    /// Waits for `records` records' turn under the application's rate
    /// limit (`ControlHandle::set_rate_limit`), unless the partition is
    /// stopped first; a wait is not part of the first attempt (`start` is
    /// cleared). Returns `false` when stopped.
    pub(super) async fn take_turn(&self, records: usize, start: &mut Option<Instant>) -> bool {
        // Without a limit there is no wait, and nothing to time: two clock
        // reads per record were 6 % of a worker's time in a profile.
        if !self.state.controls.is_limited() {
            return true;
        }
        let before = Instant::now();
        let went = (self.state.controls)
            .acquire(
                &self.state.topic,
                self.state.partition,
                records,
                &self.state.stop,
            )
            .await;
        if before.elapsed() >= Duration::from_millis(1) {
            *start = None;
        }
        went
    }

    /// Sleeps unless the partition is stopped first. Returns `false` when
    /// stopped.
    pub(super) async fn sleep(&self, delay: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.state.stop.cancelled() => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }

    /// `record`'s [`Times`], from its `event_time`: its origin-time header
    /// is read only with outputs or `origin_time` on. A valid header is
    /// the origin its outputs carry on, and with `origin_time` its age's
    /// event time; else (absent or unreadable) its event time is both.
    pub(super) fn times(&self, record: &Record, event_time: EventTime) -> Times {
        let origin_time = self.engine.settings.origin_time;
        if !origin_time && self.engine.outputs.is_none() {
            return Times {
                age: event_time,
                origin_ms: None,
                malformed: false,
            };
        }
        let header = OriginHeader::of(ORIGIN_TIME_HEADER, record);
        match header {
            OriginHeader::Valid(ms) => Times {
                age: if origin_time {
                    EventTime::Origin(ms)
                } else {
                    event_time
                },
                origin_ms: Some(ms),
                malformed: false,
            },
            _ => Times {
                age: event_time,
                origin_ms: event_time.millis(),
                malformed: header == OriginHeader::Malformed,
            },
        }
    }

    /// Where `record` came from when it was read from a retry tier (its
    /// dead-letter headers), and its event time: a tier record's is its
    /// original record's timestamp, unless an event-time header is
    /// configured (the header travels with the record).
    pub(super) fn origin_and_event_time(&self, record: &Record) -> (Option<Origin>, EventTime) {
        let header = self.engine.settings.event_time_header.as_deref();
        let origin =
            (self.engine.exhausted.tier_of(record.topic())).map(|_| Origin::of_tier_record(record));
        let event_time = match &origin {
            Some(o) if header.is_none() => EventTime::Record(o.timestamp),
            _ => EventTime::of(header, record),
        };
        (origin, event_time)
    }
}
