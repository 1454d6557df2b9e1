//! A topic deleted and created again under a running member (issue 31,
//! item 1): the member's position is above the new log's high watermark,
//! the library restarts the partition lower down, and the records now at
//! those lower offsets are new. Each is handled and committed; none is
//! skipped as a redelivery of the old log's record at the same offset.
//!
//! Real clusters only: the mock broker implements neither DeleteTopics nor
//! a log that starts again at 0.

mod support;

use std::time::Duration;

use support::handled::Seen;
use support::kafka::{TestCluster, unique};
use support::logs;
use support::run::start;
use support::wait::{WAIT, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_recreated_topic_are_handled_not_skipped() {
    recreated(true).await;
}

/// The same through the poll loop's hand-over (queues not split).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_recreated_topic_are_handled_without_split_queues() {
    recreated(false).await;
}

async fn recreated(split_queues: bool) {
    logs::init();
    let cluster = TestCluster::start();
    if !cluster.is_real() {
        eprintln!("skipped: needs a real cluster (the mock broker cannot delete a topic)");
        return;
    }
    let topic = unique("recreated");
    cluster.create_topic(&topic, 1).await;
    for i in 0..20 {
        cluster
            .produce(&topic, 0, &format!("old-{i}"), "old", None)
            .await;
    }
    let group = unique("g-recreated");
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, seen.recorder())
            .statistics_interval(Duration::from_millis(200))
            .split_partition_queues(split_queues),
    );
    wait_for(
        WAIT,
        "the old log handled",
        || async { seen.of(0) },
        |o| o.len() == 20,
    )
    .await;
    cluster.wait_committed(&group, &topic, &[20]).await;

    cluster.delete_topic(&topic).await;
    // The broker refuses to create a topic of the same name while the old
    // one's deletion is in progress.
    wait_for(
        Duration::from_secs(30),
        "the topic created again",
        || cluster.try_create_topic(&topic, 1),
        |created| *created,
    )
    .await;
    for i in 0..5 {
        cluster
            .produce(&topic, 0, &format!("new-{i}"), "new", None)
            .await;
    }
    let want: Vec<i64> = (0..20).chain(0..5).collect();
    wait_for(
        Duration::from_secs(60),
        "the new log's 5 records handled after the old 20",
        || async { seen.of(0) },
        |o| *o == want,
    )
    .await;
    cluster.wait_committed(&group, &topic, &[5]).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_received, 25);
    assert_eq!(summary.records_succeeded, 25);
}
