//! Issue 15: a process span per handler attempt, exported over OTLP to the
//! test receiver, tied to the trace context a real producer wrote into the
//! record's `traceparent` header.
//!
//! Every test produces with its own producer span (kind producer, from the
//! same SDK tracer provider), hands the consumer a tracer provider built by
//! `OtlpConfig::tracer_provider`, and reads the spans the receiver got after
//! the consumer stopped (the consumer flushes the provider at shutdown).
//! None needs the mock's fault injection: they run on a real cluster too.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::TRACE_CONTEXT_MALFORMED;
use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::{
    OnExhausted, Record,
    failure::{DeadLetter, RetryPolicy},
    trace::ProducerContext,
};
use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use support::dead_letters;
use support::kafka::{TestCluster, now_ms};
use support::logs;
use support::metrics::partition_attrs;
use support::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use support::run::start;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);
/// `SpanKind` numbers of the OTLP protocol.
const KIND_PRODUCER: i32 = 4;
const KIND_CONSUMER: i32 = 5;
/// `StatusCode` numbers of the OTLP protocol.
const STATUS_UNSET: i32 = 0;
const STATUS_ERROR: i32 = 2;

/// A receiver and a tracer provider exporting to it (batch processor; the
/// consumer's shutdown flushes it).
async fn wire() -> (OtlpReceiver, SdkTracerProvider) {
    let receiver = OtlpReceiver::start().await;
    let provider = OtlpConfig::new()
        .with_service_name("traces-test")
        .with_traces_endpoint(receiver.traces_endpoint())
        .tracer_provider()
        .expect("tracer provider");
    (receiver, provider)
}

/// A producer span as an instrumented producer makes one: (trace id, span
/// id, the `traceparent` header it wrote).
fn producer_span(tracer: &SdkTracer, topic: &str) -> (String, String, String) {
    let span = tracer
        .span_builder(format!("send {topic}"))
        .with_kind(SpanKind::Producer)
        .start(tracer);
    let cx = Context::new().with_span(span);
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    let sc = cx.span().span_context().clone();
    cx.span().end();
    (
        sc.trace_id().to_string(),
        sc.span_id().to_string(),
        carrier.remove("traceparent").expect("traceparent written"),
    )
}

/// Produces one record with a producer span's `traceparent` to partition 0.
/// Returns (trace id, span id) of the producer span.
async fn produce_traced(
    cluster: &TestCluster,
    tracer: &SdkTracer,
    topic: &str,
    key: &str,
) -> (String, String) {
    let (trace_id, span_id, traceparent) = producer_span(tracer, topic);
    cluster
        .produce_with_headers(
            topic,
            0,
            key,
            "payload",
            Some(now_ms()),
            &[("traceparent", Some(traceparent.as_bytes()))],
        )
        .await;
    (trace_id, span_id)
}

/// The process spans of `topic`, by offset then attempt.
fn process_spans(spans: &[ReceivedSpan], topic: &str) -> Vec<ReceivedSpan> {
    let name = format!("process {topic}");
    let mut out: Vec<ReceivedSpan> = spans.iter().filter(|s| s.name == name).cloned().collect();
    let num = |s: &ReceivedSpan, k: &str| -> i64 { s.attributes[k].parse().expect("an int") };
    out.sort_by_key(|s| {
        (
            num(s, "messaging.kafka.offset"),
            num(s, "fresh_consumer.attempt"),
        )
    });
    out
}

fn count_named(spans: &[ReceivedSpan], name: &str) -> usize {
    spans.iter().filter(|s| s.name == name).count()
}

