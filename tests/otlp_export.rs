//! The OTLP helper against an in-process receiver: what arrives, over gRPC and
//! HTTP/protobuf, on current-thread and multi-thread runtimes, and what a
//! flush to an unreachable collector does.

mod support;

use std::error::Error as _;
use std::time::{Duration, Instant};

use fresh_consumer::metrics::FlushError;
use fresh_consumer::otlp::{BuildError, OtlpConfig, OtlpProtocol};
use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{SdkMeterProvider, Temporality};

use support::otlp_receiver::{
    OtlpReceiver, attrs, histogram_point_with, histogram_points, number_points, number_value_with,
    sum_shape,
};
use support::wait::within;

/// Bound on every wait for data at the receiver.
const ARRIVAL: Duration = Duration::from_secs(10);
/// Timeout handed to `flush`/`shutdown`.
const FLUSH: Duration = Duration::from_secs(10);
/// Upper bound for a step that must not hang (well above `FLUSH`).
const NO_HANG: Duration = Duration::from_secs(20);

const LATENCY: &str = "test.processing.duration";
const RECORDS: &str = "test.records";
const BOUNDS: [f64; 4] = [0.005, 0.05, 0.5, 5.0];

/// A config for `receiver` that only exports when flushed (the periodic
/// interval is far longer than any test).
fn config_for(receiver: &OtlpReceiver, protocol: OtlpProtocol) -> OtlpConfig {
    OtlpConfig::new()
        .with_protocol(protocol)
        .with_endpoint(receiver.metrics_endpoint())
        .with_export_interval(Duration::from_secs(3600))
        .with_timeout(Duration::from_secs(5))
        .with_service_name("otlp-export-test")
        .with_resource_attribute("deployment.environment", "test")
}

/// Records a histogram with explicit bounds in seconds and a counter.
fn record_sample(provider: &SdkMeterProvider) {
    let meter = provider.meter("fresh-consumer-test");
    let latency = meter
        .f64_histogram(LATENCY)
        .with_unit("s")
        .with_description("Time to process one record.")
        .with_boundaries(BOUNDS.to_vec())
        .build();
    let records = meter
        .u64_counter(RECORDS)
        .with_unit("{record}")
        .with_description("Records processed.")
        .build();
    let orders = [
        KeyValue::new("topic", "orders"),
        KeyValue::new("partition", 3_i64),
    ];
    for seconds in [0.001, 0.01, 0.02, 0.7, 9.0] {
        latency.record(seconds, &orders);
    }
    latency.record(0.2, &[KeyValue::new("topic", "payments")]);
    records.add(5, &[KeyValue::new("topic", "orders")]);
    records.add(1, &[KeyValue::new("topic", "payments")]);
}

/// Asserts that what `record_sample` recorded arrived intact.
async fn assert_sample_arrived(receiver: &OtlpReceiver) {
    let latency = receiver.wait_for_metric(LATENCY, ARRIVAL).await;
    assert_eq!(latency.unit, "s");
    assert_eq!(latency.description, "Time to process one record.");
    let (points, temporality) = histogram_points(&latency);
    assert_eq!(temporality, 2, "cumulative by default");
    assert_eq!(points.len(), 2, "{points:?}");
    let orders = histogram_point_with(&latency, &attrs(&[("topic", "orders"), ("partition", "3")]));
    assert_eq!(orders.bounds, BOUNDS.to_vec());
    assert_eq!(orders.bucket_counts, vec![1, 2, 0, 1, 1]);
    assert_eq!(orders.count, 5);
    let sum = orders.sum.expect("histogram sum");
    assert!((sum - 9.731).abs() < 1e-9, "sum {sum}");
    assert_eq!(orders.min, Some(0.001));
    assert_eq!(orders.max, Some(9.0));
    let payments = histogram_point_with(&latency, &attrs(&[("topic", "payments")]));
    assert_eq!(payments.bucket_counts, vec![0, 0, 1, 0, 0]);

    let records = receiver.wait_for_metric(RECORDS, ARRIVAL).await;
    assert_eq!(records.unit, "{record}");
    assert_eq!(records.description, "Records processed.");
    assert_eq!(sum_shape(&records), (true, 2));
    assert_eq!(
        number_value_with(&records, &attrs(&[("topic", "orders")])),
        5.0
    );
    assert_eq!(
        number_value_with(&records, &attrs(&[("topic", "payments")])),
        1.0
    );

    let resource = receiver
        .resource_attributes_of(LATENCY)
        .expect("resource of the export");
    assert_eq!(resource["service.name"], "otlp-export-test");
    assert_eq!(resource["deployment.environment"], "test");
    assert_eq!(resource["telemetry.sdk.language"], "rust");
    assert_eq!(resource["telemetry.sdk.name"], "opentelemetry");
    assert!(
        resource.contains_key("telemetry.sdk.version"),
        "{resource:?}"
    );
}

