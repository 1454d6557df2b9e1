//! `--prometheus ADDR`: the monitor's gauges on a Prometheus scrape endpoint
//! (`GET /metrics`), beside or instead of OTLP.
//!
//! The same instruments the OTLP export reads (`fresh_consumer.monitor.*`,
//! built by the library from the monitor's latest report) are collected on
//! each scrape through an OpenTelemetry `ManualReader`, and written in the
//! exposition format by `prometheus-client`, under the names Prometheus'
//! OTLP receiver and the Collector's Prometheus exporters give them (the
//! `UnderscoreEscapingWithSuffixes` translation: dots to underscores, the
//! unit appended as a word, `_total` on monotonic counters, `_ratio` on
//! gauges of unit `1`). So the rules and the dashboard in
//! `deploy/prometheus/` work whichever way the metrics arrive.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// A `ManualReader` the meter provider and the scrape handler share.
#[derive(Clone, Debug)]
pub struct SharedReader(Arc<ManualReader>);

impl SharedReader {
    /// A reader with cumulative temporality (what Prometheus expects).
    pub fn new() -> Self {
        SharedReader(Arc::new(
            ManualReader::builder()
                .with_temporality(Temporality::Cumulative)
                .build(),
        ))
    }
}

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// The word Prometheus appends for an OTLP unit; empty for annotations
/// (`{message}`) and `1`.
fn unit_word(unit: &str) -> &str {
    if unit.is_empty() || unit.contains('{') {
        return "";
    }
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

/// What a metric arrives as in Prometheus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// An OTLP metric name as Prometheus stores it, without the `_total` of a
/// counter (the encoder appends it).
fn prometheus_name(name: &str, unit: &str, kind: Kind) -> String {
    let mut tokens: Vec<&str> = name
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
        .filter(|t| !t.is_empty())
        .collect();
    let word = unit_word(unit);
    if !word.is_empty() && !tokens.contains(&word) {
        tokens.push(word);
    }
    if kind == Kind::Counter {
        tokens.retain(|t| *t != "total");
    }
    if kind == Kind::Gauge && unit == "1" {
        tokens.retain(|t| *t != "ratio");
        tokens.push("ratio");
    }
    tokens.join("_")
}

/// A point's labels, `(name, value)`.
type Labels = Vec<(String, String)>;
/// A metric's points: value and labels.
type Points = Vec<(f64, Labels)>;

/// An attribute as a label: every character outside `[A-Za-z0-9_]` becomes
/// `_`.
fn labels<'a>(attributes: impl Iterator<Item = &'a KeyValue>) -> Labels {
    attributes
        .map(|kv| {
            let key: String = kv
                .key
                .as_str()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            (key, kv.value.to_string())
        })
        .collect()
}

/// Collects the provider's metrics on each scrape.
#[derive(Debug)]
struct OtelCollector(SharedReader);

impl Collector for OtelCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut rm = ResourceMetrics::default();
        if let Err(e) = self.0.collect(&mut rm) {
            tracing::warn!(error = %e, "collecting the metrics for a scrape failed");
            return Ok(());
        }
        for scope in rm.scope_metrics() {
            for m in scope.metrics() {
                // (value, labels) per point; the kind from the data.
                let (kind, points): (Kind, Points) = match m.data() {
                    AggregatedMetrics::F64(MetricData::Gauge(g)) => (
                        Kind::Gauge,
                        g.data_points()
                            .map(|p| (p.value(), labels(p.attributes())))
                            .collect(),
                    ),
                    AggregatedMetrics::I64(MetricData::Gauge(g)) => (
                        Kind::Gauge,
                        g.data_points()
                            .map(|p| (p.value() as f64, labels(p.attributes())))
                            .collect(),
                    ),
                    AggregatedMetrics::U64(MetricData::Gauge(g)) => (
                        Kind::Gauge,
                        g.data_points()
                            .map(|p| (p.value() as f64, labels(p.attributes())))
                            .collect(),
                    ),
                    AggregatedMetrics::U64(MetricData::Sum(s)) => (
                        if s.is_monotonic() {
                            Kind::Counter
                        } else {
                            Kind::Gauge
                        },
                        s.data_points()
                            .map(|p| (p.value() as f64, labels(p.attributes())))
                            .collect(),
                    ),
                    AggregatedMetrics::I64(MetricData::Sum(s)) => (
                        if s.is_monotonic() {
                            Kind::Counter
                        } else {
                            Kind::Gauge
                        },
                        s.data_points()
                            .map(|p| (p.value() as f64, labels(p.attributes())))
                            .collect(),
                    ),
                    AggregatedMetrics::F64(MetricData::Sum(s)) => (
                        if s.is_monotonic() {
                            Kind::Counter
                        } else {
                            Kind::Gauge
                        },
                        s.data_points()
                            .map(|p| (p.value(), labels(p.attributes())))
                            .collect(),
                    ),
                    // The monitor records no histograms.
                    _ => continue,
                };
                if points.is_empty() {
                    continue;
                }
                let name = prometheus_name(m.name(), m.unit(), kind);
                let metric_type = match kind {
                    Kind::Counter => ConstCounter::new(0.0).metric_type(),
                    Kind::Gauge => ConstGauge::new(0.0).metric_type(),
                };
                let mut family =
                    encoder.encode_descriptor(&name, m.description(), None, metric_type)?;
                for (value, labels) in &points {
                    let point = family.encode_family(labels)?;
                    match kind {
                        Kind::Counter => ConstCounter::new(*value).encode(point)?,
                        Kind::Gauge => ConstGauge::new(*value).encode(point)?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// The registry a scrape encodes: the provider's metrics through `reader`.
pub fn registry(reader: SharedReader) -> Arc<Registry> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(OtelCollector(reader)));
    Arc::new(registry)
}

/// Binds `addr`; the error says which address and why (a port in use, a
/// permission).
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--prometheus {addr}: cannot listen: {e}"))
}

/// The OpenMetrics media type, as Prometheus asks for it first.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus' classic text format (what `promtool check metrics` and
/// clients without an `Accept` header read).
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scrape's `Accept` header asks for OpenMetrics (Prometheus
/// sends `application/openmetrics-text;version=1.0.0,...` first); anything
/// else, no header included, gets the classic text format.
fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let media = part.split(';').next().unwrap_or("").trim();
            let q = part
                .split(';')
                .skip(1)
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            media.eq_ignore_ascii_case("application/openmetrics-text") && q > 0.0
        })
    })
}

