use super::*;
use std::collections::HashMap;

fn config_from(vars: &[(&'static str, &str)]) -> Result<OtlpConfig, EnvError> {
    let vars: HashMap<&'static str, String> =
        vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    OtlpConfig::from_lookup(|name| Ok(vars.get(name).cloned()))
}

fn resource_map(config: &OtlpConfig) -> HashMap<String, String> {
    config
        .resource()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults() {
    let config = OtlpConfig::new();
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    assert_eq!(config.endpoint(), "http://localhost:4317");
    assert_eq!(config.export_interval(), Duration::from_secs(60));
    assert_eq!(config.timeout(), Duration::from_secs(10));
    assert_eq!(config.temporality(), Temporality::Cumulative);
    assert!(config.service_name().starts_with("unknown_service"));
    let http = config.with_protocol(OtlpProtocol::HttpProtobuf);
    assert_eq!(http.endpoint(), "http://localhost:4318/v1/metrics");
}

#[test]
fn traces_take_their_own_variables_then_the_general_ones() {
    let config = config_from(&[]).unwrap();
    assert_eq!(config.traces_endpoint(), "http://localhost:4317");
    let http = config.with_protocol(OtlpProtocol::HttpProtobuf);
    assert_eq!(http.traces_endpoint(), "http://localhost:4318/v1/traces");

    let config = config_from(&[
        (ENV_ENDPOINT, "http://base:4318/"),
        (ENV_METRICS_PROTOCOL, "grpc"),
        (ENV_PROTOCOL, "http/protobuf"),
    ])
    .unwrap();
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    assert_eq!(config.traces_protocol(), OtlpProtocol::HttpProtobuf);
    assert_eq!(config.traces_endpoint(), "http://base:4318/v1/traces");

    let config = config_from(&[
        (ENV_ENDPOINT, "http://base:4318"),
        (ENV_TRACES_ENDPOINT, "http://traces:9999/custom"),
        (ENV_TRACES_PROTOCOL, "http/protobuf"),
    ])
    .unwrap()
    .with_endpoint("http://metrics:4317");
    assert_eq!(config.traces_endpoint(), "http://traces:9999/custom");
    assert_eq!(config.traces_protocol(), OtlpProtocol::HttpProtobuf);
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);

    let bad = config_from(&[(ENV_TRACES_PROTOCOL, "http/json")]).unwrap_err();
    assert_eq!(bad.name, ENV_TRACES_PROTOCOL);
}

#[test]
fn empty_environment_gives_defaults() {
    let config = config_from(&[]).unwrap();
    assert_eq!(config.endpoint(), "http://localhost:4317");
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
}

#[test]
fn base_endpoint_gets_metrics_path_for_http_only() {
    let vars = [(ENV_ENDPOINT, "http://collector:4318/")];
    let config = config_from(&vars).unwrap();
    assert_eq!(config.endpoint(), "http://collector:4318/");
    let config = config.with_protocol(OtlpProtocol::HttpProtobuf);
    assert_eq!(config.endpoint(), "http://collector:4318/v1/metrics");

    let vars = [
        (ENV_ENDPOINT, "http://collector:4318/prefix"),
        (ENV_PROTOCOL, "http/protobuf"),
    ];
    assert_eq!(
        config_from(&vars).unwrap().endpoint(),
        "http://collector:4318/prefix/v1/metrics"
    );
}

#[test]
fn metrics_endpoint_is_used_as_given_and_wins() {
    let vars = [
        (ENV_ENDPOINT, "http://base:4318"),
        (ENV_METRICS_ENDPOINT, "http://metrics:9999/custom"),
        (ENV_PROTOCOL, "http/protobuf"),
    ];
    let config = config_from(&vars).unwrap();
    assert_eq!(config.endpoint(), "http://metrics:9999/custom");
}

#[test]
fn explicit_setters_win_over_environment() {
    let vars = [
        (ENV_ENDPOINT, "http://base:4318"),
        (ENV_PROTOCOL, "http/protobuf"),
        (ENV_EXPORT_INTERVAL, "1500"),
        (ENV_SERVICE_NAME, "from-env"),
    ];
    let config = config_from(&vars)
        .unwrap()
        .with_endpoint("http://explicit:4317")
        .with_protocol(OtlpProtocol::Grpc)
        .with_export_interval(Duration::from_secs(3))
        .with_service_name("explicit");
    assert_eq!(config.endpoint(), "http://explicit:4317");
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    assert_eq!(config.export_interval(), Duration::from_secs(3));
    assert_eq!(config.service_name(), "explicit");
}

#[test]
fn environment_values_are_read() {
    let vars = [
        (ENV_PROTOCOL, "grpc"),
        (ENV_METRICS_PROTOCOL, "http/protobuf"),
        (ENV_EXPORT_INTERVAL, "1500"),
        (ENV_TIMEOUT, "7000"),
        (ENV_METRICS_TIMEOUT, "2500"),
        (ENV_TEMPORALITY, "Delta"),
    ];
    let config = config_from(&vars).unwrap();
    assert_eq!(config.protocol(), OtlpProtocol::HttpProtobuf);
    assert_eq!(config.export_interval(), Duration::from_millis(1500));
    assert_eq!(config.timeout(), Duration::from_millis(2500));
    assert_eq!(config.temporality(), Temporality::Delta);
}

#[test]
fn invalid_environment_values_are_errors() {
    for (name, value) in [
        (ENV_PROTOCOL, "http/json"),
        (ENV_EXPORT_INTERVAL, "soon"),
        (ENV_EXPORT_INTERVAL, "0"),
        (ENV_METRICS_TIMEOUT, "-1"),
        (ENV_TEMPORALITY, "sometimes"),
        (ENV_RESOURCE_ATTRIBUTES, "novalue"),
    ] {
        match config_from(&[(name, value)]) {
            Err(EnvError {
                name: got_name,
                value: got_value,
                ..
            }) => {
                assert_eq!((got_name, got_value.as_str()), (name, value));
            }
            other => panic!("{name}={value}: expected InvalidEnv, got {other:?}"),
        }
    }
    let error = config_from(&[(ENV_PROTOCOL, "http/json")]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": expected grpc or http/protobuf"
    );
}

#[test]
fn blank_environment_values_count_as_unset() {
    let config = config_from(&[(ENV_PROTOCOL, "  "), (ENV_ENDPOINT, "")]).unwrap();
    assert_eq!(config.protocol(), OtlpProtocol::Grpc);
    assert_eq!(config.endpoint(), "http://localhost:4317");
}

#[test]
fn resource_attributes_and_service_name_precedence() {
    let vars = [(
        ENV_RESOURCE_ATTRIBUTES,
        "service.name=from-attrs, deployment.environment=prod,team=a%20b%2Cc",
    )];
    let config = config_from(&vars).unwrap();
    assert_eq!(config.service_name(), "from-attrs");
    let map = resource_map(&config);
    assert_eq!(map["deployment.environment"], "prod");
    assert_eq!(map["team"], "a b,c");
    assert_eq!(map["telemetry.sdk.language"], "rust");
    assert_eq!(map["telemetry.sdk.name"], "opentelemetry");
    assert!(map.contains_key("telemetry.sdk.version"));

    let vars = [
        (ENV_RESOURCE_ATTRIBUTES, "service.name=from-attrs"),
        (ENV_SERVICE_NAME, "from-service-name"),
    ];
    let config = config_from(&vars).unwrap();
    assert_eq!(resource_map(&config)["service.name"], "from-service-name");

    let config = config
        .with_resource_attribute("deployment.environment", "staging")
        .with_service_name("explicit");
    let map = resource_map(&config);
    assert_eq!(map["service.name"], "explicit");
    assert_eq!(map["deployment.environment"], "staging");
}

#[test]
fn percent_decoding_keeps_malformed_escapes() {
    assert_eq!(percent_decode("a%2Cb"), "a,b");
    assert_eq!(percent_decode("100%"), "100%");
    assert_eq!(percent_decode("%zz%4"), "%zz%4");
    assert_eq!(percent_decode("%+5"), "%+5");
    assert_eq!(percent_decode("%C3%A9"), "é");
}
