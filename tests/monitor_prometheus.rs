//! `fresh-monitor --prometheus ADDR`: the scrape endpoint serves the
//! monitor's gauges under the names the shipped rules and dashboard use
//! (`deploy/prometheus/`), with their labels; a port in use is a clear error
//! (exit 1).
//!
//! Runs the binary as a process, like `tests/group_monitor_cli.rs` (which
//! says how it is found; without it the tests skip, and fail under
//! `CI=true`). On the embedded broker and on a real cluster.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::kafka::{TestCluster, now_ms};
use support::logs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEADLINE: Duration = Duration::from_secs(60);

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// What Prometheus 2.x/3.x sends as `Accept` on a scrape.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET /metrics` on `port` as Prometheus asks (OpenMetrics): the body, or
/// `None` while nothing answers.
async fn scrape(port: u16) -> Option<String> {
    scrape_as(
        port,
        Some(PROMETHEUS_ACCEPT),
        "application/openmetrics-text",
    )
    .await
}

/// `GET /metrics` on `port` with `accept` (none: no header, as curl and
/// promtool's users send); asserts the response's content type starts with
/// `content_type`.
async fn scrape_as(port: u16, accept: Option<&str>, content_type: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\n{accept}Connection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {content_type}")),
        "{head}"
    );
    Some(body.to_owned())
}

/// `promtool check metrics` on `body` (the classic text format), when
/// promtool is installed (`.ci/install-deps` installs it; a failure under
/// `CI=true` without it).
fn promtool_check(body: &str) {
    use std::io::Write as _;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "promtool not found ({e}): bash .ci/install-deps installs it"
            );
            eprintln!("skipped promtool check metrics: {e}");
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {out:?}\n{body}"
    );
}

/// Every `fresh_consumer_monitor_*` name the rules, their tests and the
/// dashboard use.
fn names_in_deploy() -> BTreeSet<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus");
    let mut texts = Vec::new();
    for d in [dir.clone(), dir.join("tests")] {
        for e in std::fs::read_dir(&d).expect("deploy/prometheus") {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yml" || x == "py") {
                texts.push(std::fs::read_to_string(p).unwrap());
            }
        }
    }
    let mut names = BTreeSet::new();
    for t in texts {
        let mut rest = t.as_str();
        while let Some(at) = rest.find("fresh_consumer_monitor_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.insert(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    names
}

/// Metric name -> label sets of its samples, from an exposition.
fn samples(body: &str) -> Vec<(String, String)> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let name_end = l.find(['{', ' ']).unwrap_or(l.len());
            let labels = l[name_end..]
                .strip_prefix('{')
                .and_then(|r| r.split_once('}'))
                .map_or("", |(labels, _)| labels);
            (l[..name_end].to_owned(), labels.to_owned())
        })
        .collect()
}

