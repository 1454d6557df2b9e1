//! Quickstart: a `FreshConsumer` on librdkafka's in-process mock broker, or
//! on your own cluster.
//!
//! ```text
//! cargo run --example quickstart                      # demo workload, then a freshness table
//! cargo run --example quickstart -- --records 10000   # a bigger demo workload
//! cargo run --example quickstart -- --serve           # keep the broker up for other clients (kcat)
//! cargo run --example quickstart -- --serve --exit-after-records 100
//! cargo run --example quickstart -- --bootstrap kafka:9092              # the demo on your cluster
//! cargo run --example quickstart -- --bootstrap kafka:9092 --topic orders \
//!     -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512 \
//!     -X sasl.username=me -X sasl.password=secret   # read an existing topic
//! ```
//!
//! The demo (the default) produces a few thousand keyed records into a
//! 3-partition topic while the consumer runs; one hot key carries most of
//! them, a few are stamped minutes old. It then prints, per partition, what
//! was handled and committed and the event ages read back from the
//! consumer's metrics, and exits non-zero unless every record was handled
//! and committed. `--serve` produces nothing: it prints the broker's address
//! and consumes what other clients (kcat) produce. The flags, the table, and
//! the runs on your cluster: the guide's "Trying it" chapter
//! (`docs/guide/trying-it.md`). With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the
//! metrics and a `process <topic>` span per handler attempt are also
//! exported over OTLP (`fresh_consumer::otlp`, the `OTEL_*` variables).
//!
//! The plumbing (command line, cluster checks, demo producer, providers,
//! table) is in `examples/support/quickstart/`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/quickstart/mod.rs"]
mod kit;
#[path = "support/mock_broker.rs"]
mod mock_broker;
#[path = "support/names.rs"]
mod names;

use std::collections::HashSet;
use std::error::Error;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::{FreshConsumer, Record};
use kit::{Args, Tally, Target, Telemetry, Workload};
use opentelemetry_sdk::propagation::TraceContextPropagator;

const GROUP: &str = "quickstart";
/// Simulated work per record.
const WORK: Duration = Duration::from_millis(1);
/// Every this-many-th offset fails on its first attempt (a simulated timeout).
const FAIL_EVERY: i64 = 997;

/// The handler: simulated work, and a simulated transient failure on the
/// first attempt of every `FAIL_EVERY`-th offset. A failed record is
/// retried by the consumer; nothing after it in its partition is committed
/// until it succeeds.
struct Orders {
    tally: Arc<Tally>,
    failed_once: Mutex<HashSet<(i32, i64)>>,
    /// Demo records only, never a topic of the user's.
    simulate_failures: bool,
}

impl Orders {
    async fn handle(&self, record: Record) -> Result<(), std::io::Error> {
        tokio::time::sleep(WORK).await;
        let id = (record.partition(), record.offset());
        if self.simulate_failures
            && record.offset() % FAIL_EVERY == FAIL_EVERY - 1
            && self.failed_once.lock().unwrap().insert(id)
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "simulated downstream timeout",
            ));
        }
        self.tally.handled(&record);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("quickstart", Args::parse);
    cli::exit_status("quickstart", run(args).await)
}

async fn run(args: Args) -> Result<(), Box<dyn Error>> {
    kit::init_logging();
    // 1. The broker: the mock cluster in this process (until `broker` is
    //    dropped), or the user's, checked with a bounded metadata request.
    let (broker, target) = Target::open(&args).await?;
    let result = consume(&args, broker.is_some(), &target).await;
    if target.created {
        target.delete().await;
    }
    drop(broker);
    result
}

/// Runs the consumer on `target` (and the demo producer, unless reading an
/// existing topic or serving), then prints the report.
/// `embedded`: `target` is the embedded mock broker.
async fn consume(args: &Args, embedded: bool, target: &Target) -> Result<(), Box<dyn Error>> {
    let records = args.demo_records();
    let group = match (&args.group, embedded) {
        (Some(group), _) => group.clone(),
        (None, true) => GROUP.to_owned(),
        // A group of its own: no other group's offsets are touched, and the
        // topic is read from the start (`auto.offset.reset=earliest`).
        (None, false) => names::unique(GROUP),
    };

    // 2. Metrics: one provider, an in-process reader for the table printed
    //    at the end, plus OTLP when an endpoint is configured (traces too).
    let telemetry = Telemetry::start(&target.topic)?;

    // 3. The handler, and the count that ends the run.
    let stop_after = if args.demo() {
        Some(records)
    } else {
        args.exit_after
    };
    let tally = Arc::new(Tally::new(target.partitions, stop_after));
    let orders = Arc::new(Orders {
        tally: Arc::clone(&tally),
        failed_once: Mutex::default(),
        simulate_failures: args.demo(),
    });
    let handler = move |record: Record| {
        let orders = Arc::clone(&orders);
        async move { orders.handle(record).await }
    };

    // 4. Beside the consumer: the demo producer, or (serving, reading a topic
    //    of yours) a progress line per second.
    let started = Instant::now();
    let workload = Workload::start(args, target, &group, records, &tally)?;

    // 5. The consumer, run until the count is reached or Ctrl-C / SIGTERM.
    let mut consumer = FreshConsumer::new(handler)
        .bootstrap_servers(target.bootstrap.clone())
        .group_id(group.clone())
        .topics([target.topic.clone()])
        .commit_interval(Duration::from_millis(200))
        .retry_backoff(Duration::from_millis(50), Duration::from_secs(1))
        .shutdown_timeout(Duration::from_secs(10))
        .meter_provider(telemetry.meter_provider());
    if let Some(tracer_provider) = telemetry.tracer_provider() {
        // A record's W3C `traceparent` / `tracestate` headers are linked
        // from its process spans.
        consumer = consumer
            .tracer_provider(tracer_provider)
            .trace_propagator(TraceContextPropagator::new());
    }
    if embedded {
        // The mock broker holds an empty fetch for the full
        // `fetch.wait.max.ms` (default 500 ms) even when data arrives
        // meanwhile; a real broker answers early. Keep it short so the ages
        // reflect the handler.
        consumer = consumer.set("fetch.wait.max.ms", "20");
    }
    for (key, value) in &target.properties {
        consumer = consumer.set(key.clone(), value.clone());
    }

    let summary = consumer
        .run_until(kit::stop_signal(Arc::clone(&tally), args.demo()))
        .await?;
    let elapsed = started.elapsed();
    workload.finish().await;

    // The consumer flushed the provider at shutdown, so the in-process reader
    // holds the final (cumulative) histograms.
    let end_offsets = target.log_end_offsets().await;
    kit::print_report(
        &tally,
        &summary,
        &telemetry.ages,
        target,
        &end_offsets,
        elapsed,
    );
    telemetry.shutdown().await;

    // The demo doubles as a smoke test: everything produced must have been
    // handled, and every partition committed up to its log end (the
    // committed offset is the next to read: everything below it succeeded).
    if args.demo() {
        kit::check_demo(&tally, &summary, target, &end_offsets, records)?;
    }
    Ok(())
}
