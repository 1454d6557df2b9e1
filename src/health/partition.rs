//! The health state of one assigned partition, written by the engine (its
//! worker, the statistics ingest, the offset-reset decisions) and read by
//! the evaluation.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::Offset;

use crate::health::report::Replication;
use crate::health::retention::{RetentionMargin, RetentionSample, RetentionWindow};
use crate::health::thresholds::RetentionOverrunPolicy;

/// The window the in-process retention estimate measures the log start's
/// and the committed offset's movement over (the group monitor's default
/// window too).
pub(crate) const RETENTION_WINDOW: Duration = Duration::from_secs(300);

/// Locks `m`, whatever a panicking holder left behind (the state is
/// counters and timestamps: always usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Health state of one assigned partition, kept in the engine's state of
/// the partition.
pub(crate) struct PartitionHealth {
    origin: Instant,
    assigned_at: Instant,
    /// From librdkafka's statistics.
    pub(crate) stats: Mutex<PartitionStats>,
    /// Where fetching (re)started, as librdkafka's raw offset.
    start: AtomicI64,
    /// The start as a number, or -1.
    estimate: AtomicI64,
    /// The group's committed offset read at assignment, or -1.
    known_committed: AtomicI64,
    /// Nanoseconds since `origin` + 1 of the last success; 0 = none.
    last_success: AtomicU64,
    restarted_at: Mutex<Option<Instant>>,
    anomaly: Mutex<Option<OffsetAnomaly>>,
    /// Not consumed (fail policy, or no committed offset with
    /// `auto.offset.reset=error`).
    failed: AtomicBool,
    /// From the cluster's metadata (the health thread), once read.
    replication: Mutex<Option<Replication>>,
}

impl PartitionHealth {
    /// `origin`: the hub's clock origin ([`HealthHub::origin`](crate::health::hub::HealthHub::origin)).
    pub(crate) fn new(origin: Instant) -> Self {
        PartitionHealth {
            origin,
            assigned_at: Instant::now(),
            stats: Mutex::new(PartitionStats::default()),
            start: AtomicI64::new(Offset::Invalid.to_raw().unwrap_or(-1001)),
            estimate: AtomicI64::new(-1),
            known_committed: AtomicI64::new(-1),
            last_success: AtomicU64::new(0),
            restarted_at: Mutex::new(None),
            anomaly: Mutex::new(None),
            failed: AtomicBool::new(false),
            replication: Mutex::new(None),
        }
    }

    /// The partition's replication as the metadata read last showed it.
    pub(crate) fn set_replication(&self, r: Replication) {
        *lock(&self.replication) = Some(r);
    }

    /// The partition's replication, once read.
    pub(crate) fn replication(&self) -> Option<Replication> {
        *lock(&self.replication)
    }

