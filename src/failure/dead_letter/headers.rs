//! The dead-letter headers: their names, and which set a dead-letter
//! writer adds ([`DeadLetterHeaders`]).

use crate::record::Record;

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

/// Header names written with each dead-lettered record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterHeaders {
    /// The library's own names (`fresh_consumer.dlt.*`, see
    /// [`dead_letter`](crate::failure::dead_letter)); every value is UTF-8 text.
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
    pub(super) fn owns(self, name: &str) -> bool {
        let fields = match self {
            DeadLetterHeaders::Native => &NATIVE_FIELDS,
            DeadLetterHeaders::SpringKafka => &SPRING_FIELDS,
        };
        fields.contains(&name) || SHARED_FIELDS.contains(&name)
    }

    /// The style the library wrote `record`'s headers in: the one whose
    /// source-topic header comes last (the library's headers follow the
    /// original record's own); [`Native`](Self::Native) when it has neither.
    pub(super) fn written_on(record: &Record) -> Self {
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
