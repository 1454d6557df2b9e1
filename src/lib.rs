//! # fresh-consumer
//!
//! A Kafka consumer that measures **freshness**, not just offset lag.
//!
//! Offset lag answers "how many records are waiting"; an outage is about "how
//! late are they". `fresh-consumer` wraps rdkafka's `StreamConsumer`, runs
//! your async handler per record (or per batch), and only **after the handler
//! succeeded** records the record's event age (now minus its timestamp) in an
//! OpenTelemetry histogram. Offsets are committed manually and only past work
//! that succeeded (at-least-once; auto-commit is refused).
//!
//! ```no_run
//! use fresh_consumer::{FreshConsumer, Record};
//!
//! async fn handle(record: Record) -> Result<(), std::io::Error> {
//!     // ... do the work; return Err to have the record retried ...
//!     let _ = record.payload();
//!     Ok(())
//! }
//!
//! # async fn run() -> Result<(), fresh_consumer::RunError> {
//! // Until SIGTERM or Ctrl-C; then the final commit and metrics flush.
//! let summary = FreshConsumer::new(handle)
//!     .bootstrap_servers("localhost:9092")
//!     .group_id("billing")
//!     .topics(["payments"])
//!     .run()
//!     .await?;
//! for (tp, offset) in &summary.committed {
//!     println!("{}:{} committed at {offset}", tp.topic, tp.partition);
//! }
//! # Ok(()) }
//! ```
//!
//! ## Start here
//!
//! | to | use | guide |
//! |---|---|---|
//! | handle records | [`FreshConsumer::new`] with an async fn or a [`Handler`] | [`guide::handlers`] |
//! | handle batches | [`FreshConsumer::batched`], [`BatchHandler`], [`Batch`] | [`guide::batches`] |
//! | decide what a failing record does | [`OnExhausted`], [`permanent`], [`failure::RetryTopics`] | [`guide::failures`] |
//! | write dead letters | [`failure::DeadLetter`], [`failure::dead_letter`] | [`guide::failures`] |
//! | write outputs, exactly once into Kafka | [`output::outputs`], [`output::OutputConfig`] | [`guide::outputs`], [`guide::transactions`] |
//! | answer a health probe | [`FreshConsumer::health_handle`], [`health::HealthSnapshot`] | [`guide::signals`] |
//! | export metrics | [`FreshConsumer::meter_provider`], `otlp`, [`metrics`] | [`guide::metrics`] |
//! | write freshness SLOs | [`slo::FreshnessObjective`] | [`guide::slo`] |
//! | watch groups from outside, scale with KEDA | [`monitor`], `fresh-monitor` | [`guide::monitor`] |
//! | test your handlers | `testing` (feature `testing`) | [`guide::testing`] |
//!
//! Every chapter: [`guide`].
//!
//! ## Guarantees
//!
//! - **Commits only past success**: a partition's committed offset is the
//!   one after its longest contiguous run of completed records (succeeded,
//!   dead-lettered, or skipped by your choice).
//! - **Event age after success**: recorded when the handler succeeded (with
//!   transactions: when the transaction committed).
//! - **Order**: records of one partition one at a time in offset order
//!   (or per key with [`ProcessingOrder::Key`]); partitions concurrently.
//! - **Bounded**: memory ([`FreshConsumer::max_buffered_records`]), revokes
//!   ([`FreshConsumer::revoke_timeout`]) and shutdown
//!   ([`FreshConsumer::shutdown_timeout`]), even with the brokers down.
//! - **Never silent**: a blocked partition, an offset reset, a truncated
//!   log, an unreadable batch are logged, counted and shown in health.
//!
//! Each with its limits: [`guide::guarantees`].
//!
//! ## Crate features
//!
//! | feature | enables |
//! |---|---|
//! | `otlp` (default) | `fresh_consumer::otlp`: a meter (and tracer) provider exporting over OTLP, from the `OTEL_*` variables |
//! | `testing` | `fresh_consumer::testing`: the test kit for your handlers (for `[dev-dependencies]`) |
//! | `keda` | `fresh_consumer::monitor::keda`: the KEDA external scaler's gRPC service |
//! | `cli` | the `fresh-monitor` binary; turns on `keda` and `otlp` |
//! | `ssl`, `ssl-vendored`, `sasl`, `gssapi` | TLS and SASL in librdkafka (system or vendored OpenSSL, Cyrus SASL) |
//!
//! Items that need a feature carry its badge on docs.rs. How the crate is
//! built, file by file, is in the engine's documentation (private: `cargo
//! doc --document-private-items`) and in [`guide::architecture`].
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(rust_2018_idioms, unreachable_pub)]

mod clock;
mod config;
mod consumer;
pub mod control;
mod engine;
mod error;
pub mod failure;
#[cfg(any(doc, all(doctest, feature = "otlp")))]
pub mod guide;
mod handler;
pub mod health;
mod librdkafka_log;
pub mod metrics;
pub mod monitor;
mod ordering;
#[cfg(feature = "otlp")]
#[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
pub mod otlp;
pub mod output;
mod record;
mod signal;
pub mod slo;
mod summary;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod trace;

/// Not part of the API (no semver promise): the library's own success-path
/// instrumentation, for `benches/instrumentation.rs`. Compiled only with
/// the `__bench` feature.
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub mod __bench;

pub use consumer::FreshConsumer;
pub use error::{ConfigError, RunError};
pub use failure::exhausted::OnExhausted;
pub use failure::retry::permanent;
pub use handler::{Batch, BatchError, BatchHandler, Batched, BoxError, Handler};
pub use ordering::ProcessingOrder;
pub use record::{Header, Record, RecordTimestamp};
pub use signal::shutdown_signal;
pub use summary::{BlockedRecord, RunSummary, TopicPartition};

/// The consumer builder's defaults ([`FreshConsumer`]'s settings). The
/// failure policies' defaults are in [`failure`], the health thresholds'
/// in [`health`], the group monitor's in [`monitor`].
pub mod defaults {
    pub use crate::config::{
        DEFAULT_COMMIT_BATCH_RECORDS, DEFAULT_COMMIT_INTERVAL, DEFAULT_MAX_BUFFERED_RECORDS,
        DEFAULT_POLL_WARNING_RATIO, DEFAULT_REVOKE_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT,
    };
    pub use crate::handler::{DEFAULT_MAX_BATCH_RECORDS, DEFAULT_MAX_BATCH_WAIT};
}

/// The README's Rust example (the first service), compiled as a doctest
/// (it uses the `otlp` module).
#[cfg(all(doctest, feature = "otlp"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
