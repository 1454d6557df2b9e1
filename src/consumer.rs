//! [`FreshConsumer`](crate::FreshConsumer): the builder, every setter, and `run`/`run_until`.

use std::fmt;
use std::time::Duration;

use opentelemetry::metrics::Meter;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::config::{RedactedProperties, Settings};
use crate::error::{ConfigError, RunError};
use crate::failure::{OnExhausted, OnStale, RetryPolicy, StaleSettings, StormGuard};
use crate::handler::{
    BatchHandler, BatchSettings, Batched, DEFAULT_MAX_BATCH_RECORDS, DEFAULT_MAX_BATCH_WAIT,
    Handler,
};
use crate::health::{HealthHandle, HealthThresholds, RetentionOverrunPolicy};
use crate::ordering::ProcessingOrder;
use crate::output::OutputConfig;
use crate::slo::FreshnessObjective;
use crate::summary::RunSummary;
use crate::trace::ProducerContext;

/// A consumer under construction: Kafka settings, the handler, and the
/// library's own options. Created by [`FreshConsumer::new`](crate::FreshConsumer::new); started by
/// [`FreshConsumer::run_until`](crate::FreshConsumer::run_until) or [`FreshConsumer::run`](crate::FreshConsumer::run).
///
/// ```no_run
/// use std::time::Duration;
/// use fresh_consumer::{FreshConsumer, Record};
///
/// async fn handle(record: Record) -> Result<(), std::io::Error> {
///     println!("{}:{}@{}", record.topic(), record.partition(), record.offset());
///     Ok(())
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let summary = FreshConsumer::new(handle)
///     .bootstrap_servers("localhost:9092")
///     .group_id("orders-projector")
///     .topics(["orders"])
///     .set("session.timeout.ms", "10000")
///     .commit_interval(Duration::from_millis(500))
///     .run_until(fresh_consumer::shutdown_signal())
///     .await?;
/// println!("handled {} records", summary.records_succeeded);
/// # Ok(()) }
/// ```
///
/// The `Debug` output never shows the value of a secret property
/// (`sasl.password`, `ssl.key.password`, `sasl.oauthbearer.client.secret`, ...).
#[must_use = "a FreshConsumer does nothing until `run_until` or `run` is awaited"]
pub struct FreshConsumer<H> {
    pub(crate) handler: H,
    pub(crate) settings: Settings,
}

impl<H> FreshConsumer<H> {
    /// Starts building a consumer that runs `handler` for each record.
    ///
    /// `handler` must implement [`Handler`](crate::Handler): an async
    /// function or closure taking an owned [`Record`](crate::Record) and
    /// returning `Result<(), E>` with `E: Into<BoxError>` (any
    /// [`std::error::Error`] that is `Send + Sync + 'static`; see
    /// [`BoxError`](crate::BoxError)), whose future is `Send`; or your own
    /// type implementing `Handler`.
    ///
    /// The bound is checked here, so a handler that does not fit is a
    /// compile error at this argument, for example for a function that is
    /// not `async`:
    ///
    /// ```text
    /// error[E0277]: `fn(Record) -> Result<(), std::io::Error> {handle}` is not a fresh-consumer handler
    ///    |
    /// 11 |     let _ = FreshConsumer::new(handle)
    ///    |                                ^^^^^^ not a handler
    ///    |
    ///    = note: expected an `async fn(Record) -> Result<(), E>` or a closure [...]
    /// ```
    ///
    /// A `run`/`run_until` call on the consumer fails too ("the method `run`
    /// exists [...] but its trait bounds were not satisfied"); its note
    /// names the bound the handler misses, such as
    /// `Result<(), std::io::Error>: Future` or `Rc<String>: Send`. A
    /// function taking `&Record` (or any other argument type) is rustc's
    /// own "type mismatch in function arguments" (E0631), at this argument
    /// too.
    pub fn new(handler: H) -> Self
    where
        H: Handler,
    {
        FreshConsumer {
            handler,
            settings: Settings::default(),
        }
    }

