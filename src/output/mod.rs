//! Outputs: records a handler sends to Kafka through the library, whose
//! acknowledgements the library waits for before the input record counts
//! as completed (consume-transform-produce, at-least-once).
//!
//! Turned on with [`FreshConsumer::outputs`](crate::FreshConsumer::outputs);
//! the library then owns one producer. Inside a handler call (per-record or
//! batch), [`outputs()`] returns the call's [`Outputs`] handle:
//!
//! ```no_run
//! use fresh_consumer::{BoxError, FreshConsumer, Output, OutputConfig, Record};
//!
//! async fn invoice(order: Record) -> Result<(), BoxError> {
//!     let out = fresh_consumer::outputs()?;
//!     out.send(
//!         Output::to("invoices")
//!             .key(order.key().unwrap_or_default())
//!             .payload(order.payload().unwrap_or_default())
//!             .header("source", "billing"),
//!     )
//!     .await?;
//!     Ok(()) // the library waits for the broker's acknowledgement here
//! }
//!
//! # async fn run() -> Result<(), fresh_consumer::RunError> {
//! FreshConsumer::new(invoice)
//!     .bootstrap_servers("localhost:9092")
//!     .group_id("billing")
//!     .topics(["orders"])
//!     .outputs(OutputConfig::new().producer_property("linger.ms", "5"))
//!     .run()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! **What is waited for.** [`Outputs::send`] queues the record in the
//! producer and returns; after the handler returned `Ok`, the library waits
//! for the broker's acknowledgement (`acks=all`) of every output the call
//! sent, inside the attempt (the wait counts in
//! `messaging.process.duration` and in the handler timeout). Only then does
//! the input record (or the batch) count as completed, so a commit never
//! covers an output that was lost. A delivery that fails fails the attempt
//! with `error.type` = `output_error`, and the retry policy applies: the
//! record is handled again and **its outputs may be written twice** (the
//! ones the first attempt got acknowledged, or that the broker wrote but
//! whose acknowledgement was lost). The same holds for a crash between the
//! acknowledgement and the commit. Outputs are at-least-once: readers
//! de-duplicate (a key or an id in the payload), or wait for transactions.
//! A batch handler that names a failed record ([`BatchError::at`](crate::BatchError::at))
//! completes the records before it only once every output of the call is
//! acknowledged.
//!
//! **Transactions.** With [`OutputConfig::transactional_id`] nothing is
//! waited for inside the attempt: the outputs go into the open Kafka
//! transaction, which the library commits once per commit cycle together
//! with the completed input offsets (exactly once into Kafka for
//! `read_committed` readers). A call that wrote outputs and failed aborts
//! the transaction and its partitions are handled again from their last
//! committed offsets. See the README's "Exactly once into Kafka".
//!
//! **Headers the library adds** to each output, unless the output already
//! has a header of that name (set it yourself to override):
//! - [`ORIGIN_TIME_HEADER`]: the origin event time, milliseconds since the
//!   Unix epoch as decimal ASCII: the input's own origin-time header when it
//!   carries a valid one (the first hop's time travels the whole pipeline),
//!   else the input's event time (its timestamp, or
//!   [`event_time_header`](crate::FreshConsumer::event_time_header)). For a
//!   batch, the oldest of its records'. Absent when the input has no usable
//!   time. A malformed origin header on the input is replaced by the
//!   input's event time.
//! - With tracing on, the process span's context (`traceparent`,
//!   `tracestate` with the W3C propagator), so the downstream consumer's
//!   span links to (or continues) this attempt's trace.
//!
//! A downstream consumer with [`origin_time(true)`](crate::FreshConsumer::origin_time)
//! records its event age from that header: the end-to-end age since the
//! first hop's event.

mod call;

pub(crate) use call::{Call, OutputProducer};

use rdkafka::error::KafkaError;

use crate::error::ConfigError;

/// The header carrying an output's origin event time: milliseconds since
/// the Unix epoch, decimal ASCII (`1733300000000`). Read as an event-time
/// header is (decimal ASCII, or 8 bytes big-endian).
pub const ORIGIN_TIME_HEADER: &str = "fresh_consumer.origin_time";

/// The output handle of the handler call running now: what the handler
/// sends through.
///
/// # Errors
/// [`OutputError::OutsideHandler`] outside a handler call (in a task the
/// handler spawned, take the handle first and move it there), or when the
/// consumer was built without [`FreshConsumer::outputs`](crate::FreshConsumer::outputs).
pub fn outputs() -> Result<Outputs, OutputError> {
    call::current()
        .map(|call| Outputs { call })
        .ok_or(OutputError::OutsideHandler)
}

/// The output handle of one handler call (see [`outputs()`]). Cheap to
/// clone; valid until the call ends (its handler returned, failed, panicked
/// or timed out), then [`send`](Self::send) returns
/// [`OutputError::CallEnded`].
#[derive(Clone)]
pub struct Outputs {
    call: std::sync::Arc<Call>,
}

