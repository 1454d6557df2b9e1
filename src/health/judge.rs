//! The status rules: from what the engine shows of a partition (its
//! [`PartitionView`]) to a [`PartitionStatus`], the signals and the reasons.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::health::partition::{AnomalyKind, OffsetAnomaly, lock};
use crate::health::report::{HealthReason, HealthStatus, PartitionReport, PartitionStatus};
use crate::health::thresholds::HealthThresholds;
use crate::health::view::{PartitionView, Progress};
use crate::record::unix_ms;

/// How often the health thread evaluates the partitions that were not
/// quiet at their last evaluation.
pub(crate) const EVAL_TICK: Duration = Duration::from_millis(100);

/// How often the health thread evaluates every partition, the quiet ones
/// too: a tenth of the shorter of `stall_after` and `no_success_after`,
/// between [`EVAL_TICK`] and 1 s.
///
/// A partition is quiet when its last evaluation found it caught up (lag 0:
/// committed at the readable end: nothing waits, nothing is uncommitted)
/// and `ok` with no reason. A quiet partition that receives records is seen
/// at the next full evaluation, so its clocks start up to this much late: a
/// stall (or no success) that starts from caught-up is reported up to a
/// tenth of its threshold (at most 1 s) after the threshold, never earlier.
/// At 1,000 idle partitions this keeps the health thread near 0.15 % of a
/// core instead of 1.2 % (`benches/scale.rs`).
pub(crate) fn full_evaluation_every(t: &HealthThresholds) -> Duration {
    (t.stall_after.min(t.no_success_after) / 10).clamp(EVAL_TICK, Duration::from_secs(1))
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    committed: i64,
    lag: u64,
    /// The end the lag counts to (for the arrival rate).
    end: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RewindEvent {
    at: Instant,
    from: i64,
    to: i64,
}

/// Evaluation state of one topic-partition.
#[derive(Debug)]
pub(crate) struct Track {
    /// The assignment (the `PartitionState`'s address) last evaluated.
    assignment: usize,
    committed: Option<i64>,
    last_advance: Instant,
    /// The processed position last evaluated, and when it last advanced.
    processed: Option<i64>,
    last_progress: Instant,
    /// Since when completed records have waited for a commit (the processed
    /// position above the committed offset).
    ahead_since: Option<Instant>,
    /// When the head of the line was last seen waiting for its due time (a
    /// retry tier): the wait counts as progress.
    due_wait_at: Option<Instant>,
    lag_since: Option<Instant>,
    samples: VecDeque<Sample>,
    rewind: Option<RewindEvent>,
    pub(crate) last_seen: Instant,
}

impl Track {
    pub(crate) fn new(now: Instant, assignment: usize) -> Self {
        Track {
            assignment,
            committed: None,
            last_advance: now,
            processed: None,
            last_progress: now,
            ahead_since: None,
            due_wait_at: None,
            lag_since: None,
            samples: VecDeque::new(),
            rewind: None,
            last_seen: now,
        }
    }

    /// Keeps the history across a re-assignment of the same partition
    /// unless it was away for longer than `forget_after`.
    fn seen(&mut self, now: Instant, assignment: usize, forget_after: Duration) {
        if self.assignment != assignment {
            if now.saturating_duration_since(self.last_seen) > forget_after {
                *self = Track::new(now, assignment);
            }
            self.assignment = assignment;
        }
        self.last_seen = now;
    }

    /// Samples the lag every eighth of the window; returns `(first lag, last
    /// lag, window)` when over a full window the lag grew at every sample
    /// while the committed offset advanced (Burrow's rule), and grew by
    /// more than the records that arrived in `noise` (see
    /// [`noise_allowance`]).
    fn growth(
        &mut self,
        now: Instant,
        committed: Option<i64>,
        end: Option<i64>,
        lag: Option<u64>,
        window: Duration,
        noise: Duration,
    ) -> Option<(u64, u64, Duration)> {
        let (Some(committed), Some(end), Some(lag)) = (committed, end, lag) else {
            self.samples.clear();
            return None;
        };
        let every = (window / 8).max(EVAL_TICK);
        if self
            .samples
            .back()
            .is_none_or(|s| now.saturating_duration_since(s.at) >= every)
        {
            self.samples.push_back(Sample {
                at: now,
                committed,
                lag,
                end,
            });
        }
        while self.samples.len() > 1 && now.saturating_duration_since(self.samples[1].at) >= window
        {
            self.samples.pop_front();
        }
        let (first, last) = (*self.samples.front()?, *self.samples.back()?);
        let over = now.saturating_duration_since(first.at);
        if self.samples.len() < 3 || over < window {
            return None;
        }
        let rising = self
            .samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .all(|(a, b)| b.lag >= a.lag);
        // Records per second that arrived over the window; the growth a
        // consumer keeping up shows between two samples is at most what
        // arrives in `noise`.
        let sampled = last.at.saturating_duration_since(first.at).as_secs_f64();
        let rate = if sampled > 0.0 {
            (last.end - first.end).max(0) as f64 / sampled
        } else {
            0.0
        };
        let floor = rate * noise.as_secs_f64();
        let grew = self.samples.iter().all(|s| s.lag > 0)
            && rising
            && last.lag > first.lag
            && (last.lag - first.lag) as f64 > floor
            && last.committed > first.committed;
        grew.then_some((first.lag, last.lag, over))
    }
}

/// Fetching slack beyond the commit and statistics intervals: librdkafka's
/// default `fetch.wait.max.ms` (500 ms).
const FETCH_ALLOWANCE: Duration = Duration::from_millis(500);

/// How far the sampled committed lag of a consumer that keeps up moves on
/// its own, as a time: the committed offset trails the processed position
/// by up to one commit interval, the high watermark read from statistics
/// is up to one statistics interval old, and records wait up to
/// [`FETCH_ALLOWANCE`] to be fetched. Lag growth of fewer records than
/// arrive in this time is noise, not a consumer falling behind.
pub(crate) fn noise_allowance(
    commit_interval: Duration,
    statistics_interval: Option<Duration>,
) -> Duration {
    commit_interval + statistics_interval.unwrap_or_default() + FETCH_ALLOWANCE
}

/// What the evaluation of one partition needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Inputs {
    /// The group's committed offset, if known.
    committed: Option<i64>,
    /// What the lag is counted from: the committed offset, or where
    /// consumption started.
    base: Option<i64>,
    /// The next offset after the contiguous completed run.
    processed: Option<i64>,
    /// The end lag counts to: the last stable offset under
    /// `read_committed`, else the high watermark.
    end: Option<i64>,
    /// Not consumed by policy.
    failed: bool,
    /// The head of the line waits for its due time (a retry tier).
    due_wait: bool,
    /// The application paused the partition.
    paused: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Judged {
    pub(crate) status: PartitionStatus,
    pub(crate) lag: Option<u64>,
    pub(crate) processed_lag: Option<u64>,
    pub(crate) stalled_for: Duration,
    lag_since: Option<Instant>,
    due_wait_at: Option<Instant>,
    growth: Option<(u64, u64, Duration)>,
    rewind: Option<RewindEvent>,
}

/// The status rules (see the module documentation).
///
/// - **stall**: records wait (lag above zero) and neither the committed
///   offset nor the processed position moved for `stall_after`;
/// - **stop**: completed records waited for a commit for `stall_after`
///   (the processed position above the committed offset all that time,
///   the committed offset frozen). A handler that was stuck and returned
///   makes progress: the commit that follows within the commit interval
///   ends it, and nothing is reported meanwhile;
/// - **warn**: the lag grew over the window by more than `noise` of
///   traffic explains (see [`Track::growth`]).
fn judge(tr: &mut Track, i: Inputs, now: Instant, t: &HealthThresholds, noise: Duration) -> Judged {
    if let Some(c) = i.committed {
        match tr.committed {
            Some(prev) if c > prev => tr.last_advance = now,
            Some(prev) if c < prev => {
                tr.last_advance = now;
                tr.rewind = Some(RewindEvent {
                    at: now,
                    from: prev,
                    to: c,
                });
            }
            _ => {}
        }
        tr.committed = Some(c);
    }
    if let Some(p) = i.processed {
        if tr.processed.is_some_and(|prev| p != prev) {
            tr.last_progress = now;
        }
        tr.processed = Some(p);
    }
    // A retry tier's record waiting for its due time is what the partition
    // is meant to do: the stall clock does not run meanwhile.
    // So is a partition the application paused; its lag may grow
    // meanwhile without a warning.
    if i.due_wait || i.paused {
        tr.last_progress = now;
        tr.due_wait_at = Some(now);
    }
    if i.paused {
        tr.samples.clear();
    }
    let ahead = matches!((i.processed, i.base), (Some(p), Some(b)) if p > b);
    let ahead_since = if ahead {
        Some(*tr.ahead_since.get_or_insert(now))
    } else {
        tr.ahead_since = None;
        None
    };
    let minus = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some((a - b).max(0) as u64),
        _ => None,
    };
    let lag = minus(i.end, i.base);
    let processed_lag = minus(i.end, i.processed.or(i.base));
    let waiting = lag.is_some_and(|l| l > 0);
    let lag_since = if waiting {
        Some(*tr.lag_since.get_or_insert(now))
    } else {
        tr.lag_since = None;
        None
    };
    // Completed records not committed: since they began to wait (or the
    // last commit, if later).
    let uncommitted_for = match (lag_since, ahead_since) {
        (Some(_), Some(since)) => now.saturating_duration_since(since.max(tr.last_advance)),
        _ => Duration::ZERO,
    };
    // Nothing moves at all: no commit, no record completed.
    let frozen_for = match lag_since {
        Some(since) => {
            now.saturating_duration_since(since.max(tr.last_advance).max(tr.last_progress))
        }
        None => Duration::ZERO,
    };
    let stalled_for = uncommitted_for.max(frozen_for);
    let growth = if i.paused {
        None
    } else {
        tr.growth(now, i.base, i.end, lag, t.lag_growth_window, noise)
    };
    let rewind = tr
        .rewind
        .filter(|r| now.saturating_duration_since(r.at) < t.lag_growth_window);
    let status = if i.failed {
        PartitionStatus::Stop
    } else if rewind.is_some() {
        PartitionStatus::Rewind
    } else if uncommitted_for >= t.stall_after {
        PartitionStatus::Stop
    } else if frozen_for >= t.stall_after {
        PartitionStatus::Stall
    } else if growth.is_some() {
        PartitionStatus::Warn
    } else {
        PartitionStatus::Ok
    };
    Judged {
        status,
        lag,
        processed_lag,
        stalled_for,
        lag_since,
        due_wait_at: tr.due_wait_at,
        growth,
        rewind,
    }
}

