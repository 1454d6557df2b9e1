//! Issue 46, bad input: a topic with a single replica on a cluster of
//! three brokers (under-replicated: its broker's loss stops it). The
//! consumer's health report names it on each of its partitions
//! (`HealthReason::UnderReplicated`, informational: the status stays
//! healthy) and the group monitor's report carries each partition's
//! replication and says so; a topic with three replicas, all in sync, is
//! reported as neither.
//!
//! Runs on the mock broker with three brokers, and on a real cluster of at
//! least two brokers (`.ci/kafka start --nodes 3`); skipped on a real
//! cluster of one broker, where a single replica is all there can be.

mod support;

use std::time::Duration;

use fresh_consumer::health::Replication;
use fresh_consumer::monitor::GroupMonitor;
use fresh_consumer::{
    Record,
    health::{HealthReason, HealthStatus},
};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use support::kafka::{TestCluster, unique};
use support::run::{start, wait_snapshot};
use support::wait::WAIT;

/// The brokers in the cluster's metadata.
fn brokers(bootstrap: &str) -> usize {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("metadata client");
    c.fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata")
        .brokers()
        .len()
}

/// Creates a topic of `partitions` partitions with `replicas` replicas.
async fn topic_with_replicas(
    cluster: &TestCluster,
    prefix: &str,
    partitions: i32,
    replicas: i32,
) -> String {
    let name = unique(prefix);
    if let Some(mock) = cluster.mock() {
        mock.create_topic(&name, partitions, replicas)
            .expect("create topic on the mock");
        return name;
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .create()
        .expect("admin");
    let t = NewTopic::new(&name, partitions, TopicReplication::Fixed(replicas))
        .set("retention.ms", "-1");
    for r in admin
        .create_topics([&t], &AdminOptions::new())
        .await
        .expect("create topic")
    {
        r.expect("topic created");
    }
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_replica_on_three_brokers_is_reported_by_health_and_monitor() {
    let cluster = TestCluster::start_with(3);
    let n = brokers(cluster.bootstrap());
    if n < 2 {
        eprintln!(
            "skipped: needs a cluster of several brokers (this one has {n}); runs on the mock's three and on `.ci/kafka start --nodes 3`"
        );
        return;
    }
    let single = topic_with_replicas(&cluster, "single-replica", 2, 1).await;
    let full = topic_with_replicas(&cluster, "three-replicas", 2, 3).await;
    cluster.produce_many(&single, 2, 5).await;
    cluster.produce_many(&full, 2, 5).await;
    let want = Replication {
        replicas: 1,
        in_sync: 1,
        brokers: n as u32,
    };
    for (topic, under) in [(&single, true), (&full, false)] {
        let group = unique("under-replicated-g");
        let run = start(cluster.consumer(&group, topic, |_r: Record| async {
            Ok::<(), fresh_consumer::BoxError>(())
        }));
        let s = wait_snapshot(
            &run.health,
            WAIT,
            "every record handled and replication read",
            |s| {
                (0..2).all(|p| {
                    s.partition(topic, p).is_some_and(|r| {
                        r.committed_offset == Some(5)
                            && (!under || r.reasons.contains(&HealthReason::UnderReplicated(want)))
                    })
                })
            },
        )
        .await;
        if !under {
            let s = wait_snapshot(&run.health, WAIT, "replication read", |s| {
                (0..2).all(|p| {
                    s.partition(topic, p)
                        .is_some_and(|r| r.replication.is_some())
                })
            })
            .await;
            for p in 0..2 {
                let r = s.partition(topic, p).expect("partition");
                assert_eq!(
                    r.replication.map(|r| (r.replicas, r.in_sync)),
                    Some((3, 3)),
                    "{s}"
                );
                assert!(
                    !r.reasons
                        .iter()
                        .any(|r| matches!(r, HealthReason::UnderReplicated(_))),
                    "three replicas in sync are not under-replicated:\n{s}"
                );
            }
        } else {
            assert_eq!(s.status, HealthStatus::Healthy, "informational:\n{s}");
            let text = s.to_string();
            assert!(
                text.contains(&format!("a single replica on a cluster of {n} brokers")),
                "{text}"
            );
        }
        run.stop().await;

        let mut m = GroupMonitor::new()
            .bootstrap_servers(cluster.bootstrap())
            .group(&group)
            .topics([topic.as_str()])
            .request_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect the monitor");
        let report = m.cycle().await.expect("cycle");
        for p in &report.groups[0].partitions {
            let r = p
                .replication
                .expect("the monitor reads each partition's replication");
            assert_eq!(
                r.is_under_replicated(),
                under,
                "{topic}-{}: {r:?}",
                p.partition
            );
            if under {
                assert_eq!(r, want);
            } else {
                assert_eq!((r.replicas, r.in_sync), (3, 3));
            }
        }
    }
}
