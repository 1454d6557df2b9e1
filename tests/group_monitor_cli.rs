//! The group monitor's binary, `fresh-monitor` (`src/bin/fresh-monitor/`,
//! `cargo install fresh-consumer --features cli`), as a user runs it: a
//! process of its own, its standard output, standard error and exit code,
//! for each documented outcome:
//!
//! | run | exit code | output |
//! |---|---|---|
//! | a report, printed once as a table | 0 | the table on stdout |
//! | the same with `--json` | 0 | one JSON object on stdout |
//! | `--demo` | 0 | the demo's report, its unknown group in a labelled section |
//! | a named group without committed offsets (unknown group) | 4 | the report, and the error on stderr |
//! | an unknown topic | 3 | the error on stderr |
//! | no broker answers (bounded by `--request-timeout`) | 2 | the error on stderr |
//! | `--include` on a real cluster / on the mock broker (no ListGroups) | 0 / 5 | the discovered groups / the error |
//! | a pattern that matches no group with committed offsets | 4 | the error on stderr |
//! | malformed configuration or arguments, an invalid pattern | 1 | the error and the exit codes on stderr |
//! | `--help` | 0 | every flag with its default, and the exit codes |
//!
//! (5, a cycle that fails after the monitor connected, needs a broker to go
//! away between two requests of one run; the library's test
//! `bad_input_is_a_typed_error_or_a_documented_status` covers the error
//! itself.)
//!
//! The binary needs the `cli` feature, which `cargo test` does not enable:
//! these tests run the binary Cargo built beside this test binary
//! (`cargo build --features cli --bin fresh-monitor` first, as `.ci/run`
//! does), or the one Cargo names when the tests are built with
//! `--features cli`. Without it each test says so and passes, except under
//! `CI=true`, where it fails.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::kafka::{TestCluster, now_ms, unique};
use support::logs;

/// How long one run of the tool may take at most (a deadline, not a
/// measurement: the slowest run, the unreachable broker, is bounded by its
/// `--request-timeout 2`).
const DEADLINE: Duration = Duration::from_secs(60);

