//! Throughput on the mock broker: FreshConsumer (no-op handler) with all
//! metrics on, with metrics off, and the raw rdkafka baseline, in one run.
//!
//!     cargo bench --bench throughput
//!     BENCH_PAIRED_ROUNDS=0 cargo bench --bench throughput      # criterion only
//!     BENCH_PARTITIONS=12 BENCH_RECORDS_PER_PARTITION=35000 cargo bench --bench throughput
//!
//! Latest results, with the date, machine and commit: benches/README.md
//! (from the summary this bench prints at the end).
//!
//! What is measured: one topic of 12 partitions x 35,000 records (100 B
//! payload, 8 B key: about 4.2 MB per partition, under the mock's 5 MiB
//! retention; the bench checks the low watermark stays 0) is produced once.
//! Each iteration consumes all of it from the start with a fresh consumer
//! group, and is timed from the first record seen to the last one (group
//! join and shutdown are not throughput and are not timed):
//! - `raw`: rdkafka `StreamConsumer::recv()` in a loop, noting the next
//!   offset per partition and committing that `TopicPartitionList` with
//!   `CommitMode::Async` every 100 ms;
//! - `fresh_metrics_on`: FreshConsumer with an `SdkMeterProvider` and a
//!   `PeriodicReader` (60 s) to an exporter that discards (real SDK
//!   instruments, aggregating; exported once, at the shutdown flush), a
//!   no-op handler, `commit_interval` 100 ms, other options at their
//!   defaults;
//! - `fresh_metrics_off`: the same with a no-op meter
//!   (`opentelemetry::metrics::noop::NoopMeterProvider`).
//! - `fresh_trace_unsampled`, `fresh_trace_sampled`: `fresh_metrics_off`
//!   plus a tracer provider (issue 15) with an always-off sampler (a
//!   non-recording span per attempt), or an always-on sampler and a batch
//!   span processor to an exporter that discards. The records carry no
//!   trace headers. Compare them with `fresh_metrics_off`.
//! - `fresh_key_ordered`: `fresh_metrics_on` with
//!   `ProcessingOrder::Key { max_in_flight: 64 }` (issue 18, part 4). Every
//!   record of a partition has its own key here, so every record takes the
//!   key-ordered path's lane bookkeeping; the paired pass prints its CPU
//!   time per record over `fresh_metrics_on`'s (target <= 1.2).
//! - `fresh_batched`, `fresh_batch_of_one`: `fresh_metrics_on` with a batch
//!   handler (`FreshConsumer::batched`, issue 25) that only counts, with
//!   `max_batch_records` 500 (the default) or 1; the paired pass prints
//!   both over the per-record handler (a batch of 1 is the batch path's
//!   cost per call).
//!
//! Every consumer sets `fetch.queue.backoff.ms=10`, `fetch.wait.max.ms=10`
//! and `session.timeout.ms=6000` (see `support::CONSUMER_PROPS`).
//!
//! After criterion's samples, a paired pass runs the three variants
//! round-robin (`BENCH_PAIRED_ROUNDS`, default 15) and prints the median
//! records/s and the median per-round ratio to raw: on a shared, noisy
//! machine the ratios of one round are more trustworthy than absolute
//! figures taken minutes apart.
//!
//! Each summary row also gives `cores` (the process's CPU time over the
//! timed wall time, from `/proc/self/stat`, so the in-process broker's
//! threads count too) and `CPU us/rec`: when both variants keep the cores
//! busy, the throughput ratio is the inverse ratio of CPU per record.

mod support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Throughput;
use fresh_consumer::{FreshConsumer, Handler, ProcessingOrder};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::metrics::noop::NoopMeterProvider;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use support::{COMMIT_EVERY, Count, Progress, env_or, median, min_max, unique};

/// How long one consumption may take before the bench fails.
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Raw,
    FreshMetricsOn,
    FreshMetricsOff,
    FreshTraceUnsampled,
    FreshTraceSampled,
    FreshKeyOrdered,
    FreshBatched,
    FreshBatchOfOne,
}

impl Variant {
    const ALL: [Variant; 8] = [
        Variant::Raw,
        Variant::FreshMetricsOn,
        Variant::FreshMetricsOff,
        Variant::FreshTraceUnsampled,
        Variant::FreshTraceSampled,
        Variant::FreshKeyOrdered,
        Variant::FreshBatched,
        Variant::FreshBatchOfOne,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Raw => "raw",
            Variant::FreshMetricsOn => "fresh_metrics_on",
            Variant::FreshMetricsOff => "fresh_metrics_off",
            Variant::FreshTraceUnsampled => "fresh_trace_unsampled",
            Variant::FreshTraceSampled => "fresh_trace_sampled",
            Variant::FreshKeyOrdered => "fresh_key_ordered",
            Variant::FreshBatched => "fresh_batched",
            Variant::FreshBatchOfOne => "fresh_batch_of_one",
        }
    }
}

