//! The in-process retention early warning (issue 17, item 7): a consumer
//! whose committed offset stands still while retention moves the log start
//! toward it exports a shrinking `fresh_consumer.partition.retention.margin`
//! and an estimate of the time left (`...retention.eta`) before any record
//! is lost, then a negative margin once records were deleted unread.
//!
//! Needs the mock broker: it keeps at most 5 MiB per partition, so producing
//! more moves the log start (the only way to move it there; it implements no
//! DeleteRecords). Skipped on a real cluster.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::time::Duration;

use fresh_consumer::Record;
use fresh_consumer::metrics::{PARTITION_RETENTION_ETA, PARTITION_RETENTION_MARGIN};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::metrics::{Attrs, partition_attrs};
use support::run;
use support::wait::wait_for;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// The value of gauge `name`'s point with exactly `attrs`, if exported.
fn gauge(metrics: &TestMetrics, name: &str, attrs: &Attrs) -> Option<f64> {
    metrics
        .metric(name, |m| {
            let values: Vec<f64> = match m.data() {
                AggregatedMetrics::I64(MetricData::Gauge(g)) => g
                    .data_points()
                    .filter(|p| &to_attrs(p.attributes()) == attrs)
                    .map(|p| p.value() as f64)
                    .collect(),
                AggregatedMetrics::F64(MetricData::Gauge(g)) => g
                    .data_points()
                    .filter(|p| &to_attrs(p.attributes()) == attrs)
                    .map(|p| p.value())
                    .collect(),
                other => panic!("{name} is not a gauge: {other:?}"),
            };
            values.first().copied()
        })
        .flatten()
}

fn to_attrs<'a>(kvs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Attrs {
    kvs.map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

/// The group committed 30 (of 40 records of 100 KB) and its handler hangs
/// on record 30, so the committed offset stays; 400 KB more per step push
/// the mock's 5 MiB retention, and its log start moves toward 30 and past
/// it. At every step the gauge is read once it agrees with the broker's log
/// start (statistics every 100 ms): the margin shrinks step by step, an
/// estimate of the time left appears while it is positive, and it turns
/// negative (records deleted unread) before the consumer has processed,
/// or lost, anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_margin_shrinks_with_an_estimate_before_records_are_lost() {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("retention-warning", 1).await;
    let group = unique("g-retention-warning");
    cluster.produce_bulk(&topic, 0, 40, 100_000).await;
    cluster.commit_offset(&group, &topic, 0, 30).await;

    let metrics = TestMetrics::new();
    let release = CancellationToken::new();
    let handler = {
        let release = release.clone();
        move |_r: Record| {
            let release = release.clone();
            async move {
                release.cancelled().await;
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let consumer = run::start(
        cluster
            .consumer(&group, &topic, handler)
            .statistics_interval(Duration::from_millis(100))
            .meter_provider(metrics.provider()),
    );
    let p0 = partition_attrs(&topic, 0, &group);

    let mut margins = Vec::new();
    let mut etas = Vec::new();
    for step in 0..40 {
        // The mock keeps about 52 records of 100 KB; on a real cluster
        // DeleteRecords moves the log start as far.
        let (lo, _) = cluster.apply_retention(&topic, 0, 52).await;
        // The gauge agrees with the broker once a statistics report
        // carried the new log start.
        let margin = wait_for(
            WAIT,
            &format!("the margin gauge at 30 - {lo} (step {step})"),
            || async {
                metrics.flush().await.expect("flush the metrics");
                gauge(&metrics, PARTITION_RETENTION_MARGIN, &p0)
            },
            |m| *m == Some((30 - lo) as f64),
        )
        .await
        .unwrap();
        let eta = gauge(&metrics, PARTITION_RETENTION_ETA, &p0);
        margins.push(margin as i64);
        etas.push(eta);
        if margin < 0.0 {
            break;
        }
        cluster.produce_bulk(&topic, 0, 4, 100_000).await;
    }
    println!("margins {margins:?}\netas {etas:?}");
    assert!(
        margins.last().is_some_and(|&m| m < 0),
        "the log start passed the committed offset within 40 steps: {margins:?}"
    );
    assert!(margins.windows(2).all(|w| w[1] <= w[0]), "{margins:?}");
    let before: Vec<usize> = (0..margins.len())
        .filter(|&i| margins[i] > 0 && margins[i] < 30)
        .collect();
    assert!(
        !before.is_empty(),
        "a shrinking positive margin before the overrun: {margins:?}"
    );
    assert!(
        before.iter().any(|&i| etas[i].is_some_and(|e| e > 0.0)),
        "an estimate of the time left while the margin was positive: {etas:?}"
    );
    // While the log start had not moved, there was no estimate (the
    // documented absence), and none once the margin was negative.
    assert_eq!(etas[0], None, "{etas:?}");
    assert_eq!(*etas.last().unwrap(), None, "{etas:?}");
    release.cancel();
    consumer.stop().await;
}
