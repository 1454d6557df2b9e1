//! [`TestRecord`]: a record to produce, with its key, headers, partition
//! and timestamp.

use std::time::{Duration, SystemTime};

/// A record for [`TestKafka::produce`](super::TestKafka::produce): payload,
/// and optionally key, headers, partition and timestamp (`CreateTime`).
///
/// ```
/// use std::time::Duration;
/// use fresh_consumer::testing::TestRecord;
///
/// let r = TestRecord::new(r#"{"order":1}"#)
///     .key("customer-7")
///     .header("event-time", "1700000000000")
///     .partition(2)
///     .age(Duration::from_secs(600)); // stamped 10 minutes ago
/// # let _ = r;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct TestRecord {
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    pub(crate) partition: Option<i32>,
    pub(crate) timestamp: Stamp,
}

/// When a [`TestRecord`] is stamped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// By the producer, at the send.
    #[default]
    Now,
    /// This long before the send.
    Ago(Duration),
    /// At these ms since the Unix epoch.
    At(i64),
}

impl TestRecord {
    /// A record with this payload, no key, no headers; the producer's
    /// partitioner picks the partition and the producer stamps it now.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        TestRecord {
            payload: Some(payload.into()),
            ..Self::default()
        }
    }

    /// A record without a payload (a tombstone). Defaults as
    /// [`new`](Self::new).
    pub fn tombstone() -> Self {
        Self::default()
    }

    /// The key. Defaults to none (a null key).
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header (repeatable; names may repeat, in order). Defaults to
    /// no headers.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), Some(value.into())));
        self
    }

    /// Adds a header with a null value.
    pub fn null_header(mut self, name: impl Into<String>) -> Self {
        self.headers.push((name.into(), None));
        self
    }

    /// Produces to this partition. Defaults to the producer's partitioner
    /// (by key; a null key's partition is librdkafka's choice).
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Stamps the record (`CreateTime`) this long before it is sent, so its
    /// event age at the consumer starts at about `age`. Defaults to now.
    pub fn age(mut self, age: Duration) -> Self {
        self.timestamp = Stamp::Ago(age);
        self
    }

    /// Stamps the record (`CreateTime`) at this many milliseconds since the
    /// Unix epoch. Defaults to now.
    pub fn timestamp_ms(mut self, ms: i64) -> Self {
        self.timestamp = Stamp::At(ms);
        self
    }

    /// The timestamp to send, ms since the Unix epoch (`None`: the
    /// producer's clock at the send).
    pub(crate) fn timestamp_at_send(&self) -> Option<i64> {
        match self.timestamp {
            Stamp::Now => None,
            Stamp::At(ms) => Some(ms),
            Stamp::Ago(age) => {
                let now = crate::record::unix_ms(SystemTime::now());
                Some(now.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)))
            }
        }
    }
}
