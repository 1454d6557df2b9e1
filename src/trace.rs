//! Traces: one process span per handler attempt, tied to the producer's
//! trace context (opt-in with
//! [`FreshConsumer::tracer_provider`](crate::FreshConsumer::tracer_provider)).
//!
//! For each handler attempt the consumer starts a span of kind
//! [`SpanKind::Consumer`] named `process <topic>` (the messaging semantic
//! conventions' process span) with these attributes:
//!
//! | attribute | value |
//! |---|---|
//! | `messaging.system` | `kafka` |
//! | `messaging.destination.name` | the topic |
//! | `messaging.destination.partition.id` | the partition, as a string |
//! | `messaging.consumer.group.name` | the consumer group (`group.id`) |
//! | `messaging.operation.name` | `process` |
//! | `messaging.operation.type` | `process` |
//! | [`MESSAGING_KAFKA_OFFSET`] | the record's offset (int) |
//! | [`MESSAGING_KAFKA_MESSAGE_KEY`] | the record's key, UTF-8 (lossy); only with [`trace_message_key(true)`](crate::FreshConsumer::trace_message_key) |
//! | [`ATTEMPT`] | the attempt number, 1 for the first (int) |
//! | [`OUTCOME`] | what the attempt led to, see [`OUTCOME`] |
//! | `error.type` | on a failed attempt: `handler_error`, `panic`, `timeout` or `permanent` |
//!
//! A failed attempt has the status `Error` with the error's message (and its
//! sources); a succeeded one leaves the status unset, as instrumentation
//! libraries should. The handler's future runs inside the span's
//! [`Context`] ([`FutureExt::with_context`]), so spans the handler starts
//! through the OpenTelemetry API, or through `tracing` with
//! `tracing-opentelemetry`, are its children (see `examples/traces.rs`).
//!
//! **Producer context.** The record's headers are read once per record with
//! the global text-map propagator (`opentelemetry::global::set_text_map_propagator`;
//! note that the global default is a no-op propagator) or the one given to
//! [`trace_propagator`](crate::FreshConsumer::trace_propagator). A valid
//! context is linked from every attempt's span ([`ProducerContext::Link`],
//! the default, as the messaging conventions recommend), or made its parent
//! ([`ProducerContext::Parent`]). A record that has one of the propagator's
//! headers (`traceparent`, `tracestate` for W3C) but no valid context can be
//! read from them (an unparsable `traceparent`, a value that is not UTF-8)
//! is counted in [`crate::metrics::TRACE_CONTEXT_MALFORMED`]
//! and handled without that context: never an error for the record.
//!
//! **Context onward.** A record written to its dead-letter topic carries the
//! context of the process span of its last attempt: the propagator's
//! headers (`traceparent`, `tracestate`) of the original record are
//! replaced with the process span's, so a redriven record continues the
//! trace.
//!
//! **Cost.** Without a tracer provider no span is created, nothing is
//! extracted or injected, and a handler attempt's only extra work is a test
//! of an empty `Option`. With one, each attempt allocates its span, its
//! attribute list and its context; see `benches/README.md` for measured
//! ratios.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use opentelemetry::metrics::{Counter, Meter};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    FutureExt, Link, SpanContext, SpanKind, Status, TraceContextExt, Tracer, TracerProvider,
    WithContext,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue, StringValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::metrics::{
    MESSAGING_CONSUMER_GROUP_NAME, MESSAGING_DESTINATION_NAME, MESSAGING_DESTINATION_PARTITION_ID,
    MESSAGING_OPERATION_NAME, MESSAGING_OPERATION_TYPE, MESSAGING_SYSTEM, TRACE_CONTEXT_MALFORMED,
};
use crate::record::Record;

