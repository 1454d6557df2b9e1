//! The health hub: one per consumer, created with the builder (so a
//! [`HealthHandle`] exists before the run), connected to the engine through
//! [`EngineView`] when the run starts.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;

use crate::error::ConfigError;
use crate::health::connection::Connection;
use crate::health::gauges::{HealthInstruments, Observed};
use crate::health::judge::{
    Evaluated, Track, evaluate_one, full_evaluation_every, noise_allowance,
};
use crate::health::partition::{AnomalyKind, lock};
use crate::health::report::*;
use crate::health::thresholds::{
    DEFAULT_STATISTICS_INTERVAL, HealthConfig, HealthThresholds, NewPartitionStart,
    RetentionOverrunPolicy,
};
use crate::health::view::{EngineView, PartitionView};
use crate::metrics::OFFSET_RESET_REASON;
use rdkafka::config::ClientConfig;

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

impl HealthSettings {
    /// A handle to the hub.
    pub(crate) fn handle(&self) -> HealthHandle {
        HealthHandle::new(Arc::clone(&self.hub))
    }

    /// Checks the options and sets the librdkafka properties they need:
    /// `auto.offset.reset=error` (the library decides offset resets) and
    /// `statistics.interval.ms`. `user_reset` and `user_statistics` are the
    /// user's values of those properties, if set.
    pub(crate) fn configure(
        &self,
        cc: &mut ClientConfig,
        user_reset: Option<&str>,
        user_statistics: Option<&str>,
        user_isolation: Option<&str>,
        commit_interval: Duration,
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
            commit_interval,
            // librdkafka refuses values other than these two itself.
            read_committed: !user_isolation
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("read_uncommitted")),
        })
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

impl HealthHandle {
    pub(crate) fn new(hub: Arc<HealthHub>) -> Self {
        HealthHandle { hub }
    }
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
    engine: Weak<dyn EngineView>,
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
    /// The partitions the health thread's last evaluation found not quiet:
    /// what it evaluates between full evaluations (see [`Self::tick`]).
    /// Weak: the list never keeps a partition's state alive.
    busy: Mutex<Vec<Weak<dyn PartitionView>>>,
    member_id: Mutex<Option<String>>,
    member_id_changes: AtomicU64,
    rebalances: [AtomicU64; 3],
    group_state: Mutex<Option<String>>,
    /// An assignment arrived (even an empty one), or librdkafka's group
    /// join state was `steady`: the member joined its group.
    joined: AtomicBool,
    /// A rebalance is in progress for this member: from the run's start
    /// until the first assignment, and from each revoke (or loss) of
    /// partitions until the next assignment (even an empty one).
    rebalancing: AtomicBool,
    /// When the run started.
    started_at: OnceLock<Instant>,
    /// What librdkafka reports about the member's link to its cluster.
    pub(crate) connection: Connection,
    /// Held by the rebalance callback and by a restart of stopped
    /// partitions: they never interleave.
    assign_lock: Mutex<()>,
    /// The freshness objectives of the run, set when it starts.
    pub(crate) slo: OnceLock<Arc<crate::slo::SloRegistry>>,
}

impl HealthHub {
    pub(crate) fn new() -> Self {
        let origin = Instant::now();
        HealthHub {
            origin,
            state: AtomicU8::new(NOT_STARTED),
            run: OnceLock::new(),
            instruments: OnceLock::new(),
            tracks: Mutex::new(HashMap::new()),
            busy: Mutex::new(Vec::new()),
            member_id: Mutex::new(None),
            member_id_changes: AtomicU64::new(0),
            rebalances: Default::default(),
            group_state: Mutex::new(None),
            joined: AtomicBool::new(false),
            rebalancing: AtomicBool::new(true),
            started_at: OnceLock::new(),
            connection: Connection::new(origin),
            assign_lock: Mutex::new(()),
            slo: OnceLock::new(),
        }
    }

    fn state(&self) -> ConsumerState {
        match self.state.load(Ordering::Acquire) {
            NOT_STARTED => ConsumerState::NotStarted,
            RUNNING if !self.joined.load(Ordering::Acquire) => ConsumerState::Joining,
            RUNNING => ConsumerState::Running,
            _ => ConsumerState::Stopped,
        }
    }

    pub(crate) fn config(&self) -> Option<&HealthConfig> {
        self.run.get().map(|r| &r.config)
    }

