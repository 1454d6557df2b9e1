//! Freshness objectives: "99 % of the events of topic X are processed within
//! 30 s".
//!
//! Declare objectives with
//! [`FreshConsumer::freshness_objective`](crate::FreshConsumer::freshness_objective).
//! For each one the library
//! - counts every finished record in
//!   [`SLO_MESSAGES`](crate::metrics::SLO_MESSAGES) with the objective's
//!   threshold and a result ([`SloResult`]): `good` when the record's handler
//!   succeeded and its event age was **at most** the threshold (the boundary
//!   is inclusive, like a Prometheus `le` bucket), `late` when it was more;
//!   dead-lettered, skipped, stale (shed by
//!   [`max_record_age`](crate::FreshConsumer::max_record_age)) and
//!   timestamp-less records under their own results, so the SLO owner
//!   decides whether they burn budget;
//! - adds the threshold to the event-age histogram's bucket boundaries, so a
//!   histogram-based SLI is exact too;
//! - evaluates compliance and burn rate over a short and a long rolling
//!   window in process ([`HealthSnapshot::objectives`](crate::health::HealthSnapshot::objectives)),
//!   and logs a warning while both windows burn budget faster than allowed.
//!
//! The in-process burn rate counts `late`, `dead_lettered`, `skipped` and
//! `stale` as bad and leaves `no_timestamp` out, like the default SLI of the shipped
//! Prometheus rules (`deploy/prometheus`).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Default short window of the in-process evaluation.
pub const DEFAULT_SHORT_WINDOW: Duration = Duration::from_secs(5 * 60);
/// Default long window of the in-process evaluation.
pub const DEFAULT_LONG_WINDOW: Duration = Duration::from_secs(60 * 60);

/// A freshness objective: `target` of the records (of one topic, or of all)
/// are processed within `threshold` of their event time.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct FreshnessObjective {
    pub(crate) topic: Option<String>,
    pub(crate) threshold: Duration,
    pub(crate) target: f64,
}

impl FreshnessObjective {
    /// `target` (for example 0.99) of the records are processed within
    /// `threshold` (for example 30 s) of their event time. Applies to every
    /// topic unless [`topic`](Self::topic) narrows it. `threshold` must be
    /// more than zero (at millisecond resolution) and `0 < target < 1`.
    pub fn new(threshold: Duration, target: f64) -> Self {
        FreshnessObjective {
            topic: None,
            threshold,
            target,
        }
    }

    /// Applies the objective to this topic only.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// The threshold in seconds, as the `fresh_consumer.slo.threshold`
    /// attribute spells it: the shortest decimal form (`30`, `0.25`).
    pub fn threshold_label(&self) -> String {
        let s = self.threshold.as_secs_f64();
        format!("{s}")
    }

    pub(crate) fn applies_to(&self, topic: &str) -> bool {
        self.topic.as_deref().is_none_or(|t| t == topic)
    }

    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if self.threshold < Duration::from_millis(1) {
            return Err("threshold must be at least 1 ms");
        }
        if !(self.target > 0.0 && self.target < 1.0) {
            return Err("target must be in (0, 1)");
        }
        if self.topic.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err("topic must not be empty");
        }
        Ok(())
    }
}

/// How a finished record counts against a freshness objective: the values of
/// the `fresh_consumer.slo.result` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SloResult {
    /// Handler succeeded, event age at most the threshold.
    Good,
    /// Handler succeeded, event age above the threshold.
    Late,
    /// Parked in a dead-letter topic.
    DeadLettered,
    /// Given up and committed past (skip policy).
    Skipped,
    /// Not handled: its event age was above
    /// [`max_record_age`](crate::FreshConsumer::max_record_age) when it
    /// reached the handler (skipped or written elsewhere, see
    /// [`OnStale`](crate::failure::OnStale)). Counted as bad by the in-process
    /// evaluation: the record was not processed fresh.
    Stale,
    /// Handler succeeded but the record has no usable event time.
    NoTimestamp,
}

impl SloResult {
    /// Every result, in attribute order.
    pub const ALL: [SloResult; 6] = [
        SloResult::Good,
        SloResult::Late,
        SloResult::DeadLettered,
        SloResult::Skipped,
        SloResult::Stale,
        SloResult::NoTimestamp,
    ];

