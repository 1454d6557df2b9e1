//! The library's metric attributes as tests expect them, and an in-process
//! meter provider (the SDK's in-memory exporter) for tests that read the
//! library's metrics without asserting on the OTLP wire.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use fresh_consumer::metrics::*;
use fresh_consumer::otlp::OtlpConfig;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider,
    Temporality,
};

use super::otlp_receiver::{OtlpReceiver, attrs};

pub type Attrs = BTreeMap<String, String>;

/// The attributes of a partition's metrics (see the metrics docs).
pub fn partition_attrs(topic: &str, partition: i32, group: &str) -> Attrs {
    let p = partition.to_string();
    attrs(&[
        (MESSAGING_SYSTEM, "kafka"),
        (MESSAGING_DESTINATION_NAME, topic),
        (MESSAGING_DESTINATION_PARTITION_ID, &p),
        (MESSAGING_CONSUMER_GROUP_NAME, group),
    ])
}

/// The attributes of a consumer group's metrics.
pub fn group_attrs(group: &str) -> Attrs {
    attrs(&[
        (MESSAGING_SYSTEM, "kafka"),
        (MESSAGING_CONSUMER_GROUP_NAME, group),
    ])
}

/// `base` plus `extra`.
pub fn with(base: &Attrs, extra: &[(&str, &str)]) -> Attrs {
    let mut a = base.clone();
    a.extend(attrs(extra));
    a
}

/// The library's OTLP configuration for exporting to `receiver` every
/// `interval`.
pub fn otlp_config(receiver: &OtlpReceiver, interval: Duration) -> OtlpConfig {
    OtlpConfig::new()
        .with_endpoint(receiver.metrics_endpoint())
        .with_export_interval(interval)
}

/// A provider exporting to `receiver` every `interval`, as service
/// `service_name`.
pub fn otlp_provider(
    receiver: &OtlpReceiver,
    interval: Duration,
    service_name: &str,
) -> SdkMeterProvider {
    otlp_config(receiver, interval)
        .with_service_name(service_name)
        .build()
        .expect("provider")
}

/// A meter provider whose metrics stay in this process: the SDK's
/// [`InMemoryMetricExporter`] behind a [`PeriodicReader`] that exports only
/// when flushed (cumulative temporality: the latest export holds
/// everything). Read it with [`InMemory::metric`] after
/// [`InMemory::flush`].
pub struct InMemory {
    pub provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl InMemory {
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporterBuilder::new()
            .with_temporality(Temporality::Cumulative)
            .build();
        let reader = PeriodicReader::builder(exporter.clone())
            .with_interval(Duration::from_secs(3600))
            .build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        InMemory { provider, exporter }
    }

    /// Exports what was recorded so far (`force_flush`, off the runtime's
    /// thread).
    pub async fn flush(&self) {
        fresh_consumer::otlp::flush(&self.provider, Duration::from_secs(10))
            .await
            .expect("flush the in-memory exporter");
    }

    /// `read` applied to metric `name` of the latest export, if it was in it
    /// (the SDK exports no instrument that was never recorded into).
    pub fn read<R>(&self, name: &str, read: impl FnOnce(&Metric) -> R) -> Option<R> {
        let exports = self.exporter.get_finished_metrics().expect("exported");
        let latest = exports.last()?;
        latest
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .find(|m| m.name() == name)
            .map(read)
    }

    /// (unit, description) of metric `name`, if exported.
    pub fn unit_and_description(&self, name: &str) -> Option<(String, String)> {
        self.read(name, |m| (m.unit().to_owned(), m.description().to_owned()))
    }

    /// The total of the points of counter `name` whose attributes include
    /// all of `wanted`; 0 when the counter was never exported.
    pub fn counter_total(&self, name: &str, wanted: &Attrs) -> f64 {
        self.read(name, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
                .data_points()
                .filter(|p| includes(p.attributes(), wanted))
                .map(|p| p.value() as f64)
                .sum(),
            AggregatedMetrics::F64(MetricData::Sum(sum)) => sum
                .data_points()
                .filter(|p| includes(p.attributes(), wanted))
                .map(|p| p.value())
                .sum(),
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .unwrap_or(0.0)
    }

    /// (monotonic, cumulative) of sum `name`.
    pub fn sum_shape(&self, name: &str) -> (bool, bool) {
        self.read(name, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => (
                sum.is_monotonic(),
                sum.temporality() == Temporality::Cumulative,
            ),
            other => panic!("{name} is not a u64 sum: {other:?}"),
        })
        .unwrap_or_else(|| panic!("{name} exported"))
    }

    /// (max, count) of the point of f64 histogram `name` with exactly
    /// `wanted` attributes.
    pub fn histogram_max_count(&self, name: &str, wanted: &Attrs) -> (Option<f64>, u64) {
        self.read(name, |m| {
            let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
                panic!("{name} is not an f64 histogram: {:?}", m.data());
            };
            let points: Vec<_> = h
                .data_points()
                .filter(|p| &to_attrs(p.attributes()) == wanted)
                .collect();
            assert_eq!(points.len(), 1, "{name}: one point with {wanted:?}");
            (points[0].max(), points[0].count())
        })
        .unwrap_or_else(|| panic!("{name} exported"))
    }

    /// (min, max, count) over the points of f64 histogram `name` whose
    /// attributes include all of `wanted`; `None` when no point matched.
    pub fn histogram_min_max_count(&self, name: &str, wanted: &Attrs) -> Option<(f64, f64, u64)> {
        self.read(name, |m| {
            let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
                panic!("{name} is not an f64 histogram: {:?}", m.data());
            };
            h.data_points()
                .filter(|p| includes(p.attributes(), wanted) && p.count() > 0)
                .fold(None, |acc: Option<(f64, f64, u64)>, p| {
                    let (lo, hi) = (p.min().unwrap_or(f64::NAN), p.max().unwrap_or(f64::NAN));
                    Some(match acc {
                        None => (lo, hi, p.count()),
                        Some((a, b, c)) => (a.min(lo), b.max(hi), c + p.count()),
                    })
                })
        })
        .flatten()
    }

    /// (sum, count) over the points of histogram `name` (f64 or u64)
    /// whose attributes include all of `wanted`; (0, 0) when it was never
    /// exported.
    pub fn histogram_sum_count(&self, name: &str, wanted: &Attrs) -> (f64, u64) {
        self.read(name, |m| match m.data() {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => h
                .data_points()
                .filter(|p| includes(p.attributes(), wanted))
                .fold((0.0, 0), |(s, c), p| (s + p.sum(), c + p.count())),
            AggregatedMetrics::U64(MetricData::Histogram(h)) => h
                .data_points()
                .filter(|p| includes(p.attributes(), wanted))
                .fold((0.0, 0), |(s, c), p| (s + p.sum() as f64, c + p.count())),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .unwrap_or((0.0, 0))
    }

    pub async fn shutdown(&self) {
        let _ = fresh_consumer::otlp::shutdown(&self.provider, Duration::from_secs(10)).await;
    }
}

impl Default for InMemory {
    fn default() -> Self {
        Self::new()
    }
}

fn to_attrs<'a>(kvs: impl Iterator<Item = &'a KeyValue>) -> Attrs {
    kvs.map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect()
}

fn includes<'a>(kvs: impl Iterator<Item = &'a KeyValue>, wanted: &Attrs) -> bool {
    let got = to_attrs(kvs);
    wanted.iter().all(|(k, v)| got.get(k) == Some(v))
}
