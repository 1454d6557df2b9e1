//! `OtlpConfig::from_env` against the real process environment and an
//! in-process receiver. Environment variables are process-wide, so these tests
//! live in their own test binary and take `ENV_LOCK` for their whole run.

mod support;

use std::time::Duration;

use fresh_consumer::otlp::{EnvError, OtlpConfig, OtlpProtocol};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use support::otlp_receiver::OtlpReceiver;
use support::wait::within;

const ARRIVAL: Duration = Duration::from_secs(10);
const FLUSH: Duration = Duration::from_secs(10);
const NO_HANG: Duration = Duration::from_secs(20);
const METRIC: &str = "test.env.records";

/// Serialises the tests of this binary: each one owns the environment.
static ENV_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every variable that the helper or the exporter reads.
const OTEL_VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
];

/// Clears every OTEL variable, then sets `vars`.
fn set_env(vars: &[(&str, &str)]) {
    for name in OTEL_VARS {
        // SAFETY: the tests of this binary change the environment only while
        // holding ENV_LOCK, and nothing else in this binary reads it
        // concurrently (the helper and the SDK read it while building, which
        // these tests do under the same lock).
        unsafe { std::env::remove_var(name) };
    }
    for (name, value) in vars {
        // SAFETY: as above.
        unsafe { std::env::set_var(name, value) };
    }
}

fn record(provider: &SdkMeterProvider) {
    provider
        .meter("fresh-consumer-env-test")
        .u64_counter(METRIC)
        .with_unit("{record}")
        .build()
        .add(2, &[]);
}

async fn flush_and_shutdown(provider: &SdkMeterProvider) {
    within(
        NO_HANG,
        "flush",
        fresh_consumer::metrics::flush(provider, FLUSH),
    )
    .await
    .expect("flush");
    within(
        NO_HANG,
        "shutdown",
        fresh_consumer::metrics::shutdown(provider, FLUSH),
    )
    .await
    .expect("shutdown");
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT` is a base endpoint: with
/// `http/protobuf`, `/v1/metrics` is appended (the receiver only answers
/// there). Service name and resource attributes reach the receiver.
#[tokio::test]
async fn http_base_endpoint_gets_metrics_path_and_resource_arrives() {
    let _env = ENV_LOCK.lock().await;
    let receiver = OtlpReceiver::start_http().await;
    set_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_SERVICE_NAME", "env-service"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=staging,team=data%20platform,service.name=ignored",
        ),
    ]);
    let config = OtlpConfig::from_env().expect("valid environment");
    assert_eq!(config.protocol(), OtlpProtocol::HttpProtobuf);
    assert_eq!(
        config.endpoint(),
        format!("{}/v1/metrics", receiver.endpoint())
    );
    assert_eq!(config.service_name(), "env-service");

    let provider = config.build().unwrap();
    record(&provider);
    flush_and_shutdown(&provider).await;

    receiver.wait_for_metric(METRIC, ARRIVAL).await;
    assert_eq!(receiver.unexpected_http_requests(), Vec::<String>::new());
    let resource = receiver.resource_attributes_of(METRIC).unwrap();
    assert_eq!(resource["service.name"], "env-service");
    assert_eq!(resource["deployment.environment"], "staging");
    assert_eq!(resource["team"], "data platform");
    assert_eq!(resource["telemetry.sdk.language"], "rust");
}

/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is used exactly as given and wins
/// over the base endpoint.
#[tokio::test]
async fn metrics_endpoint_is_used_as_given() {
    let _env = ENV_LOCK.lock().await;
    let receiver = OtlpReceiver::start_http().await;
    set_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            &receiver.metrics_endpoint(),
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ]);
    let config = OtlpConfig::from_env().unwrap();
    assert_eq!(config.protocol(), OtlpProtocol::HttpProtobuf);
    assert_eq!(config.endpoint(), receiver.metrics_endpoint());
    let provider = config.build().unwrap();
    record(&provider);
    flush_and_shutdown(&provider).await;
    receiver.wait_for_metric(METRIC, ARRIVAL).await;
    assert_eq!(receiver.unexpected_http_requests(), Vec::<String>::new());
}

/// With gRPC the base endpoint is used as is, and `OTEL_METRIC_EXPORT_INTERVAL`
/// drives the periodic export (no flush here).
#[tokio::test]
async fn grpc_endpoint_and_export_interval_from_env() {
    let _env = ENV_LOCK.lock().await;
    let receiver = OtlpReceiver::start().await;
    set_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
    ]);
    let config = OtlpConfig::from_env().unwrap();
    assert_eq!(config.endpoint(), receiver.endpoint());
    assert_eq!(config.export_interval(), Duration::from_millis(100));
    let provider = config.build().unwrap();
    record(&provider);
    receiver.wait_for_metric(METRIC, ARRIVAL).await;
    within(
        NO_HANG,
        "shutdown",
        fresh_consumer::metrics::shutdown(&provider, FLUSH),
    )
    .await
    .expect("shutdown");
}

/// Setters called after `from_env` win over every variable.
#[tokio::test]
async fn explicit_settings_win_over_env() {
    let _env = ENV_LOCK.lock().await;
    let receiver = OtlpReceiver::start().await;
    set_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:9"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_SERVICE_NAME", "env-service"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
    ]);
    let config = OtlpConfig::from_env()
        .unwrap()
        .with_protocol(OtlpProtocol::Grpc)
        .with_endpoint(receiver.endpoint())
        .with_service_name("explicit-service")
        .with_export_interval(Duration::from_secs(3600));
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    assert_eq!(config.endpoint(), receiver.endpoint());
    assert_eq!(config.export_interval(), Duration::from_secs(3600));
    let provider = config.build().unwrap();
    record(&provider);
    flush_and_shutdown(&provider).await;
    receiver.wait_for_metric(METRIC, ARRIVAL).await;
    let resource = receiver.resource_attributes_of(METRIC).unwrap();
    assert_eq!(resource["service.name"], "explicit-service");
}

/// `OtlpConfig::new` ignores the environment entirely.
#[tokio::test]
async fn new_ignores_the_environment() {
    let _env = ENV_LOCK.lock().await;
    set_env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_SERVICE_NAME", "env-service"),
    ]);
    let config = OtlpConfig::new();
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    assert_eq!(config.endpoint(), "http://localhost:4317");
    assert_ne!(config.service_name(), "env-service");
    assert!(config.service_name().starts_with("unknown_service"));
}

#[tokio::test]
async fn unsupported_values_are_reported() {
    let _env = ENV_LOCK.lock().await;
    set_env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
    let error = OtlpConfig::from_env().expect_err("http/json is not supported");
    assert!(
        matches!(
            &error,
            EnvError { name: "OTEL_EXPORTER_OTLP_PROTOCOL", value, .. } if value == "http/json"
        ),
        "{error:?}"
    );

    set_env(&[("OTEL_METRIC_EXPORT_INTERVAL", "10s")]);
    let error = OtlpConfig::from_env().expect_err("interval is in milliseconds");
    assert_eq!(
        error.to_string(),
        "invalid OTEL_METRIC_EXPORT_INTERVAL=\"10s\": expected a positive number of milliseconds"
    );
    set_env(&[]);
}
