//! The three-node Apache Kafka cluster of the `tests/cluster_*.rs` tests:
//! the one `.ci/kafka start --nodes 3` started, named by `KAFKA_NODES=3`,
//! `KAFKA_DIR` and `FRESH_CONSUMER_TEST_BOOTSTRAP` (all three addresses).
//! Without it the tests print [`SKIP`] and pass.
//!
//! What the failover tests share: the cluster's `.ci/kafka` verbs (kill,
//! resume, leader, coordinators, wait for full ISR), topics with
//! replication factor 3, an `acks=all` producer that keeps every
//! acknowledged offset ([`Flow`]), a handler log with when each record was
//! first handled ([`Handled`]), a sampler of the group's committed offsets
//! from outside ([`Sampler`]), and a `read_committed` reader.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::Record;
use fresh_consumer::metrics::{
    CLIENT_OPERATION_DURATION, ERROR_TYPE, MESSAGING_CONSUMER_GROUP_NAME, MESSAGING_OPERATION_NAME,
};
use fresh_consumer::testing::TestMetrics;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::kafka::{BOOTSTRAP_ENV, TestCluster, unique};

/// What a cluster test prints when there is no three-node cluster.
pub const SKIP: &str = "skipped: needs a three-node cluster from `.ci/kafka start --nodes 3`";

/// The three-node cluster, and the test kit's [`TestCluster`] on it.
pub struct Cluster3 {
    pub kafka: TestCluster,
    dir: PathBuf,
}

impl Cluster3 {
    /// The cluster the environment names, or `None` after printing
    /// [`SKIP`].
    pub fn from_env() -> Option<Cluster3> {
        let nodes = std::env::var("KAFKA_NODES").ok();
        let dir = std::env::var_os("KAFKA_DIR").map(PathBuf::from);
        let bootstrap = std::env::var(BOOTSTRAP_ENV).ok();
        match (nodes.as_deref(), dir, bootstrap) {
            (Some("3"), Some(dir), Some(_)) if dir.join("nodes").exists() => Some(Cluster3 {
                kafka: TestCluster::start(),
                dir,
            }),
            _ => {
                eprintln!("{SKIP}");
                None
            }
        }
    }

    pub fn bootstrap(&self) -> &str {
        self.kafka.bootstrap()
    }

    /// Runs `.ci/kafka VERB DIR ARGS...` (blocking) and returns its
    /// stdout, trimmed; panics with its stderr when it fails. Its stderr
    /// (timings) is passed on.
    pub fn ci(&self, verb: &str, args: &[&str]) -> String {
        ci_kafka(&self.dir, verb, args)
    }

