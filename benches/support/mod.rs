//! Shared by the benches: the in-process mock cluster, bulk production, the
//! consumer settings every bench uses, and small statistics helpers.
//!
//! Not a bench itself (Cargo only discovers `benches/*.rs`).
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

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

/// A mock cluster owned by this process (librdkafka's in-process broker,
/// started by a client with `test.mock.num.brokers`). `!Send`: keep it on
/// the bench's main thread.
pub struct Cluster {
    owner: BaseProducer,
    bootstrap: String,
}

impl Cluster {
    pub fn start() -> Self {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", "1")
            .create()
            .expect("mock cluster");
        let bootstrap = owner
            .client()
            .mock_cluster()
            .expect("mock cluster handle")
            .bootstrap_servers();
        // SAFETY: the pointer is the live mock cluster of `owner`, which this
        // struct keeps alive.
        unsafe {
            let ptr = rdkafka_sys::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
            // The first join otherwise waits group.initial.rebalance.delay.ms = 3 s.
            rdkafka_sys::rd_kafka_mock_group_initial_rebalance_delay_ms(ptr, 0);
        }
        Cluster { owner, bootstrap }
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Creates a topic with a unique name and returns it.
    pub fn topic(&self, prefix: &str, partitions: i32) -> String {
        let name = unique(prefix);
        self.owner
            .client()
            .mock_cluster()
            .expect("mock cluster handle")
            .create_topic(&name, partitions, 1)
            .expect("create topic");
        name
    }

    /// Produces `per_partition` records to each partition, with an 8-byte
    /// key and a `payload_bytes` payload, timestamped now (CreateTime).
    /// Checks that every record was acknowledged and that the mock kept all
    /// of them (its retention is 5 MiB per partition: a dropped head moves
    /// the low watermark). Returns how long producing took.
    pub fn produce(
        &self,
        topic: &str,
        partitions: i32,
        per_partition: usize,
        payload_bytes: usize,
    ) -> Duration {
        let started = Instant::now();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("linger.ms", "20")
            .set("batch.num.messages", "10000")
            .set("batch.size", "1000000")
            .set("queue.buffering.max.messages", "1000000")
            .set("queue.buffering.max.kbytes", "1048576")
            .create()
            .expect("producer");
        let payload = vec![b'x'; payload_bytes];
        for i in 0..per_partition {
            let key = format!("k{:07}", i % 10_000_000);
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
            .set("bootstrap.servers", &self.bootstrap)
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
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique to this process and call.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("{prefix}-{}-{t}-{n}", std::process::id())
}

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

/// A metrics exporter that discards what it is given and counts exports:
/// with a `PeriodicReader` it makes the SDK's instruments real (aggregating
/// every measurement) without any I/O. (`ManualReader` and the in-memory
/// exporter need SDK features this crate does not enable.)
#[derive(Clone, Debug, Default)]
pub struct DiscardExporter {
    pub exports: Arc<AtomicU64>,
}

impl PushMetricExporter for DiscardExporter {
    async fn export(&self, _metrics: &ResourceMetrics) -> OTelSdkResult {
        self.exports.fetch_add(1, Ordering::Relaxed);
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
/// exports once) to a [`DiscardExporter`].
pub fn sdk_provider() -> (SdkMeterProvider, DiscardExporter) {
    let exporter = DiscardExporter::default();
    let reader = PeriodicReader::builder(exporter.clone())
        .with_interval(Duration::from_secs(60))
        .build();
    (
        SdkMeterProvider::builder().with_reader(reader).build(),
        exporter,
    )
}