    /// A record of the partition succeeded at `at` (the worker's clock
    /// reading when the handler returned). Called by the worker.
    pub(crate) fn succeeded(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.origin).as_nanos() as u64 + 1;
        self.last_success.store(ns, Ordering::Relaxed);
    }

    pub(crate) fn last_success(&self) -> Option<Instant> {
        match self.last_success.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.origin + Duration::from_nanos(ns - 1)),
        }
    }

    /// Where fetching (re)started.
    pub(crate) fn start(&self) -> Offset {
        Offset::from_raw(self.start.load(Ordering::Acquire))
    }

    pub(crate) fn estimate(&self) -> Option<i64> {
        Some(self.estimate.load(Ordering::Acquire)).filter(|&e| e >= 0)
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::Release);
    }

    pub(crate) fn set_anomaly(&self, a: OffsetAnomaly) {
        *lock(&self.anomaly) = Some(a);
    }

    pub(crate) fn anomaly(&self) -> Option<OffsetAnomaly> {
        *lock(&self.anomaly)
    }

    /// The fetcher was restarted at `offset`.
    pub(crate) fn restarted(&self, at: Instant, offset: Offset) {
        *lock(&self.restarted_at) = Some(at);
        if let Some(raw) = offset.to_raw() {
            self.start.store(raw, Ordering::Release);
        }
        if let Offset::Offset(o) = offset {
            self.estimate.store(o, Ordering::Release);
        }
    }

    /// `true` unless the fetcher was restarted less than `quiet` ago (a
    /// statistics report may still show it stopped).
    pub(crate) fn restart_settled(&self, now: Instant, quiet: Duration) -> bool {
        lock(&self.restarted_at).is_none_or(|at| now.saturating_duration_since(at) >= quiet)
    }

    /// Takes the decision made at assignment: where fetching starts
    /// (`start`, and as a number `estimate` when known), the group's
    /// committed offset, and the watermarks `(log start, high watermark)`
    /// read then.
    pub(crate) fn planned(
        &self,
        at: Instant,
        start: Offset,
        estimate: Option<i64>,
        committed: Option<i64>,
        watermarks: Option<(i64, i64)>,
    ) {
        if let Some(raw) = start.to_raw() {
            self.start.store(raw, Ordering::Release);
        }
        if let Some(est) = estimate {
            self.estimate.store(est, Ordering::Release);
        }
        if let Some(c) = committed {
            self.known_committed.store(c, Ordering::Release);
        }
        if let Some((lo, hi)) = watermarks {
            lock(&self.stats).seed(at, lo, hi);
        }
    }

    /// When the partition was assigned.
    pub(crate) fn assigned_at(&self) -> Instant {
        self.assigned_at
    }

    /// The group's committed offset read at assignment, if there was one.
    pub(crate) fn known_committed(&self) -> Option<i64> {
        Some(self.known_committed.load(Ordering::Acquire)).filter(|&c| c >= 0)
    }

    /// The retention margin to the committed offset (`own`: this member's
    /// last commit, else the one read at assignment, else librdkafka's),
    /// from the statistics' log start and its movement over
    /// [`RETENTION_WINDOW`]; `None` while either offset is unknown.
    pub(crate) fn retention_margin(&self, own: Option<i64>) -> Option<RetentionMargin> {
        let st = lock(&self.stats);
        let committed = own.or(self.known_committed()).or(st.committed())?;
        st.log_start()?;
        st.retention.margin(committed)
    }
}

/// What is wrong with a partition's offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnomalyKind {
    /// The offset to continue at is below the log start offset: `lost`
    /// records were deleted by retention before they were processed.
    RetentionOverrun {
        offset: i64,
        log_start: i64,
        high_watermark: i64,
        lost: u64,
    },
    /// The offset to continue at is above the high watermark (the topic was
    /// deleted and recreated, or the log was truncated).
    AboveHighWatermark {
        offset: i64,
        log_start: i64,
        high_watermark: i64,
    },
    /// The partition's log was truncated below the offset to continue at
    /// (an unclean leader election, or a replica that lost its log): the
    /// leader's log diverges from the records this group read at
    /// `truncated_to` (found with the leader epoch of the record before
    /// `offset`, KIP-320). The records at `truncated_to..offset` this group
    /// handled are gone from the log; the records now at those offsets are
    /// new.
    LogTruncation {
        offset: i64,
        truncated_to: i64,
        high_watermark: i64,
    },
    /// No committed offset and `auto.offset.reset=error`.
    NoCommittedOffset,
}

impl AnomalyKind {
    /// The `fresh_consumer.offset.reset.reason` attribute value.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            AnomalyKind::RetentionOverrun { .. } => "retention_overrun",
            AnomalyKind::AboveHighWatermark { .. } => "above_high_watermark",
            AnomalyKind::LogTruncation { .. } => "log_truncation",
            AnomalyKind::NoCommittedOffset => "no_committed_offset",
        }
    }
}