    /// The attribute value: `good`, `late`, `dead_lettered`, `skipped`,
    /// `stale`,
    /// `no_timestamp`.
    pub fn as_str(self) -> &'static str {
        match self {
            SloResult::Good => "good",
            SloResult::Late => "late",
            SloResult::DeadLettered => "dead_lettered",
            SloResult::Skipped => "skipped",
            SloResult::Stale => "stale",
            SloResult::NoTimestamp => "no_timestamp",
        }
    }

    /// Whether the in-process evaluation counts it: `Some(true)` good,
    /// `Some(false)` bad, `None` left out.
    fn is_good(self) -> Option<bool> {
        match self {
            SloResult::Good => Some(true),
            SloResult::Late | SloResult::DeadLettered | SloResult::Skipped | SloResult::Stale => {
                Some(false)
            }
            SloResult::NoTimestamp => None,
        }
    }

    /// The result of a succeeded record of age `age_s` (seconds) against
    /// `threshold_s`: inclusive at the boundary.
    pub(crate) fn of_age(age_s: f64, threshold_s: f64) -> SloResult {
        if age_s <= threshold_s {
            SloResult::Good
        } else {
            SloResult::Late
        }
    }
}

impl fmt::Display for SloResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compliance and burn rate of one objective over one window.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct WindowReport {
    /// The window length.
    pub window: Duration,
    /// Good records in the window (or since the start, when the consumer has
    /// run for less than the window).
    pub good: u64,
    /// Bad records (late, dead-lettered, skipped, stale) in the window.
    pub bad: u64,
    /// `good / (good + bad)`; `None` without records.
    pub compliance: Option<f64>,
    /// How fast the error budget burns: `(bad / (good + bad)) / (1 - target)`.
    /// 1 spends exactly the budget over the SLO period; 14.4 spends a 30-day
    /// budget in about two days. `None` without records.
    pub burn_rate: Option<f64>,
}

/// The in-process evaluation of one objective.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ObjectiveReport {
    /// The objective's topic, `None` for all topics.
    pub topic: Option<String>,
    /// The objective's threshold.
    pub threshold: Duration,
    /// The objective's target ratio.
    pub target: f64,
    /// The short window (default 5 min).
    pub short: WindowReport,
    /// The long window (default 1 h).
    pub long: WindowReport,
}

/// One objective's running counts and rolling samples.
pub(crate) struct ObjectiveState {
    pub(crate) objective: FreshnessObjective,
    pub(crate) threshold_s: f64,
    good: AtomicU64,
    bad: AtomicU64,
    /// (time, good, bad) samples, oldest first, at most one per second.
    samples: Mutex<VecDeque<(Instant, u64, u64)>>,
    last_warning: Mutex<Option<Instant>>,
}

impl ObjectiveState {
    fn new(objective: FreshnessObjective) -> Self {
        ObjectiveState {
            threshold_s: objective.threshold.as_secs_f64(),
            objective,
            good: AtomicU64::new(0),
            bad: AtomicU64::new(0),
            samples: Mutex::new(VecDeque::from([(Instant::now(), 0, 0)])),
            last_warning: Mutex::new(None),
        }
    }

    /// Counts one finished record (hot path: one relaxed atomic add).
    pub(crate) fn count(&self, result: SloResult) {
        match result.is_good() {
            Some(true) => self.good.fetch_add(1, Ordering::Relaxed),
            Some(false) => self.bad.fetch_add(1, Ordering::Relaxed),
            None => 0,
        };
    }

    fn window(&self, window: Duration, now: Instant) -> WindowReport {
        let good = self.good.load(Ordering::Relaxed);
        let bad = self.bad.load(Ordering::Relaxed);
        let (g0, b0) = {
            let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            samples
                .iter()
                .rev()
                .find(|(t, _, _)| now.duration_since(*t) >= window)
                .or(samples.front())
                .map(|&(_, g, b)| (g, b))
                .unwrap_or((0, 0))
        };
        let (good, bad) = (good.saturating_sub(g0), bad.saturating_sub(b0));
        let total = good + bad;
        let compliance = (total > 0).then(|| good as f64 / total as f64);
        let burn_rate =
            compliance.map(|c| (1.0 - c) / (1.0 - self.objective.target).max(f64::EPSILON));
        WindowReport {
            window,
            good,
            bad,
            compliance,
            burn_rate,
        }
    }
}

/// All objectives of a consumer, shared by the workers (counting), the
/// committer thread (sampling) and the health handle (reports).
pub(crate) struct SloRegistry {
    pub(crate) objectives: Vec<ObjectiveState>,
    short: Duration,
    long: Duration,
}

impl SloRegistry {
    pub(crate) fn new(objectives: &[FreshnessObjective], short: Duration, long: Duration) -> Self {
        SloRegistry {
            objectives: objectives
                .iter()
                .cloned()
                .map(ObjectiveState::new)
                .collect(),
            short,
            long,
        }
    }

