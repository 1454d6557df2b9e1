//! What one monitor cycle reports: a row per watched partition, a diagnosis
//! per group.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::summary::TopicPartition;

/// The report of one cycle of a [`Monitor`](crate::monitor::Monitor): one
/// [`GroupReport`] per watched group, the named groups first in the order
/// they were given, then the discovered ones by name.
#[derive(Clone, Debug)]
pub struct MonitorReport {
    /// Wall-clock time at which the cycle's reads finished (the "now" of
    /// every time lag in the report).
    pub taken_at: SystemTime,
    /// How long the cycle's reads took (metadata, offsets, watermarks and
    /// the reads of records at committed offsets).
    pub cycle_duration: Duration,
    /// Records read at committed offsets in this cycle (timestamps of
    /// offsets already read in an earlier cycle are reused, not read again).
    pub records_read: u64,
    /// One report per watched group.
    pub groups: Vec<GroupReport>,
}

/// One group's partitions and its diagnosis.
#[derive(Clone, Debug)]
pub struct GroupReport {
    /// The consumer group (`group.id`).
    pub group: String,
    /// Every partition of the watched topics the group reads (a watched topic
    /// on which it has no committed offset is left out, when it has one on
    /// another), by topic then partition number.
    pub partitions: Vec<PartitionLag>,
    /// The group's member (consumer) count, as the brokers describe the
    /// group (one DescribeConsumerGroups request per cycle for the watched
    /// groups: ConsumerGroupDescribe for groups of the KIP-848 consumer
    /// protocol, `group.protocol=consumer`, classic members of an upgraded
    /// group included; DescribeGroups for classic groups; with discovery,
    /// the ListGroups listing describes the classic ones):
    /// `Some(0)` for a group without members (its consumers are gone);
    /// `None` when the brokers do not describe it: a broker without the
    /// describe APIs (librdkafka's mock broker), a missing ACL, or a group
    /// that does not exist. The replica suggestion counts from it, else
    /// from [`GroupMonitor::current_replicas`](crate::monitor::GroupMonitor::current_replicas).
    pub members: Option<u32>,
    /// The group's state as the brokers describe it (with
    /// [`members`](Self::members)): `Stable`, `PreparingRebalance`,
    /// `CompletingRebalance` (a rebalance is in progress) or `Empty`;
    /// `Unknown` for a KIP-848 group while it assigns or reconciles
    /// (librdkafka 2.12 has no names for those states; the member count's
    /// change marks the rebalance then); `None` when the brokers do not
    /// describe the group.
    pub state: Option<String>,
    /// The group's partition assignor as the brokers name it (`range`,
    /// `roundrobin`, `cooperative-sticky`, KIP-848's `uniform` or `range`),
    /// `None` when they do not describe the group. It decides the replica
    /// cap ([`GroupReport::replica_cap`]).
    pub assignor: Option<String>,
    /// What is wrong, if anything (see [`Diagnosis`]).
    pub diagnosis: Diagnosis,
    /// The partitions the diagnosis is about: the frozen ones for
    /// [`Diagnosis::Stuck`] and [`Diagnosis::Dead`], the ones carrying the
    /// time lag for [`Diagnosis::Skewed`]; empty otherwise.
    pub named: Vec<TopicPartition>,
    /// Sum of the offset lags, in records (for the drain estimate only:
    /// alert on the per-partition maximum).
    pub total_lag: u64,
    /// The largest time lag of any partition; `None` when no partition's
    /// time lag is known.
    pub max_time_lag: Option<Duration>,
    /// Records per second the group's committed offsets advanced over the
    /// window (summed over partitions); 0 until two samples exist.
    pub commit_rate: f64,
    /// Records per second the log ends advanced over the window (summed
    /// over partitions): the produce rate.
    pub produce_rate: f64,
    /// Estimated time to drain the backlog at the recent commit rate:
    /// `total_lag / (commit_rate - produce_rate)`; `Some(ZERO)` without a
    /// backlog, `None` when the group is not clearly gaining on the log end
    /// (its commit rate less than 10 % above the produce rate, or 0.1
    /// record per second, whichever is more): a group keeping pace has no
    /// drain time, where noise between the two rates used to give hours.
    pub drain_time: Option<Duration>,
    /// Whether more replicas would help (see [`Scaling`]).
    pub scaling: Scaling,
    /// Records read at this group's committed offsets, since the monitor
    /// started, that had no usable timestamp (none, or negative): their
    /// partitions' time lag is unknown. Each record counts once.
    pub timestamps_missing: u64,
    /// Records read at this group's committed offsets, since the monitor
    /// started, whose timestamp was later than the monitor's clock: their
    /// partitions' time lag is reported as 0. Each record counts once.
    pub timestamps_future: u64,
    /// Cycles, since the monitor started, in which the brokers described
    /// the group as `Stable` with members and committed offsets, but no
    /// member's assignment could be read (a group whose protocol is not
    /// Kafka's consumer protocol, so librdkafka cannot decode it): those
    /// cycles judged the group's partitions without their owners (the
    /// group-wide rules only, [`PartitionLag::owner`] `None`), never a
    /// guess at who owns what. Logged at INFO the first time.
    pub assignments_unreadable: u64,
}

