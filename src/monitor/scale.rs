//! The autoscaling answer the KEDA external scaler serves
//! (`monitor::keda`, feature `keda`; `fresh-monitor --keda-grpc`): from the
//! monitor's reports, the replica count a group should run, following the
//! time-lag seed's advice. No I/O; the rules are tested on the seeds'
//! scenarios (`scale/tests.rs`).
//!
//! The rules, checked in this order for a group on each request:
//! 0. **No members** (the brokers describe the group as `Empty`: its
//!    consumers stopped, or KEDA scaled it to zero; and no commit moved in
//!    the window, which consumers that assign partitions without joining
//!    the group would make): `active` when records
//!    wait, which is what activates a ScaledObject with `minReplicaCount:
//!    0`; the count is the last answer, else [`ScalePolicy::min_replicas`]
//!    (one step up from zero when it is the first). Neither the
//!    `rebalancing` nor the `dead` hold applies: starting consumers is the
//!    fix. The usual rules take over once a member joins.
//! 1. **A rebalance is in progress** (the brokers describe the group as
//!    `PreparingRebalance` or `CompletingRebalance`, or its member count
//!    changed between the last two cycles): hold, reason `rebalancing`.
//!    Every replica change is a rebalance; no new step until it settles.
//! 2. **Diagnosed [`Skewed`](Diagnosis::Skewed), [`Stuck`](Diagnosis::Stuck),
//!    [`Dead`](Diagnosis::Dead) or
//!    [`OpenTransaction`](Diagnosis::OpenTransaction)**: hold, reason the
//!    diagnosis; more replicas do not help a hot partition, a poison
//!    record, a dead consumer or a producer's hanging transaction.
//! 3. **[`ConsumerBound`](Diagnosis::ConsumerBound)** on two cycles in a
//!    row (a backlog that persists past one cycle: not a burst, not the
//!    records an ending transaction releases at once): the replica count
//!    needed to keep up with the produce rate and drain the backlog within
//!    the drain target, in one step:
//!    `ceil(current x (produce rate + offset lag / drain target) / commit rate)`,
//!    never above the partition count, never below the current count
//!    (`current`: the members, else [`ScalePolicy::current_replicas`], else
//!    the last answer). The next step up waits [`ScalePolicy::settle_after`]
//!    after a change, so the commit rate reflects the new count. Asked
//!    again within a cycle, the answer is the same.
//! 4. **Quiet** (diagnosis idle or keeping up, and the largest time lag
//!    below [`ScalePolicy::scale_down_lag`], well below the lag threshold
//!    that makes a group consumer-bound) for [`ScalePolicy::scale_down_after`],
//!    and no answer changed for that long: one replica fewer (not below
//!    [`ScalePolicy::min_replicas`]); the quiet clock starts again.
//! 5. Otherwise: steady, the previous answer.
//!
//! "Hold" and "steady" answer the count served before for the same
//! ScaledObject, else the group's member count (DescribeGroups), else
//! [`ScalePolicy::current_replicas`]; with none of them known the scaler
//! cannot judge and says so ([`ScaleError::CurrentUnknown`]): KEDA then
//! keeps the current count. Every answer is capped at the partition count
//! of the watched topics.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableGauge};

use crate::error::ConfigError;
use crate::metrics::{
    MESSAGING_CONSUMER_GROUP_NAME, MESSAGING_SYSTEM, MONITOR_SCALE_HELD, MONITOR_SCALE_REPLICAS,
    SCALE_HOLD_REASON,
};
use crate::monitor::report::{Diagnosis, GroupReport, MonitorReport, Scaling};

/// Default for [`ScalePolicy::scale_down_lag`]: 15 s (a quarter of the
/// monitor's default lag threshold of 60 s).
pub const DEFAULT_SCALE_DOWN_LAG: Duration = Duration::from_secs(15);
/// Default for [`ScalePolicy::scale_down_after`]: 10 min.
pub const DEFAULT_SCALE_DOWN_AFTER: Duration = Duration::from_secs(600);
/// Default for [`ScalePolicy::settle_after`]: 5 min (the monitor's default
/// window, [`DEFAULT_MONITOR_WINDOW`](crate::monitor::DEFAULT_MONITOR_WINDOW)).
pub const DEFAULT_SETTLE_AFTER: Duration = Duration::from_secs(300);

