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
//! | high watermark, log start offset | librdkafka statistics (`hi_offset`, `lo_offset`), or the library's own position when that is ahead | up to `statistics.interval.ms` + 1 s (the poll tick), more while the partition is paused by backpressure (a paused partition does not fetch) |
//! | head-of-line age | the event time of the oldest fetched record not yet completed; when none is waiting but statistics show records beyond the position, the time since a report first showed them (a lower bound) | exact for fetched records |
//! | stalled duration, status | evaluated every 100 ms (and on each read) from the values above | 100 ms |
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
//!   the committed offset advanced but the lag grew at every sample.
//! - [`PartitionStatus::Stall`]: the committed offset has not advanced for
//!   [`HealthThresholds::stall_after`] while the lag is above zero, and no
//!   further record completed either (the head of the line is stuck).
//! - [`PartitionStatus::Stop`]: no commit for
//!   [`HealthThresholds::stall_after`] while records wait although records
//!   did complete (commits are not landing: a rebalance loop, a lost
//!   coordinator); or the partition was stopped by
//!   [`RetentionOverrunPolicy::Fail`].
//! - [`PartitionStatus::Rewind`]: the committed offset went backwards within
//!   the last [`HealthThresholds::lag_growth_window`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter, ObservableGauge};
use rdkafka::Offset;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, ConsumerContext};

use crate::config::FreshConsumer;
use crate::error::ConfigError;
use crate::metrics::*;
use crate::partition::PartitionState;
use crate::record::Record;
use crate::reset::{AnomalyKind, NewPartitionStart, OffsetAnomaly, Request};
use crate::shared::Shared;
use crate::stats::PartitionStats;

/// Default for [`FreshConsumer::statistics_interval`]: librdkafka reports
/// its statistics every second.
pub const DEFAULT_STATISTICS_INTERVAL: Duration = Duration::from_secs(1);
/// Default for [`HealthThresholds::stall_after`].
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(60);
/// Default for [`HealthThresholds::no_success_after`].
pub const DEFAULT_NO_SUCCESS_AFTER: Duration = Duration::from_secs(60);
/// Default for [`HealthThresholds::lag_growth_window`].
pub const DEFAULT_LAG_GROWTH_WINDOW: Duration = Duration::from_secs(120);
/// Default for [`HealthThresholds::report_events_for`].
pub const DEFAULT_REPORT_EVENTS_FOR: Duration = Duration::from_secs(600);

/// How often the health thread evaluates the partitions.
const EVAL_TICK: Duration = Duration::from_millis(100);

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

/// What the library does when a partition's offset is out of range when it
/// is assigned or while it is consumed: below the log start offset (a
/// **retention overrun**: records were deleted before the group processed
/// them) or above the high watermark (the topic was recreated).
///
/// Either way the anomaly is counted (`fresh_consumer.offset.resets`; the
/// records lost in `fresh_consumer.retention.overrun.messages`), logged at
/// ERROR with the partition, the offset and the log start offset, and
/// reported by [`HealthHandle::snapshot`]. The library never moves a
/// partition silently: librdkafka runs with `auto.offset.reset=error`, and
/// your `auto.offset.reset` only decides where a partition **without** a
/// committed offset starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetentionOverrunPolicy {
    /// Resume at the earliest record that still exists (the log start
    /// offset). The default: nothing more is skipped than retention already
    /// deleted.
    #[default]
    Earliest,
    /// Stop consuming the partition and report it unhealthy
    /// ([`HealthReason::RetentionOverrun`] with this policy), so an operator
    /// decides. The committed offset stays where it was.
    Fail,
    /// Skip to the high watermark (opt-in): everything up to the newest
    /// record is skipped, and the number is logged.
    Latest,
}

impl RetentionOverrunPolicy {
    /// `earliest`, `fail` or `latest`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionOverrunPolicy::Earliest => "earliest",
            RetentionOverrunPolicy::Fail => "fail",
            RetentionOverrunPolicy::Latest => "latest",
        }
    }
}

/// Thresholds of the health evaluation. Build from `default()` and the
/// `with_*` setters; pass to [`FreshConsumer::health_thresholds`].
///
/// ```
/// use std::time::Duration;
/// use fresh_consumer::HealthThresholds;
///
/// let t = HealthThresholds::default()
///     .with_stall_after(Duration::from_secs(30))
///     .with_no_success_after(Duration::from_secs(45));
/// assert_eq!(t.stall_after, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthThresholds {
    /// A partition whose committed offset has not advanced for this long
    /// while its lag is above zero is [`PartitionStatus::Stall`] (or
    /// [`PartitionStatus::Stop`] when records completed but were not
    /// committed) and unhealthy. Defaults to 60 s.
    pub stall_after: Duration,
    /// A partition with lag above zero and no record that succeeded for
    /// this long is unhealthy ([`HealthReason::NoSuccess`]), even when its
    /// committed offset advances (records parked rather than handled).
    /// Defaults to 60 s.
    pub no_success_after: Duration,
    /// The window over which a growing lag makes a partition
    /// [`PartitionStatus::Warn`], and for which a rewind of the committed
    /// offset is reported ([`PartitionStatus::Rewind`]). Defaults to 120 s.
    pub lag_growth_window: Duration,
    /// How long past events stay in the snapshot: a retention overrun the
    /// partition recovered from, a committed offset above the high
    /// watermark, `max.poll.interval.ms` exceeded. Defaults to 10 min.
    pub report_events_for: Duration,
}

impl Default for HealthThresholds {
    fn default() -> Self {
        HealthThresholds {
            stall_after: DEFAULT_STALL_AFTER,
            no_success_after: DEFAULT_NO_SUCCESS_AFTER,
            lag_growth_window: DEFAULT_LAG_GROWTH_WINDOW,
            report_events_for: DEFAULT_REPORT_EVENTS_FOR,
        }
    }
}

impl HealthThresholds {
    /// Sets [`stall_after`](Self::stall_after).
    #[must_use]
    pub fn with_stall_after(mut self, d: Duration) -> Self {
        self.stall_after = d;
        self
    }

    /// Sets [`no_success_after`](Self::no_success_after).
    #[must_use]
    pub fn with_no_success_after(mut self, d: Duration) -> Self {
        self.no_success_after = d;
        self
    }

    /// Sets [`lag_growth_window`](Self::lag_growth_window).
    #[must_use]
    pub fn with_lag_growth_window(mut self, d: Duration) -> Self {
        self.lag_growth_window = d;
        self
    }

    /// Sets [`report_events_for`](Self::report_events_for).
    #[must_use]
    pub fn with_report_events_for(mut self, d: Duration) -> Self {
        self.report_events_for = d;
        self
    }
}

/// Overall health, ordered by severity (`Healthy < Degraded < Unhealthy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HealthStatus {
    /// Nothing to report.
    Healthy,
    /// Something to look at, but records are being processed: a lag that
    /// keeps growing, a past retention overrun, a rewind, a partition
    /// blocked by a failing record for less than `stall_after`, a consumer
    /// not started yet.
    Degraded,
    /// Records are not being processed: a stalled or stopped partition, a
    /// partition stopped by the fail policy, no success while records wait,
    /// a poll loop stuck past `max.poll.interval.ms`, a stopped consumer.
    Unhealthy,
}

impl HealthStatus {
    /// `healthy`, `degraded` or `unhealthy`.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Degraded => "degraded",
            HealthStatus::Unhealthy => "unhealthy",
        }
    }
}

impl fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A partition's status, from the member's own commits (see the
/// [module documentation](self)). Exported as
/// [`PARTITION_STATUS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PartitionStatus {
    /// Committing and keeping up.
    Ok,
    /// Committed offsets advance but the lag keeps growing.
    Warn,
    /// Committed offset frozen while the lag is above zero, and nothing
    /// completes: the head of the line is stuck.
    Stall,
    /// No commit for longer than the window while records wait (records
    /// complete but their commits do not land), or stopped by
    /// [`RetentionOverrunPolicy::Fail`].
    Stop,
    /// The committed offset went backwards.
    Rewind,
}

impl PartitionStatus {
    /// Every status, in the order of the status gauge's points.
    pub const ALL: [PartitionStatus; 5] = [
        PartitionStatus::Ok,
        PartitionStatus::Warn,
        PartitionStatus::Stall,
        PartitionStatus::Stop,
        PartitionStatus::Rewind,
    ];

    /// `ok`, `warn`, `stall`, `stop` or `rewind`: the value of the
    /// [`STATUS`] attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionStatus::Ok => "ok",
            PartitionStatus::Warn => "warn",
            PartitionStatus::Stall => "stall",
            PartitionStatus::Stop => "stop",
            PartitionStatus::Rewind => "rewind",
        }
    }
}