/// An offset anomaly and what was done about it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OffsetAnomaly {
    pub(crate) kind: AnomalyKind,
    pub(crate) policy: RetentionOverrunPolicy,
    /// Where consumption resumed; `None` when the partition was stopped.
    pub(crate) resumed_at: Option<i64>,
    pub(crate) at: Instant,
}

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
    /// The end the consumer reads to: the last stable offset (`ls_offset`)
    /// under `isolation.level=read_committed` (librdkafka's default), the
    /// high watermark otherwise; negative when unknown. Records between it
    /// and the high watermark belong to open transactions: not readable,
    /// so not lag.
    end: i64,
    /// librdkafka's view of the group's committed offset
    /// (`committed_offset`), or a negative value when unknown.
    committed: i64,
    /// Consecutive reports in which the partition's fetcher was stopped
    /// (`fetch_state` = `none`): what librdkafka does to a partition whose
    /// offset is out of range under `auto.offset.reset=error`.
    pub(crate) fetch_stopped: u32,
    /// When each high watermark was first seen, oldest first (only values
    /// above the partition's position are kept): "record `n` exists since at
    /// least `t`" for the head-of-line age of records not fetched yet.
    hi_seen: VecDeque<(Instant, i64)>,
    /// When the readable end last changed (or was first seen).
    end_changed_at: Option<Instant>,
    /// The last refresh by a ListOffsets query while the partition did not
    /// fetch: `(when, log start, readable end)`. Reports (whose values are
    /// as old as the partition's last fetch) cannot move the offsets below
    /// it until they catch up with it or it is older than [`REFRESH_KEEP`].
    refreshed: Option<(Instant, i64, i64)>,
    /// The log start and committed offsets of the reports, for the retention
    /// margin's estimate.
    retention: RetentionWindow,
}

/// How long a refreshed value outranks the statistics reports (refreshes
/// repeat every interval while the partition does not fetch; after a topic
/// was recreated the reports win again).
pub(crate) const REFRESH_KEEP: Duration = Duration::from_secs(30);

impl Default for PartitionStats {
    fn default() -> Self {
        PartitionStats {
            at: None,
            lo: INVALID,
            hi: INVALID,
            end: INVALID,
            committed: INVALID,
            fetch_stopped: 0,
            hi_seen: VecDeque::new(),
            end_changed_at: None,
            refreshed: None,
            retention: RetentionWindow::new(RETENTION_WINDOW),
        }
    }
}

impl PartitionStats {
    /// Takes one report's values; `end` is the readable end (see
    /// [`PartitionStats::readable_end`]).
    pub(crate) fn update(
        &mut self,
        at: Instant,
        lo: i64,
        hi: i64,
        end: i64,
        committed: i64,
        stopped: bool,
    ) {
        self.at = Some(at);
        self.committed = committed;
        self.fetch_stopped = if stopped {
            self.fetch_stopped.saturating_add(1)
        } else {
            0
        };
        let (mut lo, mut hi, mut end) = (lo, hi, end);
        if let Some((r_at, r_lo, r_end)) = self.refreshed {
            let readable = if end >= 0 { end } else { hi };
            if readable >= r_end || at.saturating_duration_since(r_at) > REFRESH_KEEP {
                self.refreshed = None;
            } else {
                lo = lo.max(r_lo);
                hi = hi.max(r_end);
                end = end.max(r_end);
            }
        }
        self.lo = lo;
        if lo >= 0 {
            // librdkafka's committed offset, when it knows one (it may not
            // before this member's first commit): only for the commit rate.
            self.retention.observe(RetentionSample {
                at,
                log_start: lo,
                committed: (committed >= 0).then_some(committed),
            });
        }
        self.observe(at, hi, end);
    }

    /// Takes the offsets a ListOffsets query returned for a partition that
    /// does not fetch (paused, or its fetch queue full): the log start
    /// (`None` when not queried) and the readable end (the high watermark,
    /// or the last stable offset under `read_committed`: the query uses the
    /// consumer's isolation level). Offsets only move forward here.
    pub(crate) fn refresh(&mut self, at: Instant, lo: Option<i64>, end: i64) {
        if end < 0 {
            return;
        }
        let lo = lo.unwrap_or(INVALID).max(self.lo);
        self.refreshed = Some((at, lo, end));
        self.lo = lo;
        let hi = self.hi.max(end);
        self.observe(at, hi, end.max(self.end));
    }

