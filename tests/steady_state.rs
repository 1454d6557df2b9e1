//! A consumer that keeps up is reported healthy for the whole run, and a
//! stall in the same harness is still flagged (issue 17, item 1).
//!
//! Six partitions, about 300 records/s from a producer batching for 100 ms
//! (`linger.ms=100`), a 1-3 ms handler, the default commit and statistics
//! intervals (1 s each). Phases: busy, idle (nothing produced), busy; a
//! sampler takes a health snapshot every 250 ms and the exported
//! `fresh_consumer.partition.status` is read every 2 s. Asserted: the
//! snapshot is healthy at every sample and no partition's status point is
//! other than `ok`. Then one partition's handler hangs: the partition must
//! read `stall` (and the snapshot unhealthy, naming it); when the handler
//! returns it must read `ok` again without a `stop` in between.
//!
//! The lag-growth window is 20 s and `stall_after` 10 s (shorter than the
//! defaults of 120 s and 60 s, so a CI run judges many windows, each a chance
//! for a false alarm). The busy phases last 45 s each and the idle phase
//! 20 s; `FRESH_CONSUMER_STEADY_SECS=<n>` sets the total of the three phases
//! (30 min: `1800`), or `FRESH_CONSUMER_LONG_TESTS=1` runs the 30 minutes.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::{PARTITION_STATUS, STATUS};
use fresh_consumer::{
    Record,
    health::{ConsumerState, HealthReason, HealthStatus, HealthThresholds, PartitionStatus},
};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use support::kafka::TestCluster;
use support::logs;
use support::run::{start, wait_snapshot};
use support::wait::WAIT;

const PARTITIONS: i32 = 6;
const RECORDS_PER_SEC: u64 = 300;
/// The partition whose handler hangs in the last phase.
const HUNG: i32 = 2;

