//! Failing records: how often a record is retried, and what happens when its
//! attempts run out.
//!
//! A record whose handler fails is retried **in place**: its partition does not
//! move past it, and no offset after it is committed, until the record has
//! either succeeded or been durably parked. Retries back off without blocking
//! other partitions or the poll loop.
//!
//! When the attempts run out (or the handler returned a [`permanent`] error),
//! [`OnExhausted`] decides:
//! - [`OnExhausted::Block`] (the default): the partition stops at the record,
//!   keeps retrying at the capped backoff, stays a group member, and reports
//!   itself blocked ([`PARTITION_BLOCKED`](crate::metrics::PARTITION_BLOCKED)).
//! - [`OnExhausted::DeadLetter`]: the record is written to a dead-letter topic
//!   with headers that describe where it came from and why it failed
//!   ([`DeadLetter`]); only after the broker acknowledged the write does the
//!   source offset become committable.
//! - [`OnExhausted::SkipAndCommitPast`]: the record is given up and committed
//!   past. Opt-in; counted in
//!   [`SKIPPED_MESSAGES`](crate::metrics::SKIPPED_MESSAGES) and logged at
//!   ERROR.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::handler::BoxError;

/// Default for [`RetryPolicy::max_attempts`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default for [`RetryPolicy::jitter`].
pub const DEFAULT_JITTER: f64 = 0.2;

/// How a failing record is retried.
///
/// The delay before attempt `n + 1` is `initial * 2^(n-1)`, capped at `max`,
/// then reduced by a random share of up to `jitter` (so retries of many
/// records do not hit a recovering dependency in lockstep).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct RetryPolicy {
    pub(crate) max_attempts: u32,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff: crate::config::DEFAULT_RETRY_INITIAL_BACKOFF,
            max_backoff: crate::config::DEFAULT_RETRY_MAX_BACKOFF,
            jitter: DEFAULT_JITTER,
        }
    }
}

impl RetryPolicy {
    /// The default policy: 5 attempts, backoff from 100 ms doubling to 30 s,
    /// jitter 0.2.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handler attempts per record before [`OnExhausted`] decides, the first
    /// attempt included. Defaults to 5. Must be at least 1.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Backoff between attempts: starts at `initial`, doubles, capped at
    /// `max`. Defaults to 100 ms and 30 s. `initial` must be more than zero
    /// and at most `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// The share of each delay that is randomised away, in `[0, 1]`: a delay
    /// `d` becomes a value in `[d * (1 - jitter), d]`. Defaults to 0.2.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay after failed attempt `attempt` (1-based), before jitter.
    pub(crate) fn base_delay(&self, attempt: u32) -> Duration {
        crate::partition::backoff(self.initial_backoff, self.max_backoff, attempt)
    }

    /// The delay after failed attempt `attempt`, with jitter applied.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let d = self.base_delay(attempt);
        if self.jitter <= 0.0 {
            return d;
        }
        d.mul_f64(1.0 - self.jitter * fastrand::f64())
    }

    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1");
        }
        if self.initial_backoff.is_zero() || self.initial_backoff > self.max_backoff {
            return Err("initial backoff must be more than zero and at most max");
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err("jitter must be in [0, 1]");
        }
        Ok(())
    }
}

/// What happens to a record whose attempts ran out. See the [module
/// docs](self).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum OnExhausted {
    /// Stop the partition at the record and keep retrying at the capped
    /// backoff; nothing after it is handled or committed until it succeeds.
    #[default]
    Block,
    /// Park the record in a dead-letter topic, then move on.
    DeadLetter(DeadLetter),
    /// Give the record up and commit past it. The record is **lost** to this
    /// consumer group; counted and logged at ERROR.
    SkipAndCommitPast,
}

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

/// Where and how records are dead-lettered.
#[derive(Clone, Debug)]
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

    /// Sets a librdkafka property on the dead-letter producer only. The
    /// producer otherwise inherits the consumer's `bootstrap.servers`,
    /// `client.id` and security settings (`security.protocol`, `sasl.*`,
    /// `ssl.*`), and always uses `acks=all` with `enable.idempotence=true`;
    /// `message.timeout.ms` defaults to 30 s (a failed write is retried by
    /// the library, and the partition reports itself blocked meanwhile).
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
}

/// Defaults of [`StormGuard`].
pub const DEFAULT_STORM_MAX_FAILURE_RATIO: f64 = 0.5;
/// Default window of [`StormGuard`].
pub const DEFAULT_STORM_WINDOW: Duration = Duration::from_secs(60);
/// Default minimum sample of [`StormGuard`].
pub const DEFAULT_STORM_MIN_RECORDS: u64 = 20;

