//! The seeds' five scenarios as the monitor judges them: 13 cycles a second
//! apart of synthetic reads (8 partitions, 2 replicas, window 10 s,
//! stall_after 5 s, time-lag threshold 30 s), the last report of each. The
//! comparison with KEDA's rule (`comparison.rs`), the autoscaler's tests
//! and the test kit ([`crate::testing::monitor_scenarios`]) read them.

use std::time::{Duration, Instant};

use crate::monitor::judge::{GroupTracker, HeadRead, Observation, Rules};
use crate::monitor::report::{GroupReport, MonitorReport};
use crate::record::RecordTimestamp;

/// Partitions of the scenarios' topic.
pub(crate) const PARTITIONS: i32 = 8;
/// The replicas the scenarios' groups run now.
pub(crate) const CURRENT: u32 = 2;
const NOW_MS: i64 = 1_700_000_000_000;
/// Records per second produced to each partition.
const PRODUCE: i64 = 20;

pub(crate) fn rules() -> Rules {
    Rules {
        window: Duration::from_secs(10),
        stall_after: Duration::from_secs(5),
        lag_threshold: Duration::from_secs(30),
        skew_share: 0.75,
        drain_target: Duration::from_secs(600),
        current_replicas: Some(CURRENT),
    }
}

/// A partition whose records are produced `PRODUCE` a second, the one at
/// offset `o` stamped `o / PRODUCE` seconds after `t0_ms`; `end` and
/// `committed` at this cycle.
fn partition(p: i32, committed: i64, end: i64, t0_ms: i64) -> Observation {
    stamped(p, committed, end, t0_ms, PRODUCE)
}

/// [`partition`] with records stamped `per_second` a second.
fn stamped(p: i32, committed: i64, end: i64, t0_ms: i64, per_second: i64) -> Observation {
    let head = if end > committed {
        HeadRead::Read {
            offset: committed,
            timestamp: RecordTimestamp::CreateTime(t0_ms + committed * 1000 / per_second),
        }
    } else {
        HeadRead::NotNeeded
    };
    Observation {
        topic: "orders".into(),
        partition: p,
        committed: Some(committed),
        log_start: 0,
        high_watermark: end,
        last_stable: end,
        end,
        head,
        owner: None,
        replication: None,
    }
}

/// Runs `f(second)` for 13 cycles a second apart; the last report.
fn run(group: &str, f: impl Fn(i64, i64) -> Vec<Observation>) -> GroupReport {
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut last = None;
    for c in 0..13i64 {
        let now_ms = NOW_MS + c * 1000;
        last = Some(g.evaluate(
            group,
            &f(c, now_ms),
            None,
            &rules(),
            t0 + Duration::from_secs(c as u64),
            now_ms,
        ));
    }
    last.unwrap()
}

/// The five scenarios at 12 s (window 10 s, stall_after 5 s, time lag
/// threshold 30 s, 8 partitions, 2 replicas now): the scenario's name and
/// its group's report (group names `evenly-loaded`, `hot-partition`,
/// `poison-record`, `dead-group`, `bursty-producer`).
pub(crate) fn scenarios() -> Vec<(&'static str, GroupReport)> {
    // Every partition's log ends at `PRODUCE * (100 + c)` records at cycle
    // c: production started 100 s before the first cycle.
    let t0 = NOW_MS - 100_000;
    let end = |c: i64| PRODUCE * (100 + c);
    vec![
        (
            "evenly loaded slow group",
            // Every partition committed 1,000 and gains 15 records a second
            // on 20 produced: 50 s behind and rising everywhere.
            run("evenly-loaded", |c, _| {
                (0..PARTITIONS)
                    .map(|p| partition(p, 1000 + 15 * c, end(c), t0))
                    .collect()
            }),
        ),
        (
            "hot partition",
            // Partition 0 as above; the others keep up (commit at the end).
            run("hot-partition", |c, _| {
                (0..PARTITIONS)
                    .map(|p| {
                        let committed = if p == 0 { 1000 + 15 * c } else { end(c) };
                        partition(p, committed, end(c), t0)
                    })
                    .collect()
            }),
        ),
        (
            "poison record",
            // Partition 0 frozen at 1,900 while records keep arriving; the
            // others keep up.
            run("poison-record", |c, _| {
                (0..PARTITIONS)
                    .map(|p| {
                        let committed = if p == 0 { 1900 } else { end(c) - 5 };
                        partition(p, committed, end(c), t0)
                    })
                    .collect()
            }),
        ),
        (
            "dead group",
            // Committed 1,900 at the first cycle and 1,920 at the second
            // (the monitor saw it work), then killed: every commit frozen
            // at 1,920 while records keep arriving.
            run("dead-group", |c, _| {
                (0..PARTITIONS)
                    .map(|p| partition(p, if c == 0 { 1900 } else { 1920 }, end(c), t0))
                    .collect()
            }),
        ),
        (
            "bursty producer",
            // 2,000 records a partition produced within one second, 4 s
            // before the first cycle, and read 150 a second: a large offset
            // lag, seconds old.
            run("bursty-producer", |c, _| {
                (0..PARTITIONS)
                    .map(|p| stamped(p, 150 * c, 2000, NOW_MS - 4_000, 2000))
                    .collect()
            }),
        ),
    ]
}

/// [`scenarios`] as one monitor report, taken at the scenarios' last cycle.
pub(crate) fn report() -> MonitorReport {
    MonitorReport {
        taken_at: std::time::UNIX_EPOCH + Duration::from_millis((NOW_MS + 12_000) as u64),
        cycle_duration: Duration::ZERO,
        records_read: 0,
        groups: scenarios().into_iter().map(|(_, g)| g).collect(),
    }
}
