//! The plumbing of `examples/signals.rs`: its command line, a broker (the
//! in-process mock or a cluster) with topics of the run's own, workloads, a
//! consumer run that can be stopped, an outside view of the offset lag, an
//! in-memory metric reader, and the wait for a signal with a deadline. The
//! consumer's settings (`Broker::consumer`) are in the example; the stages
//! in `stages.rs` next to this file.

use std::error::Error;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fresh_consumer::{
    FreshConsumer, Handler, RunError, RunSummary,
    health::{HealthHandle, HealthSnapshot},
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider,
    Temporality,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::mock_broker::MockBroker;
use crate::names::unique;
use crate::stages::STAGES;

/// The name in messages.
pub const PROGRAM: &str = "signals";

/// Errors of the plumbing (a broker call that failed).
pub type BoxError = Box<dyn Error + Send + Sync>;

/// How a stage ended without its outcome.
pub enum StageError {
    /// The signal did not show within the deadline (what was waited for,
    /// and the last health report).
    Missed(String),
    /// The broker or the consumer failed: the run stops.
    Failed(BoxError),
}

impl<E: Error + Send + Sync + 'static> From<E> for StageError {
    fn from(e: E) -> Self {
        StageError::Failed(Box::new(e))
    }
}

fn failed(message: String) -> StageError {
    StageError::Failed(message.into())
}

/// The command line.
pub struct Args {
    pub bootstrap: Option<String>,
    pub properties: Vec<(String, String)>,
    pub only: Vec<String>,
}

fn usage() -> String {
    format!(
        "usage: {PROGRAM} [--bootstrap HOST:PORT] [-X key=value]... [--only STAGE[,STAGE]...]\n\
         \n\
         --bootstrap HOST:PORT  a Kafka cluster (default: librdkafka's mock broker, in process)\n\
         -X key=value           a librdkafka property for every client (security settings)\n\
         --only STAGES          run only these stages (default: all): {}",
        STAGES.join(", ")
    )
}

pub fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        bootstrap: None,
        properties: Vec::new(),
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--bootstrap" => {
                args.bootstrap = Some(it.next().ok_or("--bootstrap needs HOST:PORT")?);
            }
            "-X" => {
                let kv = it.next().ok_or("-X needs key=value")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("-X {kv}: expected key=value"))?;
                args.properties.push((k.to_owned(), v.to_owned()));
            }
            "--only" => {
                let list = it.next().ok_or("--only needs a stage list")?;
                for stage in list.split(',') {
                    if !STAGES.contains(&stage) {
                        return Err(format!("unknown stage {stage:?}\n{}", usage()));
                    }
                    args.only.push(stage.to_owned());
                }
            }
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    Ok(args)
}

/// A duration as printed: `1.2 s`.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// What a stage showed.
pub struct Outcome {
    /// The failure staged, and how.
    pub stage: &'static str,
    /// What offset lag (from outside) showed.
    pub lag: String,
    /// What the library's signals showed, one line each.
    pub library: Vec<String>,
    /// How long after the stage's trigger the signal showed.
    pub shown_after: Option<Duration>,
}

impl Outcome {
    /// The stage as printed: a title, the lag line, the library lines.
    pub fn render(&self, took: Duration) -> String {
        let mut out = format!("{}\n  offset lag: {}\n", self.stage, self.lag);
        for (i, line) in self.library.iter().enumerate() {
            let label = if i == 0 {
                "  library:    "
            } else {
                "              "
            };
            out.push_str(label);
            out.push_str(line);
            out.push('\n');
        }
        if let Some(after) = self.shown_after {
            out.push_str(&format!(
                "  (signal shown {:.1} s after the stage began; stage took {:.1} s)",
                after.as_secs_f64(),
                took.as_secs_f64()
            ));
        }
        out
    }
}