    /// Whether the readable end is older than `every` and was not refreshed
    /// within `every` either: a partition that does not fetch keeps the
    /// offsets of its last fetch.
    pub(crate) fn needs_refresh(&self, now: Instant, every: Duration) -> bool {
        let older =
            |t: Option<Instant>| t.is_none_or(|t| now.saturating_duration_since(t) >= every);
        self.at.is_some()
            && older(self.end_changed_at)
            && older(self.refreshed.map(|(at, _, _)| at))
    }

    /// When the readable end last changed, if known.
    pub(crate) fn end_changed_at(&self) -> Option<Instant> {
        self.end_changed_at
    }

    /// Seeds the watermarks queried when the partition was assigned, so the
    /// signals have them before the first report.
    pub(crate) fn seed(&mut self, at: Instant, lo: i64, hi: i64) {
        if self.at.is_none() {
            self.lo = lo;
            self.observe(at, hi, hi);
        }
    }

    fn observe(&mut self, at: Instant, hi: i64, end: i64) {
        if hi < 0 {
            return;
        }
        self.hi = hi;
        // Without a last stable offset the high watermark is the end.
        let end = if end >= 0 { end.min(hi) } else { hi };
        if end != self.end || self.end_changed_at.is_none() {
            self.end_changed_at = Some(at);
        }
        self.end = end;
        // Only readable records wait: the head-of-line age of records not
        // fetched yet counts from when the readable end passed them.
        if self.hi_seen.back().is_none_or(|&(_, last)| end > last) {
            if self.hi_seen.len() == HI_HISTORY {
                // Dropping the oldest observation only makes the age a
                // smaller lower bound.
                self.hi_seen.pop_front();
            }
            self.hi_seen.push_back((at, end));
        }
    }

    /// The end the consumer reads to, if known: the last stable offset
    /// under `read_committed`, else the high watermark. Lag counts to it.
    pub(crate) fn readable_end(&self) -> Option<i64> {
        (self.end >= 0).then_some(self.end)
    }

    /// librdkafka's committed offset, if known.
    pub(crate) fn committed(&self) -> Option<i64> {
        (self.committed >= 0).then_some(self.committed)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_refresh_outranks_stale_reports_until_they_catch_up() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let mut s = PartitionStats::default();
        s.update(t(0), 0, 50, 50, INVALID, false);
        let every = Duration::from_secs(1);
        assert!(!s.needs_refresh(t(500), every));
        // The partition stopped fetching: reports repeat 50.
        s.update(t(1000), 0, 50, 50, INVALID, false);
        assert!(s.needs_refresh(t(1000), every), "end unchanged for 1 s");
        s.refresh(t(1000), Some(5), 350);
        assert_eq!(
            (s.readable_end(), s.high_watermark(), s.log_start()),
            (Some(350), Some(350), Some(5))
        );
        assert!(!s.needs_refresh(t(1500), every));
        s.update(t(2000), 0, 50, 50, INVALID, false);
        assert_eq!(
            (s.readable_end(), s.log_start()),
            (Some(350), Some(5)),
            "a stale report does not go back"
        );
        // Fetching again: the reports catch up and win.
        s.update(t(3000), 6, 360, 360, INVALID, false);
        assert_eq!(s.readable_end(), Some(360));
        s.update(t(4000), 6, 370, 370, INVALID, false);
        assert_eq!(s.readable_end(), Some(370));
        // A refresh older than REFRESH_KEEP yields to the reports (a
        // recreated topic).
        s.refresh(t(5000), None, 400);
        s.update(
            t(5000) + REFRESH_KEEP + Duration::from_secs(1),
            0,
            3,
            3,
            INVALID,
            false,
        );
        assert_eq!(s.readable_end(), Some(3));
    }