/// Stops dead-lettering when too many recent records fail: a bad deploy or a
/// dead dependency would otherwise shovel a whole topic into the dead-letter
/// topic. While tripped, records whose attempts run out are blocked instead
/// of dead-lettered ([`OnExhausted::Block`] behaviour) until the failure share
/// falls again.
///
/// The failure share is `failed / (failed + succeeded)` over the last
/// `window`, counting records (not attempts) of all partitions; a record
/// counts as failed when its first attempt failed. It is only judged once at
/// least `min_records` records finished in the window.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct StormGuard {
    pub(crate) max_failure_ratio: f64,
    pub(crate) window: Duration,
    pub(crate) min_records: u64,
    pub(crate) enabled: bool,
}

impl Default for StormGuard {
    fn default() -> Self {
        StormGuard {
            max_failure_ratio: DEFAULT_STORM_MAX_FAILURE_RATIO,
            window: DEFAULT_STORM_WINDOW,
            min_records: DEFAULT_STORM_MIN_RECORDS,
            enabled: true,
        }
    }
}

impl StormGuard {
    /// The default guard: trips above 50 % failing records over 60 s, once
    /// at least 20 records finished.
    pub fn new() -> Self {
        Self::default()
    }

    /// No guard: dead-letter whatever the failure share.
    pub fn disabled() -> Self {
        StormGuard {
            enabled: false,
            ..Self::default()
        }
    }

    /// Trip when more than this share of recent records failed. In `(0, 1]`;
    /// defaults to 0.5.
    pub fn max_failure_ratio(mut self, ratio: f64) -> Self {
        self.max_failure_ratio = ratio;
        self
    }

    /// The window the share is measured over. Defaults to 60 s.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The least number of finished records in the window before the share
    /// is judged. Defaults to 20.
    pub fn min_records(mut self, records: u64) -> Self {
        self.min_records = records;
        self
    }
}

/// A handler error that must not be retried (a malformed payload, a record
/// that can never succeed): the record goes straight to [`OnExhausted`].
///
/// Build one with [`permanent`]; any other error is transient and retried.
#[derive(Debug)]
pub struct Permanent(BoxError);

impl Permanent {
    /// The wrapped error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl fmt::Display for Permanent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for Permanent {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

/// Marks `error` permanent: the record is not retried.
///
/// ```
/// use fresh_consumer::{BoxError, Record, permanent};
///
/// async fn handle(record: Record) -> Result<(), BoxError> {
///     let Some(payload) = record.payload() else {
///         return Err(permanent("tombstone where an order was expected"));
///     };
///     let _order = std::str::from_utf8(payload).map_err(permanent)?;
///     Ok(())
/// }
/// # fn assert_handler<H: fresh_consumer::Handler>(_: H) {}
/// # assert_handler(handle);
/// ```
pub fn permanent(error: impl Into<BoxError>) -> BoxError {
    Box::new(Permanent(error.into()))
}

/// `true` when `error` was marked with [`permanent`].
pub(crate) fn is_permanent(error: &BoxError) -> bool {
    error.downcast_ref::<Permanent>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_errors_are_recognised_and_keep_their_message() {
        let e = permanent(std::io::Error::other("bad json"));
        assert!(is_permanent(&e));
        assert_eq!(e.to_string(), "bad json");
        let t: BoxError = "timeout".into();
        assert!(!is_permanent(&t));
    }

    #[test]
    fn jittered_delays_stay_in_range() {
        let p = RetryPolicy::new()
            .backoff(Duration::from_millis(100), Duration::from_secs(1))
            .jitter(0.5);
        for attempt in 1..10 {
            let base = p.base_delay(attempt);
            for _ in 0..100 {
                let d = p.delay(attempt);
                assert!(d <= base && d >= base / 2, "{d:?} vs {base:?}");
            }
        }
        assert_eq!(p.base_delay(20), Duration::from_secs(1));
    }

    #[test]
    fn invalid_policies_are_rejected() {
        assert!(RetryPolicy::new().max_attempts(0).validate().is_err());
        assert!(RetryPolicy::new().jitter(1.5).validate().is_err());
        assert!(
            RetryPolicy::new()
                .backoff(Duration::from_secs(2), Duration::from_secs(1))
                .validate()
                .is_err()
        );
        RetryPolicy::new().validate().unwrap();
    }

    #[test]
    fn default_dead_letter_topic_follows_the_source() {
        assert_eq!(DeadLetter::new().topic_for("orders"), "orders.dlt");
        assert_eq!(
            DeadLetter::new().topic("all.dlq").topic_for("orders"),
            "all.dlq"
        );
    }
}