/// A handler that starts a span through the OpenTelemetry API and one
/// through `tracing` + `tracing-opentelemetry`; both must nest under the
/// process span.
fn nesting_handler(
    tracer: SdkTracer,
) -> impl Fn(Record) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    move |_record: Record| {
        // The OpenTelemetry API: the current context is the process span's.
        let span = tracer.start("handler work");
        drop(span);
        // `tracing`: the layer takes the current OpenTelemetry context as
        // the parent of a span without a `tracing` parent.
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info_span!("tracing work").in_scope(|| {});
        });
        std::future::ready(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_spans_link_to_the_producer_span_and_handler_spans_nest() {
    logs::init();
    let (receiver, provider) = wire().await;
    let tracer = provider.tracer("producer");
    let (cluster, topic, group) = TestCluster::with_topic("traces-link", 1).await;
    let mut producers = Vec::new();
    for i in 0..3 {
        producers.push(produce_traced(&cluster, &tracer, &topic, &format!("key-{i}")).await);
    }

    let run = start(
        cluster
            .consumer(&group, &topic, nesting_handler(provider.tracer("handler")))
            .tracer_provider(&provider)
            .trace_propagator(TraceContextPropagator::new())
            .trace_message_key(true),
    );
    cluster.wait_committed(&group, &topic, &[3]).await;
    run.stop().await;

    let name = format!("process {topic}");
    let spans = receiver
        .wait_for_spans("3 process spans, 6 handler spans", WAIT, |s| {
            count_named(s, &name) == 3
                && count_named(s, "handler work") == 3
                && count_named(s, "tracing work") == 3
        })
        .await;
    let process = process_spans(&spans, &topic);
    assert_eq!(process.len(), 3, "one span per attempt: {process:#?}");
    for (i, (span, (producer_trace, producer_span))) in process.iter().zip(&producers).enumerate() {
        assert_eq!(span.kind, KIND_CONSUMER);
        assert_eq!(span.status_code, STATUS_UNSET, "{span:#?}");
        assert_eq!(span.scope, "fresh-consumer");
        // Linked, not parented: a trace of its own.
        assert_eq!(
            span.links,
            vec![(producer_trace.clone(), producer_span.clone())]
        );
        assert_eq!(span.parent_span_id, "");
        assert_ne!(&span.trace_id, producer_trace);
        let offset = i.to_string();
        let key = format!("key-{i}");
        let want = support::otlp_receiver::attrs(&[
            ("messaging.system", "kafka"),
            ("messaging.destination.name", &topic),
            ("messaging.destination.partition.id", "0"),
            ("messaging.consumer.group.name", &group),
            ("messaging.operation.name", "process"),
            ("messaging.operation.type", "process"),
            ("messaging.kafka.offset", &offset),
            ("messaging.kafka.message.key", &key),
            ("fresh_consumer.attempt", "1"),
            ("fresh_consumer.outcome", "succeeded"),
        ]);
        assert_eq!(span.attributes, want);
        for child in ["handler work", "tracing work"] {
            let nested: Vec<&ReceivedSpan> = spans
                .iter()
                .filter(|s| s.name == child && s.parent_span_id == span.span_id)
                .collect();
            assert_eq!(nested.len(), 1, "{child} under {span:#?}: {spans:#?}");
            assert_eq!(nested[0].trace_id, span.trace_id);
        }
    }
    // The producer spans reached the receiver as well.
    assert_eq!(spans.iter().filter(|s| s.kind == KIND_PRODUCER).count(), 3);
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opted_in_the_producer_span_is_the_parent_through_the_global_propagator() {
    logs::init();
    // The default propagator is the global one.
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let (receiver, provider) = wire().await;
    let tracer = provider.tracer("producer");
    let (cluster, topic, group) = TestCluster::with_topic("traces-parent", 1).await;
    let (producer_trace, producer_span) = produce_traced(&cluster, &tracer, &topic, "k").await;

    let run = start(
        cluster
            .consumer(&group, &topic, nesting_handler(provider.tracer("handler")))
            .tracer_provider(&provider)
            .trace_producer_context(ProducerContext::Parent),
    );
    cluster.wait_committed(&group, &topic, &[1]).await;
    run.stop().await;

    let name = format!("process {topic}");
    let spans = receiver
        .wait_for_spans("the process span and its children", WAIT, |s| {
            count_named(s, &name) == 1 && count_named(s, "tracing work") >= 1
        })
        .await;
    let process = process_spans(&spans, &topic);
    let span = &process[0];
    assert_eq!(span.trace_id, producer_trace, "{span:#?}");
    assert_eq!(span.parent_span_id, producer_span);
    assert!(span.links.is_empty(), "{span:#?}");
    // The key is recorded only when opted in.
    assert!(!span.attributes.contains_key("messaging.kafka.message.key"));
    assert!(
        spans
            .iter()
            .any(|s| s.name == "handler work" && s.parent_span_id == span.span_id)
    );
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_then_succeeded_record_shows_two_attempts_with_their_statuses() {
    logs::init();
    let (receiver, provider) = wire().await;
    let tracer = provider.tracer("producer");
    let (cluster, topic, group) = TestCluster::with_topic("traces-retry", 1).await;
    let (producer_trace, producer_span) = produce_traced(&cluster, &tracer, &topic, "k").await;

    let calls = Arc::new(AtomicU32::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |_r: Record| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if n == 0 {
                Err(std::io::Error::other("database unavailable"))
            } else {
                Ok(())
            })
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(
                RetryPolicy::new()
                    .max_attempts(3)
                    .backoff(Duration::from_millis(10), Duration::from_millis(50)),
            )
            .tracer_provider(&provider)
            .trace_propagator(TraceContextPropagator::new()),
    );
    cluster.wait_committed(&group, &topic, &[1]).await;
    run.stop().await;

    let name = format!("process {topic}");
    let spans = receiver
        .wait_for_spans("two process spans", WAIT, |s| count_named(s, &name) == 2)
        .await;
    let process = process_spans(&spans, &topic);
    let (first, second) = (&process[0], &process[1]);
    assert_eq!(first.attributes["fresh_consumer.attempt"], "1");
    assert_eq!(first.status_code, STATUS_ERROR, "{first:#?}");
    assert_eq!(first.status_message, "database unavailable");
    assert_eq!(first.attributes["error.type"], "handler_error");
    assert_eq!(first.attributes["fresh_consumer.outcome"], "retried");
    assert_eq!(second.attributes["fresh_consumer.attempt"], "2");
    assert_eq!(second.status_code, STATUS_UNSET, "{second:#?}");
    assert!(!second.attributes.contains_key("error.type"));
    assert_eq!(second.attributes["fresh_consumer.outcome"], "succeeded");
    for span in &process {
        assert_eq!(
            span.links,
            vec![(producer_trace.clone(), producer_span.clone())]
        );
    }
    assert_ne!(first.span_id, second.span_id);
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_is_counted_and_the_record_handled() {
    logs::init();
    let (receiver, provider) = wire().await;
    let metrics = TestMetrics::new();
    let tracer = provider.tracer("producer");
    let (cluster, topic, group) = TestCluster::with_topic("traces-malformed", 1).await;
    // Offset 0: not a traceparent; 1: not UTF-8; 2: valid; 3: no header.
    for bad in [&b"00-not-a-trace-context"[..], &[0xff, 0xfe][..]] {
        cluster
            .produce_with_headers(
                &topic,
                0,
                "k",
                "p",
                Some(now_ms()),
                &[("traceparent", Some(bad))],
            )
            .await;
    }
    let (producer_trace, producer_span) = produce_traced(&cluster, &tracer, &topic, "k").await;
    cluster.produce(&topic, 0, "k", "p", Some(now_ms())).await;

    let handled = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let handled = Arc::clone(&handled);
        move |r: Record| {
            handled.lock().unwrap().push(r.offset());
            std::future::ready(Ok::<(), std::io::Error>(()))
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .meter_provider(metrics.provider())
            .tracer_provider(&provider)
            .trace_propagator(TraceContextPropagator::new()),
    );
    cluster.wait_committed(&group, &topic, &[4]).await;
    run.stop().await;
    assert_eq!(*handled.lock().unwrap(), vec![0, 1, 2, 3]);

    metrics.flush().await.expect("flush the metrics");
    assert_eq!(
        metrics.counter_total(TRACE_CONTEXT_MALFORMED, &partition_attrs(&topic, 0, &group)),
        2.0,
        "two unreadable traceparents; a record without one is not malformed"
    );
    let name = format!("process {topic}");
    let spans = receiver
        .wait_for_spans("four process spans", WAIT, |s| count_named(s, &name) == 4)
        .await;
    let process = process_spans(&spans, &topic);
    let links: Vec<usize> = process.iter().map(|s| s.links.len()).collect();
    assert_eq!(links, [0, 0, 1, 0], "{process:#?}");
    assert_eq!(process[2].links[0], (producer_trace, producer_span));
    assert!(process.iter().all(|s| s.status_code == STATUS_UNSET));
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_record_carries_the_process_span_context() {
    logs::init();
    let (receiver, provider) = wire().await;
    let tracer = provider.tracer("producer");
    let (cluster, topic, group) = TestCluster::with_topic("traces-dlt", 1).await;
    let dlt = format!("{topic}.dlt");
    cluster.create_topic(&dlt, 1).await;
    let (producer_trace, _) = produce_traced(&cluster, &tracer, &topic, "k").await;

    let handler = |_r: Record| std::future::ready(Err(std::io::Error::other("poison")));
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(
                RetryPolicy::new()
                    .max_attempts(2)
                    .backoff(Duration::from_millis(10), Duration::from_millis(20)),
            )
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
            .tracer_provider(&provider)
            .trace_propagator(TraceContextPropagator::new()),
    );
    cluster.wait_committed(&group, &topic, &[1]).await;
    run.stop().await;

    let name = format!("process {topic}");
    let spans = receiver
        .wait_for_spans("two process spans", WAIT, |s| count_named(s, &name) == 2)
        .await;
    let process = process_spans(&spans, &topic);
    let last = &process[1];
    assert_eq!(last.attributes["fresh_consumer.outcome"], "dead_lettered");
    assert_eq!(last.status_code, STATUS_ERROR);
    assert_eq!(process[0].attributes["fresh_consumer.outcome"], "retried");

    let parked = read_one(cluster.bootstrap(), &dlt).await;
    let traceparent = parked
        .header("traceparent")
        .flatten()
        .map(|v| String::from_utf8(v.to_vec()).expect("utf-8"))
        .expect("a traceparent on the dead-letter record");
    // Exactly one: the original was replaced, not kept beside it.
    assert_eq!(
        parked
            .headers()
            .iter()
            .filter(|h| h.name == "traceparent")
            .count(),
        1
    );
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], last.trace_id, "the process span's trace");
    assert_eq!(parts[2], last.span_id, "the last attempt's span");
    assert_ne!(parts[1], producer_trace);
    // The trace continues when the record is redriven: the context reads back.
    let cx = TraceContextPropagator::new().extract(&HashMap::from([(
        "traceparent".to_owned(),
        traceparent.clone(),
    )]));
    assert!(cx.span().span_context().is_valid());
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}

/// The one record of partition 0 of `topic`.
async fn read_one(bootstrap: &str, topic: &str) -> Record {
    let bootstrap = bootstrap.to_owned();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", format!("reader-{topic}"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("reader");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .unwrap();
        c.assign(&tpl).expect("assign");
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "reading {topic} timed out");
            match c.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => return dead_letters::to_record(&m),
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => {}
            }
        }
    })
    .await
    .expect("reader thread")
}

