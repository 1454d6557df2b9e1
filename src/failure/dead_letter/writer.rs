//! Writing dead-letter and retry-tier records: the producer (always
//! `acks=all` with idempotence), the headers of the configured style, and
//! the failure details they carry. The contract it writes, and the reader,
//! are the parent module's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::FutureRecord;

use super::config::DeadLetter;
use super::headers::*;
use super::origin::{Destination, Origin};
use crate::record::{Record, RecordTimestamp};

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
    /// Replaced by a new producer once librdkafka raised a fatal error on
    /// it (the idempotent producer does on a sequence desynchronisation,
    /// and then fails every later write).
    producer: crate::failure::producer::ReplaceableProducer,
    config: DeadLetter,
    group: String,
}

/// Consumer properties the library's producers inherit (the dead-letter
/// producer's and the output producer's).
pub(crate) fn inherited(key: &str) -> bool {
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
        secrets: Vec<String>,
    ) -> Result<Self, KafkaError> {
        Ok(DeadLetterWriter {
            producer: crate::failure::producer::ReplaceableProducer::new(
                producer_config,
                "dead-letter",
                secrets,
            )?,
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
        let producer = self.producer.get();
        let sent = producer
            .send(r, Duration::from_secs(0))
            .await
            .map(|_| ())
            .map_err(|(e, _)| e);
        if sent.is_err() {
            self.producer.replace_if_fatal(producer);
        }
        sent
    }

    #[cfg(test)]
    pub(super) fn headers(
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
    pub(super) fn headers_for(
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