/// Flushes, checks that it neither hangs nor fails, and returns how long it took.
async fn flush_ok(provider: &SdkMeterProvider) -> Duration {
    let started = Instant::now();
    within(
        NO_HANG,
        "flush",
        fresh_consumer::metrics::flush(provider, FLUSH),
    )
    .await
    .expect("flush");
    started.elapsed()
}

async fn shutdown_ok(provider: &SdkMeterProvider) {
    within(
        NO_HANG,
        "shutdown",
        fresh_consumer::metrics::shutdown(provider, FLUSH),
    )
    .await
    .expect("shutdown");
}

/// An address on which nothing listens: bound, then released.
async fn closed_port_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

/// Records the sample, flushes it (printing how long that took, as `what`)
/// and checks that it arrived.
async fn flush_a_sample(receiver: &OtlpReceiver, provider: &SdkMeterProvider, what: &str) {
    record_sample(provider);
    let took = flush_ok(provider).await;
    eprintln!("{what}: {took:?}");
    assert_sample_arrived(receiver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_on_multi_thread_runtime() {
    let receiver = OtlpReceiver::start().await;
    let provider = config_for(&receiver, OtlpProtocol::Grpc).build().unwrap();
    flush_a_sample(&receiver, &provider, "grpc flush, multi-thread runtime").await;
    shutdown_ok(&provider).await;
}

/// `#[tokio::test]` is a current-thread runtime: calling `force_flush`
/// directly there would deadlock the gRPC exporter.
#[tokio::test]
async fn grpc_flush_on_current_thread_runtime_does_not_hang() {
    let receiver = OtlpReceiver::start().await;
    let provider = config_for(&receiver, OtlpProtocol::Grpc).build().unwrap();
    flush_a_sample(&receiver, &provider, "grpc flush, current-thread runtime").await;

    // A second flush exports the cumulative state again.
    let before = receiver.request_count();
    flush_ok(&provider).await;
    assert!(receiver.request_count() > before);

    let started = Instant::now();
    shutdown_ok(&provider).await;
    eprintln!(
        "grpc shutdown, current-thread runtime: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn http_protobuf_export_arrives() {
    let receiver = OtlpReceiver::start_http().await;
    let config = config_for(&receiver, OtlpProtocol::HttpProtobuf);
    assert!(config.endpoint().ends_with("/v1/metrics"));
    let provider = config.build().unwrap();
    flush_a_sample(&receiver, &provider, "http flush, current-thread runtime").await;
    assert_eq!(receiver.unexpected_http_requests(), Vec::<String>::new());
    shutdown_ok(&provider).await;
}

#[tokio::test]
async fn shutdown_exports_what_is_left() {
    let receiver = OtlpReceiver::start().await;
    let provider = config_for(&receiver, OtlpProtocol::Grpc).build().unwrap();
    record_sample(&provider);
    shutdown_ok(&provider).await;
    assert_sample_arrived(&receiver).await;

    // Afterwards the provider is finished: flushing it is an error, not a hang.
    let result = within(
        NO_HANG,
        "flush after shutdown",
        fresh_consumer::metrics::flush(&provider, FLUSH),
    )
    .await;
    assert!(matches!(result, Err(FlushError::Flush(_))), "{result:?}");
}

#[tokio::test]
async fn periodic_export_without_flush() {
    let receiver = OtlpReceiver::start().await;
    let provider = config_for(&receiver, OtlpProtocol::Grpc)
        .with_export_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    record_sample(&provider);
    assert_sample_arrived(&receiver).await;
    shutdown_ok(&provider).await;
}

#[tokio::test]
async fn delta_temporality_is_sent() {
    let receiver = OtlpReceiver::start().await;
    let provider = config_for(&receiver, OtlpProtocol::Grpc)
        .with_temporality(Temporality::Delta)
        .build()
        .unwrap();
    record_sample(&provider);
    flush_ok(&provider).await;
    let records = receiver.wait_for_metric(RECORDS, ARRIVAL).await;
    assert_eq!(sum_shape(&records), (true, 1));
    let (_, temporality) = histogram_points(&receiver.wait_for_metric(LATENCY, ARRIVAL).await);
    assert_eq!(temporality, 1);
    shutdown_ok(&provider).await;
}

async fn flush_to_closed_port(protocol: OtlpProtocol) {
    let endpoint = closed_port_endpoint().await;
    let endpoint = match protocol {
        OtlpProtocol::Grpc => endpoint,
        OtlpProtocol::HttpProtobuf => format!("{endpoint}/v1/metrics"),
    };
    let exporter_timeout = Duration::from_secs(1);
    let flush_timeout = Duration::from_secs(5);
    let provider = OtlpConfig::new()
        .with_protocol(protocol)
        .with_endpoint(endpoint)
        .with_export_interval(Duration::from_secs(3600))
        .with_timeout(exporter_timeout)
        .build()
        .unwrap();
    record_sample(&provider);

    let started = Instant::now();
    let result = within(
        NO_HANG,
        "flush",
        fresh_consumer::metrics::flush(&provider, flush_timeout),
    )
    .await;
    let took = started.elapsed();
    eprintln!("{protocol} flush to a closed port: {took:?}: {result:?}");
    let error = result.expect_err("flush to a closed port must fail");
    assert!(
        matches!(error, FlushError::Flush(_)),
        "export error expected, got {error:?}"
    );
    assert_eq!(error.to_string(), "metrics flush failed");
    assert!(error.source().is_some(), "the exporter error is the source");
    assert!(took < flush_timeout, "took {took:?}");

    // Shutting down exports once more and fails the same way, bounded.
    let result = within(
        NO_HANG,
        "shutdown",
        fresh_consumer::metrics::shutdown(&provider, flush_timeout),
    )
    .await;
    assert!(result.is_err(), "{result:?}");
}

/// A collector outage is counted: the data points of the exports that
/// failed while nothing listened arrive, once a collector listens on the
/// port again, as `otel.sdk.exporter.metric_data_point.exported` with
/// `error.type`, beside the ones exported.
async fn an_outage_is_counted(protocol: OtlpProtocol) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let endpoint = match protocol {
        OtlpProtocol::Grpc => format!("http://{addr}"),
        OtlpProtocol::HttpProtobuf => format!("http://{addr}/v1/metrics"),
    };
    let provider = OtlpConfig::new()
        .with_protocol(protocol)
        .with_endpoint(endpoint)
        .with_export_interval(Duration::from_secs(3600))
        .with_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    record_sample(&provider);
    for _ in 0..2 {
        let result = within(
            NO_HANG,
            "flush",
            fresh_consumer::metrics::flush(&provider, FLUSH),
        )
        .await;
        assert!(result.is_err(), "nothing listens yet: {result:?}");
    }
    let receiver = match protocol {
        OtlpProtocol::Grpc => OtlpReceiver::start_at(addr).await,
        OtlpProtocol::HttpProtobuf => OtlpReceiver::start_http_at(addr).await,
    };
    // The gRPC channel reconnects with a backoff: flush until one lands.
    let deadline = Instant::now() + ARRIVAL;
    while receiver.request_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "no export arrived after the outage"
        );
        let _ = fresh_consumer::metrics::flush(&provider, FLUSH).await;
    }
    let metric = receiver
        .wait_for_metric(
            fresh_consumer::metrics::OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED,
            ARRIVAL,
        )
        .await;
    assert_eq!(metric.unit, "{data_point}");
    let component = match protocol {
        OtlpProtocol::Grpc => "otlp_grpc_metric_exporter",
        OtlpProtocol::HttpProtobuf => "otlp_http_metric_exporter",
    };
    let failed: f64 = number_points(&metric)
        .iter()
        .filter(|(a, _)| {
            a.get("otel.component.type").map(String::as_str) == Some(component)
                && a.get("otel.component.name")
                    .is_some_and(|n| n.starts_with(&format!("{component}/")))
                && a.get("error.type").is_some()
        })
        .map(|(_, v)| v)
        .sum();
    // Two failed exports of the sample's 4 data points (2 histogram
    // points, 2 counter points), at least.
    assert!(failed >= 8.0, "failed data points {failed}");
    shutdown_ok(&provider).await;
}

