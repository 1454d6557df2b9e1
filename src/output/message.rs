//! One output to write ([`Output`]) and the header that carries its origin
//! time.

/// The header carrying an output's origin event time: milliseconds since
/// the Unix epoch, decimal ASCII (`1733300000000`). Read as an event-time
/// header is (decimal ASCII, or 8 bytes big-endian).
pub const ORIGIN_TIME_HEADER: &str = "fresh_consumer.origin_time";

/// A record to send: topic, key, payload, headers, and optionally the
/// partition and timestamp (else the producer's partitioner picks the
/// partition from the key, and the timestamp is the send time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Output {
    pub(crate) topic: String,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    pub(crate) partition: Option<i32>,
    pub(crate) timestamp_ms: Option<i64>,
}

impl Output {
    /// A record to `topic`, with a null key and a null payload.
    pub fn to(topic: impl Into<String>) -> Self {
        Output {
            topic: topic.into(),
            ..Output::default()
        }
    }

    /// Sets the key. Defaults to a null key.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the payload (the value). Defaults to a null payload.
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// Adds a header, in order. A header named like one the library adds
    /// ([`ORIGIN_TIME_HEADER`], the trace context's) replaces the
    /// library's.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), Some(value.into())));
        self
    }

    /// Adds a header with a null value.
    pub fn null_header(mut self, name: impl Into<String>) -> Self {
        self.headers.push((name.into(), None));
        self
    }

    /// Sends to this partition. Defaults to the producer's partitioner
    /// (librdkafka's `partitioner`, by default a hash of the key).
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the record's timestamp (`CreateTime`), milliseconds since the
    /// Unix epoch. Defaults to the time of the send.
    pub fn timestamp_ms(mut self, ms: i64) -> Self {
        self.timestamp_ms = Some(ms);
        self
    }

    /// The topic it is sent to.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}
