//! The monitor chapter's scenarios for the KEDA scaler (issue 45), with **real
//! consumer processes** (plain librdkafka consumers: auto commit, the
//! default assignors) and `fresh-monitor --keda-grpc` as a process at its
//! **defaults**, asked the way KEDA asks (`GetMetrics`, `IsActive`) once per
//! monitor cycle:
//! - a steady group keeping up: the scaler holds the running count, never
//!   a step (KEDA's own rule, on the same offsets, jumps with the commit
//!   cycle);
//! - a consumer SIGKILLed under traffic: `dead`, and the time from the kill
//!   to it at the defaults;
//! - a group that commits every 60 s while keeping up, with the monitor
//!   started beside it: never `dead`.
//!
//! Each prints a `SCENARIO | ... |` row: KEDA's rule (`lagThreshold` 10,
//! capped at the partitions) beside the scaler's answers.
//!
//! Apache Kafka only: the embedded broker does not describe groups, and the
//! scaler counts from the members.

mod support;

#[allow(clippy::all, clippy::pedantic, dead_code, missing_docs, unreachable_pub)]
#[rustfmt::skip]
#[path = "keda/externalscaler.rs"]
mod externalscaler;
#[path = "keda/process.rs"]
mod scaler;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::producer::FutureRecord;
use scaler::{Client, Scaler, Summary, kedas_rule, object, scenario_row};
use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, unique};
use support::wait::poll_until;

use externalscaler::ScaledObjectRef;

const WAIT: Duration = Duration::from_secs(120);

/// A plain librdkafka consumer process ([`child::plain_consumer`]). A no-op
/// unless started by a test below.
#[test]
fn plain_consumer() {
    if let Some(target) = child::target() {
        let ms = std::env::var(HANDLER_MS).map_or(0, |v| v.parse().expect("ms"));
        child::plain_consumer(&target, Duration::from_millis(ms));
    }
}

/// The plain consumer's time per record, in ms (default 0).
const HANDLER_MS: &str = "FRESH_CHILD_HANDLER_MS";

/// A topic of `partitions`, a group, `consumers` plain consumer processes
/// with `props`, records produced at `per_second` over all partitions, and
/// the scaler at its defaults. `None` on the embedded broker.
struct Scenario {
    cluster: TestCluster,
    topic: String,
    group: String,
    partitions: u64,
    consumers: Vec<ChildProcess>,
    producing: tokio::task::JoinHandle<()>,
    scaler: Scaler,
    object: ScaledObjectRef,
    keda: Client,
    dir: std::path::PathBuf,
}

impl Scenario {
    async fn start(
        name: &str,
        partitions: i32,
        consumers: usize,
        props: &[(&str, &str)],
        per_second: u32,
    ) -> Option<Scenario> {
        Self::start_with(
            name,
            partitions,
            consumers,
            props,
            per_second,
            async |_: &TestCluster, _: &str| {},
            &[],
        )
        .await
    }

    /// [`start`](Self::start), with `prepare(cluster, topic)` run before the
    /// consumers start and `extra` arguments for the scaler.
    async fn start_with(
        name: &str,
        partitions: i32,
        consumers: usize,
        props: &[(&str, &str)],
        per_second: u32,
        prepare: impl AsyncFnOnce(&TestCluster, &str),
        extra: &[&str],
    ) -> Option<Scenario> {
        support::logs::init();
        let (cluster, topic, group) = TestCluster::with_topic(name, partitions).await;
        if !cluster.is_real() {
            eprintln!("skipped: needs a broker that describes groups (DescribeGroups)");
            return None;
        }
        prepare(&cluster, &topic).await;
        let dir = std::env::temp_dir().join(unique(name));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let consumers = (0..consumers)
            .map(|i| {
                let mut command = child::command("plain_consumer", &cluster, &group, &topic);
                let (handler, props): (Vec<_>, Vec<_>) =
                    props.iter().copied().partition(|(k, _)| *k == HANDLER_MS);
                child::plain_props(&mut command, &props);
                if let Some((_, ms)) = handler.first() {
                    command.env(HANDLER_MS, ms);
                }
                // librdkafka's default session timeout, not the tests' short one.
                command.env("FRESH_CHILD_SESSION_MS", "45000");
                ChildProcess::spawn(format!("{name}-{i}"), &dir, command)
            })
            .collect();
        let producing = {
            let producer = cluster.producer().clone();
            let topic = topic.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                let mut n = 0u64;
                loop {
                    tick.tick().await;
                    for _ in 0..per_second / 10 {
                        let p = (n % partitions as u64) as i32;
                        n += 1;
                        let record = FutureRecord::to(&topic)
                            .partition(p)
                            .key("steady")
                            .payload("steady");
                        // Enqueued, not awaited: the rate is the producer's.
                        let _ = producer.send_result(record);
                    }
                }
            })
        };
        let mut scaler = Scaler::spawn(&cluster, &group, &topic, extra);
        let object = object(name, &group, &topic);
        let keda = scaler.client(&object, WAIT).await;
        Some(Scenario {
            cluster,
            topic,
            group,
            partitions: partitions as u64,
            consumers,
            producing,
            scaler,
            object,
            keda,
            dir,
        })
    }

    /// The next cycle's summary of the group (after `seen` summaries).
    async fn next_cycle(&mut self, seen: &mut usize) -> Summary {
        for c in &mut self.consumers {
            c.assert_running();
        }
        let (scaler, group, at) = (&self.scaler, &self.group, *seen);
        let s = poll_until(WAIT, || scaler.summaries(group).get(at).cloned())
            .await
            .unwrap_or_else(|| panic!("no cycle within {WAIT:?}"));
        *seen += 1;
        s
    }

    /// KEDA's calls for this cycle: `(GetMetrics, IsActive)`.
    async fn ask(&mut self) -> (i64, bool) {
        let replicas = self.keda.replicas(&self.object).await;
        let active = self.keda.is_active(&self.object).await.expect("IsActive");
        (replicas, active)
    }

    async fn stop(mut self) {
        self.producing.abort();
        for c in &mut self.consumers {
            if c.is_running() {
                let _ = c.stop().await;
            }
        }
        let _ = self.scaler.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        drop(self.cluster);
    }
}

