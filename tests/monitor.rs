//! The group monitor (`fresh_consumer::monitor`) on the embedded broker:
//! time lag from the record at the committed offset, the statuses, the
//! retention margin, the diagnosis of dead, skewed, consumer-bound and stuck
//! groups, the gauges over OTLP, and bad input.
//!
//! Every wait has a deadline; detection times are printed
//! (`cargo test --test monitor -- --nocapture`).

mod support;

use fresh_consumer::testing::TestMetrics;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::monitor::{
    Diagnosis, GroupMonitor, HeadTimestamp, LagStatus, Monitor, MonitorError, MonitorHandle,
    MonitorReport, Scaling,
};
use fresh_consumer::{ConfigError, OnExhausted, Record, failure::RetryPolicy, permanent};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use rdkafka::producer::FutureRecord;
use support::kafka::{TestCluster, now_ms, tp, unique};
use support::logs;
use support::metrics::{otlp_provider, partition_attrs};
use support::otlp_receiver::{OtlpReceiver, number_points};
use support::run;
use support::wait::{wait_for, within};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// A monitor with short intervals and thresholds, for tests.
fn monitor(cluster: &TestCluster, group: &str, topic: &str) -> GroupMonitor {
    GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(group)
        .topics([topic])
        .interval(Duration::from_millis(250))
        .window(Duration::from_secs(1))
        .stall_after(Duration::from_millis(750))
        .lag_threshold(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(3))
}

/// A monitor running in a task of its own until [`Watching::stop`].
struct Watching {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    handle: MonitorHandle,
}

async fn watch(m: GroupMonitor) -> Watching {
    let monitor = m.connect().await.expect("connect");
    let handle = monitor.handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(monitor.run_until(stop.clone().cancelled_owned()));
    Watching { stop, task, handle }
}

impl Watching {
    /// Waits until the latest report satisfies `cond`; returns it.
    async fn wait(&self, what: &str, cond: impl Fn(&MonitorReport) -> bool) -> Arc<MonitorReport> {
        let probe = || std::future::ready(self.handle.latest());
        wait_for(WAIT, what, probe, |r| r.as_deref().is_some_and(&cond))
            .await
            .expect("a report")
    }

    /// Waits until the group is diagnosed `diagnosis`, prints how long that
    /// took since `since`, and returns the report.
    async fn diagnosed(&self, diagnosis: Diagnosis, since: Instant) -> Arc<MonitorReport> {
        let r = self
            .wait(diagnosis.as_str(), |r| r.groups[0].diagnosis == diagnosis)
            .await;
        println!("{} after {:?}", diagnosis.as_str(), since.elapsed());
        r
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("monitor task");
    }
}