impl fmt::Display for PartitionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a partition or the consumer is not healthy. Each reason has a
/// [`severity`](HealthReason::severity); the snapshot's status is the
/// highest one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthReason {
    /// The committed offset has not advanced for `duration` while the lag
    /// is above zero, and no record completed meanwhile
    /// ([`PartitionStatus::Stall`]). Unhealthy.
    Stalled {
        /// Since the committed offset last advanced (or the lag rose above
        /// zero, if later).
        duration: Duration,
    },
    /// Records completed but no commit landed for `duration` while records
    /// wait ([`PartitionStatus::Stop`]). Unhealthy.
    NotCommitting {
        /// Since the committed offset last advanced.
        duration: Duration,
    },
    /// No record of the partition succeeded for `duration` while its lag
    /// is above zero. Unhealthy.
    NoSuccess {
        /// Since the last success (or the assignment, or the lag rising
        /// above zero, whichever is latest).
        duration: Duration,
    },
    /// A failing record blocks the partition (the block policy). Degraded;
    /// once the commit has been frozen for `stall_after` the partition is
    /// also [`HealthReason::Stalled`].
    BlockedByFailingRecord {
        /// Since the partition became blocked.
        duration: Duration,
    },
    /// The lag grew over the whole window while commits advanced
    /// ([`PartitionStatus::Warn`]). Degraded.
    LagGrowing {
        /// The lag at the start of the window, in records.
        from: u64,
        /// The lag now, in records.
        to: u64,
        /// The window.
        over: Duration,
    },
    /// The committed offset went backwards ([`PartitionStatus::Rewind`]).
    /// Degraded.
    Rewound {
        /// The committed offset before.
        from: i64,
        /// The committed offset after.
        to: i64,
        /// How long ago.
        ago: Duration,
    },
    /// The offset the partition was to continue at was below the log start
    /// offset: `lost` records were deleted by retention before the group
    /// processed them. Unhealthy with [`RetentionOverrunPolicy::Fail`] (the
    /// partition is stopped), degraded otherwise (reported for
    /// [`HealthThresholds::report_events_for`]).
    RetentionOverrun {
        /// The group's committed offset (at assignment), or the offset after
        /// the last fetched record (when the consumer fell behind retention
        /// while running).
        offset: i64,
        /// The log start offset when it was detected.
        log_start_offset: i64,
        /// Records lost: `log_start_offset - offset`.
        lost: u64,
        /// What was done.
        policy: RetentionOverrunPolicy,
        /// Where consumption resumed; `None` when stopped.
        resumed_at: Option<i64>,
        /// How long ago it was detected.
        ago: Duration,
    },
    /// The offset the partition was to continue at was above the high
    /// watermark (the topic was deleted and recreated, or its log
    /// truncated). Unhealthy with [`RetentionOverrunPolicy::Fail`],
    /// degraded otherwise.
    CommittedAboveHighWatermark {
        /// The committed offset (or position).
        offset: i64,
        /// The high watermark when it was detected.
        high_watermark: i64,
        /// What was done (earliest resumes at the log start offset).
        policy: RetentionOverrunPolicy,
        /// Where consumption resumed; `None` when stopped.
        resumed_at: Option<i64>,
        /// How long ago it was detected.
        ago: Duration,
    },
    /// The group has no committed offset for the partition and
    /// `auto.offset.reset` is `error`: the partition is not consumed.
    /// Unhealthy.
    NoCommittedOffset,
    /// The poll loop has not polled librdkafka for `gap`. Degraded from
    /// `poll_warning_ratio` x `max.poll.interval.ms`, unhealthy from
    /// `max.poll.interval.ms` on (the member is about to leave, or has
    /// left, the group).
    PollGap {
        /// The current gap.
        gap: Duration,
        /// `max.poll.interval.ms`.
        max_poll_interval: Duration,
    },
    /// librdkafka reported `max.poll.interval.ms` exceeded `ago`: the member
    /// left the group and rejoined. Degraded.
    PollIntervalExceeded {
        /// How long ago.
        ago: Duration,
    },
    /// [`FreshConsumer::run_until`] has not started yet. Degraded.
    NotStarted,
    /// The consumer stopped ([`FreshConsumer::run_until`] returned).
    /// Unhealthy.
    Stopped,
}

impl HealthReason {
    /// How bad the reason is.
    pub fn severity(&self) -> HealthStatus {
        use HealthReason::*;
        match self {
            Stalled { .. }
            | NotCommitting { .. }
            | NoSuccess { .. }
            | NoCommittedOffset
            | Stopped => HealthStatus::Unhealthy,
            RetentionOverrun { policy, .. } | CommittedAboveHighWatermark { policy, .. } => {
                if *policy == RetentionOverrunPolicy::Fail {
                    HealthStatus::Unhealthy
                } else {
                    HealthStatus::Degraded
                }
            }
            PollGap {
                gap,
                max_poll_interval,
            } => {
                if gap >= max_poll_interval {
                    HealthStatus::Unhealthy
                } else {
                    HealthStatus::Degraded
                }
            }
            BlockedByFailingRecord { .. }
            | LagGrowing { .. }
            | Rewound { .. }
            | PollIntervalExceeded { .. }
            | NotStarted => HealthStatus::Degraded,
        }
    }
}

struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} s", self.0.as_secs_f64())
    }
}

impl fmt::Display for HealthReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use HealthReason::*;
        match self {
            Stalled { duration } => write!(
                f,
                "stalled for {}: committed offset frozen while records wait",
                Secs(*duration)
            ),
            NotCommitting { duration } => {
                write!(f, "no commit for {} while records wait", Secs(*duration))
            }
            NoSuccess { duration } => write!(
                f,
                "no successful record for {} while records wait",
                Secs(*duration)
            ),
            BlockedByFailingRecord { duration } => {
                write!(f, "blocked by a failing record for {}", Secs(*duration))
            }
            LagGrowing { from, to, over } => write!(
                f,
                "lag grew from {from} to {to} records over {}",
                Secs(*over)
            ),
            Rewound { from, to, ago } => write!(
                f,
                "committed offset went back from {from} to {to} {} ago",
                Secs(*ago)
            ),
            RetentionOverrun {
                offset,
                log_start_offset,
                lost,
                policy,
                resumed_at,
                ago,
            } => {
                write!(
                    f,
                    "retention overrun {} ago: offset {offset} below log start offset {log_start_offset}, {lost} records lost; ",
                    Secs(*ago)
                )?;
                match resumed_at {
                    Some(r) => write!(f, "resumed at {r} (policy {})", policy.as_str()),
                    None => write!(f, "partition stopped (policy {})", policy.as_str()),
                }
            }
            CommittedAboveHighWatermark {
                offset,
                high_watermark,
                policy,
                resumed_at,
                ago,
            } => {
                write!(
                    f,
                    "committed offset {offset} above high watermark {high_watermark} {} ago; ",
                    Secs(*ago)
                )?;
                match resumed_at {
                    Some(r) => write!(f, "resumed at {r} (policy {})", policy.as_str()),
                    None => write!(f, "partition stopped (policy {})", policy.as_str()),
                }
            }
            NoCommittedOffset => {
                f.write_str("no committed offset and auto.offset.reset is error: not consumed")
            }
            PollGap {
                gap,
                max_poll_interval,
            } => write!(
                f,
                "poll loop has not polled for {} (max.poll.interval.ms {})",
                Secs(*gap),
                Secs(*max_poll_interval)
            ),
            PollIntervalExceeded { ago } => write!(
                f,
                "max.poll.interval.ms exceeded {} ago; the member rejoined",
                Secs(*ago)
            ),
            NotStarted => f.write_str("not started"),
            Stopped => f.write_str("stopped"),
        }
    }
}

