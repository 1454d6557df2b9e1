//! The no-`otlp` proof (`bash .ci/run features`): fresh-consumer built
//! without its `otlp` feature runs a consumer on librdkafka's in-process
//! mock broker with the caller's own `SdkMeterProvider`, whose exporter
//! keeps the metrics in memory, and the event-age histogram counts every
//! record handled. Exits non-zero otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::{FreshConsumer, Record};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};

const TOPIC: &str = "orders";
const RECORDS: u64 = 100;

/// An exporter that keeps the event-age histogram's count of the latest
/// export (cumulative temporality: the count so far).
#[derive(Debug, Clone, Default)]
struct EventAgeCount(Arc<AtomicU64>);

impl PushMetricExporter for EventAgeCount {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let count = metrics
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .filter(|m| m.name() == EVENT_AGE)
            .map(|m| match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    h.data_points().map(|p| p.count()).sum()
                }
                _ => 0,
            })
            .sum();
        self.0.store(count, Ordering::SeqCst);
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = MockCluster::new(1)?;
    let bootstrap = broker.bootstrap_servers();
    broker.create_topic(TOPIC, 3, 1)?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()?;
    for i in 0..RECORDS {
        let key = format!("key-{i}");
        producer
            .send(
                FutureRecord::to(TOPIC).key(&key).payload("{}"),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)?;
    }

    let exported = EventAgeCount::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exported.clone()).build())
        .build();

    let handled = Arc::new(AtomicU64::new(0));
    let all_handled = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (handled, all_handled) = (Arc::clone(&handled), Arc::clone(&all_handled));
        move |_record: Record| {
            if handled.fetch_add(1, Ordering::SeqCst) + 1 == RECORDS {
                all_handled.notify_one();
            }
            async { Ok::<(), std::io::Error>(()) }
        }
    };
    // The mock broker's first join waits group.initial.rebalance.delay.ms (3 s).
    let summary = FreshConsumer::new(handler)
        .bootstrap_servers(&bootstrap)
        .group_id("no-otlp")
        .topics([TOPIC])
        .set("fetch.wait.max.ms", "20")
        .meter_provider(&provider)
        .run_until(async {
            let _ = tokio::time::timeout(Duration::from_secs(60), all_handled.notified()).await;
        })
        .await?;
    // The consumer flushed the provider as it stopped; shutting it down
    // exports once more.
    fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(10)).await?;

    let count = exported.0.load(Ordering::SeqCst);
    println!(
        "without otlp: {} records succeeded, {EVENT_AGE} count {count} (want {RECORDS} each)",
        summary.records_succeeded
    );
    if summary.records_succeeded != RECORDS || count != RECORDS {
        return Err("the consumer without otlp did not handle and measure every record".into());
    }
    Ok(())
}
