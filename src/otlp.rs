//! Opt-in export of the consumer's metrics over OTLP (gRPC or HTTP/protobuf).
//!
//! The library itself only records metrics through the [`opentelemetry`] API;
//! where they go is the application's choice. This module is a small helper
//! for the common case "send them to an OpenTelemetry collector":
//!
//! 1. describe the exporter with an [`OtlpConfig`] (explicitly, or from the
//!    standard `OTEL_*` environment variables with [`OtlpConfig::from_env`]);
//! 2. build an [`SdkMeterProvider`] with [`OtlpConfig::build`] (or [`install`]);
//! 3. hand the provider to the consumer, or make it global with [`set_global`];
//! 4. at shutdown, [`flush`] the last interval and [`shutdown`] the provider.
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
//! otlp::flush(&provider, Duration::from_secs(5)).await?;
//! otlp::shutdown(&provider, Duration::from_secs(5)).await?;
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
//! [`flush`] and [`shutdown`] functions here run the blocking call on a
//! separate thread and await its result, which works on current-thread and
//! multi-thread runtimes alike, and bound the wait with a timeout.
//!
//! Dropping the last clone of a provider that was not shut down calls
//! `shutdown` from `Drop`: on a current-thread runtime's thread that blocks it
//! for up to 5 s. Call [`shutdown`] before dropping it.

#![deny(missing_docs)]

