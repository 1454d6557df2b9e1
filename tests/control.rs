//! The control handle on a Kafka broker: a paused partition hands no record
//! to the handler, reads `ok` with "paused by the application" for longer
//! than `stall_after`, and resumes where it left off; a paused topic stays
//! paused on partitions assigned by a later rebalance; a rate limit holds
//! within 10 % over 30 s (per consumer) and 10 s (per partition); a handle
//! used before the run, after it, or on a topic not subscribed is refused.
//!
//! Runs on librdkafka's mock broker, or on a real cluster named by
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`. Every wait has a deadline.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::{
    Record,
    control::{ControlError, RateLimit},
    health::{HealthReason, HealthStatus, HealthThresholds, PartitionStatus},
};
use support::handled::Seen;
use support::kafka::{TestCluster, unique};
use support::logs;
use support::run::{start, wait_snapshot};
use support::wait::WAIT;

const STALL_AFTER: Duration = Duration::from_secs(1);

fn thresholds() -> HealthThresholds {
    HealthThresholds::default()
        .with_stall_after(STALL_AFTER)
        .with_no_success_after(STALL_AFTER)
        .with_lag_growth_window(STALL_AFTER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_reads_ok_past_stall_after_and_resumes_where_it_left_off() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("control-pause", 1).await;
    cluster.produce(&topic, 0, "k", "before", None).await;
    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, seen.recorder())
        .health_thresholds(thresholds())
        .statistics_interval(Duration::from_millis(100));
    let control = consumer.control_handle();
    let run = start(consumer);
    cluster.wait_committed(&group, &topic, &[1]).await;

    control.pause_partition(&topic, 0).unwrap();
    assert!(control.is_paused(&topic, 0));
    for i in 0..5 {
        cluster
            .produce(&topic, 0, "k", &format!("during-{i}"), None)
            .await;
    }
    // Health sees the records wait (lag 5), the partition `ok` with the
    // paused reason, and the member healthy, for three times stall_after.
    wait_snapshot(&run.health, WAIT, "lag 5 while paused", |s| {
        s.partition(&topic, 0).is_some_and(|p| p.lag == Some(5))
    })
    .await;
    let until = Instant::now() + 3 * STALL_AFTER;
    let mut looks = 0;
    while Instant::now() < until {
        let s = run.health.snapshot();
        let p = s.partition(&topic, 0).expect("partition 0");
        assert_eq!(p.status, PartitionStatus::Ok, "{s}");
        assert_eq!(p.reasons, [HealthReason::PausedByApplication], "{s}");
        assert_eq!(s.status, HealthStatus::Healthy, "{s}");
        looks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(looks >= 10);
    assert_eq!(seen.of(0), [0], "no record handled while paused");

    control.resume_partition(&topic, 0).unwrap();
    cluster.wait_committed(&group, &topic, &[6]).await;
    let summary = run.stop().await;
    assert_eq!(seen.of(0), [0, 1, 2, 3, 4, 5], "in offset order, none lost");
    assert_eq!(summary.records_succeeded, 6, "{summary:?}");
    assert_eq!(
        control.resume_partition(&topic, 0),
        Err(ControlError::Stopped)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_stays_paused_on_partitions_a_rebalance_assigns() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("control-rebalance", 2).await;
    let seen = Seen::default();
    let consumer = cluster.consumer(&group, &topic, seen.recorder());
    let control = consumer.control_handle();
    let health = consumer.health_handle();
    let first = start(consumer);
    wait_snapshot(&health, WAIT, "both partitions assigned", |s| {
        s.partitions.len() == 2
    })
    .await;
    control.pause_topic(&topic).unwrap();

    // A second member joins (the first gives up a partition) and leaves
    // (the first is assigned it again).
    let other = Seen::default();
    let second = start(cluster.consumer(&group, &topic, other.recorder()));
    wait_snapshot(
        &health,
        WAIT,
        "one partition left to the first member",
        |s| s.partitions.len() == 1,
    )
    .await;
    second.stop().await;
    wait_snapshot(&health, WAIT, "both partitions assigned again", |s| {
        s.partitions.len() == 2
    })
    .await;

    for p in 0..2 {
        cluster.produce(&topic, p, "k", "v", None).await;
    }
    wait_snapshot(&health, WAIT, "lag 1 on each paused partition", |s| {
        s.partitions
            .iter()
            .all(|p| p.lag == Some(1) && p.reasons.contains(&HealthReason::PausedByApplication))
    })
    .await;
    assert_eq!(seen.total(), 0, "{seen:?}");
    assert_eq!(other.total(), 0, "{other:?}");

    control.resume_topic(&topic).unwrap();
    cluster.wait_committed(&group, &topic, &[1, 1]).await;
    let summary = first.stop().await;
    assert_eq!(seen.total(), 2, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_is_refused_before_the_run_and_for_a_topic_not_subscribed() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("control-refused", 1).await;
    let consumer = cluster.consumer(&group, &topic, Seen::default().recorder());
    let control = consumer.control_handle();
    assert_eq!(control.pause_topic(&topic), Err(ControlError::NotStarted));
    let health = consumer.health_handle();
    let run = start(consumer);
    wait_snapshot(&health, WAIT, "partition assigned", |s| {
        s.partitions.len() == 1
    })
    .await;
    let elsewhere = unique("not-subscribed");
    assert_eq!(
        control.pause_partition(&elsewhere, 0),
        Err(ControlError::NotSubscribed { topic: elsewhere })
    );
    assert!(!control.is_paused(&topic, 0));
    run.stop().await;
    assert_eq!(control.pause_topic(&topic), Err(ControlError::Stopped));
}

/// When each record was handed to the handler, by partition.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<(i32, Instant)>>>);

impl Calls {
    fn handler(
        &self,
    ) -> impl Fn(Record) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static
    {
        let calls = self.clone();
        move |r: Record| {
            calls
                .0
                .lock()
                .unwrap()
                .push((r.partition(), Instant::now()));
            std::future::ready(Ok(()))
        }
    }

    /// The span from the first call to the last.
    fn span(&self) -> Duration {
        let c = self.0.lock().unwrap();
        match (c.first(), c.last()) {
            (Some(a), Some(b)) => b.1 - a.1,
            _ => Duration::ZERO,
        }
    }

    /// Calls of `partition` (any with `None`) in the `window` after the
    /// first call.
    fn in_first(&self, window: Duration, partition: Option<i32>) -> usize {
        let c = self.0.lock().unwrap();
        let Some(&(_, t0)) = c.first() else {
            return 0;
        };
        c.iter()
            .filter(|(p, t)| *t - t0 < window && partition.is_none_or(|q| q == *p))
            .count()
    }
}

/// Runs a consumer of a `partitions`-partition topic holding `per_partition`
/// records each, with `limit` set before the records are produced, until
/// its handler calls span `window`; returns the calls.
async fn rate_limited(
    prefix: &str,
    partitions: i32,
    per_partition: usize,
    limit: RateLimit,
    window: Duration,
) -> Calls {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic(prefix, partitions).await;
    let calls = Calls::default();
    let consumer = cluster.consumer(&group, &topic, calls.handler());
    let control = consumer.control_handle();
    let health = consumer.health_handle();
    let run = start(consumer);
    wait_snapshot(&health, WAIT, "every partition assigned", |s| {
        s.partitions.len() == partitions as usize
    })
    .await;
    control.set_rate_limit(limit).unwrap();
    assert_eq!(control.rate_limit(), Some(limit));
    cluster
        .produce_many(&topic, partitions, per_partition)
        .await;
    support::wait::wait_until(window * 2, "calls spanning the window", || {
        let span = calls.span();
        async move { span >= window }
    })
    .await;
    // The member stayed in the group all along: the limit holds workers,
    // never the poll loop.
    let s = health.snapshot();
    assert_eq!(s.partitions.len(), partitions as usize, "{s}");
    run.stop().await;
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_per_consumer_holds_within_ten_percent_over_30_s() {
    let window = Duration::from_secs(30);
    let calls = rate_limited(
        "control-rate",
        3,
        1_400,
        RateLimit::per_consumer(100.0),
        window,
    )
    .await;
    let n = calls.in_first(window, None);
    eprintln!("per consumer, 100 records/s: {n} records in the first 30 s");
    assert!((2_700..=3_300).contains(&n), "{n} records in 30 s at 100/s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_per_partition_holds_within_ten_percent_for_each() {
    let window = Duration::from_secs(10);
    let calls = rate_limited(
        "control-rate-partition",
        2,
        700,
        RateLimit::per_partition(50.0),
        window,
    )
    .await;
    for p in 0..2 {
        let n = calls.in_first(window, Some(p));
        eprintln!("per partition, 50 records/s: partition {p}: {n} records in the first 10 s");
        assert!(
            (450..=550).contains(&n),
            "partition {p}: {n} records in 10 s at 50/s"
        );
    }
}
