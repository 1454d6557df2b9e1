//! What the health evaluation reports: statuses, reasons, per-partition
//! reports and the consumer's snapshot.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::health::thresholds::RetentionOverrunPolicy;

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
/// [module documentation](crate::health)). Exported as
/// [`PARTITION_STATUS`](crate::metrics::PARTITION_STATUS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PartitionStatus {
    /// Committing and keeping up.
    Ok,
    /// Committed offsets advance but the lag keeps growing.
    Warn,
    /// Committed offset and processed position frozen while the lag is
    /// above zero: the head of the line is stuck.
    Stall,
    /// Completed records waited for a commit for longer than the window
    /// (records complete but their commits do not land), or stopped by
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
    /// [`STATUS`](crate::metrics::STATUS) attribute.
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

/// A partition's replication as the cluster's metadata shows it: how many
/// replicas it has, how many of them are in sync with its leader (the
/// ISR), and how many brokers the cluster has. Read by the consumer's
/// health thread every 30 s (a Metadata request per assigned topic) and by
/// the group monitor every cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replication {
    /// The partition's replicas (its replication factor).
    pub replicas: u32,
    /// The replicas in sync with the leader (the ISR), the leader included.
    pub in_sync: u32,
    /// The brokers in the cluster's metadata.
    pub brokers: u32,
}

impl Replication {
    /// Whether the partition has fewer replicas in sync than replicas, or
    /// a single replica on a cluster of more than one broker: losing one
    /// more broker (its only one) stops it. Consumption goes on from the
    /// leader meanwhile.
    pub fn is_under_replicated(&self) -> bool {
        self.in_sync < self.replicas || (self.replicas == 1 && self.brokers > 1)
    }
}

