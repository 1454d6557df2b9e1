//! The owned record handed to a handler.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::bindings as rdsys;
use rdkafka::message::BorrowedMessage;

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
}

/// One record header: a name and an optional value (Kafka allows null values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The header name (Kafka header keys are UTF-8 strings). A name that
    /// is not UTF-8 (a client can write any bytes) arrives with U+FFFD in
    /// place of each invalid sequence, so two such names may compare equal.
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
    /// The partition leader epoch the record was written in
    /// (`rd_kafka_message_leader_epoch`), -1 when unknown. Committed with
    /// the offset after it, so a consumer that starts from the commit can
    /// tell a truncated log (KIP-320).
    leader_epoch: i32,
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
            leader_epoch: -1,
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

    pub(crate) fn from_message(topic: &str, m: &BorrowedMessage<'_>, headers: bool) -> Self {
        // SAFETY: a live consumer message with no error (a `BorrowedMessage`
        // is only built for those), valid while `m` is borrowed.
        unsafe { Self::from_native(topic, m.ptr(), headers) }
    }

    /// Copies a record out of a librdkafka consumer message: key, payload,
    /// partition, offset, timestamp (`rd_kafka_message_timestamp`) and
    /// headers (`rd_kafka_message_headers`, only when `headers` is true).
    /// `topic` is the name of the message's topic (the caller knows it; not
    /// read from the message).
    ///
    /// # Safety
    /// `m` points to a live consumer message whose `err` is
    /// `RD_KAFKA_RESP_ERR_NO_ERROR`, not destroyed before this returns.
    pub(crate) unsafe fn from_native(
        topic: &str,
        m: *const rdsys::rd_kafka_message_t,
        headers: bool,
    ) -> Self {
        // SAFETY: (caller) `m` is live; key and payload point to `key_len`
        // and `len` bytes, or are NULL.
        let (key, payload, partition, offset) = unsafe {
            let m = &*m;
            (
                native_slice(m.key.cast(), m.key_len),
                native_slice(m.payload.cast(), m.len),
                m.partition,
                m.offset,
            )
        };
        // SAFETY: (caller) `m` is live.
        let leader_epoch = unsafe { rdsys::rd_kafka_message_leader_epoch(m) };
        let mut ts_type = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: (caller) `m` is live.
        let ts = unsafe { rdsys::rd_kafka_message_timestamp(m, &mut ts_type) };
        let timestamp = match ts_type {
            _ if ts == -1 => RecordTimestamp::NotAvailable,
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => {
                RecordTimestamp::CreateTime(ts)
            }
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                RecordTimestamp::LogAppendTime(ts)
            }
            _ => RecordTimestamp::NotAvailable,
        };
        // SAFETY: (caller) `m` is live.
        let headers = if headers && unsafe { may_have_headers(m) } {
            let mut hdrs = std::ptr::null_mut();
            // SAFETY: (caller) `m` is live. On success `hdrs` belongs to the
            // message and lives as long as it does.
            match unsafe { rdsys::rd_kafka_message_headers(m, &mut hdrs) } {
                rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR if !hdrs.is_null() => {
                    // SAFETY: headers of the live message.
                    unsafe { native_headers(hdrs) }
                }
                _ => None,
            }
        } else {
            None
        };
        Record {
            bytes: join(topic.as_bytes(), key, payload),
            topic_len: topic.len(),
            key_len: key.map(<[u8]>::len),
            has_payload: payload.is_some(),
            partition,
            offset,
            leader_epoch,
            headers,
            timestamp,
        }
    }

    /// The partition leader epoch the record was written in, when the
    /// broker said (`None` for hand-built records).
    pub(crate) fn leader_epoch(&self) -> Option<i32> {
        (self.leader_epoch >= 0).then_some(self.leader_epoch)
    }

    /// The topic the record was read from.
    pub fn topic(&self) -> &str {
        // SAFETY: `bytes[..topic_len]` is always a copy of a `&str` (every
        // constructor writes it with `join(topic.as_bytes(), ..)` and the
        // bytes are never mutated: `Arc<[u8]>`), so it is UTF-8. Checking
        // it again cost 2 % of the consuming CPU (perf, issue 28): the
        // library reads the topic several times per record.
        unsafe { std::str::from_utf8_unchecked(&self.bytes[..self.topic_len]) }
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

/// `topic ++ key ++ payload` in one allocation, copied once (straight into
/// the `Arc`'s own buffer: no staging copy).
fn join(topic: &[u8], key: Option<&[u8]>, payload: Option<&[u8]>) -> Arc<[u8]> {
    let parts = [topic, key.unwrap_or_default(), payload.unwrap_or_default()];
    let len = parts.iter().map(|p| p.len()).sum();
    let mut joined = Arc::<[u8]>::new_uninit_slice(len);
    // The Arc is new, so no other reference exists yet.
    let buf = Arc::get_mut(&mut joined).expect("a new Arc is unique");
    let dst = buf.as_mut_ptr().cast::<u8>();
    let mut at = 0;
    for part in parts {
        // SAFETY: `dst` has room for `len` bytes, the sum of the parts'
        // lengths, so `at + part.len() <= len`; a new allocation does not
        // overlap the parts.
        unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), dst.add(at), part.len()) };
        at += part.len();
    }
    // SAFETY: the loop wrote all `len` bytes.
    unsafe { joined.assume_init() }
}

