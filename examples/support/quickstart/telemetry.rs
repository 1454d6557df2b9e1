//! The quickstart's meter and tracer providers: OTLP when an endpoint is
//! configured (`fresh_consumer::otlp`, the standard `OTEL_*` variables),
//! and always an in-process reader of the event ages for the table.

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::metrics::{MESSAGING_DESTINATION_NAME, MESSAGING_DESTINATION_PARTITION_ID};
use fresh_consumer::otlp::OtlpConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The providers the consumer records into, and the in-process reader of
/// its event ages.
pub struct Telemetry {
    pub ages: AgeReader,
    provider: SdkMeterProvider,
    /// Only when an OTLP endpoint for traces is configured.
    traces: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Builds the providers for a consumer of `topic` and says where they
    /// export.
    pub fn start(topic: &str) -> Result<Telemetry, Box<dyn Error>> {
        let ages = AgeReader::new(topic);
        let (provider, otlp_endpoint) = meter_provider(&ages)?;
        let traces = tracer_provider()?;
        if let Some(endpoint) = &otlp_endpoint {
            println!("exporting metrics over OTLP to {endpoint}");
        }
        if let Some((_, endpoint)) = &traces {
            println!("exporting traces over OTLP to {endpoint}");
        }
        Ok(Telemetry {
            ages,
            provider,
            traces: traces.map(|(provider, _)| provider),
        })
    }

    pub fn meter_provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    pub fn tracer_provider(&self) -> Option<&SdkTracerProvider> {
        self.traces.as_ref()
    }

    /// Shuts both providers down (exporting what is left); failures on
    /// stderr.
    pub async fn shutdown(self) {
        let provider = &self.provider;
        if let Err(e) = fresh_consumer::metrics::shutdown(provider, Duration::from_secs(10)).await {
            eprintln!("metrics: {}", crate::cli::chain(&e));
        }
        if let Some(tracer_provider) = self.traces {
            // The consumer flushed it at shutdown; this exports what is left,
            // off the runtime's threads (see `OtlpConfig::tracer_provider`).
            match tokio::task::spawn_blocking(move || tracer_provider.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("traces: {}", crate::cli::chain(&e)),
                Err(e) => eprintln!("traces: {e}"),
            }
        }
    }
}

/// Builds the meter provider: the in-process reader always, OTLP when an
/// endpoint is configured. Returns the OTLP endpoint in use, if any.
fn meter_provider(ages: &AgeReader) -> Result<(SdkMeterProvider, Option<String>), Box<dyn Error>> {
    // The in-process reader is exported to only when the provider is flushed
    // (the consumer does that at shutdown), hence the long interval.
    let local = PeriodicReader::builder(ages.clone())
        .with_interval(Duration::from_secs(3_600))
        .build();
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        return Ok((SdkMeterProvider::builder().with_reader(local).build(), None));
    }
    let mut config = OtlpConfig::from_env()?;
    if !set("OTEL_SERVICE_NAME") {
        config = config.with_service_name("fresh-consumer-quickstart");
    }
    let endpoint = format!("{} ({})", config.endpoint(), config.protocol());
    let provider = config.meter_provider_builder()?.with_reader(local).build();
    Ok((provider, Some(endpoint)))
}

/// Builds a tracer provider exporting over OTLP when an endpoint for traces
/// is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), with the endpoint in use; `None`
/// otherwise (no spans are created then).
fn tracer_provider() -> Result<Option<(SdkTracerProvider, String)>, Box<dyn Error>> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    let mut config = OtlpConfig::from_env()?;
    if !set("OTEL_SERVICE_NAME") {
        config = config.with_service_name("fresh-consumer-quickstart");
    }
    let endpoint = format!(
        "{} ({})",
        config.traces_endpoint(),
        config.traces_protocol()
    );
    Ok(Some((config.tracer_provider()?, endpoint)))
}

/// One partition's event-age histogram, merged over its attribute sets.
#[derive(Clone, Debug, Default)]
pub struct AgeHistogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    pub count: u64,
    min: f64,
    pub max: f64,
}

impl AgeHistogram {
    fn merge(&mut self, bounds: Vec<f64>, counts: Vec<u64>, min: f64, max: f64) {
        if self.counts.is_empty() {
            self.bounds = bounds;
            self.counts = counts;
            self.min = min;
            self.max = max;
        } else {
            for (a, b) in self.counts.iter_mut().zip(counts) {
                *a += b;
            }
            self.min = self.min.min(min);
            self.max = self.max.max(max);
        }
        self.count = self.counts.iter().sum();
    }

    /// Estimates the `q` quantile: finds the bucket holding that rank and
    /// interpolates linearly inside it, with the bucket clamped to the
    /// observed min and max. Only as precise as the bucket boundaries.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).max(1.0);
        let mut below = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (below + c) as f64 >= rank {
                let lo = if i == 0 {
                    self.min
                } else {
                    self.bounds[i - 1].max(self.min)
                };
                let hi = self.bounds.get(i).map_or(self.max, |b| b.min(self.max));
                let within = (rank - below as f64) / c as f64;
                return Some(lo + (hi - lo) * within);
            }
            below += c;
        }
        Some(self.max)
    }
}

/// An in-process metric reader: a push exporter that keeps the latest
/// `fresh_consumer.event.age` data points per partition in memory. With
/// cumulative temporality the latest export holds everything since start.
///
/// It sits behind a `PeriodicReader` and is exported to whenever the provider
/// is flushed. (opentelemetry_sdk 0.33's `ManualReader` would do the same but
/// needs the `experimental_metrics_custom_reader` feature.)
#[derive(Clone)]
pub struct AgeReader {
    /// The topic whose partitions are read.
    topic: Arc<str>,
    ages: Arc<Mutex<BTreeMap<i32, AgeHistogram>>>,
}

impl AgeReader {
    fn new(topic: &str) -> Self {
        AgeReader {
            topic: topic.into(),
            ages: Arc::default(),
        }
    }

    /// The latest histograms, per partition.
    pub fn snapshot(&self) -> BTreeMap<i32, AgeHistogram> {
        self.ages.lock().unwrap().clone()
    }
}

impl PushMetricExporter for AgeReader {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let mut per_partition: BTreeMap<i32, AgeHistogram> = BTreeMap::new();
        let histograms = metrics
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .filter(|m| m.name() == EVENT_AGE)
            .filter_map(|m| match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => Some(h),
                _ => None,
            });
        for histogram in histograms {
            for point in histogram.data_points() {
                let attr = |key: &str| {
                    point
                        .attributes()
                        .find(|kv| kv.key.as_str() == key)
                        .map(|kv| kv.value.as_str().into_owned())
                };
                if attr(MESSAGING_DESTINATION_NAME).as_deref() != Some(&*self.topic) {
                    continue;
                }
                let Some(partition) =
                    attr(MESSAGING_DESTINATION_PARTITION_ID).and_then(|p| p.parse::<i32>().ok())
                else {
                    continue;
                };
                per_partition.entry(partition).or_default().merge(
                    point.bounds().collect(),
                    point.bucket_counts().collect(),
                    point.min().unwrap_or(0.0),
                    point.max().unwrap_or(0.0),
                );
            }
        }
        *self.ages.lock().unwrap() = per_partition;
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}
