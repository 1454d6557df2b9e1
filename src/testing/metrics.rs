//! [`TestMetrics`]: a meter provider whose metrics stay in this process,
//! read back by name and attributes.

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider,
    Temporality,
};

use super::error::TestingError;

/// A meter provider for [`FreshConsumer::meter_provider`](crate::FreshConsumer::meter_provider)
/// whose metrics stay in memory: the OpenTelemetry SDK's in-memory exporter
/// behind a reader that exports only when [`flush`](Self::flush)ed, with
/// cumulative temporality (each export holds every value since the start).
/// The reads look at the latest export.
///
/// ```
/// use fresh_consumer::metrics::{MESSAGING_DESTINATION_PARTITION_ID, SKIPPED_MESSAGES};
/// use fresh_consumer::testing::TestMetrics;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fresh_consumer::testing::TestingError> {
/// let metrics = TestMetrics::new();
/// // ... run a consumer with `.meter_provider(metrics.provider())` ...
/// metrics.flush().await?;
/// assert_eq!(
///     metrics.counter_total(SKIPPED_MESSAGES, [(MESSAGING_DESTINATION_PARTITION_ID, "0")]),
///     0.0
/// );
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestMetrics {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

/// The totals over the points of a histogram that matched: counts and sums
/// added up, the least minimum and the greatest maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct HistogramTotals {
    /// Values recorded.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The least value recorded (`None` without values).
    pub min: Option<f64>,
    /// The greatest value recorded (`None` without values).
    pub max: Option<f64>,
}

/// The attributes a point must carry to be read (it may carry more):
/// `[(key, value), ...]`, a `&[(key, value)]` slice, or a map of strings.
/// Values are compared as their string form (`"0"` for a partition id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes(BTreeMap<String, String>);

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for Attributes {
    fn from(kvs: [(K, V); N]) -> Self {
        Attributes(
            kvs.iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
                .collect(),
        )
    }
}

impl<K: AsRef<str>, V: AsRef<str>> From<&[(K, V)]> for Attributes {
    fn from(kvs: &[(K, V)]) -> Self {
        Attributes(
            kvs.iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
                .collect(),
        )
    }
}

impl From<&BTreeMap<String, String>> for Attributes {
    fn from(map: &BTreeMap<String, String>) -> Self {
        Attributes(map.clone())
    }
}

impl Attributes {
    /// No attribute: every point matches.
    pub fn any() -> Self {
        Self::default()
    }

    fn matched_by<'a>(&self, kvs: impl Iterator<Item = &'a KeyValue>) -> bool {
        let got: BTreeMap<String, String> = kvs
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        self.0.iter().all(|(k, v)| got.get(k) == Some(v))
    }
}