/// The settings of the autoscaling answer; the drain target may be given
/// per request ([`ScaleRequest::drain_target`]).
#[derive(Clone, Debug)]
#[must_use]
pub struct ScalePolicy {
    drain_target: Duration,
    scale_down_lag: Duration,
    scale_down_after: Duration,
    settle_after: Duration,
    min_replicas: u32,
    current_replicas: Option<u32>,
}

impl Default for ScalePolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalePolicy {
    /// The defaults: drain target
    /// [`DEFAULT_MONITOR_DRAIN_TARGET`](crate::monitor::DEFAULT_MONITOR_DRAIN_TARGET),
    /// [`DEFAULT_SCALE_DOWN_LAG`], [`DEFAULT_SCALE_DOWN_AFTER`], at least
    /// 1 replica, no fallback replica count.
    pub fn new() -> Self {
        ScalePolicy {
            drain_target: crate::monitor::defaults::DEFAULT_MONITOR_DRAIN_TARGET,
            scale_down_lag: DEFAULT_SCALE_DOWN_LAG,
            scale_down_after: DEFAULT_SCALE_DOWN_AFTER,
            settle_after: DEFAULT_SETTLE_AFTER,
            min_replicas: 1,
            current_replicas: None,
        }
    }

    /// How soon the backlog should be drained when a request names no
    /// drain target of its own. More than zero. Defaults to
    /// [`DEFAULT_MONITOR_DRAIN_TARGET`](crate::monitor::DEFAULT_MONITOR_DRAIN_TARGET)
    /// (10 min).
    pub fn drain_target(mut self, target: Duration) -> Self {
        self.drain_target = target;
        self
    }

    /// The largest time lag at which a group counts as quiet (the
    /// scale-down point). Keep it well below the monitor's
    /// [`lag_threshold`](crate::monitor::GroupMonitor::lag_threshold) (the
    /// scale-up point), so a group does not swing between the two. Defaults
    /// to [`DEFAULT_SCALE_DOWN_LAG`] (15 s).
    pub fn scale_down_lag(mut self, lag: Duration) -> Self {
        self.scale_down_lag = lag;
        self
    }

    /// How long a group must stay quiet, and the answer unchanged, before
    /// each step down by one replica. Scaling up acts on the first cycle
    /// that calls for it. More than zero. Defaults to
    /// [`DEFAULT_SCALE_DOWN_AFTER`] (10 min).
    pub fn scale_down_after(mut self, after: Duration) -> Self {
        self.scale_down_after = after;
        self
    }

    /// How long after a change of answer the next step up may come: the
    /// commit rate the step is computed from looks back over the monitor's
    /// [`window`](crate::monitor::GroupMonitor::window), so set it to that
    /// window; sooner, the rate still reflects the old replica count and a
    /// second step overshoots. Defaults to [`DEFAULT_SETTLE_AFTER`] (5 min).
    pub fn settle_after(mut self, after: Duration) -> Self {
        self.settle_after = after;
        self
    }

    /// The fewest replicas a step down goes to. At least 1 (scaling to
    /// zero is KEDA's `minReplicaCount: 0` with `IsActive`). Defaults to 1.
    pub fn min_replicas(mut self, min: u32) -> Self {
        self.min_replicas = min;
        self
    }