/// One assigned partition in a [`HealthSnapshot`].
///
/// Offsets are Kafka offsets ("next offset to read"); lags are counts of
/// records; durations are measured on the consumer's monotonic clock, ages
/// against its wall clock. See the [module documentation](self) for where
/// each value comes from and how stale it can be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionReport {
    /// The topic.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
    /// The partition's status.
    pub status: PartitionStatus,
    /// The group's committed offset: this member's last commit, or before
    /// that the one read when the partition was assigned. `None` when the
    /// group has none.
    pub committed_offset: Option<i64>,
    /// The next offset after the contiguous run of completed records: what
    /// the next commit will carry.
    pub processed_offset: Option<i64>,
    /// The high watermark (the offset the next produced record gets), from
    /// statistics or the consumer's own position when that is ahead.
    pub high_watermark: Option<i64>,
    /// The log start offset, from statistics (or read at assignment).
    pub log_start_offset: Option<i64>,
    /// `high_watermark - committed_offset` (before the first commit of a
    /// partition the group has no offset for, counted from where
    /// consumption started).
    pub lag: Option<u64>,
    /// `high_watermark - processed_offset`.
    pub processed_lag: Option<u64>,
    /// Age of the oldest record not yet completed (fetched, or known from
    /// the high watermark to exist); zero when caught up.
    pub head_age: Duration,
    /// Since the committed offset last advanced while the lag is above
    /// zero; zero when the lag is zero.
    pub stalled_for: Duration,
    /// Since the last record of the partition succeeded (in this
    /// assignment); `None` when none did yet.
    pub since_last_success: Option<Duration>,
    /// Age of the last librdkafka statistics report for the partition;
    /// `None` before the first (or with statistics off).
    pub statistics_age: Option<Duration>,
    /// Why the partition is not healthy; empty when it is.
    pub reasons: Vec<HealthReason>,
}

impl PartitionReport {
    /// The highest severity among [`reasons`](Self::reasons).
    pub fn health(&self) -> HealthStatus {
        self.reasons
            .iter()
            .map(HealthReason::severity)
            .max()
            .unwrap_or(HealthStatus::Healthy)
    }
}

/// Where the consumer is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConsumerState {
    /// `run_until` has not been called yet.
    NotStarted,
    /// Running.
    Running,
    /// `run_until` returned.
    Stopped,
}

/// A consistent, cheap view of the consumer's health, from
/// [`HealthHandle::snapshot`]. `Display` prints a short text report.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HealthSnapshot {
    /// The highest severity among all reasons, the partitions' included.
    pub status: HealthStatus,
    /// Where the consumer is in its life.
    pub state: ConsumerState,
    /// The group member id (`rd_kafka_memberid`) at the last rebalance.
    pub member_id: Option<String>,
    /// How often the member id changed (the member left and rejoined as a
    /// new member). Steadily rising: a rebalance loop.
    pub member_id_changes: u64,
    /// Rebalance events seen by this member (assigned, revoked, lost).
    pub rebalances: u64,
    /// librdkafka's consumer-group state from the last statistics report
    /// (`up`, `wait-join`, ...).
    pub group_state: Option<String>,
    /// Assigned partitions, ordered by topic and partition.
    pub partitions: Vec<PartitionReport>,
    /// Reasons that concern the whole consumer (not a partition).
    pub reasons: Vec<HealthReason>,
    /// The in-process evaluation of each freshness objective
    /// ([`FreshConsumer::freshness_objective`](crate::FreshConsumer::freshness_objective)):
    /// compliance and burn rate over the short and the long window. They do
    /// not change [`status`](Self::status): a burning budget is a reason to
    /// page a human, not to restart the consumer.
    pub objectives: Vec<crate::slo::ObjectiveReport>,
    /// When the snapshot was taken.
    pub taken_at: SystemTime,
}

impl HealthSnapshot {
    /// `true` when [`status`](Self::status) is [`HealthStatus::Healthy`].
    pub fn is_healthy(&self) -> bool {
        self.status == HealthStatus::Healthy
    }

    /// The report of one partition, if assigned.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionReport> {
        self.partitions
            .iter()
            .find(|p| p.partition == partition && p.topic == topic)
    }
}

impl fmt::Display for HealthSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ({:?}, member {}, {} partitions, {} rebalances)",
            self.status,
            self.state,
            self.member_id.as_deref().unwrap_or("-"),
            self.partitions.len(),
            self.rebalances
        )?;
        for r in &self.reasons {
            writeln!(f, "  consumer: {r}")?;
        }
        let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        for p in &self.partitions {
            write!(
                f,
                "  {}:{} {} committed={} high={} lag={} head_age={:.1}s stalled={:.1}s",
                p.topic,
                p.partition,
                p.status,
                opt(p.committed_offset),
                opt(p.high_watermark),
                p.lag.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                p.head_age.as_secs_f64(),
                p.stalled_for.as_secs_f64(),
            )?;
            for (i, r) in p.reasons.iter().enumerate() {
                write!(f, "{}{r}", if i == 0 { ": " } else { "; " })?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// A handle to a consumer's health, cheap to clone and to query from any
/// thread or task. Get it **before** running the consumer:
///
/// ```no_run
/// use fresh_consumer::{FreshConsumer, Record};
///
/// # async fn run() -> Result<(), fresh_consumer::RunError> {
/// let consumer = FreshConsumer::new(|_r: Record| async { Ok::<(), std::io::Error>(()) })
///     .bootstrap_servers("localhost:9092")
///     .group_id("billing")
///     .topics(["payments"]);
/// let health = consumer.health_handle();
/// tokio::spawn(async move {
///     loop {
///         tokio::time::sleep(std::time::Duration::from_secs(10)).await;
///         let s = health.snapshot();
///         if !s.is_healthy() {
///             eprintln!("{s}");
///         }
///     }
/// });
/// consumer.run().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HealthHandle {
    hub: Arc<HealthHub>,
}

impl fmt::Debug for HealthHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthHandle")
            .field("state", &self.hub.state())
            .finish_non_exhaustive()
    }
}

impl HealthHandle {
    /// Evaluates the consumer's health now. Cheap: no network I/O, a few
    /// short locks per assigned partition; call it from a probe handler as
    /// often as you like.
    pub fn snapshot(&self) -> HealthSnapshot {
        self.hub.snapshot()
    }
}

impl<H> FreshConsumer<H> {
    /// A handle to this consumer's health, to query from another task while
    /// it runs (for a liveness or readiness probe). Get it before calling
    /// [`run_until`](Self::run_until). Before the run the snapshot says
    /// [`ConsumerState::NotStarted`], after it [`ConsumerState::Stopped`].
    pub fn health_handle(&self) -> HealthHandle {
        HealthHandle {
            hub: Arc::clone(&self.settings.health.hub),
        }
    }

    /// The thresholds of the health evaluation. Defaults to
    /// [`HealthThresholds::default`]. Every threshold must be more than
    /// zero.
    pub fn health_thresholds(mut self, thresholds: HealthThresholds) -> Self {
        self.settings.health.thresholds = thresholds;
        self
    }

    /// What to do when a partition's offset is out of range (a retention
    /// overrun, or a committed offset above the high watermark). Defaults to
    /// [`RetentionOverrunPolicy::Earliest`].
    pub fn retention_overrun_policy(mut self, policy: RetentionOverrunPolicy) -> Self {
        self.settings.health.retention_policy = policy;
        self
    }

    /// How often librdkafka reports its statistics
    /// (`statistics.interval.ms`), the source of the high watermark and log
    /// start offset in the lag gauges and the snapshot, and of the detection
    /// of partitions whose fetch position fell out of range while running.
    /// Defaults to 1 s ([`DEFAULT_STATISTICS_INTERVAL`]), or to the
    /// `statistics.interval.ms` property when set. `Duration::ZERO` turns
    /// statistics off: the high watermark is then the consumer's own
    /// position (records not fetched yet are not counted), and an
    /// out-of-range position is found by reading every partition's
    /// watermarks. At most 24 h; milliseconds.
    pub fn statistics_interval(mut self, interval: Duration) -> Self {
        self.settings.health.statistics_interval = Some(interval);
        self
    }
}

// ---------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------

/// The health options of the builder.
#[derive(Clone)]
pub(crate) struct HealthSettings {
    pub(crate) hub: Arc<HealthHub>,
    pub(crate) thresholds: HealthThresholds,
    pub(crate) retention_policy: RetentionOverrunPolicy,
    pub(crate) statistics_interval: Option<Duration>,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            hub: Arc::new(HealthHub::new()),
            thresholds: HealthThresholds::default(),
            retention_policy: RetentionOverrunPolicy::default(),
            statistics_interval: None,
        }
    }
}

/// The health options, validated.
#[derive(Clone, Debug)]
pub(crate) struct HealthConfig {
    pub(crate) thresholds: HealthThresholds,
    pub(crate) retention_policy: RetentionOverrunPolicy,
    /// The user's `auto.offset.reset`: where partitions without a committed
    /// offset start.
    pub(crate) new_partitions: NewPartitionStart,
    /// `None` when statistics are off.
    pub(crate) statistics_interval: Option<Duration>,
}

