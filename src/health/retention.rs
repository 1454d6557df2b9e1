//! The retention margin of a partition, one estimator for the in-process
//! gauges (`fresh_consumer.partition.retention.*`, from librdkafka's
//! statistics) and the group monitor (`fresh_consumer.monitor.retention.*`,
//! from ListOffsets and OffsetFetch):
//!
//! - **margin**, in records: committed offset minus log start offset, the
//!   records retention may still delete before it reaches one the group has
//!   not processed; negative once it deleted unread records.
//! - **estimated time left**: the margin divided by how much faster the log
//!   start offset moved than the committed offset between the oldest sample
//!   of the window and the latest one. None while the log start does not
//!   gain on the committed offset (it does not move at all, as on a topic
//!   whose retention has not deleted anything yet or between two deletions
//!   of a segment; or the group commits faster than retention deletes), or
//!   once the margin is not positive.
//!
//! Retention deletes whole segments: the log start moves in steps, so the
//! estimate is a rate over the window, not a prediction of the next step.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One reading of a partition's log start and the group's committed offset
/// (`None` when the reader does not know it: its movement then counts as
/// none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RetentionSample {
    pub(crate) at: Instant,
    pub(crate) log_start: i64,
    pub(crate) committed: Option<i64>,
}

/// The margin and the estimated time until the log start passes the
/// committed offset (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RetentionMargin {
    /// Committed offset minus log start offset.
    pub(crate) records: i64,
    /// Estimated time until the log start passes the committed offset.
    pub(crate) eta: Option<Duration>,
}

/// Per second, between two values `dt` apart; 0 when `dt` is zero.
pub(crate) fn rate(from: i64, to: i64, dt: Duration) -> f64 {
    if dt.is_zero() {
        0.0
    } else {
        (to - from) as f64 / dt.as_secs_f64()
    }
}

/// How many records per second the log start gained on the committed
/// offset between `oldest` and `latest`. A committed offset that went
/// backwards counts as not moving (a rewind does not make retention
/// slower).
fn gain(oldest: RetentionSample, latest: RetentionSample) -> f64 {
    let dt = latest.at.saturating_duration_since(oldest.at);
    let commit_rate = match (oldest.committed, latest.committed) {
        (Some(a), Some(b)) => rate(a, b, dt).max(0.0),
        _ => 0.0,
    };
    rate(oldest.log_start, latest.log_start, dt) - commit_rate
}

fn eta(records: i64, gain: f64) -> Option<Duration> {
    (records > 0 && gain > 0.0).then(|| Duration::from_secs_f64(records as f64 / gain))
}

/// The margin to `committed` from the log start of `latest`, with the rates
/// measured since `oldest`.
pub(crate) fn estimate(
    oldest: RetentionSample,
    latest: RetentionSample,
    committed: i64,
) -> RetentionMargin {
    let records = committed - latest.log_start;
    RetentionMargin {
        records,
        eta: eta(records, gain(oldest, latest)),
    }
}

/// Samples over a window, for a caller that keeps no window of its own (the
/// engine's statistics). Keeps one sample at or before the window's start
/// and at most one per 1/32 of the window, plus the latest, so the memory
/// per partition is bounded whatever the statistics interval.
#[derive(Debug)]
pub(crate) struct RetentionWindow {
    window: Duration,
    samples: VecDeque<RetentionSample>,
    latest: Option<RetentionSample>,
}

impl RetentionWindow {
    pub(crate) fn new(window: Duration) -> Self {
        RetentionWindow {
            window,
            samples: VecDeque::new(),
            latest: None,
        }
    }

    /// Takes a sample; forgets the window when the log start or the
    /// committed offset went backwards (a recreated topic, a reset group).
    pub(crate) fn observe(&mut self, sample: RetentionSample) {
        if self.latest.is_some_and(|last| {
            sample.log_start < last.log_start
                || matches!((last.committed, sample.committed), (Some(a), Some(b)) if b < a)
        }) {
            self.samples.clear();
        }
        self.latest = Some(sample);
        if self
            .samples
            .back()
            .is_none_or(|last| sample.at.saturating_duration_since(last.at) >= self.window / 32)
        {
            self.samples.push_back(sample);
        }
        while self.samples.len() >= 2
            && sample.at.saturating_duration_since(self.samples[1].at) >= self.window
        {
            self.samples.pop_front();
        }
    }

