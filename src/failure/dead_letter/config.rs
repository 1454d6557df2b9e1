//! Where and how records are dead-lettered ([`DeadLetter`]), and the
//! producer properties that would weaken its writes.

use super::headers::DeadLetterHeaders;
use crate::error::ConfigError;

/// Where and how records are dead-lettered.
#[derive(Clone, Debug, PartialEq)]
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

    /// Sets a librdkafka property on the dead-letter producer only (which
    /// also writes the retry tiers of [`RetryTopics`](crate::failure::RetryTopics)).
    /// The producer otherwise inherits the consumer's `bootstrap.servers`,
    /// `client.id` and security settings (`security.protocol`, `sasl.*`,
    /// `ssl.*`), and always uses `acks=all` with `enable.idempotence=true`;
    /// `message.timeout.ms` defaults to 30 s (a failed write is retried by
    /// the library, and the partition reports itself blocked meanwhile).
    ///
    /// The source offset is committed past once the write is acknowledged,
    /// so properties that would weaken that acknowledgement are refused:
    /// [`validate`](crate::FreshConsumer::validate) and
    /// [`run_until`](crate::FreshConsumer::run_until) return
    /// [`ConfigError::DeadLetterProducerProperty`] for
    /// - `acks` (or `request.required.acks`) other than `all` or `-1`: with
    ///   `0` the write counts as done once sent, with `1` once the leader
    ///   has it, which a leader failover loses;
    /// - `enable.idempotence` other than `true`: a retried write could then
    ///   duplicate or reorder records, and librdkafka would accept `acks=0`
    ///   and `acks=1`;
    /// - `max.in.flight.requests.per.connection` (or `max.in.flight`) above
    ///   5: more than the idempotent producer keeps ordered (librdkafka
    ///   would refuse it only when the producer is created);
    /// - `transactional.id`, set to anything: the producer is not
    ///   transactional, and a transactional one fails every write made
    ///   outside a transaction.
    ///
    /// `acks=all`, `enable.idempotence=true` and at most 5 requests in
    /// flight are accepted (they change nothing).
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

    /// Refuses the [`producer_property`](Self::producer_property) values
    /// that would weaken the acknowledgement the source offset is committed
    /// past on.
    pub(crate) fn check_producer_properties(&self) -> Result<(), ConfigError> {
        for (property, value) in &self.producer_properties {
            if let Some(reason) = weakens_delivery(property, value.trim()) {
                return Err(ConfigError::DeadLetterProducerProperty {
                    property: property.clone(),
                    value: value.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }
}

/// Why setting dead-letter producer property `key` to `value` would let the
/// library commit past a write the brokers did not durably acknowledge (or
/// could not take), if it would.
pub(crate) fn weakens_delivery(key: &str, value: &str) -> Option<&'static str> {
    match key {
        "acks" | "request.required.acks"
            if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
        {
            Some(
                "the source offset is committed past once the write is acknowledged, and only \
                 acks=all means every in-sync replica has the record (0: acknowledged once \
                 sent; 1: once the leader has it, lost with the leader)",
            )
        }
        "enable.idempotence" if !crate::error::is_true(value) => Some(
            "without idempotence a retried write can duplicate or reorder records, and \
             librdkafka then accepts acks other than all",
        ),
        "max.in.flight.requests.per.connection" | "max.in.flight"
            if value.parse::<i64>().is_ok_and(|n| n > 5) =>
        {
            Some(
                "the idempotent producer keeps the order of at most 5 requests in flight \
                 (librdkafka would refuse the producer when it is created)",
            )
        }
        "transactional.id" => Some(
            "the dead-letter producer is not transactional: a transactional producer fails \
             every write made outside a transaction, and read_committed readers would not \
             see the records until one commits",
        ),
        _ => None,
    }
}