    /// The brokers to bootstrap from, `host:port[,host:port...]` (librdkafka's
    /// `bootstrap.servers`). Required unless set through [`set`](Self::set).
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.settings.bootstrap_servers = Some(servers.into());
        self
    }

    /// The consumer group (`group.id`). Required: commits belong to a group.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.settings.group_id = Some(group_id.into());
        self
    }

    /// The topics to subscribe to. Names starting with `^` are regular
    /// expressions, as in librdkafka's `subscribe`. Required.
    pub fn topics<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.settings.topics = topics.into_iter().map(Into::into).collect();
        self
    }

    /// Sets any librdkafka consumer property (see librdkafka's
    /// `CONFIGURATION.md`), for example security settings
    /// (`security.protocol`, `sasl.mechanisms`, `sasl.username`,
    /// `sasl.password`, `ssl.ca.location`). A later call for the same key wins.
    ///
    /// The library sets `enable.auto.commit=false` and
    /// `enable.auto.offset.store=false` itself; setting either to `true` is a
    /// [`ConfigError::AutoCommit`]. `enable.partition.eof=true` is a
    /// [`ConfigError::InvalidProperty`]: the handler never sees such events.
    /// Unless set here, `auto.offset.reset` is
    /// `earliest` (a new group starts at the log start offset, so nothing is
    /// skipped) rather than librdkafka's `latest`. It only decides where a
    /// partition the group has **no** committed offset for starts
    /// (`earliest`, `latest` or `error`): an out-of-range offset follows
    /// [`retention_overrun_policy`](Self::retention_overrun_policy), and
    /// librdkafka itself runs with `auto.offset.reset=error`. Unless set
    /// here or with [`statistics_interval`](Self::statistics_interval),
    /// `statistics.interval.ms` is 1000. Unless set here,
    /// `queued.min.messages` is [`max_buffered_records`](Self::max_buffered_records)
    /// and `fetch.queue.backoff.ms` is 10 (librdkafka's default of 1000
    /// would leave a partition whose worker drained its queue idle for up
    /// to a second).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        let value = value.into();
        self.settings.properties.retain(|(k, _)| *k != key);
        self.settings.properties.push((key, value));
        self
    }

    /// How many records per partition may wait for their handler.
    ///
    /// Each assigned partition is read by its worker from the partition's
    /// own librdkafka queue, split off the consumer's main queue when the
    /// partition is assigned (`rd_kafka_queue_get_partition`). librdkafka
    /// fetches a partition while its queue holds fewer than this many
    /// records: the value becomes librdkafka's `queued.min.messages` unless
    /// that is [`set`](Self::set). A partition then holds about this many
    /// records plus one fetch response (up to `max.partition.fetch.bytes`),
    /// and at most `queued.max.messages.kbytes` (which applies per partition
    /// with split queues). The worker takes the records that are ready in
    /// batches of up to 64 or this many, whichever is smaller
    /// (`rd_kafka_consume_batch_queue`), so up to that many more may wait in
    /// the worker, already copied out of librdkafka.
    /// Nothing is paused, and nothing is fetched twice (except after a
    /// consume error, when the worker seeks its partition back to the next
    /// record it has not taken).
    ///
    /// If a partition's queue cannot be split, the poll loop hands its
    /// records to the worker through a buffer of this many records
    /// instead: when the buffer stays full for 1 ms (at once for a second
    /// after such a wait failed) the partition is paused
    /// (`rd_kafka_pause_partitions`; librdkafka drops what it prefetched
    /// for it) and resumed once the buffer has drained to half, with its
    /// fetch restarted at once.
    ///
    /// With [`ProcessingOrder::Key`], it also bounds the records a
    /// partition's worker has taken that are outside the contiguous
    /// completed prefix (running, waiting behind a busy key, or completed
    /// after an unfinished earlier record), so a partition holds at most
    /// twice this many.
    /// Defaults to 1,000. Must be at least 1.
    pub fn max_buffered_records(mut self, records: usize) -> Self {
        self.settings.max_buffered_records = records;
        self
    }

    /// Whether each assigned partition is read from its own librdkafka
    /// queue by its worker (`true`, the default), or every record comes
    /// through the poll loop, which hands it to the partition's worker
    /// through a buffer of [`max_buffered_records`](Self::max_buffered_records)
    /// records and pauses the partition while that buffer stays full
    /// (`false`: the path a partition whose queue cannot be split takes
    /// anyway; with a fast handler about half the throughput of split
    /// queues). With `false` the library does not set
    /// `queued.min.messages` or `fetch.queue.backoff.ms`, and a partition
    /// that ends in transaction markers (`read_committed`) keeps a lag of 1
    /// after its last record: only a split queue's worker commits past
    /// markers (to librdkafka's position, once every delivered record
    /// completed and its queue is empty).
    ///
    /// # Errors
    /// `false` with `check.crcs=true` is a [`ConfigError::InvalidProperty`]
    /// from [`validate`](Self::validate) and `run_until`: the poll loop
    /// cannot tell which partition a batch that fails the check is on.
    pub fn split_partition_queues(mut self, enabled: bool) -> Self {
        self.settings.split_partition_queues = enabled;
        self
    }

    /// How often completed offsets are committed. Defaults to 1 s. Must be
    /// more than zero.
    pub fn commit_interval(mut self, interval: Duration) -> Self {
        self.settings.commit_interval = interval;
        self
    }

    /// Commit early, before [`commit_interval`](Self::commit_interval) has
    /// passed, once this many records have completed since the last commit.
    /// Defaults to 10,000. Must be at least 1.
    pub fn commit_batch_records(mut self, records: usize) -> Self {
        self.settings.commit_batch_records = records;
        self
    }
    /// Backoff between attempts of a failing record: starts at `initial`,
    /// doubles per attempt, capped at `max` (shorthand for
    /// [`retry`](Self::retry) with [`RetryPolicy::backoff`]). Defaults to
    /// 100 ms and 30 s. `initial` must be more than zero and at most `max`.
    pub fn retry_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.settings.retry = self.settings.retry.backoff(initial, max);
        self
    }

    /// How failing records are retried: attempts, backoff, jitter. Defaults
    /// to [`RetryPolicy::default`] (5 attempts, 100 ms doubling to 30 s,
    /// jitter 0.2). No offset after a failing record is committed while it
    /// is retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.settings.retry = policy;
        self
    }

    /// What happens to a record whose attempts ran out, or that failed with
    /// a [`permanent`](crate::permanent) error. Defaults to
    /// [`OnExhausted::Block`](crate::failure::OnExhausted::Block): the partition stops at the record and keeps
    /// retrying at the capped backoff.
    ///
    /// With [`OnExhausted::RetryTopics`](crate::failure::OnExhausted::RetryTopics)
    /// the consumer also subscribes to every tier topic of every topic in
    /// [`topics`](Self::topics), in the same group, and handles tier
    /// records with the same handler (see [`RetryTopics`](crate::failure::RetryTopics)).
    ///
    /// # Errors
    /// [`ConfigError::RetryTopics`] from [`validate`](Self::validate) and
    /// `run_until` for a retry-topic policy without tiers, with a delay
    /// below 1 ms or shorter than the tier before, with topic names that
    /// collide, or with a pattern subscription.
    pub fn on_exhausted(mut self, policy: OnExhausted) -> Self {
        self.settings.on_exhausted = policy;
        self
    }

    /// The guard that stops dead-lettering when too many recent records
    /// fail. Defaults to [`StormGuard::default`] (more than 50 % of the
    /// records of the last 60 s, once 20 finished). Only matters with
    /// [`OnExhausted::DeadLetter`](crate::failure::OnExhausted::DeadLetter).
    pub fn storm_guard(mut self, guard: StormGuard) -> Self {
        self.settings.storm_guard = guard;
        self
    }

    /// Sheds records too old to be worth handling: a record whose event age
    /// (now minus its event time, as [`EVENT_AGE`](crate::metrics::EVENT_AGE)
    /// measures it) is above `max_age` when it reaches the handler is not
    /// handed to the handler; `action` says what happens to it instead
    /// (skipped, or written to the dead-letter topic or a topic of its own,
    /// and committed past). Counted in
    /// [`STALE_MESSAGES`](crate::metrics::STALE_MESSAGES),
    /// [`RunSummary::records_stale`] and as
    /// [`SloResult::Stale`](crate::slo::SloResult::Stale) against every
    /// objective; see [`OnStale`](crate::failure::OnStale). Defaults to
    /// no maximum: every record is handled. A batch handler never sees a
    /// stale record: it is taken out of the batch, in offset order, before
    /// the call.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use fresh_consumer::{FreshConsumer, Record, failure::{OnStale}};
    /// # async fn handle(_r: Record) -> Result<(), std::io::Error> { Ok(()) }
    /// # async fn run() -> Result<(), fresh_consumer::RunError> {
    /// FreshConsumer::new(handle)
    ///     .bootstrap_servers("localhost:9092")
    ///     .group_id("price-alerts")
    ///     .topics(["prices"])
    ///     // A price older than 10 minutes is not worth an alert.
    ///     .max_record_age(Duration::from_secs(600), OnStale::Topic("prices.stale".into()))
    ///     .run_until(fresh_consumer::shutdown_signal())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::InvalidOption`] (option `max_record_age`) from
    /// [`validate`](Self::validate) and `run_until` for a `max_age` below
    /// 1 ms (a `Duration` cannot be negative), an empty
    /// [`OnStale::Topic`] or one the consumer subscribes to; option
    /// `read_headers` when the record is to be written somewhere and
    /// [`read_headers(false)`](Self::read_headers) was set.
    pub fn max_record_age(mut self, max_age: Duration, action: OnStale) -> Self {
        self.settings.stale = Some(StaleSettings { max_age, action });
        self
    }

    /// Whether [`max_record_age`](Self::max_record_age) also applies to
    /// records read back from a retry tier
    /// ([`OnExhausted::RetryTopics`](crate::failure::OnExhausted::RetryTopics)).
    /// Defaults to `false`: a record the handler already took on is handled
    /// to its end (or dead-lettered by the retry-topic policy), however long
    /// its retries took. Such a record's age is its original record's. No
    /// effect without `max_record_age`.
    pub fn stale_retry_tier_records(mut self, apply: bool) -> Self {
        self.settings.stale_retry_tiers = apply;
        self
    }

    /// Adds a freshness objective: its share of records processed within
    /// its threshold is counted exactly in
    /// [`SLO_MESSAGES`](crate::metrics::SLO_MESSAGES), its threshold becomes
    /// an event-age bucket boundary, and its compliance and burn rate are
    /// evaluated in process ([`HealthSnapshot::objectives`](crate::health::HealthSnapshot::objectives)).
    /// Call once per objective; none by default. See [`slo`](crate::slo).
    pub fn freshness_objective(mut self, objective: FreshnessObjective) -> Self {
        self.settings.objectives.push(objective);
        self
    }

    /// The short and long windows of the in-process objective evaluation.
    /// Defaults to 5 min and 1 h. Both more than zero, `short < long`.
    pub fn slo_windows(mut self, short: Duration, long: Duration) -> Self {
        self.settings.slo_windows = (short, long);
        self
    }

    /// A handler attempt that runs longer than this is abandoned (its future
    /// dropped) and counts as a failed attempt with `error.type=timeout`.
    /// Defaults to no timeout. Must be more than zero.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.settings.handler_timeout = Some(timeout);
        self
    }

    /// How long a revoke waits for handlers already running on the revoked
    /// partitions before it commits what completed and gives the partitions
    /// up. A handler still running then finishes on its own, and its result is
    /// dropped (the record is redelivered to the partition's new owner).
    /// Defaults to 10 s. Must be below `max.poll.interval.ms`.
    pub fn revoke_timeout(mut self, timeout: Duration) -> Self {
        self.settings.revoke_timeout = timeout;
        self
    }

    /// The bound on shutdown: handlers running when the shutdown signal fires
    /// may finish, completed offsets are committed and the group is left, all
    /// within this time, even when the broker is unreachable. Defaults to 30 s.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.settings.shutdown_timeout = timeout;
        self
    }

    /// The share of `max.poll.interval.ms` after which a gap between two polls
    /// counts as a poll-interval warning. Defaults to 0.8. Must be in (0, 1].
    pub fn poll_warning_ratio(mut self, ratio: f64) -> Self {
        self.settings.poll_warning_ratio = ratio;
        self
    }

    /// The meter the library's instruments are built from. Defaults to the
    /// global meter provider's meter for this crate
    /// (`opentelemetry::global::meter_with_scope`, scope `fresh-consumer`
    /// with the crate version).
    pub fn meter(mut self, meter: Meter) -> Self {
        self.settings.meter = Some(meter);
        self
    }

    /// Builds the instruments from this SDK meter provider and flushes it when
    /// the consumer shuts down, so the last export interval is not lost. The
    /// caller still owns the provider's `shutdown()`.
    pub fn meter_provider(mut self, provider: &SdkMeterProvider) -> Self {
        self.settings.meter_provider = Some(provider.clone());
        self
    }

    /// Traces each handler attempt: a process span (kind consumer, name
    /// `process <topic>`, the messaging attributes, the attempt number and
    /// its outcome) started from this SDK tracer provider, linked to the
    /// producer's trace context read from the record's headers; the
    /// handler's future runs inside it. The provider's finished spans are
    /// flushed when the consumer shuts down (within
    /// [`shutdown_timeout`](Self::shutdown_timeout)); the caller still owns
    /// its `shutdown()`. What is recorded: [`crate::trace`].
    ///
    /// Default: no tracer provider, and then no span is created and no
    /// header is read or written for tracing.
    pub fn tracer_provider(mut self, provider: &SdkTracerProvider) -> Self {
        self.settings.trace.provider = Some(provider.clone());
        self
    }

    /// What the producer's trace context is to the process span:
    /// [`ProducerContext::Link`] (the default: a link, the span starts a
    /// trace of its own) or [`ProducerContext::Parent`] (the span joins the
    /// producer's trace as its child). Only with
    /// [`tracer_provider`](Self::tracer_provider).
    pub fn trace_producer_context(mut self, context: ProducerContext) -> Self {
        self.settings.trace.producer_context = context;
        self
    }

    /// Whether process spans carry the record's key as
    /// `messaging.kafka.message.key` (UTF-8, invalid bytes replaced).
    /// Default: `false` (keys may carry personal data or be large). Only
    /// with [`tracer_provider`](Self::tracer_provider).
    pub fn trace_message_key(mut self, enabled: bool) -> Self {
        self.settings.trace.message_key = enabled;
        self
    }

    /// The propagator that reads the producer's context from a record's
    /// headers and writes the process span's context into dead-letter
    /// records. Default: the global one
    /// (`opentelemetry::global::set_text_map_propagator`, which is a no-op
    /// until set: set it to
    /// `opentelemetry_sdk::propagation::TraceContextPropagator` for W3C
    /// `traceparent`/`tracestate`, or give that here). Only with
    /// [`tracer_provider`](Self::tracer_provider).
    pub fn trace_propagator(
        mut self,
        propagator: impl opentelemetry::propagation::TextMapPropagator + Send + Sync + 'static,
    ) -> Self {
        self.settings.trace.propagator = Some(std::sync::Arc::new(propagator));
        self
    }

    /// Takes the event time from this header instead of the Kafka record
    /// timestamp: the value is the event time in milliseconds since the Unix
    /// epoch, as ASCII decimal digits (or 8 bytes big-endian). A record
    /// without a parsable header counts as a record without timestamp.
    /// Defaults to the record timestamp.
    pub fn event_time_header(mut self, name: impl Into<String>) -> Self {
        self.settings.event_time_header = Some(name.into());
        self
    }

    /// Whether records reach the handler with their headers. Defaults to
    /// `true`.
    ///
    /// librdkafka parses a record's header block when asked for it
    /// (`rd_kafka_message_headers`), and in librdkafka 2.12 that allocates
    /// a parse buffer even for a record without headers: about 10 % of the
    /// CPU with a no-op handler in this crate's throughput bench. A consumer
    /// whose handler never reads headers can turn it off, as Confluent's
    /// .NET client does with `dotnet.consumer.enable.headers`. With `false`,
    /// [`Record::headers`](crate::Record::headers) is always empty.
    ///
    /// # Errors
    /// [`ConfigError::InvalidOption`] (option `read_headers`) from
    /// [`validate`](Self::validate) and `run_until` when `false` is combined
    /// with [`event_time_header`](Self::event_time_header) (the event time
    /// comes from a header), with [`OnExhausted::DeadLetter`](crate::failure::OnExhausted::DeadLetter) (a
    /// dead-letter record carries the original record's headers), or with
    /// [`origin_time`](Self::origin_time) or [`outputs`](Self::outputs)
    /// (the origin time travels in a header).
    pub fn read_headers(mut self, enabled: bool) -> Self {
        self.settings.read_headers = enabled;
        self
    }

    /// Lets the handler send records to Kafka through the library
    /// ([`fresh_consumer::output::outputs()`](crate::output::outputs) inside a handler
    /// call; per-record and batch handlers alike), with one producer the
    /// library creates for it (only when this is called). Defaults to no
    /// outputs.
    ///
    /// A record (or a batch) counts as completed, and its offset as
    /// committable, only once the broker acknowledged every output its
    /// handler call sent; a failed delivery fails the attempt and the
    /// retry policy applies, so outputs are at-least-once (an output may
    /// be written twice). Each output carries the input's origin time
    /// ([`ORIGIN_TIME_HEADER`](crate::output::ORIGIN_TIME_HEADER)) and,
    /// with tracing on, the process span's context. See [`crate::output`].
    ///
    /// With [`OutputConfig::transactional_id`] the outputs go into one
    /// Kafka transaction per commit cycle together with the input offsets
    /// (exactly once into Kafka: [the guide's chapter](crate::guide::transactions)).
    ///
    /// # Errors
    /// [`ConfigError::OutputProducerProperty`] from
    /// [`validate`](Self::validate) and `run_until` for a producer property
    /// that would weaken the acknowledgement, or the raw
    /// `transactional.id` property;
    /// [`ConfigError::InvalidOption`] (option `read_headers`) with
    /// `read_headers(false)` (an input's origin time travels in a header),
    /// and (option `transactional_id`) for transactional outputs with an
    /// empty id, a batch handler, key order with more than one record in
    /// flight or `split_partition_queues(false)`. With transactional
    /// outputs, `run_until` fails with [`RunError::Client`](crate::RunError::Client)
    /// when `init_transactions` fails, and ends with
    /// [`RunError::Fatal`](crate::RunError::Fatal) when another producer
    /// with the same id fenced this one.
    pub fn outputs(mut self, config: OutputConfig) -> Self {
        self.settings.outputs = Some(config);
        self
    }

    /// Records the event age from the origin-time header
    /// ([`ORIGIN_TIME_HEADER`](crate::output::ORIGIN_TIME_HEADER)) that an
    /// upstream `FreshConsumer` with [`outputs`](Self::outputs) writes:
    /// the age since the first hop's event time (end to end across hops),
    /// with `fresh_consumer.timestamp.type` = `origin`. Freshness
    /// objectives then count the end-to-end age too. Defaults to `false`
    /// (the age of this hop's input only).
    ///
    /// Precedence: a valid origin-time header, else the usual event time
    /// ([`event_time_header`](Self::event_time_header) when set, else the
    /// record timestamp). A header present but unreadable is counted in
    /// `fresh_consumer.origin_time.malformed.messages` and the record's
    /// own event time is used: the record is handled as usual.
    ///
    /// # Errors
    /// [`ConfigError::InvalidOption`] (option `read_headers`) with
    /// `read_headers(false)`.
    pub fn origin_time(mut self, enabled: bool) -> Self {
        self.settings.origin_time = enabled;
        self
    }

    /// The order in which each partition's records go through the handler.
    /// Defaults to [`ProcessingOrder::Partition`]: one record of a partition
    /// at a time, in offset order. [`ProcessingOrder::Key`] runs records
    /// with different keys of the same partition concurrently (up to
    /// `max_in_flight`, which must be at least 1) and keeps each key in
    /// offset order; commits still cover only the contiguous run of
    /// completed records.
    pub fn processing_order(mut self, order: ProcessingOrder) -> Self {
        self.settings.processing_order = order;
        self
    }

    /// A handle to this consumer's health, to query from another task while
    /// it runs (for a liveness or readiness probe). Get it before calling
    /// [`run_until`](Self::run_until). Before the run the snapshot says
    /// [`ConsumerState::NotStarted`](crate::health::ConsumerState::NotStarted), after it [`ConsumerState::Stopped`](crate::health::ConsumerState::Stopped).
    pub fn health_handle(&self) -> HealthHandle {
        self.settings.health.handle()
    }

    /// A handle that pauses and resumes topics and partitions of the
    /// consumer while it runs (see [`ControlHandle`](crate::control::ControlHandle)).
    /// Get it before calling [`run_until`](Self::run_until); its calls
    /// return [`ControlError::NotStarted`](crate::control::ControlError::NotStarted)
    /// until the run starts and
    /// [`ControlError::Stopped`](crate::control::ControlError::Stopped) after it ends.
    pub fn control_handle(&self) -> crate::control::ControlHandle {
        self.settings.controls.handle()
    }

    /// The thresholds of the health evaluation. Defaults to
    /// [`HealthThresholds::default`](crate::health::HealthThresholds::default). Every threshold must be more than
    /// zero.
    pub fn health_thresholds(mut self, thresholds: HealthThresholds) -> Self {
        self.settings.health.thresholds = thresholds;
        self
    }

    /// What to do when a partition's offset is out of range (a retention
    /// overrun, or a committed offset above the high watermark). Defaults to
    /// [`RetentionOverrunPolicy::Earliest`].
    pub fn retention_overrun_policy(mut self, policy: RetentionOverrunPolicy) -> Self {
        self.settings.health.retention_policy = policy;
        self
    }

    /// How often librdkafka reports its statistics
    /// (`statistics.interval.ms`), the source of the high watermark and log
    /// start offset in the lag gauges and the snapshot, and of the detection
    /// of partitions whose fetch position fell out of range while running.
    /// Defaults to 1 s ([`DEFAULT_STATISTICS_INTERVAL`](crate::health::DEFAULT_STATISTICS_INTERVAL)), or to the
    /// `statistics.interval.ms` property when set. `Duration::ZERO` turns
    /// statistics off: the high watermark is then the consumer's own
    /// position (records not fetched yet are not counted), and an
    /// out-of-range position is found by reading every partition's
    /// watermarks. At most 24 h; milliseconds.
    pub fn statistics_interval(mut self, interval: Duration) -> Self {
        self.settings.health.statistics_interval = Some(interval);
        self
    }

    /// Checks the configuration without touching the network: the library's
    /// options, the required settings, and every librdkafka property (name and
    /// value) through librdkafka's own configuration parser.
    ///
    /// # Errors
    /// The first problem found, as a [`ConfigError`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.settings.validate().map(|_| ())
    }
}

