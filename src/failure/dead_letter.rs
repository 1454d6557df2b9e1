//! The dead-letter header contract, and reading a dead-lettered record back
//! for redrive.
//!
//! A dead-lettered record keeps the original key, payload and headers, and
//! gets these headers (with [`DeadLetterHeaders::Native`], every value is
//! UTF-8 text; integers in decimal):
//!
//! | header | value |
//! |---|---|
//! | [`TOPIC`] | source topic |
//! | [`PARTITION`] | source partition |
//! | [`OFFSET`] | source offset |
//! | [`TIMESTAMP`] | original record timestamp, ms since the Unix epoch (absent when the record had none) |
//! | [`TIMESTAMP_TYPE`] | `create_time`, `log_append_time` or `none` |
//! | [`GROUP`] | consumer group (`group.id`) |
//! | [`ATTEMPTS`] | handler attempts made |
//! | [`ERROR_TYPE`] | `handler_error`, `panic`, `timeout` or `permanent` |
//! | [`ERROR_MESSAGE`] | the last error's message (and its sources), capped at [`DeadLetter::max_error_message_bytes`] |
//! | [`FIRST_FAILURE`] | first failed attempt, ms since the Unix epoch |
//! | [`LAST_FAILURE`] | last failed attempt, ms since the Unix epoch |
//! | [`RETRY_HISTORY`] | with [`RetryTopics`](crate::RetryTopics): every failed stop so far, `topic:ms:error_type` entries joined by `,` (source first, then each tier) |
//!
//! A record written to a retry tier ([`RetryTopics`](crate::RetryTopics))
//! carries the same headers (the source fields always describe the
//! **original** record, however many tiers it went through; [`ATTEMPTS`]
//! counts every attempt so far), plus:
//!
//! | header | value |
//! |---|---|
//! | [`RETRY_TIER`] | the tier it was written to, from 1 |
//! | [`RETRY_DUE`] | when it may be handled again, ms since the Unix epoch: the tier record's timestamp (its write time, `CreateTime`) plus the tier's delay |
//!
//! With [`DeadLetterHeaders::SpringKafka`], the source fields use Spring
//! Kafka's names and encodings instead ([`SPRING_TOPIC`], ...: partition as a
//! 4-byte, offset and timestamp as 8-byte big-endian integers, timestamp type
//! `CREATE_TIME`/`LOG_APPEND_TIME`, error type in `kafka_dlt-exception-fqcn`);
//! attempts and failure times keep the native names.
//!
//! The headers the library writes replace the original record's headers of
//! the same names (the written style's and the shared ones), so each is read
//! back once and as the library wrote it. The other style's headers are the
//! original record's own: a record redriven from a Spring Kafka dead-letter
//! topic (or carrying forged `kafka_dlt-original-*` headers) keeps them, and
//! they never change its origin under [`DeadLetterHeaders::Native`] (nor
//! `fresh_consumer.dlt.*` headers under [`DeadLetterHeaders::SpringKafka`]).
//! [`DeadLetterRecord::from_record`] reads the style the library wrote, its
//! headers coming after the original ones;
//! [`DeadLetterRecord::from_record_with`] reads one given style.
//!
//! The dead-letter record's partition is chosen by the producer from the key;
//! its timestamp is the time it was written.
//!
//! With tracing on ([`FreshConsumer::tracer_provider`](crate::FreshConsumer::tracer_provider)),
//! the headers the propagator writes (`traceparent` and `tracestate` for
//! W3C; `tracestate` may be empty) carry the context of the process span of the
//! record's last attempt, in place of the original headers of those names,
//! so a redriven record continues that trace.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use crate::error::ConfigError;
use crate::record::{Header, Record, RecordTimestamp};

/// Header names written with each dead-lettered record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterHeaders {
    /// The library's own names (`fresh_consumer.dlt.*`, see
    /// [`dead_letter`](crate::dead_letter)); every value is UTF-8 text.
    #[default]
    Native,
    /// Spring Kafka's names (`kafka_dlt-original-topic`, ...) and encodings
    /// (partition as a 4-byte and offset and timestamp as 8-byte big-endian
    /// integers), for tooling built around Spring's dead-letter topics.
    SpringKafka,
}

/// The source and error fields of [`DeadLetterHeaders::Native`].
const NATIVE_FIELDS: [&str; 8] = [
    TOPIC,
    PARTITION,
    OFFSET,
    TIMESTAMP,
    TIMESTAMP_TYPE,
    GROUP,
    ERROR_TYPE,
    ERROR_MESSAGE,
];
/// The source and error fields of [`DeadLetterHeaders::SpringKafka`].
const SPRING_FIELDS: [&str; 8] = [
    SPRING_TOPIC,
    SPRING_PARTITION,
    SPRING_OFFSET,
    SPRING_TIMESTAMP,
    SPRING_TIMESTAMP_TYPE,
    SPRING_GROUP,
    SPRING_EXCEPTION_FQCN,
    SPRING_EXCEPTION_MESSAGE,
];
/// The headers written in both styles (with the native names).
const SHARED_FIELDS: [&str; 6] = [
    ATTEMPTS,
    FIRST_FAILURE,
    LAST_FAILURE,
    RETRY_TIER,
    RETRY_DUE,
    RETRY_HISTORY,
];

impl DeadLetterHeaders {
    /// `true` for a header the library writes in this style (its source and
    /// error fields, and the attempts, failure times and retry headers).
    /// Every other header, those of the other style among them, is the
    /// original record's own.
    fn owns(self, name: &str) -> bool {
        let fields = match self {
            DeadLetterHeaders::Native => &NATIVE_FIELDS,
            DeadLetterHeaders::SpringKafka => &SPRING_FIELDS,
        };
        fields.contains(&name) || SHARED_FIELDS.contains(&name)
    }

    /// The style the library wrote `record`'s headers in: the one whose
    /// source-topic header comes last (the library's headers follow the
    /// original record's own); [`Native`](Self::Native) when it has neither.
    fn written_on(record: &Record) -> Self {
        record
            .headers()
            .iter()
            .rev()
            .find_map(|h| match h.name.as_str() {
                TOPIC => Some(DeadLetterHeaders::Native),
                SPRING_TOPIC => Some(DeadLetterHeaders::SpringKafka),
                _ => None,
            })
            .unwrap_or_default()
    }
}

