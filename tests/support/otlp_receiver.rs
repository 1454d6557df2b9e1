//! An in-process OTLP metrics and traces receiver for integration tests.
//!
//! [`OtlpReceiver::start`] serves OTLP/gRPC and [`OtlpReceiver::start_http`]
//! OTLP/HTTP+protobuf on `127.0.0.1:0`; both keep every
//! `ExportMetricsServiceRequest` and `ExportTraceServiceRequest` they
//! receive (spans: [`OtlpReceiver::spans`], [`ReceivedSpan`]). Waiting is always bounded:
//! the `wait_*` methods poll every few milliseconds until their condition
//! holds and panic with what was received when their timeout passes.
//!
//! The free functions read the parts of a [`Metric`] tests care about
//! (data points, attributes as strings, histogram buckets, sum values).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    HistogramDataPoint, Metric, NumberDataPoint, metric, number_data_point,
};
use prost::Message;
use tokio::sync::oneshot;

use super::wait::poll_until;

/// The transport a receiver serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies at `/v1/metrics`.
    HttpProtobuf,
}

#[derive(Debug, Default)]
struct Received {
    requests: Vec<ExportMetricsServiceRequest>,
    trace_requests: Vec<ExportTraceServiceRequest>,
    /// HTTP requests to any path other than `POST /v1/metrics` and
    /// `POST /v1/traces`.
    unexpected_http: Vec<String>,
}

type Shared = Arc<Mutex<Received>>;