impl Default for TestMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl TestMetrics {
    /// A provider with nothing recorded yet.
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporterBuilder::new()
            .with_temporality(Temporality::Cumulative)
            .build();
        // Exports only when flushed: a test reads what it flushed.
        let reader = PeriodicReader::builder(exporter.clone())
            .with_interval(Duration::from_secs(24 * 3600))
            .build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        TestMetrics { provider, exporter }
    }

    /// The provider to hand to
    /// [`FreshConsumer::meter_provider`](crate::FreshConsumer::meter_provider).
    pub fn provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    /// Exports everything recorded so far, for the reads (a consumer run
    /// with [`meter_provider`](crate::FreshConsumer::meter_provider) also
    /// flushes when it stops). Waits at most 10 s.
    ///
    /// # Errors
    /// [`TestingError::Metrics`] when the export fails or times out.
    pub async fn flush(&self) -> Result<(), TestingError> {
        crate::metrics::flush(&self.provider, Duration::from_secs(10))
            .await
            .map_err(TestingError::Metrics)
    }

    /// Shuts the provider down (a last export, then no more recording).
    ///
    /// # Errors
    /// [`TestingError::Metrics`] when it fails or times out.
    pub async fn shutdown(&self) -> Result<(), TestingError> {
        crate::metrics::shutdown(&self.provider, Duration::from_secs(10))
            .await
            .map_err(TestingError::Metrics)
    }

    /// `read` applied to metric `name` of the latest export; `None` when it
    /// was not in it (the SDK exports no instrument that was never recorded
    /// into) or nothing was exported yet.
    pub fn metric<R>(&self, name: &str, read: impl FnOnce(&Metric) -> R) -> Option<R> {
        let exports = self.exporter.get_finished_metrics().ok()?;
        let latest = exports.last()?;
        latest
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .find(|m| m.name() == name)
            .map(read)
    }

    /// The total of the points of counter (or up-down counter) `name` whose
    /// attributes include `attributes`; 0 when none or when it was never
    /// exported.
    ///
    /// # Panics
    /// When `name` is not a sum (a histogram or a gauge).
    pub fn counter_total(&self, name: &str, attributes: impl Into<Attributes>) -> f64 {
        let wanted = attributes.into();
        self.metric(name, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Sum(s)) => s
                .data_points()
                .filter(|p| wanted.matched_by(p.attributes()))
                .map(|p| p.value() as f64)
                .sum(),
            AggregatedMetrics::I64(MetricData::Sum(s)) => s
                .data_points()
                .filter(|p| wanted.matched_by(p.attributes()))
                .map(|p| p.value() as f64)
                .sum(),
            AggregatedMetrics::F64(MetricData::Sum(s)) => s
                .data_points()
                .filter(|p| wanted.matched_by(p.attributes()))
                .map(|p| p.value())
                .sum(),
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .unwrap_or(0.0)
    }

    /// The totals over the points of histogram `name` (f64 or u64) whose
    /// attributes include `attributes`; all zero when none. Points without
    /// a value (a partition's series exist from its assignment on) add
    /// nothing, also not to the minimum and maximum.
    ///
    /// # Panics
    /// When `name` is not a histogram.
    pub fn histogram(&self, name: &str, attributes: impl Into<Attributes>) -> HistogramTotals {
        let wanted = attributes.into();
        let fold =
            |t: HistogramTotals, count: u64, sum: f64, min: Option<f64>, max: Option<f64>| {
                HistogramTotals {
                    count: t.count + count,
                    sum: t.sum + sum,
                    min: match (t.min, min) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                    max: match (t.max, max) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    },
                }
            };
        self.metric(name, |m| match m.data() {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => h
                .data_points()
                .filter(|p| p.count() > 0 && wanted.matched_by(p.attributes()))
                .fold(HistogramTotals::default(), |t, p| {
                    fold(t, p.count(), p.sum(), p.min(), p.max())
                }),
            AggregatedMetrics::U64(MetricData::Histogram(h)) => h
                .data_points()
                .filter(|p| p.count() > 0 && wanted.matched_by(p.attributes()))
                .fold(HistogramTotals::default(), |t, p| {
                    fold(
                        t,
                        p.count(),
                        p.sum() as f64,
                        p.min().map(|v| v as f64),
                        p.max().map(|v| v as f64),
                    )
                }),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .unwrap_or_default()
    }

    /// The values of the points of gauge `name` whose attributes include
    /// `attributes`, in export order; empty when none.
    ///
    /// # Panics
    /// When `name` is not a gauge.
    pub fn gauge(&self, name: &str, attributes: impl Into<Attributes>) -> Vec<f64> {
        let wanted = attributes.into();
        self.metric(name, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Gauge(g)) => g
                .data_points()
                .filter(|p| wanted.matched_by(p.attributes()))
                .map(|p| p.value() as f64)
                .collect(),
            AggregatedMetrics::I64(MetricData::Gauge(g)) => g
                .data_points()
                .filter(|p| wanted.matched_by(p.attributes()))
                .map(|p| p.value() as f64)
                .collect(),
            AggregatedMetrics::F64(MetricData::Gauge(g)) => g
                .data_points()
                .filter(|p| wanted.matched_by(p.attributes()))
                .map(|p| p.value())
                .collect(),
            other => panic!("{name} is not a gauge: {other:?}"),
        })
        .unwrap_or_default()
    }
}