    /// The group's replica count when the brokers do not describe its
    /// members (a missing ACL, a broker without the describe APIs) and nothing
    /// was answered yet. Defaults to none: the scaler then cannot judge
    /// such a group ([`ScaleError::CurrentUnknown`]).
    pub fn current_replicas(mut self, n: u32) -> Self {
        self.current_replicas = Some(n);
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ConfigError::InvalidOption`] for a zero drain target or
    /// scale-down period, or zero minimum or current replicas.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ConfigError::InvalidOption {
                option,
                reason: reason.into(),
            })
        };
        if self.drain_target.is_zero() {
            return bad("drain_target", "must be more than zero");
        }
        if self.scale_down_after.is_zero() {
            return bad("scale_down_after", "must be more than zero");
        }
        if self.min_replicas == 0 || self.current_replicas == Some(0) {
            return bad("replicas", "must be at least 1");
        }
        Ok(())
    }
}

/// What a request asks about (KEDA's `scalerMetadata`, parsed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleRequest {
    /// The consumer group (`group.id`). Must be one the monitor watches.
    pub group: String,
    /// Topics the caller expects the group to be watched on; each must be
    /// a watched topic. Empty: not checked.
    pub topics: Vec<String>,
    /// The drain target for this request; `None`: the policy's.
    pub drain_target: Option<Duration>,
}

/// Why the scaler held a group's replica count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldReason {
    /// A rebalance is in progress.
    Rebalancing,
    /// Diagnosed [`Diagnosis::Skewed`].
    Skewed,
    /// Diagnosed [`Diagnosis::Stuck`].
    Stuck,
    /// Diagnosed [`Diagnosis::Dead`].
    Dead,
    /// Diagnosed [`Diagnosis::OpenTransaction`]: records wait behind a
    /// producer's open transaction, not behind the consumers.
    OpenTransaction,
}

impl HoldReason {
    /// Every reason, as exported in `fresh_consumer.monitor.scale.held`.
    pub const NAMES: [&'static str; 5] =
        ["rebalancing", "skewed", "stuck", "dead", "open_transaction"];

    /// `rebalancing`, `skewed`, `stuck`, `dead` or `open_transaction`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::Rebalancing => "rebalancing",
            HoldReason::Skewed => "skewed",
            HoldReason::Stuck => "stuck",
            HoldReason::Dead => "dead",
            HoldReason::OpenTransaction => "open_transaction",
        }
    }
}

/// What the answer does to the replica count.
#[derive(Clone, Debug, PartialEq)]
pub enum ScaleAction {
    /// Scale up from `from` in one step (consumer-bound).
    Up {
        /// The count before.
        from: u32,
    },
    /// One replica fewer after a quiet period.
    Down {
        /// The count before.
        from: u32,
    },
    /// No change: nothing calls for one (keeping up, between the scale-down
    /// and the scale-up point, or already at the partition count).
    Steady,
    /// No change although the group is behind, because more replicas do
    /// not help or a rebalance is in progress.
    Held {
        /// The reason, as exported.
        reason: HoldReason,
        /// Why, in one sentence (the diagnosis's reason).
        why: String,
    },
}

/// The answer for one group.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleDecision {
    /// The replica count the group should run, 1 to the partition count.
    pub replicas: u32,
    /// Records wait (the summed offset lag is above zero): KEDA's
    /// `IsActive`, which scales a ScaledObject with `minReplicaCount: 0`
    /// from and to zero.
    pub active: bool,
    /// How the answer came about.
    pub action: ScaleAction,
    /// The monitor's diagnosis of the group.
    pub diagnosis: Diagnosis,
}

/// Why the scaler cannot answer for a group. KEDA then keeps the current
/// replica count (and, with a `fallback` configured in the ScaledObject,
/// uses it after `failureThreshold` errors).
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ScaleError {
    /// No monitor cycle has succeeded yet.
    #[error("no monitor cycle has succeeded yet")]
    NoReport,
    /// The monitor does not watch the group.
    #[error("group `{group}` is not watched by this monitor")]
    NotWatched {
        /// The group asked about.
        group: String,
    },
    /// The monitor does not watch a topic the request names.
    #[error("topic `{topic}` is not watched by this monitor")]
    TopicNotWatched {
        /// The topic asked about.
        topic: String,
    },
    /// The monitor watches the topic, but the group has no committed
    /// offset on it: the trigger names a topic the group does not read.
    #[error("group `{group}` does not read topic `{topic}` (no committed offset on it)")]
    TopicNotRead {
        /// The topic asked about.
        topic: String,
        /// The group.
        group: String,
    },
    /// Neither an earlier answer, nor the brokers (members), nor the
    /// policy's [`current_replicas`](ScalePolicy::current_replicas) give
    /// the group's current replica count.
    #[error("the current replica count of group `{group}` is unknown")]
    CurrentUnknown {
        /// The group.
        group: String,
    },
}

/// Per group, from the cycles observed.
#[derive(Debug, Default)]
struct GroupState {
    seen: bool,
    members: Option<u32>,
    members_changed: bool,
    quiet_since: Option<SystemTime>,
    /// Cycles in a row the group read `consumer_bound`.
    bound_cycles: u32,
}

/// Per ScaledObject and group: the last answer, and when it last changed
/// (`None`: never, it is the count first found).
#[derive(Debug, Clone, Copy)]
struct Served {
    replicas: u32,
    changed_at: Option<SystemTime>,
}

/// What the gauges read: per group, the last answer and the hold reason.
type Exported = Arc<Mutex<BTreeMap<String, (u32, Option<HoldReason>)>>>;

/// The autoscaling answers of one monitor: fed each cycle's report
/// ([`observe`](Self::observe)), asked per request ([`decide`](Self::decide)).
pub struct Autoscaler {
    policy: ScalePolicy,
    latest: Option<Arc<MonitorReport>>,
    groups: HashMap<String, GroupState>,
    served: HashMap<(String, String), Served>,
    exported: Exported,
    _gauges: Vec<ObservableGauge<i64>>,
}

impl std::fmt::Debug for Autoscaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autoscaler")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Autoscaler {
    /// An autoscaler with `policy`; `meter` builds its gauges
    /// (`fresh_consumer.monitor.scale.held`,
    /// `fresh_consumer.monitor.scale.replicas`), none without.
    ///
    /// # Errors
    /// Those of [`ScalePolicy::validate`].
    pub fn new(policy: ScalePolicy, meter: Option<&Meter>) -> Result<Self, ConfigError> {
        policy.validate()?;
        let exported: Exported = Arc::default();
        let mut gauges = Vec::new();
        if let Some(meter) = meter {
            let attrs = |group: &str| {
                vec![
                    KeyValue::new(MESSAGING_SYSTEM, "kafka"),
                    KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, group.to_owned()),
                ]
            };
            let e = Arc::downgrade(&exported);
            gauges.push(
                meter
                    .i64_observable_gauge(MONITOR_SCALE_HELD)
                    .with_unit("1")
                    .with_description("1 for the reason the KEDA scaler holds a group's replica count (rebalancing, skewed, stuck, dead), 0 for the others.")
                    .with_callback(move |o| {
                        let Some(e) = e.upgrade() else { return };
                        for (group, (_, held)) in lock(&e).iter() {
                            for name in HoldReason::NAMES {
                                let mut a = attrs(group);
                                a.push(KeyValue::new(SCALE_HOLD_REASON, name));
                                o.observe(
                                    i64::from(held.is_some_and(|h| h.as_str() == name)),
                                    &a,
                                );
                            }
                        }
                    })
                    .build(),
            );
            let e = Arc::downgrade(&exported);
            gauges.push(
                meter
                    .i64_observable_gauge(MONITOR_SCALE_REPLICAS)
                    .with_unit("{replica}")
                    .with_description(
                        "The replica count the KEDA scaler last answered for a group.",
                    )
                    .with_callback(move |o| {
                        let Some(e) = e.upgrade() else { return };
                        for (group, (n, _)) in lock(&e).iter() {
                            o.observe(i64::from(*n), &attrs(group));
                        }
                    })
                    .build(),
            );
        }
        Ok(Autoscaler {
            policy,
            latest: None,
            groups: HashMap::new(),
            served: HashMap::new(),
            exported,
            _gauges: gauges,
        })
    }

    /// Takes one cycle's report: the member counts (a change means a
    /// rebalance), the quiet clocks. A group no longer in the report is
    /// forgotten, with its answers and gauges.
    pub fn observe(&mut self, report: Arc<MonitorReport>) {
        let now = report.taken_at;
        for g in &report.groups {
            let st = self.groups.entry(g.group.clone()).or_default();
            st.members_changed = st.seen && st.members != g.members;
            st.members = g.members;
            st.seen = true;
            st.bound_cycles = if g.diagnosis == Diagnosis::ConsumerBound {
                st.bound_cycles.saturating_add(1)
            } else {
                0
            };
            let quiet = matches!(g.diagnosis, Diagnosis::Idle | Diagnosis::KeepingUp)
                && (g.total_lag == 0
                    || g.max_time_lag
                        .is_some_and(|t| t < self.policy.scale_down_lag));
            st.quiet_since = if quiet {
                Some(st.quiet_since.unwrap_or(now))
            } else {
                None
            };
        }
        let watched = |name: &str| report.groups.iter().any(|g| g.group == name);
        self.groups.retain(|name, _| watched(name));
        self.served.retain(|(_, group), _| watched(group));
        lock(&self.exported).retain(|group, _| watched(group));
        self.latest = Some(report);
    }

    /// The latest report observed.
    pub fn latest(&self) -> Option<&Arc<MonitorReport>> {
        self.latest.as_ref()
    }

    /// The answer for `request` from the ScaledObject `key` (such as
    /// `namespace/name`; the last answer is kept per key and group). Logs
    /// each change of answer (INFO) and each hold (INFO when its reason
    /// changes, DEBUG after).
    ///
    /// # Errors
    /// [`ScaleError::NoReport`], [`ScaleError::NotWatched`],
    /// [`ScaleError::TopicNotWatched`], [`ScaleError::CurrentUnknown`].
    pub fn decide(
        &mut self,
        key: &str,
        request: &ScaleRequest,
    ) -> Result<ScaleDecision, ScaleError> {
        let report = self.latest.clone().ok_or(ScaleError::NoReport)?;
        let g = report
            .groups
            .iter()
            .find(|g| g.group == request.group)
            .ok_or_else(|| ScaleError::NotWatched {
                group: request.group.clone(),
            })?;
        if let Some(topic) = request
            .topics
            .iter()
            .find(|t| !g.partitions.iter().any(|p| &p.topic == *t))
        {
            // Watched for another group, but this one has no committed
            // offset on it: the trigger names a topic the group does not read.
            let watched = report
                .groups
                .iter()
                .any(|o| o.partitions.iter().any(|p| &p.topic == topic));
            let e = if watched {
                ScaleError::TopicNotRead {
                    topic: topic.clone(),
                    group: g.group.clone(),
                }
            } else {
                ScaleError::TopicNotWatched {
                    topic: topic.clone(),
                }
            };
            tracing::warn!(scaled_object = %key, error = %e, "KEDA trigger names a topic the scaler cannot judge the group on");
            return Err(e);
        }
        let now = report.taken_at;
        let partitions = g.replica_cap();
        let st = self.groups.get(&g.group);
        let slot = (key.to_owned(), g.group.clone());
        let served = self.served.get(&slot).copied();
        let members = g.members.filter(|&m| m > 0);
        // Described with no members (state `Empty`): stopped, or scaled to
        // zero by KEDA (`minReplicaCount: 0`). Its replica count is known,
        // zero; what it needs is said by `active` (records wait), and the
        // count to run once active is the last answer, else the policy's
        // minimum (the usual rules take over once a member joins).
        let empty = g.members == Some(0) && g.commit_rate <= 0.0;
        let held = served
            .map(|s| s.replicas)
            .or(members)
            .or(self.policy.current_replicas)
            .or(empty.then_some(self.policy.min_replicas))
            .ok_or_else(|| ScaleError::CurrentUnknown {
                group: g.group.clone(),
            })?
            .min(partitions);
        let rebalancing = !empty
            && (matches!(
                g.state.as_deref(),
                Some("PreparingRebalance" | "CompletingRebalance")
            ) || st.is_some_and(|s| s.members_changed));
        let (replicas, action) = if empty {
            if g.total_lag > 0 && served.is_none() {
                (held, ScaleAction::Up { from: 0 })
            } else {
                (held, ScaleAction::Steady)
            }
        } else if rebalancing {
            let why = match &g.state {
                Some(s) if s != "Stable" => format!("the group is in state {s}"),
                _ => format!(
                    "the group's member count changed to {:?} since the last cycle",
                    g.members
                ),
            };
            (
                held,
                ScaleAction::Held {
                    reason: HoldReason::Rebalancing,
                    why: format!("{why}: a rebalance is in progress; no step until it settles"),
                },
            )
        } else if let Some(reason) = match g.diagnosis {
            Diagnosis::Skewed => Some(HoldReason::Skewed),
            Diagnosis::Stuck => Some(HoldReason::Stuck),
            Diagnosis::Dead => Some(HoldReason::Dead),
            Diagnosis::OpenTransaction => Some(HoldReason::OpenTransaction),
            _ => None,
        } {
            let why = match &g.scaling {
                Scaling::Withheld { reason } => reason.clone(),
                _ => format!("diagnosed {}", g.diagnosis.as_str()),
            };
            (held, ScaleAction::Held { reason, why })
        } else if g.diagnosis == Diagnosis::ConsumerBound {
            let drain = request.drain_target.unwrap_or(self.policy.drain_target);
            // The count the commit rate was measured with: the members, else
            // the configured count, else the last answer.
            let current = members.or(self.policy.current_replicas).unwrap_or(held);
            let settled = served.and_then(|s| s.changed_at).is_none_or(|at| {
                now.duration_since(at).unwrap_or_default() >= self.policy.settle_after
            });
            // A backlog that persists past one cycle: a burst, or records
            // an ending transaction released at once (the last stable
            // offset jumps), is drained before the next cycle and is not
            // a reason to add consumers.
            let persisted = st.is_some_and(|s| s.bound_cycles >= 2);
            match needed(g, current, drain, partitions) {
                Some(want) if want > held && settled && persisted => {
                    (want, ScaleAction::Up { from: held })
                }
                _ => (held, ScaleAction::Steady),
            }
        } else {
            let quiet_for = st
                .and_then(|s| s.quiet_since)
                .map(|since| now.duration_since(since).unwrap_or_default());
            let unchanged_for = served
                .and_then(|s| s.changed_at)
                .map_or(Duration::MAX, |at| {
                    now.duration_since(at).unwrap_or_default()
                });
            let base = members.unwrap_or(held).min(held);
            if quiet_for.is_some_and(|q| q >= self.policy.scale_down_after)
                && unchanged_for >= self.policy.scale_down_after
                && base > self.policy.min_replicas
            {
                if let Some(s) = self.groups.get_mut(&g.group) {
                    // The quiet clock starts again after each step.
                    s.quiet_since = Some(now);
                }
                (base - 1, ScaleAction::Down { from: held })
            } else {
                (held, ScaleAction::Steady)
            }
        };
        let changed_at = match served {
            Some(s) if s.replicas == replicas => s.changed_at,
            None if replicas == held => None,
            _ => Some(now),
        };
        self.served.insert(
            slot,
            Served {
                replicas,
                changed_at,
            },
        );
        let reason = match &action {
            ScaleAction::Held { reason, .. } => Some(*reason),
            _ => None,
        };
        let before = lock(&self.exported).insert(g.group.clone(), (replicas, reason));
        match &action {
            ScaleAction::Held { reason, why } => {
                if before.is_none_or(|(_, r)| r != Some(*reason)) {
                    tracing::info!(group = %g.group, scaled_object = %key, reason = reason.as_str(), replicas, why = %why, "KEDA scaler holds the replica count");
                } else {
                    tracing::debug!(group = %g.group, scaled_object = %key, reason = reason.as_str(), replicas, "KEDA scaler still holds the replica count");
                }
            }
            ScaleAction::Up { from } | ScaleAction::Down { from } => {
                tracing::info!(group = %g.group, scaled_object = %key, from, replicas, diagnosis = g.diagnosis.as_str(), "KEDA scaler changes its answer");
            }
            ScaleAction::Steady => {}
        }
        Ok(ScaleDecision {
            replicas,
            active: g.total_lag > 0,
            action,
            diagnosis: g.diagnosis,
        })
    }
}

/// The replicas a consumer-bound group needs to keep up and drain its
/// backlog within `drain` at the recent per-replica commit rate, capped at
/// `partitions`; `None` before a commit rate is measured.
fn needed(g: &GroupReport, current: u32, drain: Duration, partitions: u32) -> Option<u32> {
    if g.commit_rate <= 0.0 {
        return None;
    }
    let need = g.produce_rate + g.total_lag as f64 / drain.as_secs_f64().max(1e-3);
    let want = (f64::from(current) * need / g.commit_rate).ceil();
    Some((want.min(f64::from(partitions)) as u32).max(current.min(partitions)))
}

#[cfg(test)]
mod tests;
