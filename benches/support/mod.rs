//! Shared by the benches and by the peer-comparison driver
//! `examples/peer_throughput.rs`: the in-process mock broker and bulk
//! production, the consumer settings every bench uses and consumers built
//! with them, progress counting, criterion's setup, and small statistics and
//! `/proc` helpers.
//!
//! Not a bench itself (Cargo only discovers `benches/*.rs`).
#![allow(dead_code)]

#[path = "../../examples/support/mock_broker.rs"]
mod mock_broker;
#[path = "../../examples/support/names.rs"]
mod names;

use std::convert::Infallible;
use std::future::Future;
use std::iter::Sum;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::{Batch, BatchError, BatchHandler, FreshConsumer, Handler, Record, RunSummary};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tokio::sync::Notify;

pub use mock_broker::MockBroker;

/// librdkafka properties set on every bench consumer (the library's and the
/// raw baselines alike):
/// - `fetch.queue.backoff.ms=10`: the default (1000) makes throughput with
///   many partitions bimodal (0.2-1.9 M records/s on the mock);
/// - `fetch.wait.max.ms=10`: an empty fetch is otherwise held 500 ms;
/// - `session.timeout.ms=6000`: a membership change waits
///   `session.timeout.ms - 1000` on the mock.
pub const CONSUMER_PROPS: &[(&str, &str)] = &[
    ("fetch.queue.backoff.ms", "10"),
    ("fetch.wait.max.ms", "10"),
    ("session.timeout.ms", "6000"),
];

/// The raw baselines' commit interval, and the library's `commit_interval`.
pub const COMMIT_EVERY: Duration = Duration::from_millis(100);

// ------------------------------------------------------ broker and data --

/// Starts the in-process mock broker (`examples/support/mock_broker.rs`).
/// Keep it in the bench's `main` until every consumer is done.
pub fn mock_broker() -> MockBroker {
    MockBroker::start().expect("mock broker")
}

/// Creates a topic with a unique name on `broker` and returns the name.
pub fn topic(broker: &MockBroker, prefix: &str, partitions: i32) -> String {
    let name = unique(prefix);
    broker
        .create_topic(&name, partitions)
        .expect("create topic");
    name
}

/// Produces `per_partition` records to each partition, with an 8-byte key
/// (`k0000000`, `k0000001`, ...) and a `payload_bytes` payload, timestamped
/// now (CreateTime). See [`produce_keyed`]; returns how long producing took.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    per_partition: usize,
    payload_bytes: usize,
) -> Duration {
    produce_keyed(
        bootstrap,
        topic,
        partitions,
        per_partition,
        payload_bytes,
        |i| format!("k{:07}", i % 10_000_000),
    )
}

/// Produces `per_partition` records to each partition, the `i`-th of each
/// with key `key(i)` and a `payload_bytes` payload, timestamped now
/// (CreateTime). Checks that every record was acknowledged and that the mock
/// kept all of them (its retention is 5 MiB per partition: a dropped head
/// moves the low watermark). Returns how long producing took.
pub fn produce_keyed(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    per_partition: usize,
    payload_bytes: usize,
    mut key: impl FnMut(usize) -> String,
) -> Duration {
    let started = Instant::now();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("producer");
    let payload = vec![b'x'; payload_bytes];
    for i in 0..per_partition {
        let key = key(i);
        for p in 0..partitions {
            let mut record = BaseRecord::to(topic)
                .partition(p)
                .key(&key)
                .payload(&payload);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => panic!("produce: {e}"),
                }
            }
        }
        if i % 1_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    let took = started.elapsed();
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("watermark reader");
    for p in 0..partitions {
        let (lo, hi) = reader
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(
            (lo, hi),
            (0, per_partition as i64),
            "partition {p}: the mock dropped records (5 MiB per partition) or some were not acknowledged"
        );
    }
    took
}

// ------------------------------------------------------------ consumers --

/// A `FreshConsumer` as every bench runs one: [`CONSUMER_PROPS`], commits
/// every [`COMMIT_EVERY`], shutdown within 10 s. Give it a new `group` (see
/// [`unique`]) to read the topics from the start. Callers add the meter and
/// their own options.
pub fn fresh_consumer<H, I, S>(
    handler: H,
    bootstrap: &str,
    topics: I,
    group: impl Into<String>,
) -> FreshConsumer<H>
where
    H: Handler,
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    configure(FreshConsumer::new(handler), bootstrap, topics, group)
}

/// [`fresh_consumer`]'s settings on any consumer (a batched one too).
pub fn configure<H, I, S>(
    consumer: FreshConsumer<H>,
    bootstrap: &str,
    topics: I,
    group: impl Into<String>,
) -> FreshConsumer<H>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut c = consumer
        .bootstrap_servers(bootstrap)
        .group_id(group)
        .topics(topics)
        .commit_interval(COMMIT_EVERY)
        .shutdown_timeout(Duration::from_secs(10));
    for (k, v) in CONSUMER_PROPS {
        c = c.set(*k, *v);
    }
    c
}