impl GroupReport {
    /// The most replicas that can each own a partition of the topics the
    /// group reads: with the `range` assignor (the default first choice of
    /// librdkafka and the Java client, and what an unknown assignor is
    /// taken for) the largest topic's partition count, since each topic is
    /// split on its own; with the others (`roundrobin`,
    /// `cooperative-sticky`, KIP-848's `uniform`) all the partitions. At
    /// least 1. The replica suggestion and the KEDA scaler never go above it.
    pub fn replica_cap(&self) -> u32 {
        let rows: Vec<&PartitionLag> = self.partitions.iter().collect();
        replica_cap(&rows, self.assignor.as_deref())
    }
}

/// One partition of one group, as read in one cycle.
///
/// Offsets are Kafka offsets; the committed offset is the group's "next
/// offset to read".
#[derive(Clone, Debug)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
    /// The group's committed offset (OffsetFetch); `None` when the group has
    /// none for this partition.
    pub committed: Option<i64>,
    /// The log start offset (ListOffsets `earliest`): the oldest record
    /// retention kept.
    pub log_start: i64,
    /// The high watermark (ListOffsets `latest` under `read_uncommitted`).
    pub high_watermark: i64,
    /// The last stable offset (ListOffsets `latest` under
    /// `read_committed`); equal to the high watermark without open
    /// transactions.
    pub last_stable: i64,
    /// Records between the committed offset and the end the group reads to
    /// (the last stable offset under `isolation.level=read_committed`, the
    /// default, the high watermark under `read_uncommitted`), deleted
    /// records included; `None` without a committed offset.
    pub offset_lag: Option<u64>,
    /// Now minus the timestamp of the record at the committed offset (the
    /// oldest record the group has not processed); zero when the offset lag
    /// is zero or the timestamp is in the future; `None` when unknown (no
    /// committed offset, no usable timestamp, or the record could not be
    /// read within the cycle's read timeout). For a partition out of range
    /// the record read is the oldest one kept (a lower bound).
    pub time_lag: Option<Duration>,
    /// The timestamp the time lag comes from.
    pub timestamp: HeadTimestamp,
    /// Time since the committed offset last changed, as seen by this
    /// monitor: a lower bound (the time since the monitor first saw it)
    /// until it changes once. `None` without a committed offset.
    pub commit_unchanged_for: Option<Duration>,
    /// How long records have waited behind an unchanged committed offset:
    /// the time since the later of the committed offset's last change and
    /// the first cycle that saw the offset lag above zero (a lower bound
    /// from the monitor's start). `None` while nothing waits. A partition
    /// idle for an hour that receives a record starts at zero here, while
    /// [`commit_unchanged_for`](Self::commit_unchanged_for) says an hour.
    pub waiting_for: Option<Duration>,
    /// The log end (the end the lag counts to) moved within the last
    /// `stall_after` while records waited behind the unchanged committed
    /// offset (false again once the producer stops): with
    /// [`waiting_for`](Self::waiting_for) at or above `stall_after`, the
    /// partition is [`LagStatus::Stalled`].
    pub log_end_moved: bool,
    /// How long the last stable offset has stood still with the high
    /// watermark above it (`high_watermark - last_stable` records of an
    /// open transaction wait unreadable to a `read_committed` group), as
    /// this monitor saw it: a lower bound from its first sight. `None`
    /// while the two are equal, or when the group reads uncommitted (it
    /// reads to the high watermark). At
    /// [`stall_after`](crate::monitor::GroupMonitor::stall_after) or more,
    /// the group is [`Diagnosis::OpenTransaction`] unless its consumers
    /// are behind on what they can read.
    pub transaction_open_for: Option<Duration>,
    /// Records retention may still delete before it reaches unread records:
    /// committed offset minus log start offset. Negative when records were
    /// deleted unread (out of range). `None` without a committed offset.
    /// The in-process gauge `fresh_consumer.partition.retention.margin` is
    /// the same number from inside a consumer.
    pub retention_margin: Option<i64>,
    /// Estimated time until the log start passes the committed offset:
    /// the margin divided by how much faster the log start moved than the
    /// committed offset over the window. `None` when the log start is not
    /// gaining on the committed offset (it did not move over the window, or
    /// the commits move faster), or the margin is not positive.
    pub retention_eta: Option<Duration>,
    /// The group member that owns the partition, as the brokers describe
    /// the group (DescribeGroups for classic groups, whose assignment
    /// librdkafka decodes with the consumer protocol, or
    /// ConsumerGroupDescribe for KIP-848 groups). `None` when no member
    /// owns it (unassigned, between rebalances), or when the brokers do not
    /// describe the group's assignments (librdkafka's mock broker; a group
    /// whose assignor does not use the consumer protocol's format): then
    /// the diagnosis judges partitions without their owners.
    pub owner: Option<PartitionOwner>,
    /// The partition's replication as the cycle's metadata showed it
    /// (replicas, in-sync replicas, the cluster's brokers); `None` when not
    /// read. An under-replicated partition
    /// ([`Replication::is_under_replicated`](crate::health::Replication::is_under_replicated):
    /// fewer replicas in sync than it has, or a single replica on a
    /// cluster of several brokers) is named in the text report and logged
    /// once; it does not change the diagnosis (the group reads from the
    /// leader as before), but one more broker loss can stop the partition.
    /// JSON: `replicas`, `in_sync_replicas`, `brokers`.
    pub replication: Option<crate::health::Replication>,
    /// The partition's status.
    pub status: LagStatus,
}

