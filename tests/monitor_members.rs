//! The group monitor's member count for the KIP-848 consumer protocol
//! (`group.protocol=consumer`): a classic group that a KIP-848 member joins
//! is upgraded online by Kafka (4.0+), and the classic ListGroups and
//! DescribeGroups then call it `Dead`. The monitor describes such groups
//! with ConsumerGroupDescribe (librdkafka's DescribeConsumerGroups), so a
//! member that joins or dies shows in `GroupReport::members` for both kinds
//! of group. Found by the chaos soak: a member SIGKILLed while the group was
//! upgraded stayed invisible from outside until the group went back to
//! classic (45 s).
//!
//! On Apache Kafka the counts are asserted; librdkafka's mock broker
//! implements neither describe API, so there the count stays `None` while
//! the monitor keeps reporting (the diagnosis does not depend on it).

mod support;

use std::sync::Arc;
use std::time::Duration;

use fresh_consumer::Record;
use fresh_consumer::monitor::{GroupMonitor, MonitorReport};
use support::kafka::TestCluster;
use support::logs;
use support::run;
use support::wait::wait_for;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(45);

/// Set to `0` for a cluster older than Kafka 4.0 (no KIP-848).
const KIP848_ENV: &str = "FRESH_CONSUMER_TEST_KIP848";

async fn ok(_r: Record) -> Result<(), std::io::Error> {
    Ok(())
}

/// The latest report's member count for the watched group, once a report
/// satisfies `cond`.
async fn members(
    handle: &fresh_consumer::monitor::MonitorHandle,
    what: &str,
    cond: impl Fn(Option<u32>) -> bool,
) -> Arc<MonitorReport> {
    let probe = || std::future::ready(handle.latest());
    wait_for(WAIT, what, probe, |r| {
        r.as_deref().is_some_and(|r| cond(r.groups[0].members))
    })
    .await
    .expect("a report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_a_group_upgraded_to_the_consumer_protocol_are_counted() {
    if std::env::var_os(support::kafka::BOOTSTRAP_ENV).is_some()
        && std::env::var(KIP848_ENV).is_ok_and(|v| v == "0")
    {
        eprintln!("skipped: {KIP848_ENV}=0 (a cluster older than Kafka 4.0 has no KIP-848)");
        return;
    }
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-848", 4).await;
    cluster.produce_many(&topic, 4, 10).await;
    let monitor = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(&group)
        .topics([&topic])
        .interval(Duration::from_millis(250))
        .request_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let handle = monitor.handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(monitor.run_until(stop.clone().cancelled_owned()));
    let real = cluster.is_real();
    let count = |want: u32| move |m: Option<u32>| if real { m == Some(want) } else { m.is_none() };

    // A classic member: DescribeGroups counts it.
    let classic = run::start(cluster.consumer(&group, &topic, ok));
    members(&handle, "one classic member", count(1)).await;
    // A KIP-848 member joins: Kafka upgrades the group to the consumer
    // protocol, which the classic listing calls `Dead`.
    let kip848 = run::start(cluster.consumer_kip848(&group, &topic, ok));
    let r = members(&handle, "two members, one classic", count(2)).await;
    if real {
        let state = r.groups[0].state.as_deref();
        assert!(
            state.is_some_and(|s| !s.eq_ignore_ascii_case("dead")),
            "{state:?}"
        );
    }
    // The classic member leaves: one KIP-848 member is counted.
    classic.stop().await;
    members(&handle, "one KIP-848 member", count(1)).await;
    // And none once the last member left (the group is empty, not gone:
    // it has committed offsets).
    kip848.stop().await;
    members(&handle, "no member", count(0)).await;
    stop.cancel();
    task.await.expect("monitor task");
}
