//! `examples/quickstart.rs` on a cluster of the user's (`--bootstrap`): the
//! example binary is built once (`cargo build --example quickstart`) and run
//! as a child process against the test's cluster, which plays the user's
//! cluster: librdkafka's mock broker started by this test, or the real
//! cluster named by `FRESH_CONSUMER_TEST_BOOTSTRAP`. Also the error cases a
//! user meets first: an unreachable broker, a missing topic, a bad `-X`
//! property, flags that do not go together.

mod support;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use support::kafka::{TestCluster, unique};

/// A run of the example ends well within this (the unreachable-broker case
/// waits out its 10 s metadata timeout).
const DEADLINE: Duration = Duration::from_secs(120);

fn quickstart_binary() -> &'static std::path::Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| support::example_binary("quickstart"))
}

/// Runs the example with `args` (no OTLP export, no log filter from the
/// environment), up to [`DEADLINE`].
async fn quickstart(args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(quickstart_binary());
    command
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("quickstart {args:?} did not finish within {DEADLINE:?}"))
        .expect("run the quickstart");
    eprintln!(
        "quickstart {args:?}: {}\n--- stdout\n{}--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A row of the summary table: `(partition, handled, committed, log end,
/// age samples)`, `None` for a `-`.
type Row = (i32, u64, Option<i64>, Option<i64>, u64);

/// The rows of the summary table.
fn table(stdout: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut inside = false;
    for line in stdout.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        if cells.first() == Some(&"partition") && cells.contains(&"handled") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if cells.len() < 6 || cells[4] != "|" {
            break;
        }
        let num = |s: &str| s.parse::<i64>().ok();
        rows.push((
            cells[0].parse().expect("partition"),
            cells[1].parse().expect("handled"),
            num(cells[2]),
            num(cells[3]),
            cells[5].parse().expect("age samples"),
        ));
    }
    rows
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--topic`: reads what is in an existing topic of the cluster, commits it
/// all, prints the same table as the demo, and produces nothing.
#[tokio::test]
async fn reads_an_existing_topic_of_the_given_cluster_without_producing() {
    let (cluster, topic, group) = TestCluster::with_topic("qs-existing", 2).await;
    cluster.produce_many(&topic, 2, 25).await;
    let before = cluster.high_watermarks(&topic, 2).await;
    assert_eq!(before, vec![25, 25]);

    let out = quickstart(&[
        "--bootstrap",
        cluster.bootstrap(),
        "--topic",
        &topic,
        "--group",
        &group,
        "--exit-after-records",
        "50",
        "-X",
        "fetch.wait.max.ms=10",
        "-X",
        "client.id=quickstart-test",
    ])
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "exit status {}", out.status);
    assert!(stdout.contains("nothing is produced"), "{stdout}");
    assert_eq!(
        table(&stdout),
        vec![
            (0, 25, Some(25), Some(25), 25),
            (1, 25, Some(25), Some(25), 25)
        ],
        "every record handled, committed to the log end, with an age sample"
    );
    // The group's offsets are on the cluster, and nothing was produced.
    assert_eq!(cluster.committed(&group, &topic, 2).await, vec![25, 25]);
    assert_eq!(cluster.high_watermarks(&topic, 2).await, before);
}

/// Without `--topic`: the demo runs in a topic the example creates on the
/// cluster (CreateTopics) and deletes at the end. librdkafka's mock broker
/// does not implement CreateTopics: there the example must say so and
/// point to `--topic`.
#[tokio::test]
async fn runs_the_demo_in_a_topic_of_its_own_or_says_why_not() {
    let cluster = TestCluster::start();
    let out = quickstart(&[
        "--bootstrap",
        cluster.bootstrap(),
        "--records",
        "300",
        "-X",
        "fetch.wait.max.ms=10",
    ])
    .await;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    if cluster.is_real() {
        assert!(out.status.success(), "exit status {}", out.status);
        let rows = table(&stdout);
        assert_eq!(rows.len(), 3, "{stdout}");
        assert_eq!(rows.iter().map(|r| r.1).sum::<u64>(), 300, "{rows:?}");
        assert!(
            rows.iter().all(|r| r.2 == r.3),
            "committed to the log end: {rows:?}"
        );
        assert!(stdout.contains("deleted topic"), "{stdout}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("could not create topic") && stderr.contains("--topic"),
            "{stderr}"
        );
        assert!(table(&stdout).is_empty(), "nothing ran: {stdout}");
    }
}

/// A broker that does not answer: the metadata request gives up after its
/// 10 s bound, with a message naming the address, and exit status 1.
#[tokio::test]
async fn an_unreachable_broker_is_a_clear_error() {
    // A loopback port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let out = quickstart(&["--bootstrap", &address]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the Kafka cluster at {address}")),
        "{stderr}"
    );
    assert!(table(&text(&out.stdout)).is_empty());
}

/// `--topic` naming a topic the cluster does not have: exit status 1 with
/// the topic's name, before any consumer starts.
#[tokio::test]
async fn a_missing_topic_is_a_clear_error() {
    let cluster = TestCluster::start();
    let missing = unique("qs-missing");
    let out = quickstart(&["--bootstrap", cluster.bootstrap(), "--topic", &missing]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("topic {missing:?} does not exist")),
        "{stderr}"
    );
    assert!(table(&text(&out.stdout)).is_empty());
}

/// `-X` reaches librdkafka: a property it does not know is refused with
/// its name (exit status 1).
#[tokio::test]
async fn x_properties_reach_librdkafka() {
    let cluster = TestCluster::start();
    let out = quickstart(&[
        "--bootstrap",
        cluster.bootstrap(),
        "-X",
        "no.such.property=1",
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no.such.property"), "{stderr}");
}

/// Flags that do not go together are bad usage (exit status 2).
#[tokio::test]
async fn inconsistent_flags_are_bad_usage() {
    for args in [
        &["--topic", "orders"][..],
        &["--serve", "--bootstrap", "127.0.0.1:9092"],
        &[
            "--bootstrap",
            "127.0.0.1:9092",
            "--topic",
            "t",
            "--records",
            "5",
        ],
        &["--bootstrap", "127.0.0.1:9092", "--exit-after-records", "5"],
        &["--bootstrap", "127.0.0.1:9092", "-X", "no-equals-sign"],
        &["--bootstrap"],
    ] {
        let out = quickstart(args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