fn unix_ms(r: &MonitorReport) -> i64 {
    r.taken_at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Time lag is the cycle's clock minus the CreateTime of the record at the
/// committed offset, exactly (to the millisecond), and grows with the clock;
/// a record without a timestamp leaves the time lag unknown and is counted,
/// a future one reads 0 and is counted, each once; lag 0 reads 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_lag_is_the_age_of_the_record_at_the_committed_offset() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-ts", 4).await;
    let backdated = now_ms() - 120_000;
    cluster
        .produce(&topic, 0, "k", "old", Some(backdated - 60_000))
        .await;
    cluster
        .produce(&topic, 0, "k", "at-commit", Some(backdated))
        .await;
    cluster.produce(&topic, 0, "k", "newer", None).await;
    cluster.produce(&topic, 1, "k", "no-ts", Some(-1)).await;
    cluster
        .produce(&topic, 2, "k", "future", Some(now_ms() + 3_600_000))
        .await;
    cluster.produce(&topic, 3, "k", "done", None).await;
    cluster.commit_offset(&group, &topic, 0, 1).await;
    cluster.commit_offset(&group, &topic, 1, 0).await;
    cluster.commit_offset(&group, &topic, 2, 0).await;
    cluster.commit_offset(&group, &topic, 3, 1).await;

    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let first = m.cycle().await.expect("cycle");
    let g = &first.groups[0];
    let p = &g.partitions;
    assert_eq!(p[0].timestamp, HeadTimestamp::CreateTime(backdated));
    assert_eq!(
        p[0].time_lag,
        Some(Duration::from_millis((unix_ms(&first) - backdated) as u64))
    );
    assert_eq!(p[0].offset_lag, Some(2));
    assert_eq!(p[0].status, LagStatus::Lagging);
    assert_eq!(p[1].timestamp, HeadTimestamp::Missing);
    assert_eq!(p[1].time_lag, None);
    assert_eq!(p[1].status, LagStatus::TimeLagUnknown, "records wait");
    assert!(matches!(p[2].timestamp, HeadTimestamp::Future(_)));
    assert_eq!(p[2].time_lag, Some(Duration::ZERO));
    assert_eq!(p[3].timestamp, HeadTimestamp::CaughtUp);
    assert_eq!(
        (p[3].offset_lag, p[3].time_lag),
        (Some(0), Some(Duration::ZERO))
    );
    assert_eq!((g.timestamps_missing, g.timestamps_future), (1, 1));
    assert_eq!(first.records_read, 3);

    // The next cycle reuses the timestamps: nothing read, nothing counted
    // twice, and the time lag grew by exactly the clock's advance.
    let advanced = first.taken_at + Duration::from_millis(300);
    while std::time::SystemTime::now() < advanced {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = m.cycle().await.expect("cycle");
    let g2 = &second.groups[0];
    assert_eq!(second.records_read, 0);
    assert_eq!((g2.timestamps_missing, g2.timestamps_future), (1, 1));
    let grew = g2.partitions[0].time_lag.unwrap() - p[0].time_lag.unwrap();
    let clock = second.taken_at.duration_since(first.taken_at).unwrap();
    assert!(
        grew.abs_diff(clock) <= Duration::from_millis(1),
        "time lag grew {grew:?} while the clock advanced {clock:?}"
    );
}

/// A monitor whose cycles the test runs one interval apart, keeping every
/// report.
struct Cycles {
    monitor: Monitor,
    tick: tokio::time::Interval,
    reports: Vec<MonitorReport>,
}

impl Cycles {
    async fn next(&mut self) -> &MonitorReport {
        self.tick.tick().await;
        let r = self.monitor.cycle().await.expect("cycle");
        self.reports.push(r);
        self.reports.last().unwrap()
    }
}

/// Records of histogram `name` in the latest export of `metrics`, over all
/// points; 0 when it was never exported.
fn histogram_count(metrics: &TestMetrics, name: &str) -> u64 {
    metrics
        .metric(name, |m| match m.data() {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                h.data_points().map(|p| p.count()).sum()
            }
            other => panic!("{name} is not an f64 histogram: {other:?}"),
        })
        .unwrap_or(0)
}