use std::borrow::Cow;
use std::fmt;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_otlp::{
    ExporterBuildError, MetricExporter, Protocol, SpanExporter, WithExportConfig,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, InstrumentKind, MeterProviderBuilder, PeriodicReader,
    SdkMeterProvider, Stream, Temporality,
};
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::{SdkTracerProvider, TracerProviderBuilder};

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: base endpoint for all signals.
const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: full endpoint for metrics.
const ENV_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: full endpoint for traces.
const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`: transport for traces.
const ENV_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: transport for all signals.
const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`: transport for metrics.
const ENV_METRICS_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";
/// `OTEL_EXPORTER_OTLP_TIMEOUT`: export timeout in milliseconds.
const ENV_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
/// `OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`: metrics export timeout in milliseconds.
const ENV_METRICS_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT";
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`.
const ENV_TEMPORALITY: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
/// `OTEL_METRIC_EXPORT_INTERVAL`: export interval in milliseconds.
const ENV_EXPORT_INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";
/// `OTEL_SERVICE_NAME`.
const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value,key=value`, values percent-encoded.
const ENV_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
const DEFAULT_HTTP_BASE_ENDPOINT: &str = "http://localhost:4318";
const HTTP_METRICS_PATH: &str = "/v1/metrics";
const HTTP_TRACES_PATH: &str = "/v1/traces";
const DEFAULT_EXPORT_INTERVAL: Duration = Duration::from_secs(60);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const SERVICE_NAME: &str = "service.name";

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (usually port 4317). The default.
    ///
    /// The exporter must be built inside a tokio runtime, and that runtime
    /// must stay alive (and get to run) for exports to make progress.
    #[default]
    Grpc,
    /// OTLP over HTTP with protobuf bodies (usually port 4318, path
    /// `/v1/metrics`). Uses a blocking HTTP client on the exporter's own
    /// thread, so it needs no runtime.
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The value used for this protocol in `OTEL_EXPORTER_OTLP_PROTOCOL`
    /// (`grpc` or `http/protobuf`).
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "grpc" => Some(OtlpProtocol::Grpc),
            "http/protobuf" => Some(OtlpProtocol::HttpProtobuf),
            _ => None,
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An environment variable read by [`OtlpConfig::from_env`] has a value
/// that cannot be used (the helper never falls back to a default silently).
#[derive(Debug, thiserror::Error)]
#[error("invalid {name}={value:?}: {reason}")]
#[non_exhaustive]
pub struct EnvError {
    /// The variable's name.
    pub name: &'static str,
    /// Its value (lossily converted when it is not valid Unicode).
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The exporter or the meter provider could not be built
/// ([`OtlpConfig::build`], [`OtlpConfig::meter_provider_builder`],
/// [`install`], [`exponential_histogram_view`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The gRPC exporter was requested outside a tokio runtime.
    #[error("the grpc exporter must be built inside a tokio runtime")]
    NoTokioRuntime,
    /// The OTLP exporter could not be built (for example, an invalid endpoint).
    #[error("cannot build the otlp metric exporter")]
    Exporter(#[source] ExporterBuildError),
    /// The exponential histogram settings are out of range (see
    /// [`exponential_histogram_view`]).
    #[error("invalid exponential histogram: {reason}")]
    ExponentialHistogram {
        /// What is wrong with them.
        reason: String,
    },
}

/// A flush or shutdown of a meter provider failed ([`flush`], [`shutdown`],
/// [`flush_blocking`], [`shutdown_blocking`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// Collecting or exporting during a flush failed (for example, the
    /// collector is unreachable).
    #[error("metrics flush failed")]
    Flush(#[source] OTelSdkError),
    /// Shutting the provider down failed (its final export, or it had already
    /// been shut down).
    #[error("metrics shutdown failed")]
    Shutdown(#[source] OTelSdkError),
    /// A flush or shutdown did not finish within its timeout. The export may
    /// still complete in the background, bounded by the exporter's own timeout.
    #[error("metrics {operation} timed out after {timeout:?}")]
    Timeout {
        /// `"flush"` or `"shutdown"`.
        operation: &'static str,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The helper thread for a flush or shutdown could not be started.
    #[error("cannot start the metrics {operation} thread")]
    Thread {
        /// `"flush"` or `"shutdown"`.
        operation: &'static str,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The flush or shutdown panicked inside the SDK.
    #[error("metrics {operation} panicked")]
    Panicked {
        /// `"flush"` or `"shutdown"`.
        operation: &'static str,
    },
}

/// Any error of this module, for `?` in code that calls several of its
/// operations (each operation returns its own error type: [`EnvError`],
/// [`BuildError`], [`FlushError`]).
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
    Flush(#[from] FlushError),
}

/// Where the endpoint came from; decides whether `/v1/metrics` is appended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EndpointSetting {
    /// Used as given: [`OtlpConfig::with_endpoint`] or
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`.
    Full(String),
    /// A base endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT`: `/v1/metrics` is
    /// appended for HTTP.
    Base(String),
}

/// Configuration of the OTLP metrics pipeline: a builder.
///
/// [`OtlpConfig::new`] starts from the defaults and ignores the environment;
/// [`OtlpConfig::from_env`] starts from the standard `OTEL_*` variables. Either
/// way, the `with_*` setters called afterwards win.
///
/// Headers and compression are not configured here: the exporter reads them
/// from `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_METRICS_HEADERS` and
/// `OTEL_EXPORTER_OTLP_COMPRESSION` / `OTEL_EXPORTER_OTLP_METRICS_COMPRESSION`
/// itself.
#[derive(Debug, Clone)]
#[must_use]
pub struct OtlpConfig {
    endpoint: Option<EndpointSetting>,
    protocol: OtlpProtocol,
    export_interval: Duration,
    timeout: Duration,
    temporality: Temporality,
    service_name: Option<String>,
    resource_attributes: Vec<KeyValue>,
    /// `(max_size, max_scale)` of base-2 exponential histograms for the
    /// library's histograms, or `None` for explicit buckets.
    exponential_histograms: Option<(u32, i8)>,
    /// Where spans go ([`OtlpConfig::tracer_provider`]): `Full` from
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or [`OtlpConfig::with_traces_endpoint`],
    /// `Base` from `OTEL_EXPORTER_OTLP_ENDPOINT`.
    traces_endpoint: Option<EndpointSetting>,
    /// The traces transport when it differs from `protocol`.
    traces_protocol: Option<OtlpProtocol>,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig::new()
    }
}

impl OtlpConfig {
    /// The defaults, without reading the environment: gRPC to
    /// `http://localhost:4317`, export every 60 s, 10 s export timeout,
    /// cumulative temporality, service name `unknown_service:<executable>`.
    pub fn new() -> Self {
        OtlpConfig {
            endpoint: None,
            protocol: OtlpProtocol::Grpc,
            export_interval: DEFAULT_EXPORT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            temporality: Temporality::Cumulative,
            service_name: None,
            resource_attributes: Vec::new(),
            exponential_histograms: None,
            traces_endpoint: None,
            traces_protocol: None,
        }
    }

    /// The defaults of [`OtlpConfig::new`], overridden by the standard
    /// environment variables that are set and non-empty:
    ///
    /// | variable | meaning |
    /// |---|---|
    /// | `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | full metrics endpoint, used as given |
    /// | `OTEL_EXPORTER_OTLP_ENDPOINT` | base endpoint; for HTTP `/v1/metrics` is appended |
    /// | `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | `grpc` or `http/protobuf` |
    /// | `OTEL_METRIC_EXPORT_INTERVAL` | export interval in milliseconds |
    /// | `OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`, `OTEL_EXPORTER_OTLP_TIMEOUT` | export timeout in milliseconds |
    /// | `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` | `cumulative`, `delta` or `lowmemory` |
    /// | `OTEL_SERVICE_NAME` | `service.name` |
    /// | `OTEL_RESOURCE_ATTRIBUTES` | `key=value,...` (values percent-decoded) |
    ///
    /// The metrics-specific variable wins over the general one. Setters
    /// called on the result win over all of them.
    ///
    /// # Errors
    ///
    /// [`EnvError`] if a variable is set to a value that cannot be
    /// used (an unknown protocol such as `http/json`, a non-numeric interval,
    /// a value that is not valid Unicode, ...), rather than silently falling
    /// back to a default.
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_lookup(|name| match std::env::var(name) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(raw)) => Err(raw.to_string_lossy().into_owned()),
        })
    }

    /// [`OtlpConfig::from_env`] over an arbitrary lookup. `Err` carries the
    /// lossily-converted value of a non-Unicode variable.
    fn from_lookup(
        lookup: impl Fn(&'static str) -> Result<Option<String>, String>,
    ) -> Result<Self, EnvError> {
        let get = |name: &'static str| -> Result<Option<String>, EnvError> {
            match lookup(name) {
                Ok(Some(value)) if !value.trim().is_empty() => Ok(Some(value.trim().to_owned())),
                Ok(_) => Ok(None),
                Err(value) => Err(EnvError {
                    name,
                    value,
                    reason: "not valid unicode",
                }),
            }
        };
        let first = |names: [&'static str; 2]| -> Result<Option<(&'static str, String)>, EnvError> {
            for name in names {
                if let Some(value) = get(name)? {
                    return Ok(Some((name, value)));
                }
            }
            Ok(None)
        };
        let millis = |name: &'static str, value: String| -> Result<Duration, EnvError> {
            match value.parse::<u64>() {
                Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                _ => Err(EnvError {
                    name,
                    value,
                    reason: "expected a positive number of milliseconds",
                }),
            }
        };

        let mut config = OtlpConfig::new();

        if let Some(endpoint) = get(ENV_METRICS_ENDPOINT)? {
            config.endpoint = Some(EndpointSetting::Full(endpoint));
        } else if let Some(endpoint) = get(ENV_ENDPOINT)? {
            config.endpoint = Some(EndpointSetting::Base(endpoint));
        }

        if let Some(endpoint) = get(ENV_TRACES_ENDPOINT)? {
            config.traces_endpoint = Some(EndpointSetting::Full(endpoint));
        } else if let Some(endpoint) = get(ENV_ENDPOINT)? {
            config.traces_endpoint = Some(EndpointSetting::Base(endpoint));
        }
        if let Some((name, value)) = first([ENV_TRACES_PROTOCOL, ENV_PROTOCOL])? {
            config.traces_protocol = Some(OtlpProtocol::parse(&value).ok_or(EnvError {
                name,
                value,
                reason: "expected grpc or http/protobuf",
            })?);
        }

        if let Some((name, value)) = first([ENV_METRICS_PROTOCOL, ENV_PROTOCOL])? {
            config.protocol = OtlpProtocol::parse(&value).ok_or(EnvError {
                name,
                value,
                reason: "expected grpc or http/protobuf",
            })?;
        }

        if let Some(value) = get(ENV_EXPORT_INTERVAL)? {
            config.export_interval = millis(ENV_EXPORT_INTERVAL, value)?;
        }

        if let Some((name, value)) = first([ENV_METRICS_TIMEOUT, ENV_TIMEOUT])? {
            config.timeout = millis(name, value)?;
        }

        if let Some(value) = get(ENV_TEMPORALITY)? {
            config.temporality = value.parse::<Temporality>().map_err(|()| EnvError {
                name: ENV_TEMPORALITY,
                value,
                reason: "expected cumulative, delta or lowmemory",
            })?;
        }

        if let Some(value) = get(ENV_RESOURCE_ATTRIBUTES)? {
            config.resource_attributes = parse_resource_attributes(&value).ok_or(EnvError {
                name: ENV_RESOURCE_ATTRIBUTES,
                value,
                reason: "expected key=value pairs separated by commas",
            })?;
        }

        if let Some(value) = get(ENV_SERVICE_NAME)? {
            config.service_name = Some(value);
        }

        Ok(config)
    }

    /// The collector's endpoint, used exactly as given (it wins over both
    /// endpoint variables).
    ///
    /// For [`OtlpProtocol::Grpc`] this is e.g. `http://collector:4317`; for
    /// [`OtlpProtocol::HttpProtobuf`] it is the full URL including the path,
    /// e.g. `http://collector:4318/v1/metrics`.
    ///
    /// Default: `http://localhost:4317` for gRPC,
    /// `http://localhost:4318/v1/metrics` for HTTP.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(EndpointSetting::Full(endpoint.into()));
        self
    }

    /// The transport, of metrics and traces. Default: [`OtlpProtocol::Grpc`].
    pub fn with_protocol(mut self, protocol: OtlpProtocol) -> Self {
        self.protocol = protocol;
        self.traces_protocol = None;
        self
    }

    /// The collector's endpoint for traces ([`OtlpConfig::tracer_provider`]),
    /// used exactly as given: e.g. `http://collector:4317` for gRPC,
    /// `http://collector:4318/v1/traces` for HTTP.
    ///
    /// Default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (with `/v1/traces` appended for HTTP),
    /// else `http://localhost:4317` (gRPC) or
    /// `http://localhost:4318/v1/traces` (HTTP).
    /// [`OtlpConfig::with_endpoint`] sets the metrics endpoint only.
    pub fn with_traces_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.traces_endpoint = Some(EndpointSetting::Full(endpoint.into()));
        self
    }

    /// How often metrics are collected and exported. Default: 60 s. A zero
    /// duration means the default.
    pub fn with_export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = interval;
        self
    }

    /// The exporter's timeout for one export, retries included. Default: 10 s.
    /// A zero duration means the default.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Aggregation temporality. Default: [`Temporality::Cumulative`]; use
    /// [`Temporality::Delta`] for backends that want deltas.
    pub fn with_temporality(mut self, temporality: Temporality) -> Self {
        self.temporality = temporality;
        self
    }

    /// The `service.name` resource attribute. Default: `OTEL_SERVICE_NAME`
    /// (with [`OtlpConfig::from_env`]), else a `service.name` given in the
    /// resource attributes, else `unknown_service:<executable name>`.
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Adds one resource attribute; a later value for the same key wins,
    /// including over `OTEL_RESOURCE_ATTRIBUTES`. Default: none besides
    /// `service.name` and `telemetry.sdk.*`.
    ///
    /// `service.name` is set with [`OtlpConfig::with_service_name`]; a
    /// `service.name` given here is only used when no service name is set.
    pub fn with_resource_attribute(mut self, key: impl Into<Key>, value: impl Into<Value>) -> Self {
        self.resource_attributes
            .push(KeyValue::new(key.into(), value.into()));
        self
    }

    /// Adds several resource attributes, as
    /// [`OtlpConfig::with_resource_attribute`] does. Default: none.
    pub fn with_resource_attributes(
        mut self,
        attributes: impl IntoIterator<Item = KeyValue>,
    ) -> Self {
        self.resource_attributes.extend(attributes);
        self
    }

    /// Aggregates the library's histograms (all in seconds:
    /// [`EVENT_AGE`](crate::metrics::EVENT_AGE) and the durations) as base-2
    /// exponential histograms with at most `max_size` buckets and a scale of
    /// at most `max_scale` (-10..=20), instead of the explicit buckets
    /// [`EVENT_AGE_BOUNDARIES`](crate::metrics::EVENT_AGE_BOUNDARIES) and
    /// [`DURATION_BOUNDARIES`](crate::metrics::DURATION_BOUNDARIES). They are
    /// exported as OTLP `ExponentialHistogram`s. The SDK's defaults are
    /// [`DEFAULT_EXPONENTIAL_MAX_SIZE`] and [`DEFAULT_EXPONENTIAL_MAX_SCALE`];
    /// the scale goes down on its own when the recorded range needs it.
    ///
    /// Default: explicit buckets. Out-of-range values make
    /// [`OtlpConfig::build`] fail with [`BuildError::ExponentialHistogram`].
    /// See [`exponential_histogram_view`] for a provider built by hand.
    pub fn with_exponential_histograms(mut self, max_size: u32, max_scale: i8) -> Self {
        self.exponential_histograms = Some((max_size, max_scale));
        self
    }

    /// The transport that will be used.
    pub fn protocol(&self) -> OtlpProtocol {
        self.protocol
    }

    /// The endpoint that will be used, after defaults and, for HTTP with a
    /// base endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT`, `/v1/metrics`
    /// appended.
    pub fn endpoint(&self) -> String {
        match (&self.endpoint, self.protocol) {
            (Some(EndpointSetting::Full(endpoint)), _) => endpoint.clone(),
            (Some(EndpointSetting::Base(base)), OtlpProtocol::Grpc) => base.clone(),
            (Some(EndpointSetting::Base(base)), OtlpProtocol::HttpProtobuf) => {
                append_metrics_path(base)
            }
            (None, OtlpProtocol::Grpc) => DEFAULT_GRPC_ENDPOINT.to_owned(),
            (None, OtlpProtocol::HttpProtobuf) => append_metrics_path(DEFAULT_HTTP_BASE_ENDPOINT),
        }
    }

    /// The transport traces will use: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`,
    /// else `OTEL_EXPORTER_OTLP_PROTOCOL`, else that of metrics
    /// ([`OtlpConfig::with_protocol`] sets both).
    pub fn traces_protocol(&self) -> OtlpProtocol {
        self.traces_protocol.unwrap_or(self.protocol)
    }

    /// The endpoint traces will use (see [`OtlpConfig::with_traces_endpoint`]).
    pub fn traces_endpoint(&self) -> String {
        let with_path = |base: &str| format!("{}{HTTP_TRACES_PATH}", base.trim_end_matches('/'));
        match (&self.traces_endpoint, self.traces_protocol()) {
            (Some(EndpointSetting::Full(endpoint)), _) => endpoint.clone(),
            (Some(EndpointSetting::Base(base)), OtlpProtocol::Grpc) => base.clone(),
            (Some(EndpointSetting::Base(base)), OtlpProtocol::HttpProtobuf) => with_path(base),
            (None, OtlpProtocol::Grpc) => DEFAULT_GRPC_ENDPOINT.to_owned(),
            (None, OtlpProtocol::HttpProtobuf) => with_path(DEFAULT_HTTP_BASE_ENDPOINT),
        }
    }

    /// A [`TracerProviderBuilder`] with the resource (the same as the
    /// metrics') and a batch span processor over an OTLP span exporter
    /// already set, for callers that want to add a sampler or processors
    /// before building. [`OtlpConfig::tracer_provider`] is this plus
    /// `.build()`.
    ///
    /// # Errors
    ///
    /// As [`OtlpConfig::tracer_provider`].
    pub fn tracer_provider_builder(&self) -> Result<TracerProviderBuilder, BuildError> {
        let builder = SpanExporter::builder();
        let exporter = match self.traces_protocol() {
            OtlpProtocol::Grpc => {
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(BuildError::NoTokioRuntime);
                }
                builder
                    .with_tonic()
                    .with_protocol(Protocol::Grpc)
                    .with_endpoint(self.traces_endpoint())
                    .with_timeout(self.timeout())
                    .build()
            }
            OtlpProtocol::HttpProtobuf => builder
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(self.traces_endpoint())
                .with_timeout(self.timeout())
                .build(),
        }
        .map_err(BuildError::Exporter)?;
        Ok(SdkTracerProvider::builder()
            .with_resource(self.resource())
            .with_batch_exporter(exporter))
    }

    /// Builds a tracer provider exporting spans over OTLP, for
    /// [`FreshConsumer::tracer_provider`](crate::FreshConsumer::tracer_provider),
    /// from the same configuration as the metrics: the
    /// [`traces_endpoint`](Self::traces_endpoint) and
    /// [`traces_protocol`](Self::traces_protocol), the export timeout, the
    /// resource (`service.name`, `OTEL_RESOURCE_ATTRIBUTES`). The SDK reads
    /// the sampler from `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`
    /// (default: parent-based, always on) and the batch processor's settings
    /// from `OTEL_BSP_*`. It is not made global.
    ///
    /// The batch processor exports from a thread of its own. The consumer
    /// flushes the provider when it shuts down; shut the provider down at
    /// the very end, off the async runtime's threads
    /// (`tokio::task::spawn_blocking(move || provider.shutdown())`): with
    /// gRPC a blocking shutdown on a current-thread runtime's thread waits
    /// for its own runtime.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoTokioRuntime`] for gRPC outside a tokio runtime;
    /// [`BuildError::Exporter`] if the exporter rejects the configuration.
    pub fn tracer_provider(&self) -> Result<SdkTracerProvider, BuildError> {
        Ok(self.tracer_provider_builder()?.build())
    }

    /// The export interval that will be used.
    pub fn export_interval(&self) -> Duration {
        if self.export_interval.is_zero() {
            DEFAULT_EXPORT_INTERVAL
        } else {
            self.export_interval
        }
    }

    /// The export timeout that will be used.
    pub fn timeout(&self) -> Duration {
        if self.timeout.is_zero() {
            DEFAULT_TIMEOUT
        } else {
            self.timeout
        }
    }

    /// The temporality that will be used.
    pub fn temporality(&self) -> Temporality {
        self.temporality
    }

    /// The `service.name` that will be used.
    pub fn service_name(&self) -> Cow<'_, str> {
        if let Some(name) = &self.service_name {
            return Cow::Borrowed(name);
        }
        let from_attributes = self
            .resource_attributes
            .iter()
            .rev()
            .find(|kv| kv.key.as_str() == SERVICE_NAME)
            .map(|kv| kv.value.as_str());
        from_attributes.unwrap_or_else(|| Cow::Owned(default_service_name()))
    }

    /// The resource that will be attached to every export: the
    /// `telemetry.sdk.*` attributes, the configured resource attributes and
    /// `service.name`.
    pub fn resource(&self) -> Resource {
        Resource::builder_empty()
            .with_detector(Box::new(TelemetryResourceDetector))
            .with_attributes(self.resource_attributes.iter().cloned())
            .with_service_name(self.service_name().into_owned())
            .build()
    }

    /// A [`MeterProviderBuilder`] with the resource and a periodic OTLP reader
    /// already set, for callers that want to add views or further readers
    /// before building. [`OtlpConfig::build`] is this plus `.build()`.
    ///
    /// # Errors
    ///
    /// As [`OtlpConfig::build`].
    pub fn meter_provider_builder(&self) -> Result<MeterProviderBuilder, BuildError> {
        let view = self
            .exponential_histograms
            .map(|(max_size, max_scale)| exponential_histogram_view(max_size, max_scale))
            .transpose()?;
        let exporter = self.exporter()?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(self.export_interval())
            .build();
        let mut builder = SdkMeterProvider::builder()
            .with_resource(self.resource())
            .with_reader(reader);
        if let Some(view) = view {
            builder = builder.with_view(view);
        }
        Ok(builder)
    }

    /// Builds the meter provider with a periodic OTLP exporter. It is not
    /// made global: pass it where it is needed, or call [`set_global`].
    ///
    /// With [`OtlpProtocol::Grpc`] this must run inside a tokio runtime (the
    /// gRPC channel's worker task is spawned on it) and that runtime must
    /// outlive the provider. Nothing is connected here: the connection is
    /// made at the first export, so an unreachable collector shows up as
    /// export errors (see [`flush`]), not here.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoTokioRuntime`] for gRPC outside a tokio runtime;
    /// [`BuildError::Exporter`] if the exporter rejects the configuration (for
    /// example an endpoint that is not a valid URI, or `https` without a TLS
    /// feature); [`BuildError::ExponentialHistogram`] for out-of-range
    /// [`OtlpConfig::with_exponential_histograms`] values.
    pub fn build(&self) -> Result<SdkMeterProvider, BuildError> {
        Ok(self.meter_provider_builder()?.build())
    }

    fn exporter(&self) -> Result<MetricExporter, BuildError> {
        let builder = MetricExporter::builder().with_temporality(self.temporality);
        let exporter = match self.protocol {
            OtlpProtocol::Grpc => {
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(BuildError::NoTokioRuntime);
                }
                builder
                    .with_tonic()
                    .with_protocol(Protocol::Grpc)
                    .with_endpoint(self.endpoint())
                    .with_timeout(self.timeout())
                    .build()
            }
            OtlpProtocol::HttpProtobuf => builder
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(self.endpoint())
                .with_timeout(self.timeout())
                .build(),
        };
        exporter.map_err(BuildError::Exporter)
    }
}

