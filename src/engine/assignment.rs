//! The partitions assigned to this member, and the gate that keeps commits
//! and revokes apart.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use crate::engine::partition::PartitionState;

/// Key of the partition map.
pub(crate) type PartitionKey = (Arc<str>, i32);

/// The assigned partitions, shared by the rebalance callbacks (which change
/// it), the poll loop, the committer, the statistics ingest and the health
/// view (which read it).
pub(crate) struct Assignment {
    partitions: Mutex<BTreeMap<PartitionKey, Arc<PartitionState>>>,
    /// Bumped on every assignment change, so the poll loop refreshes its cache.
    pub(crate) epoch: AtomicU64,
    /// Held while a commit's offsets are gathered and sent, and while a
    /// revoke marks partitions revoked: no commit that starts after a revoke
    /// can name the revoked partitions.
    pub(crate) commit_gate: Mutex<()>,
    /// Set once shutdown has committed its final offsets: callbacks during
    /// the close (a last revoke) must not commit or wait.
    pub(crate) closing: AtomicBool,
    /// Keeps a worker's seek apart from librdkafka's resume of the
    /// partitions it paused for a rebalance. librdkafka gives each
    /// partition operation (seek, pause, resume, fetch start and stop) a
    /// version when it is called and drops an operation whose version is
    /// older than one it already served: a seek called in the instant
    /// between the resume taking its version and queueing it would be
    /// served first and drop the resume (the partition stays paused until
    /// the next rebalance). librdkafka queues those resumes inside this
    /// member's `assign`/`unassign` calls (and their incremental forms),
    /// which run under [`assigning`](Self::assigning); a seek runs under
    /// [`seeking`](Self::seeking).
    reposition_gate: RwLock<()>,
}

impl Assignment {
    pub(crate) fn new() -> Self {
        Assignment {
            partitions: Mutex::new(BTreeMap::new()),
            epoch: AtomicU64::new(0),
            commit_gate: Mutex::new(()),
            closing: AtomicBool::new(false),
            reposition_gate: RwLock::new(()),
        }
    }

    /// Held around a call that changes librdkafka's assignment (see
    /// `reposition_gate`). Blocks until running seeks return (each is
    /// bounded by its timeout).
    pub(crate) fn assigning(&self) -> RwLockWriteGuard<'_, ()> {
        self.reposition_gate
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Held around a worker's seek (see `reposition_gate`).
    pub(crate) fn seeking(&self) -> RwLockReadGuard<'_, ()> {
        self.reposition_gate
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn partitions(&self) -> MutexGuard<'_, BTreeMap<PartitionKey, Arc<PartitionState>>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A snapshot of the assigned partitions.
    pub(crate) fn assigned(&self) -> Vec<Arc<PartitionState>> {
        self.partitions().values().cloned().collect()
    }

    /// `true` once shutdown committed its final offsets.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
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
}
