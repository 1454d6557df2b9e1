//! The exporter's own account of what it sent and what it dropped: the
//! OTLP exporter wrapped so that every export counts its data points, as
//! exported or as failed with the error's type, and the count exported as
//! OpenTelemetry's SDK metric
//! [`OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED`](crate::metrics::OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED).
//!
//! The SDK neither retries nor buffers a failed export (its
//! `PushMetricExporter` contract): with cumulative temporality (the
//! default) the next export carries the totals again, so a collector
//! outage loses resolution, not counts; with delta temporality the failed
//! interval's data is gone. Either way the failed data points are counted
//! here and reach the collector with the first export after it is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};

use crate::metrics::{
    ERROR_TYPE, OTEL_COMPONENT_NAME, OTEL_COMPONENT_TYPE,
    OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED,
};

/// The outcomes counted: exported, then each failure's `error.type`.
const OUTCOMES: [Option<&str>; 4] = [
    None,
    Some("timeout"),
    Some("internal_failure"),
    Some("already_shutdown"),
];

/// Which process-wide exporter instance this is, for `otel.component.name`.
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// Data points by outcome (the index into [`OUTCOMES`]).
#[derive(Debug)]
pub(crate) struct Accounting {
    points: [AtomicU64; 4],
    component: [KeyValue; 2],
}

impl Accounting {
    /// `component_type`: `otlp_grpc_metric_exporter` or
    /// `otlp_http_metric_exporter` (the semantic conventions' values).
    pub(crate) fn new(component_type: &'static str) -> Arc<Accounting> {
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        Arc::new(Accounting {
            points: Default::default(),
            component: [
                KeyValue::new(OTEL_COMPONENT_TYPE, component_type),
                KeyValue::new(OTEL_COMPONENT_NAME, format!("{component_type}/{instance}")),
            ],
        })
    }

    fn count(&self, outcome: usize, points: u64) {
        self.points[outcome].fetch_add(points, Ordering::Relaxed);
    }

    /// (`error.type` or `None` for exported, data points) for each outcome.
    pub(crate) fn snapshot(&self) -> [(Option<&'static str>, u64); 4] {
        std::array::from_fn(|i| (OUTCOMES[i], self.points[i].load(Ordering::Relaxed)))
    }

    /// Registers the observable counter on `provider`'s `fresh-consumer`
    /// meter: the next export carries the counts.
    pub(crate) fn register(self: &Arc<Self>, provider: &SdkMeterProvider) {
        let me = Arc::clone(self);
        provider
            .meter_with_scope(crate::metrics::scope())
            .u64_observable_counter(OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED)
            .with_unit("{data_point}")
            .with_description(
                "Metric data points whose export finished, exported or failed (error.type).",
            )
            .with_callback(move |observer| {
                for (error, points) in me.snapshot() {
                    match error {
                        None => observer.observe(points, &me.component),
                        Some(e) => {
                            let mut attrs = me.component.to_vec();
                            attrs.push(KeyValue::new(ERROR_TYPE, e));
                            observer.observe(points, &attrs);
                        }
                    }
                }
            })
            .build();
    }
}

/// The data points in one export.
fn data_points(metrics: &ResourceMetrics) -> u64 {
    fn of<T>(d: &MetricData<T>) -> usize {
        match d {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(h) => h.data_points().count(),
        }
    }
    metrics
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| match m.data() {
            AggregatedMetrics::F64(d) => of(d),
            AggregatedMetrics::U64(d) => of(d),
            AggregatedMetrics::I64(d) => of(d),
        } as u64)
        .sum()
}

/// An exporter that counts what `inner` exported and what it failed to.
#[derive(Debug)]
pub(crate) struct Accounted<E> {
    pub(crate) inner: E,
    pub(crate) accounting: Arc<Accounting>,
}

impl<E: PushMetricExporter> PushMetricExporter for Accounted<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let points = data_points(metrics);
        let result = self.inner.export(metrics).await;
        let outcome = match &result {
            Ok(()) => 0,
            Err(OTelSdkError::Timeout(_)) => 1,
            Err(OTelSdkError::AlreadyShutdown) => 3,
            Err(_) => 2,
        };
        self.accounting.count(outcome, points);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