/// Builds the meter provider described by `config`: shorthand for
/// [`OtlpConfig::build`]. It does not set the global provider (see
/// [`set_global`]).
///
/// ```no_run
/// # async fn example() -> Result<(), fresh_consumer::otlp::OtlpError> {
/// use fresh_consumer::otlp::{install, OtlpConfig};
///
/// let provider = install(OtlpConfig::new().with_endpoint("http://collector:4317"))?;
/// # drop(provider);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// As [`OtlpConfig::build`].
pub fn install(config: OtlpConfig) -> Result<SdkMeterProvider, BuildError> {
    config.build()
}

/// The SDK's default `max_size` of a base-2 exponential histogram (160 buckets).
pub const DEFAULT_EXPONENTIAL_MAX_SIZE: u32 = 160;
/// The SDK's default (and highest) `max_scale` of a base-2 exponential
/// histogram (20).
pub const DEFAULT_EXPONENTIAL_MAX_SCALE: i8 = 20;

/// The library's histograms, all in seconds.
const LIBRARY_HISTOGRAMS: [&str; 5] = [
    crate::metrics::EVENT_AGE,
    crate::metrics::PROCESS_DURATION,
    crate::metrics::BATCH_DURATION,
    crate::metrics::POLL_INTERVAL,
    crate::metrics::CLIENT_OPERATION_DURATION,
];

