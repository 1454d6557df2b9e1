//! Building the providers from an [`OtlpConfig`]: the OTLP metric and span
//! exporters, the meter provider with its periodic reader, the exponential
//! histogram view, and making a provider global.

use opentelemetry_otlp::{
    ExporterBuildError, MetricExporter, Protocol, SpanExporter, WithExportConfig,
};
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, InstrumentKind, MeterProviderBuilder, PeriodicReader,
    SdkMeterProvider, Stream,
};
use opentelemetry_sdk::trace::{SdkTracerProvider, TracerProviderBuilder};

use std::sync::Arc;

use super::accounting::{Accounted, Accounting};
use super::env::{OtlpConfig, OtlpProtocol};

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

impl OtlpConfig {
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

    /// A [`MeterProviderBuilder`] with the resource and a periodic OTLP reader
    /// already set (its exporter counts what it exported and dropped, but
    /// only [`build`](Self::build) registers the count as the metric
    /// [`OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED`](crate::metrics::OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED)),
    /// for callers that want to add views or further readers
    /// before building. [`OtlpConfig::build`] is this plus `.build()`.
    ///
    /// # Errors
    ///
    /// As [`OtlpConfig::build`].
    pub fn meter_provider_builder(&self) -> Result<MeterProviderBuilder, BuildError> {
        Ok(self.parts()?.0)
    }

    /// The builder, and the exporter's accounting that [`build`](Self::build)
    /// registers on the provider.
    fn parts(&self) -> Result<(MeterProviderBuilder, Arc<Accounting>), BuildError> {
        let view = self
            .exponential_histograms
            .map(|(max_size, max_scale)| exponential_histogram_view(max_size, max_scale))
            .transpose()?;
        let accounting = Accounting::new(match self.protocol {
            OtlpProtocol::Grpc => "otlp_grpc_metric_exporter",
            OtlpProtocol::HttpProtobuf => "otlp_http_metric_exporter",
        });
        let exporter = Accounted {
            inner: self.exporter()?,
            accounting: Arc::clone(&accounting),
        };
        let reader = PeriodicReader::builder(exporter)
            .with_interval(self.export_interval())
            .build();
        let mut builder = SdkMeterProvider::builder()
            .with_resource(self.resource())
            .with_reader(reader);
        if let Some(view) = view {
            builder = builder.with_view(view);
        }
        Ok((builder, accounting))
    }

    /// Builds the meter provider with a periodic OTLP exporter. It is not
    /// made global: pass it where it is needed, or call [`set_global`].
    ///
    /// With [`OtlpProtocol::Grpc`] this must run inside a tokio runtime (the
    /// gRPC channel's worker task is spawned on it) and that runtime must
    /// outlive the provider. Nothing is connected here: the connection is
    /// made at the first export, so an unreachable collector shows up as
    /// export errors (see [`flush`]), not here, and as failed data points in
    /// [`OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED`](crate::metrics::OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED),
    /// which the provider exports with everything else once the collector
    /// is back.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoTokioRuntime`] for gRPC outside a tokio runtime;
    /// [`BuildError::Exporter`] if the exporter rejects the configuration (for
    /// example an endpoint that is not a valid URI, or `https` without a TLS
    /// feature); [`BuildError::ExponentialHistogram`] for out-of-range
    /// [`OtlpConfig::with_exponential_histograms`] values.
    ///
    /// [`flush`]: fn@crate::metrics::flush
    pub fn build(&self) -> Result<SdkMeterProvider, BuildError> {
        let (builder, accounting) = self.parts()?;
        let provider = builder.build();
        accounting.register(&provider);
        Ok(provider)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::shutdown_blocking;
    use std::time::Duration;

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
        // Nothing listens on port 9: the final export (the exporter's own
        // accounting is at least one data point) fails, and the shutdown
        // says so within its timeout instead of hanging.
        let result = shutdown_blocking(&provider, Duration::from_secs(5));
        assert!(
            matches!(result, Err(crate::metrics::FlushError::Shutdown(_))),
            "{result:?}"
        );
    }
}