impl HealthSettings {
    /// Checks the options and sets the librdkafka properties they need:
    /// `auto.offset.reset=error` (the library decides offset resets) and
    /// `statistics.interval.ms`. `user_reset` and `user_statistics` are the
    /// user's values of those properties, if set.
    pub(crate) fn configure(
        &self,
        cc: &mut ClientConfig,
        user_reset: Option<&str>,
        user_statistics: Option<&str>,
    ) -> Result<HealthConfig, ConfigError> {
        let t = &self.thresholds;
        if [
            t.stall_after,
            t.no_success_after,
            t.lag_growth_window,
            t.report_events_for,
        ]
        .iter()
        .any(Duration::is_zero)
        {
            return Err(ConfigError::InvalidOption {
                option: "health_thresholds",
                reason: "every threshold must be more than zero".into(),
            });
        }
        let new_partitions = match user_reset {
            None => NewPartitionStart::Earliest,
            Some(v) => NewPartitionStart::parse(v).ok_or_else(|| ConfigError::InvalidProperty {
                property: "auto.offset.reset".into(),
                reason: "use earliest, latest or error".into(),
            })?,
        };
        let interval = match (self.statistics_interval, user_statistics) {
            (Some(d), _) => d,
            (None, Some(v)) => Duration::from_millis(v.trim().parse::<u64>().map_err(|_| {
                ConfigError::InvalidProperty {
                    property: "statistics.interval.ms".into(),
                    reason: "not a number of milliseconds".into(),
                }
            })?),
            (None, None) => DEFAULT_STATISTICS_INTERVAL,
        };
        if interval > Duration::from_secs(86_400) {
            return Err(ConfigError::InvalidOption {
                option: "statistics_interval",
                reason: "must be at most 24 h".into(),
            });
        }
        cc.set("auto.offset.reset", "error");
        cc.set("statistics.interval.ms", interval.as_millis().to_string());
        Ok(HealthConfig {
            thresholds: self.thresholds.clone(),
            retention_policy: self.retention_policy,
            new_partitions,
            statistics_interval: (!interval.is_zero()).then_some(interval),
        })
    }
}

// ---------------------------------------------------------------------------
// Per-partition state
// ---------------------------------------------------------------------------

/// Health state of one assigned partition, kept in its
/// [`PartitionState`].
pub(crate) struct PartitionHealth {
    origin: Instant,
    assigned_at: Instant,
    /// From librdkafka's statistics.
    pub(crate) stats: Mutex<PartitionStats>,
    /// Where fetching (re)started, as librdkafka's raw offset.
    start: AtomicI64,
    /// The start as a number, or -1.
    estimate: AtomicI64,
    /// The group's committed offset read at assignment, or -1.
    known_committed: AtomicI64,
    /// Nanoseconds since `origin` + 1 of the last success; 0 = none.
    last_success: AtomicU64,
    restarted_at: Mutex<Option<Instant>>,
    anomaly: Mutex<Option<OffsetAnomaly>>,
    /// Not consumed (fail policy, or no committed offset with
    /// `auto.offset.reset=error`).
    failed: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PartitionHealth {
    pub(crate) fn new(hub: &HealthHub) -> Self {
        PartitionHealth {
            origin: hub.origin,
            assigned_at: Instant::now(),
            stats: Mutex::new(PartitionStats::default()),
            start: AtomicI64::new(Offset::Invalid.to_raw().unwrap_or(-1001)),
            estimate: AtomicI64::new(-1),
            known_committed: AtomicI64::new(-1),
            last_success: AtomicU64::new(0),
            restarted_at: Mutex::new(None),
            anomaly: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// A record of the partition succeeded at `at` (the worker's clock
    /// reading when the handler returned). Called by the worker.
    pub(crate) fn succeeded(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.origin).as_nanos() as u64 + 1;
        self.last_success.store(ns, Ordering::Relaxed);
    }

    fn last_success(&self) -> Option<Instant> {
        match self.last_success.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.origin + Duration::from_nanos(ns - 1)),
        }
    }

    /// Where fetching (re)started.
    pub(crate) fn start(&self) -> Offset {
        Offset::from_raw(self.start.load(Ordering::Acquire))
    }

    fn estimate(&self) -> Option<i64> {
        Some(self.estimate.load(Ordering::Acquire)).filter(|&e| e >= 0)
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::Release);
    }

    pub(crate) fn set_anomaly(&self, a: OffsetAnomaly) {
        *lock(&self.anomaly) = Some(a);
    }

    fn anomaly(&self) -> Option<OffsetAnomaly> {
        *lock(&self.anomaly)
    }

    /// The fetcher was restarted at `offset`.
    pub(crate) fn restarted(&self, at: Instant, offset: Offset) {
        *lock(&self.restarted_at) = Some(at);
        if let Some(raw) = offset.to_raw() {
            self.start.store(raw, Ordering::Release);
        }
        if let Offset::Offset(o) = offset {
            self.estimate.store(o, Ordering::Release);
        }
    }

    /// `true` unless the fetcher was restarted less than `quiet` ago (a
    /// statistics report may still show it stopped).
    pub(crate) fn restart_settled(&self, now: Instant, quiet: Duration) -> bool {
        lock(&self.restarted_at).is_none_or(|at| now.saturating_duration_since(at) >= quiet)
    }

    /// Takes the decision made at assignment.
    pub(crate) fn planned(&self, e: &crate::reset::PlanEntry, at: Instant) {
        if let Some(raw) = e.assign_offset().to_raw() {
            self.start.store(raw, Ordering::Release);
        }
        if let Some(est) = e.decision.estimate {
            self.estimate.store(est, Ordering::Release);
        }
        if let Some(c) = e.committed {
            self.known_committed.store(c, Ordering::Release);
        }
        if let (Some(lo), Some(hi)) = (e.lo, e.hi) {
            lock(&self.stats).seed(at, lo, hi);
        }
    }
}

// ---------------------------------------------------------------------------
// The hub
// ---------------------------------------------------------------------------

const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const STOPPED: u8 = 2;

/// Rebalance events, for [`REBALANCES`](crate::metrics::REBALANCES).
#[derive(Clone, Copy, Debug)]
pub(crate) enum RebalanceKind {
    Assigned = 0,
    Revoked = 1,
    Lost = 2,
}

/// What the run gives the hub when it starts.
struct Run {
    shared: Weak<Shared>,
    config: HealthConfig,
    poll_warning: Duration,
    max_poll_interval: Duration,
}

/// The health state of one consumer: created with the builder (so a handle
/// exists before the run), connected to the engine when the run starts.
pub(crate) struct HealthHub {
    origin: Instant,
    state: AtomicU8,
    run: OnceLock<Run>,
    instruments: OnceLock<HealthInstruments>,
    /// Per topic-partition evaluation state, kept across re-assignments of
    /// the same partition to this member.
    tracks: Mutex<HashMap<(Arc<str>, i32), Track>>,
    member_id: Mutex<Option<String>>,
    member_id_changes: AtomicU64,
    rebalances: [AtomicU64; 3],
    group_state: Mutex<Option<String>>,
    /// Nanoseconds since `origin` + 1 of the last "max.poll.interval.ms
    /// exceeded"; 0 = never.
    poll_exceeded_at: AtomicU64,
    reset_tx: Mutex<Option<std::sync::mpsc::Sender<Request>>>,
    /// An offset-reset error waits for a statistics report to show which
    /// partition it was.
    reset_error_at: Mutex<Option<Instant>>,
    /// Held by the rebalance callback and by a restart of stopped
    /// partitions: they never interleave.
    assign_lock: Mutex<()>,
    /// The freshness objectives of the run, set when it starts.
    pub(crate) slo: OnceLock<Arc<crate::slo::SloRegistry>>,
}

impl HealthHub {
    fn new() -> Self {
        HealthHub {
            origin: Instant::now(),
            state: AtomicU8::new(NOT_STARTED),
            run: OnceLock::new(),
            instruments: OnceLock::new(),
            tracks: Mutex::new(HashMap::new()),
            member_id: Mutex::new(None),
            member_id_changes: AtomicU64::new(0),
            rebalances: Default::default(),
            group_state: Mutex::new(None),
            poll_exceeded_at: AtomicU64::new(0),
            reset_tx: Mutex::new(None),
            reset_error_at: Mutex::new(None),
            assign_lock: Mutex::new(()),
            slo: OnceLock::new(),
        }
    }

    fn state(&self) -> ConsumerState {
        match self.state.load(Ordering::Acquire) {
            NOT_STARTED => ConsumerState::NotStarted,
            RUNNING => ConsumerState::Running,
            _ => ConsumerState::Stopped,
        }
    }

