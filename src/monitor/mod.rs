//! Watching consumer groups from outside: offset lag, **time lag**,
//! retention margin and a diagnosis per group, read from the brokers, so a
//! crashed, hung or never-deployed consumer still shows (as growing
//! seconds) when it exports nothing itself.
//!
//! ```no_run
//! use std::time::Duration;
//! use fresh_consumer::monitor::GroupMonitor;
//!
//! # async fn run() -> Result<(), fresh_consumer::monitor::MonitorError> {
//! let mut monitor = GroupMonitor::new()
//!     .bootstrap_servers("localhost:9092")
//!     .group("billing")
//!     .topics(["payments"])
//!     .interval(Duration::from_secs(10))
//!     .connect()
//!     .await?;
//! let report = monitor.cycle().await?;
//! for g in &report.groups {
//!     println!("{}: {}", g.group, g.diagnosis.as_str());
//!     for p in &g.partitions {
//!         println!("  {}-{} lag={:?} time lag={:?} {}", p.topic, p.partition,
//!             p.offset_lag, p.time_lag, p.status.as_str());
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Each cycle ([`Monitor::cycle`]), for every partition of the watched
//! topics: topic metadata; the log start offset and the high watermark
//! (ListOffsets under `read_uncommitted`) and the last stable offset
//! (ListOffsets under `read_committed`); each group's committed offsets
//! (OffsetFetch, through a client that carries the group's `group.id` but
//! never joins it or commits); and, where the offset lag is above zero, the
//! timestamp of the record at the committed offset, read once by a probe
//! consumer that assigns the partition there (group id
//! `fresh-consumer-monitor-probe`, never committed) and remembered until
//! the committed offset moves; and each group's member count and state
//! (librdkafka's DescribeConsumerGroups: ConsumerGroupDescribe for KIP-848
//! groups, DescribeGroups for classic ones; for the replica suggestion and
//! the rebalance hold; asked no more once the brokers refuse it). Time lag is now minus that timestamp. The
//! rules turning the samples into [`LagStatus`] and [`Diagnosis`] are
//! documented on those types; [`GroupMonitor`] lists their thresholds.
//!
//! With [`GroupMonitor::discover_groups`] each cycle also lists the
//! cluster's groups (ListGroups) and watches, beside the named ones, every
//! listed group the filter accepts that has a committed offset on a watched
//! partition; a group that appears is picked up in the next cycle, one that
//! disappears is dropped with its metrics.
//!
//! Inside the module: `reader.rs` does the reads, `discover.rs` the
//! discovery rules, `judge.rs` the rules (no I/O), `report.rs` holds the
//! report types, `running.rs` the connected [`Monitor`] (its cycle, the
//! state its handle and gauges read), `export.rs` the gauges, [`scale`] the autoscaling answer
//! (no I/O), `keda.rs` (feature `keda`) the KEDA scaler serving it.

mod classic;
#[cfg(test)]
mod comparison;
mod defaults;
mod describe;
mod discover;
mod error;
mod export;
pub(crate) mod judge;
#[cfg(feature = "keda")]
#[cfg_attr(docsrs, doc(cfg(feature = "keda")))]
pub mod keda;
mod reader;
mod report;
mod running;
pub mod scale;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod scenarios;
mod shared;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::Meter;

use crate::config::RedactedProperties;
use crate::error::ConfigError;
use crate::monitor::discover::{Discovery, GroupFilter};
use crate::monitor::judge::Rules;
use crate::monitor::reader::{Reader, ReaderSettings};

pub use defaults::{
    DEFAULT_MONITOR_DRAIN_TARGET, DEFAULT_MONITOR_INTERVAL, DEFAULT_MONITOR_LAG_THRESHOLD,
    DEFAULT_MONITOR_MAX_GROUPS, DEFAULT_MONITOR_MAX_PARTITIONS, DEFAULT_MONITOR_READ_TIMEOUT,
    DEFAULT_MONITOR_REQUEST_TIMEOUT, DEFAULT_MONITOR_SKEW_SHARE, DEFAULT_MONITOR_STALL_AFTER,
    DEFAULT_MONITOR_WINDOW,
};
pub use discover::PROBE_GROUP_ID;
pub use error::MonitorError;
pub use report::{
    Diagnosis, GroupReport, HeadTimestamp, LagStatus, MonitorReport, PartitionLag, PartitionOwner,
    Scaling,
};
pub use running::{Monitor, MonitorHandle};