    fn engine(&self) -> Option<Arc<dyn EngineView>> {
        self.run.get()?.engine.upgrade()
    }

    /// The clock origin of the hub's timestamps.
    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    pub(crate) fn assign_lock(&self) -> MutexGuard<'_, ()> {
        lock(&self.assign_lock)
    }

    /// Builds the instruments (once per hub).
    pub(crate) fn register_instruments(self: &Arc<Self>, meter: &Meter, group: &str) {
        let observed: Arc<dyn Observed> = Arc::clone(self) as _;
        let _ = self.instruments.set(HealthInstruments::new(
            meter,
            group,
            Arc::downgrade(&observed),
        ));
    }

    /// Connects the hub to a starting run.
    pub(crate) fn start(
        &self,
        engine: Weak<dyn EngineView>,
        config: HealthConfig,
        poll_warning: Duration,
        max_poll_interval: Duration,
    ) {
        let _ = self.run.set(Run {
            engine,
            config,
            poll_warning,
            max_poll_interval,
        });
        let _ = self.started_at.set(Instant::now());
        self.state.store(RUNNING, Ordering::Release);
    }

    /// The run ended.
    pub(crate) fn stopped(&self) {
        self.state.store(STOPPED, Ordering::Release);
    }

    /// Counts a rebalance event.
    pub(crate) fn rebalance(&self, kind: RebalanceKind) {
        if matches!(kind, RebalanceKind::Assigned) {
            self.joined.store(true, Ordering::Release);
        }
        self.rebalancing
            .store(!matches!(kind, RebalanceKind::Assigned), Ordering::Release);
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

    /// librdkafka's consumer-group state from a statistics report, in
    /// that state for `state_age` (`cgrp.stateage`; see
    /// [`Connection::group_state`]).
    pub(crate) fn group_statistics(&self, state: &str, join_state: &str, state_age: Duration) {
        if join_state == "steady" {
            self.joined.store(true, Ordering::Release);
        }
        self.connection.group_state(state, state_age);
        let mut g = lock(&self.group_state);
        if g.as_deref() != Some(state) {
            *g = Some(state.to_owned());
        }
    }

    /// Counts an offset anomaly of the partition with metric attributes
    /// `base`.
    pub(crate) fn count_anomaly(&self, base: &[KeyValue], kind: &AnomalyKind) {
        let Some(i) = self.instruments.get() else {
            return;
        };
        if let AnomalyKind::RetentionOverrun { lost, .. } = kind {
            i.overrun.add(*lost, base);
        }
        let mut attrs = base.to_vec();
        attrs.push(KeyValue::new(OFFSET_RESET_REASON, kind.reason()));
        i.resets.add(1, &attrs);
    }

    /// The health thread's evaluation: every assigned partition when
    /// `full`, else only those that were not quiet at their last
    /// evaluation (see [`full_evaluation_every`]). Keeps the stall clocks
    /// and lag samples current between reports.
    pub(crate) fn tick(&self, full: bool) {
        let (Some(engine), Some(run)) = (self.engine(), self.run.get()) else {
            return;
        };
        let t = &run.config.thresholds;
        let noise = noise_allowance(run.config.commit_interval, run.config.statistics_interval);
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut tracks = lock(&self.tracks);
        let mut busy = lock(&self.busy);
        let views = if full {
            engine.partitions()
        } else {
            busy.iter().filter_map(Weak::upgrade).collect()
        };
        busy.clear();
        for view in views {
            // Revoked since the last full evaluation: its history is the
            // next assignment's.
            if !full && !view.is_assigned() {
                continue;
            }
            if !evaluate_one(&mut tracks, Arc::clone(&view), now, wall, t, noise).is_quiet() {
                busy.push(Arc::downgrade(&view));
            }
        }
        if full {
            let keep = 2 * t.stall_after.max(t.report_events_for);
            tracks.retain(|_, tr| now.saturating_duration_since(tr.last_seen) < keep);
        }
    }

    /// How often [`tick`](Self::tick) evaluates every partition; `None`
    /// before the run.
    pub(crate) fn full_evaluation_every(&self) -> Option<Duration> {
        self.run
            .get()
            .map(|r| full_evaluation_every(&r.config.thresholds))
    }

    /// Evaluates every assigned partition now.
    pub(crate) fn evaluate(&self) -> Vec<Evaluated> {
        let (Some(engine), Some(run)) = (self.engine(), self.run.get()) else {
            return Vec::new();
        };
        let t = &run.config.thresholds;
        let noise = noise_allowance(run.config.commit_interval, run.config.statistics_interval);
        let now = Instant::now();
        let wall = SystemTime::now();
        let states = engine.partitions();
        let mut tracks = lock(&self.tracks);
        let out = states
            .into_iter()
            .map(|s| evaluate_one(&mut tracks, s, now, wall, t, noise))
            .collect();
        let keep = 2 * t.stall_after.max(t.report_events_for);
        tracks.retain(|_, tr| now.saturating_duration_since(tr.last_seen) < keep);
        out
    }

    /// The number of assigned partitions, while the engine runs.
    pub(crate) fn assignment_size(&self) -> Option<usize> {
        self.engine().map(|e| e.assignment_size())
    }

    pub(crate) fn snapshot(&self) -> HealthSnapshot {
        let state = self.state();
        let evaluated = self.evaluate();
        let mut reasons = Vec::new();
        match state {
            ConsumerState::NotStarted => reasons.push(HealthReason::NotStarted),
            ConsumerState::Stopped => reasons.push(HealthReason::Stopped),
            ConsumerState::Joining => reasons.push(HealthReason::NotJoined {
                waited: self
                    .started_at
                    .get()
                    .map(Instant::elapsed)
                    .unwrap_or_default(),
            }),
            ConsumerState::Running => {}
        }
        let now = Instant::now();
        if let (ConsumerState::Running | ConsumerState::Joining, Some(run), Some(engine)) =
            (state, self.run.get(), self.engine())
            && let Some(gap) = engine.poll_gap()
            && gap >= run.poll_warning
        {
            reasons.push(HealthReason::PollGap {
                gap,
                max_poll_interval: run.max_poll_interval,
            });
        }
        self.connection.reasons(
            now,
            matches!(state, ConsumerState::Running | ConsumerState::Joining),
            self.config().map(|c| &c.thresholds),
            lock(&self.group_state).as_deref(),
            &mut reasons,
        );
        let mut partitions: Vec<PartitionReport> =
            evaluated.iter().map(Evaluated::report).collect();
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

impl Observed for HealthHub {
    fn evaluate(&self) -> Vec<Evaluated> {
        HealthHub::evaluate(self)
    }

    fn assignment_size(&self) -> Option<usize> {
        HealthHub::assignment_size(self)
    }

    fn rebalance_in_progress(&self) -> Option<bool> {
        (self.state.load(Ordering::Acquire) == RUNNING)
            .then(|| self.rebalancing.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::partition::PartitionHealth;
    use crate::health::thresholds::NewPartitionStart;
    use crate::health::view::Progress;
    use std::sync::atomic::AtomicUsize;

    /// A partition whose committed offset is 10 and whose readable end the
    /// test sets; counts how often the health code read its progress.
    struct Fake {
        topic: Arc<str>,
        partition: i32,
        health: PartitionHealth,
        reads: AtomicUsize,
        assigned: AtomicBool,
    }

    impl Fake {
        fn new(partition: i32, end: i64) -> Arc<Fake> {
            let f = Fake {
                topic: Arc::from("t"),
                partition,
                health: PartitionHealth::new(Instant::now()),
                reads: AtomicUsize::new(0),
                assigned: AtomicBool::new(true),
            };
            f.set_end(end);
            Arc::new(f)
        }

        fn set_end(&self, end: i64) {
            lock(&self.health.stats).update(Instant::now(), 0, end, end, 10, false);
        }

        fn reads(&self) -> usize {
            self.reads.load(Ordering::Relaxed)
        }
    }

    impl PartitionView for Fake {
        fn topic(&self) -> &Arc<str> {
            &self.topic
        }
        fn partition(&self) -> i32 {
            self.partition
        }
        fn health(&self) -> &PartitionHealth {
            &self.health
        }
        fn attributes(&self) -> &[KeyValue] {
            &[]
        }
        fn progress(&self) -> Progress {
            self.reads.fetch_add(1, Ordering::Relaxed);
            Progress {
                position: Some(10),
                head: None,
                completed: Some(10),
            }
        }
        fn committed(&self) -> Option<i64> {
            Some(10)
        }
        fn blocked(&self) -> Option<crate::summary::BlockedRecord> {
            None
        }
        fn is_assigned(&self) -> bool {
            self.assigned.load(Ordering::Relaxed)
        }
    }

    struct FakeEngine(Vec<Arc<Fake>>);

    impl EngineView for FakeEngine {
        fn partitions(&self) -> Vec<Arc<dyn PartitionView>> {
            self.0
                .iter()
                .filter(|f| f.is_assigned())
                .map(|f| Arc::clone(f) as Arc<dyn PartitionView>)
                .collect()
        }
        fn assignment_size(&self) -> usize {
            self.0.len()
        }
        fn poll_gap(&self) -> Option<Duration> {
            None
        }
    }

    #[test]
    fn between_full_evaluations_only_partitions_that_were_not_quiet_are_evaluated() {
        // Partition 0 is caught up (end = committed = 10); partition 1 has
        // 5 records waiting (end 15).
        let (caught_up, behind) = (Fake::new(0, 10), Fake::new(1, 15));
        let engine: Arc<dyn EngineView> = Arc::new(FakeEngine(vec![
            Arc::clone(&caught_up),
            Arc::clone(&behind),
        ]));
        let hub = HealthHub::new();
        hub.start(
            Arc::downgrade(&engine),
            HealthConfig {
                thresholds: HealthThresholds::default(),
                retention_policy: RetentionOverrunPolicy::default(),
                new_partitions: NewPartitionStart::Earliest,
                statistics_interval: Some(Duration::from_secs(1)),
                commit_interval: Duration::from_secs(1),
                read_committed: true,
            },
            Duration::from_secs(150),
            Duration::from_secs(300),
        );
        assert_eq!(hub.full_evaluation_every(), Some(Duration::from_secs(1)));
        let short = HealthThresholds::default().with_no_success_after(Duration::from_secs(2));
        assert_eq!(full_evaluation_every(&short), Duration::from_millis(200));
        hub.tick(true);
        assert_eq!((caught_up.reads(), behind.reads()), (1, 1));
        for _ in 0..9 {
            hub.tick(false);
        }
        assert_eq!(
            (caught_up.reads(), behind.reads()),
            (1, 10),
            "the caught-up partition waits for the next full evaluation"
        );
        // Records arrive on the quiet partition: seen at the next full
        // evaluation, and from then on at every tick.
        caught_up.set_end(12);
        hub.tick(false);
        assert_eq!(caught_up.reads(), 1);
        hub.tick(true);
        hub.tick(false);
        assert_eq!((caught_up.reads(), behind.reads()), (3, 13));
        // A partition revoked between full evaluations is not evaluated
        // again (its history belongs to its next assignment).
        behind.assigned.store(false, Ordering::Relaxed);
        hub.tick(false);
        assert_eq!(behind.reads(), 13);
        // Evaluating for a report reads every partition.
        let _ = hub.evaluate();
        assert_eq!(caught_up.reads(), 5);
    }
    #[test]
    fn a_rebalance_is_in_progress_from_the_start_and_each_revoke_until_the_next_assignment() {
        let hub = HealthHub::new();
        let in_progress = |h: &HealthHub| Observed::rebalance_in_progress(h);
        assert_eq!(in_progress(&hub), None, "not running");
        let engine: Arc<dyn EngineView> = Arc::new(FakeEngine(vec![]));
        hub.start(
            Arc::downgrade(&engine),
            HealthConfig {
                thresholds: HealthThresholds::default(),
                retention_policy: RetentionOverrunPolicy::default(),
                new_partitions: NewPartitionStart::Earliest,
                statistics_interval: None,
                commit_interval: Duration::from_secs(1),
                read_committed: true,
            },
            Duration::from_secs(150),
            Duration::from_secs(300),
        );
        assert_eq!(in_progress(&hub), Some(true), "joining");
        hub.rebalance(RebalanceKind::Assigned);
        assert_eq!(in_progress(&hub), Some(false));
        hub.rebalance(RebalanceKind::Revoked);
        assert_eq!(in_progress(&hub), Some(true));
        hub.rebalance(RebalanceKind::Assigned);
        assert_eq!(in_progress(&hub), Some(false));
        hub.rebalance(RebalanceKind::Lost);
        assert_eq!(in_progress(&hub), Some(true));
        hub.stopped();
        assert_eq!(in_progress(&hub), None, "stopped: not observed");
    }
}
