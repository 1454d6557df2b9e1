//! A consumer under `read_committed` (librdkafka's default) on a topic a
//! transactional producer writes: records of an open transaction sit between
//! the last stable offset and the high watermark and are not readable, so
//! they are not lag; each committed transaction ends in a commit marker, an
//! offset no consumer receives, so the offset after the last record handled
//! is one below the log end for ever. Neither may read as lag, a stall or a
//! stop.
//!
//! Real clusters only: librdkafka's mock broker answers ListOffsets with
//! the high watermark under `read_committed` and writes no transaction
//! markers (measured in `tests/monitor.rs`).

mod support;

use std::time::Duration;

use fresh_consumer::health::HealthThresholds;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use support::handled::Seen;
use support::kafka::{TestCluster, unique};
use support::logs;
use support::run::{assert_caught_up_for, start, wait_snapshot};
use support::wait::{WAIT, wait_for};

const TIMEOUT: Duration = Duration::from_secs(10);

async fn send_in(producer: &FutureProducer, topic: &str, n: usize, payload: &str) {
    for i in 0..n {
        producer
            .send(
                FutureRecord::to(topic)
                    .partition(0)
                    .key(&format!("t{i}"))
                    .payload(payload),
                TIMEOUT,
            )
            .await
            .expect("sent in the transaction");
    }
    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.flush(TIMEOUT))
        .await
        .unwrap()
        .expect("flushed");
}

/// 10 plain records, then 5 in a transaction held open: the consumer
/// handles the 10, commits 10, and reports lag 0 although the high
/// watermark is 15. The transaction commits: the 5 are handled, the commit
/// marker takes offset 15, the group commits after it, and the partition
/// stays `ok` (lag 0, never `stall`) for longer than `stall_after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_is_not_lag_and_a_commit_marker_is_not_a_stall() {
    logs::init();
    let cluster = TestCluster::start();
    if cluster.mock().is_some() {
        eprintln!(
            "skipped: the mock broker has no last stable offset and writes no transaction markers; needs a real cluster"
        );
        return;
    }
    let topic = cluster.topic("txn-lag", 1).await;
    let group = unique("g-txn-lag");
    for i in 0..10 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "plain", None)
            .await;
    }
    let producer = cluster.in_a_transaction("tx-lag").await;
    send_in(&producer, &topic, 5, "open").await;

    let stall_after = Duration::from_secs(2);
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, seen.recorder())
            .statistics_interval(Duration::from_millis(100))
            .health_thresholds(
                HealthThresholds::default()
                    .with_stall_after(stall_after)
                    .with_no_success_after(Duration::from_secs(3))
                    .with_lag_growth_window(Duration::from_secs(2)),
            ),
    );
    cluster.wait_committed(&group, &topic, &[10]).await;
    let s = wait_snapshot(&run.health, WAIT, "lag 0 below the open transaction", |s| {
        s.partition(&topic, 0)
            .is_some_and(|p| p.lag == Some(0) && p.committed_offset == Some(10))
    })
    .await;
    eprintln!("open transaction:\n{s}");
    assert_eq!(
        seen.of(0),
        (0..10).collect::<Vec<_>>(),
        "nothing of the open transaction"
    );

    let p = producer.clone();
    tokio::task::spawn_blocking(move || p.commit_transaction(TIMEOUT))
        .await
        .unwrap()
        .expect("committed");
    wait_for(
        WAIT,
        "15 records handled",
        || async { seen.count(0) },
        |n| *n == 15,
    )
    .await;
    assert_eq!(seen.of(0), (0..15).collect::<Vec<_>>());
    let (_, high) = cluster.watermarks(&topic, 0).await;
    assert_eq!(high, 16, "the commit marker took offset 15");

    // The group commits past the marker (librdkafka's position after the
    // control batch), and the partition reads caught up.
    cluster.wait_committed(&group, &topic, &[16]).await;
    let s = wait_snapshot(&run.health, WAIT, "caught up after the marker", |s| {
        s.partition(&topic, 0).is_some_and(|p| p.lag == Some(0))
    })
    .await;
    eprintln!("after the commit marker:\n{s}");
    // Longer than stall_after: still ok, nothing waits.
    assert_caught_up_for(&run.health, &topic, stall_after * 2).await;
    let summary = run.stop().await;
    assert_eq!(
        summary.committed.values().copied().collect::<Vec<_>>(),
        vec![16]
    );
}