#[tokio::test]
async fn grpc_outage_is_counted() {
    an_outage_is_counted(OtlpProtocol::Grpc).await;
}

#[tokio::test]
async fn http_outage_is_counted() {
    an_outage_is_counted(OtlpProtocol::HttpProtobuf).await;
}

#[tokio::test]
async fn grpc_flush_to_closed_port_fails_within_timeout() {
    flush_to_closed_port(OtlpProtocol::Grpc).await;
}

#[tokio::test]
async fn http_flush_to_closed_port_fails_within_timeout() {
    flush_to_closed_port(OtlpProtocol::HttpProtobuf).await;
}

/// A collector that accepts connections but never answers: the flush gives
/// up at its own timeout, before the exporter's.
#[tokio::test]
async fn flush_times_out_against_a_silent_collector() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((socket, _)) => held.push(socket),
                    Err(_) => break,
                },
                _ = &mut stop_rx => break,
            }
        }
    });
    let provider = OtlpConfig::new()
        .with_endpoint(format!("http://{addr}"))
        .with_export_interval(Duration::from_secs(3600))
        .with_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    record_sample(&provider);

    let flush_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let result = within(
        NO_HANG,
        "flush",
        fresh_consumer::metrics::flush(&provider, flush_timeout),
    )
    .await;
    let took = started.elapsed();
    eprintln!("grpc flush to a silent collector: {took:?}: {result:?}");
    assert!(
        matches!(result, Err(FlushError::Timeout { operation: "flush", timeout }) if timeout == flush_timeout),
        "{result:?}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let _ = stop_tx.send(());
}