/// Builder of a group monitor: what to watch, how often, and the thresholds
/// of the statuses and the diagnosis.
///
/// Needs bootstrap servers, at least one topic, and at least one named
/// group or [`discover_groups`](Self::discover_groups); every group is
/// watched on every topic. [`connect`](Self::connect)
/// validates and checks that a broker answers and every topic exists.
#[derive(Clone)]
pub struct GroupMonitor {
    bootstrap: Option<String>,
    properties: Vec<(String, String)>,
    groups: Vec<String>,
    topics: Vec<String>,
    interval: Duration,
    window: Duration,
    stall_after: Duration,
    lag_threshold: Duration,
    skew_share: f64,
    drain_target: Duration,
    current_replicas: Option<u32>,
    read_committed: bool,
    request_timeout: Duration,
    read_timeout: Duration,
    discovery: Option<Discovery>,
    max_groups: usize,
    max_partitions: usize,
    meter: Option<Meter>,
}

impl Default for GroupMonitor {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for GroupMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupMonitor")
            .field("bootstrap", &self.bootstrap)
            .field("properties", &RedactedProperties(&self.properties))
            .field("groups", &self.groups)
            .field("topics", &self.topics)
            .field("interval", &self.interval)
            .field("window", &self.window)
            .field("stall_after", &self.stall_after)
            .field("lag_threshold", &self.lag_threshold)
            .field("skew_share", &self.skew_share)
            .field("drain_target", &self.drain_target)
            .field("current_replicas", &self.current_replicas)
            .field("read_committed", &self.read_committed)
            .field("request_timeout", &self.request_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("discovery", &self.discovery.is_some())
            .field("max_groups", &self.max_groups)
            .field("max_partitions", &self.max_partitions)
            .finish_non_exhaustive()
    }
}

fn positive(option: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(ConfigError::InvalidOption {
            option,
            reason: "must be more than zero".into(),
        })
    } else {
        Ok(())
    }
}

impl GroupMonitor {
    /// A monitor with the defaults (`DEFAULT_MONITOR_*`) and nothing to
    /// watch yet.
    pub fn new() -> Self {
        GroupMonitor {
            bootstrap: None,
            properties: Vec::new(),
            groups: Vec::new(),
            topics: Vec::new(),
            interval: DEFAULT_MONITOR_INTERVAL,
            window: DEFAULT_MONITOR_WINDOW,
            stall_after: DEFAULT_MONITOR_STALL_AFTER,
            lag_threshold: DEFAULT_MONITOR_LAG_THRESHOLD,
            skew_share: DEFAULT_MONITOR_SKEW_SHARE,
            drain_target: DEFAULT_MONITOR_DRAIN_TARGET,
            current_replicas: None,
            read_committed: true,
            request_timeout: DEFAULT_MONITOR_REQUEST_TIMEOUT,
            read_timeout: DEFAULT_MONITOR_READ_TIMEOUT,
            discovery: None,
            max_groups: DEFAULT_MONITOR_MAX_GROUPS,
            max_partitions: DEFAULT_MONITOR_MAX_PARTITIONS,
            meter: None,
        }
    }