/// A consumer killed mid-stream (its runtime dropped): its in-process
/// metrics stop (no new `fresh_consumer.event.age` point from the kill on),
/// while the monitor's time lag for its partitions grows with the wall
/// clock, one second per second, and the group is diagnosed `dead` no
/// earlier than `stall_after` after the monitor last saw a commit move and
/// within two cycles (intervals) of its freeze threshold: `stall_after`, or
/// twice the group's commit rhythm when that is longer (a loaded machine
/// spaces the commits further apart, and a freeze shorter than twice the
/// rhythm is the group's ordinary pause). The backlog does not grow after the kill (nothing is produced), so
/// the partitions are `lagging`, not `stalled` (see `LagStatus::Lagging`).
///
/// The monitor's cycles are run here one interval apart, so the test sees
/// every report: the bound on the detection is counted in cycles, which a
/// loaded machine only spaces further apart (it cannot make them fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumer_stops_exporting_is_dead_and_its_time_lag_grows_with_the_clock() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-dead", 3).await;
    cluster.produce_many(&topic, 3, 300).await;

    // The consumer runs on a runtime of its own, so it can be killed, and
    // records its metrics into an in-memory reader.
    let metrics = TestMetrics::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let consumer = cluster
        .consumer(&group, &topic, |_r: Record| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<(), std::io::Error>(())
        })
        .meter_provider(metrics.provider());
    rt.spawn(consumer.run());

    let (interval, window, stall_after) = (
        Duration::from_millis(250),
        Duration::from_secs(1),
        Duration::from_millis(750),
    );
    let mut cycles = Cycles {
        monitor: monitor(&cluster, &group, &topic)
            .connect()
            .await
            .expect("connect"),
        tick: {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        },
        reports: Vec::new(),
    };
    within(WAIT, "every partition committed something", async {
        while !cycles.next().await.groups[0]
            .partitions
            .iter()
            .all(|p| p.committed.is_some_and(|c| c > 0))
        {}
    })
    .await;
    metrics.flush().await.expect("flush the metrics");
    let handled_before_kill = histogram_count(&metrics, EVENT_AGE);
    assert!(handled_before_kill > 0, "the consumer exported event ages");
    let killed = Instant::now();
    rt.shutdown_background();

    within(WAIT, "diagnosis dead", async {
        while cycles.next().await.groups[0].diagnosis != Diagnosis::Dead {}
    })
    .await;
    let dead = cycles.reports.len() - 1;
    println!(
        "dead detected {:?} after the kill (stall_after {stall_after:?}, interval {interval:?}), {} cycles",
        killed.elapsed(),
        cycles.reports.len()
    );
    let final_committed = |r: &MonitorReport| {
        r.groups[0]
            .partitions
            .iter()
            .map(|p| p.committed)
            .collect::<Vec<_>>()
    };
    // The first report that showed the commits where they stayed: the
    // monitor's clock of "no commit moved" starts there.
    let reports = &cycles.reports;
    let last_move = reports
        .iter()
        .position(|r| final_committed(r) == final_committed(&reports[dead]))
        .unwrap();
    // (The judge measures on the monotonic clock, the report carries the
    // wall clock read right after it: 5 ms of slack for the difference.)
    let frozen_after = |after: Duration| {
        reports
            .iter()
            .position(|r| {
                r.taken_at
                    .duration_since(reports[last_move].taken_at)
                    .unwrap_or_default()
                    >= after - Duration::from_millis(5)
            })
            .unwrap_or(reports.len())
    };
    // The commit rhythm as the cycles bound it from above: per partition,
    // the time between two reports that saw its commit move (the last five
    // gaps, as the monitor keeps them).
    let rhythm = (0..3)
        .filter_map(|p| {
            let moves: Vec<_> = reports[..=last_move]
                .windows(2)
                .filter(|w| {
                    w[0].groups[0].partitions[p].committed != w[1].groups[0].partitions[p].committed
                })
                .map(|w| w[1].taken_at)
                .collect();
            moves
                .windows(2)
                .rev()
                .take(5)
                .map(|m| m[1].duration_since(m[0]).unwrap_or_default())
                .max()
        })
        .max()
        .unwrap_or_default();
    let threshold = stall_after.max(2 * rhythm);
    let (earliest, latest) = (frozen_after(stall_after), frozen_after(threshold));
    assert!(
        (earliest..=latest + 2).contains(&dead),
        "dead at cycle {dead}; stall_after elapsed at cycle {earliest}, the freeze threshold {threshold:?} (commit rhythm up to {rhythm:?}) at cycle {latest} (last commit seen at cycle {last_move})"
    );
    let g = &reports[dead].groups[0];
    assert_eq!(g.named.len(), 3);
    assert!(matches!(g.scaling, Scaling::Withheld { .. }));
    assert!(g.total_lag > 0, "killed mid-stream");

    // The time lag grows with the clock, one second per second, while the
    // consumer's own metrics stay where the kill left them.
    metrics.flush().await.expect("flush the metrics");
    let handled_at_dead = histogram_count(&metrics, EVENT_AGE);
    assert!(handled_at_dead >= handled_before_kill);
    assert!(
        handled_at_dead < 900,
        "killed mid-stream: {handled_at_dead}"
    );
    let before = cycles.reports[dead].clone();
    let after = within(WAIT, "a report 1 s later", async {
        loop {
            let r = cycles.next().await;
            if r.taken_at
                .duration_since(before.taken_at)
                .unwrap_or_default()
                >= Duration::from_secs(1)
            {
                break r.clone();
            }
        }
    })
    .await;
    let clock = after.taken_at.duration_since(before.taken_at).unwrap();
    for (a, b) in before.groups[0]
        .partitions
        .iter()
        .zip(&after.groups[0].partitions)
    {
        let grew = b.time_lag.unwrap() - a.time_lag.unwrap();
        assert!(
            grew.abs_diff(clock) <= Duration::from_millis(1),
            "partition {}: time lag grew {grew:?} in {clock:?}",
            a.partition
        );
        assert_eq!(b.status, LagStatus::Lagging, "{b:?}");
        assert!(!b.log_end_moved);
        assert!(b.waiting_for.is_some_and(|w| w >= window), "{b:?}");
    }
    assert_eq!(after.groups[0].diagnosis, Diagnosis::Dead);
    metrics.flush().await.expect("flush the metrics");
    assert_eq!(
        histogram_count(&metrics, EVENT_AGE),
        handled_at_dead,
        "no event age recorded after the kill"
    );
}