/// A view that aggregates the library's histograms
/// ([`EVENT_AGE`](crate::metrics::EVENT_AGE),
/// [`PROCESS_DURATION`](crate::metrics::PROCESS_DURATION),
/// [`BATCH_DURATION`](crate::metrics::BATCH_DURATION),
/// [`POLL_INTERVAL`](crate::metrics::POLL_INTERVAL),
/// [`CLIENT_OPERATION_DURATION`](crate::metrics::CLIENT_OPERATION_DURATION))
/// as base-2 exponential histograms (`max_size` buckets at most, scale at
/// most `max_scale`, min and max recorded), for a meter provider built by
/// hand. [`OtlpConfig::with_exponential_histograms`] adds it for you.
///
/// The view matches instruments by name and kind, whatever meter created
/// them, so it also applies to `messaging.process.duration` and
/// `messaging.client.operation.duration` histograms of other
/// instrumentation in the same provider. Other instruments keep their
/// aggregation.
///
/// ```
/// use fresh_consumer::otlp::{self, DEFAULT_EXPONENTIAL_MAX_SCALE, DEFAULT_EXPONENTIAL_MAX_SIZE};
/// use opentelemetry_sdk::metrics::SdkMeterProvider;
///
/// let view = otlp::exponential_histogram_view(
///     DEFAULT_EXPONENTIAL_MAX_SIZE,
///     DEFAULT_EXPONENTIAL_MAX_SCALE,
/// )?;
/// let provider = SdkMeterProvider::builder()
///     // .with_reader(...)
///     .with_view(view)
///     .build();
/// # drop(provider);
/// # Ok::<(), fresh_consumer::otlp::OtlpError>(())
/// ```
///
/// # Errors
///
/// [`BuildError::ExponentialHistogram`] when `max_size` is 0 or `max_scale`
/// is outside -10..=20.
pub fn exponential_histogram_view(
    max_size: u32,
    max_scale: i8,
) -> Result<impl Fn(&Instrument) -> Option<Stream> + Send + Sync + 'static, BuildError> {
    let stream = move || {
        Stream::builder()
            .with_aggregation(Aggregation::Base2ExponentialHistogram {
                max_size,
                max_scale,
                record_min_max: true,
            })
            .build()
    };
    stream().map_err(|e| BuildError::ExponentialHistogram {
        reason: e.to_string(),
    })?;
    Ok(move |instrument: &Instrument| {
        (instrument.kind() == InstrumentKind::Histogram
            && LIBRARY_HISTOGRAMS.contains(&instrument.name()))
        .then(stream)
        .and_then(Result::ok)
    })
}