    /// `bootstrap.servers`: `host:port[,host:port...]`. Required.
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.bootstrap = Some(servers.into());
        self
    }

    /// Any librdkafka client property, given to every client the monitor
    /// creates: security settings (`security.protocol`, `sasl.*`,
    /// `ssl.*`), `client.id`, ... `bootstrap.servers` sets
    /// [`bootstrap_servers`](Self::bootstrap_servers); `group.id`,
    /// `enable.auto.commit`, `enable.auto.offset.store` and
    /// `isolation.level` are the monitor's own and rejected by
    /// [`validate`](Self::validate) (see [`read_committed`](Self::read_committed)).
    /// Secret values never appear in `Debug` output or errors.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        let value = value.into();
        if key == "bootstrap.servers" {
            self.bootstrap = Some(value);
        } else {
            self.properties.push((key, value));
        }
        self
    }

    /// Adds a consumer group to watch (its `group.id`). A named group is
    /// watched whether or not it has committed offsets (without any it
    /// reports [`Diagnosis::NoOffsets`]); see
    /// [`discover_groups`](Self::discover_groups) for groups found by
    /// listing.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.groups.push(group.into());
        self
    }

    /// Adds consumer groups to watch.
    pub fn groups<I, S>(mut self, groups: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.groups.extend(groups.into_iter().map(Into::into));
        self
    }

    /// Adds topics to watch (exact names; every group is watched on every
    /// topic).
    pub fn topics<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.topics.extend(topics.into_iter().map(Into::into));
        self
    }

    /// Time between the starts of two cycles in
    /// [`Monitor::run_until`], on average: cycles are 0.618 or 1.618
    /// intervals apart, so they do not sample a group at one phase of its
    /// own commit interval ([`Monitor::until_next_cycle`]); bounds how soon
    /// a problem shows. More than zero. Default [`DEFAULT_MONITOR_INTERVAL`].
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The window the rates (commit, produce, log start) and the diagnosis
    /// look back over: a group is [`Diagnosis::Dead`] once no committed
    /// offset moved for longer than this while records wait. At least
    /// [`interval`](Self::interval). Default [`DEFAULT_MONITOR_WINDOW`].
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How long a committed offset must stay unchanged while records wait
    /// before the partition is [`LagStatus::Stalled`]. More than zero.
    /// Default [`DEFAULT_MONITOR_STALL_AFTER`].
    pub fn stall_after(mut self, stall_after: Duration) -> Self {
        self.stall_after = stall_after;
        self
    }

    /// The time lag at and above which a partition is
    /// [`LagStatus::Lagging`] and a group counts as behind (for
    /// [`Diagnosis::Skewed`] and [`Diagnosis::ConsumerBound`]). Set it to a
    /// share of your freshness objective, well above the consumers' commit
    /// interval (time lag includes the wait for the next commit). More than
    /// zero. Default [`DEFAULT_MONITOR_LAG_THRESHOLD`].
    pub fn lag_threshold(mut self, threshold: Duration) -> Self {
        self.lag_threshold = threshold;
        self
    }

    /// The share of the summed time lag that at most a quarter of the
    /// partitions (at least one) must carry for [`Diagnosis::Skewed`]. In
    /// (0, 1]. Default [`DEFAULT_MONITOR_SKEW_SHARE`].
    pub fn skew_share(mut self, share: f64) -> Self {
        self.skew_share = share;
        self
    }

    /// How soon the backlog should be drained, for the replica suggestion
    /// of a [`Diagnosis::ConsumerBound`] group. More than zero. Default
    /// [`DEFAULT_MONITOR_DRAIN_TARGET`].
    pub fn drain_target(mut self, target: Duration) -> Self {
        self.drain_target = target;
        self
    }

    /// The group's current replica (consumer) count, for the replica
    /// suggestion when the brokers do not describe the group's members
    /// ([`GroupReport::members`] is `None`: brokers without DescribeGroups
    /// and ConsumerGroupDescribe such as librdkafka's mock broker, a missing
    /// `DESCRIBE` ACL on the group). The members the brokers describe take
    /// precedence. Without either, [`Scaling::Suggest`] carries only a
    /// throughput factor. At least 1.
    pub fn current_replicas(mut self, replicas: u32) -> Self {
        self.current_replicas = Some(replicas);
        self
    }

    /// `true` (the default, like librdkafka's `isolation.level`): offset
    /// lag counts to the last stable offset and the probe reads committed
    /// records only; `false`: to the high watermark. Set it as the watched
    /// consumers read. Committed offsets are read as committed so far
    /// either way: offsets an open transaction holds count once it commits.
    pub fn read_committed(mut self, read_committed: bool) -> Self {
        self.read_committed = read_committed;
        self
    }

    /// Bound on each metadata, list-offsets and offset-fetch request. More
    /// than zero. Default [`DEFAULT_MONITOR_REQUEST_TIMEOUT`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Bound on reading the records at committed offsets in one cycle;
    /// partitions not read in time report [`HeadTimestamp::Unread`]. More
    /// than zero. Default [`DEFAULT_MONITOR_READ_TIMEOUT`].
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// Also watches the groups the brokers list (ListGroups, every cycle)
    /// whose name `filter` accepts and that have a committed offset on at
    /// least one watched partition: every such group with `|_| true`, or
    /// those a pattern matches. A group that appears is watched from the
    /// next cycle; one that disappears (deleted, its offsets expired, or no
    /// committed offset on the watched topics any more) is dropped with its
    /// metrics. Named groups are watched as well, offsets or not.
    ///
    /// Needs brokers that answer ListGroups (librdkafka's mock broker does
    /// not: every cycle then fails with [`MonitorError::Kafka`],
    /// operation `list groups`) and the `DESCRIBE` ACL on the groups. Each
    /// discovered group costs one offset client and one OffsetFetch per
    /// cycle; [`max_groups`](Self::max_groups) caps them. Default: off.
    pub fn discover_groups(
        mut self,
        filter: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Self {
        let filter: GroupFilter = Arc::new(filter);
        self.discovery = Some(Discovery { filter });
        self
    }

    /// The most groups one monitor watches: named groups plus the listed
    /// groups the discovery filter accepts. Above it a cycle fails with
    /// [`MonitorError::TooMany`] (and [`validate`](Self::validate) rejects
    /// more named groups). At least 1. Defaults to
    /// [`DEFAULT_MONITOR_MAX_GROUPS`].
    pub fn max_groups(mut self, max: usize) -> Self {
        self.max_groups = max;
        self
    }

    /// The most partitions (of all watched topics together) one monitor
    /// watches; above it [`connect`](Self::connect) and each cycle fail
    /// with [`MonitorError::TooMany`]. Each partition costs two ListOffsets
    /// requests per cycle and a row per group. At least 1. Defaults to
    /// [`DEFAULT_MONITOR_MAX_PARTITIONS`].
    pub fn max_partitions(mut self, max: usize) -> Self {
        self.max_partitions = max;
        self
    }

    /// The `Meter` to build the monitor's gauges from (`fresh_consumer.monitor.*`,
    /// see [`metrics`](crate::metrics)); without it the monitor exports
    /// nothing.
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Checks the configuration without network I/O.
    ///
    /// # Errors
    /// [`ConfigError::MissingBootstrapServers`], [`ConfigError::MissingTopics`],
    /// [`ConfigError::EmptyTopicName`], or [`ConfigError::InvalidOption`]
    /// (no group and no discovery, an empty group name, more named groups
    /// than `max_groups`, a zero cap, a zero duration, a window shorter
    /// than the interval, a skew share outside (0, 1], zero replicas, a
    /// property the monitor sets itself), or
    /// [`ConfigError::InvalidProperty`] when librdkafka rejects a property.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self
            .bootstrap
            .as_deref()
            .is_none_or(|b| b.trim().is_empty())
        {
            return Err(ConfigError::MissingBootstrapServers);
        }
        if (self.groups.is_empty() && self.discovery.is_none())
            || self.groups.iter().any(|g| g.is_empty())
        {
            return Err(ConfigError::InvalidOption {
                option: "group",
                reason: "name at least one consumer group (or discover them), none of them empty"
                    .into(),
            });
        }
        if self.max_groups == 0 || self.groups.len() > self.max_groups {
            return Err(ConfigError::InvalidOption {
                option: "max_groups",
                reason: format!(
                    "must be at least 1 and at least the {} named groups",
                    self.groups.len()
                ),
            });
        }
        if self.max_partitions == 0 {
            return Err(ConfigError::InvalidOption {
                option: "max_partitions",
                reason: "must be at least 1".into(),
            });
        }
        if self.topics.is_empty() {
            return Err(ConfigError::MissingTopics);
        }
        if self.topics.iter().any(|t| t.is_empty()) {
            return Err(ConfigError::EmptyTopicName);
        }
        positive("interval", self.interval)?;
        positive("window", self.window)?;
        positive("stall_after", self.stall_after)?;
        positive("lag_threshold", self.lag_threshold)?;
        positive("drain_target", self.drain_target)?;
        positive("request_timeout", self.request_timeout)?;
        positive("read_timeout", self.read_timeout)?;
        if self.window < self.interval {
            return Err(ConfigError::InvalidOption {
                option: "window",
                reason: "must be at least the interval".into(),
            });
        }
        if !(self.skew_share > 0.0 && self.skew_share <= 1.0) {
            return Err(ConfigError::InvalidOption {
                option: "skew_share",
                reason: "must be in (0, 1]".into(),
            });
        }
        if self.current_replicas == Some(0) {
            return Err(ConfigError::InvalidOption {
                option: "current_replicas",
                reason: "must be at least 1".into(),
            });
        }
        for (k, _) in &self.properties {
            if let Some(e) = reader::reserved(k) {
                return Err(e);
            }
        }
        // librdkafka's own check of every property, without a client.
        let mut cc = rdkafka::ClientConfig::new();
        for (k, v) in &self.properties {
            cc.set(k, v);
        }
        cc.create_native_config()
            .map_err(crate::config::redact_config_error)?;
        Ok(())
    }

    fn rules(&self) -> Rules {
        Rules {
            window: self.window,
            stall_after: self.stall_after,
            lag_threshold: self.lag_threshold,
            skew_share: self.skew_share,
            drain_target: self.drain_target,
            current_replicas: self.current_replicas,
        }
    }

    /// Validates, creates the clients, and checks that a broker answers and
    /// every topic exists. Must run inside a tokio runtime (the blocking
    /// reads run on its blocking threads).
    ///
    /// # Errors
    /// [`MonitorError::Config`], [`MonitorError::Unreachable`] (after the
    /// request timeout), [`MonitorError::UnknownTopic`],
    /// [`MonitorError::TooMany`] (partitions). An unknown group
    /// is not an error: it has no committed offsets, so its partitions
    /// report [`LagStatus::NoCommittedOffset`] and the group
    /// [`Diagnosis::NoOffsets`].
    pub async fn connect(self) -> Result<Monitor, MonitorError> {
        self.validate()?;
        let settings = ReaderSettings {
            bootstrap: self.bootstrap.clone().unwrap_or_default(),
            properties: self.properties.clone(),
            groups: self.groups.clone(),
            topics: self.topics.clone(),
            read_committed: self.read_committed,
            request_timeout: self.request_timeout,
            read_timeout: self.read_timeout,
            discovery: self.discovery.clone(),
            max_groups: self.max_groups,
            max_partitions: self.max_partitions,
        };
        let reader = tokio::task::spawn_blocking(move || {
            let reader = Reader::new(settings)?;
            reader.check()?;
            Ok::<_, MonitorError>(reader)
        })
        .await
        .map_err(|_| MonitorError::ReaderPanicked)??;
        Ok(Monitor::new(
            reader,
            self.rules(),
            self.interval,
            self.meter.as_ref(),
        ))
    }

    /// [`connect`](Self::connect)s, then [`Monitor::run_until`] `stop`
    /// resolves.
    ///
    /// # Errors
    /// Those of [`connect`](Self::connect); cycle errors are counted, not
    /// returned.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Result<(), MonitorError> {
        self.connect().await?.run_until(stop).await;
        Ok(())
    }
}
