//! The plumbing of `examples/pipeline.rs`: the orders produced into the
//! first hop, and the in-memory metrics the event ages are read back from.
//!
//! The example includes it with `#[path = "support/pipeline_kit.rs"] mod kit;`
//! (see `mock_broker.rs` next to it for why this folder is not an example);
//! it uses the example's `mock_broker` module.

use std::time::Duration;

use fresh_consumer::metrics::EVENT_AGE;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, PeriodicReader, SdkMeterProvider, Temporality,
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::mock_broker::MockBroker;

/// Produces `n` orders (`order-0`, `order-1`, ...) into `topic`.
pub async fn produce_orders(broker: &MockBroker, topic: &str, n: usize) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("producer");
    for i in 0..n {
        let key = format!("order-{i}");
        producer
            .send(
                FutureRecord::to(topic).key(&key).payload("{}"),
                Duration::from_secs(5),
            )
            .await
            .expect("order produced");
    }
}

/// A meter provider whose metrics stay in this process.
pub fn in_memory() -> (SdkMeterProvider, InMemoryMetricExporter) {
    let exporter = opentelemetry_sdk::metrics::InMemoryMetricExporterBuilder::new()
        .with_temporality(Temporality::Cumulative)
        .build();
    let reader = PeriodicReader::builder(exporter.clone())
        .with_interval(Duration::from_secs(3600))
        .build();
    (
        SdkMeterProvider::builder().with_reader(reader).build(),
        exporter,
    )
}

/// (min, max, count) of the event ages `exporter` holds.
pub async fn ages(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
) -> (f64, f64, u64) {
    fresh_consumer::metrics::flush(provider, Duration::from_secs(10))
        .await
        .expect("flush");
    let exports = exporter.get_finished_metrics().expect("exported");
    let mut out = (f64::MAX, 0.0_f64, 0);
    for m in exports
        .last()
        .into_iter()
        .flat_map(|e| e.scope_metrics())
        .flat_map(|s| s.metrics())
        .filter(|m| m.name() == EVENT_AGE)
    {
        if let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() {
            for p in h.data_points() {
                out.0 = out.0.min(p.min().unwrap_or(f64::MAX));
                out.1 = out.1.max(p.max().unwrap_or(0.0));
                out.2 += p.count();
            }
        }
    }
    out
}
