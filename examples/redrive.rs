//! Redrive: republish records parked in a dead-letter topic to their source
//! topic, so they are handled again after a fix.
//!
//! ```text
//! cargo run --example redrive -- --demo      # self-contained: mock broker, park, fix, redrive
//! cargo run --example redrive -- --bootstrap localhost:9092 --dlq-topic orders.dlt --list
//! cargo run --example redrive -- --bootstrap localhost:9092 --dlq-topic orders.dlt --all
//! cargo run --example redrive -- --bootstrap localhost:9092 --dlq-topic orders.dlt \
//!     --source-partition 1 --source-offset 386
//! ```
//!
//! The tool reads the dead-letter topic from its own consumer group's
//! position (`--group`, default `<dlq-topic>.redrive`; from the start with
//! `--from-beginning` or when the group has none) to the end as it was at
//! the start, republishes each chosen record (`--all`, or matching the
//! `--source-*` filters) to the topic and partition it came from as it was
//! there (key, payload, timestamp, headers), and commits its group past
//! what it read once every write was acknowledged: each parked record is
//! redriven once (at least once: a crash before the commit redrives them
//! again). Records a filter passed over are committed past too
//! (`--from-beginning` finds them again); `--list` only prints. Fix the
//! consumer first: a record that still fails is dead-lettered again.
//!
//! The steps: `examples/support/dead_letters.rs` (shared with
//! `tests/failures.rs`); the rest: `examples/support/redrive_kit.rs`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/mock_broker.rs"]
mod mock_broker;
#[path = "support/redrive_kit.rs"]
mod redrive_kit;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::failure::dead_letter::DeadLetterRecord;
use fresh_consumer::{
    BoxError, FreshConsumer, Handler, OnExhausted, Record,
    failure::{DeadLetter, RetryPolicy},
};
use rdkafka::consumer::{CommitMode, Consumer};

use dead_letters::{read_dead_letters, republish};
use redrive_kit::{DEMO_DLQ, DEMO_GROUP, DEMO_TOPIC, Options, Redriven, Report, amount, key};

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("redrive", redrive_kit::parse_args);
    redrive_kit::log_to_stderr();
    let result = if args.demo {
        demo().await
    } else {
        let (bootstrap, dlq, group, options) = args.tool();
        redrive(&bootstrap, &dlq, &group, &options)
            .await
            .map(|_| ())
    };
    cli::exit_status("redrive failed", result)
}

/// Reads `dlq` from `group`'s position to its end, republishes the chosen
/// records, then commits the group past what it read (unless listing).
async fn redrive(
    bootstrap: &str,
    dlq: &str,
    group: &str,
    options: &Options,
) -> Result<Report, BoxError> {
    let (b, t, g) = (bootstrap.to_owned(), dlq.to_owned(), group.to_owned());
    let from_beginning = options.from_beginning;
    let (consumer, parked, end) =
        tokio::task::spawn_blocking(move || read_dead_letters(&b, &t, &g, from_beginning))
            .await??;
    let mut report = Report {
        read: parked.len(),
        ..Report::default()
    };
    println!(
        "{} record(s) read from {dlq} (group {group}){}",
        parked.len(),
        if options.list { ", listing only" } else { "" }
    );

    let producer = dead_letters::producer(bootstrap)?;
    for r in &parked {
        let d = match DeadLetterRecord::from_record(r) {
            Ok(d) => d,
            Err(e) => {
                report.unreadable += 1;
                println!("  {dlq}[{}]@{}: skipped, {e}", r.partition(), r.offset());
                continue;
            }
        };
        let chosen = !options.list && options.select.matches(&d);
        redrive_kit::print_parked(dlq, r, &d, chosen);
        if !chosen {
            continue;
        }
        let landed = republish(&producer, &d).await?;
        println!("    redriven to {}[{}]@{}", d.topic, landed.0, landed.1);
        report.redriven.push(Redriven {
            from: (d.topic.clone(), d.partition, d.offset),
            to: landed,
        });
    }
    if options.list || parked.is_empty() {
        return Ok(report);
    }
    // Every write is acknowledged: only now move the group past the records.
    tokio::task::spawn_blocking(move || consumer.commit(&end, CommitMode::Sync)).await??;
    println!(
        "{} record(s) redriven; group {group} committed past the {} read",
        report.redriven.len(),
        report.read
    );
    Ok(report)
}

/// The demo's billing consumer: retries, then dead-letters what still fails.
fn billing<H: Handler>(bootstrap: &str, handler: H) -> FreshConsumer<H> {
    FreshConsumer::new(handler)
        .bootstrap_servers(bootstrap)
        .group_id(DEMO_GROUP)
        .topics([DEMO_TOPIC])
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("fetch.wait.max.ms", "10")
        .commit_interval(Duration::from_millis(100))
        .retry(RetryPolicy::new().backoff(Duration::from_millis(20), Duration::from_millis(200)))
        .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
}

/// Version 1 of the billing handler dead-letters a record it cannot parse,
/// the redrive sends it back, version 2 (fixed) bills it.
async fn demo() -> Result<(), BoxError> {
    // 1. The broker (until dropped at the end) and six orders, one "7,25".
    let broker = redrive_kit::start_broker()?;
    let bootstrap = broker.bootstrap().to_owned();
    redrive_kit::produce_orders(&bootstrap).await?;

    // 2. Version 1 cannot parse "7,25": a permanent error, dead-lettered.
    println!("== billing v1: amounts with a decimal point only; dead-letter what fails");
    let v1 = |r: Record| async move {
        let a = amount(&r, false)?;
        println!("  v1 billed {} {a:.2}", key(&r));
        Ok::<(), BoxError>(())
    };
    redrive_kit::run_until_caught_up(billing(&bootstrap, v1), &bootstrap, Some(DEMO_DLQ)).await?;

    // 3. The redrive, after the fix is deployed.
    println!("\n== redrive {DEMO_DLQ} -> {DEMO_TOPIC}");
    let group = format!("{DEMO_DLQ}.redrive");
    let report = redrive(&bootstrap, DEMO_DLQ, &group, &Options::all()).await?;
    if report.redriven.len() != 1 {
        return Err(format!("expected one record to redrive, got {report:?}").into());
    }

    // 4. Version 2 accepts decimal commas: the redriven order is billed.
    println!("\n== billing v2: decimal commas too (same consumer group)");
    let billed: Arc<Mutex<Vec<String>>> = Arc::default();
    let v2 = {
        let billed = Arc::clone(&billed);
        move |r: Record| {
            let billed = Arc::clone(&billed);
            async move {
                let a = amount(&r, true)?;
                let origin = r
                    .header("origin")
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v).into_owned());
                println!(
                    "  v2 billed {} {a:.2} (partition {}, offset {}, origin header {origin:?})",
                    key(&r),
                    r.partition(),
                    r.offset()
                );
                billed.lock().unwrap().push(key(&r));
                Ok::<(), BoxError>(())
            }
        }
    };
    redrive_kit::run_until_caught_up(billing(&bootstrap, v2), &bootstrap, None).await?;
    let billed = billed.lock().unwrap().clone();
    if billed != ["order-4"] {
        return Err(format!("v2 should bill only the redriven order-4, billed {billed:?}").into());
    }

    // 5. Redriven once: the tool's group is past the record now.
    println!("\n== redrive again");
    let again = redrive(&bootstrap, DEMO_DLQ, &group, &Options::all()).await?;
    if !again.redriven.is_empty() {
        return Err("a second redrive republished records".into());
    }
    println!("\ndemo done: order-4 was parked by v1, redriven, and billed by v2");
    Ok(())
}