/// Runs `consumer` until `progress` reached its target, within `deadline`.
/// Fails on the deadline, on a run error, or when fewer records succeeded.
pub async fn run_to_target<H: Handler>(
    consumer: FreshConsumer<H>,
    progress: &Arc<Progress>,
    deadline: Duration,
) -> Result<RunSummary, String> {
    let p = Arc::clone(progress);
    let target = progress.target;
    let summary = tokio::time::timeout(
        deadline,
        consumer.run_until(async move { p.all_done().await }),
    )
    .await
    .map_err(|_| format!("deadline: {} of {target} records handled", progress.count()))?
    .map_err(|e| format!("run: {e}"))?;
    if summary.records_succeeded < target {
        return Err(format!(
            "{} of {target} records handled",
            summary.records_succeeded
        ));
    }
    Ok(summary)
}

/// [`run_to_target`] with all metrics on: a [`sdk_provider`] of the run's
/// own, shut down after it. Panics when the run fails.
pub async fn run_metrics_on<H: Handler>(
    consumer: FreshConsumer<H>,
    progress: &Arc<Progress>,
    deadline: Duration,
) -> RunSummary {
    let (provider, _exporter) = sdk_provider();
    let summary = run_to_target(consumer.meter_provider(&provider), progress, deadline)
        .await
        .expect("fresh consumer");
    let _ = provider.shutdown();
    summary
}

/// The configuration of a raw rdkafka consumer as the baselines use it:
/// [`CONSUMER_PROPS`], group `group`, no auto commit, a new group reading
/// from the start.
pub fn raw_config(bootstrap: &str, group: &str) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (k, v) in CONSUMER_PROPS {
        cfg.set(*k, *v);
    }
    cfg
}

/// Drops a raw consumer off the runtime's workers: closing leaves the group
/// and blocks.
pub async fn close<C: Send + 'static>(consumer: C) {
    tokio::task::spawn_blocking(move || drop(consumer))
        .await
        .expect("close");
}

// ------------------------------------------------------------- progress --

/// Counts handled records towards a target, and notes when the first one
/// started and the target-th finished: what a bench times, so that group
/// join and shutdown are not in it. With [`Progress::with_cpu`] it also
/// notes the process's CPU time at both points.
pub struct Progress {
    target: u64,
    cpu: bool,
    n: AtomicU64,
    first: OnceLock<(Instant, Duration)>,
    last: OnceLock<(Instant, Duration)>,
    done: Notify,
}

impl Progress {
    pub fn new(target: u64) -> Arc<Self> {
        Self::build(target, false)
    }

    /// Also notes [`process_cpu`] with the first and the last record.
    pub fn with_cpu(target: u64) -> Arc<Self> {
        Self::build(target, true)
    }

    fn build(target: u64, cpu: bool) -> Arc<Self> {
        Arc::new(Progress {
            target,
            cpu,
            n: AtomicU64::new(0),
            first: OnceLock::new(),
            last: OnceLock::new(),
            done: Notify::new(),
        })
    }

    fn now(&self) -> (Instant, Duration) {
        let cpu = if self.cpu {
            process_cpu()
        } else {
            Duration::ZERO
        };
        (Instant::now(), cpu)
    }

    /// A record's handling started (only the first call counts).
    pub fn started(&self) {
        self.first.get_or_init(|| self.now());
    }

    /// A record was handled.
    pub fn finished(&self) {
        if self.n.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            let _ = self.last.set(self.now());
            self.done.notify_one();
        }
    }

    /// A record was handled, in no time: [`started`](Self::started) and
    /// [`finished`](Self::finished) at once.
    pub fn hit(&self) {
        self.started();
        self.finished();
    }

    /// `n` records were handled in no time (a batch).
    pub fn hit_n(&self, n: u64) {
        self.started();
        let before = self.n.fetch_add(n, Ordering::Relaxed);
        if before < self.target && before + n >= self.target {
            let _ = self.last.set(self.now());
            self.done.notify_one();
        }
    }

    /// Records handled so far.
    pub fn count(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }

    /// Resolves once the target was reached.
    pub async fn all_done(&self) {
        self.done.notified().await;
    }

    /// When the first record's handling started, if one did.
    pub fn first_at(&self) -> Option<Instant> {
        self.first.get().map(|&(at, _)| at)
    }

    /// Wall time from the first record's start to the target-th's finish.
    pub fn elapsed(&self) -> Duration {
        self.elapsed_and_cpu().0
    }

    /// Wall time and process CPU time (zero without
    /// [`with_cpu`](Self::with_cpu)) over the same span as
    /// [`elapsed`](Self::elapsed).
    pub fn elapsed_and_cpu(&self) -> (Duration, Duration) {
        let first = self.first.get().expect("a record");
        let last = self.last.get().expect("all records");
        (
            last.0.duration_since(first.0),
            last.1.saturating_sub(first.1),
        )
    }
}

