//! The idempotent PostgreSQL sink of `examples/postgres_sink.rs` on a real
//! PostgreSQL, with the embedded mock broker (issue 16):
//!
//! 1. 50,000 records, the consumer process SIGKILLed at 3 random points and
//!    restarted: every order row exists exactly once, and the duplicates
//!    delivered after each kill were absorbed by the `processed_events` key.
//! 2. The database made slow mid-run (a `pg_sleep` trigger): the handler and
//!    batch durations rise, the head of the line ages, the poll interval
//!    stays flat, health says lagging (not stalled), and it all catches up.
//! 3. The database goes away for a while: the handler's errors are retried,
//!    nothing is committed past an unwritten record, nothing is lost.
//!
//! `DATABASE_URL` names the server (`bash .ci/postgres start` starts a
//! throw-away one; `.ci/run` does that for `cargo test`). Without it the
//! PostgreSQL tests print why and pass, unless `CI=true`: then they fail.
//! Each test works in a database of its own, created with
//! `synchronous_commit = off`: the tests kill consumers, never the server,
//! and a commit that is visible to other sessions is all they rely on
//! (records/s with durable commits are measured by the example).
//! The tests take a lock so they run one after another: their timings are
//! the subject of two of them.
//!
//! The crash test runs the consumer as a child process of this test binary
//! (`child_sink`, a no-op unless `FRESH_CHILD_BOOTSTRAP` is set), with the
//! runner of `tests/support/child.rs` that `tests/crash.rs` uses too; the
//! mock broker lives in the test process.

mod support;

#[path = "../examples/postgres_sink.rs"]
#[allow(dead_code)]
mod example;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use example::{Order, PostgresSink, SinkErrorKind, SinkStats, Transactions};
use fresh_consumer::metrics::{
    BATCH_DURATION, ERROR_TYPE, HANDLER_RETRIES, MESSAGING_DESTINATION_NAME, POLL_INTERVAL,
    PROCESS_DURATION,
};
use fresh_consumer::{
    FreshConsumer,
    health::{HealthHandle, HealthReason, HealthThresholds, PartitionStatus},
};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider,
    Temporality,
};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, acked, unique};
use support::logs;
use support::run::start;
use support::wait::wait_until;

/// The tests run one at a time (see the module documentation).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

/// `DATABASE_URL`, or `None` after saying why the test is skipped. Panics
/// when `CI=true` and it is missing: CI must run these tests.
fn database_url(test: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "CI=true but DATABASE_URL is not set: .ci/run starts PostgreSQL with .ci/postgres \
             and sets it for cargo test"
        ),
        _ => {
            eprintln!(
                "skipped {test}: DATABASE_URL is not set (eval \"$(bash .ci/postgres start)\" \
                 starts a throw-away PostgreSQL)"
            );
            None
        }
    }
}

/// `url` with its database name replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let (scheme, rest) = url.split_at(start);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let query = rest.find('?').map_or("", |i| &rest[i..]);
    format!("{scheme}{authority}/{db}{query}")
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to PostgreSQL: {e}"));
    tokio::spawn(connection);
    client
}