    pub(crate) fn config(&self) -> Option<&HealthConfig> {
        self.run.get().map(|r| &r.config)
    }

    fn shared(&self) -> Option<Arc<Shared>> {
        self.run.get()?.shared.upgrade()
    }

    pub(crate) fn assign_lock(&self) -> MutexGuard<'_, ()> {
        lock(&self.assign_lock)
    }

    /// Builds the instruments (once per hub).
    pub(crate) fn register_instruments(self: &Arc<Self>, meter: &Meter, group: &str) {
        let _ = self
            .instruments
            .set(HealthInstruments::new(meter, group, Arc::downgrade(self)));
    }

    /// Connects the hub to a starting run.
    pub(crate) fn start(
        &self,
        shared: &Arc<Shared>,
        config: HealthConfig,
        poll_warning: Duration,
        max_poll_interval: Duration,
    ) {
        let _ = self.run.set(Run {
            shared: Arc::downgrade(shared),
            config,
            poll_warning,
            max_poll_interval,
        });
        self.state.store(RUNNING, Ordering::Release);
    }

    /// The run ended.
    pub(crate) fn stopped(&self) {
        self.state.store(STOPPED, Ordering::Release);
    }

    /// Counts a rebalance event.
    pub(crate) fn rebalance(&self, kind: RebalanceKind) {
        self.rebalances[kind as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(i) = self.instruments.get() {
            i.rebalances.add(1, &i.rebalance_attrs[kind as usize]);
        }
    }

    /// Notes the member id after a rebalance; logs a change.
    pub(crate) fn member_id(&self, id: Option<String>) {
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            return;
        };
        let mut cur = lock(&self.member_id);
        match cur.as_deref() {
            Some(old) if old == id => {}
            Some(old) => {
                let changes = self.member_id_changes.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    old_member_id = old,
                    member_id = %id,
                    changes,
                    "group member id changed from {old} to {id}: this member left the group and rejoined as a new member (poll interval exceeded, session timeout, fenced); member ids that keep changing mean a rebalance loop"
                );
                *cur = Some(id);
            }
            None => {
                tracing::info!(member_id = %id, "joined the consumer group as member {id}");
                *cur = Some(id);
            }
        }
    }

    /// librdkafka reported `max.poll.interval.ms` exceeded.
    pub(crate) fn poll_exceeded(&self) {
        let ns = self.origin.elapsed().as_nanos() as u64 + 1;
        self.poll_exceeded_at.store(ns, Ordering::Relaxed);
    }

    /// librdkafka's consumer-group state from a statistics report.
    pub(crate) fn group_statistics(&self, state: &str) {
        let mut g = lock(&self.group_state);
        if g.as_deref() != Some(state) {
            *g = Some(state.to_owned());
        }
    }

    /// librdkafka reported `RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET`: some
    /// partition's offset is out of range and its fetcher stopped. The next
    /// statistics report shows which; without statistics every partition is
    /// checked.
    pub(crate) fn offset_reset_error(&self) {
        let Some(cfg) = self.config() else {
            return;
        };
        if cfg.statistics_interval.is_some() {
            *lock(&self.reset_error_at) = Some(Instant::now());
        } else {
            self.request(Request::CheckAll);
        }
    }

    fn request(&self, r: Request) {
        if let Some(tx) = lock(&self.reset_tx).as_ref() {
            let _ = tx.send(r);
        }
    }

    /// How long after a restart a partition is not restarted again
    /// (statistics may still show its old state).
    pub(crate) fn restart_quiet(&self) -> Duration {
        let interval = self
            .config()
            .and_then(|c| c.statistics_interval)
            .unwrap_or_default();
        2 * (interval + crate::consumer::IDLE_POLL_TICK)
    }

    /// A statistics report arrived; `stopped` lists the assigned partitions
    /// whose fetcher it showed stopped, with the number of consecutive
    /// reports that did.
    pub(crate) fn statistics_received(
        &self,
        now: Instant,
        stopped: Vec<(Arc<PartitionState>, u32)>,
    ) {
        let quiet = self.restart_quiet();
        let mut pending = lock(&self.reset_error_at);
        let error = pending.is_some();
        // A fetcher stopped for three reports in a row is restarted even
        // without the error (one may have been missed).
        let candidates: Vec<Arc<PartitionState>> = stopped
            .into_iter()
            .filter(|(s, runs)| {
                (error || *runs >= 3)
                    && !s.health.is_failed()
                    && s.health.restart_settled(now, quiet)
            })
            .map(|(s, _)| s)
            .collect();
        if !candidates.is_empty() {
            *pending = None;
            drop(pending);
            self.request(Request::Stopped(candidates));
        } else if pending.is_some_and(|at| now.saturating_duration_since(at) > quiet * 2) {
            *pending = None;
        }
    }

    pub(crate) fn count_anomaly(&self, state: &PartitionState, kind: &AnomalyKind) {
        let Some(i) = self.instruments.get() else {
            return;
        };
        let base = state.metrics.attributes();
        if let AnomalyKind::RetentionOverrun { lost, .. } = kind {
            i.overrun.add(*lost, base);
        }
        let mut attrs = base.to_vec();
        attrs.push(KeyValue::new(OFFSET_RESET_REASON, kind.reason()));
        i.resets.add(1, &attrs);
    }

    /// Evaluates every assigned partition now.
    fn evaluate(&self) -> Vec<Evaluated> {
        let (Some(shared), Some(run)) = (self.shared(), self.run.get()) else {
            return Vec::new();
        };
        let t = &run.config.thresholds;
        let now = Instant::now();
        let wall = SystemTime::now();
        let states = shared.assigned();
        let mut tracks = lock(&self.tracks);
        let out = states
            .into_iter()
            .map(|s| evaluate_one(&mut tracks, s, now, wall, t))
            .collect();
        let keep = 2 * t.stall_after.max(t.report_events_for);
        tracks.retain(|_, tr| now.saturating_duration_since(tr.last_seen) < keep);
        out
    }

    fn snapshot(&self) -> HealthSnapshot {
        let state = self.state();
        let evaluated = self.evaluate();
        let mut reasons = Vec::new();
        match state {
            ConsumerState::NotStarted => reasons.push(HealthReason::NotStarted),
            ConsumerState::Stopped => reasons.push(HealthReason::Stopped),
            ConsumerState::Running => {}
        }
        let now = Instant::now();
        if let (ConsumerState::Running, Some(run), Some(shared)) =
            (state, self.run.get(), self.shared())
            && !shared.poll_clock.is_suspended()
        {
            let (_, gap) = shared.poll_clock.gap();
            if gap >= run.poll_warning {
                reasons.push(HealthReason::PollGap {
                    gap,
                    max_poll_interval: run.max_poll_interval,
                });
            }
        }
        let report_for = self
            .config()
            .map(|c| c.thresholds.report_events_for)
            .unwrap_or(DEFAULT_REPORT_EVENTS_FOR);
        match self.poll_exceeded_at.load(Ordering::Relaxed) {
            0 => {}
            ns => {
                let ago = now.saturating_duration_since(self.origin + Duration::from_nanos(ns - 1));
                if ago < report_for {
                    reasons.push(HealthReason::PollIntervalExceeded { ago });
                }
            }
        }
        let thresholds = self
            .config()
            .map(|c| c.thresholds.clone())
            .unwrap_or_default();
        let mut partitions: Vec<PartitionReport> = evaluated
            .iter()
            .map(|e| e.report(&thresholds, now))
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let status = reasons
            .iter()
            .map(HealthReason::severity)
            .chain(partitions.iter().map(PartitionReport::health))
            .max()
            .unwrap_or(HealthStatus::Healthy);
        HealthSnapshot {
            status,
            state,
            member_id: lock(&self.member_id).clone(),
            member_id_changes: self.member_id_changes.load(Ordering::Relaxed),
            rebalances: self
                .rebalances
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum(),
            group_state: lock(&self.group_state).clone(),
            partitions,
            reasons,
            objectives: self.slo.get().map(|s| s.reports()).unwrap_or_default(),
            taken_at: SystemTime::now(),
        }
    }
}

