//! The configuration: [`OtlpConfig`] from defaults, the standard `OTEL_*`
//! environment variables and its setters, and what it resolves to
//! (endpoints, protocols, timeouts, the resource). Building the providers
//! from it is the `build` module's.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::resource::TelemetryResourceDetector;

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
    pub(super) protocol: OtlpProtocol,
    export_interval: Duration,
    timeout: Duration,
    pub(super) temporality: Temporality,
    service_name: Option<String>,
    resource_attributes: Vec<KeyValue>,
    /// `(max_size, max_scale)` of base-2 exponential histograms for the
    /// library's histograms, or `None` for explicit buckets.
    pub(super) exponential_histograms: Option<(u32, i8)>,
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
    ///
    /// [`DEFAULT_EXPONENTIAL_MAX_SIZE`]: super::DEFAULT_EXPONENTIAL_MAX_SIZE
    /// [`DEFAULT_EXPONENTIAL_MAX_SCALE`]: super::DEFAULT_EXPONENTIAL_MAX_SCALE
    /// [`BuildError::ExponentialHistogram`]: super::BuildError::ExponentialHistogram
    /// [`exponential_histogram_view`]: super::exponential_histogram_view
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
mod tests;
