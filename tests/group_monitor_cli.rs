//! The group monitor's command-line tool (`examples/group_monitor.rs`) as a
//! user runs it: a process of its own, its standard output, standard error
//! and exit code, for each documented outcome:
//!
//! | run | exit code | output |
//! |---|---|---|
//! | a report, printed once as a table | 0 | the table on stdout |
//! | the same with `--json` | 0 | one JSON object on stdout |
//! | a group without committed offsets (unknown group) | 4 | the report, and the error on stderr |
//! | an unknown topic | 3 | the error on stderr |
//! | no broker answers (bounded by `--request-timeout`) | 2 | the error on stderr |
//! | malformed configuration or arguments | 1 | the error and the usage on stderr |
//!
//! (5, a cycle that fails after the monitor connected, needs a broker to go
//! away between two requests of one run; the library's test
//! `bad_input_is_a_typed_error_or_a_documented_status` covers the error
//! itself.)
//!
//! The tool runs in a child process of this test binary: `cli_child`, a
//! no-op unless `FRESH_MONITOR_CLI_ARGS` is set, calls the example's `cli`
//! with those arguments and exits with its code (the pattern of
//! `tests/support/child.rs`, with stdout and stderr kept apart). The broker
//! lives in the test process.

mod support;

#[path = "../examples/group_monitor.rs"]
#[allow(dead_code)]
mod example;

use std::process::Stdio;
use std::time::{Duration, Instant};

use support::kafka::{TestCluster, now_ms, unique};
use support::logs;

/// The child's arguments, one per line.
const ARGS: &str = "FRESH_MONITOR_CLI_ARGS";

/// How long one run of the tool may take at most (a deadline, not a
/// measurement: the slowest run, the unreachable broker, is bounded by its
/// `--request-timeout 2`).
const DEADLINE: Duration = Duration::from_secs(60);

/// In the child: the tool with the parent's arguments, then exit with its
/// code. A no-op when the test runs as itself.
#[test]
fn cli_child() {
    let Ok(args) = std::env::var(ARGS) else {
        return;
    };
    let code = example::cli(args.lines().map(str::to_owned));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(i32::from(code));
}

/// What a run of the tool left behind.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON object the tool printed: one line (the test harness of the
    /// child prints `test cli_child ... ` before it).
    fn json(&self) -> serde_json::Value {
        let start = self
            .stdout
            .find('{')
            .unwrap_or_else(|| panic!("no JSON in {self:#?}"));
        let line = self.stdout[start..].lines().next().unwrap();
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }
}

/// Runs the tool with `args` in a child process, within [`DEADLINE`].
async fn run(args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(std::env::current_exe().expect("test binary"));
    command
        .args(["--exact", "cli_child", "--nocapture", "--test-threads=1"])
        .env(ARGS, args.join("\n"))
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let out = tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("group_monitor {args:?} ran longer than {DEADLINE:?}"))
        .expect("run the tool");
    let run = Run {
        code: out.status.code().expect("exited (not killed by a signal)"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    println!(
        "group_monitor {args:?}: exit {} after {:?}",
        run.code,
        started.elapsed()
    );
    run
}

/// A topic of 2 partitions with records, a group that committed 1 of the 3
/// records of partition 0 (the record at offset 1 stamped 90 s ago) and all
/// of partition 1.
async fn setup(prefix: &str) -> (TestCluster, String, String) {
    let (cluster, topic, group) = TestCluster::with_topic(prefix, 2).await;
    let old = now_ms() - 90_000;
    cluster
        .produce(&topic, 0, "k", "a", Some(old - 1_000))
        .await;
    cluster.produce(&topic, 0, "k", "b", Some(old)).await;
    cluster.produce(&topic, 0, "k", "c", None).await;
    cluster.produce(&topic, 1, "k", "d", None).await;
    cluster.commit_offset(&group, &topic, 0, 1).await;
    cluster.commit_offset(&group, &topic, 1, 1).await;
    (cluster, topic, group)
}

fn base<'a>(cluster: &'a TestCluster, group: &'a str, topic: &'a str) -> Vec<&'a str> {
    vec![
        "--bootstrap",
        cluster.bootstrap(),
        "--group",
        group,
        "--topic",
        topic,
        "--samples",
        "2",
        "--interval",
        "0.2",
        "--lag-threshold",
        "30",
    ]
}

/// Exit 0 and the report as a table; the same report as parsable JSON
/// with `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_as_a_table_and_as_json() {
    logs::init();
    let (cluster, topic, group) = setup("cli-report").await;

    let table = run(&base(&cluster, &group, &topic)).await;
    assert_eq!(table.code, 0, "{table:#?}");
    assert!(
        table.stdout.contains(&format!("group {group}: ")),
        "{table:#?}"
    );
    for column in ["partition", "committed", "log start", "time lag", "status"] {
        assert!(table.stdout.contains(column), "{column}: {table:#?}");
    }
    let row0 = table
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{topic}-0 ")))
        .unwrap_or_else(|| panic!("no row for partition 0: {table:#?}"));
    assert!(row0.contains("lagging"), "{row0}");
    assert!(row0.contains("create_time"), "{row0}");

    let mut args = base(&cluster, &group, &topic);
    args.push("--json");
    let json = run(&args).await;
    assert_eq!(json.code, 0, "{json:#?}");
    let v = json.json();
    let g = &v["groups"][0];
    assert_eq!(g["group"], group.as_str());
    assert!(g["diagnosis"].is_string());
    let parts = g["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 2);
    let p0 = &parts[0];
    assert_eq!(p0["topic"], topic.as_str());
    assert_eq!(p0["partition"], 0);
    assert_eq!(p0["committed"], 1);
    assert_eq!(p0["offset_lag"], 2);
    assert_eq!(p0["status"], "lagging");
    assert_eq!(p0["timestamp_type"], "create_time");
    let time_lag = p0["time_lag_s"].as_f64().expect("a time lag");
    assert!((90.0..600.0).contains(&time_lag), "{time_lag}");
    assert_eq!(parts[1]["offset_lag"], 0);
    assert_eq!(parts[1]["time_lag_s"], 0.0);
    assert!(v["taken_at_ms"].as_i64().is_some_and(|t| t > 0));
}