/// Even load with a slow handler: `consumer_bound`, with a replica
/// suggestion no higher than the partition count. Then 90 % of the records
/// on one partition with the same handler: `skewed`, that partition named,
/// no suggestion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_bound_gets_a_suggestion_skewed_does_not() {
    logs::init();
    let cluster = TestCluster::start();
    let slow = |_r: Record| async {
        tokio::time::sleep(Duration::from_millis(8)).await;
        Ok::<(), std::io::Error>(())
    };

    // Even: 4 x 1,000 records, ~8 s per partition: long enough for the
    // window to see the lag stay up while commits advance, also when a
    // loaded machine slows the group's join. The monitor watches from
    // before the consumer starts.
    let topic = cluster.topic("mon-even", 4).await;
    let group = unique("g-mon-even");
    cluster.produce_many(&topic, 4, 1_000).await;
    let produced = Instant::now();
    // On a real cluster the configured count is 4 (a consumer per
    // partition, so a suggestion would be withheld): the suggestion below
    // exists only because the group's described member count (1) is used
    // in its place.
    let flag = if cluster.is_real() { 4 } else { 1 };
    let run = watch(
        monitor(&cluster, &group, &topic)
            .current_replicas(flag)
            .drain_target(Duration::from_millis(500)),
    )
    .await;
    let consumer = run::start(cluster.consumer(&group, &topic, slow));
    let r = run
        .wait("consumer_bound with a suggestion", |r| {
            r.groups[0].diagnosis == Diagnosis::ConsumerBound
                && matches!(r.groups[0].scaling, Scaling::Suggest { .. })
        })
        .await;
    println!("consumer_bound after {:?}", produced.elapsed());
    let g = &r.groups[0];
    let Scaling::Suggest {
        replicas,
        throughput_factor,
        ..
    } = g.scaling
    else {
        panic!("no suggestion: {:?}", g.scaling)
    };
    let replicas = replicas.expect("a replica count (current_replicas was given)");
    assert!((1..=4).contains(&replicas), "{replicas}");
    let current = g.members.unwrap_or(flag);
    let want = (f64::from(current) * throughput_factor)
        .ceil()
        .max(f64::from(current))
        .min(4.0) as u32;
    assert_eq!(
        replicas, want,
        "ceil({current} x {throughput_factor}), capped at 4"
    );
    // The brokers describe the group's one member (DescribeGroups); the
    // mock broker does not implement it, so there the configured count is
    // used.
    if cluster.is_real() {
        assert_eq!(g.members, Some(1), "{g:?}");
    } else {
        assert_eq!(g.members, None);
    }
    assert!(throughput_factor > 0.0);
    assert!(g.commit_rate > 0.0);
    assert!(g.drain_time.is_some(), "draining: {g:?}");
    run.stop().await;
    consumer.stop().await;

    // Hot: 900 records on partition 2, 33 on each other.
    let topic = cluster.topic("mon-hot", 4).await;
    let group = unique("g-mon-hot");
    for p in 0..4 {
        cluster
            .produce_bulk(&topic, p, if p == 2 { 900 } else { 33 }, 100)
            .await;
    }
    let produced = Instant::now();
    let run = watch(monitor(&cluster, &group, &topic).current_replicas(1)).await;
    let consumer = run::start(cluster.consumer(&group, &topic, slow));
    let r = run.diagnosed(Diagnosis::Skewed, produced).await;
    let g = &r.groups[0];
    assert_eq!(g.named, vec![tp(&topic, 2)]);
    assert!(
        matches!(g.scaling, Scaling::Withheld { .. }),
        "{:?}",
        g.scaling
    );
    run.stop().await;
    consumer.stop().await;
}