/// Where and how records are dead-lettered.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct DeadLetter {
    pub(crate) topic: Option<String>,
    pub(crate) headers: DeadLetterHeaders,
    pub(crate) max_error_message_bytes: usize,
    pub(crate) producer_properties: Vec<(String, String)>,
}

/// Default for [`DeadLetter::max_error_message_bytes`].
pub const DEFAULT_MAX_ERROR_MESSAGE_BYTES: usize = 1_024;

impl Default for DeadLetter {
    fn default() -> Self {
        DeadLetter {
            topic: None,
            headers: DeadLetterHeaders::Native,
            max_error_message_bytes: DEFAULT_MAX_ERROR_MESSAGE_BYTES,
            producer_properties: Vec::new(),
        }
    }
}

impl DeadLetter {
    /// Dead-letter to `<source topic>.dlt`, with the library's header names.
    pub fn new() -> Self {
        Self::default()
    }

    /// Dead-letter every record to this topic instead of
    /// `<source topic>.dlt`. The topic must exist (or the brokers must
    /// auto-create it); its partition count is independent of the source's:
    /// the producer picks the partition from the key.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Which header names to write. Defaults to [`DeadLetterHeaders::Native`].
    pub fn headers(mut self, headers: DeadLetterHeaders) -> Self {
        self.headers = headers;
        self
    }

    /// Cap on the error message header, in bytes (cut at a character
    /// boundary). Defaults to 1,024.
    pub fn max_error_message_bytes(mut self, bytes: usize) -> Self {
        self.max_error_message_bytes = bytes;
        self
    }