/// A group member, as the brokers describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOwner {
    /// Its member id (assigned by the group coordinator).
    pub member_id: String,
    /// Its `client.id`.
    pub client_id: String,
    /// The host it connected from, as the coordinator saw it (such as
    /// `/10.0.3.7`).
    pub host: String,
}

/// The timestamp of the record at a partition's committed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadTimestamp {
    /// Nothing to read: the offset lag is zero (or there is no committed
    /// offset), or the probe read from the committed offset to the end
    /// without meeting a record a consumer receives (only transaction
    /// markers or aborted records lie there; the offset lag is then
    /// reported as 0).
    CaughtUp,
    /// `CreateTime`, milliseconds since the Unix epoch (set by the
    /// producer; replays and producer clocks can make it misleading).
    CreateTime(i64),
    /// `LogAppendTime`, milliseconds since the Unix epoch (set by the
    /// broker).
    LogAppendTime(i64),
    /// The record carries no usable timestamp (none, or negative): counted
    /// in [`GroupReport::timestamps_missing`].
    Missing,
    /// The record's timestamp (milliseconds since the Unix epoch) is later
    /// than the monitor's clock: counted in
    /// [`GroupReport::timestamps_future`]; its time lag is reported as 0.
    Future(i64),
    /// The record could not be read within the read timeout.
    Unread,
}

impl HeadTimestamp {
    /// `create_time`, `log_append_time`, `missing`, `future`, `unread` or
    /// `caught_up`.
    pub fn as_str(self) -> &'static str {
        match self {
            HeadTimestamp::CaughtUp => "caught_up",
            HeadTimestamp::CreateTime(_) => "create_time",
            HeadTimestamp::LogAppendTime(_) => "log_append_time",
            HeadTimestamp::Missing => "missing",
            HeadTimestamp::Future(_) => "future",
            HeadTimestamp::Unread => "unread",
        }
    }
}

