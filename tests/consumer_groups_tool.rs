//! The group monitor against Kafka's own tool: for the same group at the
//! same moment, the committed offset, log end and offset lag per partition
//! the monitor reports equal what `kafka-consumer-groups.sh --describe`
//! prints (`org.apache.kafka.tools.consumer.group.ConsumerGroupCommand`,
//! run from the `kafka-tools` jar through `.ci/kafka tool`), and the member
//! count equals what `--describe --members` lists.
//!
//! Real cluster only: the tool describes a group through DescribeGroups,
//! which the mock broker does not implement. Needs Java 17 and Maven
//! (`.ci/kafka` resolves the tool's jars with them).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fresh_consumer::Record;
use fresh_consumer::monitor::{GroupMonitor, MonitorReport};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::run;

/// One row of `--describe`: (committed, log end, lag); `None` where the
/// tool prints `-`.
type Row = (Option<i64>, Option<i64>, Option<i64>);

/// Runs `ConsumerGroupCommand` with `args` through `.ci/kafka tool`;
/// returns its standard output.
fn consumer_groups(cluster: &TestCluster, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/kafka");
    let out = Command::new("bash")
        .arg(script)
        .arg("tool")
        .arg("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
        .args(["--bootstrap-server", cluster.bootstrap()])
        .args(args)
        .output()
        .expect("run .ci/kafka tool");
    assert!(
        out.status.success(),
        "kafka-consumer-groups {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `--describe --group G`'s table for `topic`, by partition.
fn describe(cluster: &TestCluster, group: &str, topic: &str) -> BTreeMap<i32, Row> {
    let text = consumer_groups(cluster, &["--describe", "--group", group]);
    let field = |s: &str| (s != "-").then(|| s.parse::<i64>().expect(s));
    let rows: BTreeMap<i32, Row> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 6 && f[0] == group && f[1] == topic)
        .map(|f| {
            let partition = f[2].parse().expect("partition");
            (partition, (field(f[3]), field(f[4]), field(f[5])))
        })
        .collect();
    assert!(!rows.is_empty(), "no rows for {topic} in:\n{text}");
    rows
}

/// The members `--describe --members --group G` lists.
fn members(cluster: &TestCluster, group: &str) -> usize {
    let text = consumer_groups(cluster, &["--describe", "--members", "--group", group]);
    text.lines()
        .filter(|l| l.split_whitespace().next() == Some(group))
        .count()
}

/// The monitor's view of the same partitions, as the tool prints them.
fn monitor_rows(report: &MonitorReport, topic: &str) -> BTreeMap<i32, Row> {
    report.groups[0]
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .map(|p| {
            let lag = p.offset_lag.map(|l| l as i64);
            (p.partition, (p.committed, Some(p.high_watermark), lag))
        })
        .collect()
}

fn monitor(cluster: &TestCluster, group: &str, topic: &str) -> GroupMonitor {
    GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(group)
        .topics([topic])
        .request_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_agrees_with_kafka_consumer_groups_describe() {
    logs::init();
    let cluster = TestCluster::start();
    if !cluster.is_real() {
        eprintln!(
            "skipped: needs a real cluster (Kafka's ConsumerGroupCommand describes groups through DescribeGroups, which the mock does not implement)"
        );
        return;
    }
    let topic = cluster.topic("cgtool", 3).await;
    let group = unique("g-cgtool");
    for (p, n) in [(0, 10), (1, 20), (2, 5)] {
        cluster.produce_bulk(&topic, p, n, 100).await;
    }

    // 1. A group without members: offsets committed from outside, one
    //    partition behind by 6, one caught up, one never read (the tool
    //    lists only partitions with a committed offset for an empty group).
    cluster.commit_offset(&group, &topic, 0, 4).await;
    cluster.commit_offset(&group, &topic, 1, 20).await;
    let mut m = monitor(&cluster, &group, &topic)
        .connect()
        .await
        .expect("monitor connect");
    let report = m.cycle().await.expect("cycle");
    let tool = describe(&cluster, &group, &topic);
    let ours = monitor_rows(&report, &topic);
    println!("empty group: monitor {ours:?}, kafka-consumer-groups {tool:?}");
    assert_eq!(
        tool,
        BTreeMap::from([
            (0, (Some(4), Some(10), Some(6))),
            (1, (Some(20), Some(20), Some(0))),
        ])
    );
    for (p, row) in &tool {
        assert_eq!(ours.get(p), Some(row), "partition {p}");
    }
    assert_eq!(ours[&2], (None, Some(5), None), "never committed");
    assert_eq!(report.groups[0].members, Some(0));
    assert_eq!(members(&cluster, &group), 0);

    // 2. A live member that has read everything: every partition listed by
    //    both with lag 0, and the member count the monitor's replica
    //    suggestion starts from is the one the tool lists.
    let consumer = run::start(cluster.consumer(&group, &topic, |_r: Record| async {
        Ok::<(), std::io::Error>(())
    }));
    cluster.wait_committed(&group, &topic, &[10, 20, 5]).await;
    // The monitor's cycle and the tool's two runs are moments apart; the
    // member's state settles (join, first commits) within the deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    let agreed = loop {
        let report = m.cycle().await.expect("cycle");
        let tool = describe(&cluster, &group, &topic);
        let ours = monitor_rows(&report, &topic);
        let n = members(&cluster, &group);
        if tool == ours && report.groups[0].members == Some(n as u32) {
            break Some((ours, n));
        }
        assert!(
            Instant::now() < deadline,
            "no agreement: monitor {ours:?} with {:?} members, kafka-consumer-groups {tool:?} with {n}",
            report.groups[0].members
        );
    };
    let (ours, n) = agreed.expect("agreed");
    println!("live member: {ours:?}, {n} member(s)");
    assert_eq!(n, 1);
    assert!(ours.values().all(|(_, _, lag)| *lag == Some(0)), "{ours:?}");
    consumer.stop().await;
}
