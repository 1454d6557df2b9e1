//! From one cycle's reads of a group (its [`Observation`]s) and the samples
//! kept over the window to the [`GroupReport`]: statuses, retention margin,
//! diagnosis and the replica suggestion. No I/O: every rule is tested here
//! on synthetic samples.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::health::retention::{RetentionSample, estimate, rate};
use crate::monitor::report::{
    Diagnosis, GroupReport, HeadTimestamp, LagStatus, PartitionLag, Scaling,
};
use crate::record::RecordTimestamp;
use crate::summary::TopicPartition;

/// The thresholds the rules use (the builder's settings).
#[derive(Clone, Debug)]
pub(crate) struct Rules {
    pub(crate) window: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) lag_threshold: Duration,
    pub(crate) skew_share: f64,
    pub(crate) drain_target: Duration,
    pub(crate) current_replicas: Option<u32>,
}

/// What a cycle read about the record at a partition's committed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadRead {
    /// No read needed (no committed offset, or no lag).
    NotNeeded,
    /// The first record at or after `offset` (the committed offset, or the
    /// log start when that is higher) carried `timestamp`.
    Read {
        offset: i64,
        timestamp: RecordTimestamp,
    },
    /// The record could not be read in time.
    Unread,
    /// The probe read to the end without a record: only records a consumer
    /// never receives lie past the committed offset (transaction markers,
    /// aborted transactions under `read_committed`). Nothing waits.
    NothingReadable,
}

/// One partition as read in one cycle.
#[derive(Clone, Debug)]
pub(crate) struct Observation {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) committed: Option<i64>,
    pub(crate) log_start: i64,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable: i64,
    /// The end the lag counts to (LSO or high watermark).
    pub(crate) end: i64,
    pub(crate) head: HeadRead,
}

#[derive(Clone, Copy, Debug)]
struct Point {
    at: Instant,
    committed: Option<i64>,
    log_start: i64,
    end: i64,
    time_lag: Option<Duration>,
}

#[derive(Debug)]
struct History {
    first_seen: Instant,
    committed: Option<i64>,
    last_change: Option<Instant>,
    /// Since when the committed offset has stayed unchanged while records
    /// wait (the later of its last change and the first cycle that saw the
    /// offset lag above zero), and the end the lag counted to then.
    waiting: Option<(Instant, i64)>,
    last_head: Option<i64>,
    points: VecDeque<Point>,
}