    /// The margin to the committed offset `committed` (it can be newer than
    /// the samples', as the library's own commits are) from the latest log
    /// start, with the gain over the window; `None` before the first sample.
    pub(crate) fn margin(&self, committed: i64) -> Option<RetentionMargin> {
        let (oldest, latest) = (*self.samples.front()?, self.latest?);
        Some(estimate(oldest, latest, committed))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.samples.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t0: Instant, secs: u64, log_start: i64, committed: i64) -> RetentionSample {
        RetentionSample {
            at: t0 + Duration::from_secs(secs),
            log_start,
            committed: Some(committed),
        }
    }

    fn estimate(oldest: RetentionSample, latest: RetentionSample) -> RetentionMargin {
        super::estimate(oldest, latest, latest.committed.unwrap())
    }

    #[test]
    fn eta_is_the_margin_over_the_gain() {
        let t0 = Instant::now();
        // Log start +100/s, commits +20/s: gains 80/s on a margin of 800.
        let m = estimate(s(t0, 0, 0, 1000), s(t0, 10, 1000, 1200));
        assert_eq!(m.records, 200);
        assert_eq!(m.eta, Some(Duration::from_secs_f64(2.5)));
    }

    #[test]
    fn no_eta_while_the_log_start_does_not_gain() {
        let t0 = Instant::now();
        // The log start does not move.
        let m = estimate(s(t0, 0, 50, 100), s(t0, 10, 50, 100));
        assert_eq!((m.records, m.eta), (50, None));
        // It moves, but the commits move faster.
        let m = estimate(s(t0, 0, 50, 100), s(t0, 10, 150, 300));
        assert_eq!((m.records, m.eta), (150, None));
        // A single sample: no rate.
        let m = estimate(s(t0, 0, 50, 100), s(t0, 0, 50, 100));
        assert_eq!(m.eta, None);
        // Overrun: a negative margin, no estimate.
        let m = estimate(s(t0, 0, 50, 100), s(t0, 10, 130, 100));
        assert_eq!((m.records, m.eta), (-30, None));
    }

    #[test]
    fn a_rewound_commit_counts_as_not_moving() {
        let t0 = Instant::now();
        let m = estimate(s(t0, 0, 0, 1000), s(t0, 10, 100, 500));
        assert_eq!(m.eta, Some(Duration::from_secs(40)), "400 at 10/s");
    }

    #[test]
    fn the_window_keeps_its_start_and_a_bounded_number_of_samples() {
        let t0 = Instant::now();
        let mut w = RetentionWindow::new(Duration::from_secs(32));
        assert_eq!(w.margin(10), None);
        // One sample every 100 ms for 100 s, log start +1/s toward 1000.
        for i in 0..1000u64 {
            w.observe(RetentionSample {
                at: t0 + Duration::from_millis(100 * i),
                log_start: (i / 10) as i64,
                committed: Some(1000),
            });
        }
        assert!(w.len() <= 34, "{}", w.len());
        let m = w.margin(1000).unwrap();
        assert_eq!(m.records, 1000 - 99);
        let eta = m.eta.unwrap().as_secs_f64();
        assert!((eta - 901.0).abs() < 40.0, "{eta}");
        // The caller's newer committed offset: a bigger margin, same gain.
        let m2 = w.margin(1100).unwrap();
        assert_eq!(m2.records, 1001);
        assert!(m2.eta.unwrap() > m.eta.unwrap());
        assert_eq!(w.margin(90).unwrap().eta, None, "already passed");
    }

    #[test]
    fn an_unknown_committed_offset_counts_as_not_moving() {
        let t0 = Instant::now();
        let mut w = RetentionWindow::new(Duration::from_secs(60));
        for (secs, lo) in [(0, 0), (10, 50)] {
            w.observe(RetentionSample {
                at: t0 + Duration::from_secs(secs),
                log_start: lo,
                committed: None,
            });
        }
        let m = w.margin(100).unwrap();
        assert_eq!((m.records, m.eta), (50, Some(Duration::from_secs(10))));
    }

    #[test]
    fn a_log_start_going_back_forgets_the_window() {
        let t0 = Instant::now();
        let mut w = RetentionWindow::new(Duration::from_secs(60));
        w.observe(s(t0, 0, 0, 100));
        w.observe(s(t0, 10, 50, 100));
        assert!(w.margin(100).unwrap().eta.is_some());
        w.observe(s(t0, 20, 0, 100));
        assert_eq!(w.margin(100).unwrap().eta, None);
    }
}
