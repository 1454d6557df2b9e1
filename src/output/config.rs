//! How the library's output producer is set up ([`OutputConfig`]).

use crate::error::ConfigError;

/// Outputs turned on: the library's producer
/// ([`FreshConsumer::outputs`](crate::FreshConsumer::outputs)).
///
/// The producer inherits the consumer's `bootstrap.servers`, `client.id`
/// and security settings, and writes with `acks=all` and
/// `enable.idempotence=true`; `message.timeout.ms` defaults to 30 s (how
/// long a delivery may take before it fails the attempt; librdkafka's own
/// default is 300 s) and `linger.ms` to 0 (librdkafka's 5 ms would be
/// added to every record: the attempt waits for the acknowledgement, and
/// the partition's next record waits for the attempt).
///
/// With [`transactional_id`](Self::transactional_id) the producer is
/// transactional and the library runs one Kafka transaction per commit
/// cycle: the outputs and the input offsets are committed together or not
/// at all (see [the guide's chapter](crate::guide::transactions)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct OutputConfig {
    pub(crate) producer_properties: Vec<(String, String)>,
    pub(crate) transactional_id: Option<String>,
}

impl OutputConfig {
    /// Outputs with the default producer settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a librdkafka producer property on the output producer
    /// (`linger.ms`, `compression.type`, `message.timeout.ms`, ...).
    /// Defaults to none. Refused by `validate()`
    /// ([`ConfigError::OutputProducerProperty`]): what would let a commit
    /// cover an output the brokers did not durably acknowledge (`acks`
    /// other than `all`/`-1`, `enable.idempotence` other than `true`,
    /// `max.in.flight.requests.per.connection` above 5) and
    /// `transactional.id` (set [`transactional_id`](Self::transactional_id)
    /// instead, which also changes how the library commits).
    pub fn producer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.producer_properties.push((key.into(), value.into()));
        self
    }

    /// Turns on transactions (exactly once into Kafka): the output
    /// producer gets this `transactional.id`, and the library runs one
    /// Kafka transaction per commit cycle. Handlers send inside the open
    /// transaction; at the cycle's end the library adds the completed
    /// input offsets (`send_offsets_to_transaction` with the consumer's
    /// group metadata, KIP-447) and commits it; the group's offsets then
    /// move only inside transactions. Defaults to none (at-least-once
    /// outputs).
    ///
    /// One id per running member (a pod or host name, `billing-1`): a new
    /// producer with the same id fences the earlier one, whose run then
    /// ends with [`RunError::Fatal`](crate::RunError::Fatal). The broker's
    /// `transaction.timeout.ms` (librdkafka's default 60 s, settable with
    /// [`producer_property`](Self::producer_property)) must be longer than
    /// the commit interval plus the slowest handler call, or the broker
    /// aborts the transaction and its records are handled again.
    ///
    /// # Errors
    /// [`ConfigError::InvalidOption`] (option `transactional_id`) from
    /// `validate()` for an empty id, and with a batch handler, key order
    /// with more than one record in flight or
    /// `split_partition_queues(false)` (not supported in transactional
    /// mode yet).
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.transactional_id = Some(id.into());
        self
    }

    /// The producer's `transaction.timeout.ms` (librdkafka's default 60 s
    /// unless set with [`producer_property`](Self::producer_property)).
    pub(crate) fn transaction_timeout(&self) -> std::time::Duration {
        let ms = self
            .producer_properties
            .iter()
            .rev()
            .find(|(k, _)| k == "transaction.timeout.ms")
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .unwrap_or(60_000);
        std::time::Duration::from_millis(ms)
    }

    /// Whether [`transactional_id`](Self::transactional_id) was set.
    pub fn is_transactional(&self) -> bool {
        self.transactional_id.is_some()
    }

    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if self
            .transactional_id
            .as_deref()
            .is_some_and(|id| id.trim().is_empty())
        {
            return Err(ConfigError::InvalidOption {
                option: "transactional_id",
                reason: "must not be empty".to_owned(),
            });
        }
        for (property, value) in &self.producer_properties {
            let reason = if property == "transactional.id" {
                Some(
                    "set `OutputConfig::transactional_id` instead: the library must know it \
                     runs transactions (it commits offsets inside them)",
                )
            } else {
                crate::failure::weakens_delivery(property, value.trim())
            };
            if let Some(reason) = reason {
                return Err(ConfigError::OutputProducerProperty {
                    property: property.clone(),
                    value: value.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }
}
