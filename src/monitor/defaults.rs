//! The group monitor's defaults (for [`crate::monitor::GroupMonitor`]).

use std::time::Duration;

/// Default for [`GroupMonitor::interval`](crate::monitor::GroupMonitor::interval): 10 s between cycles.
pub const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// Default for [`GroupMonitor::window`](crate::monitor::GroupMonitor::window): 5 min.
pub const DEFAULT_MONITOR_WINDOW: Duration = Duration::from_secs(300);
/// Default for [`GroupMonitor::stall_after`](crate::monitor::GroupMonitor::stall_after): 60 s.
pub const DEFAULT_MONITOR_STALL_AFTER: Duration = Duration::from_secs(60);
/// Default for [`GroupMonitor::lag_threshold`](crate::monitor::GroupMonitor::lag_threshold): 60 s.
pub const DEFAULT_MONITOR_LAG_THRESHOLD: Duration = Duration::from_secs(60);
/// Default for [`GroupMonitor::skew_share`](crate::monitor::GroupMonitor::skew_share): 0.75.
pub const DEFAULT_MONITOR_SKEW_SHARE: f64 = 0.75;
/// Default for [`GroupMonitor::drain_target`](crate::monitor::GroupMonitor::drain_target): 10 min.
pub const DEFAULT_MONITOR_DRAIN_TARGET: Duration = Duration::from_secs(600);
/// Default for [`GroupMonitor::request_timeout`](crate::monitor::GroupMonitor::request_timeout): 10 s.
pub const DEFAULT_MONITOR_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`GroupMonitor::read_timeout`](crate::monitor::GroupMonitor::read_timeout): 5 s.
pub const DEFAULT_MONITOR_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Default for [`GroupMonitor::max_groups`](crate::monitor::GroupMonitor::max_groups): 100 groups.
pub const DEFAULT_MONITOR_MAX_GROUPS: usize = 100;
/// Default for [`GroupMonitor::max_partitions`](crate::monitor::GroupMonitor::max_partitions): 10,000 partitions.
pub const DEFAULT_MONITOR_MAX_PARTITIONS: usize = 10_000;