    async fn ci_async(&self, verb: &str, args: &[&str]) -> String {
        let dir = self.dir.clone();
        let verb = verb.to_owned();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ci_kafka(&dir, &verb, &args)
        })
        .await
        .expect(".ci/kafka task")
    }

    /// The node id that leads `topic`/`partition` (in the metadata now).
    pub async fn leader(&self, topic: &str, partition: i32) -> i32 {
        let p = partition.to_string();
        parse_id(&self.ci_async("leader", &[topic, &p]).await)
    }

    /// The leader of `topic`/`partition`, `None` while the metadata names
    /// none or cannot be read (a node is down).
    pub async fn try_leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let dir = self.dir.clone();
        let (topic, p) = (topic.to_owned(), partition.to_string());
        tokio::task::spawn_blocking(move || {
            let out = ci_command(&dir, "leader", &[&topic, &p]).output().ok()?;
            if !out.status.success() {
                return None;
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        })
        .await
        .expect(".ci/kafka task")
    }

    /// The in-sync replicas of `topic`/`partition`, as `.ci/kafka isr`
    /// prints them (`1,2,3`).
    pub async fn isr(&self, topic: &str, partition: i32) -> String {
        let p = partition.to_string();
        self.ci_async("isr", &[topic, &p]).await
    }

    /// The node id of `group`'s coordinator (the group must exist).
    pub async fn group_coordinator(&self, group: &str) -> i32 {
        parse_id(&self.ci_async("group-coordinator", &[group]).await)
    }

    /// The node id of `transactional_id`'s transaction coordinator.
    pub async fn txn_coordinator(&self, transactional_id: &str) -> i32 {
        parse_id(&self.ci_async("txn-coordinator", &[transactional_id]).await)
    }

    /// `kill -9` of node `node` (its log directory is kept).
    pub async fn kill(&self, node: i32) {
        self.ci_async("kill", &[&node.to_string()]).await;
    }

    /// Starts node `node` again and waits until the cluster lists 3
    /// brokers.
    pub async fn resume(&self, node: i32) {
        self.ci_async("resume", &[&node.to_string()]).await;
    }

    /// Waits until every partition of `topics` (of every topic when empty)
    /// has a leader and 3 in-sync replicas.
    pub async fn wait_isr(&self, topics: &[&str]) {
        self.ci_async("wait-isr", topics).await;
    }

    /// SIGSTOP to node `node`: it stays alive but stops answering (the
    /// controller fences it, and it leaves every ISR, after 3 s).
    pub async fn pause(&self, node: i32) {
        self.ci_async("pause", &[&node.to_string()]).await;
    }

    /// SIGCONT to node `node`.
    pub async fn unpause(&self, node: i32) {
        self.ci_async("unpause", &[&node.to_string()]).await;
    }

    /// An unclean leader election for `topic`/`partition` (ElectLeaders
    /// UNCLEAN).
    pub async fn elect_unclean(&self, topic: &str, partition: i32) -> String {
        let p = partition.to_string();
        self.ci_async("elect-unclean", &[topic, &p]).await
    }

    /// Sets topic configs (IncrementalAlterConfigs is not in rdkafka:
    /// AlterConfigs, which replaces the topic's configs, so `configs` must
    /// hold every config the topic keeps).
    pub async fn set_topic_configs(&self, topic: &str, configs: &[(&str, &str)]) {
        use rdkafka::admin::{AlterConfig, ResourceSpecifier};
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()
            .expect("admin client");
        let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
        for (k, v) in configs {
            alter = alter.set(k, v);
        }
        for r in admin
            .alter_configs([&alter], &AdminOptions::new())
            .await
            .expect("alter configs")
        {
            r.expect("topic configs set");
        }
    }

    /// A guard that, when dropped (the test ended or panicked), starts any
    /// node that is not running and waits for full ISR, so that the next
    /// test finds a whole cluster.
    pub fn revive_on_drop(&self) -> Revive {
        Revive(self.dir.clone())
    }

    /// Creates a topic `{prefix}-…` of `partitions` partitions with 3
    /// replicas (`retention.ms=-1`, and `configs`), and waits until all of
    /// its replicas are in sync.
    pub async fn topic(&self, prefix: &str, partitions: i32, configs: &[(&str, &str)]) -> String {
        self.create(prefix, TopicReplication::Fixed(3), partitions, configs)
            .await
    }

    /// Creates a topic `{prefix}-…` of one partition whose replicas are
    /// the nodes `replicas` (the first one its preferred leader), with
    /// `retention.ms=-1` and `configs`, and waits until they are in sync.
    pub async fn topic_on(
        &self,
        prefix: &str,
        replicas: &[i32],
        configs: &[(&str, &str)],
    ) -> String {
        self.create(prefix, TopicReplication::Variable(&[replicas]), 1, configs)
            .await
    }

    async fn create(
        &self,
        prefix: &str,
        replication: TopicReplication<'_>,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> String {
        let name = unique(prefix);
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()
            .expect("admin client");
        let mut t = NewTopic::new(&name, partitions, replication).set("retention.ms", "-1");
        for (k, v) in configs {
            t = t.set(k, v);
        }
        for r in admin
            .create_topics([&t], &AdminOptions::new())
            .await
            .expect("create topic")
        {
            r.expect("topic created");
        }
        self.wait_isr(&[&name]).await;
        name
    }
}

fn parse_id(s: &str) -> i32 {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a node id: {s:?}"))
}

fn ci_command(dir: &Path, verb: &str, args: &[&str]) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/kafka");
    let mut c = Command::new("bash");
    c.arg(script).arg(verb).arg(dir).args(args);
    c
}

