//! Produce-to-handled latency at a steady rate (issue 28, item 4):
//! FreshConsumer (all metrics on) against a raw rdkafka `StreamConsumer`
//! calling the same handler, on the mock broker or on a real one.
//!
//!     cargo bench --bench latency                       # the in-process mock broker
//!     FRESH_CONSUMER_TEST_BOOTSTRAP=127.0.0.1:PORT cargo bench --bench latency   # a real broker
//!     cargo bench --bench latency -- --test             # smoke: 1 round of 1 s per case
//!
//! Latest results, with the date, machine and commit: benches/latency.md.
//!
//! What is measured: a producer thread in this process sends
//! `BENCH_LATENCY_RATE` records/s (10,000) round-robin to a new topic of 4
//! partitions for `BENCH_LATENCY_SECS` (5) per run, with `linger.ms` 0 and
//! 5 (`BENCH_LATENCY_LINGERS`, "0,5"). Each record's 100 B payload carries its
//! sequence number and the monotonic time of its `send()` call. The
//! handler, the same function for both consumers, reads that time when it
//! is called: produce-to-handled is the handler's call time minus the
//! record's `send()` time (producer batching, the broker's append and
//! fetch, the client's fetch queue and, for FreshConsumer, the hand-over to
//! a partition worker). One run per consumer per round, in alternating
//! order, `BENCH_LATENCY_ROUNDS` (5) rounds; each run has a new topic and a
//! new group, joins and reads one probe record per partition before the
//! steady stream starts, so no join and no backlog is in the figures. Every
//! sequence number must be handled (duplicates are counted, not timed
//! twice).
//!
//! - `raw`: `StreamConsumer::recv()` in a loop that calls the handler
//!   inline, notes the next offset per partition and commits it with
//!   `CommitMode::Async` every 100 ms;
//! - `fresh`: `FreshConsumer` with an `SdkMeterProvider` (a `PeriodicReader`
//!   every 60 s to an exporter that discards), `commit_interval` 100 ms, the
//!   rest at its defaults.
//!
//! Both set `support::CONSUMER_PROPS` (`fetch.wait.max.ms=10`,
//! `fetch.queue.backoff.ms=10`, `session.timeout.ms=6000`). On the mock an
//! empty fetch is held `fetch.wait.max.ms`, so its figures are
//! fetch-bound; a real broker answers a waiting fetch as soon as records
//! arrive.
//!
//! On a real broker a raw run of `BENCH_LATENCY_BROKER_WARMUP_SECS` (5; 0
//! on the mock and with `--test`) per `linger.ms` comes before the rounds
//! and is not in the figures: a just-started broker's first run stalled
//! for seconds at p99 on three days. The next runs can still be slower
//! (41-155 ms at p99 against 4-10 ms), so read the median over rounds.
//!
//! The summary gives, per `linger.ms` and consumer, the median over rounds
//! of p50, p99, p99.9 and max, the process CPU per record (the producer
//! thread included: the same for both), and the median of the per-round
//! differences fresh - raw at p50 and p99. Target: the library adds at most
//! 1 ms at p99.

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

use fresh_consumer::Record;
use support::{COMMIT_EVERY, env_or, median, min_max};

const PARTITIONS: i32 = 4;
const PAYLOAD_BYTES: usize = 100;
/// The sequence number of a probe record (one per partition, before the
/// steady stream): it proves the consumer is assigned and reading.
const PROBE: u64 = u64::MAX;

/// The process-wide monotonic origin of the send and handle times.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    base().elapsed().as_nanos() as u64
}

/// One run's observations: the latency of each sequence number (0 = not
/// handled yet), the probes seen, the duplicates.
struct Observed {
    latency_ns: Vec<AtomicU64>,
    handled: AtomicUsize,
    probes: AtomicUsize,
    duplicates: AtomicUsize,
}

impl Observed {
    fn new(records: usize) -> Arc<Self> {
        Arc::new(Observed {
            latency_ns: (0..records).map(|_| AtomicU64::new(0)).collect(),
            handled: AtomicUsize::new(0),
            probes: AtomicUsize::new(0),
            duplicates: AtomicUsize::new(0),
        })
    }

