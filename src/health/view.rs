//! What health reads of the engine, as traits the engine implements: the
//! health code names no engine type, and holds the engine only weakly (the
//! way the OpenTelemetry SDK's periodic reader holds a
//! `Weak<dyn SdkProducer>`).

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;

use crate::health::partition::PartitionHealth;

/// Where one partition's consumption stands, read at one instant (under the
/// worker's completion-tracking lock, under which the worker updates all
/// three).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The next offset librdkafka will deliver: one past the last record
    /// it delivered, counting records still waiting in the partition's own
    /// queue. `None` before the first record.
    pub(crate) position: Option<i64>,
    /// The oldest record not yet completed: its offset and event time
    /// (milliseconds since the Unix epoch).
    pub(crate) head: Option<(i64, i64)>,
    /// The next offset after the contiguous run of completed records.
    pub(crate) completed: Option<i64>,
}

/// One assigned partition, as health sees it.
pub(crate) trait PartitionView: Send + Sync {
    /// The topic name.
    fn topic(&self) -> &Arc<str>;
    /// The partition number.
    fn partition(&self) -> i32;
    /// The partition's health state (statistics, anomalies, last success).
    fn health(&self) -> &PartitionHealth;
    /// The partition's metric attributes (`messaging.*`), built once.
    fn attributes(&self) -> &[KeyValue];
    /// Position, head of line and completed offset.
    fn progress(&self) -> Progress;
    /// The offset this member last committed for the partition, if any.
    fn committed(&self) -> Option<i64>;
    /// The record whose attempts ran out and that blocks the partition,
    /// if one does (with since when).
    fn blocked(&self) -> Option<crate::summary::BlockedRecord>;

    /// Whether the partition is still assigned to this member (`false`
    /// once revoked, lost or closed).
    fn is_assigned(&self) -> bool;

    /// Whether the head of the line waits for its due time (a record of a
    /// retry tier, `OnExhausted::RetryTopics`): waiting is what the
    /// partition is meant to do, not a stall.
    fn waiting_for_due_time(&self) -> bool {
        false
    }

    /// A retry tier's delay (zero for other partitions): its records wait
    /// this long by design, so its lag moves by the records that arrive in
    /// it without the consumer falling behind.
    fn due_delay(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether the application paused the partition (a control handle):
    /// not a stall either, and reported as such.
    fn paused_by_application(&self) -> bool {
        false
    }
}

/// The running engine, as health sees it.
pub(crate) trait EngineView: Send + Sync {
    /// The partitions assigned now.
    fn partitions(&self) -> Vec<Arc<dyn PartitionView>>;
    /// How many partitions are assigned now.
    fn assignment_size(&self) -> usize;
    /// How long ago the poll loop last polled librdkafka; `None` once it
    /// stopped polling on purpose (shutdown).
    fn poll_gap(&self) -> Option<Duration>;
}
