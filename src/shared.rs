//! State shared by the poll loop, the partition workers, the committer thread,
//! the watchdog and librdkafka's callbacks.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::commit::CommitCmd;
use crate::dead_letter::DeadLetterWriter;
use crate::failure::{OnExhausted, RetryPolicy, StormGuard};
use crate::instruments::Instruments;
use crate::ordering::ProcessingOrder;
use crate::partition::PartitionState;
use crate::summary::TopicPartition;
use crate::watchdog::PollClock;

/// Messages from workers to the poll loop.
pub(crate) enum Ctrl {
    /// A paused partition's buffer drained to half: refill it and resume.
    Drained(Arc<PartitionState>),
}

/// The decision for a record whose attempts ran out.
pub(crate) enum Decision<'a> {
    Skip,
    DeadLetter(&'a DeadLetterWriter),
    /// Block the partition; `storm` when the storm guard turned a
    /// dead-letter decision into this.
    Block {
        storm: bool,
    },
}

/// Key of the partition map.
pub(crate) type PartitionKey = (Arc<str>, i32);

pub(crate) struct Shared {
    pub(crate) max_buffered_records: usize,
    /// Split each partition's queue off the main queue at assignment.
    pub(crate) split_partition_queues: bool,
    pub(crate) commit_batch_records: usize,
    pub(crate) processing_order: ProcessingOrder,
    pub(crate) retry: RetryPolicy,
    pub(crate) handler_timeout: Option<Duration>,
    /// The dead-letter writer, with [`OnExhausted::DeadLetter`].
    pub(crate) dead_letter: Option<DeadLetterWriter>,
    pub(crate) on_exhausted: OnExhausted,
    storm_guard: StormGuard,
    /// Samples of (time, records succeeded, records failed) for the storm
    /// guard, oldest first; taken by the committer thread.
    storm_samples: Mutex<VecDeque<(Instant, u64, u64)>>,
    storm_active: AtomicBool,
    pub(crate) revoke_timeout: Duration,
    pub(crate) event_time_header: Option<String>,
    /// Whether records are built with their headers (`read_headers`).
    pub(crate) read_headers: bool,
    pub(crate) runtime: Handle,
    pub(crate) instruments: Instruments,
    /// Cancelled when the consumer shuts down; every partition's stop token
    /// is a child of it.
    pub(crate) shutdown: CancellationToken,
    /// Set once shutdown has committed its final offsets: callbacks during
    /// the close (a last revoke) must not commit or wait.
    pub(crate) closing: AtomicBool,
    /// Assigned partitions.
    partitions: Mutex<BTreeMap<PartitionKey, Arc<PartitionState>>>,
    /// Bumped on every assignment change, so the poll loop refreshes its cache.
    pub(crate) epoch: AtomicU64,
    /// Held while a commit's offsets are gathered and sent, and while a
    /// revoke marks partitions revoked: no commit that starts after a revoke
    /// can name the revoked partitions.
    pub(crate) commit_gate: Mutex<()>,
    pub(crate) commit_tx: std::sync::mpsc::Sender<CommitCmd>,
    completed_since_commit: AtomicUsize,
    pub(crate) ctrl_tx: mpsc::UnboundedSender<Ctrl>,
    pub(crate) counters: Counters,
    /// The last offset committed per partition, for the run summary.
    pub(crate) committed: Mutex<BTreeMap<TopicPartition, i64>>,
    pub(crate) poll_clock: PollClock,
    /// Wall-clock time for event ages, derived from `Instant` reads.
    pub(crate) wall_clock: crate::watchdog::WallClock,
    /// Partition health: statistics, evaluation, offset resets.
    pub(crate) health: Arc<crate::health::HealthHub>,
}

/// Run counters, for the summary.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) failed_attempts: AtomicU64,
    /// Records whose first attempt failed.
    pub(crate) records_failed: AtomicU64,
    pub(crate) late_completions: AtomicU64,
    pub(crate) unassigned: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) commit_failures: AtomicU64,
    pub(crate) rebalances: AtomicU64,
}

