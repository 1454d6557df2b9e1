//! Handler outputs (issue 26): what consume-transform-produce costs,
//! at-least-once and transactional (exactly once into Kafka), against a
//! consumer with no outputs, in one run.
//!
//!     cargo bench --bench outputs
//!     BENCH_OUTPUTS_RECORDS=8000 BENCH_OUTPUTS_PARTITIONS=4 BENCH_OUTPUTS_ROUNDS=3 cargo bench --bench outputs
//!     cargo bench --bench outputs -- --test     # one small round, as a smoke test
//!     BENCH_OUTPUTS_SKIP=outputs-linger5 cargo bench --bench outputs   # leave variants out
//!
//! Latest results, with the date, machine and commit: benches/README.md
//! (from the summary this bench prints at the end).
//!
//! Each run produces N records (`BENCH_OUTPUTS_RECORDS`, default 8,000,
//! 100 B) over P partitions (`BENCH_OUTPUTS_PARTITIONS`, default 4) of a new
//! topic on the in-process mock broker, and consumes them in a new group
//! with a handler that does no work of its own. Variants, each run in every
//! round (the order alternates per round), at the default commit interval
//! (1 s) and at 100 ms:
//! - `none`: no outputs (the floor);
//! - `outputs`: a per-record handler sending one output per input (its key
//!   and payload) to a second topic of P partitions; the library waits for
//!   each record's acknowledgement before the record completes, so each
//!   partition waits one produce round trip per record. The output
//!   producer's defaults (`linger.ms` 0);
//! - `outputs-linger5`: the same with librdkafka's default `linger.ms=5`,
//!   which the output producer overrides: why it does;
//! - `batch`: a batch handler (up to 500 records) sending one output per
//!   input: one wait per batch;
//! - `transactional`: the per-record handler of `outputs` with
//!   `OutputConfig::transactional_id`: one Kafka transaction per commit
//!   cycle, no acknowledgement wait per record (the commit flushes). The
//!   commits during the run count (the committer closes the transaction
//!   gate while it commits, holding handler calls); the last cycle's does
//!   not, as no variant's final commit does.
//!
//! Throughput: N over the time from the first handler call to the N-th
//! record completed (group join and shutdown are not in it). The summary
//! gives medians and each variant's ratio to `none` of the same round.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fresh_consumer::{
    Batch, BatchError, BoxError, FreshConsumer, Record,
    output::{Output, OutputConfig},
};

use support::{MockBroker, Progress, env_or, median, min_max, unique};

const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    None,
    Outputs,
    OutputsLinger5,
    Batch,
    Transactional,
}

const VARIANTS: [Variant; 5] = [
    Variant::None,
    Variant::Outputs,
    Variant::OutputsLinger5,
    Variant::Batch,
    Variant::Transactional,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Outputs => "outputs",
            Variant::OutputsLinger5 => "outputs-linger5",
            Variant::Batch => "batch",
            Variant::Transactional => "transactional",
        }
    }
}