    #[test]
    fn known_since_is_the_first_report_above_the_position() {
        let t0 = Instant::now();
        let t = |s| t0 + Duration::from_secs(s);
        let mut s = PartitionStats::default();
        assert_eq!(s.known_since(0), None);
        s.update(t(1), 0, 10, 10, INVALID, false);
        s.update(t(2), 0, 10, 10, INVALID, false);
        s.update(t(3), 0, 15, 15, INVALID, false);
        s.update(t(4), 0, 20, 20, INVALID, false);
        assert_eq!(s.known_since(5), Some(t(1)));
        assert_eq!(s.known_since(12), Some(t(3)));
        assert_eq!(s.known_since(19), Some(t(4)));
        assert_eq!(s.known_since(20), None, "caught up with what is known");
        // Forgotten below the position; new observations keep coming.
        s.update(t(5), 0, 25, 25, INVALID, false);
        assert_eq!(s.known_since(20), Some(t(5)));
        assert_eq!(s.high_watermark(), Some(25));
    }

    #[test]
    fn fetch_stopped_counts_consecutive_reports() {
        let now = Instant::now();
        let mut s = PartitionStats::default();
        s.update(now, 0, 1, 1, 0, true);
        s.update(now, 0, 1, 1, 0, true);
        assert_eq!(s.fetch_stopped, 2);
        s.update(now, 0, 1, 1, 0, false);
        assert_eq!(s.fetch_stopped, 0);
    }

    #[test]
    fn seeds_apply_before_the_first_report_only() {
        let now = Instant::now();
        let mut s = PartitionStats::default();
        assert_eq!(s.high_watermark(), None);
        s.seed(now, 5, 50);
        assert_eq!((s.log_start(), s.high_watermark()), (Some(5), Some(50)));
        s.update(now, 7, 60, 60, 10, false);
        s.seed(now, 1, 2);
        assert_eq!((s.log_start(), s.high_watermark()), (Some(7), Some(60)));
    }

    #[test]
    fn the_retention_margin_shrinks_as_the_log_start_advances() {
        let t0 = Instant::now();
        let h = PartitionHealth::new(t0);
        assert_eq!(h.retention_margin(Some(100)), None, "no report yet");
        // The log start moves 10 records a second toward a committed
        // offset frozen at 100.
        let mut margins = Vec::new();
        for s in 0..5u64 {
            lock(&h.stats).update(
                t0 + Duration::from_secs(s),
                10 * s as i64,
                500,
                500,
                100,
                false,
            );
            margins.push(h.retention_margin(None).unwrap());
        }
        assert_eq!(
            margins.iter().map(|m| m.records).collect::<Vec<_>>(),
            vec![100, 90, 80, 70, 60]
        );
        assert_eq!(margins[0].eta, None, "one report: no movement seen yet");
        assert_eq!(margins[4].eta, Some(Duration::from_secs(6)));
        // This member's own commit is newer than the statistics.
        let m = h.retention_margin(Some(120)).unwrap();
        assert_eq!((m.records, m.eta), (80, Some(Duration::from_secs(8))));
        // A log start that stops moving (reports every 10 s): the estimate
        // fades while the movement is in the window, and is gone (no point
        // exported) once the window holds none.
        let mut etas = Vec::new();
        for s in (10..=400u64).step_by(10) {
            lock(&h.stats).update(t0 + Duration::from_secs(s), 40, 500, 500, 100, false);
            etas.push(h.retention_margin(None).unwrap().eta);
        }
        assert!(etas[0].is_some());
        assert!(
            etas.iter()
                .flatten()
                .collect::<Vec<_>>()
                .windows(2)
                .all(|w| w[1] > w[0]),
            "{etas:?}"
        );
        assert_eq!(etas.last(), Some(&None), "{etas:?}");
    }

    #[test]
    fn lag_counts_to_the_last_stable_offset() {
        let now = Instant::now();
        let mut s = PartitionStats::default();
        // 10 committed records, 5 of an open transaction above them.
        s.update(now, 0, 15, 10, INVALID, false);
        assert_eq!(s.high_watermark(), Some(15));
        assert_eq!(s.readable_end(), Some(10));
        assert_eq!(s.known_since(10), None, "nothing readable beyond 10");
        // Unknown last stable offset: the high watermark is the end.
        s.update(now, 0, 16, INVALID, INVALID, false);
        assert_eq!(s.readable_end(), Some(16));
        assert_eq!(s.known_since(10), Some(now));
    }
}