    /// Sets a librdkafka property on the dead-letter producer only (which
    /// also writes the retry tiers of [`RetryTopics`](crate::RetryTopics)).
    /// The producer otherwise inherits the consumer's `bootstrap.servers`,
    /// `client.id` and security settings (`security.protocol`, `sasl.*`,
    /// `ssl.*`), and always uses `acks=all` with `enable.idempotence=true`;
    /// `message.timeout.ms` defaults to 30 s (a failed write is retried by
    /// the library, and the partition reports itself blocked meanwhile).
    ///
    /// The source offset is committed past once the write is acknowledged,
    /// so properties that would weaken that acknowledgement are refused:
    /// [`validate`](crate::FreshConsumer::validate) and
    /// [`run_until`](crate::FreshConsumer::run_until) return
    /// [`ConfigError::DeadLetterProducerProperty`] for
    /// - `acks` (or `request.required.acks`) other than `all` or `-1`: with
    ///   `0` the write counts as done once sent, with `1` once the leader
    ///   has it, which a leader failover loses;
    /// - `enable.idempotence` other than `true`: a retried write could then
    ///   duplicate or reorder records, and librdkafka would accept `acks=0`
    ///   and `acks=1`;
    /// - `max.in.flight.requests.per.connection` (or `max.in.flight`) above
    ///   5: more than the idempotent producer keeps ordered (librdkafka
    ///   would refuse it only when the producer is created);
    /// - `transactional.id`, set to anything: the producer is not
    ///   transactional, and a transactional one fails every write made
    ///   outside a transaction.
    ///
    /// `acks=all`, `enable.idempotence=true` and at most 5 requests in
    /// flight are accepted (they change nothing).
    pub fn producer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.producer_properties.push((key.into(), value.into()));
        self
    }

    /// The dead-letter topic for records of `source`.
    pub(crate) fn topic_for(&self, source: &str) -> String {
        match &self.topic {
            Some(t) => t.clone(),
            None => format!("{source}.dlt"),
        }
    }

    /// Refuses the [`producer_property`](Self::producer_property) values
    /// that would weaken the acknowledgement the source offset is committed
    /// past on.
    pub(crate) fn check_producer_properties(&self) -> Result<(), ConfigError> {
        for (property, value) in &self.producer_properties {
            if let Some(reason) = weakens_delivery(property, value.trim()) {
                return Err(ConfigError::DeadLetterProducerProperty {
                    property: property.clone(),
                    value: value.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }
}

/// Why setting dead-letter producer property `key` to `value` would let the
/// library commit past a write the brokers did not durably acknowledge (or
/// could not take), if it would.
fn weakens_delivery(key: &str, value: &str) -> Option<&'static str> {
    match key {
        "acks" | "request.required.acks"
            if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
        {
            Some(
                "the source offset is committed past once the write is acknowledged, and only \
                 acks=all means every in-sync replica has the record (0: acknowledged once \
                 sent; 1: once the leader has it, lost with the leader)",
            )
        }
        "enable.idempotence" if !crate::error::is_true(value) => Some(
            "without idempotence a retried write can duplicate or reorder records, and \
             librdkafka then accepts acks other than all",
        ),
        "max.in.flight.requests.per.connection" | "max.in.flight"
            if value.parse::<i64>().is_ok_and(|n| n > 5) =>
        {
            Some(
                "the idempotent producer keeps the order of at most 5 requests in flight \
                 (librdkafka would refuse the producer when it is created)",
            )
        }
        "transactional.id" => Some(
            "the dead-letter producer is not transactional: a transactional producer fails \
             every write made outside a transaction, and read_committed readers would not \
             see the records until one commits",
        ),
        _ => None,
    }
}

/// Header: source topic.
pub const TOPIC: &str = "fresh_consumer.dlt.topic";
/// Header: source partition.
pub const PARTITION: &str = "fresh_consumer.dlt.partition";
/// Header: source offset.
pub const OFFSET: &str = "fresh_consumer.dlt.offset";
/// Header: original timestamp, ms since the Unix epoch.
pub const TIMESTAMP: &str = "fresh_consumer.dlt.timestamp";
/// Header: original timestamp type.
pub const TIMESTAMP_TYPE: &str = "fresh_consumer.dlt.timestamp_type";
/// Header: consumer group.
pub const GROUP: &str = "fresh_consumer.dlt.group";
/// Header: handler attempts made.
pub const ATTEMPTS: &str = "fresh_consumer.dlt.attempts";
/// Header: failure class.
pub const ERROR_TYPE: &str = "fresh_consumer.dlt.error.type";
/// Header: last error message (capped).
pub const ERROR_MESSAGE: &str = "fresh_consumer.dlt.error.message";
/// Header: first failure time, ms since the Unix epoch.
pub const FIRST_FAILURE: &str = "fresh_consumer.dlt.first_failure";
/// Header: last failure time, ms since the Unix epoch.
pub const LAST_FAILURE: &str = "fresh_consumer.dlt.last_failure";

/// Header (retry tiers): the tier the record was written to, from 1.
pub const RETRY_TIER: &str = "fresh_consumer.retry.tier";
/// Header (retry tiers): the due time, ms since the Unix epoch.
pub const RETRY_DUE: &str = "fresh_consumer.retry.due";
/// Header (retry tiers and the dead-letter topic after them): the failed
/// stops so far, `topic:ms:error_type` entries joined by `,`.
pub const RETRY_HISTORY: &str = "fresh_consumer.retry.history";

/// Spring Kafka header: source topic.
pub const SPRING_TOPIC: &str = "kafka_dlt-original-topic";
/// Spring Kafka header: source partition (4-byte big-endian).
pub const SPRING_PARTITION: &str = "kafka_dlt-original-partition";
/// Spring Kafka header: source offset (8-byte big-endian).
pub const SPRING_OFFSET: &str = "kafka_dlt-original-offset";
/// Spring Kafka header: original timestamp (8-byte big-endian ms).
pub const SPRING_TIMESTAMP: &str = "kafka_dlt-original-timestamp";
/// Spring Kafka header: `CREATE_TIME`, `LOG_APPEND_TIME` or `NO_TIMESTAMP_TYPE`.
pub const SPRING_TIMESTAMP_TYPE: &str = "kafka_dlt-original-timestamp-type";
/// Spring Kafka header: consumer group.
pub const SPRING_GROUP: &str = "kafka_dlt-original-consumer-group";
/// Spring Kafka header: exception class; here the failure class.
pub const SPRING_EXCEPTION_FQCN: &str = "kafka_dlt-exception-fqcn";
/// Spring Kafka header: exception message.
pub const SPRING_EXCEPTION_MESSAGE: &str = "kafka_dlt-exception-message";

/// Where a record came from originally: the record itself, or (for a
/// record read from a retry tier) what its headers say.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) timestamp: RecordTimestamp,
    /// Handler attempts made before this record's.
    pub(crate) attempts_before: u32,
    pub(crate) first_failure: Option<SystemTime>,
    /// The failed stops so far ([`RETRY_HISTORY`]), empty for a fresh record.
    pub(crate) history: String,
    /// The user's headers, without the library's.
    pub(crate) headers: Vec<Header>,
}

impl Origin {
    /// A record read from a source topic: it is its own origin.
    pub(crate) fn of(record: &Record) -> Self {
        Origin {
            topic: record.topic().to_owned(),
            partition: record.partition(),
            offset: record.offset(),
            timestamp: record.timestamp(),
            attempts_before: 0,
            first_failure: None,
            history: String::new(),
            headers: record.headers().to_vec(),
        }
    }

    /// A record read from a retry tier: its origin from the headers the
    /// library wrote on it, in the style it wrote them in
    /// ([`DeadLetterRecord::from_record`]: the other style's headers, which
    /// the original record carried, do not count). A record without them
    /// (written there by someone else) is its own origin, and so is one
    /// whose headers are malformed (logged).
    pub(crate) fn of_tier_record(record: &Record) -> Self {
        let d = match DeadLetterRecord::from_record(record) {
            Ok(d) => d,
            Err(e) => {
                if record.header(TOPIC).is_some() || record.header(SPRING_TOPIC).is_some() {
                    tracing::warn!(
                        topic = record.topic(),
                        partition = record.partition(),
                        offset = record.offset(),
                        error = %e,
                        "a retry-tier record's origin headers are malformed; it counts as its own origin"
                    );
                }
                return Self::of(record);
            }
        };
        let text = |name: &str| {
            record
                .header(name)
                .flatten()
                .and_then(|v| std::str::from_utf8(v).ok())
        };
        Origin {
            topic: d.topic,
            partition: d.partition,
            offset: d.offset,
            timestamp: d.timestamp,
            attempts_before: d.attempts.unwrap_or(0),
            first_failure: text(FIRST_FAILURE)
                .and_then(|v| v.parse::<u64>().ok())
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            history: text(RETRY_HISTORY).unwrap_or_default().to_owned(),
            headers: d.headers,
        }
    }
}

/// Where a write goes besides its topic: a retry tier (with the tier, the
/// write's timestamp and its due time, ms since the Unix epoch), or the
/// dead-letter topic.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Destination {
    Tier {
        tier: usize,
        written_ms: i64,
        due_ms: i64,
    },
    DeadLetter,
}

