//! Freshness objectives over the wire: exact good/late counters, the
//! threshold as an event-age bucket boundary, and the in-process evaluation.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fresh_consumer::metrics::*;
use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::{Record, slo::FreshnessObjective};
use support::kafka::{TestCluster, now_ms, unique};
use support::logs;
use support::metrics::{partition_attrs, with};
use support::otlp_receiver::{OtlpReceiver, attrs, histogram_points, sum_total_matching};
use support::run::start;
use support::wait::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objectives_count_good_and_late_exactly_and_join_the_age_buckets() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("slo", 1).await;
    let other = unique("other-topic");
    let now = now_ms();
    // Ages at production: 10 s, 20 s and 25 s are within 30 s if handled
    // within 5 s (the consumer's start and group join included, on a loaded
    // machine too); 31 s and 120 s are not, however late. One record has no
    // timestamp.
    for age_ms in [10_000, 20_000, 25_000, 31_000, 120_000] {
        cluster
            .produce(&topic, 0, "k", "v", Some(now - age_ms))
            .await;
    }
    cluster.produce(&topic, 0, "k", "no-ts", Some(-1)).await;

    let receiver = OtlpReceiver::start().await;
    let provider = OtlpConfig::new()
        .with_endpoint(receiver.endpoint())
        .with_export_interval(Duration::from_secs(60))
        .build()
        .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&handled);
    let consumer = cluster
        .consumer(&group, &topic, move |_r: Record| {
            h.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok::<(), std::io::Error>(()))
        })
        .freshness_objective(FreshnessObjective::new(Duration::from_secs(30), 0.99))
        // Applies to another topic only: its threshold still joins the
        // buckets, but it counts nothing here.
        .freshness_objective(FreshnessObjective::new(Duration::from_secs(45), 0.9).topic(&other))
        .meter_provider(&provider);
    let health = consumer.health_handle();
    let run = start(consumer);
    wait_until(Duration::from_secs(20), "6 records handled", || async {
        handled.load(Ordering::SeqCst) == 6
    })
    .await;

    // In process: 3 good, 2 late (no_timestamp left out): compliance 0.6,
    // burn rate 0.4 / 0.01 = 40.
    let snapshot = health.snapshot();
    assert_eq!(snapshot.objectives.len(), 2);
    let o = &snapshot.objectives[0];
    assert_eq!(o.threshold, Duration::from_secs(30));
    assert_eq!((o.short.good, o.short.bad), (3, 2));
    assert!((o.short.compliance.unwrap() - 0.6).abs() < 1e-9);
    assert!((o.long.burn_rate.unwrap() - 40.0).abs() < 1e-6);
    assert_eq!(
        (
            snapshot.objectives[1].short.good,
            snapshot.objectives[1].short.bad
        ),
        (0, 0)
    );

    run.stop().await;
    let slo = receiver
        .wait_for_metric(SLO_MESSAGES, Duration::from_secs(10))
        .await;
    assert_eq!(slo.unit, "{message}");
    let count = |result: &str| {
        sum_total_matching(
            Some(&slo),
            &attrs(&[
                (SLO_THRESHOLD, "30"),
                (SLO_RESULT, result),
                (MESSAGING_DESTINATION_NAME, topic.as_str()),
                (MESSAGING_DESTINATION_PARTITION_ID, "0"),
                (MESSAGING_CONSUMER_GROUP_NAME, group.as_str()),
            ]),
        )
    };
    assert_eq!(count("good"), 3.0);
    assert_eq!(count("late"), 2.0);
    assert_eq!(count("no_timestamp"), 1.0);
    assert_eq!(count("dead_lettered") + count("skipped"), 0.0);
    assert_eq!(
        sum_total_matching(Some(&slo), &attrs(&[(SLO_THRESHOLD, "45")])),
        0.0,
        "the 45 s objective is for another topic"
    );

    // Both thresholds are bucket boundaries, so a histogram SLI is exact:
    // the bucket ending at 30 s holds exactly the good records.
    let age = receiver.latest_metric(EVENT_AGE).unwrap();
    let (points, _) = histogram_points(&age);
    let p = &points[0];
    assert!(
        p.bounds.contains(&30.0) && p.bounds.contains(&45.0),
        "{:?}",
        p.bounds
    );
    let i30 = p.bounds.iter().position(|b| *b == 30.0).unwrap();
    let within: u64 = p.bucket_counts[..=i30].iter().sum();
    assert_eq!(within, 3);
    assert_eq!(p.count, 5);
    fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(5))
        .await
        .ok();
}

#[test]
fn invalid_objectives_are_config_errors() {
    use fresh_consumer::{ConfigError, FreshConsumer};
    let base = || {
        FreshConsumer::new(|_r: Record| std::future::ready(Ok::<(), std::io::Error>(())))
            .bootstrap_servers("127.0.0.1:1")
            .group_id("g")
            .topics(["t"])
    };
    for o in [
        FreshnessObjective::new(Duration::ZERO, 0.99),
        FreshnessObjective::new(Duration::from_secs(30), 1.0),
        FreshnessObjective::new(Duration::from_secs(30), -0.5),
    ] {
        assert!(matches!(
            base().freshness_objective(o).validate(),
            Err(ConfigError::InvalidOption {
                option: "freshness_objective",
                ..
            })
        ));
    }
}

/// Before any record, each objective's results are exported at 0 for every
/// assigned partition it applies to, so `good / (good + late)` reads 0
/// instead of empty (issue 17, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objectives_export_zero_points_on_assignment() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("slo-zero", 2).await;
    let receiver = OtlpReceiver::start().await;
    let provider = OtlpConfig::new()
        .with_endpoint(receiver.endpoint())
        .with_export_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let consumer = cluster
        .consumer(&group, &topic, |_r: Record| {
            std::future::ready(Ok::<(), std::io::Error>(()))
        })
        .freshness_objective(FreshnessObjective::new(Duration::from_secs(30), 0.99))
        .meter_provider(&provider);
    let run = start(consumer);
    let wanted = |p: i32, result: &str| {
        with(
            &partition_attrs(&topic, p, &group),
            &[(SLO_THRESHOLD, "30"), (SLO_RESULT, result)],
        )
    };
    wait_until(
        Duration::from_secs(20),
        "zero points for every result on both partitions",
        || async {
            [0, 1].into_iter().all(|p| {
                ["good", "late", "dead_lettered", "skipped", "no_timestamp"]
                    .into_iter()
                    .all(|r| receiver.point(SLO_MESSAGES, &wanted(p, r)) == Some(0.0))
            })
        },
    )
    .await;
    run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(5)).await;
}