struct Setup {
    bootstrap: String,
    topic: String,
    partitions: i32,
    total: u64,
}

impl Setup {
    /// Wall time and process CPU time from the first record to the last.
    async fn run(&self, v: Variant) -> (Duration, Duration) {
        let took = match v {
            Variant::Raw => self.raw().await,
            Variant::FreshMetricsOn => self.fresh(true, None, Shape::Record).await,
            Variant::FreshMetricsOff => self.fresh(false, None, Shape::Record).await,
            Variant::FreshTraceUnsampled => self.fresh(false, Some(false), Shape::Record).await,
            Variant::FreshTraceSampled => self.fresh(false, Some(true), Shape::Record).await,
            Variant::FreshKeyOrdered => self.fresh(true, None, Shape::KeyOrdered).await,
            Variant::FreshBatched => {
                let max = fresh_consumer::defaults::DEFAULT_MAX_BATCH_RECORDS;
                self.fresh(true, None, Shape::Batched(max)).await
            }
            Variant::FreshBatchOfOne => self.fresh(true, None, Shape::Batched(1)).await,
        };
        assert!(!took.0.is_zero(), "{v:?}: no time measured");
        took
    }

    async fn raw(&self) -> (Duration, Duration) {
        let consumer: StreamConsumer = support::raw_config(&self.bootstrap, &unique("raw"))
            .set("enable.auto.offset.store", "false")
            .create()
            .expect("raw consumer");
        consumer.subscribe(&[&self.topic]).expect("subscribe");
        let mut next = vec![-1i64; self.partitions as usize];
        let commit = |next: &[i64]| {
            let mut tpl = TopicPartitionList::with_capacity(next.len());
            for (p, &o) in next.iter().enumerate() {
                if o >= 0 {
                    tpl.add_partition_offset(&self.topic, p as i32, Offset::Offset(o))
                        .expect("tpl");
                }
            }
            if tpl.count() > 0 {
                consumer.commit(&tpl, CommitMode::Async).expect("commit");
            }
        };
        let mut n = 0u64;
        let mut first: Option<(Instant, Duration)> = None;
        let mut last_commit = Instant::now();
        let consume = async {
            while n < self.total {
                let m = consumer.recv().await.expect("recv");
                let now = Instant::now();
                first.get_or_insert_with(|| (now, support::process_cpu()));
                next[m.partition() as usize] = m.offset() + 1;
                n += 1;
                drop(m);
                if now.duration_since(last_commit) >= COMMIT_EVERY {
                    commit(&next);
                    last_commit = now;
                }
            }
        };
        tokio::time::timeout(DEADLINE, consume)
            .await
            .expect("raw consumer: deadline");
        let (first, cpu) = first.expect("a record");
        let took = (first.elapsed(), support::process_cpu().saturating_sub(cpu));
        commit(&next);
        support::close(consumer).await;
        took
    }

    /// `trace`: `None` without a tracer provider, else whether spans are
    /// sampled.
    async fn fresh(
        &self,
        metrics: bool,
        trace: Option<bool>,
        shape: Shape,
    ) -> (Duration, Duration) {
        let progress = Progress::with_cpu(self.total);
        let count = Count(Arc::clone(&progress));
        match shape {
            Shape::Record => {
                let c = FreshConsumer::new(count);
                self.fresh_run(c, metrics, trace, &progress).await
            }
            Shape::KeyOrdered => {
                let c = FreshConsumer::new(count)
                    .processing_order(ProcessingOrder::Key { max_in_flight: 64 });
                self.fresh_run(c, metrics, trace, &progress).await
            }
            Shape::Batched(max) => {
                let mut c = FreshConsumer::batched(count).max_batch_records(max);
                // Diagnostics only: the last batch of each partition waits
                // `max_batch_wait` for records that never come.
                if let Some(ms) = env_opt("BENCH_BATCH_WAIT_MS") {
                    c = c.max_batch_wait(Duration::from_millis(ms as u64));
                }
                self.fresh_run(c, metrics, trace, &progress).await
            }
        }
    }