/// Span attribute `messaging.kafka.offset`: the record's offset (int).
pub const MESSAGING_KAFKA_OFFSET: &str = "messaging.kafka.offset";
/// Span attribute `messaging.kafka.message.key`: the record's key as UTF-8
/// (invalid bytes replaced by U+FFFD). Only with
/// [`trace_message_key(true)`](crate::FreshConsumer::trace_message_key):
/// keys may carry personal data.
pub const MESSAGING_KAFKA_MESSAGE_KEY: &str = "messaging.kafka.message.key";
/// Span attribute `messaging.batch.message_count`: the records a batch
/// handler's process span covers (int; only on batch spans, see
/// [`FreshConsumer::batched`](crate::FreshConsumer::batched)).
pub const MESSAGING_BATCH_MESSAGE_COUNT: &str = "messaging.batch.message_count";
/// Span attribute `fresh_consumer.attempt`: the handler attempt this span
/// covers, 1 for the first (int).
pub const ATTEMPT: &str = "fresh_consumer.attempt";
/// Span attribute `fresh_consumer.outcome`: what the library did after the
/// attempt: `succeeded`; `retried` (another attempt follows after a
/// backoff); `dead_lettered` (written to the dead-letter topic; the span
/// ends once the broker acknowledged the write); `retry_tier` (written to
/// its next retry tier under
/// [`OnExhausted::RetryTopics`](crate::OnExhausted::RetryTopics), the tier
/// record carrying this span's context); `skipped` (given up and
/// committed past); `blocked` (attempts ran out under
/// [`OnExhausted::Block`](crate::OnExhausted::Block): retried at the capped
/// backoff); `stopped` (the partition was revoked or the consumer is
/// shutting down: the record stays uncommitted for the next owner, even when
/// the attempt succeeded).
pub const OUTCOME: &str = "fresh_consumer.outcome";

/// What the producer's trace context (read from the record's headers) is to
/// the process span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProducerContext {
    /// The process span starts a trace of its own and links to the
    /// producer's span (the messaging conventions' recommendation; what
    /// Prosody calls `follows_from`). The default.
    #[default]
    Link,
    /// The process span is a child of the producer's span, in the
    /// producer's trace (Prosody's `child`). Its sampling follows the
    /// producer's with the SDK's default parent-based sampler.
    Parent,
}

/// A propagator shared by the consumer's workers.
type SharedPropagator = Arc<dyn TextMapPropagator + Send + Sync>;

/// The trace options of the builder.
#[derive(Clone, Default)]
pub(crate) struct TraceSettings {
    pub(crate) provider: Option<SdkTracerProvider>,
    pub(crate) producer_context: ProducerContext,
    pub(crate) message_key: bool,
    pub(crate) propagator: Option<SharedPropagator>,
}

impl std::fmt::Debug for TraceSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSettings")
            .field("enabled", &self.provider.is_some())
            .field("producer_context", &self.producer_context)
            .field("message_key", &self.message_key)
            .field("propagator", &self.propagator.as_ref().map(|_| "given"))
            .finish()
    }
}

impl TraceSettings {
    /// The consumer's tracing, or `None` without a tracer provider (the
    /// default): then nothing is traced.
    pub(crate) fn build(
        &self,
        scope: InstrumentationScope,
        meter: &Meter,
        group: &str,
    ) -> Option<Arc<Tracing>> {
        let provider = self.provider.clone()?;
        Some(Arc::new(Tracing {
            tracer: provider.tracer_with_scope(scope),
            provider,
            parent: self.producer_context == ProducerContext::Parent,
            message_key: self.message_key,
            propagator: self.propagator.clone(),
            group: StringValue::from(Arc::<str>::from(group)),
            malformed: meter
                .u64_counter(TRACE_CONTEXT_MALFORMED)
                .with_unit("{message}")
                .with_description(
                    "Records whose trace-context headers could not be read; handled without that context.",
                )
                .build(),
        }))
    }
}

/// The consumer's tracing: the tracer and its options.
pub(crate) struct Tracing {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    parent: bool,
    message_key: bool,
    propagator: Option<SharedPropagator>,
    group: StringValue,
    malformed: Counter<u64>,
}

