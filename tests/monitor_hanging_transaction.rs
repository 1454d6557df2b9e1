//! Records behind a hanging transaction (issue 45, defect 7), the way it was
//! found: a plain librdkafka consumer **process** (auto commit every 5 s,
//! `read_committed`) has read everything, then a transactional producer
//! opens a transaction, writes records to every partition and hangs. The
//! monitor runs as a service with `fresh-monitor`'s **defaults** (5 s
//! cycles, a 60 s window, `stall_after` 30 s; the library's own are 10 s,
//! 300 s and 60 s) beside `fresh-monitor --keda-grpc` (at its defaults):
//! - while it hangs, the report shows the records (high watermark above the
//!   last stable offset, `transaction_open_for` growing) and, from
//!   `stall_after` on, diagnoses `open_transaction` (it read `idle`, lag 0,
//!   for as long as the transaction hung); the scaler holds at 1 replica;
//! - when the transaction commits, its records (stamped 90 s ago, past the
//!   60 s lag threshold) become readable at once: no cycle reads
//!   `consumer_bound` and the scaler never asks for more than 1 replica (it
//!   asked for 3 and kept them), and the group is idle again.
//!
//! Real clusters only: librdkafka's mock broker does not describe groups
//! (the scaler counts from the members), and its transactions are a model
//! that writes no transaction markers (see `tests/monitor.rs`), not the
//! brokers' last stable offset this is about.

mod support;

#[allow(clippy::all, clippy::pedantic, dead_code, missing_docs, unreachable_pub)]
#[rustfmt::skip]
#[path = "keda/externalscaler.rs"]
mod externalscaler;
#[path = "keda/process.rs"]
mod scaler;

use std::time::{Duration, Instant};

use fresh_consumer::monitor::{Diagnosis, GroupMonitor, GroupReport, MonitorHandle};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use scaler::{Scaler, object};
use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, acked, now_ms, unique};
use support::wait::{poll_until, wait_until};

const PARTITIONS: i32 = 3;
/// Records of the hanging transaction, per partition.
const IN_TRANSACTION: i64 = 93;
const WAIT: Duration = Duration::from_secs(90);

/// A plain librdkafka consumer process ([`child::plain_consumer`]), no work
/// per record. A no-op unless started by the test below.
#[test]
fn plain_consumer() {
    if let Some(target) = child::target() {
        child::plain_consumer(&target, Duration::ZERO);
    }
}

/// The group's report in the latest cycle after `after` (its `taken_at`).
fn group_after(
    monitor: &MonitorHandle,
    group: &str,
    after: std::time::SystemTime,
) -> Option<(std::time::SystemTime, GroupReport)> {
    let r = monitor.latest()?;
    (r.taken_at > after).then(|| {
        let g = r.groups.iter().find(|g| g.group == group).cloned();
        (r.taken_at, g.expect("the group in the report"))
    })
}

