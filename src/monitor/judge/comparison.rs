//! The seeds' five scenarios, side by side: what KEDA's Kafka scaler would
//! ask for (offset lag only) and what the monitor's diagnosis and replica
//! suggestion ask for (time lag, and why the group is behind). The table
//! this prints is the one in the README ("Autoscaling: KEDA's rule beside
//! the monitor's"); run it with
//! `cargo test --lib monitor::judge::comparison -- --nocapture`.
//!
//! KEDA's Kafka scaler, as its documentation describes it: the metric is
//! the group's summed offset lag, the HPA target per replica is
//! `lagThreshold`, so the replicas asked for are
//! `ceil(total lag / lagThreshold)`, capped at the partition count (unless
//! `allowIdleConsumers`), and never below 1 while there is lag
//! (`activationLagThreshold` 0). Its options that look at more than the
//! lag (`excludePersistentLag`, `limitToPartitionsWithLag`) are off by
//! default and left off here.

use std::time::{Duration, Instant};

use super::{GroupTracker, HeadRead, Observation, Rules};
use crate::monitor::report::{Diagnosis, GroupReport, Scaling};
use crate::record::RecordTimestamp;

const PARTITIONS: i32 = 8;
const CURRENT: u32 = 2;
/// KEDA's `lagThreshold` for the comparison: 100 records per replica.
const LAG_THRESHOLD: u64 = 100;
const NOW_MS: i64 = 1_700_000_000_000;
/// Records per second produced to each partition.
const PRODUCE: i64 = 20;

fn rules() -> Rules {
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
    }
}

/// Runs `f(second)` for 13 cycles a second apart; the last report.
fn run(f: impl Fn(i64, i64) -> Vec<Observation>) -> GroupReport {
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut last = None;
    for c in 0..13i64 {
        let now_ms = NOW_MS + c * 1000;
        last = Some(g.evaluate(
            "g",
            &f(c, now_ms),
            None,
            &rules(),
            t0 + Duration::from_secs(c as u64),
            now_ms,
        ));
    }
    last.unwrap()
}

/// KEDA's ask: `ceil(total lag / lagThreshold)`, 1..=partitions.
fn keda(r: &GroupReport) -> u32 {
    let want = r.total_lag.div_ceil(LAG_THRESHOLD).max(1);
    want.min(r.partitions.len() as u64) as u32
}

/// The monitor's ask: the suggested replicas, else the current count held.
fn ours(r: &GroupReport) -> (u32, String) {
    match &r.scaling {
        Scaling::Suggest {
            replicas: Some(n), ..
        } => (*n, format!("{} (scale to {n})", r.diagnosis.as_str())),
        Scaling::Suggest { .. } => (CURRENT, r.diagnosis.as_str().to_owned()),
        Scaling::Withheld { .. } => (CURRENT, format!("{} (hold)", r.diagnosis.as_str())),
        Scaling::NotNeeded => (CURRENT, format!("{} (no scaling)", r.diagnosis.as_str())),
    }
}

/// The five scenarios at 12 s (window 10 s, stall_after 5 s, time lag
/// threshold 30 s, 8 partitions, 2 replicas now).
fn scenarios() -> Vec<(&'static str, GroupReport)> {
    // Every partition's log ends at `PRODUCE * (100 + c)` records at cycle
    // c: production started 100 s before the first cycle.
    let t0 = NOW_MS - 100_000;
    let end = |c: i64| PRODUCE * (100 + c);
    vec![
        (
            "evenly loaded slow group",
            // Every partition committed 1,000 and gains 15 records a second
            // on 20 produced: 50 s behind and rising everywhere.
            run(|c, _| {
                (0..PARTITIONS)
                    .map(|p| partition(p, 1000 + 15 * c, end(c), t0))
                    .collect()
            }),
        ),
        (
            "hot partition",
            // Partition 0 as above; the others keep up (commit at the end).
            run(|c, _| {
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
            run(|c, _| {
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
            // Every commit frozen at 1,900 since the first cycle.
            run(|c, _| {
                (0..PARTITIONS)
                    .map(|p| partition(p, 1900, end(c), t0))
                    .collect()
            }),
        ),
        (
            "bursty producer",
            // 2,000 records a partition produced within one second, 4 s
            // before the first cycle, and read 150 a second: a large offset
            // lag, seconds old.
            run(|c, _| {
                (0..PARTITIONS)
                    .map(|p| stamped(p, 150 * c, 2000, NOW_MS - 4_000, 2000))
                    .collect()
            }),
        ),
    ]
}

#[test]
fn keda_scales_on_offset_lag_the_monitor_on_time_lag_and_the_diagnosis() {
    let mut table = String::from(
        "| scenario | offset lag | max time lag | KEDA (lag / 100, max 8) | the monitor |\n|---|---|---|---|---|\n",
    );
    let mut asks = Vec::new();
    for (name, r) in scenarios() {
        let (ours_n, why) = ours(&r);
        table.push_str(&format!(
            "| {name} | {} | {} | {} | {ours_n}: {why} |\n",
            r.total_lag,
            r.max_time_lag
                .map_or("-".into(), |t| format!("{:.0} s", t.as_secs_f64())),
            keda(&r),
        ));
        asks.push((name, r.diagnosis, keda(&r), ours_n));
    }
    println!("{table}");
    let expect = [
        ("evenly loaded slow group", Diagnosis::ConsumerBound),
        ("hot partition", Diagnosis::Skewed),
        ("poison record", Diagnosis::Stuck),
        ("dead group", Diagnosis::Dead),
        ("bursty producer", Diagnosis::KeepingUp),
    ];
    for ((name, diagnosis, keda, ours), (want_name, want)) in asks.iter().zip(expect) {
        assert_eq!((*name, *diagnosis), (want_name, want), "{table}");
        // KEDA scales up in every scenario.
        assert!(*keda > CURRENT, "{name}: KEDA asks {keda}\n{table}");
        if want == Diagnosis::ConsumerBound {
            assert!(*ours > CURRENT && *ours <= PARTITIONS as u32, "{table}");
        } else {
            assert_eq!(*ours, CURRENT, "{name}: the monitor holds\n{table}");
        }
    }
}