/// A group that never committed: the report is printed, the error names
/// the group, exit 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_group_exits_4() {
    logs::init();
    let (cluster, topic, _) = setup("cli-group").await;
    let unknown = unique("never-committed");
    let r = run(&base(&cluster, &unknown, &topic)).await;
    assert_eq!(r.code, 4, "{r:#?}");
    assert!(
        r.stdout.contains(&format!("group {unknown}: no_offsets")),
        "{r:#?}"
    );
    assert!(
        r.stderr.contains(&format!(
            "error: group {unknown:?} has no committed offset on the watched topics"
        )),
        "{r:#?}"
    );
}

/// `--demo` (the first thing a newcomer runs) ends cleanly: exit 0, no
/// `error:`, the unknown group shown as a labelled part of the demo, and the
/// partition whose record at the committed offset has no timestamp reads
/// `time_lag_unknown` with an unknown time lag, never `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_ends_cleanly_and_shows_the_unknown_group() {
    logs::init();
    let r = run(&["--demo"]).await;
    assert_eq!(r.code, 0, "{r:#?}");
    assert!(!r.stderr.contains("error:"), "{r:#?}");
    assert!(
        r.stdout
            .contains("demo, the unknown group: group \"demo-unknown\""),
        "{r:#?}"
    );
    let row = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("demo-orders-2 "))
        .unwrap_or_else(|| panic!("no row for demo-orders-2: {r:#?}"));
    assert!(row.ends_with("time_lag_unknown"), "{row}");
    assert!(row.contains(" missing "), "{row}");

    let r = run(&["--demo", "--json"]).await;
    assert_eq!(r.code, 0, "{r:#?}");
    let json = r.json();
    let p2 = &json["groups"][0]["partitions"][2];
    assert_eq!(p2["status"], "time_lag_unknown", "{p2}");
    assert!(p2["time_lag_s"].is_null(), "{p2}");
    assert_eq!(p2["offset_lag"], 15, "{p2}");
}

/// A topic that does not exist: exit 3, the error names it, no report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_topic_exits_3() {
    logs::init();
    let (cluster, _, group) = setup("cli-topic").await;
    let missing = unique("no-such-topic");
    let r = run(&base(&cluster, &group, &missing)).await;
    assert_eq!(r.code, 3, "{r:#?}");
    assert!(
        r.stderr
            .contains(&format!("error: unknown topic `{missing}`")),
        "{r:#?}"
    );
    assert!(!r.stdout.contains("group "), "{r:#?}");
}

/// Nothing listens at the address: exit 2 after the request timeout, the
/// error names the bootstrap servers and gives librdkafka's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_exits_2_within_the_request_timeout() {
    logs::init();
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let bootstrap = format!("127.0.0.1:{port}");
    let r = run(&[
        "--bootstrap",
        &bootstrap,
        "--group",
        "g",
        "--topic",
        "t",
        "--request-timeout",
        "2",
    ])
    .await;
    assert_eq!(r.code, 2, "{r:#?}");
    assert!(
        r.stderr
            .contains(&format!("error: no broker of `{bootstrap}` answered: ")),
        "{r:#?}"
    );
}

/// Malformed configuration or arguments: exit 1, the error (and for bad
/// arguments the usage) on stderr, before any network I/O (the bootstrap
/// address is never contacted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_configuration_exits_1() {
    logs::init();
    let common = ["--bootstrap", "127.0.0.1:1", "--group", "g", "--topic", "t"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--set", "fetch.wait.max.ms=banana"],
            "error: invalid monitor configuration: ",
        ),
        (
            &["--set", "group.id=mine"],
            "error: invalid monitor configuration: ",
        ),
        (
            &["--set", "no-equals-sign"],
            "error: --set: expected key=value",
        ),
        (
            &["--interval", "0"],
            "error: --interval: expected seconds above zero",
        ),
        (
            &["--replicas", "0"],
            "error: --replicas: expected at least 1",
        ),
        (
            &["--frobnicate"],
            "error: unknown argument \"--frobnicate\"",
        ),
    ];
    for (extra, message) in cases {
        let mut args = common.to_vec();
        args.extend_from_slice(extra);
        let r = run(&args).await;
        assert_eq!(r.code, 1, "{extra:?}: {r:#?}");
        assert!(r.stderr.contains(message), "{extra:?}: {r:#?}");
        assert!(!r.stdout.contains("group "), "{extra:?}: {r:#?}");
    }
    // Missing required arguments: the usage, with the exit codes.
    let r = run(&["--group", "g"]).await;
    assert_eq!(r.code, 1, "{r:#?}");
    assert!(
        r.stderr
            .contains("--bootstrap, --group and --topic are required")
    );
    assert!(
        r.stderr
            .contains("exit codes: 0 ok, 1 bad arguments or configuration")
    );
    // --help: the usage, exit 0.
    let r = run(&["--help"]).await;
    assert_eq!(r.code, 0, "{r:#?}");
    assert!(r.stderr.contains("usage: group_monitor"), "{r:#?}");
}
