//! The group monitor against a consumer killed under steady traffic (the
//! case checked from outside in issue 27): the group reads `dead` once every
//! partition with records waiting is frozen, never `stuck` (a poison-record
//! diagnosis) on the way; and the probe's reads do not wait on librdkafka's
//! fetch backoff.
//!
//! Runs on the embedded broker and on a real cluster
//! (`FRESH_CONSUMER_TEST_BOOTSTRAP`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fresh_consumer::Record;
use fresh_consumer::monitor::{Diagnosis, GroupMonitor, LagStatus};
use rdkafka::producer::FutureRecord;
use support::kafka::TestCluster;
use support::logs;
use support::wait::within;

const WAIT: Duration = Duration::from_secs(30);

fn monitor(cluster: &TestCluster, group: &str, topic: &str) -> GroupMonitor {
    GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(group)
        .topics([topic])
        .interval(Duration::from_millis(250))
        .window(Duration::from_secs(3))
        .stall_after(Duration::from_millis(750))
        .lag_threshold(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(3))
}

/// Records keep arriving on every partition before and after the kill. The
/// window (3 s) is four times `stall_after` (0.75 s): before the fix the
/// group read `stuck` from `stall_after` until the window passed. Now it
/// reads `dead` from `stall_after` on, with every partition named and
/// `stalled`, and no cycle after the kill reads `stuck`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_under_steady_traffic_is_dead_never_stuck() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-killed", 3).await;
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.spawn(
        cluster
            .consumer(&group, &topic, |_r: Record| async {
                Ok::<(), std::io::Error>(())
            })
            .run(),
    );
    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    within(WAIT, "every partition committed something", async {
        loop {
            tick.tick().await;
            let r = m.cycle().await.expect("cycle");
            if r.groups[0]
                .partitions
                .iter()
                .all(|p| p.committed.is_some_and(|c| c > 0))
            {
                break;
            }
        }
    })
    .await;
    let killed = Instant::now();
    rt.shutdown_background();

    let mut seen = Vec::new();
    let dead = within(WAIT, "diagnosis dead", async {
        loop {
            tick.tick().await;
            let r = m.cycle().await.expect("cycle");
            seen.push(r.groups[0].diagnosis);
            if r.groups[0].diagnosis == Diagnosis::Dead {
                break r;
            }
        }
    })
    .await;
    println!(
        "dead {:?} after the kill under steady traffic, diagnoses on the way: {seen:?}",
        killed.elapsed()
    );
    assert!(
        !seen.contains(&Diagnosis::Stuck),
        "a killed group is not a poison record: {seen:?}"
    );
    let g = &dead.groups[0];
    assert_eq!(g.named.len(), 3, "{g:?}");
    assert!(g.partitions.iter().all(|p| p.status == LagStatus::Stalled));
    // It stays dead past the window while records keep arriving.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        tick.tick().await;
        let r = m.cycle().await.expect("cycle");
        assert_eq!(r.groups[0].diagnosis, Diagnosis::Dead);
    }
    flowing.store(false, Ordering::Relaxed);
    producer.await.unwrap();
}

/// The probe reads a new record at every partition's committed offset in
/// every cycle (the group commits one record further each time): every
/// cycle reads all of them with a known time lag. Prints each cycle's cost
/// (`-- --nocapture`): with librdkafka's default `fetch.queue.backoff.ms`
/// (1,000 ms) beside the probe's `queued.min.messages=1`, some of these
/// cycles took a second instead of milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cycle_reads_the_new_records_at_the_committed_offsets() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-probe", 6).await;
    cluster.produce_many(&topic, 6, 40).await;
    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("connect");
    let mut costs = Vec::new();
    for c in 0..13 {
        for p in 0..6 {
            cluster.commit_offset(&group, &topic, p, 1 + c).await;
        }
        let r = m.cycle().await.expect("cycle");
        assert_eq!(r.records_read, 6, "cycle {c}");
        assert!(
            r.groups[0].partitions.iter().all(|p| p.time_lag.is_some()),
            "cycle {c}: {r:?}"
        );
        costs.push(r.cycle_duration);
    }
    costs.sort();
    println!(
        "13 cycles reading 6 records each: median {:?}, slowest {:?}",
        costs[6], costs[12]
    );
}