/// Waits (polling every 50 ms, at most `deadline`) until the consumer's
/// health snapshot satisfies `cond`; returns that snapshot and how long
/// it took. At the deadline: [`StageError::Missed`] with the last report.
pub async fn watch(
    health: &HealthHandle,
    deadline: Duration,
    what: &str,
    cond: impl Fn(&HealthSnapshot) -> bool,
) -> Result<(HealthSnapshot, Option<Duration>), StageError> {
    let started = Instant::now();
    loop {
        let s = health.snapshot();
        if cond(&s) {
            return Ok((s, Some(started.elapsed())));
        }
        if started.elapsed() > deadline {
            return Err(StageError::Missed(format!(
                "{what}: not within {} s; the last health report:\n{s}",
                deadline.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A consumer running in a task of its own until [`Running::stop`].
pub struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<RunSummary, RunError>>,
    /// Its health, readable while it runs.
    pub health: HealthHandle,
}

impl Running {
    /// Spawns `consumer.run_until(..)` with a shutdown signal of its own.
    pub fn start<H: Handler>(consumer: FreshConsumer<H>) -> Self {
        let health = consumer.health_handle();
        let stop = CancellationToken::new();
        let task = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
        Running { stop, task, health }
    }

    /// Signals shutdown; the run's summary.
    pub async fn stop(self) -> Result<RunSummary, StageError> {
        self.stop.cancel();
        match self.task.await {
            Ok(r) => Ok(r?),
            Err(e) => Err(failed(format!("the consumer task: {e}"))),
        }
    }
}

/// Records to produce to one partition: `count` records with key `key`.
pub struct Workload {
    key: String,
    count: usize,
    timestamp_ms: Option<i64>,
    size: usize,
}

impl Workload {
    /// `count` records with key `key`, stamped now, payload 16 bytes.
    pub fn keyed(key: &str, count: usize) -> Self {
        Workload {
            key: key.to_owned(),
            count,
            timestamp_ms: None,
            size: 16,
        }
    }

    /// Every record with this CreateTime (ms since the epoch).
    pub fn stamped(mut self, ms: i64) -> Self {
        self.timestamp_ms = Some(ms);
        self
    }

    /// Payloads of `bytes` bytes.
    pub fn sized(mut self, bytes: usize) -> Self {
        self.size = bytes;
        self
    }
}

/// A producer writing at a steady rate until [`Producing::stop`].
pub struct Producing {
    stop: CancellationToken,
    task: JoinHandle<Result<u64, BoxError>>,
}

impl Producing {
    /// Stops it; how many records it produced.
    pub async fn stop(self) -> Result<u64, StageError> {
        self.stop.cancel();
        match self.task.await {
            Ok(r) => r.map_err(StageError::Failed),
            Err(e) => Err(failed(format!("the producer task: {e}"))),
        }
    }
}

/// The broker the stages run on, and what they created on it.
pub struct Broker {
    mock: Option<MockBroker>,
    bootstrap: String,
    properties: Vec<(String, String)>,
    producer: FutureProducer,
    topics: Mutex<Vec<String>>,
}

impl Broker {
    /// The in-process mock broker (`bootstrap` `None`), or the cluster at
    /// `bootstrap`, checked with a metadata request of at most 10 s.
    pub async fn connect(
        bootstrap: Option<&str>,
        properties: &[(String, String)],
    ) -> Result<Self, BoxError> {
        let (mock, bootstrap) = match bootstrap {
            Some(b) => (None, b.to_owned()),
            None => {
                let mock = MockBroker::start()?;
                let b = mock.bootstrap().to_owned();
                (Some(mock), b)
            }
        };
        let mut broker = Broker {
            mock,
            bootstrap,
            properties: properties.to_vec(),
            producer: ClientConfig::new().create()?,
            topics: Mutex::default(),
        };
        broker.producer = broker.config().set("linger.ms", "5").create()?;
        let producer = broker.producer.clone();
        let bootstrap = broker.bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, Duration::from_secs(10))
                .map(|_| ())
                .map_err(|e| format!("no answer from {bootstrap} within 10 s: {e}"))
        })
        .await??;
        Ok(broker)
    }

    /// One line about the broker.
    pub fn describe(&self) -> String {
        match self.mock {
            Some(_) => format!(
                "librdkafka's mock broker (in process) at {}",
                self.bootstrap
            ),
            None => format!("the cluster at {}", self.bootstrap),
        }
    }

    /// A client configuration with the bootstrap servers and every `-X`
    /// property.
    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    fn admin(&self) -> Result<AdminClient<DefaultClientContext>, BoxError> {
        Ok(self.config().create()?)
    }

    /// A topic `signals-{stage}-…` of `partitions` partitions (the
    /// cluster's default replication factor) and a fresh group name.
    pub async fn stage(
        &self,
        stage: &str,
        partitions: i32,
    ) -> Result<(String, String), StageError> {
        let topic = unique(&format!("signals-{stage}"));
        match &self.mock {
            Some(mock) => mock.create_topic(&topic, partitions)?,
            None => {
                let t = NewTopic::new(&topic, partitions, TopicReplication::Fixed(-1));
                let admin = self.admin().map_err(StageError::Failed)?;
                for r in admin.create_topics([&t], &AdminOptions::new()).await? {
                    r.map_err(|(t, e)| failed(format!("creating topic {t}: {e}")))?;
                }
            }
        }
        self.topics.lock().unwrap().push(topic.clone());
        Ok((topic, unique(&format!("signals-{stage}"))))
    }

    /// Deletes the topics the stages created (on a cluster; the mock broker
    /// goes away with the process).
    pub async fn clean_up(&self) {
        let topics = std::mem::take(&mut *self.topics.lock().unwrap());
        if self.mock.is_some() || topics.is_empty() {
            return;
        }
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        if let Ok(admin) = self.admin()
            && let Err(e) = admin.delete_topics(&names, &AdminOptions::new()).await
        {
            eprintln!("deleting the stages' topics {names:?}: {e}");
        }
    }

    /// Produces `work` to one partition and waits for every
    /// acknowledgement.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        work: &Workload,
    ) -> Result<(), StageError> {
        let payload = vec![b'x'; work.size];
        let mut pending = Vec::with_capacity(work.count);
        for _ in 0..work.count {
            let mut r = FutureRecord::to(topic)
                .partition(partition)
                .key(&work.key)
                .payload(&payload[..]);
            if let Some(ms) = work.timestamp_ms {
                r = r.timestamp(ms);
            }
            pending.push(self.producer.send_result(r).map_err(|(e, _)| e)?);
        }
        for p in pending {
            p.await
                .map_err(|_| failed("the producer went away".into()))?
                .map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    /// Produces `per_second` records a second (key `steady`, stamped now)
    /// to one partition until stopped.
    pub fn produce_at(&self, topic: &str, partition: i32, per_second: f64) -> Producing {
        let stop = CancellationToken::new();
        let (producer, topic, token) = (self.producer.clone(), topic.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
            let mut sent = 0u64;
            loop {
                tokio::select! {
                    _ = token.cancelled() => return Ok(sent),
                    _ = tick.tick() => {}
                }
                let r = FutureRecord::to(&topic)
                    .partition(partition)
                    .key("steady")
                    .payload("x");
                producer
                    .send(r, Duration::from_secs(10))
                    .await
                    .map_err(|(e, _)| e)?;
                sent += 1;
            }
        });
        Producing { stop, task }
    }

    /// The bootstrap servers.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The `-X` properties, for every client.
    pub fn properties(&self) -> &[(String, String)] {
        &self.properties
    }

    /// Whether this is the in-process mock broker.
    pub fn is_mock(&self) -> bool {
        self.mock.is_some()
    }

    /// A client that speaks for `group` without joining it (offset
    /// commits and fetches only).
    fn group_client(&self, group: &str) -> Result<BaseConsumer, BoxError> {
        Ok(self
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?)
    }

    /// Commits `offset` for one partition in `group`, as an earlier run of
    /// the group would have.
    pub async fn commit(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(), StageError> {
        let client = self.group_client(group).map_err(StageError::Failed)?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))?;
        tokio::task::spawn_blocking(move || client.commit(&tpl, CommitMode::Sync)).await??;
        Ok(())
    }

    /// Offset lag as a lag exporter reads it, per partition: the log end
    /// offset minus the group's committed offset (minus the log start
    /// offset where the group has no commit).
    pub async fn outside_lag(
        &self,
        group: &str,
        topic: &str,
        partitions: i32,
    ) -> Result<Vec<u64>, StageError> {
        let client = self.group_client(group).map_err(StageError::Failed)?;
        let topic = topic.to_owned();
        let lag = tokio::task::spawn_blocking(move || -> Result<Vec<u64>, BoxError> {
            let mut tpl = TopicPartitionList::new();
            for p in 0..partitions {
                tpl.add_partition(&topic, p);
            }
            let committed = client.committed_offsets(tpl, Duration::from_secs(10))?;
            (0..partitions)
                .map(|p| {
                    let (lo, hi) = client.fetch_watermarks(&topic, p, Duration::from_secs(10))?;
                    let from = match committed.find_partition(&topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => lo,
                    };
                    Ok((hi - from).max(0) as u64)
                })
                .collect()
        })
        .await?
        .map_err(StageError::Failed)?;
        Ok(lag)
    }

    /// Retention: on a cluster, deletes the records of one partition below
    /// `before` (DeleteRecords); the mock broker applies its own 5 MiB cap
    /// as records arrive. Returns the log start offset after it.
    pub async fn apply_retention(
        &self,
        topic: &str,
        partition: i32,
        before: i64,
    ) -> Result<i64, StageError> {
        if self.mock.is_none() {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, partition, Offset::Offset(before))?;
            let admin = self.admin().map_err(StageError::Failed)?;
            let got = admin.delete_records(&tpl, &AdminOptions::new()).await?;
            if let Some(e) = got.find_partition(topic, partition) {
                e.error()?;
            }
        }
        let client = self
            .group_client(&unique("signals-watermarks"))
            .map_err(StageError::Failed)?;
        let topic = topic.to_owned();
        let (lo, _) = tokio::task::spawn_blocking(move || {
            client.fetch_watermarks(&topic, partition, Duration::from_secs(10))
        })
        .await??;
        Ok(lo)
    }
}