fn ci_kafka(dir: &Path, verb: &str, args: &[&str]) -> String {
    let out = ci_command(dir, verb, args).output().expect("run .ci/kafka");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        ".ci/kafka {verb} {args:?} failed: {stderr}"
    );
    eprint!("{stderr}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Starts every stopped node of the cluster again when dropped, and waits
/// for full ISR (see [`Cluster3::revive_on_drop`]).
pub struct Revive(PathBuf);

impl Drop for Revive {
    fn drop(&mut self) {
        for node in 1..=3 {
            let d = self.0.join(format!("node-{node}"));
            let running = std::fs::read_to_string(d.join("pid"))
                .ok()
                .and_then(|pid| {
                    std::fs::read_to_string(format!("/proc/{}/cmdline", pid.trim())).ok()
                })
                .is_some_and(|cmd| cmd.contains(&*d.join("server.properties").to_string_lossy()));
            if !running {
                eprintln!("starting node {node} again after the test");
                let _ = ci_command(&self.0, "resume", &[&node.to_string()]).status();
            } else {
                // A paused node (SIGSTOP) goes on; SIGCONT to a running one
                // does nothing.
                let _ = ci_command(&self.0, "unpause", &[&node.to_string()]).output();
            }
        }
        let _ = ci_command(&self.0, "wait-isr", &[]).status();
    }
}

/// Each acknowledged record: its partition, offset and when the
/// acknowledgement came.
type Acks = Arc<Mutex<BTreeMap<i32, Vec<(i64, Instant)>>>>;

/// Produces keyed records (`acks=all`, idempotent) at about 200 records/s
/// until stopped, and keeps every acknowledged offset. Records sent while
/// a partition has no leader wait in librdkafka (two minutes of
/// `message.timeout.ms`) and are acknowledged by the new leader.
pub struct Flow {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    acked: Acks,
}

impl Flow {
    pub fn start(bootstrap: &str, topic: &str) -> Flow {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "120000")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Acks = Arc::default();
        let task = tokio::spawn({
            let (stop, acked, topic) = (Arc::clone(&stop), Arc::clone(&acked), topic.to_owned());
            async move {
                let mut pending = tokio::task::JoinSet::new();
                let mut i = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    for _ in 0..2 {
                        let key = format!("k{}", i % 30);
                        let payload = format!("{i}");
                        let f = producer
                            .send_result(FutureRecord::to(&topic).key(&key).payload(&payload))
                            .map_err(|(e, _)| e)
                            .expect("enqueue");
                        let acked = Arc::clone(&acked);
                        pending.spawn(async move {
                            let d = f.await.expect("delivery").map_err(|(e, _)| e).expect("ack");
                            acked
                                .lock()
                                .unwrap()
                                .entry(d.partition)
                                .or_default()
                                .push((d.offset, Instant::now()));
                        });
                        i += 1;
                    }
                }
                while let Some(r) = pending.join_next().await {
                    r.expect("delivery task");
                }
            }
        });
        Flow { stop, task, acked }
    }

    /// Stops producing, waits for every acknowledgement, and returns the
    /// acknowledged offsets of each partition, sorted.
    pub async fn finish(self) -> BTreeMap<i32, Vec<i64>> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("producer task");
        let acked = self.acked.lock().unwrap();
        acked
            .iter()
            .map(|(p, v)| {
                let mut o: Vec<i64> = v.iter().map(|(o, _)| *o).collect();
                o.sort_unstable();
                (*p, o)
            })
            .collect()
    }

    pub fn count(&self) -> usize {
        self.acked.lock().unwrap().values().map(Vec::len).sum()
    }

    /// One past the highest offset of `partition` acknowledged so far (0
    /// when none).
    pub fn acked_end(&self, partition: i32) -> i64 {
        self.acked
            .lock()
            .unwrap()
            .get(&partition)
            .and_then(|v| v.iter().map(|(o, _)| o + 1).max())
            .unwrap_or(0)
    }
}

/// Every acknowledged record of `partitions` was acknowledged once, and the
/// acknowledged offsets end at the high watermarks.
pub fn acked_ends(acked: &BTreeMap<i32, Vec<i64>>, partitions: i32) -> Vec<i64> {
    (0..partitions)
        .map(|p| acked.get(&p).and_then(|v| v.last()).map_or(0, |o| o + 1))
        .collect()
}

/// Per `(partition, offset)`: how often the handler succeeded, and when it
/// first did.
type HandledLog = Arc<Mutex<BTreeMap<(i32, i64), (u32, Instant)>>>;

/// What the handler did: per `(partition, offset)`, how often it ran to
/// success and when it first did. Cloning shares it.
#[derive(Clone, Default)]
pub struct Handled(HandledLog);

impl Handled {
    pub fn push(&self, r: &Record) {
        self.0
            .lock()
            .unwrap()
            .entry((r.partition(), r.offset()))
            .or_insert((0, Instant::now()))
            .0 += 1;
    }

    /// Distinct records handled.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When the first record of `partition` at or above offset `from` was
    /// first handled after `after`, if one was.
    pub fn first_at_or_above(&self, partition: i32, from: i64, after: Instant) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .range((partition, from)..(partition + 1, 0))
            .map(|(_, (_, at))| *at)
            .filter(|at| *at > after)
            .min()
    }

    /// The acknowledged records never handled, and how many extra times
    /// records were handled (duplicates).
    pub fn lost_and_duplicates(&self, acked: &BTreeMap<i32, Vec<i64>>) -> (Vec<(i32, i64)>, u32) {
        let handled = self.0.lock().unwrap();
        let lost = acked
            .iter()
            .flat_map(|(p, offsets)| offsets.iter().map(|o| (*p, *o)))
            .filter(|k| !handled.contains_key(k))
            .collect();
        let duplicates = handled.values().map(|(n, _)| n - 1).sum();
        (lost, duplicates)
    }
}