#[test]
fn grpc_outside_a_tokio_runtime_is_an_error_not_a_panic() {
    let result = OtlpConfig::new().build();
    let error = result.expect_err("no runtime");
    assert!(matches!(error, BuildError::NoTokioRuntime), "{error:?}");
}

#[test]
fn http_works_without_a_runtime_with_blocking_helpers() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The receiver lives on its own runtime thread; the provider is built and
    // flushed from plain synchronous code.
    let (receiver_tx, receiver_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        runtime.block_on(async move {
            let receiver = OtlpReceiver::start_http().await;
            receiver_tx.send(receiver.metrics_endpoint()).unwrap();
            let _ = stop_rx.await;
            receiver.requests()
        })
    });
    let endpoint = receiver_rx.recv_timeout(ARRIVAL).expect("receiver started");
    let provider = OtlpConfig::new()
        .with_protocol(OtlpProtocol::HttpProtobuf)
        .with_endpoint(endpoint)
        .with_export_interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    record_sample(&provider);
    fresh_consumer::metrics::flush_blocking(&provider, FLUSH).expect("flush");
    fresh_consumer::metrics::shutdown_blocking(&provider, FLUSH).expect("shutdown");
    stop_tx.send(()).unwrap();
    let requests = server.join().unwrap();
    let names: Vec<&str> = requests
        .iter()
        .flat_map(|request| &request.resource_metrics)
        .flat_map(|resource| &resource.scope_metrics)
        .flat_map(|scope| &scope.metrics)
        .map(|metric| metric.name.as_str())
        .collect();
    assert!(names.contains(&LATENCY), "{names:?}");
    assert!(names.contains(&RECORDS), "{names:?}");
}

#[test]
fn invalid_endpoint_is_a_build_error() {
    let error = OtlpConfig::new()
        .with_protocol(OtlpProtocol::HttpProtobuf)
        .with_endpoint("not a uri")
        .build()
        .expect_err("invalid endpoint");
    assert!(matches!(error, BuildError::Exporter(_)), "{error:?}");
    assert_eq!(error.to_string(), "cannot build the otlp metric exporter");
    assert!(error.source().is_some());
}