/// One group's samples over the window, and its timestamp counts.
#[derive(Debug, Default)]
pub(crate) struct GroupTracker {
    partitions: HashMap<(String, i32), History>,
    missing: u64,
    future: u64,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

struct Judged {
    row: PartitionLag,
    /// Records per second the committed offset and the log end advanced.
    commit_rate: f64,
    produce_rate: f64,
    /// The time lag fell over the window.
    falling: bool,
}

impl GroupTracker {
    /// Evaluates one cycle of a group's reads at `now` (`now_ms`: the same
    /// instant on the wall clock, milliseconds since the Unix epoch);
    /// `members`: the group's member count as the brokers describe it, if
    /// they do.
    pub(crate) fn evaluate(
        &mut self,
        group: &str,
        observations: &[Observation],
        members: Option<u32>,
        rules: &Rules,
        now: Instant,
        now_ms: i64,
    ) -> GroupReport {
        let mut judged = Vec::with_capacity(observations.len());
        let mut seen = HashSet::with_capacity(observations.len());
        for o in observations {
            let key = (o.topic.clone(), o.partition);
            seen.insert(key.clone());
            let h = self.partitions.entry(key).or_insert_with(|| History {
                first_seen: now,
                committed: o.committed,
                last_change: None,
                waiting: None,
                last_head: None,
                points: VecDeque::new(),
            });
            if h.committed != o.committed {
                h.committed = o.committed;
                h.last_change = Some(now);
                h.waiting = None;
            }
            let unchanged_for =
                now.saturating_duration_since(h.last_change.unwrap_or(h.first_seen));
            // Offsets a consumer can never receive (transaction markers) are
            // not lag: the probe read past them to the end.
            let lag = match o.head {
                HeadRead::NothingReadable => o.committed.map(|_| 0),
                _ => o.committed.map(|c| (o.end - c).max(0) as u64),
            };
            // The stall clock runs while the committed offset stays put with
            // records waiting: a record arriving on a partition idle for an
            // hour starts it at zero.
            if lag.is_some_and(|l| l > 0) {
                h.waiting.get_or_insert((now, o.end));
            } else {
                h.waiting = None;
            }
            let waiting_for = h
                .waiting
                .map(|(since, _)| now.saturating_duration_since(since));
            let end_moved = h.waiting.is_some_and(|(_, end)| o.end > end);

            let (timestamp, time_lag) = match o.head {
                HeadRead::NotNeeded => (
                    HeadTimestamp::CaughtUp,
                    (lag == Some(0)).then_some(Duration::ZERO),
                ),
                HeadRead::Unread => (HeadTimestamp::Unread, None),
                HeadRead::NothingReadable => (HeadTimestamp::CaughtUp, Some(Duration::ZERO)),
                HeadRead::Read { offset, timestamp } => {
                    let new_record = h.last_head != Some(offset);
                    h.last_head = Some(offset);
                    match timestamp.millis() {
                        None => {
                            self.missing += u64::from(new_record);
                            (HeadTimestamp::Missing, None)
                        }
                        Some(ms) if ms > now_ms => {
                            self.future += u64::from(new_record);
                            (HeadTimestamp::Future(ms), Some(Duration::ZERO))
                        }
                        Some(ms) => {
                            let kind = match timestamp {
                                RecordTimestamp::LogAppendTime(_) => {
                                    HeadTimestamp::LogAppendTime(ms)
                                }
                                _ => HeadTimestamp::CreateTime(ms),
                            };
                            (kind, Some(Duration::from_millis((now_ms - ms) as u64)))
                        }
                    }
                }
            };

            h.points.push_back(Point {
                at: now,
                committed: o.committed,
                log_start: o.log_start,
                end: o.end,
                time_lag,
            });
            // Keep one point at or before the window's start.
            while h.points.len() >= 2
                && now.saturating_duration_since(h.points[1].at) >= rules.window
            {
                h.points.pop_front();
            }
            let oldest = h.points[0];
            let dt = now.saturating_duration_since(oldest.at);
            let commit_rate = match (oldest.committed, o.committed) {
                (Some(a), Some(b)) => rate(a, b, dt).max(0.0),
                _ => 0.0,
            };
            let produce_rate = rate(oldest.end, o.end, dt).max(0.0);
            let falling = matches!(
                (oldest.time_lag, time_lag),
                (Some(a), Some(b)) if b < a && dt >= rules.window / 2
            );

            // The estimator the in-process gauges use too; a window start
            // without a committed offset counts as no commit movement.
            let retention = o.committed.map(|c| {
                estimate(
                    RetentionSample {
                        at: oldest.at,
                        log_start: oldest.log_start,
                        committed: oldest.committed,
                    },
                    RetentionSample {
                        at: now,
                        log_start: o.log_start,
                        committed: o.committed,
                    },
                    c,
                )
            });
            let status = match (o.committed, lag) {
                (None, _) | (_, None) => LagStatus::NoCommittedOffset,
                (Some(c), _) if c < o.log_start => LagStatus::OutOfRange {
                    deleted: (o.log_start - c) as u64,
                },
                _ if end_moved && waiting_for.is_some_and(|d| d >= rules.stall_after) => {
                    LagStatus::Stalled
                }
                _ if time_lag.is_some_and(|t| t >= rules.lag_threshold) => LagStatus::Lagging,
                _ => LagStatus::Ok,
            };
            judged.push(Judged {
                row: PartitionLag {
                    topic: o.topic.clone(),
                    partition: o.partition,
                    committed: o.committed,
                    log_start: o.log_start,
                    high_watermark: o.high_watermark,
                    last_stable: o.last_stable,
                    offset_lag: lag,
                    time_lag,
                    timestamp,
                    commit_unchanged_for: o.committed.map(|_| unchanged_for),
                    waiting_for,
                    log_end_moved: end_moved,
                    retention_margin: retention.map(|r| r.records),
                    retention_eta: retention.and_then(|r| r.eta),
                    status,
                },
                commit_rate,
                produce_rate,
                falling,
            });
        }
        self.partitions.retain(|k, _| seen.contains(k));
        let span = self
            .partitions
            .values()
            .map(|h| now.saturating_duration_since(h.first_seen))
            .min()
            .unwrap_or_default();
        self.diagnose(group, judged, members, rules, span)
    }

