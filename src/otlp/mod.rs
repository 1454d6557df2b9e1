//! Opt-in export of the consumer's metrics over OTLP (gRPC or HTTP/protobuf).
//!
//! Needs the `otlp` feature (on by default). Without it (`default-features
//! = false`), `opentelemetry-otlp` and its gRPC and HTTP stacks are not
//! built: hand the consumer a meter provider of your own
//! ([`FreshConsumer::meter_provider`](crate::FreshConsumer::meter_provider));
//! the flush and shutdown helpers are in [`crate::metrics`] either way.
//!
//! The library itself only records metrics through the [`opentelemetry`] API;
//! where they go is the application's choice. This module is a small helper
//! for the common case "send them to an OpenTelemetry collector":
//!
//! 1. describe the exporter with an [`OtlpConfig`] (explicitly, or from the
//!    standard `OTEL_*` environment variables with [`OtlpConfig::from_env`]);
//! 2. build an [`SdkMeterProvider`] with [`OtlpConfig::build`] (or [`install`]);
//! 3. hand the provider to the consumer, or make it global with [`set_global`];
//! 4. at shutdown, [`flush`](crate::metrics::flush) the last interval and
//!    [`shutdown`](crate::metrics::shutdown) the provider.
//!
//! The same configuration builds a tracer provider for the consumer's
//! process spans ([`OtlpConfig::tracer_provider`], see [`crate::trace`]),
//! from `OTEL_EXPORTER_OTLP_TRACES_*` or the general variables.
//!
//! ```no_run
//! use std::time::Duration;
//! use fresh_consumer::otlp::{self, OtlpConfig, OtlpProtocol};
//!
//! # async fn example() -> Result<(), fresh_consumer::otlp::OtlpError> {
//! let provider = OtlpConfig::from_env()?
//!     .with_service_name("orders-consumer")
//!     .with_protocol(OtlpProtocol::Grpc)
//!     .with_export_interval(Duration::from_secs(10))
//!     .build()?;
//! otlp::set_global(&provider);
//!
//! // ... run the consumer ...
//!
//! fresh_consumer::metrics::flush(&provider, Duration::from_secs(5)).await?;
//! fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Flushing from async code
//!
//! [`SdkMeterProvider::force_flush`] and [`SdkMeterProvider::shutdown`] block
//! the calling thread until the periodic reader's thread has exported. The
//! gRPC exporter needs the tokio runtime it was built on to make progress, so
//! calling them directly on a current-thread runtime deadlocks: `force_flush`
//! waits forever; `shutdown` fails with a timeout after 5 s, and the export
//! only happens once the runtime gets to run again. The
//! [`metrics::flush`](crate::metrics::flush) and
//! [`metrics::shutdown`](crate::metrics::shutdown) run the blocking call on a
//! separate thread and await its result, which works on current-thread and
//! multi-thread runtimes alike, and bound the wait with a timeout.
//!
//! Dropping the last clone of a provider that was not shut down calls
//! `shutdown` from `Drop`: on a current-thread runtime's thread that blocks it
//! for up to 5 s. Call [`metrics::shutdown`](crate::metrics::shutdown) before dropping it.

#![deny(missing_docs)]

// In scope for the links of the module documentation above.
#[cfg(doc)]
use opentelemetry_sdk::metrics::SdkMeterProvider;

mod accounting;
mod build;
mod env;

pub use build::{
    BuildError, DEFAULT_EXPONENTIAL_MAX_SCALE, DEFAULT_EXPONENTIAL_MAX_SIZE,
    exponential_histogram_view, install, set_global,
};
pub use env::{EnvError, OtlpConfig, OtlpProtocol};
// In `crate::metrics`: they work on any provider, whatever its exporter.

/// Any error of this module, for `?` in code that calls several of its
/// operations (each operation returns its own error type: [`EnvError`],
/// [`BuildError`], [`FlushError`](crate::metrics::FlushError)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// From [`OtlpConfig::from_env`].
    #[error(transparent)]
    Env(#[from] EnvError),
    /// From building the exporter or the provider.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// From a flush or shutdown.
    #[error(transparent)]
    Flush(#[from] crate::metrics::FlushError),
}
