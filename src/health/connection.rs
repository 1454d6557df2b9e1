//! The member's link to its cluster as librdkafka reports it: no broker
//! reachable, no group coordinator (from its statistics), and
//! `max.poll.interval.ms` exceeded (from its error callback). Each is kept
//! as the moment it started, and turned into a member-level
//! [`HealthReason`] for a snapshot.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::health::report::HealthReason;
use crate::health::thresholds::{
    DEFAULT_COORDINATOR_LOST_AFTER, DEFAULT_REPORT_EVENTS_FOR, HealthThresholds,
};

/// A moment on the hub's clock in an atomic: nanoseconds since `origin`,
/// plus 1; 0 = none.
#[derive(Default)]
struct Moment(AtomicU64);

impl Moment {
    fn encode(origin: Instant, at: Instant) -> u64 {
        at.saturating_duration_since(origin).as_nanos() as u64 + 1
    }

    /// Sets it to `at`.
    fn set(&self, origin: Instant, at: Instant) {
        self.0.store(Self::encode(origin, at), Ordering::Relaxed);
    }

    /// Sets it to `at` unless it is set: whether this call set it.
    fn start(&self, origin: Instant, at: Instant) -> bool {
        self.0.load(Ordering::Relaxed) == 0
            && self
                .0
                .compare_exchange(
                    0,
                    Self::encode(origin, at),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Clears it: whether it was set.
    fn end(&self) -> bool {
        self.0.swap(0, Ordering::Relaxed) != 0
    }

    /// How long before `now` it was, if it is set.
    fn since(&self, origin: Instant, now: Instant) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(now.saturating_duration_since(origin + Duration::from_nanos(ns - 1))),
        }
    }
}

/// See the module documentation. One per hub.
pub(crate) struct Connection {
    /// The hub's clock.
    origin: Instant,
    /// The last "max.poll.interval.ms exceeded".
    poll_exceeded_at: Moment,
    /// The first statistics report with no broker up, of the reports since.
    brokers_down_at: Moment,
    /// When librdkafka's group state (`cgrp.state`) last left `up`, while
    /// it has not been `up` since.
    coordinator_lost_at: Moment,
    /// The loss was reported unhealthy (logged once per loss).
    coordinator_lost_logged: AtomicBool,
}

impl Connection {
    pub(crate) fn new(origin: Instant) -> Self {
        Connection {
            origin,
            poll_exceeded_at: Moment::default(),
            brokers_down_at: Moment::default(),
            coordinator_lost_at: Moment::default(),
            coordinator_lost_logged: AtomicBool::new(false),
        }
    }

    /// librdkafka reported `max.poll.interval.ms` exceeded.
    pub(crate) fn poll_exceeded(&self) {
        self.poll_exceeded_at.set(self.origin, Instant::now());
    }

    /// Whether a statistics report showed a connection to a broker in
    /// state `UP`: the first report without one starts the
    /// [`HealthReason::BrokersUnreachable`] time, a report with one ends it.
    pub(crate) fn brokers_reachable(&self, up: bool) {
        if up {
            if self.brokers_down_at.end() {
                tracing::info!("a broker is reachable again");
            }
        } else if self.brokers_down_at.start(self.origin, Instant::now()) {
            tracing::warn!("no broker is reachable (librdkafka statistics: no connection up)");
        }
    }

    /// librdkafka's group state from a statistics report, in that state
    /// for `state_age` (`cgrp.stateage`). A state other than `up` starts
    /// the [`HealthReason::NoGroupCoordinator`] time (at the state's
    /// start), a report with `up` ends it.
    pub(crate) fn group_state(&self, state: &str, state_age: Duration) {
        if state == "up" {
            if self.coordinator_lost_at.end()
                && self.coordinator_lost_logged.swap(false, Ordering::Relaxed)
            {
                tracing::info!("the member has its group coordinator again");
            }
        } else {
            let now = Instant::now();
            let since = now.checked_sub(state_age).unwrap_or(self.origin);
            self.coordinator_lost_at.start(self.origin, since);
        }
    }

    /// Adds the member-level reasons at `now` to `reasons`: no broker
    /// reachable and no group coordinator while the run is `active`
    /// (running or joining; `group_state` is librdkafka's last), and
    /// `max.poll.interval.ms` exceeded within `report_events_for`.
    pub(crate) fn reasons(
        &self,
        now: Instant,
        active: bool,
        thresholds: Option<&HealthThresholds>,
        group_state: Option<&str>,
        reasons: &mut Vec<HealthReason>,
    ) {
        if active {
            if let Some(down_for) = self.brokers_down_at.since(self.origin, now) {
                reasons.push(HealthReason::BrokersUnreachable { down_for });
            }
            if let Some(lost_for) = self.coordinator_lost_at.since(self.origin, now) {
                let unhealthy_after = thresholds
                    .map(|t| t.coordinator_lost_after)
                    .unwrap_or(DEFAULT_COORDINATOR_LOST_AFTER);
                let state = group_state.unwrap_or_default().to_owned();
                if lost_for >= unhealthy_after
                    && !self.coordinator_lost_logged.swap(true, Ordering::Relaxed)
                {
                    tracing::error!(
                        lost_for = ?lost_for,
                        group_state = %state,
                        "the member has had no group coordinator for {lost_for:?} (librdkafka group state {state}): nothing is committed, and lost partitions are not taken back. A coordinator moves within seconds; librdkafka 2.12.1 can lose every broker connection of a client for good after a rolling restart (confluentinc/librdkafka#5511, #5600). Health is unhealthy now: restart the process (a liveness probe on health does it)"
                    );
                }
                reasons.push(HealthReason::NoGroupCoordinator {
                    lost_for,
                    state,
                    unhealthy_after,
                });
            }
        }
        let report_for = thresholds
            .map(|t| t.report_events_for)
            .unwrap_or(DEFAULT_REPORT_EVENTS_FOR);
        if let Some(ago) = self.poll_exceeded_at.since(self.origin, now)
            && ago < report_for
        {
            reasons.push(HealthReason::PollIntervalExceeded { ago });
        }
    }
}