    fn diagnose(
        &self,
        group: &str,
        judged: Vec<Judged>,
        members: Option<u32>,
        rules: &Rules,
        span: Duration,
    ) -> GroupReport {
        let commit_rate: f64 = judged.iter().map(|j| j.commit_rate).sum();
        let produce_rate: f64 = judged.iter().map(|j| j.produce_rate).sum();
        let total_lag: u64 = judged.iter().filter_map(|j| j.row.offset_lag).sum();
        let max_time_lag = judged.iter().filter_map(|j| j.row.time_lag).max();
        let name = |j: &Judged| TopicPartition {
            topic: j.row.topic.clone(),
            partition: j.row.partition,
        };
        let with_offsets: Vec<&Judged> = judged
            .iter()
            .filter(|j| j.row.committed.is_some())
            .collect();
        let lagging: Vec<&Judged> = with_offsets
            .iter()
            .copied()
            .filter(|j| j.row.offset_lag.unwrap_or(0) > 0)
            .collect();
        let partitions = judged.len() as u32;

        let mut named = Vec::new();
        let mut scaling = Scaling::NotNeeded;
        let diagnosis = if with_offsets.is_empty() {
            Diagnosis::NoOffsets
        } else if total_lag == 0 {
            Diagnosis::Idle
        } else if span >= rules.window
            && with_offsets.iter().all(|j| {
                j.row
                    .commit_unchanged_for
                    .is_some_and(|d| d >= rules.window)
            })
            && lagging
                .iter()
                .all(|j| j.row.waiting_for.is_some_and(|d| d >= rules.window))
        {
            named = lagging.iter().map(|j| name(j)).collect();
            scaling = Scaling::Withheld {
                reason: format!(
                    "no partition's committed offset moved for {:.0?} while records wait: the consumers are down or hung; more replicas of them do not help",
                    rules.window
                ),
            };
            Diagnosis::Dead
        } else if lagging.iter().any(|j| j.row.status == LagStatus::Stalled) {
            named = lagging
                .iter()
                .filter(|j| j.row.status == LagStatus::Stalled)
                .map(|j| name(j))
                .collect();
            scaling = Scaling::Withheld {
                reason: format!(
                    "{} partition(s) frozen while records wait (a failing record, a hung worker): more replicas do not move them",
                    named.len()
                ),
            };
            Diagnosis::Stuck
        } else if max_time_lag.is_none_or(|t| t < rules.lag_threshold) {
            Diagnosis::KeepingUp
        } else if let Some(hot) = concentrated(&with_offsets, rules.skew_share) {
            named = hot.iter().map(|j| name(j)).collect();
            // A hot partition whose commit is frozen over a static backlog
            // (not `stalled`: its log end does not move) is more likely
            // blocked than busy: say so.
            let frozen = hot
                .iter()
                .filter(|j| j.row.waiting_for.is_some_and(|d| d >= rules.stall_after))
                .count();
            let frozen = if frozen > 0 {
                format!(
                    "; {frozen} of them committed nothing for {:.0?} or more while records wait (look for a blocked record or a hung worker)",
                    rules.stall_after
                )
            } else {
                String::new()
            };
            scaling = Scaling::Withheld {
                reason: format!(
                    "{} of {} partitions carry most of the time lag; a partition is read by one consumer, so more replicas do not help (spread the hot keys, or process keys concurrently){frozen}",
                    hot.len(),
                    with_offsets.len()
                ),
            };
            Diagnosis::Skewed
        } else if lagging.iter().filter(|j| j.falling).count() * 2 > lagging.len() {
            Diagnosis::KeepingUp
        } else {
            scaling = suggest(
                rules,
                members,
                commit_rate,
                produce_rate,
                total_lag,
                partitions,
            );
            Diagnosis::ConsumerBound
        };
        let drain_time = if total_lag == 0 {
            Some(Duration::ZERO)
        } else if commit_rate > produce_rate {
            Some(Duration::from_secs_f64(
                total_lag as f64 / (commit_rate - produce_rate),
            ))
        } else {
            None
        };
        GroupReport {
            group: group.to_owned(),
            partitions: judged.into_iter().map(|j| j.row).collect(),
            members,
            diagnosis,
            named,
            total_lag,
            max_time_lag,
            commit_rate,
            produce_rate,
            drain_time,
            scaling,
            timestamps_missing: self.missing,
            timestamps_future: self.future,
        }
    }
}

/// The few partitions (at most a quarter, at least one) that carry at least
/// `share` of the summed time lag, when there are two or more partitions.
fn concentrated<'a>(partitions: &[&'a Judged], share: f64) -> Option<Vec<&'a Judged>> {
    if partitions.len() < 2 {
        return None;
    }
    let mut by_lag: Vec<&Judged> = partitions
        .iter()
        .copied()
        .filter(|j| j.row.time_lag.is_some())
        .collect();
    by_lag.sort_by_key(|j| std::cmp::Reverse(j.row.time_lag));
    let total: f64 = by_lag.iter().filter_map(|j| j.row.time_lag).map(secs).sum();
    if total <= 0.0 {
        return None;
    }
    let k = (partitions.len() / 4).max(1);
    let mut top = 0.0;
    for (i, j) in by_lag.iter().enumerate().take(k) {
        top += j.row.time_lag.map(secs).unwrap_or(0.0);
        if top / total >= share {
            return Some(by_lag[..=i].to_vec());
        }
    }
    None
}