/// Starts the health thread: it evaluates the partitions every 100 ms (so
/// the stall clocks and lag samples are exact to that) and restarts
/// partitions whose fetcher librdkafka stopped on an out-of-range offset.
/// It ends when the consumer shuts down.
pub(crate) fn spawn<C, X>(shared: &Arc<Shared>, consumer: Weak<C>) -> std::io::Result<()>
where
    C: Consumer<X> + Send + Sync + 'static,
    X: ConsumerContext + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    *lock(&shared.health.reset_tx) = Some(tx);
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("fresh-consumer-health".into())
        .spawn(move || {
            loop {
                match rx.recv_timeout(EVAL_TICK) {
                    Ok(request) => {
                        if let Some(c) = consumer.upgrade() {
                            crate::reset::resolve(&*c, &shared, request);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                }
                if shared.shutdown.is_cancelled() {
                    return;
                }
                let _ = shared.health.evaluate();
            }
        })
        .map(|_| ())
}

/// Marks the hub stopped when the run ends, however it ends (an error, a
/// cancelled future).
pub(crate) struct RunGuard(Arc<HealthHub>);

impl RunGuard {
    pub(crate) fn new(hub: &Arc<HealthHub>) -> Self {
        RunGuard(Arc::clone(hub))
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.stopped();
    }
}

/// The event time of a fetched record in milliseconds since the Unix epoch,
/// as the event-age histogram takes it (record timestamp, or the
/// event-time header); the time it was fetched when it has none.
pub(crate) fn event_time_ms(header: Option<&str>, record: &Record) -> i64 {
    crate::instruments::EventTime::of(header, record)
        .millis()
        .unwrap_or_else(|| wall_ms(SystemTime::now()))
}

fn wall_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    committed: i64,
    lag: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RewindEvent {
    at: Instant,
    from: i64,
    to: i64,
}

/// Evaluation state of one topic-partition.
#[derive(Debug)]
struct Track {
    /// The assignment (the `PartitionState`'s address) last evaluated.
    assignment: usize,
    committed: Option<i64>,
    last_advance: Instant,
    lag_since: Option<Instant>,
    samples: VecDeque<Sample>,
    rewind: Option<RewindEvent>,
    last_seen: Instant,
}

impl Track {
    fn new(now: Instant, assignment: usize) -> Self {
        Track {
            assignment,
            committed: None,
            last_advance: now,
            lag_since: None,
            samples: VecDeque::new(),
            rewind: None,
            last_seen: now,
        }
    }

    /// Keeps the history across a re-assignment of the same partition
    /// unless it was away for longer than `forget_after`.
    fn seen(&mut self, now: Instant, assignment: usize, forget_after: Duration) {
        if self.assignment != assignment {
            if now.saturating_duration_since(self.last_seen) > forget_after {
                *self = Track::new(now, assignment);
            }
            self.assignment = assignment;
        }
        self.last_seen = now;
    }

    /// Samples the lag every eighth of the window; returns `(first lag, last
    /// lag, window)` when over a full window the lag grew at every sample
    /// while the committed offset advanced.
    fn growth(
        &mut self,
        now: Instant,
        committed: Option<i64>,
        lag: Option<u64>,
        window: Duration,
    ) -> Option<(u64, u64, Duration)> {
        let (Some(committed), Some(lag)) = (committed, lag) else {
            self.samples.clear();
            return None;
        };
        let every = (window / 8).max(EVAL_TICK);
        if self
            .samples
            .back()
            .is_none_or(|s| now.saturating_duration_since(s.at) >= every)
        {
            self.samples.push_back(Sample {
                at: now,
                committed,
                lag,
            });
        }
        while self.samples.len() > 1 && now.saturating_duration_since(self.samples[1].at) >= window
        {
            self.samples.pop_front();
        }
        let (first, last) = (*self.samples.front()?, *self.samples.back()?);
        if self.samples.len() < 3 || now.saturating_duration_since(first.at) < window {
            return None;
        }
        let rising = self
            .samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .all(|(a, b)| b.lag >= a.lag);
        let grew = self.samples.iter().all(|s| s.lag > 0)
            && rising
            && last.lag > first.lag
            && last.committed > first.committed;
        grew.then(|| (first.lag, last.lag, now.saturating_duration_since(first.at)))
    }
}

/// What the evaluation of one partition needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Inputs {
    /// The group's committed offset, if known.
    committed: Option<i64>,
    /// What the lag is counted from: the committed offset, or where
    /// consumption started.
    base: Option<i64>,
    /// The next offset after the contiguous completed run.
    processed: Option<i64>,
    high_watermark: Option<i64>,
    /// Not consumed by policy.
    failed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Judged {
    status: PartitionStatus,
    lag: Option<u64>,
    processed_lag: Option<u64>,
    stalled_for: Duration,
    lag_since: Option<Instant>,
    growth: Option<(u64, u64, Duration)>,
    rewind: Option<RewindEvent>,
}

/// The status rules (see the module documentation).
fn judge(tr: &mut Track, i: Inputs, now: Instant, t: &HealthThresholds) -> Judged {
    if let Some(c) = i.committed {
        match tr.committed {
            Some(prev) if c > prev => tr.last_advance = now,
            Some(prev) if c < prev => {
                tr.last_advance = now;
                tr.rewind = Some(RewindEvent {
                    at: now,
                    from: prev,
                    to: c,
                });
            }
            _ => {}
        }
        tr.committed = Some(c);
    }
    let minus = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some((a - b).max(0) as u64),
        _ => None,
    };
    let lag = minus(i.high_watermark, i.base);
    let processed_lag = minus(i.high_watermark, i.processed.or(i.base));
    let waiting = lag.is_some_and(|l| l > 0);
    let lag_since = if waiting {
        Some(*tr.lag_since.get_or_insert(now))
    } else {
        tr.lag_since = None;
        None
    };
    let stalled_for = match lag_since {
        Some(since) => now.saturating_duration_since(since.max(tr.last_advance)),
        None => Duration::ZERO,
    };
    let growth = tr.growth(now, i.base, lag, t.lag_growth_window);
    let rewind = tr
        .rewind
        .filter(|r| now.saturating_duration_since(r.at) < t.lag_growth_window);
    let status = if i.failed {
        PartitionStatus::Stop
    } else if rewind.is_some() {
        PartitionStatus::Rewind
    } else if stalled_for >= t.stall_after {
        if matches!((i.processed, i.base), (Some(p), Some(b)) if p > b) {
            PartitionStatus::Stop
        } else {
            PartitionStatus::Stall
        }
    } else if growth.is_some() {
        PartitionStatus::Warn
    } else {
        PartitionStatus::Ok
    };
    Judged {
        status,
        lag,
        processed_lag,
        stalled_for,
        lag_since,
        growth,
        rewind,
    }
}

/// One partition's evaluated signals.
pub(crate) struct Evaluated {
    pub(crate) state: Arc<PartitionState>,
    judged: Judged,
    committed: Option<i64>,
    processed: Option<i64>,
    high_watermark: Option<i64>,
    log_start: Option<i64>,
    head_age: Duration,
    since_success: Option<Duration>,
    no_success_for: Duration,
    blocked_for: Option<Duration>,
    anomaly: Option<OffsetAnomaly>,
    statistics_age: Option<Duration>,
}

fn evaluate_one(
    tracks: &mut HashMap<(Arc<str>, i32), Track>,
    s: Arc<PartitionState>,
    now: Instant,
    wall: SystemTime,
    t: &HealthThresholds,
) -> Evaluated {
    let h = &s.health;
    // With a split queue, records fetched but not yet taken by the worker
    // wait in librdkafka's queue: the position is past them. Read under the
    // tracker's lock, under which the worker updates both.
    let (position, head, completed) = {
        let tr = lock(&s.tracker);
        let waiting = s.waiting.load(Ordering::Relaxed) as i64;
        (
            tr.position().map(|p| p + waiting),
            tr.head_entry(),
            tr.committable(),
        )
    };
    let own = s.committed.load(Ordering::Acquire);
    let known = h.known_committed.load(Ordering::Acquire);
    let mut st = lock(&h.stats);
    let committed = [own, known, st.committed].into_iter().find(|&c| c >= 0);
    let base = committed.or_else(|| h.estimate());
    let high_watermark = match (st.high_watermark(), position) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let log_start = st.log_start();
    let head_age = match head {
        Some((_, event_ms)) => {
            Duration::from_millis((wall_ms(wall) - event_ms).max(0).unsigned_abs())
        }
        // Nothing fetched waits: records known from the high watermark to
        // exist beyond the position (or, without one, the log start).
        None => position
            .or(base)
            .or(log_start)
            .and_then(|p| st.known_since(p))
            .map(|since| now.saturating_duration_since(since))
            .unwrap_or_default(),
    };
    let statistics_age = st.at.map(|at| now.saturating_duration_since(at));
    drop(st);
    let key = (Arc::clone(&s.topic), s.partition);
    let id = Arc::as_ptr(&s) as usize;
    let track = tracks
        .entry(key)
        .or_insert_with(|| Track::new(h.assigned_at.min(now), id));
    track.seen(now, id, t.stall_after);
    let processed = completed.or(base);
    let judged = judge(
        track,
        Inputs {
            committed,
            base,
            processed,
            high_watermark,
            failed: h.is_failed(),
        },
        now,
        t,
    );
    let last_success = h.last_success();
    let no_success_for = match judged.lag_since {
        Some(since) => {
            now.saturating_duration_since(since.max(last_success.unwrap_or(h.assigned_at)))
        }
        None => Duration::ZERO,
    };
    let blocked_ms = s.blocked_since.load(Ordering::Acquire);
    let blocked_for = (blocked_ms > 0)
        .then(|| Duration::from_millis((wall_ms(wall) - blocked_ms as i64).max(0).unsigned_abs()));
    Evaluated {
        judged,
        committed,
        processed,
        high_watermark,
        log_start,
        head_age,
        since_success: last_success.map(|at| now.saturating_duration_since(at)),
        no_success_for,
        blocked_for,
        anomaly: h.anomaly(),
        statistics_age,
        state: s,
    }
}