/// Makes `provider` the process-wide meter provider of
/// [`opentelemetry::global`], so that code using
/// `opentelemetry::global::meter(..)` records into it. The previous global
/// provider is replaced (not shut down).
pub fn set_global(provider: &SdkMeterProvider) {
    opentelemetry::global::set_meter_provider(provider.clone());
}

/// Collects and exports everything recorded so far, waiting at most `timeout`.
///
/// Safe on any async runtime, including tokio's current-thread runtime: the
/// blocking [`SdkMeterProvider::force_flush`] runs on a separate thread while
/// this future waits without blocking the runtime (the gRPC exporter needs
/// the runtime to make progress). No tokio timer is needed either.
///
/// The provider keeps exporting periodically afterwards; use [`shutdown`] at
/// the very end instead of, or after, this.
///
/// ```no_run
/// # async fn example(provider: opentelemetry_sdk::metrics::SdkMeterProvider) {
/// use std::time::Duration;
///
/// if let Err(error) = fresh_consumer::otlp::flush(&provider, Duration::from_secs(5)).await {
///     eprintln!("last metrics were not exported: {error}");
/// }
/// # }
/// ```
///
/// # Errors
///
/// [`FlushError::Flush`] if the export failed (e.g. the collector is
/// unreachable) or the provider was shut down; [`FlushError::Timeout`] if it
/// did not finish in time (the export then goes on in the background, bounded
/// by the exporter's timeout).
pub async fn flush(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    off_thread(Operation::Flush, timeout, move || provider.force_flush())?
        .await
        .unwrap_or(Err(FlushError::Panicked {
            operation: Operation::Flush.name(),
        }))
}