fn range(values: impl IntoIterator<Item = u64>) -> String {
    let v: BTreeSet<u64> = values.into_iter().collect();
    match (v.first(), v.last()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}-{b}"),
        _ => "-".into(),
    }
}

/// Two consumers keeping up with 200 records/s on 6 partitions: over 12
/// cycles the scaler holds 2 and the group reads `idle` or `keeping_up`,
/// while KEDA's rule on the same offsets follows where each cycle falls in
/// the 5 s auto-commit cycle. A second monitor process started a few
/// seconds later (another phase of the commit cycle) reads the same mean
/// time lag over its 12 cycles, within half a commit interval: the cycles
/// do not alias with the commits (issue 45, item 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_group_is_never_scaled() {
    let Some(mut s) = Scenario::start("sc-steady", 6, 2, &[], 200).await else {
        return;
    };
    // Settled: both members in, and the backlog of the first seconds gone.
    let mut seen = 0;
    loop {
        let c = s.next_cycle(&mut seen).await;
        if c.members == "2" && (c.diagnosis == "idle" || c.diagnosis == "keeping_up") {
            break;
        }
    }
    let second = Scaler::spawn(&s.cluster, &s.group, &s.topic, &[]);
    let (mut kedas, mut ours, mut diagnoses) = (Vec::new(), Vec::new(), BTreeSet::new());
    let mut lags = Vec::new();
    for _ in 0..12 {
        let c = s.next_cycle(&mut seen).await;
        lags.push(c.time_lag_secs().expect("a time lag under a minute"));
        let (replicas, _) = s.ask().await;
        assert!(
            c.diagnosis == "idle" || c.diagnosis == "keeping_up",
            "a steady group: {}",
            c.line
        );
        assert_eq!(
            replicas, 2,
            "the scaler holds the running count: {}",
            c.line
        );
        kedas.push(kedas_rule(c.lag, s.partitions));
        ours.push(replicas as u64);
        diagnoses.insert(c.diagnosis);
    }
    // The second monitor's first 12 cycles after its first two.
    let other: Vec<f64> = poll_until(WAIT, || {
        let sums = second.summaries(&s.group);
        (sums.len() >= 14).then(|| {
            sums[2..14]
                .iter()
                .map(|c| c.time_lag_secs().expect("a time lag under a minute"))
                .collect()
        })
    })
    .await
    .expect("the second monitor's cycles");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (a, b) = (mean(&lags), mean(&other));
    assert!(
        (a - b).abs() <= 2.5,
        "two monitors on one steady group: mean time lag {a:.2} s ({lags:?}) and {b:.2} s ({other:?})"
    );
    scenario_row(
        "steady: 2 consumers keeping up, 6 partitions, 200 records/s, auto commit 5 s",
        &format!(
            "{} over 12 cycles ({kedas:?})",
            range(kedas.iter().copied())
        ),
        &range(ours),
        &format!(
            "{diagnoses:?}; two monitor processes' mean time lag over 12 cycles: {a:.2} s and {b:.2} s"
        ),
    );
    s.stop().await;
}

