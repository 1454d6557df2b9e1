//! Peak RSS while consuming 10x more records than the library's buffers
//! hold, against a run of 1x: with backpressure working, RSS stays flat.
//!
//!     cargo bench --bench memory
//!     BENCH_MEMORY_EXTRA_FACTOR=0 cargo bench --bench memory    # skip the 20x run
//!
//! Latest results, with the date, machine and commit: benches/README.md
//! (from the summary this bench prints at the end).
//!
//! Layout: this process owns the mock broker and produces two topics once
//! (12 partitions; 1x = `max_buffered_records` (100) x 12 = 1,200 records,
//! 10x = 12,000 records; 2 KiB payloads, so 10x is 24 MB of payload). Each
//! iteration starts a child process (this binary again) that only consumes
//! one topic from the start, with a fresh group, and reports the growth of
//! its RSS: peak (`VmHWM` of `/proc/self/status`, reset through
//! `/proc/self/clear_refs`, and `VmRSS` sampled every 2 ms) minus the RSS
//! before the consumer was created. The broker's copy of the data, the
//! producer's buffers and allocator reuse of them are thus not in the
//! figure. Criterion reports the growth in MB (a custom measurement).
//!
//! Cases:
//! - `fresh_1x`, `fresh_10x`: FreshConsumer, all metrics on (real SDK
//!   instruments), `max_buffered_records(100)`, a slow-ish handler
//!   (`tokio::time::sleep(1 ms)` per record), so the buffers fill and
//!   partitions are paused;
//! - `raw_1x`, `raw_10x`: the raw rdkafka baseline, a `StreamConsumer`
//!   loop that sleeps 1 ms every 12 records (about the same aggregate pace),
//!   so librdkafka's own prefetch queue fills the same way.
//!
//! Every consumer sets `fetch.queue.backoff.ms=10`, `fetch.wait.max.ms=10`,
//! `session.timeout.ms=6000`, and `queued.max.messages.kbytes=1024`
//! (librdkafka prefetches up to 64 MiB by default, which would hide any
//! bound of the library's own below that size; the library's docs say its
//! bound is `max_buffered_records` per partition plus librdkafka's prefetch).
//!
//! Reading it: the 1x run is exactly the bound, so it may not reach the
//! steady state; the summary prints the library's own 1x -> 10x growth
//! (FreshConsumer's minus raw rdkafka's) next to the 22 MB (9 x 1,200 x
//! 2 KiB) an unbounded buffer would add, and a plateau check: one more run
//! at 20x (`BENCH_MEMORY_EXTRA_FACTOR`), where flat means the 10x -> 20x
//! growth is under 10 % of the 24.6 MB an unbounded buffer would add.

mod support;

use std::convert::Infallible;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};
use fresh_consumer::Record;
use rdkafka::consumer::{Consumer, StreamConsumer};

use support::{Progress, env_or, median, min_max, unique};

const CHILD_ENV: &str = "FRESH_BENCH_MEMORY_CHILD";
const PARTITIONS: i32 = 12;
const MAX_BUFFERED: usize = 100;
const PAYLOAD: usize = 2048;
const QUEUED_KBYTES: &str = "1024";

// ---------------------------------------------------------------- child --