impl Outputs {
    /// Queues `output` in the library's producer. Returns once it is queued
    /// (waiting while librdkafka's queue is full); the library waits for its
    /// acknowledgement after the handler returned `Ok`.
    ///
    /// # Errors
    /// [`OutputError::EmptyTopic`] for an empty topic name,
    /// [`OutputError::CallEnded`] after the call ended, and
    /// [`OutputError::Queue`] when librdkafka refused the record (too
    /// large, unknown partition, a fatal producer).
    pub async fn send(&self, output: Output) -> Result<(), OutputError> {
        self.call.send(output).await
    }

    /// The origin event time the call's outputs carry in
    /// [`ORIGIN_TIME_HEADER`] (milliseconds since the Unix epoch), if any.
    pub fn origin_time_ms(&self) -> Option<i64> {
        self.call.origin_ms()
    }
}

impl std::fmt::Debug for Outputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outputs")
            .field("origin_time_ms", &self.call.origin_ms())
            .finish_non_exhaustive()
    }
}

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
/// at all (see the README's "Exactly once into Kafka").
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

/// Why an output could not be sent or was not acknowledged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// [`outputs()`] was called outside a handler call, or the consumer has
    /// no outputs ([`FreshConsumer::outputs`](crate::FreshConsumer::outputs)
    /// was not called).
    #[error(
        "no output handle: not inside a handler call of a consumer with outputs enabled (`FreshConsumer::outputs`)"
    )]
    OutsideHandler,
    /// The handle was used after its handler call ended.
    #[error("the handler call of this output handle has ended")]
    CallEnded,
    /// The output's topic name is empty.
    #[error("empty output topic name")]
    EmptyTopic,
    /// librdkafka refused to queue the output.
    #[error("output to `{topic}` could not be queued")]
    Queue {
        /// The output's topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        error: KafkaError,
    },
    /// With transactional outputs: librdkafka refused the output because
    /// the open transaction failed (`_STATE` in its abortable state, after
    /// a write into it failed; `_FATAL` after a fatal error). The
    /// transaction cannot commit: the library aborts it and the partitions
    /// that wrote into it, this call's included, are handled again from
    /// their last committed offsets. Whatever the handler returns after
    /// it, the call is not an attempt of its record (it does not use up
    /// the retry policy's attempts, nor park or block the record); return
    /// it with `?`.
    #[error("output to `{topic}` refused: the open transaction failed and is aborted")]
    TransactionFailed {
        /// The output's topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        error: KafkaError,
    },
    /// The broker did not acknowledge the output (the attempt fails with
    /// `error.type` = `output_error`).
    #[error("output to `{topic}` was not acknowledged")]
    Delivery {
        /// The output's topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        error: KafkaError,
    },
}

impl OutputError {
    /// `true` for a failed delivery ([`OutputError::Delivery`]).
    pub fn is_delivery(&self) -> bool {
        matches!(self, OutputError::Delivery { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle moves into tasks the handler spawns, and its sends run on
    /// any worker thread.
    #[test]
    fn the_handle_and_its_send_are_send_and_sync() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: &T) {}
        fn check(out: &Outputs) {
            send_sync(out);
            send(&out.send(Output::to("t")));
        }
        let _ = check;
    }

    #[test]
    fn outside_a_handler_call_there_is_no_handle() {
        assert!(matches!(outputs(), Err(OutputError::OutsideHandler)));
    }

    #[test]
    fn weakening_and_transactional_properties_are_refused() {
        for (k, v) in [
            ("acks", "1"),
            ("enable.idempotence", "false"),
            ("max.in.flight.requests.per.connection", "6"),
            ("transactional.id", "t"),
        ] {
            let e = OutputConfig::new().producer_property(k, v).check();
            assert!(
                matches!(&e, Err(ConfigError::OutputProducerProperty { property, .. }) if property == k),
                "{k}={v}: {e:?}"
            );
        }
        assert_eq!(
            OutputConfig::new()
                .producer_property("acks", "all")
                .producer_property("linger.ms", "5")
                .check(),
            Ok(())
        );
    }

    #[test]
    fn an_output_is_built_in_order() {
        let o = Output::to("t")
            .key("k")
            .payload("v")
            .header("a", "1")
            .null_header("b")
            .partition(2)
            .timestamp_ms(5);
        assert_eq!(o.topic(), "t");
        assert_eq!(
            (o.key.as_deref(), o.payload.as_deref()),
            (Some(&b"k"[..]), Some(&b"v"[..]))
        );
        assert_eq!(
            o.headers,
            vec![
                ("a".to_owned(), Some(b"1".to_vec())),
                ("b".to_owned(), None)
            ]
        );
        assert_eq!((o.partition, o.timestamp_ms), (Some(2), Some(5)));
    }
}