impl Tracing {
    /// One partition's share, built on assignment: the span name and the
    /// attributes every span of the partition has. `metric_attributes` are
    /// the partition's metric attributes, for the malformed-context counter.
    pub(crate) fn partition(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        metric_attributes: &[KeyValue],
    ) -> PartitionTrace {
        PartitionTrace {
            name: Cow::Owned(format!("process {topic}")),
            attributes: vec![
                KeyValue::new(MESSAGING_SYSTEM, "kafka"),
                KeyValue::new(MESSAGING_DESTINATION_NAME, topic.to_owned()),
                KeyValue::new(MESSAGING_DESTINATION_PARTITION_ID, partition.to_string()),
                KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, self.group.clone()),
                KeyValue::new(MESSAGING_OPERATION_NAME, "process"),
                KeyValue::new(MESSAGING_OPERATION_TYPE, "process"),
            ],
            metric_attributes: metric_attributes.into(),
            tracing: Arc::clone(self),
        }
    }

    fn with_propagator<T>(&self, f: impl FnOnce(&dyn TextMapPropagator) -> T) -> T {
        match &self.propagator {
            Some(p) => f(&**p),
            None => {
                let mut f = Some(f);
                opentelemetry::global::get_text_map_propagator(|p| {
                    (f.take().expect("called once"))(p)
                })
            }
        }
    }

    /// Flushes the tracer provider's finished spans, on a thread of its own,
    /// waiting at most `budget`. `false` when it did not finish in time.
    pub(crate) async fn flush(&self, budget: Duration) -> bool {
        let provider = self.provider.clone();
        crate::metrics::flush::off_thread("traces", budget, move || provider.force_flush()).await
    }
}

/// One partition's tracing (see [`Tracing::partition`]).
pub(crate) struct PartitionTrace {
    name: Cow<'static, str>,
    attributes: Vec<KeyValue>,
    metric_attributes: Box<[KeyValue]>,
    tracing: Arc<Tracing>,
}

impl PartitionTrace {
    /// The producer's span context from the record's headers, if valid.
    /// Counts a record with trace headers that yield no valid context.
    fn extract(&self, record: &Record) -> Option<SpanContext> {
        if record.headers().is_empty() {
            return None;
        }
        let headers = RecordHeaders(record);
        let (context, present) = self.tracing.with_propagator(|p| {
            let cx = p.extract(&headers);
            let context = cx.span().span_context().clone();
            if context.is_valid() {
                return (Some(context), true);
            }
            (None, p.fields().any(|f| record.header(f).is_some()))
        });
        if context.is_none() && present {
            self.tracing.malformed.add(1, &self.metric_attributes);
            tracing::debug!(
                topic = record.topic(),
                partition = record.partition(),
                offset = record.offset(),
                "trace-context header could not be read; handling the record without it"
            );
        }
        context
    }
}

/// One record's tracing, across its attempts: the producer's context is
/// read once. Without tracing (`None`) every method does nothing.
pub(crate) struct RecordTrace<'a>(Option<(&'a PartitionTrace, Option<SpanContext>)>);

impl<'a> RecordTrace<'a> {
    /// Reads the producer's context from `record` when `trace` is given.
    #[inline]
    pub(crate) fn new(trace: Option<&'a PartitionTrace>, record: &Record) -> Self {
        RecordTrace(trace.map(|t| (t, t.extract(record))))
    }

    /// Starts the process span of attempt `attempt` (1-based) of `record`.
    #[inline]
    pub(crate) fn attempt(&self, record: &Record, attempt: u32) -> AttemptSpan<'a> {
        AttemptSpan(self.0.as_ref().map(|(t, producer)| {
            let tracing = &*t.tracing;
            let mut attributes = Vec::with_capacity(t.attributes.len() + 3);
            attributes.extend_from_slice(&t.attributes);
            attributes.push(KeyValue::new(MESSAGING_KAFKA_OFFSET, record.offset()));
            attributes.push(KeyValue::new(ATTEMPT, i64::from(attempt)));
            if tracing.message_key
                && let Some(key) = record.key()
            {
                attributes.push(KeyValue::new(
                    MESSAGING_KAFKA_MESSAGE_KEY,
                    String::from_utf8_lossy(key).into_owned(),
                ));
            }
            let mut builder = tracing
                .tracer
                .span_builder(t.name.clone())
                .with_kind(SpanKind::Consumer)
                .with_attributes(attributes);
            // A fresh context, not the worker thread's current one: the span
            // is a root unless the producer's context is its parent.
            let parent = match producer {
                Some(p) if tracing.parent => Context::new().with_remote_span_context(p.clone()),
                Some(p) => {
                    builder = builder.with_links(vec![Link::with_context(p.clone())]);
                    Context::new()
                }
                None => Context::new(),
            };
            let span = builder.start_with_context(&tracing.tracer, &parent);
            (parent.with_span(span), *t)
        }))
    }
}

