//! From one cycle's reads of a group (its [`Observation`]s) and the samples
//! kept over the window to the [`GroupReport`]: statuses, retention margin,
//! diagnosis and the replica suggestion. No I/O: every rule is tested here
//! on synthetic samples.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::health::retention::{RetentionSample, estimate, rate};
use crate::monitor::report::{
    Diagnosis, GroupReport, HeadTimestamp, LagStatus, PartitionLag, Scaling, replica_cap,
};
use crate::record::RecordTimestamp;
use crate::summary::TopicPartition;

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
    /// The last few gaps between two moves of the committed offset, as the
    /// cycles bound them from below (from the cycle that saw a move to the
    /// last one that saw none before the next): the group's own commit
    /// rhythm. The first one counts from the monitor's first sample.
    gaps: VecDeque<Duration>,
    /// Since when the last stable offset has stayed at its value with the
    /// high watermark above it (records of an open transaction), and that
    /// value; `None` while the two are equal or the group reads
    /// uncommitted.
    open_transaction: Option<(Instant, i64)>,
}

/// How many commit gaps a partition remembers for its rhythm.
const RHYTHM_GAPS: usize = 5;

impl History {
    /// The group's commit rhythm on this partition: the longest of its
    /// last few gaps between commits; `None` before a move was seen.
    fn rhythm(&self) -> Option<Duration> {
        self.gaps.iter().copied().max()
    }
}

