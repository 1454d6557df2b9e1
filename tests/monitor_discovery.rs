//! Group discovery (`GroupMonitor::discover_groups`): a group that commits
//! on a watched topic is watched from the next cycle, one that is deleted is
//! dropped with its gauges, a pattern that matches nothing watches nothing,
//! and more groups than the cap is a typed error.
//!
//! Discovery lists the cluster's groups (ListGroups), which librdkafka's
//! mock broker does not answer: there the test checks the documented error
//! (`MonitorError::Kafka`, operation `list groups`, every cycle); on a real
//! cluster (`FRESH_CONSUMER_TEST_BOOTSTRAP`) it checks the discovery.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use fresh_consumer::metrics::{MESSAGING_CONSUMER_GROUP_NAME, MONITOR_LAG};
use fresh_consumer::monitor::{GroupMonitor, Monitor, MonitorError};
use fresh_consumer::testing::TestMetrics;
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use support::kafka::{TestCluster, unique};
use support::logs;

fn monitor(cluster: &TestCluster, topic: &str, prefix: &str) -> GroupMonitor {
    let prefix = prefix.to_owned();
    GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .topics([topic])
        .interval(Duration::from_millis(250))
        .window(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(10))
        .discover_groups(move |g| g.starts_with(&prefix))
}

/// The groups of one cycle's report, by name.
async fn watched(m: &mut Monitor) -> Vec<String> {
    let r = m.cycle().await.expect("cycle");
    r.groups.iter().map(|g| g.group.clone()).collect()
}

/// The consumer groups the latest export of the lag gauge has points for.
async fn exported_groups(metrics: &TestMetrics) -> BTreeSet<String> {
    metrics.flush().await.expect("flush the test metrics");
    metrics
        .metric(MONITOR_LAG, |m| match m.data() {
            AggregatedMetrics::I64(MetricData::Gauge(g)) => g
                .data_points()
                .flat_map(|p| p.attributes())
                .filter(|kv| kv.key.as_str() == MESSAGING_CONSUMER_GROUP_NAME)
                .map(|kv| kv.value.to_string())
                .collect(),
            other => panic!("{MONITOR_LAG} is not an i64 gauge: {other:?}"),
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_picks_up_new_groups_within_a_cycle_and_drops_gone_ones() {
    logs::init();
    let (cluster, topic, _) = TestCluster::with_topic("mon-disc", 2).await;
    cluster.produce_many(&topic, 2, 5).await;
    let prefix = unique("disc");
    let (a, b) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let metrics = TestMetrics::new();
    let mut m = monitor(&cluster, &topic, &prefix)
        .meter(metrics.provider().meter("test"))
        .connect()
        .await
        .expect("connect");

    if !cluster.is_real() {
        // The mock broker does not answer ListGroups: every cycle fails
        // with the documented error, and nothing is reported.
        for _ in 0..2 {
            let e = m.cycle().await.expect_err("no ListGroups on the mock");
            assert!(
                matches!(
                    e,
                    MonitorError::Kafka {
                        operation: "list groups",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
        assert!(m.handle().latest().is_none());
        eprintln!(
            "skipped the discovery itself: the mock broker has no ListGroups; needs a real cluster"
        );
        return;
    }

    // Nothing committed yet under the prefix: nothing watched.
    assert!(watched(&mut m).await.is_empty());
    cluster.commit_offset(&a, &topic, 0, 2).await;
    assert_eq!(
        watched(&mut m).await,
        [a.as_str()],
        "picked up in one cycle"
    );
    cluster.commit_offset(&b, &topic, 1, 3).await;
    assert_eq!(watched(&mut m).await, [a.clone(), b.clone()]);
    assert_eq!(
        exported_groups(&metrics).await,
        BTreeSet::from([a.clone(), b.clone()])
    );

    // Deleted: dropped in the next cycle, with its gauges.
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .create()
        .expect("admin client");
    let deleted = admin
        .delete_groups(&[a.as_str()], &AdminOptions::new())
        .await
        .expect("delete groups");
    assert!(deleted.iter().all(|r| r.is_ok()), "{deleted:?}");
    assert_eq!(watched(&mut m).await, [b.as_str()], "dropped in one cycle");
    assert_eq!(exported_groups(&metrics).await, BTreeSet::from([b.clone()]));

    // A pattern that matches nothing: an empty report, not an error.
    let mut none = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .topics([topic.as_str()])
        .discover_groups(|g| g.starts_with("no-group-has-this-prefix-"))
        .connect()
        .await
        .expect("connect");
    assert!(watched(&mut none).await.is_empty());

    // More groups than the cap: a typed error naming the counts.
    cluster.commit_offset(&a, &topic, 0, 1).await;
    let mut capped = monitor(&cluster, &topic, &prefix)
        .max_groups(1)
        .connect()
        .await
        .expect("connect");
    let e = capped.cycle().await.expect_err("above the cap");
    assert!(
        matches!(
            e,
            MonitorError::TooMany {
                what: "groups",
                count: 2,
                max: 1
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "2 groups to watch, above the cap of 1");
}

/// Too many partitions for the cap: `connect` refuses with the counts;
/// too many named groups: `validate` refuses before any I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caps_are_typed_errors() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("mon-cap", 3).await;
    // (A real cluster knows a new topic everywhere once it took records.)
    cluster.produce_many(&topic, 3, 1).await;
    let e = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(&group)
        .topics([topic.as_str()])
        .max_partitions(2)
        .connect()
        .await
        .expect_err("3 partitions above a cap of 2");
    assert!(
        matches!(
            e,
            MonitorError::TooMany {
                what: "partitions",
                count: 3,
                max: 2
            }
        ),
        "{e:?}"
    );
    let e = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .groups(["a", "b"])
        .topics([topic.as_str()])
        .max_groups(1)
        .validate()
        .expect_err("2 named groups above a cap of 1");
    assert!(e.to_string().contains("max_groups"), "{e}");
    // No group and no discovery: nothing to watch.
    let e = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .topics([topic.as_str()])
        .validate()
        .expect_err("nothing to watch");
    assert!(e.to_string().contains("or discover them"), "{e}");
}