/// Records per second of one run.
async fn run_once(
    broker: &MockBroker,
    variant: Variant,
    commit: Option<Duration>,
    records: usize,
    partitions: i32,
) -> f64 {
    let bootstrap = broker.bootstrap().to_owned();
    let topic = support::topic(broker, &format!("outputs-{}", variant.name()), partitions);
    let out = support::topic(broker, "outputs-out", partitions);
    let per_partition = records / partitions as usize;
    support::produce(&bootstrap, &topic, partitions, per_partition, 100);
    let target = (per_partition * partitions as usize) as u64;
    let progress = Progress::new(target);
    let group = unique("outputs-bench");
    let every = commit.unwrap_or(fresh_consumer::defaults::DEFAULT_COMMIT_INTERVAL);
    let p = Arc::clone(&progress);
    let done = async move { p.all_done().await };
    let result = match variant {
        Variant::Batch => {
            let p = Arc::clone(&progress);
            let handler = move |batch: Batch| {
                let (p, out) = (Arc::clone(&p), out.clone());
                async move {
                    p.started();
                    let o = fresh_consumer::output::outputs().map_err(BatchError::new)?;
                    for r in batch.iter() {
                        o.send(send(&out, r)).await.map_err(BatchError::new)?;
                    }
                    let n = batch.len() as u64;
                    // Completed once the outputs are acknowledged, after
                    // this returns: counted here, a batch early.
                    p.hit_n(n);
                    Ok::<(), BatchError>(())
                }
            };
            let c = support::configure(
                FreshConsumer::batched(handler),
                &bootstrap,
                [topic.clone()],
                group,
            )
            .outputs(OutputConfig::new());
            tokio::time::timeout(DEADLINE, c.commit_interval(every).run_until(done)).await
        }
        _ => {
            let p = Arc::clone(&progress);
            let with_outputs = variant != Variant::None;
            let handler = move |r: Record| {
                let (p, out) = (Arc::clone(&p), out.clone());
                async move {
                    p.started();
                    if with_outputs {
                        fresh_consumer::output::outputs()?
                            .send(send(&out, &r))
                            .await?;
                    }
                    p.finished();
                    Ok::<(), BoxError>(())
                }
            };
            let c = support::fresh_consumer(handler, &bootstrap, [topic.clone()], group);
            let c = match variant {
                Variant::Outputs => c.outputs(OutputConfig::new()),
                Variant::OutputsLinger5 => {
                    c.outputs(OutputConfig::new().producer_property("linger.ms", "5"))
                }
                Variant::Transactional => {
                    c.outputs(OutputConfig::new().transactional_id(unique("outputs-bench-tx")))
                }
                _ => c,
            };
            tokio::time::timeout(DEADLINE, c.commit_interval(every).run_until(done)).await
        }
    };
    result
        .unwrap_or_else(|_| panic!("{}: no result within {DEADLINE:?}", variant.name()))
        .unwrap_or_else(|e| panic!("{}: run: {e}", variant.name()));
    target as f64 / progress.elapsed().as_secs_f64()
}

fn send(topic: &str, r: &Record) -> Output {
    let mut o = Output::to(topic);
    if let Some(k) = r.key() {
        o = o.key(k);
    }
    if let Some(v) = r.payload() {
        o = o.payload(v);
    }
    o
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let records: usize = if smoke {
        400
    } else {
        env_or("BENCH_OUTPUTS_RECORDS", 8_000)
    };
    let partitions: i32 = env_or("BENCH_OUTPUTS_PARTITIONS", 4).max(1);
    let rounds: usize = if smoke {
        1
    } else {
        env_or("BENCH_OUTPUTS_ROUNDS", 3).max(1)
    };
    let skip = std::env::var("BENCH_OUTPUTS_SKIP").unwrap_or_default();
    let broker = support::mock_broker();
    let rt = support::runtime();
    for commit in [None, Some(Duration::from_millis(100))] {
        let label = match commit {
            None => "commit interval 1 s (default)".to_owned(),
            Some(d) => format!("commit interval {} ms", d.as_millis()),
        };
        // rates[variant][round]
        let mut rates = vec![Vec::new(); VARIANTS.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..VARIANTS.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let v = VARIANTS[i];
                if skip.split(',').any(|s| s.trim() == v.name()) {
                    continue;
                }
                let rate = rt.block_on(run_once(&broker, v, commit, records, partitions));
                println!(
                    "{label}, round {}: {:16} {:>10.0} records/s",
                    round + 1,
                    v.name(),
                    rate
                );
                rates[i].push(rate);
            }
        }
        println!();
        println!(
            "summary (outputs): {records} records over {partitions} partitions, {label}, {rounds} round(s); {}",
            support::machine()
        );
        for (i, v) in VARIANTS.iter().enumerate() {
            if rates[i].is_empty() {
                continue;
            }
            let ratios: Vec<f64> = rates[i]
                .iter()
                .zip(&rates[0])
                .map(|(r, none)| r / none)
                .collect();
            let (lo, hi) = min_max(&ratios);
            println!(
                "  {:16} {:>10.0} records/s (median); {:.3} x none (min {lo:.3}, max {hi:.3})",
                v.name(),
                median(&rates[i]),
                median(&ratios)
            );
        }
        println!();
    }
    drop(broker);
}
