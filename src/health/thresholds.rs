//! What the health evaluation is configured with: thresholds, the
//! retention-overrun policy, the statistics interval, and where a partition
//! without a committed offset starts.

use std::time::Duration;

/// Default for [`FreshConsumer::statistics_interval`](crate::FreshConsumer::statistics_interval): librdkafka reports
/// its statistics every second.
pub const DEFAULT_STATISTICS_INTERVAL: Duration = Duration::from_secs(1);
/// Default for [`HealthThresholds::stall_after`](crate::health::HealthThresholds::stall_after).
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(60);
/// Default for [`HealthThresholds::no_success_after`](crate::health::HealthThresholds::no_success_after).
pub const DEFAULT_NO_SUCCESS_AFTER: Duration = Duration::from_secs(60);
/// Default for [`HealthThresholds::lag_growth_window`](crate::health::HealthThresholds::lag_growth_window).
pub const DEFAULT_LAG_GROWTH_WINDOW: Duration = Duration::from_secs(120);
/// Default for [`HealthThresholds::report_events_for`](crate::health::HealthThresholds::report_events_for).
pub const DEFAULT_REPORT_EVENTS_FOR: Duration = Duration::from_secs(600);
/// Default for [`HealthThresholds::coordinator_lost_after`](crate::health::HealthThresholds::coordinator_lost_after).
pub const DEFAULT_COORDINATOR_LOST_AFTER: Duration = Duration::from_secs(120);

/// What the library does when a partition's offset is out of range when it
/// is assigned or while it is consumed: below the log start offset (a
/// **retention overrun**: records were deleted before the group processed
/// them), above the high watermark (the topic was recreated), or past the
/// point where a **truncated log** diverges from the records the group read
/// (an unclean leader election; found with the leader epoch committed with
/// the offset). For a truncation, `Earliest` resumes at the divergence.
///
/// Either way the anomaly is counted (`fresh_consumer.offset.resets`; the
/// records lost in `fresh_consumer.retention.overrun.messages`), logged at
/// ERROR with the partition, the offset and the log start offset, and
/// reported by [`HealthHandle::snapshot`](crate::health::HealthHandle::snapshot). The library never moves a
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
    /// ([`HealthReason::RetentionOverrun`](crate::health::HealthReason::RetentionOverrun) with this policy), so an operator
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
/// `with_*` setters; pass to [`FreshConsumer::health_thresholds`](crate::FreshConsumer::health_thresholds).
///
/// ```
/// use std::time::Duration;
/// use fresh_consumer::health::HealthThresholds;
///
/// let t = HealthThresholds::default()
///     .with_stall_after(Duration::from_secs(30))
///     .with_no_success_after(Duration::from_secs(45));
/// assert_eq!(t.stall_after, Duration::from_secs(30));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthThresholds {
    /// A partition whose records wait while neither its committed offset
    /// nor its processed position moves for this long is
    /// [`PartitionStatus::Stall`](crate::health::PartitionStatus::Stall); one whose completed records wait this long
    /// for a commit is [`PartitionStatus::Stop`](crate::health::PartitionStatus::Stop). Both are unhealthy.
    /// Defaults to 60 s.
    pub stall_after: Duration,
    /// A partition with lag above zero and no record that succeeded for
    /// this long is unhealthy ([`HealthReason::NoSuccess`](crate::health::HealthReason::NoSuccess)), even when its
    /// committed offset advances (records parked rather than handled).
    /// Defaults to 60 s.
    pub no_success_after: Duration,
    /// The window over which a growing lag makes a partition
    /// [`PartitionStatus::Warn`](crate::health::PartitionStatus::Warn) (growth beyond what the commit interval,
    /// the statistics interval and 0.5 s of traffic explain, and on a
    /// retry-tier partition its delay; see
    /// [`HealthReason::LagGrowing`](crate::health::HealthReason::LagGrowing)), and for which a rewind of the
    /// committed offset is reported ([`PartitionStatus::Rewind`](crate::health::PartitionStatus::Rewind)).
    /// Defaults to 120 s.
    pub lag_growth_window: Duration,
    /// How long past events stay in the snapshot: a retention overrun the
    /// partition recovered from, a committed offset above the high
    /// watermark, `max.poll.interval.ms` exceeded. Defaults to 10 min.
    pub report_events_for: Duration,
    /// A member that has had no group coordinator for this long is
    /// unhealthy ([`HealthReason::NoGroupCoordinator`](crate::health::HealthReason::NoGroupCoordinator));
    /// before that it is degraded. A coordinator moves to another broker
    /// within seconds when its broker stops; librdkafka 2.12.1 can lose
    /// every broker connection of a client for good after a rolling
    /// restart (measured in the soak: 12 minutes, until the process was
    /// stopped), and only a new client (a restarted process) recovers.
    /// Defaults to 120 s.
    pub coordinator_lost_after: Duration,
}

impl Default for HealthThresholds {
    fn default() -> Self {
        HealthThresholds {
            stall_after: DEFAULT_STALL_AFTER,
            no_success_after: DEFAULT_NO_SUCCESS_AFTER,
            lag_growth_window: DEFAULT_LAG_GROWTH_WINDOW,
            report_events_for: DEFAULT_REPORT_EVENTS_FOR,
            coordinator_lost_after: DEFAULT_COORDINATOR_LOST_AFTER,
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

    /// Sets [`coordinator_lost_after`](Self::coordinator_lost_after).
    #[must_use]
    pub fn with_coordinator_lost_after(mut self, d: Duration) -> Self {
        self.coordinator_lost_after = d;
        self
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
    /// [`FreshConsumer::commit_interval`](crate::FreshConsumer::commit_interval):
    /// how far the committed offset trails the processed position.
    pub(crate) commit_interval: Duration,
    /// `isolation.level=read_committed` (librdkafka's default): lag counts
    /// to the last stable offset, not the high watermark.
    pub(crate) read_committed: bool,
}

/// Where a partition without a committed offset starts: the user's
/// `auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NewPartitionStart {
    /// `earliest` (the library's default): the log start offset.
    Earliest,
    /// `latest`: the high watermark.
    Latest,
    /// `error`: not consumed; reported.
    Error,
}

impl NewPartitionStart {
    /// Parses librdkafka's `auto.offset.reset` values.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "earliest" | "smallest" | "beginning" => Some(NewPartitionStart::Earliest),
            "latest" | "largest" | "end" => Some(NewPartitionStart::Latest),
            "error" => Some(NewPartitionStart::Error),
            _ => None,
        }
    }
}
