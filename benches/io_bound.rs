//! I/O-bound handlers: each record's handler awaits 1 ms
//! (`tokio::time::sleep`); 12 partitions run concurrently.
//!
//!     cargo bench --bench io_bound
//!     BENCH_IO_RECORDS_PER_PARTITION=500 BENCH_IO_RAW_RECORDS=1000 cargo bench --bench io_bound
//!
//! Latest results, with the date, machine and commit: benches/README.md
//! (from the summary this bench prints at the end).
//!
//! What is measured: 12 partitions x 500 records (100 B) produced once; each
//! iteration consumes them from the start with a fresh group (all metrics
//! on, real SDK instruments), timed from the first handler call to the last
//! handler completion. Compared in the same run with:
//! - the ideal, 12 x 1,000 records/s (issue 7's target: >= 0.9 x ideal);
//! - `timer_floor`: the same 12 x 500 sleeps of 1 ms in 12 plain tokio tasks,
//!   no Kafka: what tokio's timer allows (it rounds a sleep up to the next
//!   millisecond tick, so one sleep(1 ms) takes 1-2 ms and no handler
//!   awaiting it can reach 1,000/s per partition);
//! - `raw_sequential` (summary only, one run): a raw rdkafka `StreamConsumer`
//!   loop awaiting the same handler inline, one record at a time, which is
//!   what partition parallelism is for.
//!
//! Because tokio's timer cannot wait 1 ms (a 1 ms sleep takes about 2 ms
//! here), the same pair runs again with a precise 1 ms wait
//! (`*_precise_1ms`): the handler awaits a oneshot that a dedicated timer
//! thread completes 1 ms after the call, standing in for a remote call of
//! 1 ms. The thread sleeps to the earliest deadline minus its measured
//! wake-up lateness (calibrated at start), so a wait averages about 1 ms;
//! the summary prints the mean wait it measured.
//!
//! Every consumer sets `fetch.queue.backoff.ms=10`, `fetch.wait.max.ms=10`
//! and `session.timeout.ms=6000` (see `support::CONSUMER_PROPS`).

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Throughput;
use rdkafka::consumer::{Consumer, StreamConsumer};

use support::{Progress, Timed, env_or, median, min_max, unique};

const DEADLINE: Duration = Duration::from_secs(120);
const WORK: Duration = Duration::from_millis(1);

/// How a handler waits its 1 ms.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wait {
    /// `tokio::time::sleep(1 ms)`: 1-2 ms (millisecond timer wheel).
    TokioSleep,
    /// A oneshot completed by [`PreciseTimer`] 1 ms later.
    Precise,
}

/// A timer thread with sub-millisecond precision: completes each waiter's
/// oneshot at its deadline.
struct PreciseTimer {
    tx: std::sync::mpsc::Sender<(Instant, tokio::sync::oneshot::Sender<()>)>,
    /// How early the thread wakes for a deadline: its median lateness.
    slack: Duration,
    waits: AtomicU64,
    waited_ns: AtomicU64,
}