/// A database of the test's own, dropped when the test passed (kept for a
/// look when it failed). It holds [`SERIAL`] while it lives.
struct TestDb {
    server: String,
    name: String,
    url: String,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl TestDb {
    /// What each PostgreSQL test starts with: `None` when `test` is skipped
    /// (see [`database_url`]); else, once the tests before it are done, logs
    /// captured and a database of its own, named after `prefix`.
    async fn for_test(test: &str, prefix: &str) -> Option<Self> {
        let server = database_url(test)?;
        let serial = SERIAL.lock().await;
        logs::init();
        Some(Self::create(&server, prefix, serial).await)
    }

    async fn create(
        server: &str,
        prefix: &str,
        serial: tokio::sync::MutexGuard<'static, ()>,
    ) -> Self {
        let name = unique(&format!("fresh_{prefix}")).replace('-', "_");
        let admin = connect(server).await;
        // One statement per call: CREATE DATABASE refuses to run in the
        // implicit transaction of a multi-statement query.
        for sql in [
            format!("CREATE DATABASE {name}"),
            format!("ALTER DATABASE {name} SET synchronous_commit = off"),
        ] {
            admin
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let url = with_database(server, &name);
        TestDb {
            server: server.to_owned(),
            name,
            url,
            _serial: serial,
        }
    }

    async fn client(&self) -> Client {
        connect(&self.url).await
    }

    async fn drop_database(self) {
        let admin = connect(&self.server).await;
        let _ = admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await;
    }
}

async fn count(client: &Client, sql: &str, topic: &str) -> i64 {
    client
        .query_one(sql, &[&topic])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .get(0)
}

/// Keys in `processed_events` for the topic.
async fn processed(client: &Client, topic: &str) -> i64 {
    count(
        client,
        "SELECT count(*) FROM processed_events WHERE topic = $1",
        topic,
    )
    .await
}

/// Per partition: offsets below `committed[p]` without a key in
/// `processed_events` (committed past, never written).
async fn unwritten_below(client: &Client, topic: &str, committed: &[i64]) -> Vec<i64> {
    let mut out = Vec::new();
    for (p, &c) in committed.iter().enumerate() {
        let below: i64 = client
            .query_one(
                "SELECT count(*) FROM processed_events \
                 WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset < $3",
                &[&topic, &(p as i32), &c],
            )
            .await
            .expect("count keys below the committed offset")
            .get(0);
        out.push(c.max(0) - below);
    }
    out
}

/// Every order exactly once: one row per produced order id, and each row's
/// source record keyed once in `processed_events`.
async fn assert_each_order_once(client: &Client, topic: &str, expected: &HashSet<String>) {
    let rows = client
        .query(
            "SELECT order_id, count(*) FROM orders WHERE topic = $1 GROUP BY order_id",
            &[&topic],
        )
        .await
        .expect("orders");
    let mut twice = Vec::new();
    let mut seen = HashSet::new();
    for row in &rows {
        let (id, n): (String, i64) = (row.get(0), row.get(1));
        if n != 1 {
            twice.push((id.clone(), n));
        }
        seen.insert(id);
    }
    twice.sort();
    assert!(
        twice.is_empty(),
        "{} orders written more than once, e.g. {:?}",
        twice.len(),
        &twice[..twice.len().min(10)]
    );
    let missing: Vec<&String> = expected.difference(&seen).take(10).collect();
    assert!(missing.is_empty(), "orders never written, e.g. {missing:?}");
    let extra: Vec<&String> = seen.difference(expected).take(10).collect();
    assert!(extra.is_empty(), "orders never produced, e.g. {extra:?}");
    let orphans = count(
        client,
        "SELECT count(*) FROM orders o WHERE o.topic = $1 AND NOT EXISTS (
             SELECT 1 FROM processed_events e WHERE e.topic = o.topic
             AND e.kafka_partition = o.kafka_partition AND e.kafka_offset = o.kafka_offset)",
        topic,
    )
    .await;
    assert_eq!(orphans, 0, "order rows without their processed_events key");
    assert_eq!(processed(client, topic).await, expected.len() as i64);
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/// The payload of order `i`: `o-{i},{amount}`, keyed by the order id.
fn order(i: u64) -> (String, String) {
    let id = format!("o-{i}");
    let payload = format!("{id},{}", 100 + (i * 7_919) % 9_900);
    (id, payload)
}

/// Produces orders `0..n` round-robin over the partitions, all acknowledged
/// on return. Returns their ids.
async fn produce_orders(
    cluster: &TestCluster,
    topic: &str,
    partitions: i32,
    n: u64,
) -> HashSet<String> {
    let mut ids = HashSet::with_capacity(n as usize);
    let mut pending = Vec::new();
    for i in 0..n {
        let (id, payload) = order(i);
        let r = FutureRecord::to(topic)
            .partition((i % partitions as u64) as i32)
            .key(&id)
            .payload(&payload);
        pending.push(cluster.enqueue(r));
        ids.insert(id);
        if pending.len() >= 20_000 {
            acked(pending.drain(..)).await;
        }
    }
    acked(pending).await;
    ids
}

/// Produces orders at `per_second` per partition (stamped now) until
/// cancelled; returns the ids produced.
fn produce_steadily(
    producer: FutureProducer,
    topic: String,
    partitions: i32,
    per_second: u64,
    stop: CancellationToken,
) -> JoinHandle<HashSet<String>> {
    tokio::spawn(async move {
        let mut ids = HashSet::new();
        let mut tick =
            tokio::time::interval(Duration::from_secs(1) / (per_second as u32 * partitions as u32));
        let mut i = 0u64;
        while !stop.is_cancelled() {
            tick.tick().await;
            let (id, payload) = order(i);
            let r = FutureRecord::to(&topic)
                .partition((i % partitions as u64) as i32)
                .key(&id)
                .payload(&payload);
            producer
                .send(r, Duration::from_secs(10))
                .await
                .map_err(|(e, _)| e)
                .expect("produce");
            ids.insert(id);
            i += 1;
        }
        ids
    })
}

// ---------------------------------------------------------------------------
// Metrics: every export kept in memory (delta temporality)
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Point {
    name: String,
    attrs: BTreeMap<String, String>,
    /// Histograms: (count, sum, max); sums: (value, value, None).
    count: f64,
    sum: f64,
    max: Option<f64>,
}

/// One export: when, and its points.
type Export = (Instant, Vec<Point>);

/// The SDK's in-memory exporter, which keeps every export (with delta
/// temporality: what was recorded since the one before), read as [`Point`]s
/// timed on this process's monotonic clock.
#[derive(Clone)]
struct MetricLog {
    exporter: InMemoryMetricExporter,
    /// The same moment on both clocks, to place the SDK's collection times.
    origin: (Instant, SystemTime),
}

impl Default for MetricLog {
    fn default() -> Self {
        MetricLog {
            exporter: InMemoryMetricExporterBuilder::new()
                .with_temporality(Temporality::Delta)
                .build(),
            origin: (Instant::now(), SystemTime::now()),
        }
    }
}

impl MetricLog {
    /// A provider exporting here every 100 ms.
    fn provider(&self) -> SdkMeterProvider {
        let reader = PeriodicReader::builder(self.exporter.clone())
            .with_interval(Duration::from_millis(100))
            .build();
        SdkMeterProvider::builder().with_reader(reader).build()
    }

    /// Every export that held a histogram or a sum, oldest first, timed by
    /// its collection.
    fn exports(&self) -> Vec<Export> {
        let to_instant =
            |t: SystemTime| self.origin.0 + t.duration_since(self.origin.1).unwrap_or_default();
        let attrs = |it: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
            it.map(|kv| (kv.key.to_string(), kv.value.as_str().into_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        let exports = self.exporter.get_finished_metrics().expect("exports");
        let mut out = Vec::new();
        for export in &exports {
            let (mut at, mut points) = (None, Vec::new());
            for m in export.scope_metrics().flat_map(|s| s.metrics()) {
                let name = m.name().to_owned();
                match m.data() {
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        at = Some(h.time());
                        points.extend(h.data_points().map(|p| Point {
                            name: name.clone(),
                            attrs: attrs(&mut p.attributes()),
                            count: p.count() as f64,
                            sum: p.sum(),
                            max: p.max(),
                        }));
                    }
                    AggregatedMetrics::U64(MetricData::Sum(s)) => {
                        at = Some(s.time());
                        points.extend(s.data_points().map(|p| Point {
                            name: name.clone(),
                            attrs: attrs(&mut p.attributes()),
                            count: p.value() as f64,
                            sum: p.value() as f64,
                            max: None,
                        }));
                    }
                    _ => {}
                }
            }
            if let Some(at) = at {
                out.push((to_instant(at), points));
            }
        }
        out
    }

    /// Exports at or after `from`, each with the points of `name` that `keep`
    /// accepts.
    fn since(
        &self,
        from: Instant,
        name: &str,
        keep: impl Fn(&Point) -> bool,
    ) -> Vec<(Instant, Vec<Point>)> {
        self.exports()
            .into_iter()
            .filter(|(at, _)| *at >= from)
            .map(|(at, points)| {
                let points = points
                    .into_iter()
                    .filter(|p| p.name == name && keep(p))
                    .collect();
                (at, points)
            })
            .collect()
    }

    /// The largest `max` of `name` in the exports at or after `from`.
    fn max_since(&self, from: Instant, name: &str) -> f64 {
        self.since(from, name, |_| true)
            .iter()
            .flat_map(|(_, points)| points.iter().filter_map(|p| p.max))
            .fold(0.0, f64::max)
    }

    /// Total count (histograms) or value (sums) of `name` at or after `from`.
    fn total_since(&self, from: Instant, name: &str, keep: impl Fn(&Point) -> bool) -> f64 {
        self.since(from, name, keep)
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.count))
            .sum()
    }
}

// ---------------------------------------------------------------------------
// 0. An unreachable database is a clear error
// ---------------------------------------------------------------------------

/// Needs no PostgreSQL: a port nobody listens on.
#[tokio::test]
async fn an_unreachable_database_is_a_clear_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://postgres@127.0.0.1:{port}/orders");
    let err = match PostgresSink::connect(&url, 1).await {
        Ok(_) => panic!("connected to a port nobody listens on"),
        Err(e) => e,
    };
    let kind = err
        .downcast_ref::<example::SinkError>()
        .map(example::SinkError::kind);
    assert_eq!(kind, Some(SinkErrorKind::Unreachable), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{port}/orders")) && message.contains("unreachable"),
        "{message}"
    );
    eprintln!("{message}: {}", err.source_chain());
}