    async fn fresh_run<H: Handler>(
        &self,
        c: FreshConsumer<H>,
        metrics: bool,
        trace: Option<bool>,
        progress: &Arc<Progress>,
    ) -> (Duration, Duration) {
        let mut c = support::configure(c, &self.bootstrap, [self.topic.as_str()], unique("fresh"));
        // Diagnostics only (README: "Why"): override library options.
        if let Some(n) = env_opt("BENCH_FRESH_MAX_BUFFERED") {
            c = c.max_buffered_records(n);
        }
        if let Some(n) = env_opt("BENCH_FRESH_COMMIT_BATCH") {
            c = c.commit_batch_records(n);
        }
        if env_opt("BENCH_FRESH_READ_HEADERS") == Some(0) {
            c = c.read_headers(false);
        }
        // A provider per run: the group name is an attribute, and a provider
        // shared by every run would grow towards the cardinality limit.
        let provider = metrics.then(support::sdk_provider);
        let c = match &provider {
            Some((p, _)) => c.meter_provider(p),
            None => c.meter(NoopMeterProvider::new().meter("fresh-consumer-bench")),
        };
        let tracer = trace.map(tracer_provider);
        let c = match &tracer {
            Some(t) => c.tracer_provider(t),
            None => c,
        };
        support::run_to_target(c, progress, DEADLINE)
            .await
            .expect("fresh consumer");
        if let Some((p, exporter)) = provider {
            // The library flushed the provider at shutdown: one export.
            assert!(
                exporter.exports.load(Ordering::Relaxed) >= 1,
                "no metrics exported"
            );
            let _ = p.shutdown();
        }
        if let Some(t) = tracer {
            let _ = t.shutdown();
        }
        progress.elapsed_and_cpu()
    }
}

/// How the handler is called.
#[derive(Clone, Copy)]
enum Shape {
    /// One record per call, in partition order.
    Record,
    /// `ProcessingOrder::Key { max_in_flight: 64 }`.
    KeyOrdered,
    /// A batch handler (`FreshConsumer::batched`) with this
    /// `max_batch_records`.
    Batched(usize),
}