fn child(kind: &str) {
    let bootstrap = std::env::var("BENCH_BOOTSTRAP").expect("bootstrap");
    let topic = std::env::var("BENCH_TOPIC").expect("topic");
    let total: u64 = env_or("BENCH_TOTAL", 0);
    let rt = support::runtime();
    // Let the runtime's threads start before the baseline is taken.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
    let before = support::proc_status_kb("VmRSS");
    let reset = support::reset_peak_rss();
    let stop = Arc::new(AtomicBool::new(false));
    let sampled = Arc::new(AtomicU64::new(before));
    let sampler = {
        let stop = Arc::clone(&stop);
        let sampled = Arc::clone(&sampled);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sampled.fetch_max(support::proc_status_kb("VmRSS"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let started = Instant::now();
    match kind {
        "fresh" => rt.block_on(fresh(&bootstrap, &topic, total)),
        "raw" => rt.block_on(raw(&bootstrap, &topic, total)),
        other => panic!("unknown child kind {other}"),
    }
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let hwm = if reset {
        support::proc_status_kb("VmHWM")
    } else {
        0
    };
    let peak = hwm.max(sampled.load(Ordering::Relaxed));
    println!("RESULT before_kb={before} peak_kb={peak} secs={secs:.3}");
}

async fn fresh(bootstrap: &str, topic: &str, total: u64) {
    let progress = Progress::new(total);
    let handler = {
        let p = Arc::clone(&progress);
        move |record: Record| {
            let p = Arc::clone(&p);
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                std::hint::black_box(record.payload());
                p.finished();
                Ok::<(), Infallible>(())
            }
        }
    };
    let c = support::fresh_consumer(handler, bootstrap, [topic], unique("mem"))
        .set("queued.max.messages.kbytes", QUEUED_KBYTES)
        .max_buffered_records(MAX_BUFFERED);
    support::run_metrics_on(c, &progress, Duration::from_secs(120)).await;
}

async fn raw(bootstrap: &str, topic: &str, total: u64) {
    let consumer: StreamConsumer = support::raw_config(bootstrap, &unique("mem-raw"))
        .set("queued.max.messages.kbytes", QUEUED_KBYTES)
        .create()
        .expect("raw consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let consume = async {
        for i in 0..total {
            let m = consumer.recv().await.expect("recv");
            drop(m);
            if i % PARTITIONS as u64 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), consume)
        .await
        .expect("deadline");
    support::close(consumer).await;
}

// --------------------------------------------------------------- parent --

/// Criterion measurement: RSS growth in bytes, as reported by a child.
struct RssGrowth;

struct Megabytes;

impl ValueFormatter for Megabytes {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        for v in values {
            *v /= 1e6;
        }
        "MB"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        _throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        for v in values {
            *v /= 1e6;
        }
        "MB/element"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "B"
    }
}

impl Measurement for RssGrowth {
    type Intermediate = ();
    type Value = f64;

    fn start(&self) {}

    fn end(&self, _: ()) -> f64 {
        0.0
    }

    fn add(&self, a: &f64, b: &f64) -> f64 {
        a + b
    }

    fn zero(&self) -> f64 {
        0.0
    }

    fn to_f64(&self, v: &f64) -> f64 {
        *v
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &Megabytes
    }
}

#[derive(Debug, Clone, Copy)]
struct Child {
    before_kb: u64,
    peak_kb: u64,
    secs: f64,
}

fn run_child(kind: &str, bootstrap: &str, topic: &str, total: u64) -> Child {
    let out = Command::new(std::env::current_exe().expect("current exe"))
        .env(CHILD_ENV, kind)
        .env("BENCH_BOOTSTRAP", bootstrap)
        .env("BENCH_TOPIC", topic)
        .env("BENCH_TOTAL", total.to_string())
        .output()
        .expect("child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {kind} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT from child {kind}: {stdout}"));
    let field = |name: &str| -> &str {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("{name} missing in {line}"))
    };
    Child {
        before_kb: field("before_kb").parse().unwrap(),
        peak_kb: field("peak_kb").parse().unwrap(),
        secs: field("secs").parse().unwrap(),
    }
}

