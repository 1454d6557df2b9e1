//! A hot partition: one partition, 1,000 keys, a handler that awaits 1 ms.
//! Partition ordering (one record at a time) against key ordering
//! (`ProcessingOrder::Key`, different keys concurrently), in one run.
//!
//!     cargo bench --bench hot_partition
//!     BENCH_HOT_RECORDS=5000 BENCH_HOT_IN_FLIGHT=16,64 cargo bench --bench hot_partition
//!
//! Latest results: see benches/README.md (the summary this bench prints at
//! the end is what goes into it).
//!
//! What is measured: one partition of `BENCH_HOT_RECORDS` (3,000) records
//! (100 B payload), whose keys are drawn from 1,000 keys (`key-0000` ..
//! `key-0999`) by a fixed pseudo-random sequence, so records of one key
//! sometimes follow each other closely (a round robin over the keys would
//! never make a record wait behind its key). Produced once; each iteration
//! consumes it from the start with a fresh group (all metrics on, real SDK
//! instruments), timed from the first handler call to the last handler
//! completion (group join and shutdown are not timed):
//! - `partition`: `ProcessingOrder::Partition` (the default);
//! - `key_N`: `ProcessingOrder::Key { max_in_flight: N }` for each N of
//!   `BENCH_HOT_IN_FLIGHT` (16, 64, 256).
//!
//! The handler awaits `tokio::time::sleep(1 ms)`, which takes 1-2 ms
//! (tokio's timer has millisecond ticks), so `timer_floor` measures the same
//! sleeps one after the other in a plain task: what one record at a time can
//! reach. The bound of `key_N` is N times that floor (fewer when records of
//! one key meet).
//!
//! After criterion's samples, a paired pass runs the variants round-robin
//! (`BENCH_PAIRED_ROUNDS`, default 3) and prints the median records/s and
//! the median per-round ratio to `partition`.
//!
//! Every consumer sets `fetch.queue.backoff.ms=10`, `fetch.wait.max.ms=10`
//! and `session.timeout.ms=6000` (see `support::CONSUMER_PROPS`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Throughput;
use fresh_consumer::ProcessingOrder;

use support::{Progress, Timed, env_or, median, min_max, unique};

const DEADLINE: Duration = Duration::from_secs(300);
const WORK: Duration = Duration::from_millis(1);
const KEYS: u64 = 1_000;

/// One variant: a processing order, or the timer floor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    TimerFloor,
    Fresh(ProcessingOrder),
}

impl Variant {
    fn name(self) -> String {
        match self {
            Variant::TimerFloor => "timer_floor".into(),
            Variant::Fresh(ProcessingOrder::Key { max_in_flight }) => {
                format!("key_{max_in_flight}")
            }
            Variant::Fresh(_) => "partition".into(),
        }
    }
}

struct Setup {
    bootstrap: String,
    topic: String,
    records: u64,
}

impl Setup {
    async fn run(&self, v: Variant) -> Duration {
        match v {
            Variant::TimerFloor => {
                let start = Instant::now();
                for _ in 0..self.records {
                    tokio::time::sleep(WORK).await;
                }
                start.elapsed()
            }
            Variant::Fresh(order) => self.fresh(order).await,
        }
    }

    async fn fresh(&self, order: ProcessingOrder) -> Duration {
        let progress = Progress::new(self.records);
        let handler = Timed {
            progress: Arc::clone(&progress),
            work: || tokio::time::sleep(WORK),
        };
        let c = support::fresh_consumer(
            handler,
            &self.bootstrap,
            [self.topic.as_str()],
            unique("hot"),
        )
        .processing_order(order);
        support::run_metrics_on(c, &progress, DEADLINE).await;
        progress.elapsed()
    }
}

/// Produces `records` records to partition 0 of `topic`, keys drawn from
/// [`KEYS`] keys by a fixed xorshift sequence (the mock keeps them all).
fn produce_hot(bootstrap: &str, topic: &str, records: u64) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    support::produce_keyed(bootstrap, topic, 1, records as usize, 100, |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        format!("key-{:04}", x % KEYS)
    });
}