/// Why a record failed, carried into the dead-letter headers.
#[derive(Clone, Debug)]
pub(crate) struct FailureInfo {
    pub(crate) attempts: u32,
    pub(crate) error_type: &'static str,
    pub(crate) error_message: String,
    pub(crate) first_failure: SystemTime,
    pub(crate) last_failure: SystemTime,
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn cap(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Writes exhausted records to their dead-letter topic and waits for the
/// broker's acknowledgement.
pub(crate) struct DeadLetterWriter {
    /// Replaced by a new producer once librdkafka raised a fatal error on it
    /// (the idempotent producer does on a sequence desynchronisation, and
    /// then fails every later write): see [`Self::replace_if_fatal`].
    producer: std::sync::Mutex<FutureProducer>,
    producer_config: ClientConfig,
    config: DeadLetter,
    group: String,
}

/// Consumer properties the dead-letter producer inherits.
fn inherited(key: &str) -> bool {
    key == "bootstrap.servers"
        || key == "metadata.broker.list"
        || key == "client.id"
        || key == "client.rack"
        || key == "broker.address.family"
        || key.starts_with("security.")
        || key.starts_with("sasl.")
        || key.starts_with("ssl.")
        || key.starts_with("ssl_")
        || key.starts_with("enable.ssl")
        || key.starts_with("enable.sasl")
        || key.starts_with("socket.")
}

impl DeadLetterWriter {
    pub(crate) fn producer_config(
        consumer_properties: &[(String, String)],
        config: &DeadLetter,
    ) -> ClientConfig {
        let mut cc = ClientConfig::new();
        for (k, v) in consumer_properties.iter().filter(|(k, _)| inherited(k)) {
            cc.set(k, v);
        }
        // librdkafka's default of 300 s would hide an unwritable dead-letter
        // topic (and keep the partition silently stuck) for five minutes.
        cc.set("message.timeout.ms", "30000");
        for (k, v) in &config.producer_properties {
            cc.set(k, v);
        }
        // Last, over any alias: validation refused other values
        // (`DeadLetter::check_producer_properties`).
        cc.set("acks", "all");
        cc.set("enable.idempotence", "true");
        cc
    }

    pub(crate) fn new(
        producer_config: ClientConfig,
        config: DeadLetter,
        group: String,
    ) -> Result<Self, KafkaError> {
        Ok(DeadLetterWriter {
            producer: std::sync::Mutex::new(producer_config.create()?),
            producer_config,
            config,
            group,
        })
    }

    /// The dead-letter topic for records of `source`.
    pub(crate) fn topic_for(&self, source: &str) -> String {
        self.config.topic_for(source)
    }

    /// Writes `record` (from `origin`) to `topic`, a retry tier or the
    /// dead-letter topic, and waits for the acknowledgement (`acks=all`).
    /// `failure` describes the attempts on `record` itself. `trace` is the
    /// trace context to carry (the process span's, as the propagator writes
    /// it; empty without tracing): it replaces the original headers of those
    /// names.
    pub(crate) async fn write(
        &self,
        record: &Record,
        origin: &Origin,
        topic: &str,
        failure: &FailureInfo,
        destination: Destination,
        trace: &[(String, String)],
    ) -> Result<(), KafkaError> {
        let headers = self.headers_for(record.topic(), origin, failure, destination, trace);
        let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(headers);
        if let Destination::Tier { written_ms, .. } = destination {
            // The due time is this timestamp plus the tier's delay.
            r = r.timestamp(written_ms);
        }
        if let Some(k) = record.key() {
            r = r.key(k);
        }
        if let Some(p) = record.payload() {
            r = r.payload(p);
        }
        let producer = self
            .producer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let sent = producer
            .send(r, Duration::from_secs(0))
            .await
            .map(|_| ())
            .map_err(|(e, _)| e);
        if sent.is_err() && self.replace_if_fatal(&producer) {
            // Dropping the last handle of a producer purges, flushes (up to
            // 500 ms) and joins its threads: not on an async worker thread.
            drop(tokio::task::spawn_blocking(move || drop(producer)));
        }
        sent
    }

    /// Replaces `failed` with a new producer when librdkafka raised a fatal
    /// error on it: a fatal producer fails every later write, so retrying on
    /// it would block the partition until the process restarts. Returns
    /// `true` when `failed` is fatal (replaced now or by another write).
    fn replace_if_fatal(&self, failed: &FutureProducer) -> bool {
        let Some((code, reason)) = failed.client().fatal_error() else {
            return false;
        };
        let mut current = self.producer.lock().unwrap_or_else(|e| e.into_inner());
        if current.client().native_ptr() != failed.client().native_ptr() {
            return true; // Another partition's write replaced it already.
        }
        match self.producer_config.create::<FutureProducer>() {
            Ok(fresh) => {
                tracing::warn!(
                    ?code,
                    %reason,
                    "the dead-letter producer raised a fatal error; replaced it with a new one"
                );
                // Not the last handle: the caller still holds `failed`.
                drop(std::mem::replace(&mut *current, fresh));
            }
            Err(e) => tracing::error!(
                error = %e,
                "the dead-letter producer raised a fatal error and a new one could not be created"
            ),
        }
        true
    }

    #[cfg(test)]
    fn headers(
        &self,
        record: &Record,
        f: &FailureInfo,
        trace: &[(String, String)],
    ) -> OwnedHeaders {
        self.headers_for(
            record.topic(),
            &Origin::of(record),
            f,
            Destination::DeadLetter,
            trace,
        )
    }

    /// The headers of a write of a record read from `failed_on`, from
    /// `origin`, after `f`'s attempts, to `destination`.
    fn headers_for(
        &self,
        failed_on: &str,
        origin: &Origin,
        f: &FailureInfo,
        destination: Destination,
        trace: &[(String, String)],
    ) -> OwnedHeaders {
        let style = self.config.headers;
        let mut h = OwnedHeaders::new_with_capacity(origin.headers.len() + 14 + trace.len());
        for orig in &origin.headers {
            // The library's own headers (of the style it writes) replace the
            // record's headers of those names, so each is read back once and
            // as written; the other style's headers are the user's.
            if trace.iter().any(|(k, _)| *k == orig.name) || style.owns(&orig.name) {
                continue;
            }
            h = h.insert(KafkaHeader {
                key: &orig.name,
                value: orig.value.as_deref(),
            });
        }
        for (key, value) in trace {
            h = h.insert(KafkaHeader {
                key,
                value: Some(value.as_bytes()),
            });
        }
        let text = |h: OwnedHeaders, key: &str, value: &str| {
            h.insert(KafkaHeader {
                key,
                value: Some(value.as_bytes()),
            })
        };
        let message = cap(&f.error_message, self.config.max_error_message_bytes);
        let ts = origin.timestamp;
        match style {
            DeadLetterHeaders::Native => {
                h = text(h, TOPIC, &origin.topic);
                h = text(h, PARTITION, &origin.partition.to_string());
                h = text(h, OFFSET, &origin.offset.to_string());
                if let Some(ms) = ts.millis() {
                    h = text(h, TIMESTAMP, &ms.to_string());
                }
                h = text(h, TIMESTAMP_TYPE, ts.type_name());
                h = text(h, GROUP, &self.group);
                h = text(h, ERROR_TYPE, f.error_type);
                h = text(h, ERROR_MESSAGE, message);
            }
            DeadLetterHeaders::SpringKafka => {
                let spring_type = match ts {
                    RecordTimestamp::CreateTime(_) => "CREATE_TIME",
                    RecordTimestamp::LogAppendTime(_) => "LOG_APPEND_TIME",
                    RecordTimestamp::NotAvailable => "NO_TIMESTAMP_TYPE",
                };
                h = text(h, SPRING_TOPIC, &origin.topic);
                h = h.insert(KafkaHeader {
                    key: SPRING_PARTITION,
                    value: Some(&origin.partition.to_be_bytes()),
                });
                h = h.insert(KafkaHeader {
                    key: SPRING_OFFSET,
                    value: Some(&origin.offset.to_be_bytes()),
                });
                h = h.insert(KafkaHeader {
                    key: SPRING_TIMESTAMP,
                    value: Some(&ts.millis().unwrap_or(-1).to_be_bytes()),
                });
                h = text(h, SPRING_TIMESTAMP_TYPE, spring_type);
                h = text(h, SPRING_GROUP, &self.group);
                h = text(h, SPRING_EXCEPTION_FQCN, f.error_type);
                h = text(h, SPRING_EXCEPTION_MESSAGE, message);
            }
        }
        h = text(
            h,
            ATTEMPTS,
            &(origin.attempts_before + f.attempts).to_string(),
        );
        let first = origin.first_failure.unwrap_or(f.first_failure);
        h = text(h, FIRST_FAILURE, &ms(first).to_string());
        h = text(h, LAST_FAILURE, &ms(f.last_failure).to_string());
        let retried = !origin.history.is_empty();
        if let Destination::Tier { tier, due_ms, .. } = destination {
            h = text(h, RETRY_TIER, &tier.to_string());
            h = text(h, RETRY_DUE, &due_ms.to_string());
        }
        if retried || matches!(destination, Destination::Tier { .. }) {
            let stop = format!("{failed_on}:{}:{}", ms(f.last_failure), f.error_type);
            let history = if retried {
                format!("{},{stop}", origin.history)
            } else {
                stop
            };
            h = text(h, RETRY_HISTORY, &history);
        }
        h
    }
}

/// A dead-lettered record read back, for redrive: where it came from, why it
/// failed, and the original key, payload and headers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeadLetterRecord {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// Original timestamp.
    pub timestamp: RecordTimestamp,
    /// Consumer group that gave the record up.
    pub group: Option<String>,
    /// Handler attempts made.
    pub attempts: Option<u32>,
    /// Failure class (`handler_error`, `panic`, `timeout`, `permanent`).
    pub error_type: Option<String>,
    /// Last error message (capped).
    pub error_message: Option<String>,
    /// The original key.
    pub key: Option<Vec<u8>>,
    /// The original payload.
    pub payload: Option<Vec<u8>>,
    /// The original headers, without the dead-letter and retry headers.
    pub headers: Vec<Header>,
    /// The retry tier the record was written to ([`RETRY_TIER`]), for a
    /// record read from a retry topic; `None` in a dead-letter topic.
    pub retry_tier: Option<u32>,
    /// When a retry-tier record is due ([`RETRY_DUE`]), ms since the Unix
    /// epoch.
    pub retry_due: Option<i64>,
    /// The failed stops of a record that went through retry tiers
    /// ([`RETRY_HISTORY`]), oldest first; empty otherwise.
    pub history: Vec<FailedStop>,
}

/// One failed stop of a record on its way through retry tiers: where it
/// failed, when, and how ([`RETRY_HISTORY`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedStop {
    /// The topic the record was read from when it failed (the source topic,
    /// then each tier topic).
    pub topic: String,
    /// When its last attempt there failed, ms since the Unix epoch.
    pub failed_at_ms: i64,
    /// The failure class (`handler_error`, `panic`, `timeout`, `permanent`).
    pub error_type: String,
}