/// A poison record blocks partition 1 (block policy) while records keep
/// arriving on every partition and the others commit them: `stuck`,
/// partition 1 named (`stalled`: committed frozen while its log end moves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_partition_is_stuck_and_named() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-stuck", 3).await;
    cluster.produce_many(&topic, 3, 5).await;
    cluster.produce(&topic, 1, "k", "poison", None).await;
    cluster.produce_many(&topic, 3, 5).await;
    let handler = |r: Record| async move {
        if r.payload() == Some(b"poison".as_slice()) {
            Err(permanent(std::io::Error::other("poison")))
        } else {
            Ok(())
        }
    };
    let consumer = run::start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(RetryPolicy::new().max_attempts(2))
            .on_exhausted(OnExhausted::Block),
    );
    // Keep records flowing to every partition: the blocked partition's log
    // end moves while its committed offset stays (what `stalled` means).
    let flowing = Arc::new(AtomicBool::new(true));
    let producer = {
        let producer = cluster.producer().clone();
        let topic = topic.clone();
        let flowing = Arc::clone(&flowing);
        tokio::spawn(async move {
            while flowing.load(Ordering::Relaxed) {
                for p in [0, 1, 2] {
                    let _ = producer
                        .send(
                            FutureRecord::to(&topic).partition(p).key("k").payload("v"),
                            Duration::from_secs(5),
                        )
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    let run = watch(monitor(&cluster, &group, &topic)).await;
    let r = run.diagnosed(Diagnosis::Stuck, started).await;
    let g = &r.groups[0];
    assert_eq!(g.named, vec![tp(&topic, 1)]);
    assert_eq!(g.partitions[1].status, LagStatus::Stalled);
    assert!(g.partitions[1].log_end_moved);
    assert!(matches!(g.scaling, Scaling::Withheld { .. }));
    // It stays stuck (not dead) past the window: the others commit.
    let past_window = r.taken_at + Duration::from_millis(1500);
    let later = run
        .wait("a report a window and more later", |x| {
            x.taken_at >= past_window
        })
        .await;
    assert_eq!(later.groups[0].diagnosis, Diagnosis::Stuck);
    flowing.store(false, Ordering::Relaxed);
    producer.await.unwrap();
    run.stop().await;
    consumer.stop().await;
}

/// The log start advances toward a frozen committed offset (the mock keeps
/// at most 5 MiB per partition; DeleteRecords as far on a real cluster): the margin shrinks with an estimate of the
/// time left, then the partition is out of range with the deleted count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_margin_shrinks_then_out_of_range_counts_the_deleted() {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("mon-retention", 1).await;
    let group = unique("g-mon-retention");
    // 40 records of 100 KB: 4 MB, nothing deleted yet.
    cluster.produce_bulk(&topic, 0, 40, 100_000).await;
    cluster.commit_offset(&group, &topic, 0, 30).await;
    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let mut margins = Vec::new();
    let mut etas = Vec::new();
    let mut out = None;
    for _ in 0..40 {
        let r = m.cycle().await.expect("cycle");
        let p = r.groups[0].partitions[0].clone();
        if let LagStatus::OutOfRange { deleted } = p.status {
            out = Some((deleted, p));
            break;
        }
        margins.push(p.retention_margin.unwrap());
        etas.push(p.retention_eta);
        cluster.produce_bulk(&topic, 0, 4, 100_000).await;
        // The mock keeps about 52 records of 100 KB; on a real cluster
        // DeleteRecords moves the log start as far.
        cluster.apply_retention(&topic, 0, 52).await;
    }
    println!("margins {margins:?}, etas {etas:?}");
    let (deleted, p) = out.expect("out of range within 40 cycles");
    assert!(margins.windows(2).all(|w| w[1] <= w[0]), "{margins:?}");
    assert!(
        margins.iter().any(|&m| m > 0 && m < 30),
        "a shrinking positive margin before the overrun: {margins:?}"
    );
    assert!(
        etas.iter().any(Option::is_some),
        "an estimate before the overrun"
    );
    assert_eq!(deleted as i64, p.log_start - 30);
    assert_eq!(p.retention_margin, Some(30 - p.log_start));
    assert!(p.time_lag.is_some(), "time lag of the oldest kept record");
}

/// The monitor's gauges arrive over OTLP with the partition attributes of
/// the in-process metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_are_exported_with_the_partition_attributes() {
    use fresh_consumer::metrics::*;
    use opentelemetry::metrics::MeterProvider;
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-otlp", 2).await;
    let receiver = OtlpReceiver::start().await;
    let provider = otlp_provider(&receiver, Duration::from_millis(200), "monitor-test");
    let backdated = now_ms() - 30_000;
    cluster.produce(&topic, 0, "k", "a", Some(backdated)).await;
    cluster.commit_offset(&group, &topic, 0, 0).await;
    let run =
        watch(monitor(&cluster, &group, &topic).meter(provider.meter("fresh-consumer"))).await;
    run.wait("a report", |_| true).await;
    let p0 = partition_attrs(&topic, 0, &group);
    let lag = receiver.wait_for_metric(MONITOR_LAG, WAIT).await;
    assert!(
        number_points(&lag).contains(&(p0.clone(), 1.0)),
        "{:?}",
        number_points(&lag)
    );
    let mut with_type = p0.clone();
    with_type.insert(TIMESTAMP_TYPE.into(), "create_time".into());
    let time_lag = receiver.wait_for_metric(MONITOR_TIME_LAG, WAIT).await;
    let v = number_points(&time_lag)
        .into_iter()
        .find(|(a, _)| a == &with_type)
        .map(|(_, v)| v)
        .expect("time lag of partition 0");
    assert!((30.0..60.0).contains(&v), "{v}");
    let status = receiver
        .wait_for_metric(MONITOR_PARTITION_STATUS, WAIT)
        .await;
    let mut lagging = p0.clone();
    lagging.insert(STATUS.into(), "lagging".into());
    assert!(number_points(&status).contains(&(lagging, 1.0)));
    let diagnosis = receiver
        .wait_for_metric(MONITOR_GROUP_DIAGNOSIS, WAIT)
        .await;
    let points = number_points(&diagnosis);
    assert_eq!(
        points.iter().filter(|(_, v)| *v == 1.0).count(),
        1,
        "{points:?}"
    );
    receiver
        .wait_for_metric(MONITOR_RETENTION_MARGIN, WAIT)
        .await;
    receiver.wait_for_metric(MONITOR_COMMIT_AGE, WAIT).await;
    receiver.wait_for_metric(MONITOR_CYCLES, WAIT).await;
    run.stop().await;
    fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(5))
        .await
        .expect("shutdown");
}

/// Bad input gives a typed error, an unknown group a documented status, a
/// broker going away a counted failed cycle; never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error_or_a_documented_status() {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("mon-bad", 2).await;
    let ok = || monitor(&cluster, "g", &topic);

    // Malformed configuration: typed, before any I/O.
    let invalid = |m: GroupMonitor| m.validate().expect_err("invalid");
    assert_eq!(
        invalid(GroupMonitor::new().group("g").topics(["t"])),
        ConfigError::MissingBootstrapServers
    );
    assert!(matches!(
        invalid(GroupMonitor::new().bootstrap_servers("x:1").topics(["t"])),
        ConfigError::InvalidOption {
            option: "group",
            ..
        }
    ));
    assert_eq!(
        invalid(GroupMonitor::new().bootstrap_servers("x:1").group("g")),
        ConfigError::MissingTopics
    );
    assert_eq!(invalid(ok().topics([""])), ConfigError::EmptyTopicName);
    assert!(matches!(
        invalid(ok().interval(Duration::ZERO)),
        ConfigError::InvalidOption {
            option: "interval",
            ..
        }
    ));
    assert!(matches!(
        invalid(ok().window(Duration::from_millis(10))),
        ConfigError::InvalidOption {
            option: "window",
            ..
        }
    ));
    assert!(matches!(
        invalid(ok().skew_share(1.5)),
        ConfigError::InvalidOption {
            option: "skew_share",
            ..
        }
    ));
    assert!(matches!(
        invalid(ok().current_replicas(0)),
        ConfigError::InvalidOption {
            option: "current_replicas",
            ..
        }
    ));
    assert!(matches!(
        invalid(ok().set("group.id", "x")),
        ConfigError::InvalidOption { option: "set", .. }
    ));
    assert!(matches!(
        invalid(ok().set("fetch.wait.max.ms", "banana")),
        ConfigError::InvalidProperty { .. }
    ));
    let secret = ok().set("sasl.password", "hunter2-secret");
    assert!(!format!("{secret:?}").contains("hunter2"));
    assert!(matches!(
        ok().interval(Duration::ZERO).connect().await,
        Err(MonitorError::Config(_))
    ));

    // Unknown topic, unreachable broker: typed errors from connect.
    match monitor(&cluster, "g", "no-such-topic").connect().await {
        Err(MonitorError::UnknownTopic { topic }) => assert_eq!(topic, "no-such-topic"),
        other => panic!("{other:?}"),
    }
    let t = Instant::now();
    match GroupMonitor::new()
        .bootstrap_servers("127.0.0.1:1")
        .group("g")
        .topics(["t"])
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await
    {
        Err(e @ MonitorError::Unreachable { .. }) => {
            println!("unreachable: {e} ({:?})", t.elapsed())
        }
        other => panic!("{other:?}"),
    }

    // Unknown group: no committed offsets, documented status and diagnosis.
    cluster.produce(&topic, 0, "k", "v", None).await;
    let mut m = monitor(&cluster, &unique("never-existed"), &topic)
        .connect()
        .await
        .expect("connect");
    let r = m.cycle().await.expect("cycle");
    assert_eq!(r.groups[0].diagnosis, Diagnosis::NoOffsets);
    assert!(
        r.groups[0]
            .partitions
            .iter()
            .all(|p| p.status == LagStatus::NoCommittedOffset && p.time_lag.is_none())
    );

    // The broker goes away: the cycle fails with a typed error, counted.
    if let Some(mock) = cluster.mock() {
        let handle = m.handle();
        mock.broker_down(1).expect("broker down");
        let mut m = m;
        let t = Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(20), m.cycle())
            .await
            .expect("a cycle bounded by the request timeout")
            .expect_err("broker down");
        assert!(matches!(e, MonitorError::Kafka { .. }), "{e:?}");
        println!(
            "cycle with the broker down failed in {:?}: {e}",
            t.elapsed()
        );
        assert_eq!(handle.cycles(), (1, 1));
        mock.broker_up(1).expect("broker up");
    }
}

