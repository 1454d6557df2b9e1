//! The judge's inputs (the rules' thresholds, one partition's reads) and
//! one partition's judgement, shared by the rules (`judge.rs`) and the
//! skew rules (`skew.rs`).

use std::time::Duration;

use crate::health::Replication;
use crate::monitor::report::{PartitionLag, PartitionOwner};
use crate::record::RecordTimestamp;

/// The thresholds the rules use (the builder's settings).
#[derive(Clone, Debug)]
pub(crate) struct Rules {
    pub(crate) window: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) lag_threshold: Duration,
    pub(crate) skew_share: f64,
    pub(crate) drain_target: Duration,
    pub(crate) current_replicas: Option<u32>,
}

/// What a cycle read about the record at a partition's committed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadRead {
    /// No read needed (no committed offset, or no lag).
    NotNeeded,
    /// The first record at or after `offset` (the committed offset, or the
    /// log start when that is higher) carried `timestamp`.
    Read {
        offset: i64,
        timestamp: RecordTimestamp,
    },
    /// The record could not be read in time.
    Unread,
    /// The probe read to the end without a record: only records a consumer
    /// never receives lie past the committed offset (transaction markers,
    /// aborted transactions under `read_committed`). Nothing waits.
    NothingReadable,
}

/// One partition as read in one cycle.
#[derive(Clone, Debug)]
pub(crate) struct Observation {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) committed: Option<i64>,
    pub(crate) log_start: i64,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable: i64,
    /// The end the lag counts to (LSO or high watermark).
    pub(crate) end: i64,
    pub(crate) head: HeadRead,
    /// The member owning the partition, when the brokers describe it.
    pub(crate) owner: Option<PartitionOwner>,
    /// The partition's replication, from the cycle's metadata.
    pub(crate) replication: Option<Replication>,
}

pub(super) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub(super) struct Judged {
    pub(super) row: PartitionLag,
    /// Records per second the committed offset and the log end advanced.
    pub(super) commit_rate: f64,
    pub(super) produce_rate: f64,
    /// The time lag fell over the window.
    pub(super) falling: bool,
    /// Twice the group's commit rhythm on the partition (`None` before it
    /// is known): a freeze shorter than this is the group's ordinary pause
    /// between commits.
    pub(super) rhythm2: Option<Duration>,
    /// The last stable offset moved in this cycle after standing behind
    /// the high watermark for `stall_after` or longer: a transaction open
    /// that long ended, and its records became readable at once.
    pub(super) released: bool,
}
