//! The dead-letter header contract, and reading a dead-lettered record back
//! for redrive.
//!
//! A dead-lettered record keeps the original key, payload and headers, and
//! gets these headers (with [`DeadLetterHeaders::Native`](crate::failure::DeadLetterHeaders::Native), every value is
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
//! | [`ERROR_MESSAGE`] | the last error's message (and its sources), capped at [`DeadLetter::max_error_message_bytes`](crate::failure::DeadLetter::max_error_message_bytes) |
//! | [`FIRST_FAILURE`] | first failed attempt, ms since the Unix epoch |
//! | [`LAST_FAILURE`] | last failed attempt, ms since the Unix epoch |
//! | [`RETRY_HISTORY`] | with [`RetryTopics`](crate::failure::RetryTopics): every failed stop so far, `topic:ms:error_type` entries joined by `,` (source first, then each tier) |
//!
//! A record written to a retry tier ([`RetryTopics`](crate::failure::RetryTopics))
//! carries the same headers (the source fields always describe the
//! **original** record, however many tiers it went through; [`ATTEMPTS`]
//! counts every attempt so far), plus:
//!
//! | header | value |
//! |---|---|
//! | [`RETRY_TIER`] | the tier it was written to, from 1 |
//! | [`RETRY_DUE`] | when it may be handled again, ms since the Unix epoch: the tier record's timestamp (its write time, `CreateTime`) plus the tier's delay |
//!
//! With [`DeadLetterHeaders::SpringKafka`](crate::failure::DeadLetterHeaders::SpringKafka), the source fields use Spring
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
//! they never change its origin under [`DeadLetterHeaders::Native`](crate::failure::DeadLetterHeaders::Native) (nor
//! `fresh_consumer.dlt.*` headers under [`DeadLetterHeaders::SpringKafka`](crate::failure::DeadLetterHeaders::SpringKafka)).
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

pub(super) mod config;
pub(super) mod headers;
mod origin;
mod record;
mod writer;

pub(crate) use config::weakens_delivery;
pub use headers::{
    ATTEMPTS, ERROR_MESSAGE, ERROR_TYPE, FIRST_FAILURE, GROUP, LAST_FAILURE, OFFSET, PARTITION,
    RETRY_DUE, RETRY_HISTORY, RETRY_TIER, SPRING_EXCEPTION_FQCN, SPRING_EXCEPTION_MESSAGE,
    SPRING_GROUP, SPRING_OFFSET, SPRING_PARTITION, SPRING_TIMESTAMP, SPRING_TIMESTAMP_TYPE,
    SPRING_TOPIC, TIMESTAMP, TIMESTAMP_TYPE, TOPIC,
};
pub(crate) use origin::{Destination, Origin};
pub use record::{DeadLetterRecord, FailedStop, NotDeadLetter, parse_history};
pub(crate) use writer::{DeadLetterWriter, FailureInfo, inherited};

#[cfg(test)]
mod tests;