/// OpenMetrics text as Prometheus' classic text format: a counter family
/// is named with its `_total` suffix in `# HELP` and `# TYPE` (its samples
/// already are), `# UNIT` lines (OpenMetrics only) and `# EOF` go, and a
/// help text's escapes are the classic ones (`\\` and `\n`; OpenMetrics
/// also escapes `"`).
fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let family = |name: &str| {
        if counters.contains(name) {
            format!("{name}_total")
        } else {
            name.to_owned()
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!(
                "# HELP {} {}\n",
                family(name),
                help.replace("\\\"", "\"")
            ));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            out.push_str(&format!("# TYPE {} {kind}\n", family(name)));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Serves `GET /metrics` (and `GET /`) on `listener` until `stop`: in the
/// OpenMetrics format when the scrape's `Accept` header asks for it (as
/// Prometheus does), else in the classic text format.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::header;
    use axum::routing::get;
    let scrape = move |headers: axum::http::HeaderMap| {
        let registry = Arc::clone(&registry);
        async move {
            let mut body = String::new();
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            match prometheus_client::encoding::text::encode(&mut body, &registry) {
                Ok(()) if wants_openmetrics(accept) => (
                    axum::http::StatusCode::OK,
                    [(header::CONTENT_TYPE, OPENMETRICS)],
                    body,
                ),
                Ok(()) => (
                    axum::http::StatusCode::OK,
                    [(header::CONTENT_TYPE, CLASSIC)],
                    classic(&body),
                ),
                Err(_) => (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    "encoding the metrics failed\n".to_owned(),
                ),
            }
        }
    };
    let app = axum::Router::new()
        .route("/metrics", get(scrape.clone()))
        .route("/", get(scrape));
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_header_chooses_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0")));
    }

    #[test]
    fn classic_text_names_counters_with_total_and_drops_units() {
        let om = "# HELP fresh_consumer_monitor_cycles Monitor cycles, by outcome.\n\
                  # TYPE fresh_consumer_monitor_cycles counter\n\
                  fresh_consumer_monitor_cycles_total{outcome=\"ok\"} 3\n\
                  # HELP fresh_consumer_monitor_time_lag_seconds Age of the \\\"head\\\" record.\n\
                  # TYPE fresh_consumer_monitor_time_lag_seconds gauge\n\
                  # UNIT fresh_consumer_monitor_time_lag_seconds seconds\n\
                  fresh_consumer_monitor_time_lag_seconds{partition=\"0\"} 1.5\n\
                  # EOF\n";
        assert_eq!(
            classic(om),
            "# HELP fresh_consumer_monitor_cycles_total Monitor cycles, by outcome.\n\
             # TYPE fresh_consumer_monitor_cycles_total counter\n\
             fresh_consumer_monitor_cycles_total{outcome=\"ok\"} 3\n\
             # HELP fresh_consumer_monitor_time_lag_seconds Age of the \"head\" record.\n\
             # TYPE fresh_consumer_monitor_time_lag_seconds gauge\n\
             fresh_consumer_monitor_time_lag_seconds{partition=\"0\"} 1.5\n"
        );
    }

    #[test]
    fn names_follow_the_otlp_translation_the_rules_use() {
        for (otlp, unit, kind, prom) in [
            (
                "fresh_consumer.monitor.time_lag",
                "s",
                Kind::Gauge,
                "fresh_consumer_monitor_time_lag_seconds",
            ),
            (
                "fresh_consumer.monitor.lag",
                "{message}",
                Kind::Gauge,
                "fresh_consumer_monitor_lag",
            ),
            (
                "fresh_consumer.monitor.partition.status",
                "1",
                Kind::Gauge,
                "fresh_consumer_monitor_partition_status_ratio",
            ),
            (
                "fresh_consumer.monitor.group.replicas.suggested",
                "{replica}",
                Kind::Gauge,
                "fresh_consumer_monitor_group_replicas_suggested",
            ),
            (
                "fresh_consumer.monitor.cycles",
                "{cycle}",
                Kind::Counter,
                "fresh_consumer_monitor_cycles",
            ),
        ] {
            assert_eq!(prometheus_name(otlp, unit, kind), prom);
        }
    }
}