/// Cost of one cycle on 12 partitions of one group, each with lag: the
/// first reads 12 records, the next ones reuse their timestamps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycle_cost_on_12_partitions() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-cost", 12).await;
    cluster.produce_many(&topic, 12, 100).await;
    for p in 0..12 {
        cluster.commit_offset(&group, &topic, p, 10).await;
    }
    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let mut costs = Vec::new();
    for i in 0..6 {
        let r = m.cycle().await.expect("cycle");
        assert_eq!(r.records_read, if i == 0 { 12 } else { 0 });
        assert!(r.groups[0].partitions.iter().all(|p| p.time_lag.is_some()));
        costs.push(r.cycle_duration);
    }
    println!(
        "cycle on 12 partitions: first (12 reads) {:?}, then {:?}",
        costs[0],
        &costs[1..]
    );
    assert!(costs[0] < Duration::from_secs(5));
}

/// A transaction left open: records beyond the last stable offset are not
/// readable under `read_committed` (librdkafka's default), so the group's
/// lag counts to the last stable offset; under `read_uncommitted` to the
/// high watermark.
///
/// Real clusters only (`FRESH_CONSUMER_TEST_BOOTSTRAP`, with transactions
/// enabled): librdkafka's mock broker answers ListOffsets with the high
/// watermark under `read_committed` too (measured: last stable offset 15
/// with 5 records of an open transaction above 10 committed ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_counts_to_the_last_stable_offset_under_read_committed() {
    use rdkafka::producer::{FutureRecord, Producer};
    logs::init();
    let cluster = TestCluster::start();
    if cluster.mock().is_some() {
        println!("skipped: the mock broker has no last stable offset; needs a real cluster");
        return;
    }
    let topic = cluster.topic("mon-lso", 1).await;
    let group = unique("g-mon-lso");
    for i in 0..10 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "committed", None)
            .await;
    }
    cluster.commit_offset(&group, &topic, 0, 10).await;
    let producer = cluster.in_a_transaction("tx-mon-lso").await;
    let timeout = Duration::from_secs(10);
    for i in 0..5 {
        producer
            .send(
                FutureRecord::to(&topic)
                    .partition(0)
                    .key(&format!("t{i}"))
                    .payload("open"),
                timeout,
            )
            .await
            .expect("sent in the transaction");
    }
    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.flush(timeout))
        .await
        .unwrap()
        .expect("flushed");

    let mut committed_view = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let r = committed_view.cycle().await.expect("cycle");
    let p0 = &r.groups[0].partitions[0];
    assert_eq!(
        (p0.high_watermark, p0.last_stable, p0.committed),
        (15, 10, Some(10)),
        "{p0:?}"
    );
    assert_eq!(
        p0.offset_lag,
        Some(0),
        "read_committed: nothing readable waits"
    );
    assert_eq!(p0.time_lag, Some(Duration::ZERO));

    let mut uncommitted_view = monitor(&cluster, &group, &topic)
        .read_committed(false)
        .connect()
        .await
        .expect("connect");
    let r = uncommitted_view.cycle().await.expect("cycle");
    let p0 = &r.groups[0].partitions[0];
    assert_eq!(
        p0.offset_lag,
        Some(5),
        "read_uncommitted counts to the high watermark"
    );

    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.abort_transaction(timeout))
        .await
        .unwrap()
        .expect("aborted");
}