/// One partition's evaluated signals.
pub(crate) struct Evaluated {
    pub(crate) view: Arc<dyn PartitionView>,
    pub(crate) judged: Judged,
    /// The status reported and exported: the rules' status, raised to
    /// agree with the reasons.
    pub(crate) status: PartitionStatus,
    reasons: Vec<HealthReason>,
    committed: Option<i64>,
    processed: Option<i64>,
    high_watermark: Option<i64>,
    log_start: Option<i64>,
    pub(crate) head_age: Duration,
    since_success: Option<Duration>,
    no_success_for: Duration,
    blocked: Option<(Duration, crate::summary::BlockedRecord)>,
    anomaly: Option<OffsetAnomaly>,
    statistics_age: Option<Duration>,
}

/// Evaluates one partition, keeping its history in `tracks`.
pub(crate) fn evaluate_one(
    tracks: &mut HashMap<(Arc<str>, i32), Track>,
    view: Arc<dyn PartitionView>,
    now: Instant,
    wall: SystemTime,
    t: &HealthThresholds,
    noise: Duration,
) -> Evaluated {
    let h = view.health();
    let Progress {
        position,
        head,
        completed,
    } = view.progress();
    let own = view.committed();
    let known = h.known_committed();
    let mut st = lock(&h.stats);
    let committed = [own, known, st.committed()].into_iter().flatten().next();
    let base = committed.or_else(|| h.estimate());
    let at_least = |known: Option<i64>| match (known, position) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let high_watermark = at_least(st.high_watermark());
    // Lag counts to what the consumer can read: the last stable offset
    // under read_committed (records of open transactions are not lag).
    let end = at_least(st.readable_end());
    let log_start = st.log_start();
    let head_age = match head {
        Some((_, event_ms)) => {
            Duration::from_millis((unix_ms(wall) - event_ms).max(0).unsigned_abs())
        }
        // Nothing fetched waits: records known from the high watermark to
        // exist beyond the position (or, without one, the log start).
        None => position
            .or(base)
            .or(log_start)
            .and_then(|p| st.known_since(p))
            .map(|since| now.saturating_duration_since(since))
            .unwrap_or_default(),
    };
    let statistics_age = st.at.map(|at| now.saturating_duration_since(at));
    drop(st);
    let key = (Arc::clone(view.topic()), view.partition());
    // The assignment's identity: the engine's state of the partition.
    let id = Arc::as_ptr(&view) as *const () as usize;
    let track = tracks
        .entry(key)
        .or_insert_with(|| Track::new(h.assigned_at().min(now), id));
    track.seen(now, id, t.stall_after);
    let processed = completed.or(base);
    let judged = judge(
        track,
        Inputs {
            committed,
            base,
            processed,
            end,
            failed: h.is_failed(),
            due_wait: view.waiting_for_due_time(),
            paused: view.paused_by_application(),
        },
        now,
        t,
        // A retry tier's records wait its delay by design.
        noise + view.due_delay(),
    );
    let last_success = h.last_success();
    let no_success_for = match judged.lag_since {
        Some(since) => now.saturating_duration_since(
            since
                .max(last_success.unwrap_or(h.assigned_at()))
                .max(judged.due_wait_at.unwrap_or(since)),
        ),
        None => Duration::ZERO,
    };
    let blocked = view.blocked().map(|record| {
        (
            wall.duration_since(record.since).unwrap_or_default(),
            record,
        )
    });
    let anomaly = h.anomaly();
    let mut e = Evaluated {
        status: judged.status,
        judged,
        committed,
        processed,
        high_watermark,
        log_start,
        head_age,
        since_success: last_success.map(|at| now.saturating_duration_since(at)),
        no_success_for,
        blocked,
        anomaly,
        statistics_age,
        reasons: Vec::new(),
        view,
    };
    e.reasons = e.reasons(t, now);
    e.status = status_with(e.judged.status, &e.reasons);
    e
}

