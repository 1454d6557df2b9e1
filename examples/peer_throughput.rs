//! Peer comparison (issue 7): consume N records from an external broker
//! through `FreshConsumer`, or through a raw rdkafka `StreamConsumer`, and
//! print the records/s as one JSON line. The kafkajs and
//! confluent-kafka-python peers in `benches/peers/` run the same workload and
//! print the same line; `benches/peers/run.sh` runs them all against the
//! quickstart's embedded broker and tabulates the results.
//!
//! ```text
//! cargo run --release --example peer_throughput -- \
//!     --bootstrap 127.0.0.1:PORT --topic peers-a,peers-b --group g1 --records 400000
//! cargo run --release --example peer_throughput -- --raw ...       # raw rdkafka baseline
//! cargo run --release --example peer_throughput -- --raw-otel ...  # raw rdkafka + hand-written age histogram
//! cargo run --release --example peer_throughput -- --c-api ...     # librdkafka's C API, no Rust wrapper
//! cargo run --release --example peer_throughput -- --batched 500 ... # a no-op batch handler
//! ```
//!
//! `--topic` takes one topic or a comma-separated list. The group must be new
//! (or have no committed offsets) for the run to read from the start.
//!
//! Modes:
//! - default: `FreshConsumer` with a no-op async handler, a real
//!   `SdkMeterProvider` (a `PeriodicReader` every 60 s to an exporter that
//!   discards, so every measurement aggregates and nothing is exported during
//!   the run) passed with `meter_provider`, and `commit_interval` 100 ms. The
//!   library records the event age (now - record timestamp) after the handler
//!   succeeded, as it always does.
//! - `--batched MAX`: the default mode with a no-op batch handler
//!   (`FreshConsumer::batched`, `max_batch_records` MAX; 1 measures the
//!   cost of a batch of one).
//! - `--raw`: `StreamConsumer::recv()` in a loop, noting the next offset per
//!   partition and committing that `TopicPartitionList` with
//!   `CommitMode::Async` every 100 ms. No handler, no metrics: the client's
//!   own ceiling.
//! - `--raw-otel`: the same loop with a hand-written freshness wrapper, the
//!   way the kafkajs and Python peers do it: a no-op async handler awaited
//!   inline, then the age in milliseconds recorded into an OpenTelemetry
//!   histogram with `topic` and `partition` attributes built per record.
//! - `--c-api` (issue 18, part 1): the plain librdkafka C consumer, through
//!   `rdkafka-sys` (the same librdkafka build the crate bundles, no
//!   rust-rdkafka wrapper): an `rd_kafka_consumer_poll` loop (100 ms
//!   timeout) that only counts and destroys each message, with
//!   `enable.auto.offset.store` (librdkafka stores each polled offset) and
//!   `rd_kafka_commit(rk, NULL, async)` every 100 ms; a synchronous commit
//!   at the end. What a C program would do, so the ceiling of the client
//!   library itself.
//!
//! Every mode sets the same librdkafka properties as the benches, from the
//! benches' own support module (`benches/support/mod.rs`, `CONSUMER_PROPS`):
//! `fetch.queue.backoff.ms=10`, `fetch.wait.max.ms=10` (the mock broker holds
//! an empty fetch this long), `session.timeout.ms=6000`, plus
//! `auto.offset.reset=earliest`.
//!
//! Time runs from the first record received to the N-th record handled:
//! group join and shutdown are not timed. Output (stdout, one line):
//!
//! ```text
//! {"client":"fresh-consumer","mode":"fresh","records":400000,"seconds":0.61,"records_per_s":655737,...}
//! ```
//!
//! This file runs the `FreshConsumer` modes; the command line, the JSON
//! line and the `--raw`, `--raw-otel` and `--c-api` loops are in
//! `examples/support/peer_throughput_kit.rs`.

// The benches' helpers: this is their peer-comparison driver, not an
// example to copy.
#[path = "../benches/support/mod.rs"]
mod support;

#[path = "support/cli.rs"]
mod cli;
#[path = "support/peer_throughput_kit.rs"]
mod peer_throughput_kit;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fresh_consumer::FreshConsumer;
use peer_throughput_kit::{Args, Measured, Mode, c_api, parse_args, print_line, raw};
use support::{Count, Progress};

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("peer_throughput", parse_args);
    let result = match args.mode {
        Mode::Fresh => fresh(&args, None).await,
        Mode::Batched(max) => fresh(&args, Some(max)).await,
        Mode::Raw | Mode::RawOtel => raw(&args).await,
        Mode::CApi => c_api(&args),
    };
    match result {
        Ok(measured) => {
            print_line(&args, &measured);
            ExitCode::SUCCESS
        }
        Err(e) => cli::failed(
            &format!("peer_throughput ({})", args.mode.name()),
            e.as_ref(),
        ),
    }
}

/// `FreshConsumer` with a no-op handler and real SDK instruments, as the
/// throughput bench runs it; with `batched`, a no-op batch handler with
/// that `max_batch_records`.
async fn fresh(args: &Args, batched: Option<usize>) -> Result<Measured, Box<dyn Error>> {
    let progress = Progress::new(args.records);
    let (provider, exporter) = support::sdk_provider();
    let count = Count(Arc::clone(&progress));
    let summary = match batched {
        None => {
            let c = FreshConsumer::new(count).read_headers(!args.no_headers);
            let c = support::configure(c, &args.bootstrap, &args.topics, args.group.clone());
            support::run_to_target(c.meter_provider(&provider), &progress, args.timeout).await?
        }
        Some(max) => {
            let c = FreshConsumer::batched(count)
                .max_batch_records(max)
                .read_headers(!args.no_headers);
            let c = support::configure(c, &args.bootstrap, &args.topics, args.group.clone());
            support::run_to_target(c.meter_provider(&provider), &progress, args.timeout).await?
        }
    };
    // The library flushed the provider at shutdown: the exporter saw the
    // final (cumulative) histogram.
    let _ = provider.shutdown();
    Ok(Measured {
        took: progress.elapsed(),
        ages: Some(exporter.values.load(Ordering::Relaxed)),
        commits: summary.commits,
    })
}