/// A tracer provider: always-on with a batch processor to an exporter that
/// discards (`sampled`), or always-off.
fn tracer_provider(sampled: bool) -> opentelemetry_sdk::trace::SdkTracerProvider {
    use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
    #[derive(Debug)]
    struct Discard;
    impl opentelemetry_sdk::trace::SpanExporter for Discard {
        async fn export(
            &self,
            _batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
    }
    let b = SdkTracerProvider::builder();
    if sampled {
        b.with_sampler(Sampler::AlwaysOn)
            .with_batch_exporter(Discard)
    } else {
        b.with_sampler(Sampler::AlwaysOff)
    }
    .build()
}

fn env_opt(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// (variant, records/s, CPU cores busy on average: process CPU time over
/// wall time, the in-process mock broker included).
static SAMPLES: Mutex<Vec<(Variant, f64, f64)>> = Mutex::new(Vec::new());

fn note(v: Variant, total: u64, (took, cpu): (Duration, Duration)) {
    SAMPLES.lock().unwrap().push((
        v,
        total as f64 / took.as_secs_f64(),
        cpu.as_secs_f64() / took.as_secs_f64(),
    ));
}

fn main() {
    let partitions: i32 = env_or("BENCH_PARTITIONS", 12);
    let per_partition: usize = env_or("BENCH_RECORDS_PER_PARTITION", 35_000);
    let rounds: usize = env_or("BENCH_PAIRED_ROUNDS", 15);
    let payload = 100;

    let broker = support::mock_broker();
    let topic = support::topic(&broker, "throughput", partitions);
    let produced_in = support::produce(
        broker.bootstrap(),
        &topic,
        partitions,
        per_partition,
        payload,
    );
    let total = partitions as u64 * per_partition as u64;
    println!(
        "throughput: {partitions} partitions x {per_partition} records ({payload} B payload, 8 B key) = {total} records, produced in {produced_in:.1?}; {}",
        support::machine()
    );
    let setup = Setup {
        bootstrap: broker.bootstrap().to_owned(),
        topic,
        partitions,
        total,
    };
    let rt = support::runtime();

    let mut c = support::criterion(Duration::from_secs(5));
    {
        let mut g = support::flat_group(&mut c, "throughput");
        g.throughput(Throughput::Elements(total));
        for v in Variant::ALL {
            g.bench_function(v.name(), |b| {
                b.iter_custom(|iters| {
                    support::runs(iters, || {
                        let took = rt.block_on(setup.run(v));
                        note(v, total, took);
                        took.0
                    })
                })
            });
        }
        g.finish();
    }
    c.final_summary();
    summarize("criterion samples (variants one after the other)", total);

    if rounds > 0 {
        SAMPLES.lock().unwrap().clear();
        let mut ratios_on = Vec::new();
        let mut ratios_off = Vec::new();
        let mut ratios_unsampled = Vec::new();
        let mut ratios_sampled = Vec::new();
        let mut key_cpu = Vec::new();
        let mut key_rate = Vec::new();
        let (mut batched_rate, mut batched_cpu, mut batched_raw) =
            (Vec::new(), Vec::new(), Vec::new());
        let (mut one_rate, mut one_cpu) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut rate = [0.0; Variant::ALL.len()];
            let mut cpu = [0.0; Variant::ALL.len()];
            for (i, v) in Variant::ALL.into_iter().enumerate() {
                let took = rt.block_on(setup.run(v));
                note(v, total, took);
                rate[i] = total as f64 / took.0.as_secs_f64();
                cpu[i] = took.1.as_secs_f64();
            }
            key_cpu.push(cpu[5] / cpu[1]);
            key_rate.push(rate[5] / rate[1]);
            batched_rate.push(rate[6] / rate[1]);
            batched_cpu.push(cpu[6] / cpu[1]);
            one_rate.push(rate[7] / rate[1]);
            one_cpu.push(cpu[7] / cpu[1]);
            batched_raw.push(rate[6] / rate[0]);
            ratios_on.push(rate[1] / rate[0]);
            ratios_off.push(rate[2] / rate[0]);
            ratios_unsampled.push(rate[3] / rate[0]);
            ratios_sampled.push(rate[4] / rate[0]);
        }
        summarize(
            &format!("paired pass ({rounds} rounds, raw/on/off round-robin)"),
            total,
        );
        let (lo_on, hi_on) = min_max(&ratios_on);
        let (lo_off, hi_off) = min_max(&ratios_off);
        println!(
            "  per-round ratio to raw: metrics on {:.2} (min {lo_on:.2}, max {hi_on:.2}); metrics off {:.2} (min {lo_off:.2}, max {hi_off:.2}); target >= 0.90 with metrics on",
            median(&ratios_on),
            median(&ratios_off)
        );
        let (lo_u, hi_u) = min_max(&ratios_unsampled);
        let (lo_s, hi_s) = min_max(&ratios_sampled);
        println!(
            "  per-round ratio to raw, traces (metrics off): always-off sampler {:.2} (min {lo_u:.2}, max {hi_u:.2}); always-on {:.2} (min {lo_s:.2}, max {hi_s:.2}); compare with metrics off",
            median(&ratios_unsampled),
            median(&ratios_sampled)
        );
        let (lo_k, hi_k) = min_max(&key_cpu);
        let (lo_kr, hi_kr) = min_max(&key_rate);
        println!(
            "  key-ordered (max_in_flight 64) over partition order, metrics on: CPU per record {:.2} (min {lo_k:.2}, max {hi_k:.2}), target <= 1.20: {}; records/s {:.2} (min {lo_kr:.2}, max {hi_kr:.2})",
            median(&key_cpu),
            if median(&key_cpu) <= 1.2 {
                "met"
            } else {
                "NOT met"
            },
            median(&key_rate)
        );
        let (lo_b, hi_b) = min_max(&batched_rate);
        let (lo_o, hi_o) = min_max(&one_rate);
        println!(
            "  batch handler (max_batch_records {}) over the per-record handler, metrics on: records/s {:.2} (min {lo_b:.2}, max {hi_b:.2}), CPU per record {:.2}; over raw {:.2}",
            fresh_consumer::defaults::DEFAULT_MAX_BATCH_RECORDS,
            median(&batched_rate),
            median(&batched_cpu),
            median(&batched_raw)
        );
        println!(
            "  batches of one (max_batch_records 1) over the per-record handler: records/s {:.2} (min {lo_o:.2}, max {hi_o:.2}), CPU per record {:.2}: the cost of a batch of 1",
            median(&one_rate),
            median(&one_cpu)
        );
    }
    drop(rt);
    drop(broker);
}

fn summarize(title: &str, total: u64) {
    let samples = SAMPLES.lock().unwrap();
    // One column of the samples of `v`: 0 = records/s, 1 = cores.
    let column = |v: Variant, i: usize| -> Vec<f64> {
        samples
            .iter()
            .filter(|(w, _, _)| *w == v)
            .map(|&(_, r, c)| [r, c][i])
            .collect()
    };
    let rates = |v| column(v, 0);
    let cores = |v| column(v, 1);
    let raw = median(&rates(Variant::Raw));
    println!("\nthroughput summary, {title}: {total} records per run");
    println!(
        "  {:<18} {:>5} {:>14} {:>14} {:>14} {:>8} {:>7} {:>10}",
        "variant",
        "runs",
        "median rec/s",
        "min rec/s",
        "max rec/s",
        "vs raw",
        "cores",
        "CPU us/rec"
    );
    for v in Variant::ALL {
        let r = rates(v);
        let (lo, hi) = min_max(&r);
        let m = median(&r);
        let c = median(&cores(v));
        println!(
            "  {:<18} {:>5} {:>14.0} {:>14.0} {:>14.0} {:>8.2} {:>7.2} {:>10.2}",
            v.name(),
            r.len(),
            m,
            lo,
            hi,
            if raw > 0.0 { m / raw } else { f64::NAN },
            c,
            c / m * 1e6
        );
    }
}
