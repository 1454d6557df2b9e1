//! The group monitor's metric names (`crate::monitor`), re-exported by
//! [`crate::metrics`] beside the consumer's ones in `names.rs`.

// Intra-doc links name the shared attributes of `names.rs`.
#[allow(unused_imports)]
use super::names::*;

// Gauges observed from the monitor's latest report at each collection, per
// watched group and partition, read from the brokers (not from inside a
// consumer). Same attributes as the in-process metrics, so one dashboard
// serves both.

/// Offset lag seen from outside: the end the group reads to (the last
/// stable offset under `read_committed`, the high watermark otherwise)
/// minus the group's committed offset, deleted records included.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{message}` | partition attributes |
///
/// Observed from the monitor's latest cycle (ListOffsets and OffsetFetch);
/// absent for a partition without a committed offset.
pub const MONITOR_LAG: &str = "fresh_consumer.monitor.lag";

/// Time lag: the monitor's clock minus the timestamp of the record at the
/// group's committed offset (the oldest record the group has not
/// processed); 0 when the offset lag is 0 or the timestamp is in the
/// future. The primary freshness signal, and it keeps growing when the
/// consumers are dead.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | partition attributes, [`TIMESTAMP_TYPE`] |
///
/// [`TIMESTAMP_TYPE`] is `create_time`, `log_append_time` or `none` (lag
/// 0, nothing read). Absent when unknown: no committed offset, no usable
/// timestamp (counted in [`MONITOR_TIMESTAMP_MISSING`]), or the record was
/// not read within the read timeout.
pub const MONITOR_TIME_LAG: &str = "fresh_consumer.monitor.time_lag";

/// Time since the group's committed offset for the partition last changed,
/// as seen by the monitor (a lower bound, from the monitor's start, until
/// it changes once).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | partition attributes |
pub const MONITOR_COMMIT_AGE: &str = "fresh_consumer.monitor.commit.age";

/// Retention margin in records: the committed offset minus the log start
/// offset; negative when retention deleted records the group had not read
/// (out of range). In-process: [`PARTITION_RETENTION_MARGIN`].
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{message}` | partition attributes |
pub const MONITOR_RETENTION_MARGIN: &str = "fresh_consumer.monitor.retention.margin";

/// Estimated time until the log start passes the committed offset: the
/// margin divided by how much faster the log start moved than the
/// committed offset over the monitor's window (the estimator of the
/// in-process [`PARTITION_RETENTION_ETA`]).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | partition attributes |
///
/// Absent while the log start is not gaining on the committed offset (it
/// did not move over the window, or the commits move at least as fast), and
/// once the margin is not positive.
pub const MONITOR_RETENTION_ETA: &str = "fresh_consumer.monitor.retention.eta";

/// The partition's status as seen by the monitor, as a state set: one point
/// per [`STATUS`] value `ok`, `lagging`, `stalled`, `out_of_range`,
/// `no_committed_offset`, `time_lag_unknown`, 1 for the current one (see
/// [`LagStatus`](crate::monitor::LagStatus)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `1` | partition attributes, [`STATUS`] |
pub const MONITOR_PARTITION_STATUS: &str = "fresh_consumer.monitor.partition.status";

/// The group's diagnosis as a state set: one point per [`DIAGNOSIS`] value,
/// 1 for the current one (see [`Diagnosis`](crate::monitor::Diagnosis)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `1` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`], [`DIAGNOSIS`] |
pub const MONITOR_GROUP_DIAGNOSIS: &str = "fresh_consumer.monitor.group.diagnosis";

/// Estimated time to drain the group's backlog at the recent commit rate
/// (summed offset lag over commit rate minus produce rate, over the
/// window).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// Absent while the group is not gaining on the log end.
pub const MONITOR_DRAIN_TIME: &str = "fresh_consumer.monitor.group.drain_time";

/// Replicas suggested for a `consumer_bound` group: never above the
/// partition count.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{replica}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// Absent unless the diagnosis is `consumer_bound` and the current replica
/// count was given ([`GroupMonitor::current_replicas`](crate::monitor::GroupMonitor::current_replicas));
/// withheld for `skewed`, `stuck` and `dead`.
pub const MONITOR_REPLICAS_SUGGESTED: &str = "fresh_consumer.monitor.group.replicas.suggested";

/// Records read at a group's committed offsets that had no usable
/// timestamp (their time lag is unknown), each record counted once.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// Was `fresh_consumer.monitor.timestamp.missing` before 0.2.0.
pub const MONITOR_TIMESTAMP_MISSING: &str = "fresh_consumer.monitor.timestamp.missing.messages";

/// Records read at a group's committed offsets whose timestamp was later
/// than the monitor's clock (their time lag is reported as 0), each record
/// counted once.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// Was `fresh_consumer.monitor.timestamp.future` before 0.2.0.
pub const MONITOR_TIMESTAMP_FUTURE: &str = "fresh_consumer.monitor.timestamp.future.messages";

/// Monitor cycles run; the failed ones carry [`ERROR_TYPE`] = `kafka` (a
/// read failed), `unknown_topic` (a watched topic disappeared) or
/// `reader_panicked`.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{cycle}` | [`MESSAGING_SYSTEM`], [`ERROR_TYPE`] on failure |
pub const MONITOR_CYCLES: &str = "fresh_consumer.monitor.cycles";

/// The KEDA external scaler's holds, as a state set per group it was asked
/// about: one point per [`SCALE_HOLD_REASON`] (`rebalancing`, `skewed`,
/// `stuck`, `dead`), 1 for the reason it holds the group's replica count
/// at its last answer, all 0 while it does not hold (see
/// [`monitor::scale`](crate::monitor::scale)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `1` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`], [`SCALE_HOLD_REASON`] |
pub const MONITOR_SCALE_HELD: &str = "fresh_consumer.monitor.scale.held";

/// The replica count the KEDA external scaler last answered for a group
/// (the metric value KEDA's HPA targets at 1 per replica).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{replica}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
pub const MONITOR_SCALE_REPLICAS: &str = "fresh_consumer.monitor.scale.replicas";

/// Attribute `fresh_consumer.diagnosis`: a group diagnosis, `no_offsets`,
/// `idle`, `dead`, `stuck`, `skewed`, `consumer_bound`, `keeping_up` or
/// `open_transaction`.
pub const DIAGNOSIS: &str = "fresh_consumer.diagnosis";
