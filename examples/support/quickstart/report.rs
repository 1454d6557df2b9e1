//! The table the quickstart prints at the end: per partition, what was
//! handled and committed, the log end, and the event-age distribution read
//! back from the metrics pipeline; and the demo's check of it.

use std::error::Error;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::{RunSummary, TopicPartition};

use super::cluster::Target;
use super::telemetry::AgeReader;
use super::workload::{HOT_KEY, Tally};

pub fn print_report(
    tally: &Tally,
    summary: &RunSummary,
    ages: &AgeReader,
    target: &Target,
    end_offsets: &[Option<i64>],
    elapsed: Duration,
) {
    let ages = ages.snapshot();
    let opt = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let age = |v: Option<f64>| v.map_or("-".to_owned(), human);
    println!();
    println!(
        "{:>9} {:>8} {:>10} {:>8} | {:>11} {:>9} {:>9} {:>9}",
        "partition",
        "handled",
        "committed",
        "log end",
        "age samples",
        "p50 age",
        "p99 age",
        "max age"
    );
    for p in 0..target.partitions {
        let handled = tally.handled[p as usize].load(Ordering::Relaxed);
        let committed = summary
            .committed
            .get(&TopicPartition {
                topic: target.topic.clone(),
                partition: p,
            })
            .copied();
        let h = ages.get(&p).cloned().unwrap_or_default();
        let max = (h.count > 0).then_some(h.max);
        println!(
            "{:>9} {:>8} {:>10} {:>8} | {:>11} {:>9} {:>9} {:>9}",
            p,
            handled,
            opt(committed),
            opt(end_offsets.get(p as usize).copied().flatten()),
            h.count,
            age(h.quantile(0.5)),
            age(h.quantile(0.99)),
            age(max),
        );
    }
    println!();
    println!(
        "handled = handler succeeded; committed = the group's next offset to read \
         (everything below it succeeded); log end = high watermark."
    );
    println!(
        "Event age = handler success time minus record timestamp, read back from the \
         `{EVENT_AGE}` histogram: p50/p99 are estimates interpolated inside histogram \
         buckets, max is exact."
    );
    let hot = tally.hot_partition.load(Ordering::Relaxed);
    if hot >= 0 {
        println!(
            "The hot key {HOT_KEY:?} hashes to partition {hot}: its records queue behind each \
             other (one partition is handled one record at a time, in offset order), so they \
             are handled later. Every partition ends with zero offset lag; the event age shows \
             which one was late, and by how much."
        );
    }
    println!(
        "run: received={} succeeded={} failed_attempts={} (retried) commits={} \
         commit_failures={} rebalance_events={} elapsed={:.1}s{}",
        summary.records_received,
        summary.records_succeeded,
        summary.failed_attempts,
        summary.commits,
        summary.commit_failures,
        summary.rebalances,
        elapsed.as_secs_f64(),
        if summary.shutdown_timed_out {
            " (shutdown timed out)"
        } else {
            ""
        }
    );
}

/// The demo's smoke test: `records` records handled, and every partition
/// committed up to its log end.
pub fn check_demo(
    tally: &Tally,
    summary: &RunSummary,
    target: &Target,
    end_offsets: &[Option<i64>],
    records: u64,
) -> Result<(), Box<dyn Error>> {
    let handled = tally.total();
    let committed_to_end = (0..target.partitions).all(|p| {
        let committed = summary.committed.get(&TopicPartition {
            topic: target.topic.clone(),
            partition: p,
        });
        match end_offsets[p as usize] {
            Some(0) => committed.is_none_or(|&c| c == 0),
            Some(end) => committed == Some(&end),
            None => false,
        }
    });
    if handled != records || !committed_to_end {
        return Err(format!(
            "demo incomplete: {handled} of {records} records handled; committed offsets {:?}, \
             log end offsets {end_offsets:?}",
            summary.committed
        )
        .into());
    }
    Ok(())
}

/// `12.3 ms`, `1.24 s`, `4m05s`.
fn human(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1_000.0)
    } else if seconds < 60.0 {
        format!("{seconds:.2} s")
    } else {
        let s = seconds.round() as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    }
}
