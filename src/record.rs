//! The owned record handed to a handler.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::message::{BorrowedMessage, Headers, Message};

/// A record's timestamp and where it came from (Kafka's `timestampType`).
///
/// Values are milliseconds since the Unix epoch, as Kafka stores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordTimestamp {
    /// The record carries no timestamp (message format v0, or a producer that
    /// set none). Such a record records no event age; see
    /// [`metrics::EVENT_TIMESTAMP_MISSING`](crate::metrics::EVENT_TIMESTAMP_MISSING).
    NotAvailable,
    /// Set by the producer (`CreateTime`): usually the event time.
    CreateTime(i64),
    /// Set by the broker when it appended the record (`LogAppendTime`, topic
    /// config `message.timestamp.type=LogAppendTime`).
    LogAppendTime(i64),
}

impl RecordTimestamp {
    /// Milliseconds since the Unix epoch, or `None` when not available or
    /// negative (Kafka uses -1 for "no timestamp").
    pub fn millis(self) -> Option<i64> {
        match self {
            RecordTimestamp::CreateTime(ms) | RecordTimestamp::LogAppendTime(ms) if ms >= 0 => {
                Some(ms)
            }
            _ => None,
        }
    }

    /// The timestamp as a [`SystemTime`], or `None` when not available.
    pub fn to_system_time(self) -> Option<SystemTime> {
        self.millis()
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms as u64))
    }

    /// The name used for the `fresh_consumer.timestamp.type` metric attribute:
    /// `create_time`, `log_append_time` or `none`.
    pub fn type_name(self) -> &'static str {
        match self {
            RecordTimestamp::NotAvailable => "none",
            RecordTimestamp::CreateTime(_) => "create_time",
            RecordTimestamp::LogAppendTime(_) => "log_append_time",
        }
    }

    pub(crate) fn from_rdkafka(ts: rdkafka::Timestamp) -> Self {
        match ts {
            rdkafka::Timestamp::NotAvailable => RecordTimestamp::NotAvailable,
            rdkafka::Timestamp::CreateTime(ms) => RecordTimestamp::CreateTime(ms),
            rdkafka::Timestamp::LogAppendTime(ms) => RecordTimestamp::LogAppendTime(ms),
        }
    }
}

/// One record header: a name and an optional value (Kafka allows null values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The header name (Kafka header keys are UTF-8 strings).
    pub name: String,
    /// The header value bytes, `None` for a null value.
    pub value: Option<Vec<u8>>,
}

/// A Kafka record, owned, as handed to a [`Handler`](crate::Handler).
///
/// Key, payload and headers are copied out of librdkafka's buffer once, so the
/// record can be moved into the handler's future and outlive the poll. The
/// topic name is shared between all records of a partition.
#[derive(Clone, Debug)]
pub struct Record {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
    // Shared, so that a retry hands the handler another copy of the record
    // without copying the bytes again (a clone is three reference counts).
    key: Option<Arc<[u8]>>,
    payload: Option<Arc<[u8]>>,
    headers: Arc<[Header]>,
    timestamp: RecordTimestamp,
}

impl Record {
    /// Builds a record by hand, for unit tests of handlers. Records consumed by
    /// [`FreshConsumer`](crate::FreshConsumer) are built by the library.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32, offset: i64) -> Self {
        Record {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            payload: None,
            headers: Arc::from([]),
            timestamp: RecordTimestamp::NotAvailable,
        }
    }

    /// Sets the key (builder style, for tests).
    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(Arc::from(key.into()));
        self
    }

    /// Sets the payload (builder style, for tests).
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = Some(Arc::from(payload.into()));
        self
    }

    /// Sets the timestamp (builder style, for tests).
    pub fn with_timestamp(mut self, timestamp: RecordTimestamp) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Adds a header (builder style, for tests).
    pub fn with_header(mut self, name: impl Into<String>, value: Option<Vec<u8>>) -> Self {
        let mut headers = self.headers.to_vec();
        headers.push(Header {
            name: name.into(),
            value,
        });
        self.headers = Arc::from(headers);
        self
    }

    pub(crate) fn from_message(topic: &Arc<str>, m: &BorrowedMessage<'_>) -> Self {
        let headers: Arc<[Header]> = match m.headers() {
            Some(h) => h
                .iter()
                .map(|h| Header {
                    name: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect(),
            None => Arc::from([]),
        };
        Record {
            topic: Arc::clone(topic),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(Arc::from),
            payload: m.payload().map(Arc::from),
            headers,
            timestamp: RecordTimestamp::from_rdkafka(m.timestamp()),
        }
    }

    /// The topic the record was read from.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition number within the topic.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The record's offset within its partition.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The record key, `None` for a null key.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    /// The record value, `None` for a null value (a tombstone on a compacted topic).
    pub fn payload(&self) -> Option<&[u8]> {
        self.payload.as_deref()
    }

    /// Takes the payload out of the record. The bytes are copied once into
    /// the returned `Vec` (the record's own copy is shared with the library,
    /// which keeps it for a retry).
    pub fn take_payload(&mut self) -> Option<Vec<u8>> {
        self.payload.take().map(|p| p.to_vec())
    }

    /// The record headers in the order the producer wrote them.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// The value of the last header with this name, if any (`Some(None)` for a
    /// header present with a null value).
    pub fn header(&self, name: &str) -> Option<Option<&[u8]>> {
        self.headers
            .iter()
            .rev()
            .find(|h| h.name == name)
            .map(|h| h.value.as_deref())
    }

    /// The record timestamp and its type.
    pub fn timestamp(&self) -> RecordTimestamp {
        self.timestamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_timestamps_are_not_available() {
        assert_eq!(RecordTimestamp::CreateTime(-1).millis(), None);
        assert_eq!(RecordTimestamp::NotAvailable.millis(), None);
        assert_eq!(RecordTimestamp::LogAppendTime(5).millis(), Some(5));
    }

    #[test]
    fn last_header_wins() {
        let r = Record::new("t", 0, 0)
            .with_header("a", Some(b"1".to_vec()))
            .with_header("a", None);
        assert_eq!(r.header("a"), Some(None));
        assert_eq!(r.header("b"), None);
    }
}