/// A handler that only counts (a no-op returning a ready future), so that
/// a run measures the consumer and not the handler.
pub struct Count(pub Arc<Progress>);

impl Handler for Count {
    type Error = Infallible;

    fn handle(&self, _record: Record) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.0.hit();
        std::future::ready(Ok(()))
    }
}

/// As a batch handler ([`FreshConsumer::batched`]): counts the batch's
/// records.
impl BatchHandler for Count {
    type Error = BatchError;

    fn handle(&self, batch: Batch) -> impl Future<Output = Result<(), BatchError>> + Send {
        self.0.hit_n(batch.len() as u64);
        std::future::ready(Ok(()))
    }
}

/// A handler that awaits `work()` for each record, between
/// [`Progress::started`] and [`Progress::finished`].
pub struct Timed<W> {
    pub progress: Arc<Progress>,
    pub work: W,
}

impl<W, F> Handler for Timed<W>
where
    W: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send,
{
    type Error = Infallible;

    async fn handle(&self, _record: Record) -> Result<(), Infallible> {
        self.progress.started();
        (self.work)().await;
        self.progress.finished();
        Ok(())
    }
}

// ------------------------------------------------------------ criterion --

/// Criterion for benches whose every iteration is a whole consumer run:
/// 10 samples, next to no warm-up, `measurement_time` per case.
pub fn criterion(measurement_time: Duration) -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(measurement_time)
        .configure_from_args()
}

/// A benchmark group with flat sampling (each iteration is a whole run).
pub fn flat_group<'c, M: Measurement>(
    c: &'c mut Criterion<M>,
    name: &str,
) -> BenchmarkGroup<'c, M> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat);
    g
}

/// For criterion's `iter_custom`: calls `run` `iters` times and adds up what
/// it measured.
pub fn runs<T: Sum>(iters: u64, mut run: impl FnMut() -> T) -> T {
    (0..iters).map(|_| run()).sum()
}

// ---------------------------------------------------------------- misc --

pub use names::unique;

/// The tokio runtime the benches run on: multi-thread with one worker per
/// core (2 on this project's machines), as a service would use.
pub fn runtime() -> tokio::runtime::Runtime {
    if std::env::var("BENCH_CURRENT_THREAD").is_ok() {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// An environment variable as a number, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (0 for an empty slice).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// Min and max of `v`.
pub fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// A field of `/proc/self/status` in kB (`VmRSS`, `VmHWM`).
pub fn proc_status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{field} not in /proc/self/status"))
}

/// CPU time used by this process so far, all threads (user + system, from
/// `/proc/self/stat`, in clock ticks of 10 ms): with the mock broker in the
/// same process, this includes the broker's threads.
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    Duration::from_millis(10 * f.iter().sum::<u64>())
}

/// Resets the kernel's peak-RSS mark (`VmHWM`) of this process to the
/// current RSS (`echo 5 > /proc/self/clear_refs`, Linux 4.0+). Returns
/// `false` when the kernel refused.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A short description of the machine for the results table.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}

// -------------------------------------------------------------- metrics --

/// A metrics exporter that discards what it is given, counting the exports
/// and the values of one histogram: with a `PeriodicReader` it makes the
/// SDK's instruments real (aggregating every measurement) without any I/O.
/// (`ManualReader` and the in-memory exporter need SDK features this crate
/// does not enable.)
#[derive(Clone, Debug)]
pub struct DiscardExporter {
    /// Exports so far.
    pub exports: Arc<AtomicU64>,
    /// The histogram [`values`](Self::values) counts.
    histogram: &'static str,
    /// How many values that histogram held at the latest export (with
    /// cumulative temporality: every value recorded).
    pub values: Arc<AtomicU64>,
}

impl PushMetricExporter for DiscardExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.exports.fetch_add(1, Ordering::Relaxed);
        let values: u64 = metrics
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .filter(|m| m.name() == self.histogram)
            .filter_map(|m| match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    Some(h.data_points().map(|p| p.count()).sum::<u64>())
                }
                _ => None,
            })
            .sum();
        self.values.store(values, Ordering::Relaxed);
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// An SDK meter provider whose instruments aggregate for real, exported
/// every 60 s (so never during a bench run; the library's flush at shutdown
/// exports once) to a [`DiscardExporter`] counting the library's
/// `fresh_consumer.event.age` values.
pub fn sdk_provider() -> (SdkMeterProvider, DiscardExporter) {
    sdk_provider_counting(EVENT_AGE)
}

/// [`sdk_provider`], with the exporter counting the values of `histogram`.
pub fn sdk_provider_counting(histogram: &'static str) -> (SdkMeterProvider, DiscardExporter) {
    let exporter = DiscardExporter {
        exports: Arc::default(),
        histogram,
        values: Arc::default(),
    };
    let reader = PeriodicReader::builder(exporter.clone())
        .with_interval(Duration::from_secs(60))
        .build();
    (
        SdkMeterProvider::builder().with_reader(reader).build(),
        exporter,
    )
}