/// One consumer SIGKILLed under 30 records/s on 3 partitions: `dead` at the
/// monitor's defaults, timed from the kill; the scaler holds 1 throughout
/// (KEDA's rule climbs to the cap as the lag grows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_under_traffic_is_dead_at_the_defaults() {
    let Some(mut s) = Scenario::start("sc-dead", 3, 1, &[], 30).await else {
        return;
    };
    // Working, as the monitor sees it: a few cycles of a group keeping up.
    let mut seen = 0;
    let mut working = 0;
    while working < 3 {
        let c = s.next_cycle(&mut seen).await;
        if c.members == "1" && (c.diagnosis == "idle" || c.diagnosis == "keeping_up") {
            working += 1;
        }
    }
    let mut victim = s.consumers.remove(0);
    victim.kill();
    let killed = Instant::now();
    let mut asked = Vec::new();
    let dead = loop {
        let c = s.next_cycle(&mut seen).await;
        let (replicas, _) = s.ask().await;
        asked.push(replicas as u64);
        assert!(replicas <= 1, "the scaler asked for {asked:?}: {}", c.line);
        assert_ne!(c.diagnosis, "stuck", "{}", c.line);
        if c.diagnosis == "dead" {
            break c;
        }
        assert!(
            killed.elapsed() < WAIT,
            "not dead within {WAIT:?}: {}",
            c.line
        );
    };
    let after = killed.elapsed();
    scenario_row(
        "dead: 1 consumer SIGKILLed under 30 records/s, 3 partitions",
        &kedas_rule(dead.lag, s.partitions).to_string(),
        &format!("{} (held: dead)", range(asked)),
        &format!("dead {after:.1?} after the kill (members {})", dead.members),
    );
    s.stop().await;
}

/// A consumer keeping up but committing every 60 s
/// (`auto.commit.interval.ms=60000`), the scaler started beside it: for
/// 150 s (two and a half of its commit intervals) never `dead`, and the
/// scaler holds 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_committing_every_minute_is_never_dead() {
    let Some(mut s) = Scenario::start(
        "sc-slow-commit",
        3,
        1,
        &[("auto.commit.interval.ms", "60000")],
        20,
    )
    .await
    else {
        return;
    };
    let started = Instant::now();
    let mut seen = 0;
    let (mut kedas, mut ours, mut diagnoses) = (Vec::new(), Vec::new(), BTreeSet::new());
    while started.elapsed() < Duration::from_secs(150) {
        let c = s.next_cycle(&mut seen).await;
        assert_ne!(
            c.diagnosis,
            "dead",
            "{:?} in: {}",
            started.elapsed(),
            c.line
        );
        if c.members != "1" {
            continue;
        }
        let (replicas, _) = s.ask().await;
        assert!(replicas <= 1, "{}", c.line);
        kedas.push(kedas_rule(c.lag, s.partitions));
        ours.push(replicas as u64);
        diagnoses.insert(c.diagnosis);
    }
    scenario_row(
        "a group committing every 60 s, keeping up (20 records/s, 3 partitions), the monitor started beside it",
        &range(kedas),
        &range(ours),
        &format!("{diagnoses:?} over 150 s; never dead"),
    );
    s.stop().await;
}

/// A group reading one topic (3 partitions) of the two the scaler watches
/// (the other has 6, produced to and read by nobody): one consumer at 20 ms
/// a record against 150 records/s and a backlog stamped 90 s ago is
/// `consumer_bound`, and the scaler asks for at most 3 replicas, the
/// partitions of the topic it reads (it was told to scale to 4 on a
/// 3-partition topic, the other topic's partitions and production added
/// in). A trigger naming the other topic is `NOT_FOUND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_scaled_on_the_topic_it_reads() {
    let other = unique("sc-other");
    let prepare = async |cluster: &TestCluster, topic: &str| {
        cluster.create_topic(&other, 6).await;
        cluster.produce_many(&other, 6, 500).await;
        let old = support::kafka::now_ms() - 90_000;
        let mut pending = Vec::new();
        for p in 0..3 {
            for i in 0..3_000 {
                let key = format!("k{i}");
                pending.push(
                    cluster.enqueue(
                        FutureRecord::to(topic)
                            .partition(p)
                            .key(&key)
                            .payload("backlog")
                            .timestamp(old),
                    ),
                );
            }
        }
        support::kafka::acked(pending).await;
    };
    let Some(mut s) = Scenario::start_with(
        "sc-two-topics",
        3,
        1,
        &[(HANDLER_MS, "20")],
        150,
        prepare,
        &["--topic", &other],
    )
    .await
    else {
        return;
    };
    let mut seen = 0;
    let mut asked = Vec::new();
    let mut kedas = Vec::new();
    let bound = loop {
        let c = s.next_cycle(&mut seen).await;
        let (replicas, _) = s.ask().await;
        asked.push(replicas as u64);
        kedas.push(kedas_rule(c.lag, s.partitions));
        assert!(replicas <= 3, "asked {asked:?}: {}", c.line);
        if replicas > 1 {
            break c;
        }
        assert!(seen < 40, "never scaled up: {asked:?}: {}", c.line);
    };
    assert_eq!(asked.last(), Some(&3), "{}", bound.line);
    let wrong = object("sc-two-topics-other", &s.group, &other);
    let e = s
        .keda
        .0
        .get_metric_spec(wrong)
        .await
        .expect_err("the other topic");
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    scenario_row(
        "two topics watched, the group reads one (3 partitions; the other 6), consumer-bound",
        &range(kedas),
        &format!("{asked:?}"),
        &format!(
            "{}; a trigger naming the other topic: NOT_FOUND",
            bound.diagnosis
        ),
    );
    s.stop().await;
}