/// Why a partition or the consumer is not healthy. Each reason has a
/// [`severity`](HealthReason::severity); the snapshot's status is the
/// highest one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthReason {
    /// Records wait (the lag is above zero) and for `duration` neither the
    /// committed offset advanced nor a record completed
    /// ([`PartitionStatus::Stall`](crate::health::PartitionStatus::Stall)). Unhealthy.
    Stalled {
        /// Since the committed offset or the processed position last moved
        /// (or the lag rose above zero, if later).
        duration: Duration,
    },
    /// Records completed but no commit covered them for `duration`
    /// ([`PartitionStatus::Stop`](crate::health::PartitionStatus::Stop)): the processed position stayed above
    /// the committed offset all that time. A handler that hung and then
    /// returned is not this: its commit follows within the commit
    /// interval. Unhealthy.
    NotCommitting {
        /// Since completed records began to wait for a commit (or the
        /// committed offset last advanced, if later).
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
    /// also [`HealthReason::Stalled`](crate::health::HealthReason::Stalled).
    #[non_exhaustive]
    BlockedByFailingRecord {
        /// Since the partition became blocked.
        duration: Duration,
        /// The blocking record's offset: nothing at or after it is
        /// committed until it moves on.
        offset: i64,
        /// Handler attempts made before the partition stopped.
        attempts: u32,
        /// The last error, with its sources (`outer: inner`).
        error: String,
    },
    /// The application paused the partition (or its topic) through a
    /// [`ControlHandle`](crate::control::ControlHandle): its records wait on purpose,
    /// so it is neither stalled nor short of successes however long the
    /// pause lasts, and its lag may grow without a warning. Healthy: the
    /// partition reads `ok` with this reason.
    PausedByApplication,
    /// The lag grew over the whole window while commits advanced
    /// ([`PartitionStatus::Warn`](crate::health::PartitionStatus::Warn)): at every sample (eight per
    /// [`HealthThresholds::lag_growth_window`](crate::health::HealthThresholds::lag_growth_window)) the lag was above zero
    /// and not below the sample before, and it grew by more records than
    /// arrive in the commit interval + the statistics interval + 0.5 s (the
    /// amount a consumer that keeps up moves on its own, at the rate
    /// observed over the window), plus the tier's delay on a retry-tier
    /// partition (its records wait that long by design). Degraded.
    LagGrowing {
        /// The lag at the start of the window, in records.
        from: u64,
        /// The lag now, in records.
        to: u64,
        /// The window.
        over: Duration,
    },
    /// The committed offset went backwards ([`PartitionStatus::Rewind`](crate::health::PartitionStatus::Rewind)).
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
    /// [`HealthThresholds::report_events_for`](crate::health::HealthThresholds::report_events_for)).
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
    /// The partition's log was truncated below the offset the partition
    /// was to continue at (an unclean leader election): the leader's log
    /// no longer holds the records from `truncated_to` to `offset` that
    /// this group read, and holds new records at those offsets. Found from
    /// the leader epoch committed with the offset (KIP-320). Unhealthy with
    /// [`RetentionOverrunPolicy::Fail`], degraded otherwise.
    LogTruncated {
        /// The committed offset (or position).
        offset: i64,
        /// The first offset of the leader's log past the records it still
        /// shares with what this group read.
        truncated_to: i64,
        /// What was done (earliest resumes at `truncated_to`, latest at
        /// the high watermark).
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
    /// No broker has been reachable for `down_for`: librdkafka's statistics
    /// reports (every `statistics.interval.ms`, see
    /// [`FreshConsumer::statistics_interval`](crate::FreshConsumer::statistics_interval))
    /// showed no connection in state `UP` since then, to any broker nor to
    /// the group coordinator (librdkafka connects to a broker only while it
    /// has requests for it, so one connection up is enough). Nothing is
    /// fetched or committed meanwhile; librdkafka reconnects by itself, and
    /// the reason goes with the first report that shows a broker up again.
    /// Degraded: during a cluster outage restarting the consumer would not
    /// help. A member whose own client stopped connecting while the
    /// cluster is up (issue 46, librdkafka 2.12.1 after a rolling restart)
    /// has no group coordinator either, and
    /// [`NoGroupCoordinator`](Self::NoGroupCoordinator) turns it unhealthy.
    /// Not reported with statistics off.
    BrokersUnreachable {
        /// Since the first report without a broker up.
        down_for: Duration,
    },
    /// The member has had no group coordinator for `lost_for`:
    /// librdkafka's statistics report the group's state (`cgrp.state`) as
    /// other than `up` (it is looking for the coordinator or waiting for a
    /// connection to it) since then. Nothing is committed, and a member
    /// that loses its partitions meanwhile cannot rejoin. Degraded, and
    /// unhealthy from
    /// [`HealthThresholds::coordinator_lost_after`](crate::health::HealthThresholds::coordinator_lost_after)
    /// (`unhealthy_after`, 120 s by default): a coordinator moves to
    /// another broker within seconds, and librdkafka 2.12.1 can lose every
    /// broker connection of a client for good after a rolling restart
    /// (brokers it dropped from its metadata while they restarted: issue
    /// 46, confluentinc/librdkafka#5511 and #5600). Restarting the process
    /// (a liveness probe on this health) recovers such a member. Not
    /// reported with statistics off.
    NoGroupCoordinator {
        /// Since the group's state left `up`.
        lost_for: Duration,
        /// librdkafka's state of the group (`query-coord`, `wait-coord`,
        /// `wait-broker`, `wait-broker-transport`, `init`).
        state: String,
        /// When it turns unhealthy.
        unhealthy_after: Duration,
    },
    /// [`FreshConsumer::run_until`](crate::FreshConsumer::run_until) has not started yet. Degraded.
    NotStarted,
    /// The run started `waited` ago and the member has not joined its group
    /// yet ([`ConsumerState::Joining`](crate::health::ConsumerState::Joining)): no partition is assigned,
    /// so nothing is consumed and no partition can report a problem.
    /// Degraded: not ready, but alive (joining takes the group's
    /// rebalance, seconds with the classic protocol).
    NotJoined {
        /// Since the run started.
        waited: Duration,
    },
    /// The consumer stopped ([`FreshConsumer::run_until`](crate::FreshConsumer::run_until) returned).
    /// Unhealthy.
    Stopped,
    /// The partition is under-replicated ([`Replication::is_under_replicated`]):
    /// fewer of its replicas in sync than it has, or a single replica on
    /// a cluster of several brokers. Read from the cluster's metadata
    /// every 30 s. Healthy (informational): the consumer reads from the
    /// leader as before, but one more broker loss (with a single replica:
    /// the loss of its broker) stops the partition, and producers with
    /// `acks=all` (the library's outputs and dead letters) are refused
    /// (`NOT_ENOUGH_REPLICAS`) once fewer than `min.insync.replicas` are
    /// in sync.
    UnderReplicated(Replication),
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
            RetentionOverrun { policy, .. }
            | CommittedAboveHighWatermark { policy, .. }
            | LogTruncated { policy, .. } => {
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
            NoGroupCoordinator {
                lost_for,
                unhealthy_after,
                ..
            } => {
                if lost_for >= unhealthy_after {
                    HealthStatus::Unhealthy
                } else {
                    HealthStatus::Degraded
                }
            }
            BlockedByFailingRecord { .. }
            | LagGrowing { .. }
            | Rewound { .. }
            | PollIntervalExceeded { .. }
            | BrokersUnreachable { .. }
            | NotStarted
            | NotJoined { .. } => HealthStatus::Degraded,
            PausedByApplication | UnderReplicated(_) => HealthStatus::Healthy,
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
            BlockedByFailingRecord {
                duration,
                offset,
                attempts,
                error,
            } => {
                write!(
                    f,
                    "stopped at offset {offset} by a record that failed {attempts} attempts, for {}: {error}",
                    Secs(*duration)
                )
            }
            PausedByApplication => f.write_str("paused by the application"),
            UnderReplicated(r) if r.in_sync < r.replicas => write!(
                f,
                "under-replicated: {} of {} replicas in sync",
                r.in_sync, r.replicas
            ),
            UnderReplicated(r) => write!(
                f,
                "a single replica on a cluster of {} brokers: its broker's loss stops the partition",
                r.brokers
            ),
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
            LogTruncated {
                offset,
                truncated_to,
                policy,
                resumed_at,
                ago,
            } => {
                write!(
                    f,
                    "log truncated below offset {offset} {} ago: the leader's log diverges at {truncated_to}, {} records read before are gone; ",
                    Secs(*ago),
                    offset - truncated_to
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
            BrokersUnreachable { down_for } => {
                write!(f, "no broker reachable for {}", Secs(*down_for))
            }
            NoGroupCoordinator {
                lost_for,
                state,
                unhealthy_after,
            } => write!(
                f,
                "no group coordinator for {} (librdkafka group state {state}; unhealthy from {})",
                Secs(*lost_for),
                Secs(*unhealthy_after)
            ),
            NotStarted => f.write_str("not started"),
            NotJoined { waited } => write!(
                f,
                "not a member of the group yet ({} since the run started): no partition assigned",
                Secs(*waited)
            ),
            Stopped => f.write_str("stopped"),
        }
    }
}

/// One assigned partition in a [`HealthSnapshot`].
///
/// Offsets are Kafka offsets ("next offset to read"); lags are counts of
/// records; durations are measured on the consumer's monotonic clock, ages
/// against its wall clock. See the [module documentation](crate::health) for where
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
    /// The partition's replication from the cluster's metadata (read every
    /// 30 s, and within 5 s of the assignment); `None` before the first
    /// read.
    pub replication: Option<Replication>,
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
    /// `run_until` runs but the member has not joined its group yet: no
    /// assignment has arrived (not even an empty one) and librdkafka's
    /// group join state is not `steady`. A readiness probe should say not
    /// ready ([`HealthReason::NotJoined`](crate::health::HealthReason::NotJoined)).
    Joining,
    /// Running, a member of its group.
    Running,
    /// `run_until` returned.
    Stopped,
}

/// A consistent, cheap view of the consumer's health, from
/// [`HealthHandle::snapshot`](crate::health::HealthHandle::snapshot). `Display` prints a short text report.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities() {
        use HealthReason::*;
        let d = Duration::from_secs(1);
        assert_eq!(Stalled { duration: d }.severity(), HealthStatus::Unhealthy);
        assert_eq!(
            BlockedByFailingRecord {
                duration: d,
                offset: 7,
                attempts: 3,
                error: "permanent: bad json".to_owned(),
            }
            .severity(),
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
}
