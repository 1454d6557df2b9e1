//! What a run did, returned when the consumer stops.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// A topic and partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic name.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
}

/// A record that stopped its partition: its attempts ran out (or its
/// handler returned a [`permanent`](crate::permanent) error) under
/// [`OnExhausted::Block`](crate::OnExhausted::Block) (the default) or the
/// storm guard, or its dead-letter or retry-tier write keeps failing.
/// Nothing after it in its partition is committed until it moves on: the
/// worker retries it at the capped backoff
/// ([`retry_backoff`](crate::FreshConsumer::retry_backoff)'s maximum).
///
/// Reported in [`RunSummary::blocked`], in the health report's
/// [`HealthReason::BlockedByFailingRecord`](crate::health::HealthReason::BlockedByFailingRecord),
/// counted in [`BLOCKED_MESSAGES`](crate::metrics::BLOCKED_MESSAGES), and
/// logged at ERROR (on stderr when no `tracing` subscriber is installed).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockedRecord {
    /// The record's offset: the partition's committed offset stays at or
    /// below it.
    pub offset: i64,
    /// Handler attempts made before the partition stopped (the first time;
    /// the capped-backoff retries that follow are not counted here).
    pub attempts: u32,
    /// The last error, with its sources (`outer: inner`).
    pub error: String,
    /// When the partition stopped at the record.
    pub since: SystemTime,
}

/// What a run did, returned by [`FreshConsumer::run_until`](crate::FreshConsumer::run_until).
///
/// Every record received ends in exactly one of the record counters:
/// `records_received = records_succeeded + records_dead_lettered +
/// records_retried + records_skipped + records_stale + late_completions +
/// records_unassigned`, except for
/// records whose handler was still running when
/// [`shutdown_timeout`](crate::FreshConsumer::shutdown_timeout) ran out
/// (`shutdown_timed_out` is then `true`).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RunSummary {
    /// Records taken from librdkafka (redeliveries after a rebalance count again).
    pub records_received: u64,
    /// Records whose handler succeeded.
    pub records_succeeded: u64,
    /// Handler attempts that failed (returned `Err` or panicked).
    pub failed_attempts: u64,
    /// Handlers that succeeded after their partition was revoked: their
    /// results were dropped and the records are redelivered to the new owner.
    pub late_completions: u64,
    /// Records received but dropped unhandled because their partition was
    /// revoked or lost, or the consumer shut down: fetched after the revoke,
    /// read ahead or waiting in the partition's buffer, or stopped between
    /// retries. Never committed by this member, so redelivered.
    pub records_unassigned: u64,
    /// Records whose attempts ran out and that were written to the
    /// dead-letter topic (acknowledged by the broker) and committed past.
    pub records_dead_lettered: u64,
    /// Records whose attempts ran out and that were written to a retry tier
    /// (acknowledged by the broker) and committed past
    /// ([`OnExhausted::RetryTopics`](crate::OnExhausted::RetryTopics)). The
    /// same record read back from the tier is received again, so it counts
    /// once per tier it passed.
    pub records_retried: u64,
    /// Records whose attempts ran out and that were given up and committed
    /// past ([`OnExhausted::SkipAndCommitPast`](crate::OnExhausted::SkipAndCommitPast)).
    pub records_skipped: u64,
    /// Records not handed to the handler because their event age was above
    /// [`max_record_age`](crate::FreshConsumer::max_record_age): skipped, or
    /// written to the dead-letter topic or the stale-record topic
    /// (acknowledged by the broker), and committed past.
    pub records_stale: u64,
    /// Records librdkafka could not read: their record batch failed the
    /// CRC check (`check.crcs`). They never reach the handler and are not
    /// in `records_received`; the partition moves past them, so they are
    /// lost to the consumer group. Each is logged at ERROR with its offset.
    /// Counted once per record batch (librdkafka reports the batch's first
    /// offset; a batch produced by one `produce` call of a batching producer
    /// may hold several records).
    pub records_unreadable: u64,
    /// Successful offset commits (each may cover several partitions).
    pub commits: u64,
    /// Failed offset commits; their offsets were committed again later, or
    /// were left to be redelivered.
    pub commit_failures: u64,
    /// Rebalance events seen (assignments, revocations, losses).
    pub rebalances: u64,
    /// Records that stopped their partition (see [`BlockedRecord`]),
    /// counted once per record when it first blocked.
    pub records_blocked: u64,
    /// The partitions that were stopped at a record when the run ended (or
    /// when this member lost them in a rebalance while stopped), with the
    /// record. Empty when every blocked record moved on. A non-empty map
    /// means records wait behind a record that never succeeded: fix the
    /// cause, or give failing records a dead-letter topic
    /// (`.on_exhausted(OnExhausted::DeadLetter(DeadLetter::default()))`,
    /// see [`OnExhausted::DeadLetter`](crate::OnExhausted::DeadLetter)).
    pub blocked: BTreeMap<TopicPartition, BlockedRecord>,
    /// The last offset this member committed per partition: the next offset
    /// to read (Kafka's committed offset), so all records below it are done.
    pub committed: BTreeMap<TopicPartition, i64>,
    /// `true` when shutdown hit [`shutdown_timeout`](crate::FreshConsumer::shutdown_timeout)
    /// before every step finished (handlers, final commit, metric flush,
    /// leaving the group).
    pub shutdown_timed_out: bool,
}
