//! The plumbing of `examples/traces.rs`: an instrumented producer (what an
//! OpenTelemetry-instrumented service upstream does), and the span tree
//! printed at the end.
//!
//! The example includes it with `#[path = "support/traces_kit.rs"] mod kit;`
//! (see `mock_broker.rs` next to it for why this folder is not an example);
//! it uses the example's `mock_broker` module.

use std::collections::HashMap;
use std::error::Error;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, global};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::mock_broker::MockBroker;

/// Produces `n` records into `topic` with an instrumented producer: a
/// producer span per record, its context written into the record's headers
/// by the global propagator (`traceparent` with the W3C one).
pub async fn produce_traced(
    broker: &MockBroker,
    provider: &SdkTracerProvider,
    topic: &str,
    n: u64,
) -> Result<(), Box<dyn Error>> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()?;
    let tracer = provider.tracer("order-service");
    for i in 0..n {
        let span = tracer
            .span_builder(format!("send {topic}"))
            .with_kind(SpanKind::Producer)
            .start(&tracer);
        let cx = Context::new().with_span(span);
        let mut carrier: HashMap<String, String> = HashMap::new();
        global::get_text_map_propagator(|p| p.inject_context(&cx, &mut carrier));
        let mut headers = OwnedHeaders::new();
        for (key, value) in &carrier {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let payload = format!("{{\"order\":{i}}}");
        producer
            .send(
                FutureRecord::to(topic)
                    .key(&format!("order-{i}"))
                    .payload(&payload)
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)?;
        cx.span().end();
    }
    Ok(())
}

/// Prints each `process <topic>` span with the producer span it links to
/// and its children; `true` when there are `n`, each with a link and a
/// `load order` child.
pub fn print_tree(spans: &[SpanData], topic: &str, n: u64) -> bool {
    let mut ok = true;
    let process: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == format!("process {topic}"))
        .collect();
    for p in &process {
        let links: Vec<String> = p
            .links
            .iter()
            .map(|l| format!("{}", l.span_context.span_id()))
            .collect();
        println!(
            "{} trace={} span={} links to producer span {:?}",
            p.name,
            p.span_context.trace_id(),
            p.span_context.span_id(),
            links
        );
        for a in &p.attributes {
            println!("    {} = {}", a.key, a.value);
        }
        let children: Vec<&SpanData> = spans
            .iter()
            .filter(|s| s.parent_span_id == p.span_context.span_id())
            .collect();
        for c in &children {
            println!("  └─ {} span={}", c.name, c.span_context.span_id());
        }
        ok &= links.len() == 1 && children.iter().any(|c| c.name == "load order");
    }
    ok && process.len() == n as usize
}