/// A partition's status, worst first: [`NoCommittedOffset`](Self::NoCommittedOffset),
/// [`OutOfRange`](Self::OutOfRange), [`Stalled`](Self::Stalled),
/// [`Lagging`](Self::Lagging), [`TimeLagUnknown`](Self::TimeLagUnknown),
/// [`Ok`](Self::Ok).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LagStatus {
    /// Caught up, or behind by a known time lag below the lag threshold
    /// ([`GroupMonitor::lag_threshold`](crate::monitor::GroupMonitor::lag_threshold)).
    /// A partition with records waiting whose time lag is unknown is never
    /// `ok` (see [`TimeLagUnknown`](Self::TimeLagUnknown)).
    Ok,
    /// Records wait (offset lag above zero) but their age is unknown: the
    /// record at the committed offset carries no usable timestamp
    /// ([`HeadTimestamp::Missing`]) or could not be read within the read
    /// timeout ([`HeadTimestamp::Unread`]). Not stalled, not out of range.
    TimeLagUnknown,
    /// The time lag is at or above the lag threshold, and the partition is
    /// not stalled. This includes a committed offset frozen over a static
    /// backlog (records wait, but no new ones arrive): its time lag grows
    /// with the clock, so it turns `lagging` at the latest `lag_threshold`
    /// after the freeze began (see [`PartitionLag::waiting_for`] for how long
    /// it has been frozen). It is not `stalled`: from outside, a consumer
    /// that cannot commit past the records there looks the same as a
    /// blocked one until new records arrive. A group whose every commit is
    /// frozen this way is [`Diagnosis::Dead`]. Offsets a consumer never
    /// receives (transaction markers, aborted records under
    /// `read_committed`) are not such a backlog: the probe reads past them
    /// to the end, and the partition is caught up with offset lag 0.
    Lagging,
    /// The committed offset has not changed for at least
    /// [`stall_after`](crate::monitor::GroupMonitor::stall_after) while
    /// records wait (offset lag above zero) **and** the log end moved in
    /// that time: new records arrive, and the group does not take them.
    Stalled,
    /// The committed offset is below the log start: `deleted` records were
    /// deleted by retention before the group read them.
    OutOfRange {
        /// Log start offset minus committed offset.
        deleted: u64,
    },
    /// The group has no committed offset for the partition (it never
    /// committed one, it expired, or the group name is wrong).
    NoCommittedOffset,
}

impl LagStatus {
    /// Every status name, in the order of [`as_str`](Self::as_str) values
    /// exported as the state set `fresh_consumer.monitor.partition.status`.
    pub const NAMES: [&'static str; 6] = [
        "ok",
        "lagging",
        "stalled",
        "out_of_range",
        "no_committed_offset",
        "time_lag_unknown",
    ];

    /// `ok`, `lagging`, `stalled`, `out_of_range`, `no_committed_offset` or
    /// `time_lag_unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            LagStatus::Ok => "ok",
            LagStatus::TimeLagUnknown => "time_lag_unknown",
            LagStatus::Lagging => "lagging",
            LagStatus::Stalled => "stalled",
            LagStatus::OutOfRange { .. } => "out_of_range",
            LagStatus::NoCommittedOffset => "no_committed_offset",
        }
    }
}

/// What a group's samples over the window say, checked in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diagnosis {
    /// No watched partition has a committed offset: the group never
    /// committed, its offsets expired, or the name is wrong.
    NoOffsets,
    /// No record waits on any partition.
    Idle,
    /// Records wait and nothing of the group moves: no partition's
    /// committed offset moved for
    /// [`stall_after`](crate::monitor::GroupMonitor::stall_after) (or for
    /// the [`window`](crate::monitor::GroupMonitor::window), when that is
    /// shorter), and every partition with records waiting has had them
    /// waiting that long too (a group idle for an hour that receives
    /// records is not dead at once): the consumers are down or hung.
    /// Whether the log end moves does not matter. A killed consumer under
    /// steady traffic reads `dead` from `stall_after` on, never
    /// [`Stuck`](Self::Stuck). More replicas do not help.
    Dead,
    /// Some partitions' committed offsets are frozen while their log end
    /// moves (status [`LagStatus::Stalled`]) and another partition of the
    /// group advances: its committed offset moved after the longest-frozen
    /// one had been frozen for
    /// [`stall_after`](crate::monitor::GroupMonitor::stall_after) (else the
    /// group becomes [`Dead`](Self::Dead): a killed consumer's partitions
    /// stop within a commit interval of each other). A poison record, a
    /// hung worker, an unassigned partition. Named in [`GroupReport::named`].
    /// More replicas do not help.
    Stuck,
    /// The group is behind (a time lag at or above the lag threshold) and
    /// one or few partitions carry most of the time lag: a hot key. A
    /// partition is read by one consumer, so more replicas do not help.
    Skewed,
    /// The group is behind on most partitions, the time lag is not
    /// falling, and the commits advance: the consumers are too slow. More
    /// replicas help, up to the partition count.
    ConsumerBound,
    /// Records wait, but the time lag is below the threshold or falling.
    KeepingUp,
    /// The consumers have read what they can (the time lag is below the
    /// threshold), and records wait behind a transaction open for
    /// [`stall_after`](crate::monitor::GroupMonitor::stall_after) or
    /// longer: the high watermark is above a last stable offset that has
    /// not moved ([`PartitionLag::transaction_open_for`]). A hung or
    /// killed transactional producer; its transaction ends when the
    /// producer commits or aborts it, at the latest at its
    /// `transaction.timeout.ms`. Named in [`GroupReport::named`]. More
    /// replicas do not help. (A group reading uncommitted never reads so.)
    OpenTransaction,
}

