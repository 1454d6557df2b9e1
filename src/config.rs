//! The builder: Kafka settings, the library's own options, and their validation.

use std::fmt;
use std::time::Duration;

use opentelemetry::metrics::Meter;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use crate::error::ConfigError;
use crate::failure::{OnExhausted, RetryPolicy, StormGuard};
use crate::ordering::ProcessingOrder;
use crate::slo::FreshnessObjective;

/// Default for [`FreshConsumer::max_buffered_records`].
pub const DEFAULT_MAX_BUFFERED_RECORDS: usize = 1_000;
/// Default for [`FreshConsumer::commit_interval`].
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// librdkafka's `fetch.queue.backoff.ms` unless set: how soon librdkafka
/// looks again at a partition whose queue was full.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// Default for [`FreshConsumer::commit_batch_records`].
pub const DEFAULT_COMMIT_BATCH_RECORDS: usize = 10_000;
/// Default initial backoff of [`FreshConsumer::retry_backoff`].
pub const DEFAULT_RETRY_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Default maximum backoff of [`FreshConsumer::retry_backoff`].
pub const DEFAULT_RETRY_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Default for [`FreshConsumer::revoke_timeout`].
pub const DEFAULT_REVOKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`FreshConsumer::shutdown_timeout`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default for [`FreshConsumer::poll_warning_ratio`].
pub const DEFAULT_POLL_WARNING_RATIO: f64 = 0.8;
/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_millis(300_000);

/// A consumer under construction: Kafka settings, the handler, and the
/// library's own options. Created by [`FreshConsumer::new`]; started by
/// [`FreshConsumer::run_until`] or [`FreshConsumer::run`].
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
///     .run_until(async { tokio::signal::ctrl_c().await.ok(); })
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

/// Everything but the handler.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) bootstrap_servers: Option<String>,
    pub(crate) group_id: Option<String>,
    pub(crate) topics: Vec<String>,
    pub(crate) properties: Vec<(String, String)>,
    pub(crate) max_buffered_records: usize,
    pub(crate) split_partition_queues: bool,
    pub(crate) commit_interval: Duration,
    pub(crate) commit_batch_records: usize,
    pub(crate) retry: RetryPolicy,
    pub(crate) on_exhausted: OnExhausted,
    pub(crate) storm_guard: StormGuard,
    pub(crate) handler_timeout: Option<Duration>,
    pub(crate) objectives: Vec<FreshnessObjective>,
    pub(crate) slo_windows: (Duration, Duration),
    pub(crate) revoke_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) poll_warning_ratio: f64,
    pub(crate) meter: Option<Meter>,
    pub(crate) meter_provider: Option<SdkMeterProvider>,
    pub(crate) event_time_header: Option<String>,
    pub(crate) read_headers: bool,
    pub(crate) processing_order: ProcessingOrder,
    /// Partition health: the handle's hub, thresholds, retention-overrun
    /// policy, statistics interval (builder methods in `crate::health`).
    pub(crate) health: crate::health::HealthSettings,
}

/// Settings checked and turned into a librdkafka configuration.
pub(crate) struct Validated {
    pub(crate) client_config: ClientConfig,
    pub(crate) group_id: String,
    pub(crate) topics: Vec<String>,
    pub(crate) max_poll_interval: Duration,
    /// Text to redact from librdkafka's log lines and errors: see
    /// [`secret_fragments`].
    pub(crate) secrets: Vec<String>,
    pub(crate) health: crate::health::HealthConfig,
}