/// One batch's tracing, across its attempts: each record's producer
/// context is read once. Without tracing (`None`) every method does
/// nothing.
pub(crate) struct BatchTrace<'a>(Option<(&'a PartitionTrace, Vec<Link>)>);

impl<'a> BatchTrace<'a> {
    /// Reads the producer context of each of `records` when `trace` is
    /// given.
    pub(crate) fn new(trace: Option<&'a PartitionTrace>, records: &[Record]) -> Self {
        BatchTrace(trace.map(|t| {
            let links = records
                .iter()
                .filter_map(|r| t.extract(r))
                .map(Link::with_context)
                .collect();
            (t, links)
        }))
    }

    /// Starts the process span of attempt `attempt` (1-based) of a batch of
    /// `len` records starting at offset `first`: one span for the batch,
    /// linked to each record's producer span (a batch span is never a
    /// child of one producer, with either [`ProducerContext`], as the
    /// messaging conventions advise for batches), with
    /// [`MESSAGING_BATCH_MESSAGE_COUNT`] and the first record's offset.
    pub(crate) fn attempt(&self, first: i64, len: usize, attempt: u32) -> AttemptSpan<'a> {
        AttemptSpan(self.0.as_ref().map(|(t, links)| {
            let tracing = &*t.tracing;
            let mut attributes = Vec::with_capacity(t.attributes.len() + 3);
            attributes.extend_from_slice(&t.attributes);
            attributes.push(KeyValue::new(MESSAGING_KAFKA_OFFSET, first));
            attributes.push(KeyValue::new(MESSAGING_BATCH_MESSAGE_COUNT, len as i64));
            attributes.push(KeyValue::new(ATTEMPT, i64::from(attempt)));
            let span = tracing
                .tracer
                .span_builder(t.name.clone())
                .with_kind(SpanKind::Consumer)
                .with_attributes(attributes)
                .with_links(links.clone())
                .start_with_context(&tracing.tracer, &Context::new());
            (Context::new().with_span(span), *t)
        }))
    }
}

/// The process span of one handler attempt, ended with its outcome by
/// [`end`](Self::end) (a span dropped without it ends without an outcome).
pub(crate) struct AttemptSpan<'a>(Option<(Context, &'a PartitionTrace)>);

/// What an attempt led to (the [`OUTCOME`] attribute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Succeeded,
    Retried,
    /// Written to a retry tier (`OnExhausted::RetryTopics`).
    RetryTier,
    DeadLettered,
    Skipped,
    Blocked,
    Stopped,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Retried => "retried",
            Outcome::RetryTier => "retry_tier",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::Skipped => "skipped",
            Outcome::Blocked => "blocked",
            Outcome::Stopped => "stopped",
        }
    }
}

impl AttemptSpan<'_> {
    /// No span (a record's path that traces nothing).
    #[inline]
    pub(crate) fn none() -> Self {
        AttemptSpan(None)
    }

    /// `fut` running inside the span's context, or `fut` itself without
    /// tracing.
    #[inline]
    pub(crate) fn instrument<F: Future>(&self, fut: F) -> Either<WithContext<F>, F> {
        match &self.0 {
            Some((cx, _)) => Either::Left(fut.with_context(cx.clone())),
            None => Either::Right(fut),
        }
    }

    /// The attempt failed: error status with `message`, and `error.type`.
    #[inline]
    pub(crate) fn failed(&self, error_type: &'static str, message: impl FnOnce() -> String) {
        if let Some((cx, _)) = &self.0 {
            let span = cx.span();
            span.set_attribute(KeyValue::new(crate::metrics::ERROR_TYPE, error_type));
            span.set_status(Status::error(message()));
        }
    }

    /// The span's context as headers to write with an outgoing record (the
    /// propagator's fields, `traceparent` and `tracestate` for W3C). Empty
    /// without tracing.
    pub(crate) fn headers(&self) -> Vec<(String, String)> {
        let mut out = HeadersOut(Vec::new());
        if let Some((cx, t)) = &self.0 {
            t.tracing
                .with_propagator(|p| p.inject_context(cx, &mut out));
        }
        out.0
    }

    /// Records the outcome and ends the span.
    #[inline]
    pub(crate) fn end(self, outcome: Outcome) {
        if let Some((cx, _)) = self.0 {
            let span = cx.span();
            span.set_attribute(KeyValue::new(OUTCOME, outcome.as_str()));
            span.end();
        }
    }
}