    /// The handler both consumers call: notes the record's latency.
    fn handle(&self, payload: Option<&[u8]>) {
        let now = now_ns();
        let Some(p) = payload.filter(|p| p.len() >= 16) else {
            panic!("a record without the bench's payload");
        };
        let seq = u64::from_le_bytes(p[..8].try_into().unwrap());
        let sent = u64::from_le_bytes(p[8..16].try_into().unwrap());
        if seq == PROBE {
            self.probes.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let slot = &self.latency_ns[seq as usize];
        if slot.swap(now.saturating_sub(sent).max(1), Ordering::Relaxed) == 0 {
            self.handled.fetch_add(1, Ordering::Relaxed);
        } else {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
    }
}

enum Broker {
    Mock(support::MockBroker),
    Real(String),
}

impl Broker {
    fn bootstrap(&self) -> &str {
        match self {
            Broker::Mock(b) => b.bootstrap(),
            Broker::Real(b) => b,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Broker::Mock(_) => "mock",
            Broker::Real(_) => "real",
        }
    }

    async fn topic(&self, prefix: &str) -> String {
        match self {
            Broker::Mock(b) => support::topic(b, prefix, PARTITIONS),
            Broker::Real(bootstrap) => {
                let name = support::unique(prefix);
                let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                    .set("bootstrap.servers", bootstrap)
                    .create()
                    .expect("admin client");
                let results = admin
                    .create_topics(
                        [&NewTopic::new(
                            &name,
                            PARTITIONS,
                            TopicReplication::Fixed(1),
                        )],
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                    )
                    .await
                    .expect("create topic");
                for r in results {
                    r.map_err(|(t, e)| format!("{t}: {e}"))
                        .expect("create topic");
                }
                name
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Raw,
    Fresh,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::Fresh => "fresh",
        }
    }
}

/// One run's figures, in microseconds.
#[derive(Clone, Copy, Debug)]
struct RunStats {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    cpu_us_per_record: f64,
    duplicates: usize,
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1_000.0
}

/// Sends the probes, waits for the consumer to see them, then sends
/// `records` at `rate` per second and waits for all to be handled.
async fn drive(
    bootstrap: &str,
    topic: &str,
    linger_ms: u32,
    rate: u64,
    records: usize,
    observed: &Arc<Observed>,
) -> Result<Duration, String> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", linger_ms.to_string())
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    let send = |seq: u64, partition: i32| -> Result<(), String> {
        let mut payload = [b'x'; PAYLOAD_BYTES];
        payload[..8].copy_from_slice(&seq.to_le_bytes());
        payload[8..16].copy_from_slice(&now_ns().to_le_bytes());
        let key = format!("k{:07}", seq % 10_000_000);
        producer
            .send(
                BaseRecord::to(topic)
                    .partition(partition)
                    .key(&key)
                    .payload(&payload[..]),
            )
            .map_err(|(e, _)| format!("send: {e}"))
    };
    for p in 0..PARTITIONS {
        send(PROBE, p)?;
    }
    wait_until(Duration::from_secs(60), || {
        observed.probes.load(Ordering::Relaxed) >= PARTITIONS as usize
    })
    .await
    .map_err(|_| "the consumer did not read the probes within 60 s".to_owned())?;

    // The steady stream, paced on a 1 ms tick from its own thread (the
    // runtime's workers are the consumers').
    let cpu_before = support::process_cpu();
    let pacing = {
        let topic = topic.to_owned();
        let producer = producer.clone();
        std::thread::spawn(move || -> Result<(), String> {
            let started = Instant::now();
            let mut next = 0u64;
            while (next as usize) < records {
                let due =
                    ((started.elapsed().as_secs_f64() * rate as f64) as u64).min(records as u64);
                while next < due {
                    let mut payload = [b'x'; PAYLOAD_BYTES];
                    payload[..8].copy_from_slice(&next.to_le_bytes());
                    payload[8..16].copy_from_slice(&now_ns().to_le_bytes());
                    let key = format!("k{:07}", next % 10_000_000);
                    let partition = (next % PARTITIONS as u64) as i32;
                    let mut record = BaseRecord::to(&topic)
                        .partition(partition)
                        .key(&key)
                        .payload(&payload[..]);
                    // A full queue is retried after the producer drains it.
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((e, r)) if is_queue_full(&e) => {
                                record = r;
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            Err((e, _)) => return Err(format!("send: {e}")),
                        }
                    }
                    next += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })
    };
    let sent_for = Duration::from_secs_f64(records as f64 / rate as f64);
    tokio::task::spawn_blocking(move || pacing.join().expect("pacing thread"))
        .await
        .expect("pacing")?;
    wait_until(sent_for + Duration::from_secs(60), || {
        observed.handled.load(Ordering::Relaxed) >= records
    })
    .await
    .map_err(|_| {
        format!(
            "{} of {records} records handled within 60 s of the last send",
            observed.handled.load(Ordering::Relaxed)
        )
    })?;
    let cpu = support::process_cpu().saturating_sub(cpu_before);
    producer
        .flush(Duration::from_secs(10))
        .map_err(|e| format!("flush: {e}"))?;
    Ok(cpu)
}

fn is_queue_full(e: &rdkafka::error::KafkaError) -> bool {
    matches!(
        e,
        rdkafka::error::KafkaError::MessageProduction(rdkafka::error::RDKafkaErrorCode::QueueFull)
    )
}

/// Polls `done` every millisecond until it holds or `deadline` passed.
async fn wait_until(deadline: Duration, done: impl Fn() -> bool) -> Result<(), ()> {
    let until = Instant::now() + deadline;
    while !done() {
        if Instant::now() > until {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

async fn run_raw(
    bootstrap: &str,
    topic: &str,
    linger_ms: u32,
    rate: u64,
    (warmup, records): (usize, usize),
) -> Result<RunStats, String> {
    let observed = Observed::new(records);
    let consumer: StreamConsumer = support::raw_config(bootstrap, &support::unique("lat-raw"))
        .create()
        .map_err(|e| format!("raw consumer: {e}"))?;
    consumer
        .subscribe(&[topic])
        .map_err(|e| format!("subscribe: {e}"))?;
    let consumer = Arc::new(consumer);
    let stop = Arc::new(tokio::sync::Notify::new());
    let reader = {
        let consumer = Arc::clone(&consumer);
        let observed = Arc::clone(&observed);
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut next: Vec<Option<i64>> = vec![None; PARTITIONS as usize];
            let mut last_commit = Instant::now();
            let stopped = stop.notified();
            tokio::pin!(stopped);
            loop {
                let m = tokio::select! {
                    m = consumer.recv() => m,
                    _ = &mut stopped => break,
                };
                let m = m.expect("raw recv");
                // The same handler as FreshConsumer's, run inline.
                observed.handle(m.payload());
                next[m.partition() as usize] = Some(m.offset() + 1);
                if last_commit.elapsed() >= COMMIT_EVERY {
                    last_commit = Instant::now();
                    let mut tpl = TopicPartitionList::new();
                    for (p, o) in next.iter().enumerate() {
                        if let Some(o) = o {
                            tpl.add_partition_offset(m.topic(), p as i32, Offset::Offset(*o))
                                .expect("tpl");
                        }
                    }
                    let _ = consumer.commit(&tpl, CommitMode::Async);
                }
            }
        })
    };
    let result = drive(bootstrap, topic, linger_ms, rate, records, &observed).await;
    stop.notify_one();
    reader.await.map_err(|e| format!("raw reader: {e}"))?;
    let consumer = Arc::into_inner(consumer).expect("the reader stopped");
    support::close(consumer).await;
    stats(&observed, result?, warmup, rate)
}

async fn run_fresh(
    bootstrap: &str,
    topic: &str,
    linger_ms: u32,
    rate: u64,
    (warmup, records): (usize, usize),
) -> Result<RunStats, String> {
    let observed = Observed::new(records);
    let handler = {
        let observed = Arc::clone(&observed);
        move |record: Record| {
            observed.handle(record.payload());
            std::future::ready(Ok::<(), Infallible>(()))
        }
    };
    let (provider, _exporter) = support::sdk_provider();
    let consumer =
        support::fresh_consumer(handler, bootstrap, [topic], support::unique("lat-fresh"))
            .meter_provider(&provider);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run_until(async move {
        let _ = stop_rx.await;
    }));
    let result = drive(bootstrap, topic, linger_ms, rate, records, &observed).await;
    let _ = stop_tx.send(());
    running
        .await
        .map_err(|e| format!("fresh task: {e}"))?
        .map_err(|e| format!("fresh run: {e}"))?;
    let _ = provider.shutdown();
    stats(&observed, result?, warmup, rate)
}

/// The figures of the records after the first `warmup` (which must have
/// been handled too); CPU per record over all of them.
fn stats(observed: &Observed, cpu: Duration, warmup: usize, rate: u64) -> Result<RunStats, String> {
    let all: Vec<u64> = observed
        .latency_ns
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    if let Some(missing) = all.iter().position(|&v| v == 0) {
        return Err(format!("sequence {missing} was never handled"));
    }
    let records = all.len();
    let mut ns = all[warmup.min(records)..].to_vec();
    if std::env::var_os("BENCH_LATENCY_TRACE").is_some() {
        // Where in the stream the slow records were: the worst latency per
        // 100 ms of send time after the warm-up, for the windows above 20 ms.
        let per_window = (rate as usize / 10).max(1);
        let slow: Vec<String> = ns
            .chunks(per_window)
            .enumerate()
            .filter_map(|(i, c)| {
                let worst = *c.iter().max()?;
                (worst > 20_000_000).then(|| format!("{}ms:{}ms", i * 100, worst / 1_000_000))
            })
            .collect();
        eprintln!(
            "  slow windows (send time: worst latency): {}",
            slow.join(" ")
        );
    }
    ns.sort_unstable();
    Ok(RunStats {
        p50: percentile(&ns, 0.50),
        p99: percentile(&ns, 0.99),
        p999: percentile(&ns, 0.999),
        max: percentile(&ns, 1.0),
        cpu_us_per_record: cpu.as_secs_f64() * 1e6 / records as f64,
        duplicates: observed.duplicates.load(Ordering::Relaxed),
    })
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    // `cargo bench` passes `--bench`; a filter argument is not used here.
    let rate: u64 = env_or("BENCH_LATENCY_RATE", 10_000);
    let secs: f64 = env_or("BENCH_LATENCY_SECS", if smoke { 1.0 } else { 5.0 });
    let rounds: usize = env_or("BENCH_LATENCY_ROUNDS", if smoke { 1 } else { 5 });
    let lingers: Vec<u32> = std::env::var("BENCH_LATENCY_LINGERS")
        .unwrap_or_else(|_| "0,5".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("BENCH_LATENCY_LINGERS: comma-separated ms")
        })
        .collect();
    let warmup_secs: f64 = env_or("BENCH_LATENCY_WARMUP_SECS", if smoke { 0.2 } else { 1.0 });
    let records = (rate as f64 * secs).round().max(1.0) as usize;
    let warmup = (rate as f64 * warmup_secs).round() as usize;
    let broker = match std::env::var("FRESH_CONSUMER_TEST_BOOTSTRAP") {
        Ok(b) => Broker::Real(b),
        Err(_) => Broker::Mock(support::mock_broker()),
    };
    let rt = support::runtime();
    println!(
        "latency: {} broker {}, {rate} records/s, {warmup_secs} s of warm-up then {secs} s measured \
         per run ({warmup} + {records} records), {rounds} rounds, linger.ms {lingers:?}; {}",
        broker.name(),
        broker.bootstrap(),
        support::machine()
    );
    // A broker's first run after it started stalls (a 2.1-2.9 s p99 on
    // three days; the cause, JVM warm-up or the shared cores, is not
    // measured): runs that are not in the figures come first, one per
    // `linger.ms`, so round 1 does not take the stall.
    let broker_warmup: f64 = env_or(
        "BENCH_LATENCY_BROKER_WARMUP_SECS",
        match broker {
            Broker::Real(_) if !smoke => 5.0,
            _ => 0.0,
        },
    );
    if broker_warmup > 0.0 {
        let n = (rate as f64 * broker_warmup).round().max(1.0) as usize;
        for &linger in &lingers {
            let s = rt.block_on(async {
                let topic = broker.topic("latency-warmup").await;
                run_raw(broker.bootstrap(), &topic, linger, rate, (0, n)).await
            });
            let s = s.unwrap_or_else(|e| panic!("the broker's warm-up run: {e}"));
            println!(
                "broker warm-up ({broker_warmup} s, raw, linger.ms={linger}, not in the figures): p50 {:.0} us  p99 {:.0} us  max {:.0} us",
                s.p50, s.p99, s.max
            );
        }
    }
    // results[linger index][kind] = per-round stats
    let mut results: Vec<[Vec<RunStats>; 2]> = lingers.iter().map(|_| [vec![], vec![]]).collect();
    for round in 0..rounds {
        for (li, &linger) in lingers.iter().enumerate() {
            let order = if round % 2 == 0 {
                [Kind::Raw, Kind::Fresh]
            } else {
                [Kind::Fresh, Kind::Raw]
            };
            for kind in order {
                let s = rt.block_on(async {
                    let topic = broker.topic("latency").await;
                    match kind {
                        Kind::Raw => {
                            run_raw(
                                broker.bootstrap(),
                                &topic,
                                linger,
                                rate,
                                (warmup, warmup + records),
                            )
                            .await
                        }
                        Kind::Fresh => {
                            run_fresh(
                                broker.bootstrap(),
                                &topic,
                                linger,
                                rate,
                                (warmup, warmup + records),
                            )
                            .await
                        }
                    }
                });
                let s = s.unwrap_or_else(|e| panic!("{} linger.ms={linger}: {e}", kind.name()));
                println!(
                    "round {} linger.ms={linger} {:<5} p50 {:>8.0} us  p99 {:>8.0} us  p99.9 {:>8.0} us  max {:>8.0} us  CPU {:.2} us/record  duplicates {}",
                    round + 1,
                    kind.name(),
                    s.p50,
                    s.p99,
                    s.p999,
                    s.max,
                    s.cpu_us_per_record,
                    s.duplicates
                );
                results[li][kind as usize].push(s);
            }
        }
    }
    println!(
        "\nsummary ({} broker; medians over {rounds} rounds, microseconds; fresh - raw is the median of per-round differences):",
        broker.name()
    );
    println!(
        "| linger.ms | consumer | p50 | p99 | p99.9 | max | CPU us/record | fresh - raw p50 | fresh - raw p99 (min-max) | p99 target <= +1000 us |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (li, &linger) in lingers.iter().enumerate() {
        let [raw, fresh] = &results[li];
        let d50: Vec<f64> = raw.iter().zip(fresh).map(|(r, f)| f.p50 - r.p50).collect();
        let d99: Vec<f64> = raw.iter().zip(fresh).map(|(r, f)| f.p99 - r.p99).collect();
        let (lo, hi) = min_max(&d99);
        for (kind, runs) in [(Kind::Raw, raw), (Kind::Fresh, fresh)] {
            let m = |f: fn(&RunStats) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
            let (diff50, diff99, met) = if kind == Kind::Fresh {
                let med99 = median(&d99);
                (
                    format!("{:+.0}", median(&d50)),
                    format!("{med99:+.0} ({lo:+.0} to {hi:+.0})"),
                    if med99 <= 1000.0 { "met" } else { "NOT met" }.to_owned(),
                )
            } else {
                ("-".into(), "-".into(), "-".into())
            };
            println!(
                "| {linger} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {diff50} | {diff99} | {met} |",
                kind.name(),
                m(|s| s.p50),
                m(|s| s.p99),
                m(|s| s.p999),
                m(|s| s.max),
                m(|s| s.cpu_us_per_record),
            );
        }
    }
}