impl<B> FreshConsumer<Batched<B>> {
    /// Starts building a consumer that runs `handler` once per **batch**:
    /// up to [`max_batch_records`](Self::max_batch_records) records of one
    /// partition in offset order (see [`Batch`](crate::Batch)), gathered
    /// from what the partition's queue already holds and, when that is
    /// fewer, for at most [`max_batch_wait`](Self::max_batch_wait) after
    /// the batch's first record. Batches of different partitions run
    /// concurrently; each partition's one at a time.
    ///
    /// `handler` must implement [`BatchHandler`](crate::BatchHandler): an
    /// async function or closure taking an owned [`Batch`](crate::Batch)
    /// and returning `Result<(), E>` with `E: Into<BatchError>` (any error
    /// a per-record handler may return, or a [`BatchError`](crate::BatchError)
    /// naming the record that failed), whose future is `Send`; or your own
    /// type implementing `BatchHandler`. As with [`new`](Self::new), a handler
    /// that does not fit is a compile error at this argument
    /// (``error[E0277]: `...` is not a fresh-consumer batch handler``).
    /// Every setter of [`FreshConsumer::new`] applies;
    /// [`ProcessingOrder::Key`] cannot be combined with batches (a
    /// [`ConfigError`] at `validate`/`run`).
    ///
    /// ```no_run
    /// use fresh_consumer::{Batch, BatchError, FreshConsumer};
    ///
    /// async fn write(batch: Batch) -> Result<(), BatchError> {
    ///     // One database transaction for the whole batch.
    ///     println!("{} records up to offset {}", batch.len(), batch.last_offset());
    ///     Ok(())
    /// }
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// FreshConsumer::batched(write)
    ///     .bootstrap_servers("localhost:9092")
    ///     .group_id("orders-sink")
    ///     .topics(["orders"])
    ///     .max_batch_records(1_000)
    ///     .max_batch_wait(std::time::Duration::from_millis(50))
    ///     .run_until(fresh_consumer::shutdown_signal())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn batched(handler: B) -> Self
    where
        B: BatchHandler,
    {
        let handler = Batched::new(handler);
        let mut consumer = FreshConsumer::new(handler);
        consumer.settings.batch = Some(BatchSettings {
            call: consumer.handler.call(),
            max_records: DEFAULT_MAX_BATCH_RECORDS,
            max_wait: DEFAULT_MAX_BATCH_WAIT,
        });
        consumer
    }