impl Counters {
    pub(crate) fn succeeded(&self, n: u64) {
        self.succeeded.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn record_failed(&self) {
        self.records_failed.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn failed_attempt(&self) {
        self.failed_attempts.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn late_completion(&self) {
        self.late_completions.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) struct SharedInit {
    pub(crate) max_buffered_records: usize,
    pub(crate) split_partition_queues: bool,
    pub(crate) commit_batch_records: usize,
    pub(crate) processing_order: ProcessingOrder,
    pub(crate) retry: RetryPolicy,
    pub(crate) handler_timeout: Option<Duration>,
    pub(crate) dead_letter: Option<DeadLetterWriter>,
    pub(crate) on_exhausted: OnExhausted,
    pub(crate) storm_guard: StormGuard,
    pub(crate) revoke_timeout: Duration,
    pub(crate) event_time_header: Option<String>,
    /// Whether records are built with their headers (`read_headers`).
    pub(crate) read_headers: bool,
    pub(crate) runtime: Handle,
    pub(crate) instruments: Instruments,
    pub(crate) commit_tx: std::sync::mpsc::Sender<CommitCmd>,
    pub(crate) ctrl_tx: mpsc::UnboundedSender<Ctrl>,
    pub(crate) poll_clock: PollClock,
    pub(crate) health: Arc<crate::health::HealthHub>,
}

impl Shared {
    pub(crate) fn new(i: SharedInit) -> Self {
        Shared {
            max_buffered_records: i.max_buffered_records,
            split_partition_queues: i.split_partition_queues,
            commit_batch_records: i.commit_batch_records,
            processing_order: i.processing_order,
            retry: i.retry,
            handler_timeout: i.handler_timeout,
            dead_letter: i.dead_letter,
            on_exhausted: i.on_exhausted,
            storm_guard: i.storm_guard,
            storm_samples: Mutex::new(VecDeque::from([(Instant::now(), 0, 0)])),
            storm_active: AtomicBool::new(false),
            revoke_timeout: i.revoke_timeout,
            event_time_header: i.event_time_header,
            read_headers: i.read_headers,
            runtime: i.runtime,
            instruments: i.instruments,
            shutdown: CancellationToken::new(),
            closing: AtomicBool::new(false),
            partitions: Mutex::new(BTreeMap::new()),
            epoch: AtomicU64::new(0),
            commit_gate: Mutex::new(()),
            commit_tx: i.commit_tx,
            completed_since_commit: AtomicUsize::new(0),
            ctrl_tx: i.ctrl_tx,
            counters: Counters::default(),
            committed: Mutex::new(BTreeMap::new()),
            poll_clock: i.poll_clock,
            wall_clock: crate::watchdog::WallClock::new(),
            health: i.health,
        }
    }

    pub(crate) fn partitions(&self) -> MutexGuard<'_, BTreeMap<PartitionKey, Arc<PartitionState>>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A snapshot of the assigned partitions.
    pub(crate) fn assigned(&self) -> Vec<Arc<PartitionState>> {
        self.partitions().values().cloned().collect()
    }

    /// What to do with a record whose attempts ran out.
    pub(crate) fn decide(&self) -> Decision<'_> {
        match (&self.on_exhausted, &self.dead_letter) {
            (OnExhausted::SkipAndCommitPast, _) => Decision::Skip,
            (OnExhausted::DeadLetter(_), Some(writer)) => {
                if self.storm_tripped() {
                    Decision::Block { storm: true }
                } else {
                    Decision::DeadLetter(writer)
                }
            }
            _ => Decision::Block { storm: false },
        }
    }

    /// Takes a storm-guard sample (called about once per commit interval)
    /// and drops samples older than the window.
    pub(crate) fn storm_sample(&self) {
        if !self.storm_guard.enabled {
            return;
        }
        let now = Instant::now();
        let sample = (
            now,
            self.counters.succeeded.load(Ordering::Relaxed),
            self.counters.records_failed.load(Ordering::Relaxed),
        );
        let mut samples = self.storm_samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back(sample);
        // Keep one sample at or before the window's start as the baseline.
        while samples.len() > 2 && now.duration_since(samples[1].0) >= self.storm_guard.window {
            samples.pop_front();
        }
    }

    /// `true` while more than the guard's share of the window's records
    /// failed. Logs and records the transitions.
    fn storm_tripped(&self) -> bool {
        let g = &self.storm_guard;
        if !g.enabled {
            return false;
        }
        let succeeded = self.counters.succeeded.load(Ordering::Relaxed);
        let failed = self.counters.records_failed.load(Ordering::Relaxed);
        let (base_ok, base_failed) = {
            let samples = self.storm_samples.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            samples
                .iter()
                .rev()
                .find(|(t, _, _)| now.duration_since(*t) >= g.window)
                .or(samples.front())
                .map(|&(_, ok, f)| (ok, f))
                .unwrap_or((0, 0))
        };
        let ok = succeeded.saturating_sub(base_ok);
        let bad = failed.saturating_sub(base_failed);
        let total = ok + bad;
        let tripped = total >= g.min_records && bad as f64 > g.max_failure_ratio * total as f64;
        let was = self.storm_active.swap(tripped, Ordering::AcqRel);
        if tripped != was {
            self.instruments.storm_guard(tripped);
            if tripped {
                tracing::error!(
                    failed = bad,
                    finished = total,
                    window = ?g.window,
                    max_failure_ratio = g.max_failure_ratio,
                    "storm guard tripped: too many recent records fail; blocking instead of dead-lettering until the failure share falls"
                );
            } else {
                tracing::warn!(
                    failed = bad,
                    finished = total,
                    "storm guard cleared: dead-lettering resumes"
                );
            }
        }
        tripped
    }

    /// Counts a completion towards the count-triggered commit.
    /// `n` more records completed: asks for a commit when the count since
    /// the last commit reaches `commit_batch_records`.
    pub(crate) fn records_completed(&self, n: usize) {
        let before = self.completed_since_commit.fetch_add(n, Ordering::Relaxed);
        if before < self.commit_batch_records && before + n >= self.commit_batch_records {
            let _ = self.commit_tx.send(CommitCmd::Now);
        }
    }

    pub(crate) fn reset_completed(&self) {
        self.completed_since_commit.store(0, Ordering::Relaxed);
    }

    /// Adds newly assigned partitions (spawning their workers is the caller's).
    pub(crate) fn insert(&self, state: Arc<PartitionState>) {
        let key = (Arc::clone(&state.topic), state.partition);
        let old = self.partitions().insert(key, state);
        if let Some(old) = old {
            old.revoked.store(true, Ordering::Release);
            old.stop.cancel();
        }
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Marks partitions revoked and forgets them. Takes the commit gate (for
    /// at most `gate_wait`) so no commit that starts afterwards names them.
    pub(crate) fn remove(&self, states: &[Arc<PartitionState>], gate_wait: Duration) {
        let deadline = Instant::now() + gate_wait;
        let gate = loop {
            match self.commit_gate.try_lock() {
                Ok(g) => break Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => break Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => break None,
            }
        };
        if gate.is_none() {
            tracing::warn!(
                "a commit is still in flight while partitions are revoked; it was sent before the revoke"
            );
        }
        let mut map = self.partitions();
        for s in states {
            s.revoked.store(true, Ordering::Release);
            s.stop.cancel();
            let key = (Arc::clone(&s.topic), s.partition);
            if map.get(&key).is_some_and(|cur| Arc::ptr_eq(cur, s)) {
                map.remove(&key);
            }
        }
        drop(map);
        drop(gate);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Records a successful commit of `offset` for the summary.
    pub(crate) fn note_committed(&self, topic: &str, partition: i32, offset: i64) {
        self.committed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                TopicPartition {
                    topic: topic.to_owned(),
                    partition,
                },
                offset,
            );
    }
}