static SAMPLES: Mutex<Vec<(&'static str, Child)>> = Mutex::new(Vec::new());

fn main() {
    if let Ok(kind) = std::env::var(CHILD_ENV) {
        child(&kind);
        return;
    }
    let one_x = (MAX_BUFFERED * PARTITIONS as usize) as u64;
    let broker = support::mock_broker();
    let bootstrap = broker.bootstrap().to_owned();
    let topic_1x = support::topic(&broker, "mem-1x", PARTITIONS);
    let topic_10x = support::topic(&broker, "mem-10x", PARTITIONS);
    support::produce(&bootstrap, &topic_1x, PARTITIONS, MAX_BUFFERED, PAYLOAD);
    support::produce(
        &bootstrap,
        &topic_10x,
        PARTITIONS,
        MAX_BUFFERED * 10,
        PAYLOAD,
    );
    // The plateau check: one more FreshConsumer run on a topic of
    // `BENCH_MEMORY_EXTRA_FACTOR` (default 20, 0 = off) times the bound,
    // after criterion's samples (about 20 s).
    let extra_factor: usize = env_or("BENCH_MEMORY_EXTRA_FACTOR", 20);
    let topic_extra = (extra_factor > 0).then(|| {
        let t = support::topic(&broker, "mem-extra", PARTITIONS);
        support::produce(
            &bootstrap,
            &t,
            PARTITIONS,
            MAX_BUFFERED * extra_factor,
            PAYLOAD,
        );
        t
    });
    println!(
        "memory: {PARTITIONS} partitions, max_buffered_records {MAX_BUFFERED} (bound {one_x} records), {PAYLOAD} B payloads, queued.max.messages.kbytes={QUEUED_KBYTES}; {}",
        support::machine()
    );

    let cases: [(&'static str, &'static str, &str, u64); 4] = [
        ("fresh_1x", "fresh", &topic_1x, one_x),
        ("fresh_10x", "fresh", &topic_10x, one_x * 10),
        ("raw_1x", "raw", &topic_1x, one_x),
        ("raw_10x", "raw", &topic_10x, one_x * 10),
    ];
    let mut c = support::criterion(Duration::from_secs(5)).with_measurement(RssGrowth);
    {
        let mut g = support::flat_group(&mut c, "memory_rss_growth");
        for (name, kind, topic, total) in cases {
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    support::runs(iters, || {
                        let r = run_child(kind, &bootstrap, topic, total);
                        SAMPLES.lock().unwrap().push((name, r));
                        r.peak_kb.saturating_sub(r.before_kb) as f64 * 1024.0
                    })
                })
            });
        }
        g.finish();
    }
    c.final_summary();

    let samples = SAMPLES.lock().unwrap();
    let growth_mb = |name: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, r)| r.peak_kb.saturating_sub(r.before_kb) as f64 * 1024.0 / 1e6)
            .collect()
    };
    println!("\nmemory summary: RSS growth of a consuming child process, MB (peak - before)");
    println!(
        "  {:<10} {:>8} {:>5} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "case", "records", "runs", "median", "min", "max", "before", "secs"
    );
    for (name, _, _, total) in cases {
        let g = growth_mb(name);
        let (lo, hi) = min_max(&g);
        let before: Vec<f64> = samples
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, r)| r.before_kb as f64 * 1024.0 / 1e6)
            .collect();
        let secs: Vec<f64> = samples
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, r)| r.secs)
            .collect();
        println!(
            "  {name:<10} {total:>8} {:>5} {:>9.1} {lo:>9.1} {hi:>9.1} {:>10.1} {:>9.2}",
            g.len(),
            median(&g),
            median(&before),
            median(&secs)
        );
    }
    let extra = topic_extra.as_ref().map(|topic| {
        let total = one_x * extra_factor as u64;
        let r = run_child("fresh", &bootstrap, topic, total);
        let growth = r.peak_kb.saturating_sub(r.before_kb) as f64 * 1024.0 / 1e6;
        println!(
            "  {:<10} {total:>8} {:>5} {growth:>9.1} {:>9} {:>9} {:>10.1} {:>9.2}",
            format!("fresh_{extra_factor}x"),
            1,
            "-",
            "-",
            r.before_kb as f64 * 1024.0 / 1e6,
            r.secs
        );
        growth
    });
    let payload_mb = |records: u64| records as f64 * PAYLOAD as f64 / 1e6;
    let m = |name: &str| median(&growth_mb(name));
    let fresh_growth = m("fresh_10x") - m("fresh_1x");
    let raw_growth = m("raw_10x") - m("raw_1x");
    let library = fresh_growth - raw_growth;
    println!(
        "  the library's bound: {one_x} records = {:.1} MB of payload (plus librdkafka's prefetch)",
        payload_mb(one_x)
    );
    println!(
        "  1x -> 10x: FreshConsumer {fresh_growth:+.1} MB, raw rdkafka {raw_growth:+.1} MB, the library's own {library:+.1} MB (an unbounded buffer: about {:+.1} MB)",
        payload_mb(one_x * 9)
    );
    if let Some(g) = extra {
        let step = g - m("fresh_10x");
        let unbounded = payload_mb(one_x * (extra_factor as u64 - 10));
        println!(
            "  10x -> {extra_factor}x: FreshConsumer {step:+.1} MB (an unbounded buffer: about {unbounded:+.1} MB); flat past the bound (< 10 %): {}",
            if step < 0.1 * unbounded { "yes" } else { "NO" }
        );
    }
}