/// One group's samples over the window, and its timestamp counts.
#[derive(Debug, Default)]
pub(crate) struct GroupTracker {
    partitions: HashMap<(String, i32), History>,
    missing: u64,
    future: u64,
    /// The group's partition assignor as the brokers last named it (for
    /// the replica cap, [`replica_cap`]).
    pub(crate) assignor: Option<String>,
    /// Cycles whose described assignments could not be read
    /// ([`GroupReport::assignments_unreadable`]).
    pub(crate) assignments_unreadable: u64,
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
                gaps: VecDeque::new(),
                open_transaction: None,
            });
            if h.committed != o.committed {
                if h.committed.is_some() {
                    // The gap as the cycles bound it from below: from the
                    // cycle that saw the last move to the last cycle that
                    // saw none (a slow cycle does not stretch it).
                    let since = h.last_change.unwrap_or(h.first_seen);
                    let unmoved_until = h.points.back().map_or(now, |p| p.at);
                    h.gaps
                        .push_back(unmoved_until.saturating_duration_since(since));
                    while h.gaps.len() > RHYTHM_GAPS {
                        h.gaps.pop_front();
                    }
                }
                h.committed = o.committed;
                h.last_change = Some(now);
                h.waiting = None;
            }
            // A freeze counts once it outlasts `stall_after` and twice the
            // group's own commit rhythm: a group that commits every 60 s
            // while keeping up is not stalled between its commits.
            let rhythm2 = h.rhythm().map(|r| r * 2);
            let stall_after = rules.stall_after.max(rhythm2.unwrap_or_default());
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
            // The log end moved within the last `stall_after` while records
            // waited: production goes on behind a frozen commit. Once the
            // producer stops, it no longer does.
            let end_moved = h.waiting.is_some_and(|(since, end)| {
                let horizon = now.checked_sub(stall_after).unwrap_or(since).max(since);
                let then = h
                    .points
                    .iter()
                    .rev()
                    .find(|pt| pt.at <= horizon)
                    .map_or(end, |pt| pt.end.max(end));
                o.end > then
            });

            // Records of an open transaction: the group reads to the last
            // stable offset (`read_committed`) and the high watermark is
            // above it. The clock runs while the last stable offset stays
            // put; when it moves after standing `stall_after`, a long-open
            // transaction ended and released its records at once.
            let behind_transaction = o.end == o.last_stable && o.high_watermark > o.last_stable;
            let released = h.open_transaction.is_some_and(|(since, lso)| {
                lso != o.last_stable && now.saturating_duration_since(since) >= rules.stall_after
            });
            h.open_transaction = match h.open_transaction {
                Some((since, lso)) if behind_transaction && lso == o.last_stable => {
                    Some((since, lso))
                }
                _ if behind_transaction => Some((now, o.last_stable)),
                _ => None,
            };
            let transaction_open_for = h
                .open_transaction
                .map(|(since, _)| now.saturating_duration_since(since));

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
                _ if end_moved && waiting_for.is_some_and(|d| d >= stall_after) => {
                    LagStatus::Stalled
                }
                _ if time_lag.is_some_and(|t| t >= rules.lag_threshold) => LagStatus::Lagging,
                // Records wait and their age is not known (no usable
                // timestamp, or not read in time): never `ok`.
                (_, Some(l)) if l > 0 && time_lag.is_none() => LagStatus::TimeLagUnknown,
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
                    transaction_open_for,
                    owner: o.owner.clone(),
                    replication: o.replication,
                    retention_margin: retention.map(|r| r.records),
                    retention_eta: retention.and_then(|r| r.eta),
                    status,
                },
                commit_rate,
                produce_rate,
                falling,
                rhythm2,
                released,
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
        let rows: Vec<&PartitionLag> = judged.iter().map(|j| &j.row).collect();
        let partitions = replica_cap(&rows, self.assignor.as_deref());

        let mut named = Vec::new();
        let mut scaling = Scaling::NotNeeded;
        // The group's freeze threshold: `stall_after`, or twice its slowest
        // commit rhythm on a partition when that is longer.
        let rhythm2 = judged
            .iter()
            .filter_map(|j| j.rhythm2)
            .max()
            .unwrap_or_default();
        let stall_after = rules.stall_after.max(rhythm2);
        // How long a freeze of the whole group must last to be `dead`:
        // `stall_after` (or the window, once the samples span it), both at
        // least twice the rhythm, once a commit of the group was seen to
        // move. Before that, a freeze is only known to have lasted since
        // the monitor's first sample, and a group that commits every
        // minute looks frozen for up to a minute after the monitor starts:
        // then `window + stall_after` (90 s at `fresh-monitor`'s defaults).
        // A group the brokers describe with no members is `dead` at once
        // (below); one whose consumers hang leaves the group at their
        // `max.poll.interval.ms` and is described so.
        let moved_seen = judged.iter().any(|j| j.rhythm2.is_some());
        let (dead_after, window_after) = if moved_seen {
            (stall_after, rules.window.max(rhythm2))
        } else {
            let unknown = rules.window + rules.stall_after;
            (unknown, unknown)
        };
        // Frozen for `after`: no committed offset of the group moved for
        // that long, and every partition with records waiting has had them
        // waiting that long.
        let frozen_for = |after: Duration| {
            with_offsets
                .iter()
                .all(|j| j.row.commit_unchanged_for.is_some_and(|d| d >= after))
                && lagging
                    .iter()
                    .all(|j| j.row.waiting_for.is_some_and(|d| d >= after))
        };
        // Partitions whose readable end has stood behind an open transaction
        // for `stall_after` or longer: the producer's problem.
        let open: Vec<&Judged> = with_offsets
            .iter()
            .copied()
            .filter(|j| {
                j.row
                    .transaction_open_for
                    .is_some_and(|d| d >= rules.stall_after)
            })
            .collect();
        let behind_open = |named: &mut Vec<TopicPartition>, scaling: &mut Scaling| {
            *named = open.iter().map(|j| name(j)).collect();
            let records: i64 = open
                .iter()
                .map(|j| j.row.high_watermark - j.row.last_stable)
                .sum();
            let longest = open
                .iter()
                .filter_map(|j| j.row.transaction_open_for)
                .max()
                .unwrap_or_default();
            *scaling = Scaling::Withheld {
                reason: format!(
                    "{records} records on {} partition(s) wait behind a transaction open for {:.0?} or more (the high watermark is above a last stable offset that has not moved): read_committed consumers cannot read past it until its producer commits or aborts (transaction.timeout.ms ends it); a producer's problem, more replicas do not help",
                    open.len(),
                    Duration::from_secs(longest.as_secs())
                ),
            };
            Diagnosis::OpenTransaction
        };
        // The stalled partitions that are not waiting their turn: when the
        // owners are known, a stalled partition whose consumer is draining
        // a larger backlog on another partition it owns (more records
        // waiting there, its commit moving) waits behind it (a plain
        // consumer handles a fetched batch of one partition before the
        // next); that is a busy consumer, judged below, not a blocked
        // partition. A blocked partition beside neighbours that keep up
        // (a few records in flight) is still `stuck`.
        let frozen_alone: Vec<&Judged> = lagging
            .iter()
            .copied()
            .filter(|j| j.row.status == LagStatus::Stalled)
            .filter(|j| {
                let Some(owner) = &j.row.owner else {
                    return true;
                };
                let waiting = j.row.offset_lag.unwrap_or(0);
                !with_offsets.iter().any(|o| {
                    o.row.owner.as_ref() == Some(owner)
                        && o.row.status != LagStatus::Stalled
                        && o.row.offset_lag.is_some_and(|l| l > waiting)
                        && o.row.commit_unchanged_for.is_some_and(|u| u < stall_after)
                })
            })
            .collect();
        let diagnosis = if with_offsets.is_empty() {
            Diagnosis::NoOffsets
        } else if total_lag == 0 {
            if open.is_empty() {
                Diagnosis::Idle
            } else {
                behind_open(&mut named, &mut scaling)
            }
        } else if members == Some(0) && commit_rate <= 0.0 {
            // The brokers say nobody reads (state `Empty`) and no commit
            // was seen moving: no history is needed to call it. Stopped
            // consumers, or a group scaled to zero: starting consumers is
            // the fix, so the KEDA scaler activates it (see `scale.rs`).
            // (Commits that advance with no members come from consumers
            // that assign partitions without joining the group: judged as
            // usual, their count unknown.)
            named = lagging.iter().map(|j| name(j)).collect();
            scaling = Scaling::Withheld {
                reason: "the group has no members while records wait: its consumers are stopped (or scaled to zero); start them (KEDA activates the group from IsActive)".into(),
            };
            Diagnosis::Dead
        } else if (span >= rules.window && frozen_for(window_after)) || frozen_for(dead_after) {
            // Every partition with records waiting is frozen and none of
            // the others advances: nothing of the group works, which is a
            // dead (or hung) group, not a poison record (`stuck` needs
            // partitions that advance beside the frozen ones).
            named = lagging.iter().map(|j| name(j)).collect();
            scaling = Scaling::Withheld {
                reason: format!(
                    "no partition's committed offset moved for {:.0?} while records wait: the consumers are down or hung; more replicas of them do not help",
                    dead_after.min(window_after)
                ),
            };
            Diagnosis::Dead
        } else if let Some(longest) = frozen_alone.iter().filter_map(|j| j.row.waiting_for).max()
            && with_offsets.iter().any(|j| {
                j.row.status != LagStatus::Stalled
                    && j.row
                        .commit_unchanged_for
                        .is_some_and(|u| u + stall_after < longest)
            })
        {
            // Some partitions frozen while another's commit moved after the
            // longest-frozen one had been frozen for `stall_after`: the
            // group works, those partitions do not. (A killed consumer's
            // partitions stop within a commit interval of each other: none
            // moves that long after another froze, so the group reads
            // `dead` once all are frozen, never `stuck` on the way.)
            named = frozen_alone.iter().map(|j| name(j)).collect();
            scaling = Scaling::Withheld {
                reason: format!(
                    "{} partition(s) frozen while records wait (a failing record, a hung worker): more replicas do not move them",
                    named.len()
                ),
            };
            Diagnosis::Stuck
        } else if max_time_lag.is_none_or(|t| t < rules.lag_threshold) {
            if open.is_empty() {
                Diagnosis::KeepingUp
            } else {
                behind_open(&mut named, &mut scaling)
            }
        } else if let Some((hot, carries)) = concentrated(&with_offsets, rules.skew_share)
            .map(|hot| (hot, "most of the time lag".to_owned()))
            .or_else(|| concentrated_load(&with_offsets, rules.skew_share))
            .or_else(|| owner_concentrated(&with_offsets, rules))
        {
            named = hot.iter().map(|j| name(j)).collect();
            // A hot partition whose commit is frozen over a static backlog
            // (not `stalled`: its log end does not move) is more likely
            // blocked than busy: say so.
            let frozen = hot
                .iter()
                .filter(|j| j.row.waiting_for.is_some_and(|d| d >= stall_after))
                .count();
            let frozen = if frozen > 0 {
                format!(
                    "; {frozen} of them committed nothing for {:.0?} or more while records wait (look for a blocked record or a hung worker)",
                    stall_after
                )
            } else {
                String::new()
            };
            scaling = Scaling::Withheld {
                reason: format!(
                    "{} of {} partitions carry {carries}; a partition is read by one consumer, so more replicas do not help (spread the hot keys, or process keys concurrently){frozen}",
                    hot.len(),
                    with_offsets.len()
                ),
            };
            Diagnosis::Skewed
        } else if lagging.iter().filter(|j| j.falling).count() * 2 > lagging.len() {
            Diagnosis::KeepingUp
        } else if lagging.iter().any(|j| j.released) {
            // A long-open transaction ended in this cycle: its records
            // became readable at once, old (the last stable offset jumped).
            // That backlog says nothing of the consumers' throughput yet;
            // the next cycle does.
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
        // A drain time only while the group clearly gains on the log end:
        // the commit rate at least `DRAIN_MARGIN` above the produce rate. A
        // group keeping pace has commit and produce rates that differ by
        // noise, and dividing its backlog by that noise gave hours.
        let drain_time = if total_lag == 0 {
            Some(Duration::ZERO)
        } else if commit_rate - produce_rate >= DRAIN_MARGIN * produce_rate.max(1.0) {
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
            state: None,
            assignor: self.assignor.clone(),
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
            assignments_unreadable: self.assignments_unreadable,
        }
    }
}

/// How much faster than records arrive a group must commit for a drain
/// time: 10 % of the produce rate (and at least 0.1 record per second).
const DRAIN_MARGIN: f64 = 0.1;

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
            reason: "no committed offset of the group moved within the samples so far: there is no commit rate to scale from (a first sample, a group that commits less often than the samples span, or one that stopped: dead once frozen long enough)".into(),
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

mod model;
mod skew;
use model::Judged;
pub(crate) use model::{HeadRead, Observation, Rules};
use skew::{concentrated, concentrated_load, owner_concentrated};

#[cfg(test)]
mod tests;