/// Exports what is left and shuts the provider down (its reader thread ends),
/// waiting at most `timeout`. Safe on any async runtime, like [`flush`].
///
/// Afterwards, dropping the provider no longer blocks, and recording into it
/// is a no-op.
///
/// # Errors
///
/// [`FlushError::Shutdown`] if the final export failed or the provider had
/// already been shut down; [`FlushError::Timeout`] if it did not finish in time.
pub async fn shutdown(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    off_thread(Operation::Shutdown, timeout, move || {
        provider.shutdown_with_timeout(timeout)
    })?
    .await
    .unwrap_or(Err(FlushError::Panicked {
        operation: Operation::Shutdown.name(),
    }))
}

/// [`flush`] for synchronous code: blocks the calling thread for at most
/// `timeout`.
///
/// Do not call it on a thread that drives a tokio runtime (inside `async`
/// code); with the gRPC exporter that stalls the export until the timeout.
/// Use [`flush`] there.
///
/// # Errors
///
/// As [`flush`].
pub fn flush_blocking(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    run_with_timeout(Operation::Flush, timeout, move || provider.force_flush())
}

/// [`shutdown`] for synchronous code: blocks the calling thread for at most
/// `timeout`. The same caveat as for [`flush_blocking`] applies.
///
/// # Errors
///
/// As [`shutdown`].
pub fn shutdown_blocking(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    run_with_timeout(Operation::Shutdown, timeout, move || {
        provider.shutdown_with_timeout(timeout)
    })
}

#[derive(Debug, Clone, Copy)]
enum Operation {
    Flush,
    Shutdown,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Flush => "flush",
            Operation::Shutdown => "shutdown",
        }
    }

    fn error(self, source: OTelSdkError) -> FlushError {
        match self {
            Operation::Flush => FlushError::Flush(source),
            Operation::Shutdown => FlushError::Shutdown(source),
        }
    }
}

/// Runs `work` on its own thread and waits for it for at most `timeout`,
/// blocking the calling thread.
fn run_with_timeout(
    operation: Operation,
    timeout: Duration,
    work: impl FnOnce() -> OTelSdkResult + Send + 'static,
) -> Result<(), FlushError> {
    let (done_tx, done_rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("otlp-{}", operation.name()))
        .spawn(move || {
            // The receiver is gone if the caller timed out: nothing to report.
            let _ = done_tx.send(work());
        })
        .map_err(|source| FlushError::Thread {
            operation: operation.name(),
            source,
        })?;
    match done_rx.recv_timeout(timeout) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(operation.error(source)),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(FlushError::Timeout {
            operation: operation.name(),
            timeout,
        }),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(FlushError::Panicked {
            operation: operation.name(),
        }),
    }
}

