//! Metric and attribute names, with their instruments, units and attributes.
//!
//! Names follow OpenTelemetry's semantic conventions for messaging where they
//! define a metric (`messaging.*`); the library's own metrics live under
//! `fresh_consumer.`. Units are UCUM (`s`, `{message}`). Every attribute set is
//! built once per assigned partition, never per record, and never carries a
//! key, an offset or error text.
//!
//! Common attributes ("partition attributes" below):
//! [`MESSAGING_SYSTEM`] = `kafka`, [`MESSAGING_DESTINATION_NAME`] (topic),
//! [`MESSAGING_DESTINATION_PARTITION_ID`] (partition number as a string),
//! [`MESSAGING_CONSUMER_GROUP_NAME`] (`group.id`).
//!
//! [`flush`] and [`shutdown`] (and their blocking forms) flush and shut
//! down an [`SdkMeterProvider`](opentelemetry_sdk::metrics::SdkMeterProvider)
//! safely from any runtime, bounded by a timeout, whatever its exporter:
//! your own, or the one the `otlp` module (feature `otlp`) builds, which
//! re-exports them.
//!
//! Inside the crate, `instruments.rs` builds every instrument once (and
//! each partition's attribute set once per assignment), `flush.rs`
//! flushes the user's meter provider at shutdown, and `provider.rs` holds
//! the public flush and shutdown.

pub(crate) mod flush;
pub(crate) mod instruments;
mod monitor_names;
mod names;
pub(crate) mod partition;
mod provider;

pub use monitor_names::*;
pub use names::*;
pub use provider::{FlushError, flush, flush_blocking, shutdown, shutdown_blocking};

/// The library's instrumentation scope (`fresh-consumer`, its version):
/// the meter and tracer every instrument and span of the library is made
/// with, and the scope the exporter's own accounting reports under.
pub(crate) fn scope() -> opentelemetry::InstrumentationScope {
    opentelemetry::InstrumentationScope::builder(env!("CARGO_PKG_NAME"))
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}
