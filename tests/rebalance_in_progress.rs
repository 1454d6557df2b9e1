//! `fresh_consumer.rebalance.in_progress` over a consumer's life, read back
//! through the test kit's in-memory metrics: 1 while the member joins (from
//! the run's start to its first assignment), 0 once assigned, and 0 again
//! after a second member joined and the partitions were shared (the 1
//! between that revoke and the next assignment is too short to catch
//! without a race; `health::hub`'s unit test covers it). The shipped Prometheus rules keep the lag alerts
//! quiet on it (deploy/prometheus/fresh-consumer-quiet.rules.yml).
//!
//! Runs on the embedded broker and on a real cluster
//! (`FRESH_CONSUMER_TEST_BOOTSTRAP`).

use std::time::Duration;

use fresh_consumer::Record;
use fresh_consumer::metrics::{MESSAGING_CONSUMER_GROUP_NAME, REBALANCE_IN_PROGRESS};
use fresh_consumer::testing::{TestKafka, TestMetrics, TestRecord, spawn, wait_until};

const WAIT: Duration = Duration::from_secs(30);

async fn ok(_r: Record) -> Result<(), std::io::Error> {
    Ok(())
}

fn kafka() -> TestKafka {
    match std::env::var("FRESH_CONSUMER_TEST_BOOTSTRAP") {
        Ok(b) if !b.is_empty() => TestKafka::connect(b).expect("the real cluster"),
        _ => TestKafka::start().expect("the embedded broker"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauge_reads_0_once_assigned_and_comes_back_to_0_after_another_member_joins() {
    let kafka = kafka();
    let suffix = std::process::id();
    let topic = format!("rip-{suffix}");
    let group = format!("rip-group-{suffix}");
    kafka.create_topic(&topic, 2).await.unwrap();
    kafka.produce(&topic, TestRecord::new("v")).await.unwrap();
    let metrics = TestMetrics::new();
    let gauge = |m: &TestMetrics| {
        m.gauge(
            REBALANCE_IN_PROGRESS,
            [(MESSAGING_CONSUMER_GROUP_NAME, group.as_str())],
        )
    };
    let first = spawn(
        kafka
            .consumer(ok, &group, [topic.as_str()])
            .meter_provider(metrics.provider()),
    );
    // The join takes the group's join and sync round trips (and, on Apache
    // Kafka, group.initial.rebalance.delay.ms): long enough to see.
    wait_until(WAIT, "joining: the gauge reads 1", || async {
        metrics.flush().await.unwrap();
        gauge(&metrics) == vec![1.0]
    })
    .await
    .unwrap();
    wait_until(WAIT, "assigned: the gauge reads 0", || async {
        metrics.flush().await.unwrap();
        first.health().snapshot().partitions.len() == 2 && gauge(&metrics) == vec![0.0]
    })
    .await
    .unwrap();
    // A second member: the first one's partitions are revoked (all of them
    // under the classic eager protocol, one under cooperative-sticky), then
    // it is assigned again.
    let second = spawn(kafka.consumer(ok, &group, [topic.as_str()]));
    wait_until(
        WAIT,
        "the partitions shared between the two members",
        || async {
            first.health().snapshot().partitions.len() == 1
                && second.health().snapshot().partitions.len() == 1
        },
    )
    .await
    .unwrap();
    wait_until(WAIT, "assigned again: the gauge reads 0", || async {
        metrics.flush().await.unwrap();
        gauge(&metrics) == vec![0.0]
    })
    .await
    .unwrap();
    second.stop().await.unwrap();
    first.stop().await.unwrap();
}