/// A record's headers as a propagator reads them: the last header of a
/// name, when its value is UTF-8 (as OpenTelemetry's Java Kafka
/// instrumentation reads `lastHeader`).
struct RecordHeaders<'a>(&'a Record);

impl Extractor for RecordHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .header(key)
            .flatten()
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.headers().iter().map(|h| h.name.as_str()).collect()
    }
}

/// Headers a propagator writes, in order.
struct HeadersOut(Vec<(String, String)>);

impl Injector for HeadersOut {
    fn set(&mut self, key: &str, value: String) {
        self.0.retain(|(k, _)| k != key);
        self.0.push((key.to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    fn tracing(propagator: bool) -> Arc<Tracing> {
        let settings = TraceSettings {
            provider: Some(SdkTracerProvider::builder().build()),
            propagator: propagator
                .then(|| Arc::new(TraceContextPropagator::new()) as SharedPropagator),
            ..TraceSettings::default()
        };
        let meter = opentelemetry::metrics::MeterProvider::meter(
            &opentelemetry::metrics::noop::NoopMeterProvider::new(),
            "t",
        );
        settings
            .build(InstrumentationScope::builder("t").build(), &meter, "g")
            .expect("tracing on")
    }

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_valid_traceparent_is_read_from_the_last_header() {
        let t = tracing(true).partition("t", 0, &[]);
        let r = Record::new("t", 0, 5)
            .with_header("traceparent", Some(b"junk".to_vec()))
            .with_header("traceparent", Some(PARENT.as_bytes().to_vec()));
        let sc = t.extract(&r).expect("a context");
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert!(sc.is_remote());
    }

    #[test]
    fn malformed_and_absent_contexts_yield_none() {
        let t = tracing(true).partition("t", 0, &[]);
        for r in [
            Record::new("t", 0, 1),
            Record::new("t", 0, 1).with_header("other", None),
            Record::new("t", 0, 1).with_header("traceparent", Some(b"00-zz".to_vec())),
            Record::new("t", 0, 1).with_header("traceparent", Some(vec![0xff, 0xfe])),
            Record::new("t", 0, 1).with_header("traceparent", None),
        ] {
            assert!(t.extract(&r).is_none(), "{r:?}");
        }
    }

    #[test]
    fn the_span_context_is_injected_and_linked() {
        let t = tracing(true).partition("t", 3, &[]);
        let r = Record::new("t", 3, 9).with_header("traceparent", Some(PARENT.as_bytes().to_vec()));
        let trace = RecordTrace::new(Some(&t), &r);
        let span = trace.attempt(&r, 1);
        let headers = span.headers();
        let (name, value) = &headers[0];
        assert_eq!(name, "traceparent");
        // Linked, not parented: a trace of its own.
        assert!(
            !value.contains("0af7651916cd43dd8448eb211c80319c"),
            "{value}"
        );
        span.end(Outcome::Succeeded);
    }

    #[test]
    fn without_tracing_nothing_happens() {
        let r = Record::new("t", 0, 1).with_header("traceparent", Some(PARENT.as_bytes().to_vec()));
        let trace = RecordTrace::new(None, &r);
        let span = trace.attempt(&r, 1);
        assert!(span.headers().is_empty());
        assert!(matches!(span.instrument(async {}), Either::Right(_)));
        span.end(Outcome::Succeeded);
    }
}
