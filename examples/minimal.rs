//! The smallest service worth deploying: a handler per record, a
//! dead-letter topic for records that can never succeed, metrics over OTLP
//! from the standard `OTEL_*` variables, and a graceful stop on SIGTERM.
//!
//! ```sh
//! KAFKA_BOOTSTRAP=localhost:9092 KAFKA_TOPIC=orders cargo run --example minimal
//! ```
use std::time::Duration;

use fresh_consumer::failure::DeadLetter;
use fresh_consumer::metrics;
use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::{BoxError, FreshConsumer, OnExhausted, Record, permanent};

/// An order is a JSON object with an `id`. Return `Err` to have the record
/// retried; nothing after it in its partition is committed until it
/// succeeds. A `permanent` error is not retried.
async fn handle(record: Record) -> Result<(), BoxError> {
    let order: serde_json::Value =
        serde_json::from_slice(record.payload().unwrap_or_default()).map_err(permanent)?;
    let Some(id) = order.get("id") else {
        return Err(permanent("an order without an id"));
    };
    println!("order {id} at {}:{}", record.partition(), record.offset());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.into());
    // OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_METRIC_EXPORT_INTERVAL, ...
    let provider = OtlpConfig::from_env()?.build()?;

    let summary = FreshConsumer::new(handle)
        .bootstrap_servers(env("KAFKA_BOOTSTRAP", "localhost:9092"))
        .group_id(env("KAFKA_GROUP", "orders-service"))
        .topics([env("KAFKA_TOPIC", "orders")])
        // Records whose attempts run out, or that fail permanently, go to
        // `<topic>.dlt`. Without this line such a record stops its
        // partition until it succeeds (the default, `OnExhausted::Block`).
        .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
        .meter_provider(&provider)
        // Until SIGTERM or Ctrl-C; then the final commit and metrics flush.
        .run()
        .await?;

    eprintln!(
        "stopped: {} orders handled, {} dead-lettered",
        summary.records_succeeded, summary.records_dead_lettered
    );
    metrics::shutdown(&provider, Duration::from_secs(5)).await?;
    Ok(())
}
