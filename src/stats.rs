//! librdkafka's statistics (`statistics.interval.ms`), as the health signals
//! use them: per assigned partition the log start offset (`lo_offset`), the
//! high watermark (`hi_offset`), librdkafka's committed offset and fetch
//! state; per group the state and rebalance count.
//!
//! Freshness: librdkafka emits a report every `statistics.interval.ms`, and
//! rdkafka hands it over only from inside a poll of the consumer; the poll
//! loop polls at least every [`IDLE_POLL_TICK`](crate::IDLE_POLL_TICK). The
//! high watermark in a report is the one the last Fetch response carried: a
//! partition paused by backpressure does not fetch, so its high watermark is
//! as old as the pause.

use std::collections::VecDeque;
use std::time::Instant;

use rdkafka::Statistics;

use crate::shared::Shared;

/// librdkafka's "no offset" in statistics.
const INVALID: i64 = -1001;

/// How many `(time, high watermark)` observations a partition keeps for the
/// age of records known to exist but not fetched yet.
const HI_HISTORY: usize = 256;

/// What the statistics said about one assigned partition.
#[derive(Debug)]
pub(crate) struct PartitionStats {
    /// When the last report reached the library; `None` before the first.
    pub(crate) at: Option<Instant>,
    /// Log start offset (`lo_offset`), or a negative value when unknown.
    pub(crate) lo: i64,
    /// High watermark (`hi_offset`), or a negative value when unknown.
    pub(crate) hi: i64,
    /// librdkafka's view of the group's committed offset
    /// (`committed_offset`), or a negative value when unknown.
    pub(crate) committed: i64,
    /// Consecutive reports in which the partition's fetcher was stopped
    /// (`fetch_state` = `none`): what librdkafka does to a partition whose
    /// offset is out of range under `auto.offset.reset=error`.
    pub(crate) fetch_stopped: u32,
    /// When each high watermark was first seen, oldest first (only values
    /// above the partition's position are kept): "record `n` exists since at
    /// least `t`" for the head-of-line age of records not fetched yet.
    hi_seen: VecDeque<(Instant, i64)>,
}

impl Default for PartitionStats {
    fn default() -> Self {
        PartitionStats {
            at: None,
            lo: INVALID,
            hi: INVALID,
            committed: INVALID,
            fetch_stopped: 0,
            hi_seen: VecDeque::new(),
        }
    }
}

impl PartitionStats {
    /// Takes one report's values.
    pub(crate) fn update(&mut self, at: Instant, lo: i64, hi: i64, committed: i64, stopped: bool) {
        self.at = Some(at);
        self.lo = lo;
        self.committed = committed;
        self.fetch_stopped = if stopped {
            self.fetch_stopped.saturating_add(1)
        } else {
            0
        };
        self.observe_hi(at, hi);
    }

    /// Seeds the watermarks queried when the partition was assigned, so the
    /// signals have them before the first report.
    pub(crate) fn seed(&mut self, at: Instant, lo: i64, hi: i64) {
        if self.at.is_none() {
            self.lo = lo;
            self.observe_hi(at, hi);
        }
    }

    fn observe_hi(&mut self, at: Instant, hi: i64) {
        if hi < 0 {
            return;
        }
        self.hi = hi;
        if self.hi_seen.back().is_none_or(|&(_, last)| hi > last) {
            if self.hi_seen.len() == HI_HISTORY {
                // Dropping the oldest observation only makes the age a
                // smaller lower bound.
                self.hi_seen.pop_front();
            }
            self.hi_seen.push_back((at, hi));
        }
    }

    /// The high watermark, if known.
    pub(crate) fn high_watermark(&self) -> Option<i64> {
        (self.hi >= 0).then_some(self.hi)
    }

    /// The log start offset, if known.
    pub(crate) fn log_start(&self) -> Option<i64> {
        (self.lo >= 0).then_some(self.lo)
    }

    /// Since when the record at `position` is known to exist (the first
    /// observation of a high watermark above it), if one was seen. Forgets
    /// observations at or below `position`: positions only grow within an
    /// assignment.
    pub(crate) fn known_since(&mut self, position: i64) -> Option<Instant> {
        while self.hi_seen.front().is_some_and(|&(_, hi)| hi <= position) {
            self.hi_seen.pop_front();
        }
        self.hi_seen.front().map(|&(at, _)| at)
    }
}

/// Takes a statistics report: per assigned partition, then the group.
pub(crate) fn ingest(shared: &Shared, statistics: &Statistics) {
    let now = Instant::now();
    let mut stopped = Vec::new();
    for state in shared.assigned() {
        let Some(p) = statistics
            .topics
            .get(&*state.topic)
            .and_then(|t| t.partitions.get(&state.partition))
        else {
            continue;
        };
        let is_stopped = p.fetch_state == "none";
        let mut s = state.health.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.update(
            now,
            p.lo_offset,
            p.hi_offset,
            p.committed_offset,
            is_stopped,
        );
        let runs = s.fetch_stopped;
        drop(s);
        if is_stopped {
            stopped.push((state, runs));
        }
    }
    if let Some(group) = &statistics.cgrp {
        shared.health.group_statistics(&group.state);
    }
    shared.health.statistics_received(now, stopped);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_since_is_the_first_report_above_the_position() {
        let t0 = Instant::now();
        let t = |s| t0 + Duration::from_secs(s);
        let mut s = PartitionStats::default();
        assert_eq!(s.known_since(0), None);
        s.update(t(1), 0, 10, INVALID, false);
        s.update(t(2), 0, 10, INVALID, false);
        s.update(t(3), 0, 15, INVALID, false);
        s.update(t(4), 0, 20, INVALID, false);
        assert_eq!(s.known_since(5), Some(t(1)));
        assert_eq!(s.known_since(12), Some(t(3)));
        assert_eq!(s.known_since(19), Some(t(4)));
        assert_eq!(s.known_since(20), None, "caught up with what is known");
        // Forgotten below the position; new observations keep coming.
        s.update(t(5), 0, 25, INVALID, false);
        assert_eq!(s.known_since(20), Some(t(5)));
        assert_eq!(s.high_watermark(), Some(25));
    }

    #[test]
    fn fetch_stopped_counts_consecutive_reports() {
        let now = Instant::now();
        let mut s = PartitionStats::default();
        s.update(now, 0, 1, 0, true);
        s.update(now, 0, 1, 0, true);
        assert_eq!(s.fetch_stopped, 2);
        s.update(now, 0, 1, 0, false);
        assert_eq!(s.fetch_stopped, 0);
    }

    #[test]
    fn seeds_apply_before_the_first_report_only() {
        let now = Instant::now();
        let mut s = PartitionStats::default();
        assert_eq!(s.high_watermark(), None);
        s.seed(now, 5, 50);
        assert_eq!((s.log_start(), s.high_watermark()), (Some(5), Some(50)));
        s.update(now, 7, 60, 10, false);
        s.seed(now, 1, 2);
        assert_eq!((s.log_start(), s.high_watermark()), (Some(7), Some(60)));
    }
}
