//! The seeds' five scenarios, side by side: what KEDA's Kafka scaler would
//! ask for (offset lag only) and what the monitor's diagnosis and replica
//! suggestion ask for (time lag, and why the group is behind). The table
//! this prints is the one in the guide's monitor chapter ("Autoscaling: KEDA's rule beside
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

use super::scenarios::{CURRENT, PARTITIONS, scenarios};
use crate::monitor::report::{Diagnosis, GroupReport, Scaling};

/// KEDA's `lagThreshold` for the comparison: 100 records per replica.
const LAG_THRESHOLD: u64 = 100;

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
