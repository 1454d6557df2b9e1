//! Outputs: records a handler sends to Kafka through the library, whose
//! acknowledgements the library waits for before the input record counts
//! as completed (consume-transform-produce, at-least-once).
//!
//! Turned on with [`FreshConsumer::outputs`](crate::FreshConsumer::outputs);
//! the library then owns one producer. Inside a handler call (per-record or
//! batch), [`outputs()`] returns the call's [`Outputs`] handle:
//!
//! ```no_run
//! use fresh_consumer::{BoxError, FreshConsumer, Record, output::{Output, OutputConfig}};
//!
//! async fn invoice(order: Record) -> Result<(), BoxError> {
//!     let out = fresh_consumer::output::outputs()?;
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
//! committed offsets. See [the guide's chapter](crate::guide::transactions).
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
mod config;
mod error;
mod message;

pub(crate) use call::{Call, OutputProducer};
pub use config::OutputConfig;
pub use error::OutputError;
pub use message::{ORIGIN_TIME_HEADER, Output};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ConfigError;

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