    /// The most records in one batch. Defaults to
    /// [`DEFAULT_MAX_BATCH_RECORDS`] (500). Must be at least 1.
    pub fn max_batch_records(mut self, records: usize) -> Self {
        if let Some(b) = &mut self.settings.batch {
            b.max_records = records;
        }
        self
    }

    /// How long a batch waits for more records after its first one, when
    /// fewer than [`max_batch_records`](Self::max_batch_records) are ready
    /// (it never waits when the partition's queue holds a full batch).
    /// Defaults to [`DEFAULT_MAX_BATCH_WAIT`] (20 ms). Must be more than
    /// zero and less than `max.poll.interval.ms`. The wait adds to the
    /// event age of a batch's first records at low rates.
    pub fn max_batch_wait(mut self, wait: Duration) -> Self {
        if let Some(b) = &mut self.settings.batch {
            b.max_wait = wait;
        }
        self
    }
}

impl<H: Handler> FreshConsumer<H> {
    /// Runs the consumer until the process is asked to stop (SIGTERM or
    /// SIGINT on Unix, Ctrl-C elsewhere), then shuts down gracefully as
    /// [`run_until`](Self::run_until) does: running handlers get
    /// [`revoke_timeout`](Self::revoke_timeout), completed work is
    /// committed, metrics are flushed, the member leaves the group, all
    /// within [`shutdown_timeout`](Self::shutdown_timeout). This is what a
    /// service under Kubernetes needs: a pod gets SIGTERM at every rollout.
    ///
    /// A **second** signal during that shutdown ends the run at once with
    /// [`RunError::Interrupted`]: the final commit may not have happened,
    /// so records completed since the last commit are redelivered to the
    /// group (at-least-once still holds; nothing is committed past a
    /// record that did not complete). A signal that arrives before the
    /// first assignment ends the run with nothing to commit.
    ///
    /// The signal handlers are installed when the run starts and stay
    /// installed for the rest of the process. To stop on something else,
    /// use [`run_until`](Self::run_until) (with
    /// [`shutdown_signal`](crate::shutdown_signal) to keep the signals).
    ///
    /// # Errors
    /// As [`run_until`](Self::run_until), and [`RunError::Interrupted`] on
    /// a second signal.
    pub async fn run(self) -> Result<RunSummary, RunError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RunError::NoRuntime);
        }
        let (graceful, interrupt, _watch) = crate::signal::Signals::new().watch();
        let FreshConsumer { handler, settings } = self;
        crate::engine::run(
            handler,
            settings,
            graceful.cancelled_owned(),
            interrupt.cancelled_owned(),
        )
        .await
    }

    /// Runs the consumer until `signal` resolves, then shuts down within
    /// [`shutdown_timeout`](Self::shutdown_timeout): stops taking records, lets
    /// handlers that are running finish, commits completed work
    /// synchronously, flushes metrics (when a
    /// [`meter_provider`](Self::meter_provider) was given), leaves the group,
    /// and returns what was done.
    ///
    /// For a service, pass [`shutdown_signal()`](crate::shutdown_signal)
    /// (SIGTERM or SIGINT), or call [`run`](Self::run), which does and also
    /// stops at once on a second signal.
    ///
    /// Must be called inside a tokio runtime (multi-thread or current-thread).
    /// The poll loop runs as a task on that runtime; commits and other
    /// blocking librdkafka calls run on threads of their own.
    ///
    /// # Errors
    /// [`RunError::Config`] before any network I/O when the configuration is
    /// invalid; [`RunError::Client`] when librdkafka cannot create the
    /// consumer or subscribe; [`RunError::NoRuntime`] outside a tokio
    /// runtime; [`RunError::Fatal`] when librdkafka raised a fatal error.
    pub async fn run_until<S>(self, signal: S) -> Result<RunSummary, RunError>
    where
        S: Future<Output = ()>,
    {
        let FreshConsumer { handler, settings } = self;
        crate::engine::run(handler, settings, signal, std::future::pending()).await
    }
}