/// Seconds of (busy, idle, busy).
fn phases() -> (u64, u64, u64) {
    let total = std::env::var("FRESH_CONSUMER_STEADY_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .or_else(|| std::env::var_os("FRESH_CONSUMER_LONG_TESTS").map(|_| 1800))
        .unwrap_or(110)
        .max(30);
    let idle = (total * 2 / 11).max(10);
    let busy = (total - idle) / 2;
    (busy, idle, busy)
}

/// What the sampler saw that is not healthy.
#[derive(Default)]
struct Seen {
    samples: AtomicU64,
    unhealthy: std::sync::Mutex<Vec<String>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_keeping_up_is_healthy_for_the_whole_run_and_a_stall_is_still_flagged() {
    logs::init();
    let (busy1, idle, busy2) = phases();
    let (cluster, topic, group) = TestCluster::with_topic("steady", PARTITIONS).await;
    let metrics = TestMetrics::new();

    // The handler: 1-3 ms, or hanging on partition HUNG while `hang` is set.
    let hang = Arc::new(AtomicBool::new(false));
    let released = Arc::new(Notify::new());
    let handler = {
        let hang = Arc::clone(&hang);
        let released = Arc::clone(&released);
        move |r: Record| {
            let wait = (hang.load(Ordering::Acquire) && r.partition() == HUNG)
                .then(|| Arc::clone(&released));
            let hang = Arc::clone(&hang);
            let ms = 1 + (r.offset() % 3) as u64;
            async move {
                if let Some(released) = wait {
                    let notified = released.notified();
                    if hang.load(Ordering::Acquire) {
                        notified.await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let stall_after = Duration::from_secs(10);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .health_thresholds(
                HealthThresholds::default()
                    .with_lag_growth_window(Duration::from_secs(20))
                    .with_stall_after(stall_after)
                    .with_no_success_after(stall_after),
            )
            .meter_provider(metrics.provider()),
    );
    wait_snapshot(&run.health, WAIT, "every partition assigned", |s| {
        s.state == ConsumerState::Running && s.partitions.len() == PARTITIONS as usize
    })
    .await;

    // The producer: RECORDS_PER_SEC in ticks of 10 ms, batched for 100 ms.
    let producing = Arc::new(AtomicBool::new(true));
    let stop = CancellationToken::new();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("linger.ms", "100")
        .create()
        .expect("producer");
    let produced = Arc::new(AtomicU64::new(0));
    let producer_task = {
        let (producing, stop, topic, produced) = (
            Arc::clone(&producing),
            stop.clone(),
            topic.clone(),
            Arc::clone(&produced),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let per_tick = RECORDS_PER_SEC / 100;
            let mut i = 0u64;
            while !stop.is_cancelled() {
                tick.tick().await;
                if !producing.load(Ordering::Acquire) {
                    continue;
                }
                for _ in 0..per_tick {
                    let key = format!("k{i}");
                    let r = FutureRecord::to(&topic)
                        .partition((i % PARTITIONS as u64) as i32)
                        .key(&key)
                        .payload("v");
                    if producer.send_result(r).is_ok() {
                        produced.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            }
        })
    };

    // The sampler: a snapshot every 250 ms; the status gauge every 2 s.
    let seen = Arc::new(Seen::default());
    let sampling = CancellationToken::new();
    let sampler = {
        let (health, seen, sampling) = (run.health.clone(), Arc::clone(&seen), sampling.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            while !sampling.is_cancelled() {
                tick.tick().await;
                let s = health.snapshot();
                seen.samples.fetch_add(1, Ordering::Relaxed);
                if s.status != HealthStatus::Healthy {
                    seen.unhealthy.lock().unwrap().push(s.to_string());
                }
            }
        })
    };
    let mut status_points = 0u64;
    let mut not_ok: BTreeMap<String, u64> = BTreeMap::new();
    let started = Instant::now();
    let phase = |name: &str, secs: u64| {
        eprintln!(
            "{:>6.1} s: {name} for {secs} s",
            started.elapsed().as_secs_f64()
        );
        Duration::from_secs(secs)
    };
    for (name, secs, on) in [
        ("busy", busy1, true),
        ("idle", idle, false),
        ("busy", busy2, true),
    ] {
        producing.store(on, Ordering::Release);
        let until = Instant::now() + phase(name, secs);
        while Instant::now() < until {
            tokio::time::sleep_until((Instant::now() + Duration::from_secs(2)).min(until).into())
                .await;
            metrics.flush().await.expect("flush the metrics");
            let (points, bad) = status_not_ok(&metrics);
            status_points += points;
            for b in bad {
                *not_ok.entry(b).or_default() += 1;
            }
        }
    }
    sampling.cancel();
    sampler.await.unwrap();
    let samples = seen.samples.load(Ordering::Relaxed);
    let unhealthy = std::mem::take(&mut *seen.unhealthy.lock().unwrap());
    eprintln!(
        "{} records produced; {samples} snapshots, {} not healthy; {status_points} status points read, not ok: {not_ok:?}",
        produced.load(Ordering::Relaxed),
        unhealthy.len()
    );
    assert!(samples > 100, "the sampler ran: {samples}");
    assert!(status_points > 0, "status points were exported");
    assert!(
        unhealthy.is_empty(),
        "{} of {samples} snapshots not healthy; first:\n{}",
        unhealthy.len(),
        unhealthy.first().map(String::as_str).unwrap_or("")
    );
    assert!(not_ok.is_empty(), "status points other than ok: {not_ok:?}");

    // The stall: partition HUNG's handler hangs while records keep coming.
    phase("stall", stall_after.as_secs());
    hang.store(true, Ordering::Release);
    let hung_at = Instant::now();
    let s = wait_snapshot(
        &run.health,
        stall_after + WAIT,
        "the hung partition stalls",
        // The status turns `stall` with the first of its reasons (no
        // success for `stall_after`, measured from the last success) and
        // `Stalled` follows within milliseconds (measured from the last
        // commit): wait for both.
        |s| {
            s.partition(&topic, HUNG).is_some_and(|p| {
                p.status == PartitionStatus::Stall
                    && p.reasons
                        .iter()
                        .any(|r| matches!(r, HealthReason::Stalled { .. }))
            })
        },
    )
    .await;
    eprintln!(
        "stall flagged {:.1} s after the hang:\n{s}",
        hung_at.elapsed().as_secs_f64()
    );
    assert_eq!(s.status, HealthStatus::Unhealthy);
    let p = s.partition(&topic, HUNG).unwrap();
    assert!(
        p.reasons
            .iter()
            .any(|r| matches!(r, HealthReason::Stalled { .. })),
        "{p:?}"
    );
    for other in (0..PARTITIONS).filter(|&p| p != HUNG) {
        let r = s.partition(&topic, other).unwrap();
        assert_eq!(r.status, PartitionStatus::Ok, "{r:?}");
    }
    // The handler returns: the partition catches up and reads ok again,
    // never `stop` on the way.
    hang.store(false, Ordering::Release);
    released.notify_waiters();
    let stop_seen = std::sync::Mutex::new(Vec::new());
    let recovered = wait_snapshot(&run.health, WAIT, "the hung partition recovers", |s| {
        let p = s.partition(&topic, HUNG).unwrap();
        if p.status == PartitionStatus::Stop {
            stop_seen.lock().unwrap().push(s.to_string());
        }
        p.status == PartitionStatus::Ok && p.reasons.is_empty()
    })
    .await;
    eprintln!("recovered:\n{recovered}");
    let stop_seen = stop_seen.into_inner().unwrap();
    assert!(
        stop_seen.is_empty(),
        "a handler that returned read stop:\n{}",
        stop_seen[0]
    );

    stop.cancel();
    producer_task.await.unwrap();
    run.stop().await;
    let _ = metrics.shutdown().await;
}

/// (points read, `topic:partition=status` of each partition whose current
/// status is not `ok`) from the latest export of the status gauge.
fn status_not_ok(metrics: &TestMetrics) -> (u64, Vec<String>) {
    metrics
        .metric(PARTITION_STATUS, |m| {
            let AggregatedMetrics::I64(MetricData::Gauge(g)) = m.data() else {
                panic!("{PARTITION_STATUS} is an i64 gauge: {:?}", m.data());
            };
            let mut points = 0;
            let mut bad = Vec::new();
            for p in g.data_points() {
                points += 1;
                let attr = |k: &str| {
                    p.attributes()
                        .find(|kv| kv.key.as_str() == k)
                        .map(|kv| kv.value.to_string())
                        .unwrap_or_default()
                };
                let status = attr(STATUS);
                if p.value() == 1 && status != "ok" {
                    bad.push(format!(
                        "{}:{}={status}",
                        attr("messaging.destination.name"),
                        attr("messaging.destination.partition.id")
                    ));
                }
            }
            (points, bad)
        })
        .unwrap_or_default()
}