trait SourceChain {
    fn source_chain(&self) -> String;
}

impl SourceChain for Box<dyn std::error::Error + Send + Sync> {
    fn source_chain(&self) -> String {
        let mut out = Vec::new();
        let mut s = self.source();
        while let Some(e) = s {
            out.push(e.to_string());
            s = e.source();
        }
        out.join(": ")
    }
}

// ---------------------------------------------------------------------------
// 1. SIGKILL at three random points
// ---------------------------------------------------------------------------

const CHILD_DATABASE: &str = "FRESH_PG_CHILD_DATABASE";
const CHILD_BATCH: &str = "FRESH_PG_CHILD_BATCH";
const CHILD_STATS: &str = "FRESH_PG_CHILD_STATS";

const CRASH_PARTITIONS: i32 = 4;
const CRASH_RECORDS: u64 = 50_000;
const KILLS: usize = 3;
/// Batch size of the children that write batched transactions.
const CHILD_BATCH_MAX: usize = 64;

/// The consumer process: the example's sink in a `FreshConsumer`, until its
/// stdin closes. Writes its sink counters to a file every 20 ms. A no-op
/// unless started by `fifty_thousand_records_three_kills_each_order_once`.
#[test]
fn child_sink() {
    let Some(target) = child::target() else {
        return;
    };
    let url = child::var(CHILD_DATABASE);
    let stats_path = PathBuf::from(child::var(CHILD_STATS));
    let transactions = match child::var(CHILD_BATCH)
        .parse::<usize>()
        .expect("batch size")
    {
        0 | 1 => Transactions::PerRecord,
        max => Transactions::Batched { max },
    };
    logs::init();
    child::block_on(async move {
        let sink = PostgresSink::connect(&url, CRASH_PARTITIONS as usize + 1)
            .await
            .expect("the child reaches PostgreSQL");
        let stats = sink.stats();
        let writer = {
            let (stats, path) = (Arc::clone(&stats), stats_path.clone());
            tokio::spawn(async move {
                loop {
                    write_stats(&path, &stats);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let summary = match transactions {
            Transactions::PerRecord => {
                child_settings(child::consumer(sink.clone(), &target))
                    .run_until(child::stdin_closed())
                    .await
            }
            // One transaction per batch: the batch handler.
            Transactions::Batched { max } => {
                let batched = FreshConsumer::batched(sink.clone()).max_batch_records(max);
                child_settings(child::configure(batched, &target))
                    .run_until(child::stdin_closed())
                    .await
            }
        }
        .expect("the child consumer ran without a fatal error");
        writer.abort();
        write_stats(&stats_path, &stats);
        eprintln!("child summary: {summary:?}");
    });
}

/// The children's retry backoff: short, to retry soon after a kill.
fn child_settings<H>(consumer: FreshConsumer<H>) -> FreshConsumer<H> {
    consumer.retry_backoff(Duration::from_millis(10), Duration::from_millis(200))
}

/// `written duplicates transactions`, replaced atomically (a kill never
/// leaves half a file).
fn write_stats(path: &Path, stats: &SinkStats) {
    let text = format!(
        "{} {} {}\n",
        stats.written.load(Ordering::Relaxed),
        stats.duplicates.load(Ordering::Relaxed),
        stats.transactions.load(Ordering::Relaxed)
    );
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// `(written, duplicates, transactions)` from a child's stats file.
fn read_stats(path: &Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let n: Vec<u64> = text
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    match n[..] {
        [w, d, t] => (w, d, t),
        _ => (0, 0, 0),
    }
}

/// A child sink process, writing its counters to `{dir}/{name}.stats`.
struct ChildSink {
    process: ChildProcess,
    stats: PathBuf,
}

impl ChildSink {
    fn spawn(
        name: String,
        dir: &Path,
        cluster: &TestCluster,
        group: &str,
        topic: &str,
        database: &str,
        batch: usize,
    ) -> Self {
        let stats = dir.join(format!("{name}.stats"));
        let mut command = child::command("child_sink", cluster, group, topic);
        command
            .env(CHILD_DATABASE, database)
            .env(CHILD_BATCH, batch.to_string())
            .env(CHILD_STATS, &stats);
        ChildSink {
            process: ChildProcess::spawn(name, dir, command),
            stats,
        }
    }
}

/// Three kill points in (5 %, 90 %) of the records, at least 8 % apart.
fn kill_points(rng: &mut fastrand::Rng, n: u64) -> Vec<i64> {
    loop {
        let mut points: Vec<i64> = (0..KILLS)
            .map(|_| rng.u64(n * 5 / 100..n * 90 / 100) as i64)
            .collect();
        points.sort_unstable();
        if points
            .windows(2)
            .all(|w| w[1] - w[0] >= (n * 8 / 100) as i64)
        {
            return points;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_records_three_kills_each_order_once() {
    let Some(db) = TestDb::for_test(
        "fifty_thousand_records_three_kills_each_order_once",
        "crash",
    )
    .await
    else {
        return;
    };
    let began = Instant::now();
    let client = db.client().await;
    // The children create it too; the test reads it before the first one
    // is up.
    client.batch_execute(example::SCHEMA).await.expect("schema");
    let cluster = TestCluster::start();
    let topic = cluster.topic("pg-crash", CRASH_PARTITIONS).await;
    let group = unique("g-pg-crash");
    let ids = produce_orders(&cluster, &topic, CRASH_PARTITIONS, CRASH_RECORDS).await;
    let high = cluster.high_watermarks(&topic, CRASH_PARTITIONS).await;
    assert_eq!(high.iter().sum::<i64>(), CRASH_RECORDS as i64);
    let seed = std::env::var("FRESH_PG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let kills = kill_points(&mut rng, CRASH_RECORDS);
    eprintln!(
        "produced {CRASH_RECORDS} records in {:?}; seed {seed} (FRESH_PG_SEED), kills at {kills:?} \
         keys written",
        began.elapsed()
    );
    let dir = std::env::temp_dir().join(unique("fresh-pg-crash"));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let mut duplicates = 0u64;
    let mut redelivery_due = 0i64;
    for (i, &kill_at) in kills.iter().enumerate() {
        // The children alternate per-record and batched transactions.
        let batch = if i % 2 == 0 { 1 } else { CHILD_BATCH_MAX };
        let before = processed(&client, &topic).await;
        let mut child = ChildSink::spawn(
            format!("child-{}", i + 1),
            &dir,
            &cluster,
            &group,
            &topic,
            &db.url,
            batch,
        );
        // Kill only after this child wrote something of its own.
        let target = kill_at.max(before + 1_000);
        wait_until(
            Duration::from_secs(60),
            &format!("child {} wrote {target} keys", i + 1),
            || {
                child.process.assert_running();
                let client = &client;
                let topic = &topic;
                async move { processed(client, topic).await >= target }
            },
        )
        .await;
        child.process.kill();
        // Read after the kill: the dead process commits nothing more.
        let committed = cluster.committed(&group, &topic, CRASH_PARTITIONS).await;
        let written = processed(&client, &topic).await;
        let unwritten = unwritten_below(&client, &topic, &committed).await;
        assert!(
            unwritten.iter().all(|&u| u == 0),
            "kill {}: committed {committed:?} past records never written ({unwritten:?} per partition)",
            i + 1
        );
        // Written but not committed: the next child gets these again.
        let due = written - committed.iter().map(|c| c.max(&0)).sum::<i64>();
        redelivery_due += due;
        let (w, d, t) = read_stats(&child.stats);
        duplicates += d;
        eprintln!(
            "kill {} at {:?} ({} transactions): {written} keys written, committed {committed:?}, \
             {due} written but not committed; this child wrote {w} in {t} transactions and \
             absorbed {d} duplicates",
            i + 1,
            began.elapsed(),
            if batch > 1 { "batched" } else { "per-record" }
        );
    }

    // The last child runs to the end and stops cleanly.
    let mut last = ChildSink::spawn(
        "child-4".into(),
        &dir,
        &cluster,
        &group,
        &topic,
        &db.url,
        CHILD_BATCH_MAX,
    );
    wait_until(
        Duration::from_secs(90),
        "every record written and committed",
        || {
            last.process.assert_running();
            let (client, topic, cluster, group, high) = (&client, &topic, &cluster, &group, &high);
            async move {
                processed(client, topic).await == CRASH_RECORDS as i64
                    && cluster.committed(group, topic, CRASH_PARTITIONS).await == *high
            }
        },
    )
    .await;
    let status = last.process.stop().await;
    assert!(status.success(), "the last child failed: {status}");
    let (w, d, t) = read_stats(&last.stats);
    duplicates += d;
    eprintln!("last child (batched): wrote {w} in {t} transactions, absorbed {d} duplicates");

    assert_each_order_once(&client, &topic, &ids).await;
    assert!(
        redelivery_due > 0,
        "no kill left written-but-uncommitted records: the test proved nothing"
    );
    assert!(
        duplicates > 0,
        "no duplicate was delivered and absorbed ({redelivery_due} were due)"
    );
    eprintln!(
        "done in {:?}: {CRASH_RECORDS} orders each written once; {duplicates} duplicate deliveries \
         absorbed by processed_events ({redelivery_due} written-but-uncommitted at the kills)",
        began.elapsed()
    );
    drop(last);
    let _ = std::fs::remove_dir_all(&dir);
    drop(client);
    db.drop_database().await;
}

// ---------------------------------------------------------------------------
// 2. A slow database
// ---------------------------------------------------------------------------

/// Makes every insert into `orders` sleep `slow_knob.delay_ms` (one sleep per
/// statement, so per transaction).
const SLOW_TRIGGER: &str = "
CREATE TABLE slow_knob (delay_ms integer NOT NULL);
INSERT INTO slow_knob VALUES (0);
CREATE FUNCTION slow_orders() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE d integer;
BEGIN
    SELECT delay_ms INTO d FROM slow_knob;
    IF d > 0 THEN PERFORM pg_sleep(d / 1000.0); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slow_orders AFTER INSERT ON orders
    FOR EACH STATEMENT EXECUTE FUNCTION slow_orders();
";

const SLOW_PARTITIONS: i32 = 2;
/// Records per second and partition.
const SLOW_RATE: u64 = 60;
/// The slow database's time per write: 20 writes/s per partition, a third
/// of the rate.
const SLOW_DELAY_MS: i32 = 50;
const SLOW_FOR: Duration = Duration::from_secs(4);
const LAG_WINDOW: Duration = Duration::from_millis(1_500);

/// Partition health as seen at one look.
#[derive(Default, Debug)]
struct Seen {
    /// First time every partition's head age was at least 1 s.
    head_aged: Option<Instant>,
    /// First time every partition was `Warn` with `LagGrowing`.
    lagging: Option<Instant>,
    max_head_age: Duration,
    /// Statuses or reasons that say "not moving".
    stalled: Vec<String>,
}

async fn watch_health(health: &HealthHandle, topic: &str, until: Instant, seen: &mut Seen) {
    while Instant::now() < until {
        let s = health.snapshot();
        let parts: Vec<_> = (0..SLOW_PARTITIONS)
            .filter_map(|p| s.partition(topic, p))
            .collect();
        if parts.len() == SLOW_PARTITIONS as usize {
            let now = Instant::now();
            for p in &parts {
                seen.max_head_age = seen.max_head_age.max(p.head_age);
                if matches!(p.status, PartitionStatus::Stall | PartitionStatus::Stop) {
                    seen.stalled.push(format!("p{} {}", p.partition, p.status));
                }
                for r in &p.reasons {
                    if matches!(
                        r,
                        HealthReason::Stalled { .. }
                            | HealthReason::NoSuccess { .. }
                            | HealthReason::NotCommitting { .. }
                    ) {
                        seen.stalled.push(format!("p{} {r}", p.partition));
                    }
                }
            }
            if seen.head_aged.is_none()
                && parts.iter().all(|p| p.head_age >= Duration::from_secs(1))
            {
                seen.head_aged = Some(now);
            }
            let lagging = |p: &&fresh_consumer::health::PartitionReport| {
                p.status == PartitionStatus::Warn
                    && p.reasons
                        .iter()
                        .any(|r| matches!(r, HealthReason::LagGrowing { .. }))
            };
            if seen.lagging.is_none() && parts.iter().all(lagging) {
                seen.lagging = Some(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Mean `messaging.process.duration` of the successful attempts on `topic`
/// in one export; `None` without attempts.
fn mean_process(points: &[Point]) -> Option<f64> {
    let (n, sum) = points
        .iter()
        .fold((0.0, 0.0), |(n, s), p| (n + p.count, s + p.sum));
    (n > 0.0).then(|| sum / n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_database_shows_as_lagging_not_stalled_and_catches_up() {
    let Some(db) = TestDb::for_test(
        "a_slow_database_shows_as_lagging_not_stalled_and_catches_up",
        "slow",
    )
    .await
    else {
        return;
    };
    let sink = PostgresSink::connect(&db.url, SLOW_PARTITIONS as usize)
        .await
        .expect("sink");
    let client = db.client().await;
    client.batch_execute(SLOW_TRIGGER).await.expect("trigger");
    let cluster = TestCluster::start();
    let topic = cluster.topic("pg-slow", SLOW_PARTITIONS).await;
    let group = unique("g-pg-slow");
    let log = MetricLog::default();
    let provider = log.provider();
    let run = start(
        cluster
            .consumer(&group, &topic, sink.clone())
            .statistics_interval(Duration::from_millis(200))
            .health_thresholds(
                HealthThresholds::default()
                    .with_lag_growth_window(LAG_WINDOW)
                    // Shorter than the slow phase: a partition that stopped
                    // moving would be reported.
                    .with_stall_after(Duration::from_secs(2))
                    .with_no_success_after(Duration::from_secs(2)),
            )
            .meter_provider(&provider),
    );
    let producing = CancellationToken::new();
    let producer = produce_steadily(
        cluster.producer().clone(),
        topic.clone(),
        SLOW_PARTITIONS,
        SLOW_RATE,
        producing.clone(),
    );
    let on_topic = |p: &Point| p.attrs.get(MESSAGING_DESTINATION_NAME) == Some(&topic);
    let ok = |p: &Point| on_topic(p) && !p.attrs.contains_key(ERROR_TYPE);

    // 1. Fast: keeping up.
    wait_until(Duration::from_secs(20), "records written", || {
        let stats = sink.stats();
        async move { stats.written.load(Ordering::Relaxed) >= 50 }
    })
    .await;
    let fast_from = Instant::now();
    let mut fast = Seen::default();
    watch_health(
        &run.health,
        &topic,
        fast_from + Duration::from_secs(2),
        &mut fast,
    )
    .await;
    let fast_process = mean_process(
        &log.since(fast_from, PROCESS_DURATION, ok)
            .into_iter()
            .flat_map(|(_, p)| p)
            .collect::<Vec<_>>(),
    )
    .expect("attempts while fast");

    // 2. Slow: every write sleeps SLOW_DELAY_MS in the database.
    client
        .execute("UPDATE slow_knob SET delay_ms = $1", &[&SLOW_DELAY_MS])
        .await
        .expect("slow down");
    let slow_from = Instant::now();
    let mut slow = Seen::default();
    watch_health(&run.health, &topic, slow_from + SLOW_FOR, &mut slow).await;
    let process_detected = log
        .since(slow_from, PROCESS_DURATION, ok)
        .into_iter()
        .find(|(_, points)| mean_process(points).is_some_and(|m| m >= 0.025))
        .map(|(at, _)| at - slow_from);

    // 3. Recovered: the backlog drains.
    client
        .execute("UPDATE slow_knob SET delay_ms = 0", &[])
        .await
        .expect("speed up");
    let recovered_at = Instant::now();
    let caught_up = {
        let health = run.health.clone();
        let topic = topic.clone();
        move || {
            let s = health.snapshot();
            let ok = (0..SLOW_PARTITIONS).all(|p| {
                s.partition(&topic, p).is_some_and(|r| {
                    r.status == PartitionStatus::Ok
                        && r.head_age < Duration::from_millis(500)
                        && r.lag.is_some_and(|l| l < 10)
                })
            });
            async move { ok }
        }
    };
    wait_until(
        Duration::from_secs(20),
        "caught up after the recovery",
        caught_up,
    )
    .await;
    let caught_up_after = recovered_at.elapsed();
    wait_until(Duration::from_secs(10), "a long batch recorded", || {
        let long = log.max_since(recovered_at, BATCH_DURATION) >= 3.0;
        async move { long }
    })
    .await;
    let batch_detected = log
        .since(recovered_at, BATCH_DURATION, on_topic)
        .into_iter()
        .find(|(_, points)| points.iter().any(|p| p.max.is_some_and(|m| m >= 3.0)))
        .map(|(at, _)| at - recovered_at);
    producing.cancel();
    let ids = producer.await.expect("producer");
    wait_until(
        Duration::from_secs(20),
        "every produced record written",
        || {
            let (client, topic, n) = (&client, &topic, ids.len() as i64);
            async move { processed(client, topic).await == n }
        },
    )
    .await;
    let summary = run.stop().await;

    let batch_fast = log
        .since(fast_from, BATCH_DURATION, on_topic)
        .into_iter()
        .filter(|(at, _)| *at < slow_from)
        .flat_map(|(_, p)| p.into_iter().filter_map(|p| p.max))
        .fold(0.0, f64::max);
    let batch_slow = log.max_since(slow_from, BATCH_DURATION);
    let slow_process = mean_process(
        &log.since(slow_from, PROCESS_DURATION, ok)
            .into_iter()
            .filter(|(at, _)| *at < recovered_at)
            .flat_map(|(_, p)| p)
            .collect::<Vec<_>>(),
    )
    .unwrap_or(0.0);
    let poll_fast = log
        .since(fast_from, POLL_INTERVAL, |_| true)
        .into_iter()
        .filter(|(at, _)| *at < slow_from)
        .flat_map(|(_, p)| p.into_iter().filter_map(|p| p.max))
        .fold(0.0, f64::max);
    let poll_slow = log
        .since(slow_from, POLL_INTERVAL, |_| true)
        .into_iter()
        .filter(|(at, _)| *at < recovered_at + Duration::from_millis(500))
        .flat_map(|(_, p)| p.into_iter().filter_map(|p| p.max))
        .fold(0.0, f64::max);
    let since_slow = |t: Option<Instant>| t.map(|t| t - slow_from);
    eprintln!(
        "slow database ({SLOW_DELAY_MS} ms per write, {SLOW_RATE}/s per partition, {SLOW_FOR:?}):\n\
         \x20 process.duration mean {:.1} ms fast, {:.1} ms slow; detected after {process_detected:?}\n\
         \x20 head age >= 1 s on every partition after {:?} (max {:?}; fast max {:?})\n\
         \x20 WARN (lag growing) on every partition after {:?}; stalled/stop seen: {:?}\n\
         \x20 batch.duration max {batch_fast:.3} s fast, {batch_slow:.3} s slow, recorded {batch_detected:?} \
         after the recovery\n\
         \x20 poll.interval max {poll_fast:.3} s fast, {poll_slow:.3} s slow\n\
         \x20 caught up {caught_up_after:?} after the recovery; {} records produced; summary {:?}",
        fast_process * 1e3,
        slow_process * 1e3,
        since_slow(slow.head_aged),
        slow.max_head_age,
        fast.max_head_age,
        since_slow(slow.lagging),
        slow.stalled,
        ids.len(),
        summary.committed,
    );
    assert!(fast_process < 0.015, "fast writes take {fast_process} s");
    assert!(slow_process >= 0.040, "slow writes take {slow_process} s");
    assert!(process_detected.is_some(), "process.duration never rose");
    assert!(fast.max_head_age < Duration::from_millis(500), "{fast:?}");
    assert!(
        fast.lagging.is_none() && fast.stalled.is_empty(),
        "{fast:?}"
    );
    assert!(
        slow.head_aged.is_some(),
        "the head of the line never aged: {slow:?}"
    );
    assert!(
        slow.lagging.is_some(),
        "health never said lagging: {slow:?}"
    );
    assert!(
        slow.stalled.is_empty(),
        "a slow database is not a stall: {slow:?}"
    );
    assert!(batch_fast < 0.5, "{batch_fast}");
    assert!(batch_slow >= 3.0, "{batch_slow}");
    // Flat: the idle tick (1 s) plus scheduling slack, both phases.
    assert!(
        poll_fast < 1.5 && poll_slow < 1.5,
        "{poll_fast} {poll_slow}"
    );
    assert_each_order_once(&client, &topic, &ids).await;
    let _ = provider.shutdown();
    drop((client, sink));
    db.drop_database().await;
}

// ---------------------------------------------------------------------------
// 3. The database goes away
// ---------------------------------------------------------------------------

const AWAY_PARTITIONS: i32 = 2;
const AWAY_RATE: u64 = 100;
const AWAY_FOR: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_database_is_away_nothing_is_committed_past_and_nothing_lost() {
    let Some(db) = TestDb::for_test(
        "while_the_database_is_away_nothing_is_committed_past_and_nothing_lost",
        "away",
    )
    .await
    else {
        return;
    };
    let sink = PostgresSink::connect(&db.url, AWAY_PARTITIONS as usize)
        .await
        .expect("sink");
    // The test's own connection to the database survives the outage: it
    // reads what was written while the consumer cannot.
    let client = db.client().await;
    let admin = connect(&db.server).await;
    let cluster = TestCluster::start();
    let topic = cluster.topic("pg-away", AWAY_PARTITIONS).await;
    let group = unique("g-pg-away");
    let log = MetricLog::default();
    let provider = log.provider();
    let run = start(
        cluster
            .consumer(&group, &topic, sink.clone())
            .retry_backoff(Duration::from_millis(20), Duration::from_millis(200))
            .meter_provider(&provider),
    );
    let producing = CancellationToken::new();
    let producer = produce_steadily(
        cluster.producer().clone(),
        topic.clone(),
        AWAY_PARTITIONS,
        AWAY_RATE,
        producing.clone(),
    );
    let stats = sink.stats();
    wait_until(Duration::from_secs(20), "records written", || {
        let stats = Arc::clone(&stats);
        async move { stats.written.load(Ordering::Relaxed) >= 100 }
    })
    .await;

    // Away: the database refuses new connections and ends the consumer's.
    let mine: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS false",
            db.name
        ))
        .await
        .expect("refuse connections");
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> $2",
            &[&db.name, &mine],
        )
        .await
        .expect("end the consumer's connections");
    let away_from = Instant::now();
    let written_at_cut = processed(&client, &topic).await;
    let reader = cluster.offset_reader(&group, &topic, AWAY_PARTITIONS);
    let reader = Arc::new(reader);
    let mut samples = 0;
    let mut last_committed = Vec::new();
    while away_from.elapsed() < AWAY_FOR {
        let committed = {
            let reader = Arc::clone(&reader);
            tokio::task::spawn_blocking(move || reader.committed(Duration::from_secs(5)))
                .await
                .unwrap()
                .expect("committed offsets")
        };
        // Nothing can be written now, so this is exact: every offset below
        // the committed one has its key.
        let unwritten = unwritten_below(&client, &topic, &committed).await;
        assert!(
            unwritten.iter().all(|&u| u == 0),
            "committed {committed:?} past unwritten records while the database was away: {unwritten:?}"
        );
        assert_eq!(
            processed(&client, &topic).await,
            written_at_cut,
            "written while away?"
        );
        samples += 1;
        last_committed = committed;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The handler's error while away: says what and where.
    let err = sink
        .write(
            &topic,
            0,
            &[(
                i64::MAX,
                &Order {
                    order_id: "probe".into(),
                    amount_cents: 1,
                },
            )],
        )
        .await
        .expect_err("a write while the database is away");
    assert_eq!(err.kind(), SinkErrorKind::Unreachable, "{err}");
    assert!(err.to_string().contains(&db.name), "{err}");
    let failed_while_away = stats.unreachable.load(Ordering::Relaxed);
    let retries_while_away = log.total_since(away_from, HANDLER_RETRIES, |_| true);

    // Back.
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} WITH ALLOW_CONNECTIONS true",
            db.name
        ))
        .await
        .expect("accept connections");
    let back_at = Instant::now();
    let backlog_from = processed(&client, &topic).await;
    wait_until(Duration::from_secs(20), "writing again", || {
        let (client, topic) = (&client, &topic);
        async move { processed(client, topic).await > backlog_from }
    })
    .await;
    let writing_after = back_at.elapsed();
    producing.cancel();
    let ids = producer.await.expect("producer");
    let high = cluster.high_watermarks(&topic, AWAY_PARTITIONS).await;
    wait_until(
        Duration::from_secs(30),
        "everything written and committed",
        || {
            let (client, topic, cluster, group, high, n) =
                (&client, &topic, &cluster, &group, &high, ids.len() as i64);
            async move {
                processed(client, topic).await == n
                    && cluster.committed(group, topic, AWAY_PARTITIONS).await == *high
            }
        },
    )
    .await;
    let caught_up_after = back_at.elapsed();
    let summary = run.stop().await;
    let failed_attempts = log.total_since(away_from, PROCESS_DURATION, |p| {
        p.attrs.get(ERROR_TYPE).map(String::as_str) == Some("handler_error")
    });
    eprintln!(
        "database away for {AWAY_FOR:?}: {written_at_cut} keys written at the cut, committed \
         {last_committed:?} at the end of the outage ({samples} samples, none past an unwritten \
         record); {failed_while_away} writes failed as unreachable, {retries_while_away} handler \
         retries, {failed_attempts} failed attempts in messaging.process.duration; writing again \
         {writing_after:?} and caught up {caught_up_after:?} after it came back; sink error: {err}; \
         {} records, summary {:?}",
        ids.len(),
        summary.committed
    );
    assert!(samples >= 5, "{samples}");
    assert!(
        failed_while_away > 0,
        "no write failed while the database was away"
    );
    assert!(
        retries_while_away > 0.0,
        "no handler retry while the database was away"
    );
    assert!(failed_attempts > 0.0);
    assert_each_order_once(&client, &topic, &ids).await;
    let _ = provider.shutdown();
    drop((client, sink));
    db.drop_database().await;
}