impl<H> fmt::Debug for FreshConsumer<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        f.debug_struct("FreshConsumer")
            .field("handler", &std::any::type_name::<H>())
            .field("bootstrap_servers", &s.bootstrap_servers)
            .field("group_id", &s.group_id)
            .field("topics", &s.topics)
            .field("properties", &RedactedProperties(&s.properties))
            .field("max_buffered_records", &s.max_buffered_records)
            .field("split_partition_queues", &s.split_partition_queues)
            .field("commit_interval", &s.commit_interval)
            .field("commit_batch_records", &s.commit_batch_records)
            .field("retry", &s.retry)
            .field("on_exhausted", &s.on_exhausted)
            .field("storm_guard", &s.storm_guard)
            .field("max_record_age", &s.stale)
            .field("stale_retry_tier_records", &s.stale_retry_tiers)
            .field("handler_timeout", &s.handler_timeout)
            .field("objectives", &s.objectives)
            .field("slo_windows", &s.slo_windows)
            .field("revoke_timeout", &s.revoke_timeout)
            .field("shutdown_timeout", &s.shutdown_timeout)
            .field("poll_warning_ratio", &s.poll_warning_ratio)
            .field("event_time_header", &s.event_time_header)
            .field("read_headers", &s.read_headers)
            .field("outputs", &s.outputs)
            .field("origin_time", &s.origin_time)
            .field("trace", &s.trace)
            .field("batch", &s.batch)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