/// A running receiver; it stops when dropped.
pub struct OtlpReceiver {
    transport: Transport,
    addr: SocketAddr,
    received: Shared,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct GrpcService {
    received: Shared,
}

#[tonic::async_trait]
impl MetricsService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        lock(&self.received).requests.push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl TraceService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        lock(&self.received)
            .trace_requests
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn lock(received: &Shared) -> std::sync::MutexGuard<'_, Received> {
    received
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl OtlpReceiver {
    /// Starts an OTLP/gRPC receiver on `127.0.0.1:0`.
    pub async fn start() -> Self {
        Self::start_on(bind().await).await
    }

    /// Starts an OTLP/gRPC receiver on `addr` (a collector coming back on
    /// the port it left).
    #[allow(dead_code)]
    pub async fn start_at(addr: SocketAddr) -> Self {
        Self::start_on(bind_at(addr).await).await
    }

    async fn start_on(listener: tokio::net::TcpListener) -> Self {
        let addr = listener.local_addr().expect("receiver address");
        let received = Shared::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = MetricsServiceServer::new(GrpcService {
            received: received.clone(),
        });
        let traces = TraceServiceServer::new(GrpcService {
            received: received.clone(),
        });
        tokio::spawn(async move {
            let result = tonic::transport::Server::builder()
                .add_service(service)
                .add_service(traces)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await;
            if let Err(error) = result {
                eprintln!("otlp grpc receiver stopped: {error}");
            }
        });
        OtlpReceiver {
            transport: Transport::Grpc,
            addr,
            received,
            stop: Some(stop),
        }
    }

    /// Starts an OTLP/HTTP (protobuf) receiver on `127.0.0.1:0`, answering
    /// `POST /v1/metrics`. Requests to other paths get a 404 and are listed by
    /// [`OtlpReceiver::unexpected_http_requests`].
    pub async fn start_http() -> Self {
        Self::start_http_on(bind().await).await
    }

    /// Starts an OTLP/HTTP receiver on `addr`.
    #[allow(dead_code)]
    pub async fn start_http_at(addr: SocketAddr) -> Self {
        Self::start_http_on(bind_at(addr).await).await
    }

    async fn start_http_on(listener: tokio::net::TcpListener) -> Self {
        let addr = listener.local_addr().expect("receiver address");
        let received = Shared::default();
        let (stop, stopped) = oneshot::channel::<()>();

        let on_metrics = {
            let received = received.clone();
            move |body: axum::body::Bytes| {
                let received = received.clone();
                async move {
                    match ExportMetricsServiceRequest::decode(body) {
                        Ok(request) => {
                            lock(&received).requests.push(request);
                            let response = ExportMetricsServiceResponse::default().encode_to_vec();
                            (
                                axum::http::StatusCode::OK,
                                [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                                response,
                            )
                        }
                        Err(error) => {
                            eprintln!("otlp http receiver: undecodable body: {error}");
                            (
                                axum::http::StatusCode::BAD_REQUEST,
                                [(axum::http::header::CONTENT_TYPE, "text/plain")],
                                error.to_string().into_bytes(),
                            )
                        }
                    }
                }
            }
        };
        let on_traces = {
            let received = received.clone();
            move |body: axum::body::Bytes| {
                let received = received.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            lock(&received).trace_requests.push(request);
                            let response = ExportTraceServiceResponse::default().encode_to_vec();
                            (
                                axum::http::StatusCode::OK,
                                [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                                response,
                            )
                        }
                        Err(error) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            [(axum::http::header::CONTENT_TYPE, "text/plain")],
                            error.to_string().into_bytes(),
                        ),
                    }
                }
            }
        };
        let on_other = {
            let received = received.clone();
            move |method: axum::http::Method, uri: axum::http::Uri| {
                let received = received.clone();
                async move {
                    lock(&received)
                        .unexpected_http
                        .push(format!("{method} {uri}"));
                    axum::http::StatusCode::NOT_FOUND
                }
            }
        };
        let app = axum::Router::new()
            .route("/v1/metrics", axum::routing::post(on_metrics))
            .route("/v1/traces", axum::routing::post(on_traces))
            .fallback(on_other);
        tokio::spawn(async move {
            let result = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(error) = result {
                eprintln!("otlp http receiver stopped: {error}");
            }
        });
        OtlpReceiver {
            transport: Transport::HttpProtobuf,
            addr,
            received,
            stop: Some(stop),
        }
    }

    /// The transport this receiver serves.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the gRPC endpoint, or the HTTP base endpoint
    /// (what `OTEL_EXPORTER_OTLP_ENDPOINT` would hold).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The full metrics endpoint to hand to an exporter: [`Self::endpoint`]
    /// for gRPC, [`Self::endpoint`] + `/v1/metrics` for HTTP.
    pub fn metrics_endpoint(&self) -> String {
        match self.transport {
            Transport::Grpc => self.endpoint(),
            Transport::HttpProtobuf => format!("{}/v1/metrics", self.endpoint()),
        }
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<ExportMetricsServiceRequest> {
        lock(&self.received).requests.clone()
    }

    /// How many export requests were received.
    pub fn request_count(&self) -> usize {
        lock(&self.received).requests.len()
    }

    /// HTTP requests that did not go to `POST /v1/metrics` (`"METHOD uri"`).
    pub fn unexpected_http_requests(&self) -> Vec<String> {
        lock(&self.received).unexpected_http.clone()
    }

    /// Names of all metrics received so far, sorted and deduplicated.
    pub fn metric_names(&self) -> Vec<String> {
        let received = lock(&self.received);
        let mut names: Vec<String> = received
            .requests
            .iter()
            .flat_map(metrics_of)
            .map(|(_, metric)| metric.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The most recently received version of metric `name`, if any.
    pub fn latest_metric(&self, name: &str) -> Option<Metric> {
        self.latest(name).map(|(_, metric)| metric)
    }

    /// The latest export of `name`; panics, naming what arrived, when it
    /// never arrived.
    pub fn metric(&self, name: &str) -> Metric {
        self.latest_metric(name)
            .unwrap_or_else(|| panic!("{name} not received; got {:?}", self.metric_names()))
    }

    /// The value of the point with exactly `wanted` attributes of the latest
    /// export of sum or gauge `name`, if any.
    pub fn point(&self, name: &str, wanted: &BTreeMap<String, String>) -> Option<f64> {
        let m = self.latest_metric(name)?;
        number_points(&m)
            .into_iter()
            .find(|(a, _)| a == wanted)
            .map(|(_, v)| v)
    }

    /// The total of counter `name` over points carrying `wanted`; 0 when the
    /// counter was never exported.
    pub fn counter_total(&self, name: &str, wanted: &BTreeMap<String, String>) -> f64 {
        sum_total_matching(self.latest_metric(name).as_ref(), wanted)
    }

    /// The resource attributes (as strings) sent with the most recent export
    /// containing metric `name`.
    pub fn resource_attributes_of(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.latest(name).map(|(resource, _)| resource)
    }

    fn latest(&self, name: &str) -> Option<(BTreeMap<String, String>, Metric)> {
        let received = lock(&self.received);
        received.requests.iter().rev().find_map(|request| {
            metrics_of(request)
                .filter(|(_, metric)| metric.name == name)
                .last()
                .map(|(resource, metric)| (resource, metric.clone()))
        })
    }

    /// Waits until metric `name` has arrived and returns its latest version.
    ///
    /// # Panics
    ///
    /// When it has not arrived within `timeout`, listing what did arrive.
    pub async fn wait_for_metric(&self, name: &str, timeout: Duration) -> Metric {
        self.wait_for_metric_matching(name, timeout, |_| true).await
    }

    /// Waits until the latest version of metric `name` satisfies `condition`
    /// (e.g. a cumulative counter reached a value) and returns it.
    ///
    /// # Panics
    ///
    /// When that does not happen within `timeout`.
    pub async fn wait_for_metric_matching(
        &self,
        name: &str,
        timeout: Duration,
        condition: impl Fn(&Metric) -> bool,
    ) -> Metric {
        let found = poll_until(timeout, || {
            self.latest_metric(name).filter(|metric| condition(metric))
        })
        .await;
        match found {
            Some(metric) => metric,
            None => panic!(
                "metric {name:?} (matching the condition) not received within {timeout:?}; \
                 latest version: {:?}; metrics received: {:?}; unexpected http requests: {:?}",
                self.latest_metric(name),
                self.metric_names(),
                self.unexpected_http_requests(),
            ),
        }
    }

    /// Waits until `condition` holds for the requests received so far.
    /// Returns whether it did before `timeout` passed (does not panic).
    pub async fn wait_until(
        &self,
        timeout: Duration,
        condition: impl Fn(&[ExportMetricsServiceRequest]) -> bool,
    ) -> bool {
        poll_until(timeout, || {
            condition(&lock(&self.received).requests).then_some(())
        })
        .await
        .is_some()
    }
}

/// One span as received, with ids in lowercase hex (empty when absent).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// `SpanKind` as in the protocol: 1 internal, 2 server, 3 client,
    /// 4 producer, 5 consumer.
    pub kind: i32,
    /// `StatusCode`: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    pub attributes: BTreeMap<String, String>,
    /// Links as (trace id, span id).
    pub links: Vec<(String, String)>,
    /// The instrumentation scope's name.
    pub scope: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl OtlpReceiver {
    /// The full traces endpoint to hand to an exporter: [`Self::endpoint`]
    /// for gRPC, [`Self::endpoint`] + `/v1/traces` for HTTP.
    pub fn traces_endpoint(&self) -> String {
        match self.transport {
            Transport::Grpc => self.endpoint(),
            Transport::HttpProtobuf => format!("{}/v1/traces", self.endpoint()),
        }
    }

    /// Every span received so far, in the order they arrived.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let received = lock(&self.received);
        let mut out = Vec::new();
        for request in &received.trace_requests {
            for resource in &request.resource_spans {
                for scope in &resource.scope_spans {
                    let scope_name = scope.scope.as_ref().map(|s| s.name.clone());
                    for span in &scope.spans {
                        let status = span.status.clone().unwrap_or_default();
                        out.push(ReceivedSpan {
                            name: span.name.clone(),
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent_span_id: hex(&span.parent_span_id),
                            kind: span.kind,
                            status_code: status.code,
                            status_message: status.message,
                            attributes: attributes(&span.attributes),
                            links: span
                                .links
                                .iter()
                                .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                                .collect(),
                            scope: scope_name.clone().unwrap_or_default(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Waits until `condition` holds for the spans received so far and
    /// returns them.
    ///
    /// # Panics
    ///
    /// When it does not within `timeout`, listing the spans received.
    pub async fn wait_for_spans(
        &self,
        what: &str,
        timeout: Duration,
        condition: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let found = poll_until(timeout, || {
            let spans = self.spans();
            condition(&spans).then_some(spans)
        })
        .await;
        found.unwrap_or_else(|| {
            panic!(
                "spans ({what}) not received within {timeout:?}; received: {:#?}; unexpected http requests: {:?}",
                self.spans(),
                self.unexpected_http_requests()
            )
        })
    }
}

async fn bind_at(addr: SocketAddr) -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind the receiver to {addr}: {e}"))
}

async fn bind() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver to 127.0.0.1:0")
}

/// Every metric in a request with its resource attributes.
fn metrics_of(
    request: &ExportMetricsServiceRequest,
) -> impl Iterator<Item = (BTreeMap<String, String>, &Metric)> {
    request
        .resource_metrics
        .iter()
        .flat_map(|resource_metrics| {
            let resource = resource_metrics
                .resource
                .as_ref()
                .map(|resource| attributes(&resource.attributes))
                .unwrap_or_default();
            resource_metrics
                .scope_metrics
                .iter()
                .flat_map(|scope| scope.metrics.iter())
                .map(move |metric| (resource.clone(), metric))
        })
}

/// Attributes as a sorted map of strings (ints, doubles and bools are
/// formatted with `to_string`; other kinds with `{:?}`).
pub fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|value| value.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                Some(any_value::Value::DoubleValue(d)) => d.to_string(),
                Some(any_value::Value::BoolValue(b)) => b.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// Builds an attribute map from pairs, to compare with [`attributes`].
pub fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The kind of a metric's data: `"gauge"`, `"sum"`, `"histogram"`,
/// `"exponential_histogram"`, `"summary"` or `"none"`.
pub fn kind(metric: &Metric) -> &'static str {
    match &metric.data {
        Some(metric::Data::Gauge(_)) => "gauge",
        Some(metric::Data::Sum(_)) => "sum",
        Some(metric::Data::Histogram(_)) => "histogram",
        Some(metric::Data::ExponentialHistogram(_)) => "exponential_histogram",
        Some(metric::Data::Summary(_)) => "summary",
        None => "none",
    }
}

/// The value of a number data point as `f64` (ints converted).
pub fn number_value(point: &NumberDataPoint) -> f64 {
    match point.value {
        Some(number_data_point::Value::AsDouble(value)) => value,
        #[allow(clippy::cast_precision_loss)]
        Some(number_data_point::Value::AsInt(value)) => value as f64,
        None => panic!("number data point without a value: {point:?}"),
    }
}

/// A sum's or gauge's data points as (attributes, value).
///
/// # Panics
///
/// If the metric is neither a sum nor a gauge.
pub fn number_points(metric: &Metric) -> Vec<(BTreeMap<String, String>, f64)> {
    let points = match &metric.data {
        Some(metric::Data::Sum(sum)) => &sum.data_points,
        Some(metric::Data::Gauge(gauge)) => &gauge.data_points,
        _ => panic!("{} is a {}, not a sum or gauge", metric.name, kind(metric)),
    };
    points
        .iter()
        .map(|point| (attributes(&point.attributes), number_value(point)))
        .collect()
}

/// The value of the sum or gauge data point with exactly these attributes.
///
/// # Panics
///
/// If there is no such point.
pub fn number_value_with(metric: &Metric, wanted: &BTreeMap<String, String>) -> f64 {
    let points = number_points(metric);
    points
        .iter()
        .find(|(attributes, _)| attributes == wanted)
        .map(|(_, value)| *value)
        .unwrap_or_else(|| {
            panic!(
                "{} has no point with attributes {wanted:?}; points: {points:?}",
                metric.name
            )
        })
}

/// Whether a sum is monotonic and cumulative: `(is_monotonic,
/// aggregation_temporality)` where temporality is 1 = delta, 2 = cumulative.
///
/// # Panics
///
/// If the metric is not a sum.
pub fn sum_shape(metric: &Metric) -> (bool, i32) {
    match &metric.data {
        Some(metric::Data::Sum(sum)) => (sum.is_monotonic, sum.aggregation_temporality),
        _ => panic!("{} is a {}, not a sum", metric.name, kind(metric)),
    }
}

/// One explicit-bucket histogram data point, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    /// The point's attributes.
    pub attributes: BTreeMap<String, String>,
    /// Number of recorded values.
    pub count: u64,
    /// Sum of recorded values, if sent.
    pub sum: Option<f64>,
    /// Minimum recorded value, if sent.
    pub min: Option<f64>,
    /// Maximum recorded value, if sent.
    pub max: Option<f64>,
    /// Upper bucket bounds (`bucket_counts` has one more entry).
    pub bounds: Vec<f64>,
    /// Per-bucket counts.
    pub bucket_counts: Vec<u64>,
}

impl From<&HistogramDataPoint> for HistogramPoint {
    fn from(point: &HistogramDataPoint) -> Self {
        HistogramPoint {
            attributes: attributes(&point.attributes),
            count: point.count,
            sum: point.sum,
            min: point.min,
            max: point.max,
            bounds: point.explicit_bounds.clone(),
            bucket_counts: point.bucket_counts.clone(),
        }
    }
}

/// An explicit-bucket histogram's data points, and its temporality
/// (1 = delta, 2 = cumulative).
///
/// # Panics
///
/// If the metric is not an explicit-bucket histogram.
pub fn histogram_points(metric: &Metric) -> (Vec<HistogramPoint>, i32) {
    match &metric.data {
        Some(metric::Data::Histogram(histogram)) => (
            histogram
                .data_points
                .iter()
                .map(HistogramPoint::from)
                .collect(),
            histogram.aggregation_temporality,
        ),
        _ => panic!("{} is a {}, not a histogram", metric.name, kind(metric)),
    }
}

/// The histogram data point with exactly these attributes.
///
/// # Panics
///
/// If the metric is not a histogram or has no such point.
pub fn histogram_point_with(metric: &Metric, wanted: &BTreeMap<String, String>) -> HistogramPoint {
    let (points, _) = histogram_points(metric);
    points
        .iter()
        .find(|point| &point.attributes == wanted)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{} has no point with attributes {wanted:?}; points: {points:?}",
                metric.name
            )
        })
}

impl OtlpReceiver {
    /// The instrumentation scope `(name, version)` of the most recent export
    /// of metric `name`.
    pub fn scope_of(&self, name: &str) -> Option<(String, String)> {
        let received = lock(&self.received);
        received.requests.iter().rev().find_map(|request| {
            request
                .resource_metrics
                .iter()
                .flat_map(|resource_metrics| resource_metrics.scope_metrics.iter())
                .rev()
                .find(|scope| scope.metrics.iter().any(|metric| metric.name == name))
                .map(|scope| {
                    scope
                        .scope
                        .as_ref()
                        .map(|s| (s.name.clone(), s.version.clone()))
                        .unwrap_or_default()
                })
        })
    }
}

/// For each attribute key on any data point of `metric`, the kinds of value
/// it was sent with (`"string"`, `"int"`, `"double"`, `"bool"`, `"other"`):
/// [`attributes`] formats them all as strings, this tells them apart.
pub fn attribute_kinds(
    metric: &Metric,
) -> BTreeMap<String, std::collections::BTreeSet<&'static str>> {
    let point_attributes: Vec<&[KeyValue]> = match &metric.data {
        Some(metric::Data::Gauge(g)) => g.data_points.iter().map(|p| &p.attributes[..]).collect(),
        Some(metric::Data::Sum(s)) => s.data_points.iter().map(|p| &p.attributes[..]).collect(),
        Some(metric::Data::Histogram(h)) => {
            h.data_points.iter().map(|p| &p.attributes[..]).collect()
        }
        Some(metric::Data::ExponentialHistogram(h)) => {
            h.data_points.iter().map(|p| &p.attributes[..]).collect()
        }
        Some(metric::Data::Summary(s)) => s.data_points.iter().map(|p| &p.attributes[..]).collect(),
        None => Vec::new(),
    };
    let mut kinds: BTreeMap<String, std::collections::BTreeSet<&'static str>> = BTreeMap::new();
    for kv in point_attributes.into_iter().flatten() {
        let kind = match kv.value.as_ref().and_then(|value| value.value.as_ref()) {
            Some(any_value::Value::StringValue(_)) => "string",
            Some(any_value::Value::IntValue(_)) => "int",
            Some(any_value::Value::DoubleValue(_)) => "double",
            Some(any_value::Value::BoolValue(_)) => "bool",
            _ => "other",
        };
        kinds.entry(kv.key.clone()).or_default().insert(kind);
    }
    kinds
}

/// One base-2 exponential histogram data point, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct ExponentialHistogramPoint {
    /// The point's attributes.
    pub attributes: BTreeMap<String, String>,
    /// Number of recorded values.
    pub count: u64,
    /// Sum of recorded values, if sent.
    pub sum: Option<f64>,
    /// Minimum recorded value, if sent.
    pub min: Option<f64>,
    /// Maximum recorded value, if sent.
    pub max: Option<f64>,
    /// The scale: bucket `i` of the positive range is `(base^i, base^(i+1)]`
    /// with `base = 2^(2^-scale)`.
    pub scale: i32,
    /// Values in the zero bucket.
    pub zero_count: u64,
    /// Index of the first positive bucket.
    pub positive_offset: i32,
    /// Counts of the positive buckets, from `positive_offset` on.
    pub positive_counts: Vec<u64>,
    /// Total count of the negative buckets.
    pub negative_total: u64,
}

