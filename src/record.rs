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
/// The topic name, key and payload are copied out of librdkafka's buffer once,
/// into one allocation per record, so the record can be moved into the
/// handler's future and outlive the poll. Cloning a record (the library does
/// for each handler attempt) shares that allocation: one reference count.
#[derive(Clone, Debug)]
pub struct Record {
    /// The topic name, then the key, then the payload.
    bytes: Arc<[u8]>,
    topic_len: usize,
    /// `None` for a null key.
    key_len: Option<usize>,
    /// `false` for a null payload (or once taken).
    has_payload: bool,
    partition: i32,
    offset: i64,
    /// `None` when the record has no headers (no allocation).
    headers: Option<Arc<[Header]>>,
    timestamp: RecordTimestamp,
}

impl Record {
    /// Builds a record by hand, for unit tests of handlers. Records consumed by
    /// [`FreshConsumer`](crate::FreshConsumer) are built by the library.
    pub fn new(topic: impl AsRef<str>, partition: i32, offset: i64) -> Self {
        let topic = topic.as_ref();
        Record {
            bytes: Arc::from(topic.as_bytes()),
            topic_len: topic.len(),
            key_len: None,
            has_payload: false,
            partition,
            offset,
            headers: None,
            timestamp: RecordTimestamp::NotAvailable,
        }
    }

    /// Replaces key and payload, keeping the topic.
    fn with_bytes(mut self, key: Option<&[u8]>, payload: Option<&[u8]>) -> Self {
        self.bytes = join(self.topic().as_bytes(), key, payload);
        self.key_len = key.map(<[u8]>::len);
        self.has_payload = payload.is_some();
        self
    }

    /// Sets the key (builder style, for tests).
    pub fn with_key(self, key: impl Into<Vec<u8>>) -> Self {
        let payload = self.payload().map(<[u8]>::to_vec);
        self.with_bytes(Some(&key.into()), payload.as_deref())
    }

    /// Sets the payload (builder style, for tests).
    pub fn with_payload(self, payload: impl Into<Vec<u8>>) -> Self {
        let key = self.key().map(<[u8]>::to_vec);
        self.with_bytes(key.as_deref(), Some(&payload.into()))
    }

    /// Sets the timestamp (builder style, for tests).
    pub fn with_timestamp(mut self, timestamp: RecordTimestamp) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Adds a header (builder style, for tests).
    pub fn with_header(mut self, name: impl Into<String>, value: Option<Vec<u8>>) -> Self {
        let mut headers = self.headers().to_vec();
        headers.push(Header {
            name: name.into(),
            value,
        });
        self.headers = Some(Arc::from(headers));
        self
    }

    pub(crate) fn from_message(topic: &str, m: &BorrowedMessage<'_>) -> Self {
        let headers = m.headers().filter(|h| h.count() > 0).map(|h| {
            h.iter()
                .map(|h| Header {
                    name: h.key.to_owned(),
                    value: h.value.map(<[u8]>::to_vec),
                })
                .collect()
        });
        let key = m.key();
        let payload = m.payload();
        Record {
            bytes: join(topic.as_bytes(), key, payload),
            topic_len: topic.len(),
            key_len: key.map(<[u8]>::len),
            has_payload: payload.is_some(),
            partition: m.partition(),
            offset: m.offset(),
            headers,
            timestamp: RecordTimestamp::from_rdkafka(m.timestamp()),
        }
    }

    /// The topic the record was read from.
    pub fn topic(&self) -> &str {
        // Built from a `&str`, so always UTF-8.
        std::str::from_utf8(&self.bytes[..self.topic_len]).unwrap_or_default()
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
        self.key_len
            .map(|n| &self.bytes[self.topic_len..self.topic_len + n])
    }

    /// The record value, `None` for a null value (a tombstone on a compacted topic).
    pub fn payload(&self) -> Option<&[u8]> {
        let start = self.topic_len + self.key_len.unwrap_or(0);
        self.has_payload.then(|| &self.bytes[start..])
    }

    /// Takes the payload out of the record. The bytes are copied once into
    /// the returned `Vec` (the record's own copy is shared with the library,
    /// which keeps it for a retry).
    pub fn take_payload(&mut self) -> Option<Vec<u8>> {
        let payload = self.payload().map(<[u8]>::to_vec);
        self.has_payload = false;
        payload
    }

    /// The record headers in the order the producer wrote them.
    pub fn headers(&self) -> &[Header] {
        self.headers.as_deref().unwrap_or_default()
    }

    /// The value of the last header with this name, if any (`Some(None)` for a
    /// header present with a null value).
    pub fn header(&self, name: &str) -> Option<Option<&[u8]>> {
        self.headers()
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

/// `topic ++ key ++ payload` in one allocation.
fn join(topic: &[u8], key: Option<&[u8]>, payload: Option<&[u8]>) -> Arc<[u8]> {
    SCRATCH.with_borrow_mut(|buf| {
        buf.clear();
        buf.extend_from_slice(topic);
        buf.extend_from_slice(key.unwrap_or_default());
        buf.extend_from_slice(payload.unwrap_or_default());
        let joined = Arc::from(&buf[..]);
        // Keep the scratch buffer small after an unusually large record.
        if buf.capacity() > SCRATCH_KEEP {
            *buf = Vec::new();
        }
        joined
    })
}

/// Records up to this size are joined in a reused per-thread buffer and
/// then copied once into their own allocation (collecting bytes straight
/// into an `Arc` copies byte by byte, several times slower).
const SCRATCH_KEEP: usize = 64 * 1024;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip() {
        let r = Record::new("orders", 3, 7);
        assert_eq!((r.topic(), r.key(), r.payload()), ("orders", None, None));
        let r = r.with_payload(b"v".to_vec());
        assert_eq!((r.key(), r.payload()), (None, Some(&b"v"[..])));
        let mut r = r.with_key(b"k1".to_vec());
        assert_eq!(r.topic(), "orders");
        assert_eq!((r.key(), r.payload()), (Some(&b"k1"[..]), Some(&b"v"[..])));
        let r2 = r.clone();
        assert_eq!(r.take_payload(), Some(b"v".to_vec()));
        assert_eq!((r.key(), r.payload()), (Some(&b"k1"[..]), None));
        assert_eq!(r2.payload(), Some(&b"v"[..]), "a clone keeps its payload");
        let empty = Record::new("t", 0, 0)
            .with_key(Vec::new())
            .with_payload(Vec::new());
        assert_eq!(
            (empty.key(), empty.payload()),
            (Some(&[][..]), Some(&[][..]))
        );
    }

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