/// A batch handler's call is one process span (issue 25): with
/// `messaging.batch.message_count`, the first record's offset, and a link to
/// each record's producer span; never a producer's child, even with
/// `ProducerContext::Parent` (a batch has many producers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_process_span_linked_to_every_producer() {
    logs::init();
    let (receiver, provider) = wire().await;
    let tracer = provider.tracer("producer");
    let (cluster, topic, group) = TestCluster::with_topic("traces-batch", 1).await;
    let mut producers = Vec::new();
    for i in 0..3 {
        producers.push(produce_traced(&cluster, &tracer, &topic, &format!("key-{i}")).await);
    }
    let handler =
        |_batch: fresh_consumer::Batch| async { Ok::<(), fresh_consumer::BatchError>(()) };
    let run = start(
        cluster
            .batched(&group, &topic, handler)
            .tracer_provider(&provider)
            .trace_propagator(TraceContextPropagator::new())
            .trace_producer_context(ProducerContext::Parent),
    );
    cluster.wait_committed(&group, &topic, &[3]).await;
    run.stop().await;

    let name = format!("process {topic}");
    let count = |s: &ReceivedSpan| -> usize {
        s.attributes["messaging.batch.message_count"]
            .parse()
            .expect("an int")
    };
    let spans = receiver
        .wait_for_spans("process spans covering 3 records", WAIT, |s| {
            s.iter()
                .filter(|s| s.name == name)
                .map(count)
                .sum::<usize>()
                == 3
        })
        .await;
    let process = process_spans(&spans, &topic);
    let mut linked = Vec::new();
    let mut first = 0;
    for span in &process {
        assert_eq!(span.kind, KIND_CONSUMER);
        assert_eq!(
            span.parent_span_id, "",
            "a batch span has no parent: {span:#?}"
        );
        assert_eq!(
            span.links.len(),
            count(span),
            "a link per record: {span:#?}"
        );
        assert_eq!(span.attributes["messaging.kafka.offset"], first.to_string());
        assert_eq!(span.attributes["fresh_consumer.outcome"], "succeeded");
        first += count(span);
        linked.extend(span.links.iter().cloned());
    }
    assert_eq!(linked, producers, "every producer span, in offset order");
    let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
}
