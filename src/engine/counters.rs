//! Run counters and the last committed offsets: what [`RunSummary`] reports.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::summary::{BlockedRecord, RunSummary, TopicPartition};

/// Run counters, for the summary (and the storm guard's window).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) failed_attempts: AtomicU64,
    /// Records whose first attempt failed.
    pub(crate) records_failed: AtomicU64,
    pub(crate) late_completions: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    /// Records moved to a retry tier.
    pub(crate) retried: AtomicU64,
    pub(crate) skipped: AtomicU64,
    /// Records shed by the stale-record policy.
    pub(crate) stale: AtomicU64,
    pub(crate) unassigned: AtomicU64,
    /// Records librdkafka could not read (skipped, never delivered).
    pub(crate) unreadable: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) commit_failures: AtomicU64,
    pub(crate) rebalances: AtomicU64,
    /// Records that stopped their partition, once each.
    pub(crate) blocked_records: AtomicU64,
    /// The partitions stopped at a record now (or when last seen).
    blocked: Mutex<BTreeMap<TopicPartition, BlockedRecord>>,
    /// The last offset committed per partition.
    committed: Mutex<BTreeMap<TopicPartition, i64>>,
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
    pub(crate) fn unassigned(&self, n: u64) {
        self.unassigned.fetch_add(n, Ordering::Relaxed);
    }

    /// Records succeeded and records failed so far (the storm guard's input).
    pub(crate) fn outcomes(&self) -> (u64, u64) {
        (
            self.succeeded.load(Ordering::Relaxed),
            self.records_failed.load(Ordering::Relaxed),
        )
    }

    /// `record` stopped `topic`/`partition`.
    pub(crate) fn blocked(&self, topic: &str, partition: i32, record: BlockedRecord) {
        self.blocked_records.fetch_add(1, Ordering::Relaxed);
        self.blocked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                TopicPartition {
                    topic: topic.to_owned(),
                    partition,
                },
                record,
            );
    }

    /// The record that stopped `topic`/`partition` at `offset` moved on
    /// (handled, parked or skipped).
    pub(crate) fn unblocked(&self, topic: &str, partition: i32, offset: i64) {
        let mut blocked = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        let key = TopicPartition {
            topic: topic.to_owned(),
            partition,
        };
        if blocked.get(&key).is_some_and(|r| r.offset == offset) {
            blocked.remove(&key);
        }
    }

    /// Records a successful commit of `offset`.
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

    /// The run's summary so far.
    pub(crate) fn summary(&self) -> RunSummary {
        RunSummary {
            records_received: self.received.load(Ordering::Relaxed),
            records_succeeded: self.succeeded.load(Ordering::Relaxed),
            failed_attempts: self.failed_attempts.load(Ordering::Relaxed),
            late_completions: self.late_completions.load(Ordering::Relaxed),
            records_dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            records_retried: self.retried.load(Ordering::Relaxed),
            records_skipped: self.skipped.load(Ordering::Relaxed),
            records_stale: self.stale.load(Ordering::Relaxed),
            records_unassigned: self.unassigned.load(Ordering::Relaxed),
            records_unreadable: self.unreadable.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            commit_failures: self.commit_failures.load(Ordering::Relaxed),
            rebalances: self.rebalances.load(Ordering::Relaxed),
            committed: self
                .committed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            records_blocked: self.blocked_records.load(Ordering::Relaxed),
            blocked: self
                .blocked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            shutdown_timed_out: false,
        }
    }
}