/// The replica suggestion of a consumer-bound group: the throughput factor
/// it needs, and with the current consumer count (the members the brokers
/// describe, else [`Rules::current_replicas`]) the replicas for it, never
/// above the partition count; withheld when there is no commit rate yet,
/// or when the group already has a consumer per partition.
fn suggest(
    rules: &Rules,
    members: Option<u32>,
    commit_rate: f64,
    produce_rate: f64,
    total_lag: u64,
    partitions: u32,
) -> Scaling {
    if commit_rate <= 0.0 {
        return Scaling::Withheld {
            reason: "no commit rate measured yet (needs two samples)".into(),
        };
    }
    let needed = produce_rate + total_lag as f64 / rules.drain_target.as_secs_f64().max(1e-3);
    let factor = needed / commit_rate;
    let current = members.filter(|&m| m > 0).or(rules.current_replicas);
    if let Some(current) = current
        && current >= partitions
    {
        return Scaling::Withheld {
            reason: format!(
                "the group has {current} consumers for {partitions} partitions: a partition is read by one consumer, so more replicas sit idle; it needs x{factor:.2} throughput per consumer (cheaper records, batching, ProcessingOrder::Key within a partition) or more partitions"
            ),
        };
    }
    let (replicas, capped) = match current {
        Some(current) => {
            let want = (f64::from(current) * factor).ceil().max(f64::from(current));
            let capped = want > f64::from(partitions);
            (
                Some((want.min(f64::from(partitions)) as u32).max(1)),
                capped,
            )
        }
        None => (None, false),
    };
    Scaling::Suggest {
        throughput_factor: factor,
        current,
        replicas,
        capped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(10);

    fn rules() -> Rules {
        Rules {
            window: WINDOW,
            stall_after: Duration::from_secs(5),
            lag_threshold: Duration::from_secs(30),
            skew_share: 0.75,
            drain_target: Duration::from_secs(60),
            current_replicas: Some(2),
        }
    }

    fn obs(p: i32, committed: Option<i64>, start: i64, end: i64, head: HeadRead) -> Observation {
        Observation {
            topic: "t".into(),
            partition: p,
            committed,
            log_start: start,
            high_watermark: end,
            last_stable: end,
            end,
            head,
        }
    }

    fn at(offset: i64, ms: i64) -> HeadRead {
        HeadRead::Read {
            offset,
            timestamp: RecordTimestamp::CreateTime(ms),
        }
    }

    const NOW_MS: i64 = 1_700_000_000_000;

    #[test]
    fn time_lag_is_now_minus_the_timestamp_and_zero_without_lag() {
        let mut g = GroupTracker::default();
        let now = Instant::now();
        let r = g.evaluate(
            "g",
            &[
                obs(0, Some(10), 0, 20, at(10, NOW_MS - 42_000)),
                obs(1, Some(5), 0, 5, HeadRead::NotNeeded),
                obs(2, None, 0, 5, HeadRead::NotNeeded),
            ],
            None,
            &rules(),
            now,
            NOW_MS,
        );
        let p = &r.partitions;
        assert_eq!(p[0].time_lag, Some(Duration::from_secs(42)));
        assert_eq!(p[0].timestamp, HeadTimestamp::CreateTime(NOW_MS - 42_000));
        assert_eq!(p[0].status, LagStatus::Lagging);
        assert_eq!(p[0].offset_lag, Some(10));
        assert_eq!(p[1].time_lag, Some(Duration::ZERO));
        assert_eq!(p[1].status, LagStatus::Ok);
        assert_eq!(p[2].time_lag, None);
        assert_eq!(p[2].status, LagStatus::NoCommittedOffset);
        assert_eq!(r.total_lag, 10);
    }

    #[test]
    fn missing_and_future_timestamps_count_once_per_record() {
        let mut g = GroupTracker::default();
        let t0 = Instant::now();
        let missing = HeadRead::Read {
            offset: 3,
            timestamp: RecordTimestamp::CreateTime(-1),
        };
        for i in 0..3 {
            let r = g.evaluate(
                "g",
                &[
                    obs(0, Some(3), 0, 9, missing),
                    obs(1, Some(7), 0, 9, at(7, NOW_MS + 60_000)),
                ],
                None,
                &rules(),
                t0 + Duration::from_secs(i),
                NOW_MS,
            );
            assert_eq!(r.partitions[0].time_lag, None);
            assert_eq!(r.partitions[0].timestamp, HeadTimestamp::Missing);
            assert_eq!(r.partitions[1].time_lag, Some(Duration::ZERO));
            assert_eq!((r.timestamps_missing, r.timestamps_future), (1, 1));
        }
        let r = g.evaluate(
            "g",
            &[
                obs(
                    0,
                    Some(4),
                    0,
                    9,
                    HeadRead::Read {
                        offset: 4,
                        timestamp: RecordTimestamp::NotAvailable,
                    },
                ),
                obs(1, Some(7), 0, 9, at(7, NOW_MS + 60_000)),
            ],
            None,
            &rules(),
            t0 + Duration::from_secs(4),
            NOW_MS,
        );
        assert_eq!((r.timestamps_missing, r.timestamps_future), (2, 1));
    }

    #[test]
    fn out_of_range_counts_deleted_records_and_the_margin_shrinks_before() {
        let mut g = GroupTracker::default();
        let t0 = Instant::now();
        // The log start moves 100 records/s toward a frozen committed offset at 1000.
        let mut etas = Vec::new();
        for s in 0..5i64 {
            let r = g.evaluate(
                "g",
                &[obs(0, Some(1000), s * 100, 5000, at(1000, NOW_MS - 1000))],
                None,
                &rules(),
                t0 + Duration::from_secs(s as u64),
                NOW_MS,
            );
            let p = &r.partitions[0];
            assert_eq!(p.retention_margin, Some(1000 - s * 100));
            if s > 0 {
                etas.push(p.retention_eta.expect("an eta once the log start moved"));
            }
        }
        assert!((etas[0].as_secs_f64() - 9.0).abs() < 0.01, "{etas:?}");
        assert!(etas.windows(2).all(|w| w[1] < w[0]), "{etas:?}");
        let r = g.evaluate(
            "g",
            &[obs(0, Some(1000), 1300, 5000, at(1300, NOW_MS - 1000))],
            None,
            &rules(),
            t0 + Duration::from_secs(6),
            NOW_MS,
        );
        let p = &r.partitions[0];
        assert_eq!(p.status, LagStatus::OutOfRange { deleted: 300 });
        assert_eq!(p.retention_margin, Some(-300));
        assert_eq!(p.retention_eta, None);
    }

    /// Runs `cycles` one second apart; `f(cycle)` gives the observations.
    fn run(
        g: &mut GroupTracker,
        rules: &Rules,
        cycles: u64,
        f: impl Fn(i64) -> Vec<Observation>,
    ) -> GroupReport {
        let t0 = Instant::now();
        let mut last = None;
        for c in 0..cycles {
            last = Some(g.evaluate(
                "g",
                &f(c as i64),
                None,
                rules,
                t0 + Duration::from_secs(c),
                NOW_MS + c as i64 * 1000,
            ));
        }
        last.unwrap()
    }

    #[test]
    fn idle_and_no_offsets() {
        let r = run(&mut GroupTracker::default(), &rules(), 2, |_| {
            vec![obs(0, Some(5), 0, 5, HeadRead::NotNeeded)]
        });
        assert_eq!(r.diagnosis, Diagnosis::Idle);
        let r = run(&mut GroupTracker::default(), &rules(), 2, |_| {
            vec![obs(0, None, 0, 5, HeadRead::NotNeeded)]
        });
        assert_eq!(r.diagnosis, Diagnosis::NoOffsets);
    }

    #[test]
    fn frozen_while_the_log_end_moves_is_stalled_then_dead() {
        // Commits frozen at 100, 10 records a second arriving, time lag
        // growing with the clock.
        let f = |c: i64| {
            (0..4)
                .map(|p| obs(p, Some(100), 0, 200 + 10 * c, at(100, NOW_MS - 5_000)))
                .collect::<Vec<_>>()
        };
        let mut g = GroupTracker::default();
        let r = run(&mut g, &rules(), 7, f);
        assert_eq!(
            r.diagnosis,
            Diagnosis::Stuck,
            "frozen past stall_after, not yet the window"
        );
        assert!(r.partitions.iter().all(|p| p.status == LagStatus::Stalled
            && p.log_end_moved
            && p.waiting_for == Some(Duration::from_secs(6))));
        let r = run(&mut g, &rules(), 12, f);
        assert_eq!(r.diagnosis, Diagnosis::Dead);
        assert_eq!(r.named.len(), 4);
        assert!(matches!(r.scaling, Scaling::Withheld { .. }));
        assert!(r.partitions.iter().all(|p| p.status == LagStatus::Stalled));
    }

    #[test]
    fn frozen_over_a_static_backlog_is_lagging_not_stalled_and_the_group_dead() {
        // Commits frozen at 100 over a backlog that does not grow (a killed
        // consumer after the producers stopped): the record at the committed
        // offset was stamped 25 s before the first cycle, so its time lag
        // crosses the 30 s threshold at cycle 5.
        let f = |_c: i64| {
            (0..4)
                .map(|p| obs(p, Some(100), 0, 200, at(100, NOW_MS - 25_000)))
                .collect::<Vec<_>>()
        };
        let mut g = GroupTracker::default();
        let r = run(&mut g, &rules(), 7, f);
        for p in &r.partitions {
            assert_eq!(p.status, LagStatus::Lagging, "{p:?}");
            assert!(!p.log_end_moved);
            assert_eq!(p.waiting_for, Some(Duration::from_secs(6)));
        }
        assert_ne!(r.diagnosis, Diagnosis::Stuck, "no log end moved");
        let r = run(&mut g, &rules(), 12, f);
        assert_eq!(r.diagnosis, Diagnosis::Dead, "dead covers a static backlog");
        assert!(r.partitions.iter().all(|p| p.status == LagStatus::Lagging));

        // Only transaction markers past the committed offset: nothing to
        // read, time lag unknown, offset lag 1: `ok`, however long.
        let r = run(&mut GroupTracker::default(), &rules(), 20, |_| {
            vec![obs(0, Some(100), 0, 101, HeadRead::Unread)]
        });
        assert_eq!(r.partitions[0].status, LagStatus::Ok);
        assert_eq!(r.partitions[0].offset_lag, Some(1));
    }

    #[test]
    fn transaction_markers_the_probe_read_past_are_not_lag() {
        // The committed offset sits before the last commit marker of an idle
        // transactional partition; the probe reached the end without a
        // record: caught up and idle, however long (it read `dead` before).
        let r = run(&mut GroupTracker::default(), &rules(), 30, |_| {
            vec![obs(0, Some(100), 0, 101, HeadRead::NothingReadable)]
        });
        let p = &r.partitions[0];
        assert_eq!(
            (p.status, p.offset_lag, p.time_lag),
            (LagStatus::Ok, Some(0), Some(Duration::ZERO))
        );
        assert_eq!(p.timestamp, HeadTimestamp::CaughtUp);
        assert_eq!(r.diagnosis, Diagnosis::Idle);
    }

    #[test]
    fn records_after_a_long_idle_spell_are_neither_stalled_nor_dead() {
        // Idle (lag 0, commits unchanged) for 30 s, then records arrive and
        // keep arriving: the stall clock starts when they do.
        let mut g = GroupTracker::default();
        let r = run(&mut g, &rules(), 31, |_| {
            vec![obs(0, Some(100), 0, 100, HeadRead::NotNeeded)]
        });
        assert_eq!(r.diagnosis, Diagnosis::Idle);
        let t0 = Instant::now() + Duration::from_secs(31);
        for c in 0..3u64 {
            let r = g.evaluate(
                "g",
                &[obs(0, Some(100), 0, 101 + c as i64, at(100, NOW_MS))],
                None,
                &rules(),
                t0 + Duration::from_secs(c),
                NOW_MS,
            );
            let p = &r.partitions[0];
            assert!(
                p.commit_unchanged_for.unwrap() >= Duration::from_secs(30),
                "{p:?}"
            );
            assert_eq!(p.waiting_for, Some(Duration::from_secs(c)));
            assert_eq!(p.status, LagStatus::Ok, "cycle {c}");
            assert_ne!(r.diagnosis, Diagnosis::Dead, "cycle {c}");
            assert_ne!(r.diagnosis, Diagnosis::Stuck, "cycle {c}");
        }
    }

    #[test]
    fn lag_counts_to_the_last_stable_offset_under_read_committed() {
        use crate::monitor::reader::observation;
        // 10 committed records, 5 of an open transaction above them; the
        // group committed 10.
        let marks = (0, 15, 10);
        let o = observation("t", 0, marks, Some(10), true);
        assert_eq!((o.end, o.high_watermark, o.last_stable), (10, 15, 10));
        let r = GroupTracker::default().evaluate("g", &[o], None, &rules(), Instant::now(), NOW_MS);
        let p = &r.partitions[0];
        assert_eq!(p.offset_lag, Some(0), "nothing readable waits");
        assert_eq!(p.time_lag, Some(Duration::ZERO));
        assert_eq!(p.timestamp, HeadTimestamp::CaughtUp);
        assert_eq!((p.high_watermark, p.last_stable), (15, 10));
        assert_eq!(r.diagnosis, Diagnosis::Idle);

        // read_uncommitted: the open transaction's records wait.
        let o = observation("t", 0, marks, Some(10), false);
        assert_eq!(o.end, 15);
        let o = Observation {
            head: at(10, NOW_MS - 2_000),
            ..o
        };
        let r = GroupTracker::default().evaluate("g", &[o], None, &rules(), Instant::now(), NOW_MS);
        let p = &r.partitions[0];
        assert_eq!(p.offset_lag, Some(5));
        assert_eq!(p.time_lag, Some(Duration::from_secs(2)));
        assert_eq!(r.total_lag, 5);

        // read_committed with 3 records committed above the group's offset
        // and the open transaction beyond: lag 3, to the LSO.
        let o = observation("t", 0, (0, 18, 13), Some(10), true);
        let r = GroupTracker::default().evaluate("g", &[o], None, &rules(), Instant::now(), NOW_MS);
        assert_eq!(r.partitions[0].offset_lag, Some(3));
    }

    #[test]
    fn stuck_names_the_frozen_partition() {
        let r = run(&mut GroupTracker::default(), &rules(), 8, |c| {
            vec![
                obs(
                    0,
                    Some(10 + 50 * c),
                    0,
                    12 + 50 * c,
                    at(10 + 50 * c, NOW_MS),
                ),
                obs(1, Some(7), 0, 9 + 50 * c, at(7, NOW_MS - 1000)),
                obs(2, Some(10 + 50 * c), 0, 10 + 50 * c, HeadRead::NotNeeded),
            ]
        });
        assert_eq!(r.diagnosis, Diagnosis::Stuck);
        assert_eq!(
            r.named,
            vec![TopicPartition {
                topic: "t".into(),
                partition: 1
            }]
        );
        assert!(matches!(r.scaling, Scaling::Withheld { .. }));
    }

    #[test]
    fn skewed_without_suggestion_consumer_bound_with_one() {
        // Partition 0 is 60 s behind and moving; the others keep up.
        let r = run(&mut GroupTracker::default(), &rules(), 4, |c| {
            let mut v = vec![obs(
                0,
                Some(100 * c),
                0,
                100 * c + 5000,
                at(100 * c, NOW_MS + c * 1000 - 60_000),
            )];
            for p in 1..4 {
                v.push(obs(
                    p,
                    Some(10 * c),
                    0,
                    10 * c + 1,
                    at(10 * c, NOW_MS + c * 1000 - 50),
                ));
            }
            v
        });
        assert_eq!(r.diagnosis, Diagnosis::Skewed);
        assert_eq!(r.named.len(), 1);
        assert!(matches!(r.scaling, Scaling::Withheld { .. }));

        // Every partition 60 s behind and rising, commits advancing.
        let rules = rules();
        let r = run(&mut GroupTracker::default(), &rules, 4, |c| {
            (0..4)
                .map(|p| {
                    obs(
                        p,
                        Some(100 * c),
                        0,
                        200 * c + 5000,
                        at(100 * c, NOW_MS - 60_000),
                    )
                })
                .collect()
        });
        assert_eq!(r.diagnosis, Diagnosis::ConsumerBound);
        let Scaling::Suggest {
            throughput_factor,
            current,
            replicas,
            capped,
        } = r.scaling
        else {
            panic!("{:?}", r.scaling)
        };
        assert_eq!(current, Some(2), "current_replicas, without members");
        // Produce 800/s + backlog (4 x 5300) / 60 s = 1153/s over a commit rate of 400/s.
        assert!((throughput_factor - (800.0 + 21_200.0 / 60.0) / 400.0).abs() < 1e-6);
        assert_eq!(
            replicas,
            Some(4),
            "ceil(2 x 2.88) = 6, capped at 4 partitions"
        );
        assert!(capped);
        assert_eq!(r.drain_time, None, "commits slower than produce");
    }

    /// Every partition 60 s behind and rising, commits advancing, over 8
    /// partitions, with `members` described by the brokers.
    fn consumer_bound(rules: &Rules, members: Option<u32>) -> GroupReport {
        let mut g = GroupTracker::default();
        let t0 = Instant::now();
        let mut last = None;
        for c in 0..4i64 {
            let obs: Vec<_> = (0..8)
                .map(|p| {
                    obs(
                        p,
                        Some(100 * c),
                        0,
                        120 * c + 1000,
                        at(100 * c, NOW_MS - 60_000),
                    )
                })
                .collect();
            last = Some(g.evaluate(
                "g",
                &obs,
                members,
                rules,
                t0 + Duration::from_secs(c as u64),
                NOW_MS + c * 1000,
            ));
        }
        let r = last.unwrap();
        assert_eq!(r.diagnosis, Diagnosis::ConsumerBound, "{r:?}");
        assert_eq!(r.members, members);
        r
    }

    #[test]
    fn the_suggestion_counts_from_the_members_never_above_the_partitions() {
        // Produce 960/s + backlog (8 x 1060) / 60 s = 1101/s over a commit
        // rate of 800/s: x1.38.
        let factor = (960.0 + 8.0 * 1060.0 / 60.0) / 800.0;
        let suggestion = |r: &GroupReport| match r.scaling {
            Scaling::Suggest {
                throughput_factor,
                current,
                replicas,
                capped,
            } => {
                assert!((throughput_factor - factor).abs() < 1e-6);
                (current, replicas, capped)
            }
            ref other => panic!("{other:?}"),
        };
        let rules = rules(); // current_replicas: Some(2)
        // Three members described: ceil(3 x 1.38) = 5, the members win over
        // current_replicas.
        let r = consumer_bound(&rules, Some(3));
        assert_eq!(suggestion(&r), (Some(3), Some(5), false));
        // Six members: ceil(6 x 1.38) = 9, capped at the 8 partitions.
        let r = consumer_bound(&rules, Some(6));
        assert_eq!(suggestion(&r), (Some(6), Some(8), true));
        // Members unknown (KIP-848, the mock broker) or none: the
        // configured count, ceil(2 x 1.38) = 3.
        for members in [None, Some(0)] {
            let r = consumer_bound(&rules, members);
            assert_eq!(suggestion(&r), (Some(2), Some(3), false));
        }
        // Nothing known: a throughput factor only.
        let unknown = Rules {
            current_replicas: None,
            ..rules.clone()
        };
        let r = consumer_bound(&unknown, None);
        assert_eq!(suggestion(&r), (None, None, false));
        // Already a consumer per partition: withheld, with the reason.
        for members in [8, 11] {
            let r = consumer_bound(&rules, Some(members));
            let Scaling::Withheld { reason } = &r.scaling else {
                panic!("{:?}", r.scaling)
            };
            assert!(
                reason.contains(&format!("{members} consumers for 8 partitions")),
                "{reason}"
            );
        }
    }

    #[test]
    fn keeping_up_below_the_threshold_or_falling() {
        let r = run(&mut GroupTracker::default(), &rules(), 4, |c| {
            (0..2)
                .map(|p| {
                    obs(
                        p,
                        Some(100 * c),
                        0,
                        100 * c + 10,
                        at(100 * c, NOW_MS + c * 1000 - 2000),
                    )
                })
                .collect()
        });
        assert_eq!(r.diagnosis, Diagnosis::KeepingUp);
        assert!(r.drain_time.is_none(), "commit rate equals produce rate");
        // 90 s behind and falling by 5 s a second (55 s at the end).
        let r = run(&mut GroupTracker::default(), &rules(), 8, |c| {
            (0..2)
                .map(|p| {
                    obs(
                        p,
                        Some(600 * c),
                        0,
                        5000 + 100 * c,
                        at(600 * c, NOW_MS + c * 1000 - 90_000 + c * 5000),
                    )
                })
                .collect()
        });
        assert_eq!(r.diagnosis, Diagnosis::KeepingUp);
        assert!(r.drain_time.is_some());
    }
}
