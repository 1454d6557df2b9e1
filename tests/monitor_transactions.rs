//! The group monitor beside a transactional member whose transaction is
//! open with offsets for the group (`send_offsets_to_transaction` done, no
//! commit yet: a member killed mid-transaction leaves exactly this until
//! its successor fences it or `transaction.timeout.ms` aborts it).
//!
//! An offset fetch under `read_committed` asks for stable offsets only
//! (KIP-447), and the broker answers `UNSTABLE_OFFSET_COMMIT` while such
//! offsets are pending: a monitor reading that way saw nothing for the
//! group for the whole transaction (every cycle failed at its request
//! timeout). It must read the offsets committed so far, and the new ones
//! once the transaction commits.
//!
//! Real clusters only: librdkafka's mock broker keeps no pending
//! transactional offsets (its TxnOffsetCommit stores nothing) and never
//! answers `UNSTABLE_OFFSET_COMMIT`.

mod support;

use std::time::{Duration, Instant};

use fresh_consumer::monitor::{GroupMonitor, Monitor, MonitorReport};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::Producer;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::wait::WAIT;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The committed offset the report gives for the group's partition 0.
fn committed(report: &MonitorReport, group: &str) -> Option<i64> {
    let g = report
        .groups
        .iter()
        .find(|g| g.group == group)
        .unwrap_or_else(|| panic!("group {group} not in the report"));
    g.partitions
        .iter()
        .find(|p| p.partition == 0)
        .expect("partition 0 in the report")
        .committed
}

/// One cycle, timed: it must answer well inside its request timeout.
async fn cycle(monitor: &mut Monitor, what: &str) -> MonitorReport {
    let started = Instant::now();
    let report = monitor
        .cycle()
        .await
        .unwrap_or_else(|e| panic!("{what}: the cycle failed: {e}"));
    println!("{what}: cycle took {:?}", started.elapsed());
    report
}

/// Runs cycles (each must succeed) until the group's committed offset on
/// partition 0 reads `want`, for up to [`WAIT`]; returns that report.
async fn until_committed(
    monitor: &mut Monitor,
    group: &str,
    want: i64,
    what: &str,
) -> MonitorReport {
    let deadline = Instant::now() + WAIT;
    loop {
        let report = cycle(monitor, what).await;
        let seen = committed(&report, group);
        if seen == Some(want) {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: committed {seen:?}, not {want}, after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Group `g` has committed 4 on a 10-record partition; a transactional
/// producer adds offset 7 for `g` to an open transaction. A monitor naming
/// `g`, and one discovering it, both read 4 (offset lag 6) while the
/// transaction is open, and 7 once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_transactional_offsets_do_not_blind_the_monitor() {
    logs::init();
    let cluster = TestCluster::start();
    if cluster.mock().is_some() {
        eprintln!(
            "skipped: the mock broker keeps no pending transactional offsets and never answers UNSTABLE_OFFSET_COMMIT; needs a real cluster"
        );
        return;
    }
    let topic = cluster.topic("mon-txn", 1).await;
    let group = unique("g-mon-txn");
    for i in 0..10 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "plain", None)
            .await;
    }
    cluster.commit_offset(&group, &topic, 0, 4).await;

    let settings = |m: GroupMonitor| {
        m.bootstrap_servers(cluster.bootstrap())
            .topics([topic.as_str()])
            .request_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(3))
    };
    let mut named = settings(GroupMonitor::new().group(&group))
        .connect()
        .await
        .expect("connect the monitor that names the group");
    let wanted = group.clone();
    let mut discovering = settings(GroupMonitor::new().discover_groups(move |g| g == wanted))
        .connect()
        .await
        .expect("connect the discovering monitor");
    assert_eq!(
        committed(&cycle(&mut named, "before").await, &group),
        Some(4)
    );

    // The transaction: offset 7 for the group, pending.
    let producer = cluster.in_a_transaction("mon-txn").await;
    let member: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("group.id", &group)
        .create()
        .expect("the group's metadata holder");
    let metadata = member.group_metadata().expect("group metadata");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(&topic, 0, Offset::Offset(7))
        .unwrap();
    let p = producer.clone();
    tokio::task::spawn_blocking(move || {
        p.send_offsets_to_transaction(&offsets, &metadata, TIMEOUT)
    })
    .await
    .unwrap()
    .expect("offsets added to the transaction");

    for (monitor, what) in [
        (&mut named, "named, transaction open"),
        (&mut discovering, "discovered, transaction open"),
    ] {
        // The committed 4 is there from the start: the first cycle answers.
        let report = until_committed(monitor, &group, 4, what).await;
        let lag = report.groups[0].partitions[0].offset_lag;
        assert_eq!(lag, Some(6), "{what}: offset lag from the committed 4");
    }

    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.commit_transaction(TIMEOUT))
        .await
        .unwrap()
        .expect("transaction committed");
    // EndTxn answers once the commit is decided; the coordinator then
    // writes the markers, and the group's offsets become 7 when the group
    // coordinator reads its marker: wait for that, with a deadline.
    until_committed(&mut named, &group, 7, "named, committed").await;
    until_committed(&mut discovering, &group, 7, "discovered, committed").await;
}