/// The librdkafka version [`may_have_headers`] was checked against
/// (2.12.1, the build rdkafka-sys 4.10 bundles), as `rd_kafka_version()`
/// gives it.
const HEADER_PEEK_VERIFIED: i32 = 0x020c_01ff;

/// Whether a consumed record may carry headers: `false` only when it
/// certainly has none, so that `rd_kafka_message_headers` is not called.
///
/// Why: librdkafka 2.12.1 parses a record's headers on first access, and
/// for a record of message format v2 without headers (the header section
/// is then one byte, the varint count 0) it still allocates, zeroes and
/// frees a parse buffer (`rd_kafka_msg_headers_parse`,
/// `rd_kafka_buf_new_shadow`): measured 0.16 us of CPU per record and 10 %
/// of the throughput on the peers workload (issue 28), for nothing.
///
/// How: in format v2 the header count directly follows the value inside
/// the record, and librdkafka hands the consumer the value in place (a
/// pointer into the fetch response or the decompressed batch, which holds
/// the whole record: `rd_kafka_msgset_reader_msg_v2` reads the value and
/// then the rest of the record from one contiguous slice). So the byte
/// after a non-null value is the count's first byte, and 0 means no
/// headers. Only where all of this holds, else the API decides:
/// - the running librdkafka is the version whose source was read
///   ([`HEADER_PEEK_VERIFIED`]; a dynamically linked other version takes
///   the API);
/// - the record came from a v2 record batch: librdkafka gives records of
///   v2 batches the batch's partition leader epoch, which Kafka brokers
///   (since 0.11) and librdkafka's mock stamp, and -1 to v0/v1 messages
///   (no headers, and no header section to read);
/// - the value is not null or empty: librdkafka points a null value at
///   NULL and an empty one at a static `""`, not into the record
///   (`rd_kafka_buf_read_kbytes_varint`), so neither has the record's
///   bytes behind it.
///
/// # Safety
/// `m` is a live message from a consumer's queue, without error.
unsafe fn may_have_headers(m: *const rdsys::rd_kafka_message_t) -> bool {
    // SAFETY: a plain version query.
    if unsafe { rdsys::rd_kafka_version() } != HEADER_PEEK_VERIFIED {
        return true;
    }
    // SAFETY: (caller) `m` is live.
    let msg = unsafe { &*m };
    // SAFETY: (caller) a live consumer message.
    if msg.payload.is_null()
        || msg.len == 0
        || unsafe { rdsys::rd_kafka_message_leader_epoch(m) } < 0
    {
        return true;
    }
    // SAFETY: a v2 record's value is followed, in the same buffer, by the
    // record's header count (see above), so `payload + len` is readable.
    unsafe { *msg.payload.cast::<u8>().add(msg.len) != 0 }
}

/// `len` bytes at `ptr`, or `None` for a NULL pointer.
///
/// # Safety
/// `ptr` is NULL or points to `len` readable bytes that outlive `'a`.
unsafe fn native_slice<'a>(ptr: *const u8, len: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        None
    } else if len == 0 {
        Some(&[])
    } else {
        // SAFETY: (caller) `len` readable bytes.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// Copies a librdkafka header list (`rd_kafka_header_get_all`), in the
/// producer's order. `None` for an empty list. A header name that is not
/// UTF-8 (Kafka's protocol requires UTF-8, but a client can write any bytes)
/// is kept with U+FFFD in place of the invalid bytes rather than failing
/// the record.
///
/// # Safety
/// `hdrs` is a live header list.
unsafe fn native_headers(hdrs: *const rdsys::rd_kafka_headers_t) -> Option<Arc<[Header]>> {
    // SAFETY: (caller) a live header list.
    let n = unsafe { rdsys::rd_kafka_header_cnt(hdrs) };
    if n == 0 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut name = std::ptr::null();
        let mut value = std::ptr::null();
        let mut size = 0;
        // SAFETY: (caller) a live header list; `i < count`. On success
        // `name` is a NUL-terminated string and `value` NULL or `size`
        // bytes, both owned by the list.
        let err =
            unsafe { rdsys::rd_kafka_header_get_all(hdrs, i, &mut name, &mut value, &mut size) };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: as above.
        let (name, value) = unsafe {
            (
                std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .into_owned(),
                native_slice(value.cast(), size).map(<[u8]>::to_vec),
            )
        };
        out.push(Header { name, value });
    }
    Some(Arc::from(out))
}

