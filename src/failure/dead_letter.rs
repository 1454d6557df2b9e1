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
//! | [`ERROR_TYPE`] | `handler_error`, `panic`, `timeout`, `output_error` or `permanent` |
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
use rdkafka::producer::FutureRecord;

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
pub(crate) fn weakens_delivery(key: &str, value: &str) -> Option<&'static str> {
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
    /// Failure class (`handler_error`, `panic`, `timeout`, `output_error`, `permanent`).
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
    /// The failure class (`handler_error`, `panic`, `timeout`, `output_error`, `permanent`).
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

mod writer;
pub(crate) use writer::{DeadLetterWriter, FailureInfo, inherited};

#[cfg(test)]
mod tests;