    /// Takes a sample (at most one per second per objective), drops samples
    /// older than the long window, and warns while both windows burn budget.
    pub(crate) fn sample(&self) {
        let now = Instant::now();
        for o in &self.objectives {
            {
                let mut samples = o.samples.lock().unwrap_or_else(|e| e.into_inner());
                if samples
                    .back()
                    .is_some_and(|(t, _, _)| now.duration_since(*t) < Duration::from_secs(1))
                {
                    continue;
                }
                samples.push_back((
                    now,
                    o.good.load(Ordering::Relaxed),
                    o.bad.load(Ordering::Relaxed),
                ));
                while samples.len() > 2 && now.duration_since(samples[1].0) >= self.long {
                    samples.pop_front();
                }
            }
            let short = o.window(self.short, now);
            let long = o.window(self.long, now);
            if let (Some(s), Some(l)) = (short.burn_rate, long.burn_rate)
                && s > 1.0
                && l > 1.0
            {
                let mut last = o.last_warning.lock().unwrap_or_else(|e| e.into_inner());
                if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60)) {
                    *last = Some(now);
                    tracing::warn!(
                        topic = o.objective.topic.as_deref().unwrap_or("*"),
                        threshold = ?o.objective.threshold,
                        target = o.objective.target,
                        short_window = ?self.short,
                        long_window = ?self.long,
                        "freshness budget burning at {s:.1}x over {:?} ({l:.1}x over {:?})",
                        self.short,
                        self.long,
                    );
                }
            }
        }
    }

    pub(crate) fn reports(&self) -> Vec<ObjectiveReport> {
        let now = Instant::now();
        self.objectives
            .iter()
            .map(|o| ObjectiveReport {
                topic: o.objective.topic.clone(),
                threshold: o.objective.threshold,
                target: o.objective.target,
                short: o.window(self.short, now),
                long: o.window(self.long, now),
            })
            .collect()
    }
}

/// The event-age boundaries with every objective's threshold added.
pub(crate) fn age_boundaries(base: &[f64], objectives: &[FreshnessObjective]) -> Vec<f64> {
    let mut b: Vec<f64> = base.to_vec();
    for o in objectives {
        let t = o.threshold.as_secs_f64();
        if !b.iter().any(|&x| (x - t).abs() < 1e-9) {
            b.push(t);
        }
    }
    b.sort_by(f64::total_cmp);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_inclusive() {
        let t = 30.0;
        let results: Vec<_> = [10.0, 29.999, 30.0, 30.001, 120.0]
            .iter()
            .map(|&a| SloResult::of_age(a, t))
            .collect();
        let good = results.iter().filter(|r| **r == SloResult::Good).count();
        let late = results.iter().filter(|r| **r == SloResult::Late).count();
        assert_eq!((good, late), (3, 2));
    }

    #[test]
    fn objectives_are_validated() {
        assert!(
            FreshnessObjective::new(Duration::ZERO, 0.99)
                .validate()
                .is_err()
        );
        assert!(
            FreshnessObjective::new(Duration::from_secs(30), 1.0)
                .validate()
                .is_err()
        );
        assert!(
            FreshnessObjective::new(Duration::from_secs(30), 0.0)
                .validate()
                .is_err()
        );
        FreshnessObjective::new(Duration::from_secs(30), 0.99)
            .topic("orders")
            .validate()
            .unwrap();
    }

    #[test]
    fn thresholds_join_the_age_boundaries_once() {
        let o = [
            FreshnessObjective::new(Duration::from_secs(30), 0.99),
            FreshnessObjective::new(Duration::from_secs(45), 0.9),
        ];
        let b = age_boundaries(&[1.0, 30.0, 60.0], &o);
        assert_eq!(b, vec![1.0, 30.0, 45.0, 60.0]);
        assert_eq!(o[1].threshold_label(), "45");
        assert_eq!(
            FreshnessObjective::new(Duration::from_millis(250), 0.9).threshold_label(),
            "0.25"
        );
    }

    #[test]
    fn burn_rate_is_the_bad_share_over_the_budget() {
        let r = SloRegistry::new(
            &[FreshnessObjective::new(Duration::from_secs(30), 0.99)],
            DEFAULT_SHORT_WINDOW,
            DEFAULT_LONG_WINDOW,
        );
        let o = &r.objectives[0];
        for _ in 0..90 {
            o.count(SloResult::Good);
        }
        for _ in 0..5 {
            o.count(SloResult::Late);
        }
        o.count(SloResult::DeadLettered);
        o.count(SloResult::Skipped);
        o.count(SloResult::Stale);
        o.count(SloResult::NoTimestamp);
        let rep = &r.reports()[0];
        assert_eq!((rep.short.good, rep.short.bad), (90, 8));
        let burn = rep.short.burn_rate.unwrap();
        assert!((burn - (8.0 / 98.0) / 0.01).abs() < 1e-9, "{burn}");
    }
}