static SAMPLES: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

fn note(name: &str, records: u64, took: Duration) -> f64 {
    let rate = records as f64 / took.as_secs_f64();
    SAMPLES.lock().unwrap().push((name.to_owned(), rate));
    rate
}

fn main() {
    let records: u64 = env_or("BENCH_HOT_RECORDS", 3_000);
    let rounds: usize = env_or("BENCH_PAIRED_ROUNDS", 3);
    let in_flight: Vec<usize> = std::env::var("BENCH_HOT_IN_FLIGHT")
        .unwrap_or_else(|_| "16,64,256".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n >= 1)
        .collect();

    let broker = support::mock_broker();
    let topic = support::topic(&broker, "hot-partition", 1);
    produce_hot(broker.bootstrap(), &topic, records);
    println!(
        "hot_partition: 1 partition x {records} records, {KEYS} keys (pseudo-random order), handler sleeps 1 ms; {}",
        support::machine()
    );
    let setup = Setup {
        bootstrap: broker.bootstrap().to_owned(),
        topic,
        records,
    };
    let mut variants = vec![
        Variant::TimerFloor,
        Variant::Fresh(ProcessingOrder::Partition),
    ];
    variants.extend(
        in_flight
            .iter()
            .map(|&n| Variant::Fresh(ProcessingOrder::Key { max_in_flight: n })),
    );
    let rt = support::runtime();

    let mut c = support::criterion(Duration::from_secs(1));
    {
        let mut g = support::flat_group(&mut c, "hot_partition");
        g.throughput(Throughput::Elements(records));
        for &v in &variants {
            let name = v.name();
            g.bench_function(name.as_str(), |b| {
                b.iter_custom(|iters| {
                    support::runs(iters, || {
                        let took = rt.block_on(setup.run(v));
                        note(&name, records, took);
                        took
                    })
                })
            });
        }
        g.finish();
    }
    c.final_summary();
    summarize(
        "criterion samples (variants one after the other)",
        &variants,
        records,
    );

    if rounds > 0 {
        SAMPLES.lock().unwrap().clear();
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            let rates: Vec<f64> = variants
                .iter()
                .map(|&v| note(&v.name(), records, rt.block_on(setup.run(v))))
                .collect();
            for (i, r) in rates.iter().enumerate() {
                ratios[i].push(r / rates[1]);
            }
        }
        summarize(
            &format!("paired pass ({rounds} rounds, round-robin)"),
            &variants,
            records,
        );
        println!("  per-round ratio to partition ordering:");
        for (v, r) in variants.iter().zip(&ratios).skip(2) {
            let (lo, hi) = min_max(r);
            println!(
                "    {:<12} {:>7.1}x (min {lo:.1}, max {hi:.1})",
                v.name(),
                median(r)
            );
        }
    }
    drop(rt);
    drop(broker);
}

fn summarize(title: &str, variants: &[Variant], records: u64) {
    let samples = SAMPLES.lock().unwrap();
    let rates = |name: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|(n, _)| n == name)
            .map(|&(_, r)| r)
            .collect()
    };
    let floor = median(&rates("timer_floor"));
    let partition = median(&rates("partition"));
    println!("\nhot_partition summary, {title}: {records} records per run");
    println!(
        "  {:<12} {:>5} {:>12} {:>12} {:>12} {:>13} {:>9}",
        "variant", "runs", "median rec/s", "min rec/s", "max rec/s", "vs partition", "vs bound"
    );
    for v in variants {
        let name = v.name();
        let r = rates(&name);
        let (lo, hi) = min_max(&r);
        let m = median(&r);
        // What the timer allows: one sleep at a time, or N at once.
        let bound = match v {
            Variant::Fresh(ProcessingOrder::Key { max_in_flight }) => floor * *max_in_flight as f64,
            _ => floor,
        };
        println!(
            "  {name:<12} {:>5} {m:>12.0} {lo:>12.0} {hi:>12.0} {:>13.2} {:>9.2}",
            r.len(),
            m / partition,
            m / bound
        );
    }
}
