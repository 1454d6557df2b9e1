//! The library's metric attributes as tests expect them, and two reads of
//! the test kit's in-memory metrics (`fresh_consumer::testing::TestMetrics`,
//! which the tests that read metrics without the OTLP wire use).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use fresh_consumer::metrics::*;
use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::testing::TestMetrics;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};

use super::otlp_receiver::{OtlpReceiver, attrs};

pub type Attrs = BTreeMap<String, String>;

/// The attributes of `fresh_consumer.transactions` for `outcome`
/// (`committed`, `aborted`).
pub fn transaction_attrs(group: &str, outcome: &str) -> Attrs {
    [
        (MESSAGING_SYSTEM, "kafka"),
        (MESSAGING_CONSUMER_GROUP_NAME, group),
        (TRANSACTION_OUTCOME, outcome),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

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

/// (unit, description) of metric `name` in the latest export of
/// `metrics`, if exported.
pub fn unit_and_description(metrics: &TestMetrics, name: &str) -> Option<(String, String)> {
    metrics.metric(name, |m| (m.unit().to_owned(), m.description().to_owned()))
}

/// (monotonic, cumulative) of u64 sum `name` in the latest export of
/// `metrics`.
pub fn sum_shape(metrics: &TestMetrics, name: &str) -> (bool, bool) {
    metrics
        .metric(name, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => (
                sum.is_monotonic(),
                sum.temporality() == Temporality::Cumulative,
            ),
            other => panic!("{name} is not a u64 sum: {other:?}"),
        })
        .unwrap_or_else(|| panic!("{name} exported"))
}