/// Where the event time of a succeeded record came from, for the age.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventTime {
    /// Milliseconds since the epoch, from the record timestamp.
    Record(RecordTimestamp),
    /// Milliseconds since the epoch, from the event-time header.
    Header(i64),
    /// Milliseconds since the epoch, from the origin-time header an
    /// upstream consumer's output carries (the end-to-end age).
    Origin(i64),
    /// No usable event time.
    Missing,
}

impl EventTime {
    /// The event time of `record`: its Kafka timestamp, or the value of the
    /// event-time header named by `header` when one is configured.
    pub(crate) fn of(header: Option<&str>, record: &Record) -> Self {
        match header {
            None => EventTime::Record(record.timestamp()),
            Some(name) => match record
                .header(name)
                .flatten()
                .and_then(parse_event_time_header)
            {
                Some(ms) => EventTime::Header(ms),
                None => EventTime::Missing,
            },
        }
    }

    /// Milliseconds since the Unix epoch, when usable.
    pub(crate) fn millis(self) -> Option<i64> {
        match self {
            EventTime::Record(ts) => ts.millis(),
            EventTime::Header(ms) | EventTime::Origin(ms) if ms >= 0 => Some(ms),
            _ => None,
        }
    }
}

/// What a record's origin-time header holds (`ORIGIN_TIME_HEADER` of
/// `crate::output`, named here by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OriginHeader {
    /// No header of that name.
    Absent,
    /// A usable time, milliseconds since the Unix epoch.
    Valid(i64),
    /// Present, but null, unparseable or negative.
    Malformed,
}

impl OriginHeader {
    /// The last header `name` of `record`, read as an event-time header.
    pub(crate) fn of(name: &str, record: &Record) -> Self {
        match record.header(name) {
            None => OriginHeader::Absent,
            Some(value) => match value.and_then(parse_event_time_header) {
                Some(ms) => OriginHeader::Valid(ms),
                None => OriginHeader::Malformed,
            },
        }
    }
}

/// Parses an event-time header value: ASCII decimal milliseconds since the
/// epoch, or 8 bytes big-endian.
pub(crate) fn parse_event_time_header(value: &[u8]) -> Option<i64> {
    if let Ok(s) = std::str::from_utf8(value)
        && let Ok(ms) = s.trim().parse::<i64>()
    {
        return (ms >= 0).then_some(ms);
    }
    let bytes: [u8; 8] = value.try_into().ok()?;
    let ms = i64::from_be_bytes(bytes);
    (ms >= 0).then_some(ms)
}

/// The event time of a fetched record in milliseconds since the Unix epoch,
/// as the event-age histogram takes it (record timestamp, or the
/// event-time header); `now_ms` when it has none.
pub(crate) fn event_time_ms(header: Option<&str>, record: &Record) -> i64 {
    EventTime::of(header, record)
        .millis()
        .unwrap_or_else(|| unix_ms(SystemTime::now()))
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
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

    /// librdkafka's header list as a consumer reads it: order kept, null
    /// and empty values told apart, and a name that is not UTF-8 kept
    /// (lossily) instead of failing the record.
    #[test]
    fn native_headers_keep_order_nulls_and_bad_names() {
        // SAFETY: a header list built and destroyed here; names and values
        // are copied by `rd_kafka_header_add`.
        let got = unsafe {
            let hdrs = rdsys::rd_kafka_headers_new(4);
            let add = |name: &[u8], value: Option<&[u8]>| {
                let (v, n) = match value {
                    Some(v) => (v.as_ptr().cast(), v.len() as isize),
                    None => (std::ptr::null(), 0),
                };
                let err = rdsys::rd_kafka_header_add(
                    hdrs,
                    name.as_ptr().cast(),
                    name.len() as isize,
                    v,
                    n,
                );
                assert_eq!(err, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
            };
            add(b"trace", Some(b"abc"));
            add(b"empty", Some(b""));
            add(b"null", None);
            add(b"bad\xff", Some(b"x"));
            let got = native_headers(hdrs);
            rdsys::rd_kafka_headers_destroy(hdrs);
            got
        };
        let got: Vec<(String, Option<Vec<u8>>)> = got
            .expect("headers")
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("trace".to_owned(), Some(b"abc".to_vec())),
                ("empty".to_owned(), Some(Vec::new())),
                ("null".to_owned(), None),
                ("bad\u{fffd}".to_owned(), Some(b"x".to_vec())),
            ]
        );
        // SAFETY: as above.
        let none = unsafe {
            let hdrs = rdsys::rd_kafka_headers_new(0);
            let got = native_headers(hdrs);
            rdsys::rd_kafka_headers_destroy(hdrs);
            got
        };
        assert!(none.is_none());
    }

    #[test]
    fn event_time_header_formats() {
        assert_eq!(
            parse_event_time_header(b"1700000000000"),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_event_time_header(&1_700_000_000_000i64.to_be_bytes()),
            Some(1_700_000_000_000)
        );
        assert_eq!(parse_event_time_header(b"-5"), None);
        assert_eq!(parse_event_time_header(b"soon"), None);
    }
}
