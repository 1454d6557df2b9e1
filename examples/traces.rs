//! Traces: a process span per handler attempt, linked to the producer's
//! span, with the handler's own `tracing` spans nested under it.
//!
//! ```text
//! cargo run --example traces                  # mock broker, spans printed as a tree
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 cargo run --example traces
//! ```
//!
//! The example starts librdkafka's mock broker, produces three records with
//! an instrumented producer (a producer span each, its context written into
//! the record's `traceparent` header by the W3C propagator), and consumes
//! them with a [`FreshConsumer`] given a tracer provider. The handler is
//! ordinary `tracing` code: `tracing-opentelemetry`'s layer turns its
//! `tracing` spans into OpenTelemetry spans, and because the library runs
//! the handler's future inside the process span's OpenTelemetry context, a
//! `tracing` span without a `tracing` parent gets the process span as its
//! parent. The wiring is:
//!
//! ```text
//! provider  = SdkTracerProvider (OTLP exporter, or in-memory here)
//! global    = set_text_map_propagator(TraceContextPropagator)   // read `traceparent`
//! tracing   = registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer(..)))
//! consumer  = FreshConsumer::new(handle).tracer_provider(&provider)
//! ```
//!
//! Without `OTEL_EXPORTER_OTLP_*ENDPOINT` the spans go to an in-memory
//! exporter and are printed as a tree at the end; the example exits non-zero
//! unless each process span links to its producer span and has the
//! handler's span as a child. With an endpoint they are exported over OTLP
//! (`fresh_consumer::otlp::OtlpConfig::from_env`, the same `OTEL_*`
//! variables as the metrics).
//!
//! The instrumented producer and the printed tree are in
//! `examples/support/traces_kit.rs`.

#[path = "support/traces_kit.rs"]
mod kit;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::{FreshConsumer, Record};
use opentelemetry::global;
use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use mock_broker::MockBroker;

const TOPIC: &str = "orders";
const RECORDS: u64 = 3;

/// The handler: plain `tracing` instrumentation, nothing OpenTelemetry-specific.
async fn handle(record: Record) -> Result<(), std::io::Error> {
    let span = tracing::info_span!("load order", order.offset = record.offset());
    async {
        // ... a database call, an HTTP request ...
        tokio::time::sleep(Duration::from_millis(5)).await;
        tracing::info!("order loaded");
    }
    .instrument(span)
    .await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, Box<dyn Error>> {
    let otlp = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
    let memory = InMemorySpanExporter::default();
    let provider = if otlp {
        OtlpConfig::from_env()?
            .with_service_name("traces-example")
            .tracer_provider()?
    } else {
        SdkTracerProvider::builder()
            .with_simple_exporter(memory.clone())
            .build()
    };
    global::set_text_map_propagator(TraceContextPropagator::new());
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("traces-example")))
        .with(tracing_subscriber::fmt::layer().with_target(false))
        .with(tracing_subscriber::EnvFilter::new("info,rdkafka=warn"))
        .init();

    let broker = MockBroker::start()?;
    broker.create_topic(TOPIC, 1)?;

    // An instrumented producer, as a service upstream would have: a
    // producer span per record, its context in the record's headers.
    kit::produce_traced(&broker, &provider, TOPIC, RECORDS).await?;

    let handled = Arc::new(AtomicU64::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (handled, done) = (Arc::clone(&handled), Arc::clone(&done));
        move |record: Record| {
            let (handled, done) = (Arc::clone(&handled), Arc::clone(&done));
            async move {
                handle(record).await?;
                if handled.fetch_add(1, Ordering::SeqCst) + 1 == RECORDS {
                    done.notify_one();
                }
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let summary = FreshConsumer::new(handler)
        .bootstrap_servers(broker.bootstrap())
        .group_id("traces-example")
        .topics([TOPIC])
        .set("fetch.wait.max.ms", "10")
        .tracer_provider(&provider)
        .run_until(async move {
            tokio::select! {
                () = done.notified() => {}
                () = fresh_consumer::shutdown_signal() => {}
            }
        })
        .await?;
    println!("handled {} records", summary.records_succeeded);
    // Read before the shutdown, which empties the in-memory exporter.
    let ok = otlp || kit::print_tree(&memory.get_finished_spans()?, TOPIC, RECORDS);
    // A blocking call: off the runtime's threads.
    let shut = provider.clone();
    let _ = tokio::task::spawn_blocking(move || shut.shutdown()).await;
    Ok(ok && summary.records_succeeded == RECORDS)
}