/// An idle transactional partition: its last record is a commit marker,
/// which no consumer receives, so a consumer that handled everything
/// commits the offset before it (offset lag 1 by the offsets). The probe
/// reads past the marker to the end without a record: caught up, lag 0,
/// and the group `idle` however long it stays so (it read `dead` once the
/// window passed, before the probe told markers from records).
///
/// Real clusters only (`FRESH_CONSUMER_TEST_BOOTSTRAP`, with transactions
/// enabled): librdkafka's mock broker writes no transaction markers
/// (measured: high watermark 10 after a committed transaction of 10
/// records). The rule itself is unit-tested in `monitor::judge`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_transactional_partition_is_caught_up_not_dead() {
    use rdkafka::producer::Producer;
    logs::init();
    let cluster = TestCluster::start();
    if cluster.mock().is_some() {
        println!("skipped: the mock broker writes no transaction markers; needs a real cluster");
        return;
    }
    let topic = cluster.topic("mon-txn", 1).await;
    let group = unique("g-mon-txn");
    let producer = cluster.in_a_transaction("tx-mon-txn").await;
    let timeout = Duration::from_secs(10);
    for i in 0..10 {
        producer
            .send(
                FutureRecord::to(&topic)
                    .partition(0)
                    .key(&format!("t{i}"))
                    .payload("committed"),
                timeout,
            )
            .await
            .expect("sent in the transaction");
    }
    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.commit_transaction(timeout))
        .await
        .unwrap()
        .expect("committed");
    // The coordinator writes the commit marker after EndTxn has answered
    // (WriteTxnMarkers): the high watermark moves past the records a moment
    // after `commit_transaction` returned (0 right after it on Apache Kafka
    // 4.3.1, read with librdkafka's default `read_committed`).
    let high = wait_for(
        WAIT,
        "the commit marker written after the records",
        || async { cluster.high_watermarks(&topic, 1).await[0] },
        |h| *h > 10,
    )
    .await;
    println!("10 records in a committed transaction: high watermark {high}");
    // A consumer handled the 10 records and committed after the last.
    cluster.commit_offset(&group, &topic, 0, 10).await;

    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let started = Instant::now();
    let mut last = None;
    // Past the window (1 s in `monitor`), several cycles.
    while started.elapsed() < Duration::from_secs(3) || last.is_none() {
        last = Some(m.cycle().await.expect("cycle"));
    }
    let r = last.unwrap();
    let p0 = &r.groups[0].partitions[0];
    assert_eq!(p0.committed, Some(10), "{p0:?}");
    assert_eq!(p0.offset_lag, Some(0), "{p0:?}");
    assert_eq!(p0.time_lag, Some(Duration::ZERO), "{p0:?}");
    assert_eq!(p0.status, LagStatus::Ok, "{p0:?}");
    assert_eq!(r.groups[0].diagnosis, Diagnosis::Idle, "{:?}", r.groups[0]);
}