/// Parses a [`RETRY_HISTORY`] value; malformed entries are left out.
pub fn parse_history(value: &str) -> Vec<FailedStop> {
    value
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.rsplitn(3, ':');
            let error_type = parts.next()?.to_owned();
            let failed_at_ms = parts.next()?.parse().ok()?;
            let topic = parts.next()?.to_owned();
            (!topic.is_empty()).then_some(FailedStop {
                topic,
                failed_at_ms,
                error_type,
            })
        })
        .collect()
}

/// A record that is not a readable dead-letter record.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("not a dead-letter record: header `{header}` {problem}")]
pub struct NotDeadLetter {
    /// The header that is missing or malformed.
    pub header: &'static str,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl DeadLetterRecord {
    /// Reads the dead-letter headers of `record` in the style the library
    /// wrote them in: the style whose source-topic header ([`TOPIC`] or
    /// [`SPRING_TOPIC`]) comes last. The library writes its headers after
    /// the original record's own, so a header of the other style that the
    /// original record carried (a record redriven from a Spring Kafka
    /// dead-letter topic, or a forged one) does not decide the style; it is
    /// one of the original headers ([`DeadLetterRecord::headers`]). With
    /// neither header the record is not a dead-letter record ([`TOPIC`] is
    /// missing). Use [`from_record_with`](Self::from_record_with) to read
    /// one style only.
    ///
    /// # Errors
    /// [`NotDeadLetter`] when the source topic, partition or offset header is
    /// missing or malformed.
    pub fn from_record(record: &Record) -> Result<Self, NotDeadLetter> {
        Self::from_record_with(record, DeadLetterHeaders::written_on(record))
    }