/// KEDA's Kafka scaler's rule on the same offsets: it counts lag to the
/// high watermark (`kafka-consumer-groups` shows the same).
fn kedas_rule(g: &GroupReport) -> u64 {
    let lag: i64 = g
        .partitions
        .iter()
        .map(|p| p.high_watermark - p.committed.unwrap_or(p.high_watermark))
        .sum();
    scaler::kedas_rule(lag.max(0) as u64, PARTITIONS as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_behind_a_hanging_transaction_are_shown_and_do_not_scale_the_group() {
    support::logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("hanging-txn", PARTITIONS).await;
    if !cluster.is_real() {
        eprintln!("skipped: needs a broker that describes groups and keeps a last stable offset");
        return;
    }
    let dir = std::env::temp_dir().join(unique("fresh-hanging-txn"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let command = child::command("plain_consumer", &cluster, &group, &topic);
    let mut consumer = ChildProcess::spawn("plain", &dir, command);

    // The group reads everything produced so far.
    cluster.produce_many(&topic, PARTITIONS, 10).await;
    wait_until(WAIT, "the plain consumer committed everything", || async {
        cluster.committed(&group, &topic, PARTITIONS).await == vec![10; PARTITIONS as usize]
    })
    .await;
    consumer.assert_running();

    let monitor = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(&group)
        .topics([&topic])
        // `fresh-monitor`'s defaults (`--interval`, `--window`, `--stall-after`).
        .interval(Duration::from_secs(5))
        .window(Duration::from_secs(60))
        .stall_after(Duration::from_secs(30))
        .connect()
        .await
        .expect("monitor");
    let handle = monitor.handle();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(monitor.run_until(stop.clone().cancelled_owned()));
    let mut scaler = Scaler::spawn(&cluster, &group, &topic, &[]);
    let o = object("hanging", &group, &topic);
    let mut keda = scaler.client(&o, WAIT).await;

    // A transaction opened and left hanging (its timeout well past the
    // test), its records stamped 90 s ago.
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("transactional.id", unique("hanging"))
        .set("transaction.timeout.ms", "300000")
        .create()
        .expect("transactional producer");
    let p = producer.clone();
    tokio::task::spawn_blocking(move || {
        p.init_transactions(Duration::from_secs(10))?;
        p.begin_transaction()
    })
    .await
    .unwrap()
    .expect("transaction begun");
    let opened = Instant::now();
    let old = now_ms() - 90_000;
    let mut pending = Vec::new();
    for p in 0..PARTITIONS {
        for i in 0..IN_TRANSACTION {
            let key = format!("t{i}");
            pending.push(
                producer
                    .send_result(
                        FutureRecord::to(&topic)
                            .partition(p)
                            .key(&key)
                            .payload("in a transaction")
                            .timestamp(old),
                    )
                    .expect("queued"),
            );
        }
    }
    acked(pending).await;

    // Shown, then diagnosed: every cycle counts the records behind the last
    // stable offset, and `open_transaction` once it has stood 30 s.
    let mut since = std::time::SystemTime::UNIX_EPOCH;
    let mut before = Vec::new();
    let diagnosed = loop {
        let (at, g) = poll_until(WAIT, || group_after(&handle, &group, since))
            .await
            .expect("a monitor cycle");
        since = at;
        consumer.assert_running();
        let behind: Vec<i64> = g
            .partitions
            .iter()
            .map(|p| p.high_watermark - p.last_stable)
            .collect();
        eprintln!(
            "{:?}: behind {behind:?} open {:?} committed {:?} {}",
            opened.elapsed(),
            g.partitions
                .iter()
                .map(|p| p.transaction_open_for)
                .collect::<Vec<_>>(),
            g.partitions.iter().map(|p| p.committed).collect::<Vec<_>>(),
            g.diagnosis.as_str()
        );
        if behind != vec![IN_TRANSACTION; PARTITIONS as usize] {
            // The cycle read before the producer's records landed.
            continue;
        }
        assert_eq!(g.total_lag, 0, "nothing a read_committed consumer can read");
        assert!(
            g.partitions
                .iter()
                .all(|p| p.transaction_open_for.is_some()),
            "{g:#?}"
        );
        let replicas = keda.replicas(&o).await;
        assert_eq!(replicas, 1, "the scaler holds the running count");
        before.push((g.diagnosis.as_str(), kedas_rule(&g), replicas));
        if g.diagnosis == Diagnosis::OpenTransaction {
            break g;
        }
        assert_eq!(g.diagnosis, Diagnosis::Idle, "{g:#?}");
        assert!(
            opened.elapsed() < WAIT,
            "no open_transaction within {WAIT:?}: {before:?}"
        );
    };
    let after = opened.elapsed();
    assert_eq!(diagnosed.named.len(), PARTITIONS as usize, "{diagnosed:#?}");
    assert!(
        after >= Duration::from_secs(30),
        "diagnosed after {after:?}, before stall_after"
    );
    eprintln!(
        "hanging transaction: {} records behind the LSO on {PARTITIONS} partitions; cycles (diagnosis, KEDA's rule, our replicas) {before:?}; open_transaction {after:.1?} after the transaction opened",
        IN_TRANSACTION * i64::from(PARTITIONS)
    );

    // The transaction commits: 90-second-old records readable at once.
    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.commit_transaction(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("committed");
    let committed_at = Instant::now();
    let want = vec![10 + IN_TRANSACTION + 1; PARTITIONS as usize];
    let mut after_commit = Vec::new();
    loop {
        let (at, g) = poll_until(WAIT, || group_after(&handle, &group, since))
            .await
            .expect("a monitor cycle");
        since = at;
        consumer.assert_running();
        let replicas = keda.replicas(&o).await;
        after_commit.push((g.diagnosis.as_str(), kedas_rule(&g), replicas));
        assert_ne!(
            g.diagnosis,
            Diagnosis::ConsumerBound,
            "{after_commit:?}: {g:#?}"
        );
        assert!(replicas <= 1, "the scaler asked for {after_commit:?}");
        let drained = g
            .partitions
            .iter()
            .map(|p| p.committed.unwrap_or(0))
            .collect::<Vec<_>>()
            == want;
        if drained && g.diagnosis == Diagnosis::Idle && after_commit.len() >= 3 {
            break;
        }
        assert!(
            committed_at.elapsed() < WAIT,
            "not idle again within {WAIT:?}: {after_commit:?}"
        );
    }
    eprintln!(
        "after the commit: cycles (diagnosis, KEDA's rule, our replicas) {after_commit:?}; idle again {:.1?} after it",
        committed_at.elapsed()
    );
    scaler::scenario_row(
        "a transaction hanging (279 records behind the last stable offset, 1 consumer, 3 partitions)",
        &format!("{:?}", before.iter().map(|c| c.1).collect::<Vec<_>>()),
        &format!("{:?}", before.iter().map(|c| c.2).collect::<Vec<_>>()),
        &format!("idle, then open_transaction {after:.1?} after it opened"),
    );
    scaler::scenario_row(
        "the same transaction committed (records 90 s old readable at once)",
        &format!("{:?}", after_commit.iter().map(|c| c.1).collect::<Vec<_>>()),
        &format!("{:?}", after_commit.iter().map(|c| c.2).collect::<Vec<_>>()),
        &format!("{:?}", after_commit.iter().map(|c| c.0).collect::<Vec<_>>()),
    );
    stop.cancel();
    let _ = running.await;
    let _ = consumer.stop().await;
    let _ = scaler.child.start_kill();
    let _ = std::fs::remove_dir_all(&dir);
}