impl<H> FreshConsumer<H> {
    /// Starts building a consumer that runs `handler` for each record.
    ///
    /// `handler` is an async function or closure taking a [`Record`](crate::Record)
    /// and returning `Result<(), E>`, or any type implementing
    /// [`Handler`](crate::Handler).
    pub fn new(handler: H) -> Self {
        FreshConsumer {
            handler,
            settings: Settings {
                bootstrap_servers: None,
                group_id: None,
                topics: Vec::new(),
                properties: Vec::new(),
                max_buffered_records: DEFAULT_MAX_BUFFERED_RECORDS,
                split_partition_queues: true,
                commit_interval: DEFAULT_COMMIT_INTERVAL,
                commit_batch_records: DEFAULT_COMMIT_BATCH_RECORDS,
                retry: RetryPolicy::default(),
                on_exhausted: OnExhausted::default(),
                storm_guard: StormGuard::default(),
                handler_timeout: None,
                objectives: Vec::new(),
                slo_windows: (
                    crate::slo::DEFAULT_SHORT_WINDOW,
                    crate::slo::DEFAULT_LONG_WINDOW,
                ),
                revoke_timeout: DEFAULT_REVOKE_TIMEOUT,
                shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
                poll_warning_ratio: DEFAULT_POLL_WARNING_RATIO,
                meter: None,
                meter_provider: None,
                event_time_header: None,
                read_headers: true,
                processing_order: ProcessingOrder::Partition,
                health: crate::health::HealthSettings::default(),
            },
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
    /// `queued.min.messages` or `fetch.queue.backoff.ms`.
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
    /// [`OnExhausted::Block`]: the partition stops at the record and keeps
    /// retrying at the capped backoff.
    pub fn on_exhausted(mut self, policy: OnExhausted) -> Self {
        self.settings.on_exhausted = policy;
        self
    }

    /// The guard that stops dead-lettering when too many recent records
    /// fail. Defaults to [`StormGuard::default`] (more than 50 % of the
    /// records of the last 60 s, once 20 finished). Only matters with
    /// [`OnExhausted::DeadLetter`].
    pub fn storm_guard(mut self, guard: StormGuard) -> Self {
        self.settings.storm_guard = guard;
        self
    }

    /// Adds a freshness objective: its share of records processed within
    /// its threshold is counted exactly in
    /// [`SLO_MESSAGES`](crate::metrics::SLO_MESSAGES), its threshold becomes
    /// an event-age bucket boundary, and its compliance and burn rate are
    /// evaluated in process ([`HealthSnapshot::objectives`](crate::HealthSnapshot::objectives)).
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
    /// comes from a header) or with [`OnExhausted::DeadLetter`] (a
    /// dead-letter record carries the original record's headers).
    pub fn read_headers(mut self, enabled: bool) -> Self {
        self.settings.read_headers = enabled;
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

impl Settings {
    pub(crate) fn validate(&self) -> Result<Validated, ConfigError> {
        let prop = |key: &str| {
            self.properties
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        for (property, instead) in [
            ("enable.auto.commit", "commit_interval"),
            ("enable.auto.offset.store", "commit_batch_records"),
        ] {
            if prop(property).is_some_and(is_true) {
                return Err(ConfigError::AutoCommit { property, instead });
            }
        }
        if prop("enable.partition.eof").is_some_and(is_true) {
            return Err(ConfigError::InvalidProperty {
                property: "enable.partition.eof".to_owned(),
                reason: "the library does not hand partition-EOF events to the handler (health \
                         reports a caught-up partition as lag 0); leave it false"
                    .to_owned(),
            });
        }
        let bootstrap = self
            .bootstrap_servers
            .as_deref()
            .or(prop("bootstrap.servers"))
            .or(prop("metadata.broker.list"));
        if bootstrap.is_none_or(|b| b.trim().is_empty()) && prop("test.mock.num.brokers").is_none()
        {
            return Err(ConfigError::MissingBootstrapServers);
        }
        let group_id = self
            .group_id
            .as_deref()
            .or(prop("group.id"))
            .filter(|g| !g.trim().is_empty())
            .ok_or(ConfigError::MissingGroupId)?
            .to_owned();
        if self.topics.is_empty() {
            return Err(ConfigError::MissingTopics);
        }
        if self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(ConfigError::EmptyTopicName);
        }
        let invalid = |option: &'static str, reason: &str| ConfigError::InvalidOption {
            option,
            reason: reason.to_owned(),
        };
        if self.max_buffered_records == 0 {
            return Err(invalid("max_buffered_records", "must be at least 1"));
        }
        if let Err(reason) = self.processing_order.validate() {
            return Err(invalid("processing_order", reason));
        }
        if self.commit_interval.is_zero() {
            return Err(invalid("commit_interval", "must be more than zero"));
        }
        if self.commit_batch_records == 0 {
            return Err(invalid("commit_batch_records", "must be at least 1"));
        }
        if let Err(reason) = self.retry.validate() {
            return Err(invalid("retry", reason));
        }
        for o in &self.objectives {
            if let Err(reason) = o.validate() {
                return Err(invalid("freshness_objective", reason));
            }
        }
        let (short, long) = self.slo_windows;
        if short.is_zero() || short >= long {
            return Err(invalid(
                "slo_windows",
                "short must be more than zero and less than long",
            ));
        }
        if self.handler_timeout.is_some_and(|t| t.is_zero()) {
            return Err(invalid("handler_timeout", "must be more than zero"));
        }
        if self.storm_guard.enabled
            && !(self.storm_guard.max_failure_ratio > 0.0
                && self.storm_guard.max_failure_ratio <= 1.0
                && !self.storm_guard.window.is_zero())
        {
            return Err(invalid(
                "storm_guard",
                "max_failure_ratio must be in (0, 1] and the window more than zero",
            ));
        }
        if let OnExhausted::DeadLetter(dl) = &self.on_exhausted
            && dl.topic.as_deref().is_some_and(|t| t.trim().is_empty())
        {
            return Err(invalid(
                "on_exhausted",
                "dead-letter topic must not be empty",
            ));
        }
        if !(self.poll_warning_ratio > 0.0 && self.poll_warning_ratio <= 1.0) {
            return Err(invalid("poll_warning_ratio", "must be in (0, 1]"));
        }
        if let Some(h) = &self.event_time_header
            && h.is_empty()
        {
            return Err(invalid("event_time_header", "must not be empty"));
        }
        if !self.read_headers {
            if self.event_time_header.is_some() {
                return Err(invalid(
                    "read_headers",
                    "`event_time_header` takes the event time from a header: headers must be read",
                ));
            }
            if matches!(self.on_exhausted, OnExhausted::DeadLetter(_)) {
                return Err(invalid(
                    "read_headers",
                    "dead-letter records carry the original record's headers: headers must be read",
                ));
            }
        }

        let mut cc = ClientConfig::new();
        cc.set("auto.offset.reset", "earliest");
        for (k, v) in &self.properties {
            cc.set(k, v);
        }
        if let Some(b) = &self.bootstrap_servers {
            cc.set("bootstrap.servers", b);
        }
        cc.set("group.id", &group_id);
        cc.set("enable.auto.commit", "false");
        cc.set("enable.auto.offset.store", "false");
        // Workers read their partitions' own queues (split off the main
        // queue), so librdkafka's per-partition queue is the buffer: it
        // fetches while a partition holds fewer than `max_buffered_records`,
        // and looks again soon after a worker drained it (librdkafka's
        // default backoff of a second would idle a drained partition).
        if self.split_partition_queues && prop("queued.min.messages").is_none() {
            cc.set("queued.min.messages", self.max_buffered_records.to_string());
        }
        if self.split_partition_queues && prop("fetch.queue.backoff.ms").is_none() {
            cc.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
        }
        // The library decides offset resets (auto.offset.reset=error for
        // librdkafka) and reads librdkafka's statistics.
        let health = self.health.configure(
            &mut cc,
            prop("auto.offset.reset"),
            prop("statistics.interval.ms"),
        )?;
        // Let librdkafka parse every property now, before any client exists.
        cc.create_native_config().map_err(redact_config_error)?;

        let max_poll_interval = match prop("max.poll.interval.ms") {
            Some(v) => Duration::from_millis(v.trim().parse::<u64>().map_err(|_| {
                ConfigError::InvalidProperty {
                    property: "max.poll.interval.ms".into(),
                    reason: "not a number of milliseconds".into(),
                }
            })?),
            None => DEFAULT_MAX_POLL_INTERVAL,
        };
        if self.revoke_timeout >= max_poll_interval {
            return Err(invalid(
                "revoke_timeout",
                "must be below max.poll.interval.ms",
            ));
        }
        Ok(Validated {
            client_config: cc,
            group_id,
            topics: self.topics.clone(),
            max_poll_interval,
            secrets: secret_fragments(&self.properties),
            health,
        })
    }
}

/// `true` for librdkafka properties whose values must never be shown.
pub(crate) fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("passphrase")
        || k.contains("secret")
        || k == "sasl.oauthbearer.config"
        || k == "ssl.key.pem"
        || k == "ssl_key"
        || k.contains("private.key")
        || k.contains("token")
}

/// The values of secret properties, longest first, for redaction from
/// librdkafka's log lines and errors, which may echo a value or part of it
/// (a malformed `sasl.oauthbearer.config` is reported as "Unrecognized
/// sasl.oauthbearer.config beginning at: <the rest of the value>", an invalid
/// extension by its value). Each value is listed whole, and by its
/// whitespace-separated parts and their `key=value` values of at least 4
/// bytes.
pub(crate) fn secret_fragments(properties: &[(String, String)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, v) in properties {
        if !is_secret_property(k) || v.is_empty() {
            continue;
        }
        out.push(v.clone());
        for part in v.split_whitespace() {
            let value = part.split_once('=').map(|(_, value)| value);
            out.extend(
                [Some(part), value]
                    .into_iter()
                    .flatten()
                    .filter(|p| p.len() >= 4)
                    .map(str::to_owned),
            );
        }
    }
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// `true` for what librdkafka reads as a true boolean property (`true`, `t`
/// or `1`, case-insensitive); anything else is false or a value librdkafka
/// rejects itself.
fn is_true(value: &str) -> bool {
    let v = value.trim();
    v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("t") || v == "1"
}

fn redact_config_error(e: KafkaError) -> ConfigError {
    match e {
        KafkaError::ClientConfig(_, desc, key, value) => {
            let reason = if is_secret_property(&key) || value.is_empty() {
                if value.is_empty() {
                    desc
                } else {
                    desc.replace(&value, "[redacted]")
                }
            } else {
                desc
            };
            ConfigError::InvalidProperty {
                property: key,
                reason: if reason.is_empty() {
                    "rejected by librdkafka".into()
                } else {
                    reason
                },
            }
        }
        other => ConfigError::InvalidProperty {
            property: String::new(),
            reason: other.to_string(),
        },
    }
}

struct RedactedProperties<'a>(&'a [(String, String)]);

impl fmt::Debug for RedactedProperties<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in self.0 {
            if is_secret_property(k) {
                m.entry(k, &"[redacted]");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
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
            .field("handler_timeout", &s.handler_timeout)
            .field("objectives", &s.objectives)
            .field("slo_windows", &s.slo_windows)
            .field("revoke_timeout", &s.revoke_timeout)
            .field("shutdown_timeout", &s.shutdown_timeout)
            .field("poll_warning_ratio", &s.poll_warning_ratio)
            .field("event_time_header", &s.event_time_header)
            .field("read_headers", &s.read_headers)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> FreshConsumer<()> {
        FreshConsumer::new(())
            .bootstrap_servers("localhost:9092")
            .group_id("g")
            .topics(["t"])
    }

    #[test]
    fn a_complete_config_validates() {
        base().validate().unwrap();
    }

    #[test]
    fn missing_required_settings_are_typed_errors() {
        let e = FreshConsumer::new(())
            .group_id("g")
            .topics(["t"])
            .validate();
        assert_eq!(e, Err(ConfigError::MissingBootstrapServers));
        let e = FreshConsumer::new(())
            .bootstrap_servers("b:1")
            .topics(["t"])
            .validate();
        assert_eq!(e, Err(ConfigError::MissingGroupId));
        let e = FreshConsumer::new(())
            .bootstrap_servers("b:1")
            .group_id("g")
            .validate();
        assert_eq!(e, Err(ConfigError::MissingTopics));
        let e = base().topics([""]).validate();
        assert_eq!(e, Err(ConfigError::EmptyTopicName));
    }

    #[test]
    fn auto_commit_names_the_library_option() {
        let e = base()
            .set("enable.auto.commit", "true")
            .validate()
            .unwrap_err();
        assert_eq!(
            e,
            ConfigError::AutoCommit {
                property: "enable.auto.commit",
                instead: "commit_interval"
            }
        );
        assert!(e.to_string().contains("commit_interval"));
        let e = base()
            .set("enable.auto.offset.store", "true")
            .validate()
            .unwrap_err();
        assert!(matches!(e, ConfigError::AutoCommit { .. }));
        // librdkafka's other spellings of true and false.
        for v in ["1", "T", "TRUE"] {
            let e = base().set("enable.auto.commit", v).validate().unwrap_err();
            assert!(matches!(e, ConfigError::AutoCommit { .. }), "{v}");
        }
        for v in ["false", "0", "f"] {
            base().set("enable.auto.commit", v).validate().unwrap();
        }
    }

    #[test]
    fn librdkafka_rejects_unknown_and_invalid_properties_before_io() {
        let e = base().set("no.such.property", "1").validate().unwrap_err();
        assert!(
            matches!(&e, ConfigError::InvalidProperty { property, .. } if property == "no.such.property"),
            "{e:?}"
        );
        let e = base()
            .set("session.timeout.ms", "soon")
            .validate()
            .unwrap_err();
        assert!(matches!(e, ConfigError::InvalidProperty { .. }), "{e:?}");
    }

    #[test]
    fn library_options_are_checked() {
        for c in [
            base().max_buffered_records(0),
            base().commit_interval(Duration::ZERO),
            base().commit_batch_records(0),
            base().retry_backoff(Duration::from_secs(2), Duration::from_secs(1)),
            base().poll_warning_ratio(0.0),
            base().poll_warning_ratio(1.5),
            base()
                .set("max.poll.interval.ms", "5000")
                .revoke_timeout(Duration::from_secs(6)),
        ] {
            assert!(
                matches!(c.validate(), Err(ConfigError::InvalidOption { .. })),
                "{c:?}"
            );
        }
    }

    #[test]
    fn partition_eof_events_are_refused() {
        for v in ["true", "T", "1"] {
            let e = base()
                .set("enable.partition.eof", v)
                .validate()
                .unwrap_err();
            assert!(
                matches!(&e, ConfigError::InvalidProperty { property, .. } if property == "enable.partition.eof"),
                "{v}: {e:?}"
            );
        }
        for v in ["false", "F", "0"] {
            base().set("enable.partition.eof", v).validate().unwrap();
        }
    }

    #[test]
    fn turning_headers_off_conflicts_with_options_that_need_them() {
        base().read_headers(false).validate().unwrap();
        for c in [
            base().read_headers(false).event_time_header("event-time"),
            base()
                .read_headers(false)
                .on_exhausted(OnExhausted::DeadLetter(Default::default())),
        ] {
            assert!(
                matches!(
                    c.validate(),
                    Err(ConfigError::InvalidOption {
                        option: "read_headers",
                        ..
                    })
                ),
                "{c:?}"
            );
        }
    }

    #[test]
    fn secrets_never_show_in_debug_or_errors() {
        let c = base()
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanisms", "PLAIN")
            .set("sasl.username", "alice")
            .set("sasl.password", "hunter2-very-secret")
            .set("sasl.oauthbearer.client.secret", "s3cr3t-oauth")
            .set("ssl.key.password", "keypass-xyz");
        let dbg = format!("{c:?}");
        for secret in ["hunter2-very-secret", "s3cr3t-oauth", "keypass-xyz"] {
            assert!(!dbg.contains(secret), "{dbg}");
        }
        assert!(dbg.contains("alice"));
        // An invalid value for a secret property is reported without the value.
        let e = base()
            .set("sasl.oauthbearer.config", "\u{0}hunter2-very-secret")
            .validate();
        if let Err(e) = e {
            assert!(!format!("{e} {e:?}").contains("hunter2-very-secret"));
        }
    }

    #[test]
    fn secret_fragments_cover_values_and_their_parts() {
        let props = [
            ("sasl.username".to_owned(), "alice".to_owned()),
            ("sasl.password".to_owned(), "pw".to_owned()),
            (
                "sasl.oauthbearer.config".to_owned(),
                "principal=u extension_x=ext-secret tail-secret".to_owned(),
            ),
            (
                "sasl.oauthbearer.assertion.private.key.passphrase".to_owned(),
                "phrase-1".to_owned(),
            ),
        ];
        let f = secret_fragments(&props);
        for want in [
            "pw",
            "principal=u extension_x=ext-secret tail-secret",
            "extension_x=ext-secret",
            "ext-secret",
            "tail-secret",
            "principal=u",
            "phrase-1",
        ] {
            assert!(f.iter().any(|s| s == want), "{want} missing from {f:?}");
        }
        assert!(!f.iter().any(|s| s == "alice" || s == "u"), "{f:?}");
        assert!(
            f.windows(2).all(|w| w[0].len() >= w[1].len()),
            "longest first"
        );
        for key in [
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "sasl.oauthbearer.assertion.private.key.pem",
        ] {
            assert!(is_secret_property(key), "{key}");
        }
        assert!(!is_secret_property("ssl.certificate.pem"));
    }
}