impl ExponentialHistogramPoint {
    /// The index of the positive bucket holding `value` at this point's scale.
    pub fn bucket_index(&self, value: f64) -> i32 {
        let scaled = value.log2() * 2f64.powi(self.scale);
        #[allow(clippy::cast_possible_truncation)]
        let index = scaled.ceil() as i32 - 1;
        index
    }

    /// The count of the positive bucket with absolute index `index`.
    pub fn count_at(&self, index: i32) -> u64 {
        usize::try_from(index - self.positive_offset)
            .ok()
            .and_then(|i| self.positive_counts.get(i).copied())
            .unwrap_or(0)
    }
}

/// A base-2 exponential histogram's data points, and its temporality
/// (1 = delta, 2 = cumulative).
///
/// # Panics
///
/// If the metric is not an exponential histogram.
pub fn exponential_histogram_points(metric: &Metric) -> (Vec<ExponentialHistogramPoint>, i32) {
    match &metric.data {
        Some(metric::Data::ExponentialHistogram(histogram)) => (
            histogram
                .data_points
                .iter()
                .map(|point| ExponentialHistogramPoint {
                    attributes: attributes(&point.attributes),
                    count: point.count,
                    sum: point.sum,
                    min: point.min,
                    max: point.max,
                    scale: point.scale,
                    zero_count: point.zero_count,
                    positive_offset: point.positive.as_ref().map_or(0, |b| b.offset),
                    positive_counts: point
                        .positive
                        .as_ref()
                        .map(|b| b.bucket_counts.clone())
                        .unwrap_or_default(),
                    negative_total: point
                        .negative
                        .as_ref()
                        .map_or(0, |b| b.bucket_counts.iter().sum()),
                })
                .collect(),
            histogram.aggregation_temporality,
        ),
        _ => panic!(
            "{} is a {}, not an exponential histogram",
            metric.name,
            kind(metric)
        ),
    }
}

/// The total of a sum metric's points whose attributes include all of
/// `wanted`, or 0 when the metric is `None` (never exported: the SDK sends
/// no instrument that was never recorded into).
pub fn sum_total_matching(metric: Option<&Metric>, wanted: &BTreeMap<String, String>) -> f64 {
    metric.map_or(0.0, |metric| {
        number_points(metric)
            .iter()
            .filter(|(attributes, _)| wanted.iter().all(|(k, v)| attributes.get(k) == Some(v)))
            .map(|(_, value)| value)
            .sum()
    })
}
