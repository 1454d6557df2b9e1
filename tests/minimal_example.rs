//! `examples/minimal.rs`, the README's first example, run as a process the
//! way a service runs: configured by its environment (`KAFKA_*`, `OTEL_*`),
//! stopped with SIGTERM. Good orders are handled and committed, the two
//! bad ones (not JSON, no `id`) land in `<topic>.dlt` without stopping
//! their partition, and the metrics reach an OTLP receiver on the way out
//! (the export interval is an hour: only the shutdown's flush delivers).

mod support;

use std::time::Duration;

use fresh_consumer::metrics::EVENT_AGE;
use support::child::ChildProcess;
use support::kafka::{TestCluster, unique};
use support::logs;
use support::otlp_receiver::{OtlpReceiver, histogram_points};
use support::wait::wait_until;

const PARTITIONS: i32 = 3;
const GOOD_PER_PARTITION: i64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_example_handles_dead_letters_and_stops_on_sigterm() {
    logs::init();
    let binary = support::example_binary("minimal");
    let (cluster, topic, group) = TestCluster::with_topic("minimal", PARTITIONS).await;
    let dlt = format!("{topic}.dlt");
    cluster.create_topic(&dlt, PARTITIONS).await;
    let receiver = OtlpReceiver::start().await;
    for p in 0..PARTITIONS {
        for i in 0..GOOD_PER_PARTITION {
            let order = format!(r#"{{"id":"{p}-{i}","amount":12.5}}"#);
            cluster.produce(&topic, p, "k", &order, None).await;
        }
    }
    cluster.produce(&topic, 1, "k", "not json", None).await;
    cluster
        .produce(&topic, 2, "k", r#"{"amount":3}"#, None)
        .await;
    let high = cluster.high_watermarks(&topic, PARTITIONS).await;

    let dir = std::env::temp_dir().join(unique("fresh-minimal"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut command = std::process::Command::new(&binary);
    command
        .env("KAFKA_BOOTSTRAP", cluster.bootstrap())
        .env("KAFKA_GROUP", &group)
        .env("KAFKA_TOPIC", &topic)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "3600000")
        .env_remove("RUST_LOG");
    let mut child = ChildProcess::spawn("minimal", &dir, command);

    // Committed to the end: the bad records did not stop their partitions.
    wait_until(
        Duration::from_secs(60),
        "the example committed every partition to its end",
        || {
            child.assert_running();
            let committed = cluster.committed(&group, &topic, PARTITIONS);
            let high = high.clone();
            async move { committed.await == high }
        },
    )
    .await;
    child.terminate();
    let status = child
        .wait_exit(Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", child.log_text()));
    let log = child.log_text();
    assert!(status.success(), "exit status {status}:\n{log}");
    let good = GOOD_PER_PARTITION * i64::from(PARTITIONS);
    assert!(
        log.contains(&format!("stopped: {good} orders handled, 2 dead-lettered")),
        "{log}"
    );

    let parked = cluster.read_topic(&dlt, PARTITIONS).await;
    let mut payloads: Vec<String> = parked
        .iter()
        .map(|r| String::from_utf8_lossy(r.payload().unwrap_or_default()).into_owned())
        .collect();
    payloads.sort();
    assert_eq!(payloads, ["not json", r#"{"amount":3}"#]);

    let age = receiver.metric(EVENT_AGE);
    let (points, _) = histogram_points(&age);
    let exported: u64 = points.iter().map(|p| p.count).sum();
    assert_eq!(exported, good as u64, "event ages in the final export");
    eprintln!(
        "minimal: {good} handled and committed, 2 dead-lettered, {exported} event ages exported at SIGTERM"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