impl Evaluated {
    fn reasons(&self, t: &HealthThresholds, now: Instant) -> Vec<HealthReason> {
        let mut out = Vec::new();
        let j = &self.judged;
        let failed = self.state.health.is_failed();
        if let Some(a) = self.anomaly {
            let ago = now.saturating_duration_since(a.at);
            if failed || ago < t.report_events_for {
                out.push(match a.kind {
                    AnomalyKind::RetentionOverrun {
                        offset,
                        log_start,
                        lost,
                        ..
                    } => HealthReason::RetentionOverrun {
                        offset,
                        log_start_offset: log_start,
                        lost,
                        policy: a.policy,
                        resumed_at: a.resumed_at,
                        ago,
                    },
                    AnomalyKind::AboveHighWatermark {
                        offset,
                        high_watermark,
                        ..
                    } => HealthReason::CommittedAboveHighWatermark {
                        offset,
                        high_watermark,
                        policy: a.policy,
                        resumed_at: a.resumed_at,
                        ago,
                    },
                    AnomalyKind::NoCommittedOffset => HealthReason::NoCommittedOffset,
                });
            }
        }
        match j.status {
            PartitionStatus::Stall => out.push(HealthReason::Stalled {
                duration: j.stalled_for,
            }),
            PartitionStatus::Stop if !failed => out.push(HealthReason::NotCommitting {
                duration: j.stalled_for,
            }),
            PartitionStatus::Warn => {
                if let Some((from, to, over)) = j.growth {
                    out.push(HealthReason::LagGrowing { from, to, over });
                }
            }
            PartitionStatus::Rewind => {
                if let Some(r) = j.rewind {
                    out.push(HealthReason::Rewound {
                        from: r.from,
                        to: r.to,
                        ago: now.saturating_duration_since(r.at),
                    });
                }
            }
            _ => {}
        }
        if !failed && self.no_success_for >= t.no_success_after {
            out.push(HealthReason::NoSuccess {
                duration: self.no_success_for,
            });
        }
        if let Some(duration) = self.blocked_for {
            out.push(HealthReason::BlockedByFailingRecord { duration });
        }
        out
    }

    fn report(&self, t: &HealthThresholds, now: Instant) -> PartitionReport {
        let j = &self.judged;
        PartitionReport {
            topic: self.state.topic.to_string(),
            partition: self.state.partition,
            status: j.status,
            committed_offset: self.committed,
            processed_offset: self.processed,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start,
            lag: j.lag,
            processed_lag: j.processed_lag,
            head_age: self.head_age,
            stalled_for: j.stalled_for,
            since_last_success: self.since_success,
            statistics_age: self.statistics_age,
            reasons: self.reasons(t, now),
        }
    }
}

// ---------------------------------------------------------------------------
// Instruments
// ---------------------------------------------------------------------------

/// Lag, head age, stalled duration, status, assignment size.
struct Gauges {
    _lag: ObservableGauge<i64>,
    _head_age: ObservableGauge<f64>,
    _stalled: ObservableGauge<f64>,
    _status: ObservableGauge<i64>,
    _size: ObservableGauge<i64>,
}

/// The health instruments: counters recorded by the library, gauges
/// observed from the hub at each collection.
pub(crate) struct HealthInstruments {
    rebalances: Counter<u64>,
    rebalance_attrs: [Vec<KeyValue>; 3],
    overrun: Counter<u64>,
    resets: Counter<u64>,
    /// Kept so the observable gauges live as long as the instruments.
    _gauges: Gauges,
}

impl HealthInstruments {
    fn new(meter: &Meter, group: &str, hub: Weak<HealthHub>) -> Self {
        let group_attrs = [
            KeyValue::new(MESSAGING_SYSTEM, "kafka"),
            KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, group.to_owned()),
        ];
        let rebalance_attrs = ["assigned", "revoked", "lost"].map(|kind| {
            let mut v = group_attrs.to_vec();
            v.push(KeyValue::new(REBALANCE_TYPE, kind));
            v
        });
        // Each gauge evaluates the partitions itself: a collection reads a
        // handful of atomics and short locks per partition.
        fn each(hub: &Weak<HealthHub>, mut f: impl FnMut(&Evaluated, &[KeyValue])) {
            if let Some(hub) = hub.upgrade() {
                for e in hub.evaluate() {
                    f(&e, e.state.metrics.attributes());
                }
            }
        }
        fn with(base: &[KeyValue], extra: KeyValue) -> Vec<KeyValue> {
            base.iter().cloned().chain(std::iter::once(extra)).collect()
        }
        let lag = {
            let hub = hub.clone();
            meter
                .i64_observable_gauge(PARTITION_LAG)
                .with_unit("{message}")
                .with_description(
                    "Records between the high watermark and the committed (or processed) offset.",
                )
                .with_callback(move |o| {
                    each(&hub, |e, base| {
                        if let Some(l) = e.judged.lag {
                            o.observe(
                                l as i64,
                                &with(base, KeyValue::new(LAG_POSITION, "committed")),
                            );
                        }
                        if let Some(l) = e.judged.processed_lag {
                            o.observe(
                                l as i64,
                                &with(base, KeyValue::new(LAG_POSITION, "processed")),
                            );
                        }
                    })
                })
                .build()
        };
        let head_age = {
            let hub = hub.clone();
            meter
                .f64_observable_gauge(PARTITION_HEAD_AGE)
                .with_unit("s")
                .with_description("Age of the oldest record of the partition not yet completed; 0 when caught up.")
                .with_callback(move |o| {
                    each(&hub, |e, base| o.observe(e.head_age.as_secs_f64(), base))
                })
                .build()
        };
        let stalled = {
            let hub = hub.clone();
            meter
                .f64_observable_gauge(PARTITION_STALLED_DURATION)
                .with_unit("s")
                .with_description("Time since the committed offset last advanced while the lag is above zero; 0 otherwise.")
                .with_callback(move |o| {
                    each(
                        &hub,
                        |e, base| o.observe(e.judged.stalled_for.as_secs_f64(), base),
                    )
                })
                .build()
        };
        let status = {
            let hub = hub.clone();
            meter
                .i64_observable_gauge(PARTITION_STATUS)
                .with_unit("1")
                .with_description("1 for the partition's current status (ok, warn, stall, stop, rewind), 0 for the others.")
                .with_callback(move |o| {
                    each(
                        &hub,
                        |e, base| {
                            for s in PartitionStatus::ALL {
                                let v = i64::from(s == e.judged.status);
                                o.observe(v, &with(base, KeyValue::new(STATUS, s.as_str())));
                            }
                        },
                    )
                })
                .build()
        };
        let size = {
            let hub = hub.clone();
            let attrs = group_attrs.to_vec();
            meter
                .i64_observable_gauge(ASSIGNMENT_SIZE)
                .with_unit("{partition}")
                .with_description("Partitions currently assigned to this member.")
                .with_callback(move |o| {
                    if let Some(shared) = hub.upgrade().and_then(|h| h.shared()) {
                        o.observe(shared.partitions().len() as i64, &attrs);
                    }
                })
                .build()
        };
        HealthInstruments {
            rebalances: meter
                .u64_counter(REBALANCES)
                .with_unit("{event}")
                .with_description(
                    "Rebalance events seen by this member: assigned, revoked or lost.",
                )
                .build(),
            rebalance_attrs,
            overrun: meter
                .u64_counter(RETENTION_OVERRUN_MESSAGES)
                .with_unit("{message}")
                .with_description("Records deleted by retention before the group processed them.")
                .build(),
            resets: meter
                .u64_counter(OFFSET_RESETS)
                .with_unit("{event}")
                .with_description("Partitions whose offset was missing or out of range, by reason.")
                .build(),
            _gauges: Gauges {
                _lag: lag,
                _head_age: head_age,
                _stalled: stalled,
                _status: status,
                _size: size,
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> HealthThresholds {
        HealthThresholds::default()
            .with_stall_after(Duration::from_secs(10))
            .with_lag_growth_window(Duration::from_secs(8))
    }

    fn inputs(committed: i64, processed: i64, hi: i64) -> Inputs {
        Inputs {
            committed: Some(committed),
            base: Some(committed),
            processed: Some(processed),
            high_watermark: Some(hi),
            failed: false,
        }
    }

    #[test]
    fn caught_up_is_ok_and_never_stalls() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        for s in 0..100 {
            let j = judge(
                &mut tr,
                inputs(50, 50, 50),
                t0 + Duration::from_secs(s),
                &t(),
            );
            assert_eq!(j.status, PartitionStatus::Ok);
            assert_eq!(j.lag, Some(0));
            assert_eq!(j.stalled_for, Duration::ZERO);
        }
    }

    #[test]
    fn a_frozen_commit_with_lag_stalls_after_the_window() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(
            judge(&mut tr, inputs(10, 10, 10), at(0), &t()).status,
            PartitionStatus::Ok
        );
        // Records arrive at t=5; the head fails and nothing completes.
        let j = judge(&mut tr, inputs(10, 10, 20), at(5), &t());
        assert_eq!(
            (j.status, j.lag, j.stalled_for),
            (PartitionStatus::Ok, Some(10), Duration::ZERO)
        );
        let j = judge(&mut tr, inputs(10, 10, 20), at(14), &t());
        assert_eq!(j.status, PartitionStatus::Ok);
        assert_eq!(j.stalled_for, Duration::from_secs(9));
        let j = judge(&mut tr, inputs(10, 10, 20), at(15), &t());
        assert_eq!(j.status, PartitionStatus::Stall);
        // It recovers as soon as the commit advances.
        let j = judge(&mut tr, inputs(15, 15, 20), at(16), &t());
        assert_eq!(
            (j.status, j.stalled_for),
            (PartitionStatus::Ok, Duration::ZERO)
        );
    }