/// A histogram read back: its count, sum and max, over the points that
/// matched.
#[derive(Clone, Copy, Debug, Default)]
pub struct Histogram {
    /// Values recorded.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The largest.
    pub max: f64,
}

impl Histogram {
    /// The mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// What was recorded since `before` (a cumulative reading taken earlier).
    pub fn since(&self, before: &Histogram) -> Histogram {
        Histogram {
            count: self.count - before.count,
            sum: self.sum - before.sum,
            max: self.max,
        }
    }
}

/// The consumer's metrics, read in this process: the SDK's in-memory
/// exporter behind a reader that exports when flushed (cumulative: the
/// latest export holds everything).
pub struct Metrics {
    /// The provider the consumer records into.
    pub provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Metrics {
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporterBuilder::new()
            .with_temporality(Temporality::Cumulative)
            .build();
        let reader = PeriodicReader::builder(exporter.clone())
            .with_interval(Duration::from_secs(3600))
            .build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        Metrics { provider, exporter }
    }

    /// Exports what was recorded so far.
    pub async fn flush(&self) {
        let _ = fresh_consumer::metrics::flush(&self.provider, Duration::from_secs(10)).await;
    }

    fn read<R: Default>(&self, name: &str, read: impl FnOnce(&Metric) -> R) -> R {
        let exports = self.exporter.get_finished_metrics().unwrap_or_default();
        exports
            .last()
            .and_then(|latest| {
                latest
                    .scope_metrics()
                    .flat_map(|s| s.metrics())
                    .find(|m| m.name() == name)
                    .map(read)
            })
            .unwrap_or_default()
    }