/// A consumer-bound group (both partitions behind by records stamped two
/// minutes ago, commits advancing one record per cycle, `--replicas 1`),
/// scraped until every monitor metric the scenario can show is served: all
/// the names the rules and the dashboard use except the retention time
/// left (`..._retention_eta_seconds`, served only while retention gains on
/// a committed offset; its name comes from the same translation, checked
/// by the binary's unit test), each with the partition or group labels the
/// rules aggregate by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_endpoint_serves_the_rules_names() {
    logs::init();
    let bin = support::monitor_binary();
    let (cluster, topic, group) = TestCluster::with_topic("mon-prom", 2).await;
    let old = now_ms() - 120_000;
    for p in 0..2 {
        for i in 0..40 {
            cluster
                .produce(&topic, p, "k", &format!("v{i}"), Some(old))
                .await;
        }
        cluster.commit_offset(&group, &topic, p, 5).await;
    }
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(&bin)
        .args([
            "--bootstrap",
            cluster.bootstrap(),
            "--group",
            &group,
            "--topic",
            &topic,
            "--prometheus",
            &addr,
            "--interval",
            "0.3",
            "--window",
            "3",
            "--stall-after",
            "30",
            "--lag-threshold",
            "1",
            "--replicas",
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start fresh-monitor");

    let wanted: BTreeSet<String> = names_in_deploy()
        .into_iter()
        .filter(|n| n != "fresh_consumer_monitor_retention_eta_seconds")
        .collect();
    assert!(wanted.len() >= 8, "{wanted:?}");
    let started = Instant::now();
    let mut committed = 5;
    let body = loop {
        assert!(
            started.elapsed() < DEADLINE,
            "not every name served within {DEADLINE:?}"
        );
        assert!(child.try_wait().unwrap().is_none(), "fresh-monitor exited");
        committed += 1;
        for p in 0..2 {
            cluster.commit_offset(&group, &topic, p, committed).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let Some(body) = scrape(port).await else {
            continue;
        };
        let served: BTreeSet<String> = samples(&body).into_iter().map(|(n, _)| n).collect();
        if wanted.iter().all(|n| served.contains(n)) {
            break body;
        }
    };
    println!("every name served after {:?}:\n{body}", started.elapsed());
    for (name, labels) in samples(&body) {
        if !name.starts_with("fresh_consumer_monitor_") {
            continue;
        }
        assert!(
            labels.contains("messaging_system=\"kafka\""),
            "{name}{{{labels}}}"
        );
        let per_partition = [
            "fresh_consumer_monitor_lag",
            "fresh_consumer_monitor_time_lag_seconds",
            "fresh_consumer_monitor_commit_age_seconds",
            "fresh_consumer_monitor_retention_margin",
            "fresh_consumer_monitor_partition_status_ratio",
        ];
        if per_partition.contains(&name.as_str()) {
            for label in [
                "messaging_destination_name=",
                "messaging_destination_partition_id=",
                "messaging_consumer_group_name=",
            ] {
                assert!(labels.contains(label), "{name}{{{labels}}}: {label}");
            }
        }
    }
    // (Label order follows the attribute set's, which varies.)
    let diagnosis = body
        .lines()
        .find(|l| {
            l.starts_with("fresh_consumer_monitor_group_diagnosis_ratio{")
                && l.contains(&format!("messaging_consumer_group_name=\"{group}\""))
                && l.contains("fresh_consumer_diagnosis=\"consumer_bound\"")
        })
        .unwrap_or_else(|| panic!("no consumer_bound point: {body}"));
    assert!(diagnosis.ends_with(" 1.0"), "{diagnosis}");
    check_sample(&body, &group, &topic);
    assert!(
        body.contains("fresh_consumer_monitor_cycles_total{"),
        "{body}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");

    // Without an `Accept` header: the classic text format, which promtool
    // lints (every counter's help under its `_total` name).
    let plain = scrape_as(port, None, "text/plain; version=0.0.4")
        .await
        .expect("a classic scrape");
    assert!(!plain.contains("# EOF"), "{plain}");
    assert!(
        plain.contains("# TYPE fresh_consumer_monitor_cycles_total counter"),
        "{plain}"
    );
    promtool_check(&plain);

    // Stopped by SIGTERM: exits 0.
    let pid = child.id().expect("pid") as i32;
    unsafe_kill(pid);
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The scraped sample the promtool step runs the shipped rules on
/// (`deploy/prometheus/tests/monitor-scrape.prom`, turned into
/// `monitor-scrape.test.yml` by `deploy/prometheus/scrape_test.py`).
const SAMPLE: &str = "deploy/prometheus/tests/monitor-scrape.prom";

/// (name, label names) of each series of an exposition.
fn shape(body: &str) -> BTreeSet<(String, Vec<String>)> {
    samples(body)
        .into_iter()
        .map(|(name, labels)| {
            let mut keys: Vec<String> = labels
                .split("\",")
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_owned()))
                .collect();
            keys.sort();
            (name, keys)
        })
        .collect()
}

/// The committed sample has the shape of this scrape (the same names with
/// the same label names): it cannot go stale. With
/// `FRESH_MONITOR_WRITE_SCRAPE=1` the scrape replaces it instead (group and
/// topic renamed `billing` and `payments`); then run
/// `python3 deploy/prometheus/scrape_test.py`.
fn check_sample(body: &str, group: &str, topic: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(SAMPLE);
    if std::env::var("FRESH_MONITOR_WRITE_SCRAPE").as_deref() == Ok("1") {
        let text = body.replace(group, "billing").replace(topic, "payments");
        std::fs::write(&path, text).expect("write the sample");
        return;
    }
    let committed = std::fs::read_to_string(&path).expect("the committed sample");
    assert_eq!(
        shape(&committed),
        shape(body),
        "{SAMPLE} is stale: rerun this test with FRESH_MONITOR_WRITE_SCRAPE=1, then python3 deploy/prometheus/scrape_test.py"
    );
}

/// SIGTERM to `pid` through `kill(1)`.
fn unsafe_kill(pid: i32) {
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok);
}

/// The scrape address is taken: exit 1 at once, the error names the
/// address, before any broker is contacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_port_in_use_exits_1() {
    let bin = support::monitor_binary();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(&bin)
            .args([
                "--bootstrap",
                "127.0.0.1:1",
                "--group",
                "g",
                "--topic",
                "t",
                "--prometheus",
                &addr,
            ])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("exits")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("error: --prometheus {addr}: cannot listen: ")),
        "{stderr}"
    );
}