/// Runs [`run_with_timeout`] on a waiter thread and returns a receiver for its
/// result, so that async callers never block their runtime.
fn off_thread(
    operation: Operation,
    timeout: Duration,
    work: impl FnOnce() -> OTelSdkResult + Send + 'static,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), FlushError>>, FlushError> {
    let (result_tx, result_rx) = tokio::sync::oneshot::channel();
    thread::Builder::new()
        .name(format!("otlp-{}-wait", operation.name()))
        .spawn(move || {
            // The receiver is gone if the caller's future was dropped.
            let _ = result_tx.send(run_with_timeout(operation, timeout, work));
        })
        .map_err(|source| FlushError::Thread {
            operation: operation.name(),
            source,
        })?;
    Ok(result_rx)
}

/// `unknown_service:<executable name>`, as the SDK and the specification do.
fn default_service_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .map(|name| format!("unknown_service:{name}"))
        })
        .unwrap_or_else(|| "unknown_service".to_owned())
}

/// `base` + `/v1/metrics`, without doubling a trailing slash.
fn append_metrics_path(base: &str) -> String {
    format!("{}{HTTP_METRICS_PATH}", base.trim_end_matches('/'))
}

/// Parses `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`, percent-encoded
/// values). `None` if an entry has no `=` or an empty key.
fn parse_resource_attributes(value: &str) -> Option<Vec<KeyValue>> {
    value
        .split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (key, value) = entry.split_once('=')?;
            let key = key.trim();
            if key.is_empty() {
                return None;
            }
            Some(KeyValue::new(
                percent_decode(key),
                percent_decode(value.trim()),
            ))
        })
        .collect()
}