impl Diagnosis {
    /// Every diagnosis name, exported as the state set
    /// `fresh_consumer.monitor.group.diagnosis`.
    pub const NAMES: [&'static str; 8] = [
        "no_offsets",
        "idle",
        "dead",
        "stuck",
        "skewed",
        "consumer_bound",
        "keeping_up",
        "open_transaction",
    ];

    /// `no_offsets`, `idle`, `dead`, `stuck`, `skewed`, `consumer_bound`,
    /// `keeping_up` or `open_transaction`.
    pub fn as_str(self) -> &'static str {
        match self {
            Diagnosis::NoOffsets => "no_offsets",
            Diagnosis::Idle => "idle",
            Diagnosis::Dead => "dead",
            Diagnosis::Stuck => "stuck",
            Diagnosis::Skewed => "skewed",
            Diagnosis::ConsumerBound => "consumer_bound",
            Diagnosis::KeepingUp => "keeping_up",
            Diagnosis::OpenTransaction => "open_transaction",
        }
    }
}

/// Whether more replicas would help a group.
#[derive(Clone, Debug, PartialEq)]
pub enum Scaling {
    /// Nothing to scale for (idle, keeping up, no offsets).
    NotNeeded,
    /// More consumer throughput helps ([`Diagnosis::ConsumerBound`]).
    Suggest {
        /// How many times the recent commit rate the group needs to keep up
        /// with the produce rate and drain the backlog within
        /// [`drain_target`](crate::monitor::GroupMonitor::drain_target).
        throughput_factor: f64,
        /// The consumer count the suggestion starts from: the group's
        /// members ([`GroupReport::members`]) when the brokers describe
        /// them, else
        /// [`current_replicas`](crate::monitor::GroupMonitor::current_replicas);
        /// `None` when neither is known.
        current: Option<u32>,
        /// Replicas for that throughput, assuming it scales linearly with
        /// the replica count: `ceil(current x throughput_factor)`, at least
        /// the current count and never above the partition count (of all
        /// watched topics). `None` when the current count is unknown.
        replicas: Option<u32>,
        /// The partition count capped the suggestion: beyond it replicas
        /// sit idle.
        capped: bool,
    },
    /// More replicas would not help ([`Diagnosis::Skewed`],
    /// [`Diagnosis::Stuck`], [`Diagnosis::Dead`], or a
    /// [`Diagnosis::ConsumerBound`] group that already has a consumer per
    /// partition), or a consumer-bound group's commit rate is not measured
    /// yet (its first cycle).
    Withheld {
        /// Why, in one sentence.
        reason: String,
    },
}

/// The most consumers of a group that can each own a partition, from its
/// partitions (one entry per topic and partition) and its assignor: with
/// `range` (librdkafka's and the Java client's default first choice, and
/// what an unknown assignor is taken for) each topic is split on its own,
/// so consumers past the largest topic's partition count sit idle; other
/// assignors (`roundrobin`, `cooperative-sticky`, `sticky`, KIP-848's
/// `uniform`) spread all the partitions, so the cap is their sum. At least 1.
pub(crate) fn replica_cap(partitions: &[&PartitionLag], assignor: Option<&str>) -> u32 {
    let range = assignor.is_none_or(|a| a.eq_ignore_ascii_case("range"));
    let cap = if range {
        let mut per_topic: HashMap<&str, u32> = HashMap::new();
        for p in partitions {
            *per_topic.entry(p.topic.as_str()).or_default() += 1;
        }
        per_topic.values().copied().max().unwrap_or(0)
    } else {
        partitions.len() as u32
    };
    cap.max(1)
}