/// The committed offsets the [`Sampler`] read, with when it read them.
type Samples = Arc<Mutex<Vec<(Instant, Vec<i64>)>>>;

/// Samples the group's committed offsets every 100 ms from outside and
/// keeps every read (reads that fail while a coordinator is down are
/// skipped) and every move backwards.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Samples,
    thread: std::thread::JoinHandle<Vec<String>>,
}

impl Sampler {
    pub fn start(kafka: &TestCluster, group: &str, topic: &str, partitions: i32) -> Sampler {
        let reader = kafka.offset_reader(group, topic, partitions);
        let stop = Arc::new(AtomicBool::new(false));
        let samples: Samples = Arc::default();
        let thread = std::thread::spawn({
            let (stop, samples) = (Arc::clone(&stop), Arc::clone(&samples));
            move || {
                let mut last = vec![-1001i64; partitions as usize];
                let mut backwards = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(now) = reader.committed(Duration::from_secs(2)) {
                        for (p, (&was, &is)) in last.iter().zip(&now).enumerate() {
                            if is >= 0 && was >= 0 && is < was {
                                backwards.push(format!("partition {p}: {was} -> {is}"));
                            }
                        }
                        for (l, n) in last.iter_mut().zip(&now) {
                            *l = (*l).max(*n);
                        }
                        samples.lock().unwrap().push((Instant::now(), now));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                backwards
            }
        });
        Sampler {
            stop,
            samples,
            thread,
        }
    }

    /// When, after `t`, a read first showed an offset above what an
    /// earlier read after `t` showed: the group committed (through
    /// whichever coordinator answers after `t`).
    pub fn advanced_after(&self, t: Instant) -> Option<Instant> {
        let samples = self.samples.lock().unwrap();
        let mut after = samples.iter().filter(|(at, _)| *at > t);
        let (_, first) = after.next()?;
        after
            .find(|(_, now)| now.iter().zip(first).any(|(n, f)| n > f))
            .map(|(at, _)| *at)
    }

    /// The longest time between two successful reads after `t`.
    pub fn longest_gap_after(&self, t: Instant) -> Duration {
        let samples = self.samples.lock().unwrap();
        let times: Vec<Instant> = samples
            .iter()
            .map(|(at, _)| *at)
            .filter(|at| *at > t)
            .collect();
        times
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }

    /// Stops sampling; returns the number of reads and the moves backwards.
    pub fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let backwards = self.thread.join().expect("sampler");
        let n = self.samples.lock().unwrap().len();
        (n, backwards)
    }
}

/// The consumer's commits as its metrics counted them
/// (`messaging.client.operation.duration`, operation `commit`), by
/// `error.type` (`ok` for those without one). Flush the metrics first.
pub fn commit_outcomes(metrics: &TestMetrics, group: &str) -> BTreeMap<String, u64> {
    metrics
        .metric(CLIENT_OPERATION_DURATION, |m| {
            let mut out = BTreeMap::new();
            if let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() {
                for p in h.data_points() {
                    let attrs: BTreeMap<String, String> = p
                        .attributes()
                        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                        .collect();
                    if attrs.get(MESSAGING_OPERATION_NAME).map(String::as_str) != Some("commit")
                        || attrs.get(MESSAGING_CONSUMER_GROUP_NAME).map(String::as_str)
                            != Some(group)
                    {
                        continue;
                    }
                    let outcome = attrs
                        .get(ERROR_TYPE)
                        .cloned()
                        .unwrap_or_else(|| "ok".to_owned());
                    *out.entry(outcome).or_default() += p.count();
                }
            }
            out
        })
        .unwrap_or_default()
}

/// Every record of `topic` a `read_committed` reader sees (up to the last
/// stable offset), as its key's text; read with partition EOF events so
/// that transaction markers and aborted records do not make it wait.
/// Blocking.
pub fn read_committed(bootstrap: &str, topic: &str, partitions: i32) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "fresh-consumer-tests-read-committed")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    c.assign(&tpl).expect("assign");
    let mut at_end = BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while at_end.len() < partitions as usize {
        assert!(Instant::now() < deadline, "read {topic}: no EOF in time");
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                out.push(String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned());
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("read {topic}: {e}"),
            None => {}
        }
    }
    out
}

/// Seconds with one decimal, for the figures the tests print.
pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