impl PreciseTimer {
    fn start() -> Self {
        // The thread's wake-up lateness for a 1 ms timed wait.
        let (_keep, probe) = std::sync::mpsc::channel::<()>();
        let mut late: Vec<u64> = (0..200)
            .map(|_| {
                let t = Instant::now();
                let _ = probe.recv_timeout(WORK);
                t.elapsed().saturating_sub(WORK).as_nanos() as u64
            })
            .collect();
        late.sort_unstable();
        let slack = Duration::from_nanos(late[late.len() / 2]);
        let (tx, rx) = std::sync::mpsc::channel::<(Instant, tokio::sync::oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name("precise-timer".into())
            .spawn(move || {
                use std::cmp::Reverse;
                use std::collections::{BinaryHeap, HashMap};
                use std::sync::mpsc::RecvTimeoutError;
                let mut seq = 0u64;
                let mut heap: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
                let mut waiters = HashMap::new();
                loop {
                    // Wake `slack` before the earliest deadline.
                    let next = heap
                        .peek()
                        .map(|Reverse((d, _))| d.checked_sub(slack).unwrap_or(*d));
                    let got = match next {
                        None => rx.recv().ok(),
                        Some(wake) => {
                            let now = Instant::now();
                            if wake <= now {
                                let Reverse((_, id)) = heap.pop().expect("peeked");
                                let w: tokio::sync::oneshot::Sender<()> =
                                    waiters.remove(&id).expect("waiter");
                                let _ = w.send(());
                                continue;
                            }
                            match rx.recv_timeout(wake - now) {
                                Ok(v) => Some(v),
                                Err(RecvTimeoutError::Timeout) => continue,
                                Err(RecvTimeoutError::Disconnected) => None,
                            }
                        }
                    };
                    let Some((deadline, waiter)) = got else {
                        return;
                    };
                    seq += 1;
                    heap.push(Reverse((deadline, seq)));
                    waiters.insert(seq, waiter);
                }
            })
            .expect("timer thread");
        PreciseTimer {
            tx,
            slack,
            waits: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        }
    }

    async fn wait(&self, d: Duration) {
        let start = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx.send((start + d, tx)).expect("timer thread");
        let _ = rx.await;
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.waited_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// The mean precise wait so far.
    fn mean_wait(&self) -> Duration {
        let n = self.waits.load(Ordering::Relaxed).max(1);
        Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed) / n)
    }
}

async fn wait(timer: &PreciseTimer, how: Wait) {
    match how {
        Wait::TokioSleep => tokio::time::sleep(WORK).await,
        Wait::Precise => timer.wait(WORK).await,
    }
}

struct Setup {
    timer: Arc<PreciseTimer>,
    bootstrap: String,
    topic: String,
    partitions: i32,
    per_partition: u64,
}

impl Setup {
    fn total(&self) -> u64 {
        self.partitions as u64 * self.per_partition
    }

    async fn fresh(&self, how: Wait) -> Duration {
        let progress = Progress::new(self.total());
        let timer = Arc::clone(&self.timer);
        let handler = Timed {
            progress: Arc::clone(&progress),
            work: move || {
                let timer = Arc::clone(&timer);
                async move { wait(&timer, how).await }
            },
        };
        let c = support::fresh_consumer(
            handler,
            &self.bootstrap,
            [self.topic.as_str()],
            unique("io"),
        );
        support::run_metrics_on(c, &progress, DEADLINE).await;
        progress.elapsed()
    }

