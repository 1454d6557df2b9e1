//! Issue 46, bad input: a `bootstrap.servers` list whose first address is
//! a dead node (nothing listens there). The consumer starts on the other
//! addresses: it joins, handles every record and commits, and its health
//! ends healthy; the group monitor connects and reads the group through the
//! same list. Runs on the mock broker and on Apache Kafka.

mod support;

use std::time::Duration;

use fresh_consumer::monitor::GroupMonitor;
use fresh_consumer::{BoxError, Record, health::HealthStatus};
use support::kafka::TestCluster;
use support::run::{start, wait_snapshot};
use support::wait::WAIT;

/// A loopback address nothing listens on (a port just freed).
fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    format!("127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_first_in_the_bootstrap_list_does_not_stop_the_start() {
    let (cluster, topic, group) = TestCluster::with_topic("bootstrap-dead", 2).await;
    cluster.produce_many(&topic, 2, 10).await;
    let servers = format!("{},{}", dead_address(), cluster.bootstrap());
    let run = start(
        cluster
            .consumer(&group, &topic, |_r: Record| async {
                Ok::<(), BoxError>(())
            })
            .bootstrap_servers(&servers),
    );
    let s = wait_snapshot(&run.health, WAIT, "every record committed, healthy", |s| {
        s.status == HealthStatus::Healthy
            && (0..2).all(|p| {
                s.partition(&topic, p)
                    .is_some_and(|r| r.committed_offset == Some(10))
            })
    })
    .await;
    eprintln!("started through {servers}:\n{s}");
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 20, "{summary:?}");

    let mut monitor = GroupMonitor::new()
        .bootstrap_servers(&servers)
        .group(&group)
        .topics([topic.as_str()])
        .request_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("the monitor connects through the live addresses");
    let report = monitor.cycle().await.expect("cycle");
    let committed: Vec<Option<i64>> = report.groups[0]
        .partitions
        .iter()
        .map(|p| p.committed)
        .collect();
    assert_eq!(committed, [Some(10), Some(10)]);
}