    #[test]
    fn processed_but_not_committed_is_stop() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        judge(&mut tr, inputs(10, 10, 30), t0, &t());
        let j = judge(
            &mut tr,
            inputs(10, 25, 30),
            t0 + Duration::from_secs(11),
            &t(),
        );
        assert_eq!(j.status, PartitionStatus::Stop);
        assert_eq!(j.processed_lag, Some(5));
        assert_eq!(j.lag, Some(20));
    }

    #[test]
    fn a_committed_offset_going_back_is_rewind_for_the_window() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        judge(&mut tr, inputs(900, 900, 900), t0, &t());
        let j = judge(&mut tr, inputs(5, 5, 40), t0 + Duration::from_secs(1), &t());
        assert_eq!(j.status, PartitionStatus::Rewind);
        assert_eq!(j.rewind.map(|r| (r.from, r.to)), Some((900, 5)));
        let j = judge(
            &mut tr,
            inputs(40, 40, 40),
            t0 + Duration::from_secs(9),
            &t(),
        );
        assert_eq!(
            j.status,
            PartitionStatus::Ok,
            "reported for the window only"
        );
    }

    #[test]
    fn growing_lag_with_advancing_commits_is_warn() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        let mut last = PartitionStatus::Ok;
        // Commits advance by 10 per second, the high watermark by 20.
        for s in 0..=10i64 {
            let j = judge(
                &mut tr,
                inputs(10 * s, 10 * s, 100 + 20 * s),
                t0 + Duration::from_secs(s as u64),
                &t(),
            );
            last = j.status;
            if s < 8 {
                assert_eq!(
                    j.status,
                    PartitionStatus::Ok,
                    "not a full window yet at {s}"
                );
            }
        }
        assert_eq!(last, PartitionStatus::Warn);
        // The lag shrinking once ends it.
        let j = judge(
            &mut tr,
            inputs(300, 300, 310),
            t0 + Duration::from_secs(12),
            &t(),
        );
        assert_eq!(j.status, PartitionStatus::Ok);
    }

    #[test]
    fn failed_partitions_are_stop() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        let mut i = inputs(3, 3, 710);
        i.failed = true;
        assert_eq!(judge(&mut tr, i, t0, &t()).status, PartitionStatus::Stop);
    }

    #[test]
    fn history_survives_a_quick_reassignment_only() {
        let t0 = Instant::now();
        let mut tr = Track::new(t0, 1);
        judge(&mut tr, inputs(10, 10, 20), t0, &t());
        tr.seen(t0 + Duration::from_secs(3), 2, Duration::from_secs(10));
        let j = judge(
            &mut tr,
            inputs(10, 10, 20),
            t0 + Duration::from_secs(11),
            &t(),
        );
        assert_eq!(
            j.status,
            PartitionStatus::Stall,
            "a rebalance loop does not reset the clock"
        );
        tr.seen(t0 + Duration::from_secs(40), 3, Duration::from_secs(10));
        let j = judge(
            &mut tr,
            inputs(10, 10, 20),
            t0 + Duration::from_secs(41),
            &t(),
        );
        assert_eq!(
            j.status,
            PartitionStatus::Ok,
            "forgotten after a long absence"
        );
    }

    #[test]
    fn severities() {
        use HealthReason::*;
        let d = Duration::from_secs(1);
        assert_eq!(Stalled { duration: d }.severity(), HealthStatus::Unhealthy);
        assert_eq!(
            BlockedByFailingRecord { duration: d }.severity(),
            HealthStatus::Degraded
        );
        let overrun = |policy| RetentionOverrun {
            offset: 1,
            log_start_offset: 5,
            lost: 4,
            policy,
            resumed_at: None,
            ago: d,
        };
        assert_eq!(
            overrun(RetentionOverrunPolicy::Earliest).severity(),
            HealthStatus::Degraded
        );
        assert_eq!(
            overrun(RetentionOverrunPolicy::Fail).severity(),
            HealthStatus::Unhealthy
        );
        let gap = |s| PollGap {
            gap: Duration::from_secs(s),
            max_poll_interval: Duration::from_secs(10),
        };
        assert_eq!(gap(9).severity(), HealthStatus::Degraded);
        assert_eq!(gap(10).severity(), HealthStatus::Unhealthy);
        assert!(HealthStatus::Healthy < HealthStatus::Degraded);
        assert!(HealthStatus::Degraded < HealthStatus::Unhealthy);
        assert_eq!(
            overrun(RetentionOverrunPolicy::Fail).to_string(),
            "retention overrun 1.0 s ago: offset 1 below log start offset 5, 4 records lost; partition stopped (policy fail)"
        );
    }

    #[test]
    fn options_are_validated() {
        let base = || {
            FreshConsumer::new(())
                .bootstrap_servers("b:1")
                .group_id("g")
                .topics(["t"])
        };
        base().validate().unwrap();
        assert!(matches!(
            base()
                .health_thresholds(HealthThresholds::default().with_stall_after(Duration::ZERO))
                .validate(),
            Err(ConfigError::InvalidOption {
                option: "health_thresholds",
                ..
            })
        ));
        assert!(matches!(
            base().set("auto.offset.reset", "sometimes").validate(),
            Err(ConfigError::InvalidProperty { property, .. }) if property == "auto.offset.reset"
        ));
        base()
            .set("auto.offset.reset", "latest")
            .validate()
            .unwrap();
        base()
            .statistics_interval(Duration::ZERO)
            .validate()
            .unwrap();
        assert!(matches!(
            base()
                .statistics_interval(Duration::from_secs(100_000))
                .validate(),
            Err(ConfigError::InvalidOption {
                option: "statistics_interval",
                ..
            })
        ));
        assert!(
            base()
                .set("statistics.interval.ms", "often")
                .validate()
                .is_err()
        );
    }

    #[test]
    fn a_handle_before_the_run_says_not_started() {
        let c = FreshConsumer::new(()).group_id("g");
        let s = c.health_handle().snapshot();
        assert_eq!(s.state, ConsumerState::NotStarted);
        assert_eq!(s.status, HealthStatus::Degraded);
        assert_eq!(s.reasons, vec![HealthReason::NotStarted]);
        assert!(s.partitions.is_empty());
    }
}
