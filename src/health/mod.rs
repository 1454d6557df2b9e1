//! Partition health: offset lag, head-of-line age, stalled partitions,
//! offset anomalies, rebalances, and a cheap [`HealthSnapshot`] for probes.
//!
//! # Signals and their sources
//!
//! Every signal is per **assigned** partition (a partition this member no
//! longer owns disappears from the gauges and the snapshot):
//!
//! | signal | source | staleness |
//! |---|---|---|
//! | committed offset | the library's own commits; before the first one, the group's committed offset read at assignment | exact for this member's commits |
//! | processed offset | the library's completion tracking (next offset after the contiguous run of succeeded records) | exact |
//! | high watermark, last stable offset (the end lag counts to under `read_committed`), log start offset | librdkafka statistics (`hi_offset`, `ls_offset`, `lo_offset`), or the library's own position when that is ahead | up to `statistics.interval.ms` + 1 s (the poll tick); for a partition that does not fetch (paused, fetch queue full) refreshed by a ListOffsets query every statistics interval (at least 1 s) |
//! | head-of-line age | the event time of the oldest fetched record not yet completed; when none is waiting but statistics show records beyond the position, the time since a report first showed them (a lower bound) | exact for fetched records |
//! | replication (replicas, in-sync replicas, brokers; [`HealthReason::UnderReplicated`]) | a Metadata request per assigned topic by the health thread | 30 s; within 5 s of an assignment |
//! | stall age, status | evaluated from the values above on each read, and by the health thread every 100 ms for partitions that were not quiet (caught up, `ok`) at their last evaluation, every second (a tenth of `stall_after` or `no_success_after` if shorter) for all | 100 ms; a stall that starts from caught-up up to 1 s late |
//!
//! The lag of a partition is **never summed** by the library: alert on the
//! maximum over partitions.
//!
//! # Status per partition
//!
//! In the spirit of Burrow's evaluation, but from the member's own commits:
//!
//! - [`PartitionStatus::Ok`]: nothing below.
//! - [`PartitionStatus::Warn`]: over [`HealthThresholds::lag_growth_window`]
//!   the committed offset advanced but the lag grew at every sample (eight
//!   per window), and by more records than arrive in the commit interval +
//!   the statistics interval + 0.5 s at the rate observed over the window.
//!   A consumer that keeps up sees its sampled lag rise and fall by that
//!   much on its own (its commits trail the processed position by up to one
//!   commit interval, the high watermark from statistics is up to one
//!   statistics interval old, a fetch waits up to `fetch.wait.max.ms`), so
//!   smaller growth is noise; a consumer losing less than that per window
//!   is not flagged by this rule (its time lag and the freshness objective
//!   still show it).
//! - [`PartitionStatus::Stall`]: records wait (lag above zero) and neither
//!   the committed offset nor the processed position moved for
//!   [`HealthThresholds::stall_after`] (the head of the line is stuck).
//! - [`PartitionStatus::Stop`]: completed records waited for a commit for
//!   [`HealthThresholds::stall_after`] (commits are not landing: a
//!   rebalance loop, a lost coordinator); or the partition was stopped by
//!   [`RetentionOverrunPolicy::Fail`]. A handler that hung and returned is
//!   neither: the commit that follows within the commit interval ends it.
//! - [`PartitionStatus::Rewind`]: the committed offset went backwards within
//!   the last [`HealthThresholds::lag_growth_window`].
//!
//! A partition the rules above call `ok` but that carries a reason (a
//! retention overrun resumed by policy, a record blocking it, no success
//! while records wait) reports `warn`, or `stall` when the reason makes it
//! unhealthy: the status and its reasons always agree, in the snapshot and
//! in [`PARTITION_STATUS`](crate::metrics::PARTITION_STATUS).

mod connection;
mod gauges;
pub(crate) mod hub;
mod judge;
pub(crate) mod partition;
mod report;
pub(crate) mod retention;
pub(crate) mod thresholds;
pub(crate) mod view;

pub use hub::HealthHandle;
pub(crate) use judge::EVAL_TICK;
pub use report::{
    ConsumerState, HealthReason, HealthSnapshot, HealthStatus, PartitionReport, PartitionStatus,
    Replication,
};
pub use thresholds::{
    DEFAULT_COORDINATOR_LOST_AFTER, DEFAULT_LAG_GROWTH_WINDOW, DEFAULT_NO_SUCCESS_AFTER,
    DEFAULT_REPORT_EVENTS_FOR, DEFAULT_STALL_AFTER, DEFAULT_STATISTICS_INTERVAL, HealthThresholds,
    RetentionOverrunPolicy,
};