/// Decodes `%XX` escapes; anything malformed is kept as is.
fn percent_decode(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config_from(vars: &[(&'static str, &str)]) -> Result<OtlpConfig, EnvError> {
        let vars: HashMap<&'static str, String> =
            vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        OtlpConfig::from_lookup(|name| Ok(vars.get(name).cloned()))
    }

    fn resource_map(config: &OtlpConfig) -> HashMap<String, String> {
        config
            .resource()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults() {
        let config = OtlpConfig::new();
        assert_eq!(config.protocol(), OtlpProtocol::Grpc);
        assert_eq!(config.endpoint(), "http://localhost:4317");
        assert_eq!(config.export_interval(), Duration::from_secs(60));
        assert_eq!(config.timeout(), Duration::from_secs(10));
        assert_eq!(config.temporality(), Temporality::Cumulative);
        assert!(config.service_name().starts_with("unknown_service"));
        let http = config.with_protocol(OtlpProtocol::HttpProtobuf);
        assert_eq!(http.endpoint(), "http://localhost:4318/v1/metrics");
    }

    #[test]
    fn traces_take_their_own_variables_then_the_general_ones() {
        let config = config_from(&[]).unwrap();
        assert_eq!(config.traces_endpoint(), "http://localhost:4317");
        let http = config.with_protocol(OtlpProtocol::HttpProtobuf);
        assert_eq!(http.traces_endpoint(), "http://localhost:4318/v1/traces");

        let config = config_from(&[
            (ENV_ENDPOINT, "http://base:4318/"),
            (ENV_METRICS_PROTOCOL, "grpc"),
            (ENV_PROTOCOL, "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(config.protocol(), OtlpProtocol::Grpc);
        assert_eq!(config.traces_protocol(), OtlpProtocol::HttpProtobuf);
        assert_eq!(config.traces_endpoint(), "http://base:4318/v1/traces");

        let config = config_from(&[
            (ENV_ENDPOINT, "http://base:4318"),
            (ENV_TRACES_ENDPOINT, "http://traces:9999/custom"),
            (ENV_TRACES_PROTOCOL, "http/protobuf"),
        ])
        .unwrap()
        .with_endpoint("http://metrics:4317");
        assert_eq!(config.traces_endpoint(), "http://traces:9999/custom");
        assert_eq!(config.traces_protocol(), OtlpProtocol::HttpProtobuf);
        assert_eq!(config.protocol(), OtlpProtocol::Grpc);

        let bad = config_from(&[(ENV_TRACES_PROTOCOL, "http/json")]).unwrap_err();
        assert_eq!(bad.name, ENV_TRACES_PROTOCOL);
    }

    #[test]
    fn empty_environment_gives_defaults() {
        let config = config_from(&[]).unwrap();
        assert_eq!(config.endpoint(), "http://localhost:4317");
        assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    }

    #[test]
    fn base_endpoint_gets_metrics_path_for_http_only() {
        let vars = [(ENV_ENDPOINT, "http://collector:4318/")];
        let config = config_from(&vars).unwrap();
        assert_eq!(config.endpoint(), "http://collector:4318/");
        let config = config.with_protocol(OtlpProtocol::HttpProtobuf);
        assert_eq!(config.endpoint(), "http://collector:4318/v1/metrics");

        let vars = [
            (ENV_ENDPOINT, "http://collector:4318/prefix"),
            (ENV_PROTOCOL, "http/protobuf"),
        ];
        assert_eq!(
            config_from(&vars).unwrap().endpoint(),
            "http://collector:4318/prefix/v1/metrics"
        );
    }

    #[test]
    fn metrics_endpoint_is_used_as_given_and_wins() {
        let vars = [
            (ENV_ENDPOINT, "http://base:4318"),
            (ENV_METRICS_ENDPOINT, "http://metrics:9999/custom"),
            (ENV_PROTOCOL, "http/protobuf"),
        ];
        let config = config_from(&vars).unwrap();
        assert_eq!(config.endpoint(), "http://metrics:9999/custom");
    }

    #[test]
    fn explicit_setters_win_over_environment() {
        let vars = [
            (ENV_ENDPOINT, "http://base:4318"),
            (ENV_PROTOCOL, "http/protobuf"),
            (ENV_EXPORT_INTERVAL, "1500"),
            (ENV_SERVICE_NAME, "from-env"),
        ];
        let config = config_from(&vars)
            .unwrap()
            .with_endpoint("http://explicit:4317")
            .with_protocol(OtlpProtocol::Grpc)
            .with_export_interval(Duration::from_secs(3))
            .with_service_name("explicit");
        assert_eq!(config.endpoint(), "http://explicit:4317");
        assert_eq!(config.protocol(), OtlpProtocol::Grpc);
        assert_eq!(config.export_interval(), Duration::from_secs(3));
        assert_eq!(config.service_name(), "explicit");
    }

    #[test]
    fn environment_values_are_read() {
        let vars = [
            (ENV_PROTOCOL, "grpc"),
            (ENV_METRICS_PROTOCOL, "http/protobuf"),
            (ENV_EXPORT_INTERVAL, "1500"),
            (ENV_TIMEOUT, "7000"),
            (ENV_METRICS_TIMEOUT, "2500"),
            (ENV_TEMPORALITY, "Delta"),
        ];
        let config = config_from(&vars).unwrap();
        assert_eq!(config.protocol(), OtlpProtocol::HttpProtobuf);
        assert_eq!(config.export_interval(), Duration::from_millis(1500));
        assert_eq!(config.timeout(), Duration::from_millis(2500));
        assert_eq!(config.temporality(), Temporality::Delta);
    }

    #[test]
    fn invalid_environment_values_are_errors() {
        for (name, value) in [
            (ENV_PROTOCOL, "http/json"),
            (ENV_EXPORT_INTERVAL, "soon"),
            (ENV_EXPORT_INTERVAL, "0"),
            (ENV_METRICS_TIMEOUT, "-1"),
            (ENV_TEMPORALITY, "sometimes"),
            (ENV_RESOURCE_ATTRIBUTES, "novalue"),
        ] {
            match config_from(&[(name, value)]) {
                Err(EnvError {
                    name: got_name,
                    value: got_value,
                    ..
                }) => {
                    assert_eq!((got_name, got_value.as_str()), (name, value));
                }
                other => panic!("{name}={value}: expected InvalidEnv, got {other:?}"),
            }
        }
        let error = config_from(&[(ENV_PROTOCOL, "http/json")]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": expected grpc or http/protobuf"
        );
    }

    #[test]
    fn blank_environment_values_count_as_unset() {
        let config = config_from(&[(ENV_PROTOCOL, "  "), (ENV_ENDPOINT, "")]).unwrap();
        assert_eq!(config.protocol(), OtlpProtocol::Grpc);
        assert_eq!(config.endpoint(), "http://localhost:4317");
    }

    #[test]
    fn resource_attributes_and_service_name_precedence() {
        let vars = [(
            ENV_RESOURCE_ATTRIBUTES,
            "service.name=from-attrs, deployment.environment=prod,team=a%20b%2Cc",
        )];
        let config = config_from(&vars).unwrap();
        assert_eq!(config.service_name(), "from-attrs");
        let map = resource_map(&config);
        assert_eq!(map["deployment.environment"], "prod");
        assert_eq!(map["team"], "a b,c");
        assert_eq!(map["telemetry.sdk.language"], "rust");
        assert_eq!(map["telemetry.sdk.name"], "opentelemetry");
        assert!(map.contains_key("telemetry.sdk.version"));

        let vars = [
            (ENV_RESOURCE_ATTRIBUTES, "service.name=from-attrs"),
            (ENV_SERVICE_NAME, "from-service-name"),
        ];
        let config = config_from(&vars).unwrap();
        assert_eq!(resource_map(&config)["service.name"], "from-service-name");

        let config = config
            .with_resource_attribute("deployment.environment", "staging")
            .with_service_name("explicit");
        let map = resource_map(&config);
        assert_eq!(map["service.name"], "explicit");
        assert_eq!(map["deployment.environment"], "staging");
    }

    #[test]
    fn percent_decoding_keeps_malformed_escapes() {
        assert_eq!(percent_decode("a%2Cb"), "a,b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%+5"), "%+5");
        assert_eq!(percent_decode("%C3%A9"), "é");
    }

    #[test]
    fn grpc_outside_a_runtime_is_a_typed_error() {
        let result = OtlpConfig::new().build();
        assert!(matches!(result, Err(BuildError::NoTokioRuntime)));
    }

    #[test]
    fn exponential_histogram_settings_are_validated() {
        assert!(
            exponential_histogram_view(DEFAULT_EXPONENTIAL_MAX_SIZE, DEFAULT_EXPONENTIAL_MAX_SCALE)
                .is_ok()
        );
        assert!(exponential_histogram_view(1, -10).is_ok());
        for (size, scale) in [(0, 20), (160, 21), (160, -11)] {
            assert!(
                matches!(
                    exponential_histogram_view(size, scale),
                    Err(BuildError::ExponentialHistogram { .. })
                ),
                "({size}, {scale})"
            );
        }
        let result = OtlpConfig::new()
            .with_protocol(OtlpProtocol::HttpProtobuf)
            .with_endpoint("http://127.0.0.1:9/v1/metrics")
            .with_exponential_histograms(0, 20)
            .build();
        assert!(matches!(
            result,
            Err(BuildError::ExponentialHistogram { .. })
        ));
    }

    #[test]
    fn http_builds_outside_a_runtime() {
        let provider = OtlpConfig::new()
            .with_protocol(OtlpProtocol::HttpProtobuf)
            .with_endpoint("http://127.0.0.1:9/v1/metrics")
            .build()
            .unwrap();
        shutdown_blocking(&provider, Duration::from_secs(5)).unwrap();
    }
}
