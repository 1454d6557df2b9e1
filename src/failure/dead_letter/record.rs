//! A dead-lettered record read back, for redrive ([`DeadLetterRecord`]).

use crate::record::{Header, Record, RecordTimestamp};

use super::headers::*;

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
