//! A three-hop pipeline (orders -> invoices -> payments -> booked) whose
//! last hop measures freshness from the first hop's event, not from the
//! last write.
//!
//! ```text
//! cargo run --example pipeline
//! ```
//!
//! The example starts librdkafka's mock broker, produces 10 orders, and
//! runs three consumers: `invoicing` (orders -> invoices, 400 ms of work
//! per record) and `paying` (invoices -> payments, 300 ms) send their
//! outputs through the library (`FreshConsumer::outputs`,
//! `fresh_consumer::output::outputs()`), so each output carries the origin time of
//! the order it came from; `booking` (payments, 200 ms) reads it with
//! `origin_time(true)`. A fourth consumer, `booking-plain`, reads the same
//! payments without it. It prints the event age each recorded
//! (`fresh_consumer.event.age`, read back from an in-memory exporter) and
//! exits non-zero unless every end-to-end age is at least the sum of the
//! three delays.

#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::{
    BoxError, FreshConsumer, Handler, Record,
    output::{Output, OutputConfig},
};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, PeriodicReader, SdkMeterProvider, Temporality,
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use mock_broker::MockBroker;

const ORDERS: usize = 10;
const DELAYS_MS: [u64; 3] = [400, 300, 200];

/// A hop that works `delay_ms` per record, then sends it on to `to` (or
/// nowhere), and counts the records it finished.
fn hop(
    to: Option<&'static str>,
    delay_ms: u64,
    done: Arc<AtomicU64>,
) -> impl Handler<Error = BoxError> {
    move |r: Record| {
        let done = Arc::clone(&done);
        async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            if let Some(to) = to {
                fresh_consumer::output::outputs()?
                    .send(
                        Output::to(to)
                            .key(r.key().unwrap_or_default())
                            .payload(r.payload().unwrap_or_default()),
                    )
                    .await?;
            }
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<(), BoxError>(())
        }
    }
}

fn consumer<H: Handler>(broker: &MockBroker, group: &str, topic: &str, h: H) -> FreshConsumer<H> {
    FreshConsumer::new(h)
        .bootstrap_servers(broker.bootstrap())
        .group_id(group)
        .topics([topic])
        .set("fetch.wait.max.ms", "10")
        .commit_interval(Duration::from_millis(100))
}

/// A meter provider whose metrics stay in this process.
fn in_memory() -> (SdkMeterProvider, InMemoryMetricExporter) {
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
async fn ages(provider: &SdkMeterProvider, exporter: &InMemoryMetricExporter) -> (f64, f64, u64) {
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

#[tokio::main]
async fn main() -> ExitCode {
    let broker = MockBroker::start().expect("mock broker");
    for topic in ["orders", "invoices", "payments"] {
        broker.create_topic(topic, 1).expect("topic");
    }
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("producer");
    for i in 0..ORDERS {
        let key = format!("order-{i}");
        producer
            .send(
                FutureRecord::to("orders").key(&key).payload("{}"),
                Duration::from_secs(5),
            )
            .await
            .expect("order produced");
    }

    let stop = CancellationToken::new();
    let counts: Vec<Arc<AtomicU64>> = (0..4).map(|_| Arc::default()).collect();
    let (end_to_end, end_to_end_exporter) = in_memory();
    let (plain, plain_exporter) = in_memory();
    let runs = vec![
        tokio::spawn(
            consumer(
                &broker,
                "invoicing",
                "orders",
                hop(Some("invoices"), DELAYS_MS[0], Arc::clone(&counts[0])),
            )
            .outputs(OutputConfig::new())
            .run_until(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            consumer(
                &broker,
                "paying",
                "invoices",
                hop(Some("payments"), DELAYS_MS[1], Arc::clone(&counts[1])),
            )
            .outputs(OutputConfig::new())
            .run_until(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            consumer(
                &broker,
                "booking",
                "payments",
                hop(None, DELAYS_MS[2], Arc::clone(&counts[2])),
            )
            .origin_time(true)
            .meter_provider(&end_to_end)
            .run_until(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            consumer(
                &broker,
                "booking-plain",
                "payments",
                hop(None, DELAYS_MS[2], Arc::clone(&counts[3])),
            )
            .meter_provider(&plain)
            .run_until(stop.clone().cancelled_owned()),
        ),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while counts[2..]
        .iter()
        .any(|c| c.load(Ordering::Relaxed) < ORDERS as u64)
    {
        if tokio::time::Instant::now() > deadline {
            eprintln!("pipeline: not every order was booked within 60 s");
            return ExitCode::FAILURE;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    for run in runs {
        if let Err(e) = run.await.expect("consumer task") {
            eprintln!("pipeline: a consumer failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    let sum = DELAYS_MS.iter().sum::<u64>() as f64 / 1000.0;
    let (min, max, n) = ages(&end_to_end, &end_to_end_exporter).await;
    let (pmin, pmax, pn) = ages(&plain, &plain_exporter).await;
    println!(
        "hops: orders -> invoices ({} ms) -> payments ({} ms) -> booked ({} ms); sum {sum:.1} s",
        DELAYS_MS[0], DELAYS_MS[1], DELAYS_MS[2]
    );
    println!(
        "booking, origin_time(true):   event age min {min:.2} s, max {max:.2} s ({n} records)"
    );
    println!(
        "booking-plain (this hop only): event age min {pmin:.2} s, max {pmax:.2} s ({pn} records)"
    );
    if n as usize == ORDERS && min >= sum {
        ExitCode::SUCCESS
    } else {
        eprintln!("pipeline: the end-to-end age was below the sum of the delays");
        ExitCode::FAILURE
    }
}