    /// Reads the dead-letter headers of `record` in the style `style` only:
    /// the source and error fields come from that style's headers (the last
    /// one of each name), and the headers of the other style are the
    /// original record's own ([`DeadLetterRecord::headers`]).
    ///
    /// # Errors
    /// [`NotDeadLetter`] when that style's source topic, partition or offset
    /// header is missing or malformed.
    pub fn from_record_with(
        record: &Record,
        style: DeadLetterHeaders,
    ) -> Result<Self, NotDeadLetter> {
        let get = |name: &str| record.header(name).flatten();
        let text = |name: &str| get(name).and_then(|v| std::str::from_utf8(v).ok());
        let num = |name: &'static str| -> Result<Option<i64>, NotDeadLetter> {
            match text(name) {
                None => Ok(None),
                Some(s) => s.parse().map(Some).map_err(|_| NotDeadLetter {
                    header: name,
                    problem: "is not a decimal integer",
                }),
            }
        };
        let spring = style == DeadLetterHeaders::SpringKafka;
        let (topic, partition, offset, timestamp, group, error_type, error_message);
        if spring {
            let be = |name: &'static str, len: usize| -> Result<i64, NotDeadLetter> {
                let v = get(name).ok_or(NotDeadLetter {
                    header: name,
                    problem: "is missing",
                })?;
                match (len, v.len()) {
                    (4, 4) => Ok(i32::from_be_bytes(v.try_into().unwrap()) as i64),
                    (8, 8) => Ok(i64::from_be_bytes(v.try_into().unwrap())),
                    _ => Err(NotDeadLetter {
                        header: name,
                        problem: "has the wrong length",
                    }),
                }
            };
            topic = text(SPRING_TOPIC).unwrap_or_default().to_owned();
            partition = be(SPRING_PARTITION, 4)? as i32;
            offset = be(SPRING_OFFSET, 8)?;
            let ts = be(SPRING_TIMESTAMP, 8).unwrap_or(-1);
            timestamp = match text(SPRING_TIMESTAMP_TYPE) {
                Some("CREATE_TIME") if ts >= 0 => RecordTimestamp::CreateTime(ts),
                Some("LOG_APPEND_TIME") if ts >= 0 => RecordTimestamp::LogAppendTime(ts),
                _ => RecordTimestamp::NotAvailable,
            };
            group = text(SPRING_GROUP).map(str::to_owned);
            error_type = text(SPRING_EXCEPTION_FQCN).map(str::to_owned);
            error_message = text(SPRING_EXCEPTION_MESSAGE).map(str::to_owned);
        } else {
            topic = text(TOPIC)
                .ok_or(NotDeadLetter {
                    header: TOPIC,
                    problem: "is missing",
                })?
                .to_owned();
            partition = num(PARTITION)?.ok_or(NotDeadLetter {
                header: PARTITION,
                problem: "is missing",
            })? as i32;
            offset = num(OFFSET)?.ok_or(NotDeadLetter {
                header: OFFSET,
                problem: "is missing",
            })?;
            let ts = num(TIMESTAMP)?;
            timestamp = match (text(TIMESTAMP_TYPE), ts) {
                (Some("create_time"), Some(ms)) => RecordTimestamp::CreateTime(ms),
                (Some("log_append_time"), Some(ms)) => RecordTimestamp::LogAppendTime(ms),
                _ => RecordTimestamp::NotAvailable,
            };
            group = text(GROUP).map(str::to_owned);
            error_type = text(ERROR_TYPE).map(str::to_owned);
            error_message = text(ERROR_MESSAGE).map(str::to_owned);
        }
        if topic.is_empty() {
            return Err(NotDeadLetter {
                header: if spring { SPRING_TOPIC } else { TOPIC },
                problem: "is empty",
            });
        }
        let attempts = num(ATTEMPTS)?.map(|a| a as u32);
        let headers = record
            .headers()
            .iter()
            .filter(|h| !style.owns(&h.name))
            .cloned()
            .collect();
        Ok(DeadLetterRecord {
            topic,
            partition,
            offset,
            timestamp,
            group,
            attempts,
            error_type,
            error_message,
            key: record.key().map(<[u8]>::to_vec),
            payload: record.payload().map(<[u8]>::to_vec),
            headers,
            retry_tier: num(RETRY_TIER)?.map(|t| t as u32),
            retry_due: num(RETRY_DUE)?,
            history: text(RETRY_HISTORY).map(parse_history).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dead_letter_topic_follows_the_source() {
        assert_eq!(DeadLetter::new().topic_for("orders"), "orders.dlt");
        assert_eq!(
            DeadLetter::new().topic("all.dlq").topic_for("orders"),
            "all.dlq"
        );
    }

    fn info() -> FailureInfo {
        FailureInfo {
            attempts: 4,
            error_type: "handler_error",
            error_message: "é".repeat(600),
            first_failure: UNIX_EPOCH + Duration::from_millis(1_000),
            last_failure: UNIX_EPOCH + Duration::from_millis(2_000),
        }
    }

    fn to_record(h: OwnedHeaders, key: &[u8], payload: &[u8]) -> Record {
        use rdkafka::message::Headers;
        let mut r = Record::new("src.dlt", 0, 9)
            .with_key(key.to_vec())
            .with_payload(payload.to_vec());
        for x in h.iter() {
            r = r.with_header(x.key, x.value.map(<[u8]>::to_vec));
        }
        r
    }

    fn writer(style: DeadLetterHeaders) -> DeadLetterWriter {
        let mut producer = ClientConfig::new();
        producer.set("bootstrap.servers", "127.0.0.1:1");
        DeadLetterWriter::new(
            producer,
            DeadLetter::new()
                .headers(style)
                .max_error_message_bytes(101),
            "g1".into(),
        )
        .unwrap()
    }

    #[test]
    fn headers_round_trip_in_both_styles() {
        let original = Record::new("orders", 3, 386)
            .with_key(b"k".to_vec())
            .with_payload(b"p".to_vec())
            .with_header("trace", Some(b"abc".to_vec()))
            .with_timestamp(RecordTimestamp::CreateTime(1_700_000_000_000));
        for style in [DeadLetterHeaders::Native, DeadLetterHeaders::SpringKafka] {
            let w = writer(style);
            let h = w.headers(&original, &info(), &[]);
            let parked = to_record(h, b"k", b"p");
            let d = DeadLetterRecord::from_record(&parked).unwrap();
            assert_eq!(d.topic, "orders");
            assert_eq!(d.partition, 3);
            assert_eq!(d.offset, 386);
            assert_eq!(d.timestamp, RecordTimestamp::CreateTime(1_700_000_000_000));
            assert_eq!(d.group.as_deref(), Some("g1"));
            assert_eq!(d.attempts, Some(4));
            assert_eq!(d.error_type.as_deref(), Some("handler_error"));
            // Capped at 101 bytes, cut back to a character boundary.
            assert_eq!(d.error_message.as_deref().unwrap().len(), 100);
            assert_eq!(d.key.as_deref(), Some(&b"k"[..]));
            assert_eq!(
                d.headers,
                vec![Header {
                    name: "trace".into(),
                    value: Some(b"abc".to_vec())
                }]
            );
        }
    }

    #[test]
    fn a_record_through_two_tiers_keeps_its_origin_and_gathers_its_history() {
        let original = Record::new("orders", 3, 386)
            .with_key(b"k".to_vec())
            .with_payload(b"p".to_vec())
            .with_header("trace", Some(b"abc".to_vec()))
            .with_timestamp(RecordTimestamp::CreateTime(1_700_000_000_000));
        for style in [DeadLetterHeaders::Native, DeadLetterHeaders::SpringKafka] {
            let w = writer(style);
            // Failed twice on the source, written to tier 1.
            let mut f = info();
            f.attempts = 2;
            let h = w.headers_for(
                "orders",
                &Origin::of(&original),
                &f,
                Destination::Tier {
                    tier: 1,
                    written_ms: 4_000,
                    due_ms: 5_000,
                },
                &[],
            );
            let tier1 = to_record(h, b"k", b"p");
            let d = DeadLetterRecord::from_record(&tier1).unwrap();
            assert_eq!((d.retry_tier, d.retry_due), (Some(1), Some(5_000)));
            assert_eq!(d.attempts, Some(2));
            assert_eq!(d.history.len(), 1);
            assert_eq!(d.history[0].topic, "orders");
            assert_eq!(d.history[0].failed_at_ms, 2_000);
            // Read back from tier 1, failed once more, then dead-lettered.
            let origin = Origin::of_tier_record(&tier1);
            assert_eq!(origin.topic, "orders");
            assert_eq!(origin.offset, 386);
            assert_eq!(
                origin.timestamp,
                RecordTimestamp::CreateTime(1_700_000_000_000)
            );
            assert_eq!(origin.first_failure, Some(f.first_failure));
            let mut f2 = info();
            f2.attempts = 1;
            f2.error_type = "timeout";
            f2.last_failure = UNIX_EPOCH + Duration::from_millis(9_000);
            let h = w.headers_for(
                "orders.retry.1s",
                &origin,
                &f2,
                Destination::DeadLetter,
                &[],
            );
            let parked = to_record(h, b"k", b"p");
            let d = DeadLetterRecord::from_record(&parked).unwrap();
            assert_eq!(
                (d.topic.as_str(), d.partition, d.offset),
                ("orders", 3, 386)
            );
            assert_eq!(d.attempts, Some(3));
            assert_eq!(d.retry_tier, None);
            assert_eq!(
                d.history,
                vec![
                    FailedStop {
                        topic: "orders".into(),
                        failed_at_ms: 2_000,
                        error_type: "handler_error".into()
                    },
                    FailedStop {
                        topic: "orders.retry.1s".into(),
                        failed_at_ms: 9_000,
                        error_type: "timeout".into()
                    }
                ]
            );
            assert_eq!(d.error_type.as_deref(), Some("timeout"));
            // Only the user's header, once.
            assert_eq!(
                d.headers,
                vec![Header {
                    name: "trace".into(),
                    value: Some(b"abc".to_vec())
                }]
            );
            assert_eq!(
                parked
                    .header(FIRST_FAILURE)
                    .flatten()
                    .map(|v| std::str::from_utf8(v).unwrap()),
                Some("1000")
            );
        }
    }

    #[test]
    fn headers_of_the_other_style_are_the_users_and_never_the_origin() {
        let forged_native = [
            (TOPIC, b"elsewhere".to_vec()),
            (PARTITION, b"7".to_vec()),
            (OFFSET, b"999".to_vec()),
            (TIMESTAMP, b"5".to_vec()),
            (TIMESTAMP_TYPE, b"create_time".to_vec()),
            (RETRY_HISTORY, b"elsewhere:1:panic".to_vec()),
        ];
        let forged_spring = [
            (SPRING_TOPIC, b"elsewhere".to_vec()),
            (SPRING_PARTITION, 7i32.to_be_bytes().to_vec()),
            (SPRING_OFFSET, 999i64.to_be_bytes().to_vec()),
            (SPRING_TIMESTAMP, 5i64.to_be_bytes().to_vec()),
            (SPRING_TIMESTAMP_TYPE, b"CREATE_TIME".to_vec()),
        ];
        for style in [DeadLetterHeaders::Native, DeadLetterHeaders::SpringKafka] {
            let (same, other) = match style {
                DeadLetterHeaders::Native => (&forged_native[..], &forged_spring[..]),
                DeadLetterHeaders::SpringKafka => (&forged_spring[..], &forged_native[..]),
            };
            // The source record carries a complete set of each style.
            let mut original = Record::new("orders", 3, 386)
                .with_timestamp(RecordTimestamp::CreateTime(1_700_000_000_000));
            for (k, v) in other.iter().chain(same) {
                original = original.with_header(*k, Some(v.clone()));
            }
            let w = writer(style);
            let mut f = info();
            f.attempts = 1;
            let tier = Destination::Tier {
                tier: 1,
                written_ms: 4_000,
                due_ms: 5_000,
            };
            let h = w.headers_for("orders", &Origin::of(&original), &f, tier, &[]);
            let tier1 = to_record(h, b"k", b"p");
            let origin = Origin::of_tier_record(&tier1);
            assert_eq!(
                (origin.topic.as_str(), origin.partition, origin.offset),
                ("orders", 3, 386),
                "{style:?}"
            );
            assert_eq!(
                origin.timestamp,
                RecordTimestamp::CreateTime(1_700_000_000_000)
            );
            assert_eq!(origin.history, "orders:2000:handler_error");
            let h = w.headers_for("orders.retry.1s", &origin, &f, Destination::DeadLetter, &[]);
            let parked = to_record(h, b"k", b"p");
            for r in [&tier1, &parked] {
                let d = DeadLetterRecord::from_record(r).unwrap();
                assert_eq!(
                    format!("{d:?}"),
                    format!(
                        "{:?}",
                        DeadLetterRecord::from_record_with(r, style).unwrap()
                    )
                );
                assert_eq!((d.topic.as_str(), d.offset), ("orders", 386), "{style:?}");
                // The other style's headers are the user's, once; the
                // forged ones of the written style (and the shared retry
                // history) are gone.
                let own: Vec<(&str, &[u8])> = d
                    .headers
                    .iter()
                    .map(|h| (h.name.as_str(), h.value.as_deref().unwrap()))
                    .collect();
                let want: Vec<(&str, &[u8])> = other
                    .iter()
                    .filter(|(k, _)| *k != RETRY_HISTORY)
                    .map(|(k, v)| (*k, v.as_slice()))
                    .collect();
                assert_eq!(own, want, "{style:?}");
                for (k, _) in same.iter().chain(other) {
                    let n = r.headers().iter().filter(|h| h.name == *k).count();
                    assert!(n <= 1, "{style:?}: {k} written {n} times");
                }
            }
            let d = DeadLetterRecord::from_record(&parked).unwrap();
            assert_eq!(d.history.len(), 2, "{:?}", d.history);
            assert_eq!(d.history[0].topic, "orders");
        }
    }

    #[test]
    fn a_record_is_read_in_the_style_written_last() {
        // A Spring-style record that carried one native header, and a
        // native one that carried one Spring header.
        let spring = Record::new("src.dlt", 0, 1)
            .with_header(TOPIC, Some(b"forged".to_vec()))
            .with_header(SPRING_TOPIC, Some(b"orders".to_vec()))
            .with_header(SPRING_PARTITION, Some(2i32.to_be_bytes().to_vec()))
            .with_header(SPRING_OFFSET, Some(9i64.to_be_bytes().to_vec()));
        let d = DeadLetterRecord::from_record(&spring).unwrap();
        assert_eq!((d.topic.as_str(), d.partition, d.offset), ("orders", 2, 9));
        assert_eq!(d.headers.len(), 1);
        let native = Record::new("src.dlt", 0, 1)
            .with_header(SPRING_TOPIC, Some(b"forged".to_vec()))
            .with_header(TOPIC, Some(b"orders".to_vec()))
            .with_header(PARTITION, Some(b"2".to_vec()))
            .with_header(OFFSET, Some(b"9".to_vec()));
        let d = DeadLetterRecord::from_record(&native).unwrap();
        assert_eq!((d.topic.as_str(), d.partition, d.offset), ("orders", 2, 9));
        // One style only: the other's headers do not make a dead-letter
        // record.
        let e = DeadLetterRecord::from_record_with(&native, DeadLetterHeaders::SpringKafka)
            .unwrap_err();
        assert_eq!(e.header, SPRING_PARTITION);
        // Malformed headers of the style written last are an error, not a
        // fall-back to the other style.
        let malformed = native.clone().with_header(OFFSET, Some(b"x".to_vec()));
        assert_eq!(
            DeadLetterRecord::from_record(&malformed)
                .unwrap_err()
                .header,
            OFFSET
        );
        // A tier record with malformed headers is its own origin.
        let origin = Origin::of_tier_record(&malformed);
        assert_eq!((origin.topic.as_str(), origin.offset), ("src.dlt", 1));
    }

    #[test]
    fn weakening_producer_properties_are_refused() {
        for (k, v) in [
            ("acks", "0"),
            ("acks", "1"),
            ("request.required.acks", "0"),
            ("enable.idempotence", "false"),
            ("max.in.flight.requests.per.connection", "6"),
            ("max.in.flight", "6"),
            ("transactional.id", "t"),
        ] {
            let e = DeadLetter::new()
                .producer_property(k, v)
                .check_producer_properties()
                .unwrap_err();
            assert!(
                matches!(&e, ConfigError::DeadLetterProducerProperty { property, value, .. } if property == k && value == v),
                "{e:?}"
            );
        }
        for (k, v) in [
            ("acks", "all"),
            ("acks", "ALL"),
            ("acks", "-1"),
            ("request.required.acks", " -1"),
            ("enable.idempotence", "true"),
            ("max.in.flight", "5"),
            ("message.timeout.ms", "300"),
        ] {
            DeadLetter::new()
                .producer_property(k, v)
                .check_producer_properties()
                .unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
    }

    #[test]
    fn the_trace_context_replaces_the_original_one() {
        let original = Record::new("orders", 0, 1)
            .with_header("traceparent", Some(b"00-old".to_vec()))
            .with_header("other", Some(b"x".to_vec()))
            .with_header("tracestate", Some(b"a=1".to_vec()));
        let trace = [("traceparent".to_owned(), "00-new".to_owned())];
        let h = writer(DeadLetterHeaders::Native).headers(&original, &info(), &trace);
        let d = DeadLetterRecord::from_record(&to_record(h, b"k", b"p")).unwrap();
        let names: Vec<(&str, &[u8])> = d
            .headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_deref().unwrap()))
            .collect();
        // Only the headers the propagator writes are replaced.
        assert_eq!(
            names,
            [
                ("other", &b"x"[..]),
                ("tracestate", &b"a=1"[..]),
                ("traceparent", &b"00-new"[..])
            ]
        );
    }

    #[test]
    fn a_plain_record_is_not_a_dead_letter() {
        let e = DeadLetterRecord::from_record(&Record::new("t", 0, 0)).unwrap_err();
        assert_eq!(e.header, TOPIC);
    }

    #[test]
    fn the_producer_inherits_security_but_not_consumer_settings() {
        let props = vec![
            ("bootstrap.servers".to_owned(), "b:9092".to_owned()),
            ("sasl.password".to_owned(), "pw".to_owned()),
            ("session.timeout.ms".to_owned(), "6000".to_owned()),
        ];
        let cc = DeadLetterWriter::producer_config(&props, &DeadLetter::new());
        assert_eq!(cc.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(cc.get("sasl.password"), Some("pw"));
        assert_eq!(cc.get("session.timeout.ms"), None);
        assert_eq!(cc.get("acks"), Some("all"));
        assert_eq!(cc.get("enable.idempotence"), Some("true"));
    }
}