/// What a run of the tool left behind.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The JSON object the tool printed (its first line starting with `{`).
    fn json(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON in {self:#?}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }
}

/// Runs the tool at `bin` with `args` in a child process, within
/// [`DEADLINE`].
async fn run_at(bin: &PathBuf, args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(bin);
    command
        .args(args)
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let out = tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("fresh-monitor {args:?} ran longer than {DEADLINE:?}"))
        .expect("run the tool");
    let run = Run {
        code: out.status.code().expect("exited (not killed by a signal)"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    println!(
        "fresh-monitor {args:?}: exit {} after {:?}",
        run.code,
        started.elapsed()
    );
    run
}

/// Runs the tool with `args`.
async fn run(args: &[&str]) -> Run {
    run_at(&support::monitor_binary(), args).await
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
    let bin = support::monitor_binary();
    let (cluster, topic, group) = setup("cli-report").await;

    let table = run_at(&bin, &base(&cluster, &group, &topic)).await;
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
    let json = run_at(&bin, &args).await;
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
    let bin = support::monitor_binary();
    let (cluster, topic, _) = setup("cli-group").await;
    let unknown = unique("never-committed");
    let r = run_at(&bin, &base(&cluster, &unknown, &topic)).await;
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

/// `--include`: on a real cluster, the groups under the pattern with
/// committed offsets are reported (exit 0), a pattern that matches nothing
/// exits 4 with the reason; on the mock broker, which has no ListGroups,
/// the cycle fails: exit 5, the error names the operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_groups_are_reported() {
    logs::init();
    let bin = support::monitor_binary();
    let (cluster, topic, group) = setup("cli-disc").await;
    let pattern = format!("^{group}$");
    let args = [
        "--bootstrap",
        cluster.bootstrap(),
        "--topic",
        &topic,
        "--include",
        &pattern,
        "--samples",
        "1",
        "--json",
    ];
    let r = run_at(&bin, &args).await;
    if !cluster.is_real() {
        assert_eq!(r.code, 5, "{r:#?}");
        assert!(r.stderr.contains("kafka list groups failed"), "{r:#?}");
        return;
    }
    assert_eq!(r.code, 0, "{r:#?}");
    let v = r.json();
    let groups = v["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "{v}");
    assert_eq!(groups[0]["group"], group.as_str());

    let r = run_at(
        &bin,
        &[
            "--bootstrap",
            cluster.bootstrap(),
            "--topic",
            &topic,
            "--include",
            "^no-group-has-this-name$",
            "--samples",
            "1",
        ],
    )
    .await;
    assert_eq!(r.code, 4, "{r:#?}");
    assert!(r.stderr.contains("error: no listed group"), "{r:#?}");
}

/// A topic that does not exist: exit 3, the error names it, no report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_topic_exits_3() {
    logs::init();
    let bin = support::monitor_binary();
    let (cluster, _, group) = setup("cli-topic").await;
    let missing = unique("no-such-topic");
    let r = run_at(&bin, &base(&cluster, &group, &missing)).await;
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

/// Malformed configuration or arguments: exit 1, the error and the exit
/// codes on stderr, before any network I/O (the bootstrap address is never
/// contacted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_configuration_exits_1() {
    logs::init();
    let bin = support::monitor_binary();
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
        (&["--set", "no-equals-sign"], "expected key=value"),
        (&["--interval", "0"], "expected seconds above zero"),
        (&["--window", "-3"], "-3"),
        (&["--window=-3"], "expected seconds above zero"),
        (&["--replicas", "0"], "--replicas"),
        (&["--skew-share", "1.5"], "skew_share"),
        (&["--frobnicate"], "--frobnicate"),
        (&["--json", "--serve"], "--serve"),
        (&["--include", "("], "regex parse error"),
        (&["--max-groups", "0"], "--max-groups"),
    ];
    for (extra, message) in cases {
        let mut args = common.to_vec();
        args.extend_from_slice(extra);
        let r = run_at(&bin, &args).await;
        assert_eq!(r.code, 1, "{extra:?}: {r:#?}");
        assert!(r.stderr.contains(message), "{extra:?}: {r:#?}");
        assert!(r.stderr.contains("error"), "{extra:?}: {r:#?}");
        assert!(!r.stdout.contains("group "), "{extra:?}: {r:#?}");
    }
    // Missing required arguments: what is missing, and the exit codes.
    let r = run_at(&bin, &["--group", "g"]).await;
    assert_eq!(r.code, 1, "{r:#?}");
    assert!(r.stderr.contains("--bootstrap"), "{r:#?}");
    assert!(r.stderr.contains("--topic"), "{r:#?}");
    assert!(
        r.stderr
            .contains("exit codes: 0 ok, 1 bad arguments or configuration"),
        "{r:#?}"
    );
}

/// Two watched topics and a group that commits on one of them (issue 45,
/// item 3): the group is judged on that topic only, so its partitions, its
/// lag and its replica cap are that topic's, not the sum of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_judged_on_the_topics_it_reads() {
    logs::init();
    let bin = support::monitor_binary();
    let (cluster, read, group) = TestCluster::with_topic("cli-read", 3).await;
    let unread = cluster.topic("cli-unread", 6).await;
    cluster.produce_many(&read, 3, 5).await;
    cluster.produce_many(&unread, 6, 5).await;
    for p in 0..3 {
        cluster.commit_offset(&group, &read, p, 4).await;
    }
    let r = run_at(
        &bin,
        &[
            "--bootstrap",
            cluster.bootstrap(),
            "--group",
            &group,
            "--topic",
            &read,
            "--topic",
            &unread,
            "--samples",
            "2",
            "--interval",
            "0.2",
            "--json",
        ],
    )
    .await;
    assert_eq!(r.code, 0, "{r:#?}");
    let json = r.json();
    let g = &json["groups"][0];
    let topics: Vec<&str> = g["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p["topic"].as_str().expect("topic"))
        .collect();
    assert_eq!(topics, [read.as_str(); 3], "{g:#}");
    assert_eq!(g["total_lag"], 3, "{g:#}");
}

/// `--help`: exit 0, every flag with its default (or what leaving it out
/// means), and the exit codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_every_flag_with_its_default() {
    let r = run(&["--help"]).await;
    assert_eq!(r.code, 0, "{r:#?}");
    let help = &r.stdout;
    for (flag, default) in [
        ("--bootstrap", "Required unless --demo"),
        ("--group", "Required unless --demo"),
        ("--topic", "Required unless --demo"),
        ("--set", "Default: none"),
        ("--json", "Default: a table"),
        ("--serve", "Default: print one report and exit"),
        ("--interval", "[default: 5]"),
        ("--samples", "[default: 2]"),
        ("--window", "[default: 60]"),
        ("--stall-after", "[default: 30]"),
        ("--lag-threshold", "[default: 60]"),
        ("--drain-target", "[default: 600]"),
        ("--skew-share", "[default: 0.75]"),
        ("--replicas", "Default: none"),
        ("--read-uncommitted", "Default: to the last stable"),
        ("--request-timeout", "[default: 10]"),
        ("--read-timeout", "[default: 5]"),
        ("--discover", "Default: off"),
        ("--include", "Default: every group"),
        ("--exclude", "Default: none excluded"),
        ("--max-groups", "[default: 100]"),
        ("--max-partitions", "[default: 10000]"),
        ("--demo", "embedded broker"),
    ] {
        let at = help
            .find(&format!("      {flag} "))
            .or_else(|| help.find(&format!("      {flag}\n")))
            .unwrap_or_else(|| panic!("{flag} not in --help: {help}"));
        // The flag's entry runs to the next blank-line-separated flag.
        let entry = &help[at..];
        let end = entry[2..].find("\n      --").map_or(entry.len(), |e| e + 2);
        assert!(
            entry[..end].contains(default),
            "{flag}: {default:?} not in {:?}",
            &entry[..end]
        );
    }
    assert!(help.contains(
        "exit codes: 0 ok, 1 bad arguments or configuration, 2 broker unreachable, 3 unknown topic"
    ));
}
