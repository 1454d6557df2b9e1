//! An idempotent PostgreSQL sink: exactly-once effects with at-least-once
//! delivery.
//!
//! ```text
//! eval "$(bash .ci/postgres start)"     # a throw-away PostgreSQL; sets DATABASE_URL
//! cargo run --release --example postgres_sink                  # one transaction per record
//! cargo run --release --example postgres_sink -- --batch 64    # one per up to 64 records of a partition
//! cargo run --release --example postgres_sink -- --bootstrap broker:9092 --topic orders --group orders-sink
//! bash .ci/postgres stop "$POSTGRES_DIR"
//! ```
//!
//! A consumer that dies after a handler succeeded and before the commit
//! landed hands those records to the next consumer again, and no order of
//! the offset commit (in Kafka) and the business change (in the database)
//! makes them one atomic step. So the handler makes its effect idempotent:
//! in **one transaction** it claims the record's key `(topic, partition,
//! offset)` in `processed_events` and makes the business change (an
//! `orders` row from the payload `order_id,amount_cents`). A key already
//! there means "done before": `Ok`, nothing written. A failed transaction
//! leaves neither, and the handler's error makes the consumer retry. The
//! details (event ids, errors, `--batch`): `docs/guide/outputs.md`.
//!
//! Without `--bootstrap` it consumes `--records` records (default 20,000)
//! of a new topic on librdkafka's mock broker, started inside the process,
//! prints records/s and checks that every order row exists exactly once;
//! with it, a real cluster's topic until Ctrl-C / SIGTERM. `DATABASE_URL`
//! names the database (the schema is created when missing).
//!
//! `examples/support/postgres_sink_kit.rs` holds the sink itself (the
//! schema, `PostgresSink::write`: the transaction that claims the keys and
//! writes the orders, the pool, errors, counters), the command line and the
//! demo.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/mock_broker.rs"]
mod mock_broker;
#[path = "support/postgres_sink_kit.rs"]
mod postgres_sink_kit;

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use fresh_consumer::{
    Batch, BatchError, BatchHandler, BoxError, FreshConsumer, Handler, Record, RunError,
    RunSummary, permanent,
};
use postgres_sink_kit::{Args, Demo, parse_args, parse_order, print_committed, report};
// The sink's types (`tests/postgres_sink.rs` includes this file and uses them).
pub use postgres_sink_kit::{
    Order, PostgresSink, SCHEMA, SinkError, SinkErrorKind, SinkStats, Transactions,
};

/// The per-record handler: one transaction per record. `Ok` only once the
/// record's transaction committed (or its key was already there); an error
/// makes the consumer retry the record.
impl Handler for PostgresSink {
    type Error = BoxError;

    async fn handle(&self, record: Record) -> Result<(), BoxError> {
        // A payload that can never be written is not retried.
        let order = parse_order(record.payload()).map_err(permanent)?;
        self.write(
            record.topic(),
            record.partition(),
            &[(record.offset(), &order)],
        )
        .await
        .map(drop)
        .map_err(SinkError::into_retry)
    }
}

/// The batch handler: one transaction per batch of a partition's records
/// ([`FreshConsumer::batched`]). `Ok` only once the batch's transaction
/// committed. A payload that cannot be parsed fails at its record: the
/// records before it are written in the transaction, it goes to
/// `OnExhausted` as permanent, the rest come back as a new batch. A value
/// the tables refuse fails the whole transaction, permanently: the library
/// then writes the batch's records one at a time (each its own
/// transaction), so only that record takes the permanent error.
impl BatchHandler for PostgresSink {
    type Error = BatchError;

    async fn handle(&self, batch: Batch) -> Result<(), BatchError> {
        let mut orders = Vec::with_capacity(batch.len());
        let mut unparsable = None;
        for (i, record) in batch.iter().enumerate() {
            match parse_order(record.payload()) {
                Ok(order) => orders.push((record.offset(), order)),
                Err(e) => {
                    unparsable = Some((i, e));
                    break;
                }
            }
        }
        if !orders.is_empty() {
            let records: Vec<(i64, &Order)> = orders.iter().map(|(o, r)| (*o, r)).collect();
            self.write(batch.topic(), batch.partition(), &records)
                .await
                .map_err(|e| BatchError::new(e.into_retry()))?;
        }
        match unparsable {
            Some((i, e)) => Err(BatchError::at(i, permanent(e))),
            None => Ok(()),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("postgres_sink", parse_args);
    cli::exit_status("postgres_sink", run(args).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    postgres_sink_kit::log_to_stderr();
    let url = std::env::var("DATABASE_URL").map_err(|_| {
        "DATABASE_URL is not set; start a throw-away PostgreSQL with \
         `eval \"$(bash .ci/postgres start)\"` or point it at yours"
    })?;
    let pool_size = match args.transactions {
        Transactions::PerRecord => args.partitions as usize,
        // One transaction at a time per partition, plus one spare.
        Transactions::Batched { .. } => args.partitions as usize + 1,
    };
    let sink = PostgresSink::connect(&url, pool_size)
        .await
        .map_err(|e| format!("{} (is DATABASE_URL right?)", cli::chain(e.as_ref())))?;
    let (target, how) = (sink.target(), args.transactions.describe());
    println!("PostgreSQL at {target}: schema ready; {how}");
    match &args.cluster {
        Some((bootstrap, topic, group)) => {
            let until = cli::shutdown_signal();
            let summary = consume(&sink, &args, bootstrap, topic, group, false, until).await?;
            report(&sink.stats(), None);
            print_committed(&summary);
            Ok(())
        }
        None => {
            let mut demo = Demo::start(&args).await?;
            let until = demo.until_done(sink.stats());
            let (b, t, g) = (&demo.bootstrap, &demo.topic, &demo.group);
            let summary = consume(&sink, &args, b, t, g, true, until).await?;
            demo.finish(&sink, &summary).await
        }
    }
}

/// Runs the sink until `until`: as the handler (one transaction per record)
/// or as the batch handler (one per up to `max` records of a partition).
async fn consume(
    sink: &PostgresSink,
    args: &Args,
    bootstrap: &str,
    topic: &str,
    group: &str,
    demo: bool,
    until: impl Future<Output = ()>,
) -> Result<RunSummary, RunError> {
    match args.transactions {
        Transactions::PerRecord => {
            let consumer = FreshConsumer::new(sink.clone());
            configure(consumer, bootstrap, topic, group, demo)
                .run_until(until)
                .await
        }
        Transactions::Batched { max } => {
            let batched = FreshConsumer::batched(sink.clone()).max_batch_records(max);
            configure(batched, bootstrap, topic, group, demo)
                .run_until(until)
                .await
        }
    }
}

/// Where to read from, and a backoff that reaches a database back within
/// 5 s of its return; on the demo's embedded broker, a short fetch wait, a
/// commit every 200 ms and a 10 s shutdown.
fn configure<H>(
    consumer: FreshConsumer<H>,
    bootstrap: &str,
    topic: &str,
    group: &str,
    demo: bool,
) -> FreshConsumer<H> {
    let consumer = consumer
        .bootstrap_servers(bootstrap)
        .group_id(group)
        .topics([topic])
        .retry_backoff(Duration::from_millis(100), Duration::from_secs(5));
    if !demo {
        return consumer;
    }
    consumer
        .set("fetch.wait.max.ms", "20")
        .commit_interval(Duration::from_millis(200))
        .shutdown_timeout(Duration::from_secs(10))
}