/// The partition's status, raised to agree with its reasons: a partition
/// the rules call `ok` but that carries a reason (a retention overrun, a
/// blocking record, no success while records wait) is `warn`, or `stall`
/// when a reason makes it unhealthy.
fn status_with(status: PartitionStatus, reasons: &[HealthReason]) -> PartitionStatus {
    if status != PartitionStatus::Ok {
        return status;
    }
    match reasons.iter().map(HealthReason::severity).max() {
        Some(HealthStatus::Unhealthy) => PartitionStatus::Stall,
        Some(HealthStatus::Degraded) => PartitionStatus::Warn,
        _ => PartitionStatus::Ok,
    }
}

impl Evaluated {
    /// Caught up (lag 0: committed at the readable end, so nothing waits
    /// and nothing is uncommitted) and `ok` with no reason but an
    /// informational one (an under-replicated partition: nothing about it
    /// changes within a second): see [`full_evaluation_every`].
    pub(crate) fn is_quiet(&self) -> bool {
        self.status == PartitionStatus::Ok
            && self
                .reasons
                .iter()
                .all(|r| matches!(r, HealthReason::UnderReplicated(_)))
            && self.judged.lag == Some(0)
    }

    fn reasons(&self, t: &HealthThresholds, now: Instant) -> Vec<HealthReason> {
        let mut out = Vec::new();
        let j = &self.judged;
        let failed = self.view.health().is_failed();
        if let Some(a) = self.anomaly {
            let ago = now.saturating_duration_since(a.at);
            if failed || ago < t.report_events_for {
                out.push(match a.kind {
                    AnomalyKind::RetentionOverrun {
                        offset,
                        log_start,
                        lost,
                        ..
                    } => HealthReason::RetentionOverrun {
                        offset,
                        log_start_offset: log_start,
                        lost,
                        policy: a.policy,
                        resumed_at: a.resumed_at,
                        ago,
                    },
                    AnomalyKind::AboveHighWatermark {
                        offset,
                        high_watermark,
                        ..
                    } => HealthReason::CommittedAboveHighWatermark {
                        offset,
                        high_watermark,
                        policy: a.policy,
                        resumed_at: a.resumed_at,
                        ago,
                    },
                    AnomalyKind::LogTruncation {
                        offset,
                        truncated_to,
                        ..
                    } => HealthReason::LogTruncated {
                        offset,
                        truncated_to,
                        policy: a.policy,
                        resumed_at: a.resumed_at,
                        ago,
                    },
                    AnomalyKind::NoCommittedOffset => HealthReason::NoCommittedOffset,
                });
            }
        }
        match j.status {
            PartitionStatus::Stall => out.push(HealthReason::Stalled {
                duration: j.stalled_for,
            }),
            PartitionStatus::Stop if !failed => out.push(HealthReason::NotCommitting {
                duration: j.stalled_for,
            }),
            PartitionStatus::Warn => {
                if let Some((from, to, over)) = j.growth {
                    out.push(HealthReason::LagGrowing { from, to, over });
                }
            }
            PartitionStatus::Rewind => {
                if let Some(r) = j.rewind {
                    out.push(HealthReason::Rewound {
                        from: r.from,
                        to: r.to,
                        ago: now.saturating_duration_since(r.at),
                    });
                }
            }
            _ => {}
        }
        if !failed && self.no_success_for >= t.no_success_after {
            out.push(HealthReason::NoSuccess {
                duration: self.no_success_for,
            });
        }
        if let Some((duration, record)) = &self.blocked {
            out.push(HealthReason::BlockedByFailingRecord {
                duration: *duration,
                offset: record.offset,
                attempts: record.attempts,
                error: record.error.clone(),
            });
        }
        if self.view.paused_by_application() {
            out.push(HealthReason::PausedByApplication);
        }
        if let Some(r) = self.view.health().replication()
            && r.is_under_replicated()
        {
            out.push(HealthReason::UnderReplicated(r));
        }
        out
    }

    pub(crate) fn report(&self) -> PartitionReport {
        let j = &self.judged;
        PartitionReport {
            topic: self.view.topic().to_string(),
            partition: self.view.partition(),
            status: self.status,
            committed_offset: self.committed,
            processed_offset: self.processed,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start,
            lag: j.lag,
            processed_lag: j.processed_lag,
            head_age: self.head_age,
            stalled_for: j.stalled_for,
            since_last_success: self.since_success,
            statistics_age: self.statistics_age,
            replication: self.view.health().replication(),
            reasons: self.reasons.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