    /// 12 tasks x `per_partition` sleeps of 1 ms: tokio's timer floor.
    async fn timer_floor(&self, how: Wait) -> Duration {
        let start = Instant::now();
        let tasks: Vec<_> = (0..self.partitions)
            .map(|_| {
                let n = self.per_partition;
                let timer = Arc::clone(&self.timer);
                tokio::spawn(async move {
                    for _ in 0..n {
                        wait(&timer, how).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("sleeper");
        }
        start.elapsed()
    }

    /// A raw consumer awaiting the handler inline, for `records` records.
    async fn raw_sequential(&self, records: u64) -> Duration {
        let consumer: StreamConsumer = support::raw_config(&self.bootstrap, &unique("io-raw"))
            .create()
            .expect("raw consumer");
        consumer.subscribe(&[&self.topic]).expect("subscribe");
        let mut first = None;
        let consume = async {
            for _ in 0..records {
                let m = consumer.recv().await.expect("recv");
                first.get_or_insert_with(Instant::now);
                drop(m);
                tokio::time::sleep(WORK).await;
            }
        };
        tokio::time::timeout(DEADLINE, consume)
            .await
            .expect("deadline");
        let took = first.expect("a record").elapsed();
        support::close(consumer).await;
        took
    }
}

static SAMPLES: Mutex<Vec<(&'static str, f64)>> = Mutex::new(Vec::new());

fn main() {
    let partitions: i32 = env_or("BENCH_IO_PARTITIONS", 12);
    let per_partition: u64 = env_or("BENCH_IO_RECORDS_PER_PARTITION", 500);
    let raw_records: u64 = env_or("BENCH_IO_RAW_RECORDS", 1_000);

    let broker = support::mock_broker();
    let topic = support::topic(&broker, "io-bound", partitions);
    support::produce(
        broker.bootstrap(),
        &topic,
        partitions,
        per_partition as usize,
        100,
    );
    let setup = Setup {
        timer: Arc::new(PreciseTimer::start()),
        bootstrap: broker.bootstrap().to_owned(),
        topic,
        partitions,
        per_partition,
    };
    let total = setup.total();
    let ideal = partitions as f64 * 1_000.0;
    println!(
        "io_bound: {partitions} partitions x {per_partition} records, handler sleeps 1 ms; ideal {ideal:.0} records/s; {}",
        support::machine()
    );
    let rt = support::runtime();

    let mut c = support::criterion(Duration::from_secs(5));
    {
        let mut g = support::flat_group(&mut c, "io_bound");
        g.throughput(Throughput::Elements(total));
        let mut bench = |name: &'static str, run: &dyn Fn() -> Duration| {
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    support::runs(iters, || {
                        let took = run();
                        SAMPLES
                            .lock()
                            .unwrap()
                            .push((name, total as f64 / took.as_secs_f64()));
                        took
                    })
                })
            });
        };
        bench("timer_floor", &|| {
            rt.block_on(setup.timer_floor(Wait::TokioSleep))
        });
        bench("fresh_metrics_on", &|| {
            rt.block_on(setup.fresh(Wait::TokioSleep))
        });
        bench("timer_floor_precise_1ms", &|| {
            rt.block_on(setup.timer_floor(Wait::Precise))
        });
        bench("fresh_metrics_on_precise_1ms", &|| {
            rt.block_on(setup.fresh(Wait::Precise))
        });
        g.finish();
    }
    c.final_summary();

    let raw_rate = if raw_records > 0 {
        let took = rt.block_on(setup.raw_sequential(raw_records));
        raw_records as f64 / took.as_secs_f64()
    } else {
        f64::NAN
    };

    let samples = SAMPLES.lock().unwrap();
    let rates = |name: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|&(_, r)| r)
            .collect()
    };
    println!("\nio_bound summary: {total} records per run, ideal {ideal:.0} records/s");
    println!(
        "  {:<30} {:>5} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "variant", "runs", "median/s", "min/s", "max/s", "vs ideal", "vs floor"
    );
    let mut verdicts = Vec::new();
    for (floor_name, name) in [
        ("timer_floor", "fresh_metrics_on"),
        ("timer_floor_precise_1ms", "fresh_metrics_on_precise_1ms"),
    ] {
        let floor = median(&rates(floor_name));
        for n in [floor_name, name] {
            let r = rates(n);
            let (lo, hi) = min_max(&r);
            let m = median(&r);
            println!(
                "  {n:<30} {:>5} {m:>10.0} {lo:>10.0} {hi:>10.0} {:>9.2} {:>9.2}",
                r.len(),
                m / ideal,
                m / floor
            );
        }
        let fresh = median(&rates(name));
        verdicts.push(format!(
            "{name}: {:.2} x ideal ({}), {:.2} x its timer floor",
            fresh / ideal,
            if fresh / ideal >= 0.9 {
                "met"
            } else {
                "MISSED"
            },
            fresh / floor
        ));
    }
    println!(
        "  {:<30} {:>5} {raw_rate:>10.0} {:>10} {:>10} {:>9.2} {:>9}",
        "raw_sequential (tokio sleep)",
        1,
        "-",
        "-",
        raw_rate / ideal,
        "-"
    );
    println!(
        "  precise wait: mean {:.3?} (the timer thread wakes {:.0?} early to absorb its lateness)",
        setup.timer.mean_wait(),
        setup.timer.slack
    );
    println!("  target >= 0.90 x ideal:");
    for v in verdicts {
        println!("    {v}");
    }
    drop(samples);
    drop(rt);
    drop(broker);
}