    /// Histogram `name` over its points whose attributes include `wanted`.
    pub fn histogram(&self, name: &str, wanted: &[(&str, &str)]) -> Option<Histogram> {
        self.read(name, |m| {
            let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
                return None;
            };
            let mut out = Histogram::default();
            for p in h.data_points().filter(|p| includes(p.attributes(), wanted)) {
                out.count += p.count();
                out.sum += p.sum();
                out.max = out.max.max(p.max().unwrap_or(0.0));
            }
            Some(out)
        })
    }

    /// The total of counter `name` over its points whose attributes include
    /// `wanted` (0 when never exported).
    pub fn counter(&self, name: &str, wanted: &[(&str, &str)]) -> u64 {
        self.read(name, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Sum(s)) => s
                .data_points()
                .filter(|p| includes(p.attributes(), wanted))
                .map(|p| p.value())
                .sum(),
            _ => 0,
        })
    }

    /// Gauge `name` of partition `partition` (0 when not exported).
    pub fn gauge(&self, name: &str, partition: i32) -> f64 {
        let id = partition.to_string();
        let wanted = [("messaging.destination.partition.id", id.as_str())];
        self.read(name, |m| {
            let mut values: Vec<f64> = Vec::new();
            match m.data() {
                AggregatedMetrics::F64(MetricData::Gauge(g)) => values.extend(
                    g.data_points()
                        .filter(|p| includes(p.attributes(), &wanted))
                        .map(|p| p.value()),
                ),
                AggregatedMetrics::U64(MetricData::Gauge(g)) => values.extend(
                    g.data_points()
                        .filter(|p| includes(p.attributes(), &wanted))
                        .map(|p| p.value() as f64),
                ),
                AggregatedMetrics::I64(MetricData::Gauge(g)) => values.extend(
                    g.data_points()
                        .filter(|p| includes(p.attributes(), &wanted))
                        .map(|p| p.value() as f64),
                ),
                _ => {}
            }
            values.into_iter().fold(0.0, f64::max)
        })
    }
}

/// Whether `attributes` include every `(key, value)` of `wanted`.
fn includes<'a>(attributes: impl Iterator<Item = &'a KeyValue>, wanted: &[(&str, &str)]) -> bool {
    let have: Vec<&KeyValue> = attributes.collect();
    wanted.iter().all(|(k, v)| {
        have.iter()
            .any(|kv| kv.key.as_str() == *k && kv.value.as_str() == *v)
    })
}
