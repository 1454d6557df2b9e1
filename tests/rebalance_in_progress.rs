//! `fresh_consumer.rebalance.in_progress` over a consumer's life, read back
//! through the test kit's in-memory metrics: 1 while the member joins (from
//! the run's start to its first assignment), 0 once assigned, and 0 again
//! after a second member joined and the partitions were shared (the 1
//! between that revoke and the next assignment is too short to catch
//! without a race; `health::hub`'s unit test covers it). The shipped
//! Prometheus rules keep the lag alerts quiet on it
//! (deploy/prometheus/fresh-consumer-quiet.rules.yml).
//!
//! The join is held open on purpose so that the 1 is seen without a race:
//! with `group.initial.rebalance.delay.ms` 0 an uncontested join takes a few
//! round trips, which a loaded machine's flush loop can miss (a CI run did).
//! A plain rdkafka member (eager `range` assignor) owns the partitions first
//! and stops polling: the classic protocol's join then waits for it to
//! rejoin, which it cannot do before its application serves the revoke. The
//! test sees the 1, then closes that member, and the join completes.
//!
//! Runs on the embedded broker and on a real cluster
//! (`FRESH_CONSUMER_TEST_BOOTSTRAP`).

use std::time::Duration;

use fresh_consumer::Record;
use fresh_consumer::metrics::{MESSAGING_CONSUMER_GROUP_NAME, REBALANCE_IN_PROGRESS};
use fresh_consumer::testing::{TestKafka, TestMetrics, TestRecord, spawn, wait_until};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

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
    let holder = hold_the_group(&kafka, &group, &topic).await;
    let first = spawn(
        kafka
            .consumer(ok, &group, [topic.as_str()])
            .meter_provider(metrics.provider()),
    );
    // The holder has not rejoined: the join cannot complete.
    wait_until(WAIT, "joining: the gauge reads 1", || async {
        metrics.flush().await.unwrap();
        gauge(&metrics) == vec![1.0]
    })
    .await
    .unwrap();
    assert!(
        first.health().snapshot().partitions.is_empty(),
        "assigned while another member held the group's join"
    );
    // Closing serves the revoke and leaves the group (on the mock broker
    // the join then completes at its rebalance timer, session.timeout.ms
    // - 1 s).
    tokio::task::spawn_blocking(move || drop(holder))
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

/// A member of `group` (eager `range` assignor, the classic protocol) that
/// owns both partitions of `topic` and, once returned, is never polled
/// again: a later member's join waits for it until it is closed.
async fn hold_the_group(kafka: &TestKafka, group: &str, topic: &str) -> BaseConsumer {
    let holder: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka.bootstrap_servers())
        .set("group.id", group)
        .set("partition.assignment.strategy", "range")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .create()
        .expect("the holding member");
    holder.subscribe(&[topic]).unwrap();
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + WAIT;
        while holder.assignment().map(|a| a.count()).unwrap_or(0) < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the holding member was not assigned within {WAIT:?}"
            );
            let _ = holder.poll(Duration::from_millis(50));
        }
        holder
    })
    .await
    .unwrap()
}
