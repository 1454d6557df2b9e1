//! # fresh-consumer
//!
//! A Kafka consumer that measures **freshness**, not just offset lag.
//!
//! Offset lag answers "how many records are waiting"; an outage is about "how
//! late are they". `fresh-consumer` wraps rdkafka's `StreamConsumer`, runs
//! your async handler once per record, and only **after the handler
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
//! let summary = FreshConsumer::new(handle)
//!     .bootstrap_servers("localhost:9092")
//!     .group_id("billing")
//!     .topics(["payments"])
//!     .run_until(fresh_consumer::shutdown_signal())
//!     .await?;
//! for (tp, offset) in &summary.committed {
//!     println!("{}:{} committed at {offset}", tp.topic, tp.partition);
//! }
//! # Ok(()) }
//! ```
//!
//! ## The data path
//! Each assigned partition's own librdkafka queue (split off the main queue
//! at assignment) -> one worker task per partition reads it and runs the
//! handler in offset order -> completion tracking -> a committer thread
//! commits the next offset after the contiguous run of succeeded records.
//! The poll loop (one task on your runtime) polls the main queue:
//! rebalances, errors, statistics, and the records of a partition whose
//! queue could not be split, which it hands to the worker through a bounded
//! buffer.
//!
//! In the source, file by file (dependencies run one way, top to bottom;
//! `tests/architecture.rs` checks it):
//! - `consumer.rs`: [`FreshConsumer`] and every setter; `run_until`
//!   validates (`config.rs`) and starts the engine.
//! - `engine/` (private, the only code that runs things): `mod.rs` wires a
//!   run; `poll.rs` the poll loop and the bounded shutdown; `context.rs`
//!   librdkafka's callbacks (rebalances through `offset_reset.rs` and
//!   `assignment.rs`); `worker/` the per-partition worker (handler,
//!   retries, event age) over `partition.rs`, the partition's shared
//!   state; `tracker.rs` completed offsets; `commit.rs` the
//!   committer; `counters.rs` the [`RunSummary`]; `watchdog.rs`
//!   poll-interval warnings; `stats.rs` librdkafka's statistics;
//!   `health_view.rs` what health reads, and the health thread.
//! - [`output`]: handler outputs: the task-local handle
//!   ([`outputs()`]), the library's producer, the wait for acknowledgements
//!   and the origin-time header.
//! - [`failure`]: retry policy and backoff, the exhausted-record decision
//!   with the storm guard, dead letters (config, writer, reader).
//! - [`health`]: thresholds, reports, the hub behind [`HealthHandle`], the
//!   status rules, the gauges; it reads the engine only through traits it
//!   defines.
//! - [`metrics`]: the metric and attribute names, the instruments, the
//!   shutdown flush; `otlp`: the opt-in exporter helper (feature `otlp`, on
//!   by default).
//! - [`monitor`]: the group monitor, which watches groups from outside
//!   (committed offsets, watermarks, the record at the committed offset):
//!   `reader.rs` the reads, `judge.rs` statuses and diagnosis, `report.rs`,
//!   `export.rs` the gauges. It depends on `config` and lower, never on
//!   the engine.
//! - Leaves: `record.rs` ([`Record`] and the one event-time rule),
//!   `clock.rs`, `handler.rs`, `ordering.rs`, [`slo`], `summary.rs`,
//!   `error.rs`, `control.rs` ([`ControlHandle`]: pauses set by the
//!   application).
//!
//! - **Ordering**: records of one partition are handled one at a time, in
//!   offset order; partitions run concurrently. Opt-in
//!   [`ProcessingOrder::Key`] runs different keys of one partition
//!   concurrently, each key still in offset order.
//! - **Backpressure**: librdkafka fetches a partition only while its queue
//!   holds fewer than [`max_buffered_records`](FreshConsumer::max_buffered_records)
//!   records, so memory stays bounded and the poll loop keeps polling.
//! - **Failures**: a failing (or panicking) handler is retried in place with
//!   exponential backoff; nothing after it in its partition is committed.
//! - **Rebalances**: on revoke, running handlers get
//!   [`revoke_timeout`](FreshConsumer::revoke_timeout), completed offsets are
//!   committed synchronously, and the partition is never committed again by
//!   this member. A lost assignment commits nothing.
//! - **Shutdown**: bounded by [`shutdown_timeout`](FreshConsumer::shutdown_timeout),
//!   even with the broker down.
//! - **Offset resets**: never silent. A partition the group has no offset
//!   for starts where `auto.offset.reset` says; an offset below the log
//!   start (a retention overrun) or above the high watermark is counted,
//!   logged and handled by
//!   [`retention_overrun_policy`](FreshConsumer::retention_overrun_policy).
//!
//! Metric names, units and attributes are in [`metrics`]. Partition health
//! (lag, head-of-line age, stalled partitions, status, a snapshot for
//! probes from [`FreshConsumer::health_handle`]) is in [`health`].
#![deny(missing_docs)]
#![warn(rust_2018_idioms, unreachable_pub)]

mod clock;
mod config;
mod consumer;
mod control;
mod engine;
mod error;
pub mod failure;
mod handler;
pub mod health;
mod librdkafka_log;
pub mod metrics;
pub mod monitor;
mod ordering;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod output;
mod record;
mod signal;
pub mod slo;
mod summary;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;

/// Not part of the API (no semver promise): the library's own success-path
/// instrumentation, for `benches/instrumentation.rs`. Compiled only with
/// the `__bench` feature.
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub mod __bench;

pub use config::{
    DEFAULT_COMMIT_BATCH_RECORDS, DEFAULT_COMMIT_INTERVAL, DEFAULT_MAX_BUFFERED_RECORDS,
    DEFAULT_POLL_WARNING_RATIO, DEFAULT_REVOKE_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT,
};
pub use consumer::FreshConsumer;
pub use control::{ControlError, ControlHandle, RateLimit};
pub use error::{ConfigError, RetryTopicsError, RunError};
pub use failure::dead_letter;
pub use failure::{
    DEFAULT_JITTER, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_ERROR_MESSAGE_BYTES,
    DEFAULT_RETRY_INITIAL_BACKOFF, DEFAULT_RETRY_MAX_BACKOFF, DEFAULT_STORM_MAX_FAILURE_RATIO,
    DEFAULT_STORM_MIN_RECORDS, DEFAULT_STORM_WINDOW, DeadLetter, DeadLetterHeaders, OnExhausted,
    OnStale, Permanent, RetryPolicy, RetryTopics, StormGuard, TierNaming, permanent,
};
pub use handler::{
    Batch, BatchError, BatchHandler, Batched, BoxError, DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_BATCH_WAIT, Handler,
};
pub use health::{
    ConsumerState, DEFAULT_LAG_GROWTH_WINDOW, DEFAULT_NO_SUCCESS_AFTER, DEFAULT_REPORT_EVENTS_FOR,
    DEFAULT_STALL_AFTER, DEFAULT_STATISTICS_INTERVAL, HealthHandle, HealthReason, HealthSnapshot,
    HealthStatus, HealthThresholds, PartitionReport, PartitionStatus, RetentionOverrunPolicy,
};
pub use ordering::ProcessingOrder;
pub use output::{Output, OutputConfig, outputs};
pub use record::{Header, Record, RecordTimestamp};
pub use signal::shutdown_signal;
pub use slo::{FreshnessObjective, SloResult};
pub use summary::{BlockedRecord, RunSummary, TopicPartition};
pub use trace::ProducerContext;

/// The README's Rust examples, compiled as doctests (they use the `otlp`
/// module).
#[cfg(all(doctest, feature = "otlp"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
