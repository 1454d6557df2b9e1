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
//! committed position (`--group`, default `<dlq-topic>.redrive`; the start of
//! the topic when the group has none, or with `--from-beginning`) up to the
//! topic's end as it was when the tool started. For each record it reads the
//! dead-letter headers with [`DeadLetterRecord::from_record`] (the header
//! style the library wrote: its source-topic header comes last) and, when
//! the record is chosen (`--all`, or matching `--source-topic`,
//! `--source-partition` and `--source-offset`), produces the original key,
//! payload, timestamp and headers (without the dead-letter headers of that
//! style; headers of the other style the original record carried are
//! republished with it) to the source topic and partition it came from. The producer uses
//! `acks=all` and idempotence; only once every write was acknowledged does
//! the tool commit its group past what it read, so each parked record is
//! redriven once (at least once: a crash between the writes and the commit
//! redrives them again on the next run).
//!
//! The group's position means "reviewed": records a filter passed over are
//! committed past too. To pick one of them later, run with
//! `--from-beginning` (which may also choose records redriven before).
//! `--list` only prints what is there: it produces and commits nothing.
//!
//! The consumer that handles the source topic must be fixed first: a record
//! that still fails is simply dead-lettered again (with a new offset).
//!
//! Records dead-lettered after retry tiers (`OnExhausted::RetryTopics`) are
//! read the same way: their source fields name the original topic,
//! partition and offset (not a tier's), the tier headers are dropped on
//! redrive, and `--list` prints their failed stops (source, then each tier).

#[path = "support/cli.rs"]
mod cli;
#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::failure::dead_letter::DeadLetterRecord;
use fresh_consumer::{
    BoxError, FreshConsumer, OnExhausted, Record,
    failure::{DeadLetter, RetryPolicy},
    permanent,
};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use dead_letters::{TIMEOUT, read_dead_letters, republish};
use mock_broker::MockBroker;

#[derive(Debug, Default)]
struct Args {
    demo: bool,
    bootstrap: Option<String>,
    dlq_topic: Option<String>,
    group: Option<String>,
    select: Select,
    list: bool,
    from_beginning: bool,
}

/// Which dead-lettered records to redrive.
#[derive(Debug, Default, Clone)]
struct Select {
    all: bool,
    topic: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
}

impl Select {
    fn is_empty(&self) -> bool {
        !self.all && self.topic.is_none() && self.partition.is_none() && self.offset.is_none()
    }

    fn matches(&self, d: &DeadLetterRecord) -> bool {
        self.all
            || (self.topic.as_ref().is_none_or(|t| *t == d.topic)
                && self.partition.is_none_or(|p| p == d.partition)
                && self.offset.is_none_or(|o| o == d.offset))
    }
}

const USAGE: &str = "\
usage: redrive --demo
       redrive --bootstrap HOST:PORT --dlq-topic TOPIC [--group GROUP] [--from-beginning]
               (--list | --all | [--source-topic T] [--source-partition P] [--source-offset N])

  --demo              start an in-process mock broker, get a record dead-lettered by a
                      FreshConsumer, redrive it, and watch the fixed handler process it
  --list              print the dead-lettered records; produce and commit nothing
  --all               redrive every record read
  --source-*          redrive the records that came from this topic/partition/offset
  --group GROUP       the tool's own consumer group (default <dlq-topic>.redrive)
  --from-beginning    read from the start of the dead-letter topic, not the group's position";

fn parse_args() -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = std::env::args().skip(1);
    let value = |flag: &str, v: Option<String>| v.ok_or_else(|| format!("{flag} needs a value"));
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--demo" => a.demo = true,
            "--bootstrap" => a.bootstrap = Some(value(&arg, it.next())?),
            "--dlq-topic" => a.dlq_topic = Some(value(&arg, it.next())?),
            "--group" => a.group = Some(value(&arg, it.next())?),
            "--list" => a.list = true,
            "--all" => a.select.all = true,
            "--from-beginning" => a.from_beginning = true,
            "--source-topic" => a.select.topic = Some(value(&arg, it.next())?),
            "--source-partition" => {
                a.select.partition = Some(
                    value(&arg, it.next())?
                        .parse()
                        .map_err(|_| "--source-partition needs a number")?,
                )
            }
            "--source-offset" => {
                a.select.offset = Some(
                    value(&arg, it.next())?
                        .parse()
                        .map_err(|_| "--source-offset needs a number")?,
                )
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    if a.demo {
        return Ok(a);
    }
    if a.bootstrap.is_none() || a.dlq_topic.is_none() {
        return Err(format!(
            "--bootstrap and --dlq-topic are required\n\n{USAGE}"
        ));
    }
    if a.list != a.select.is_empty() {
        return Err(format!(
            "say what to do: --list, or --all, or --source-topic/--source-partition/--source-offset\n\n{USAGE}"
        ));
    }
    if a.select.all
        && (a.select.topic.is_some() || a.select.partition.is_some() || a.select.offset.is_some())
    {
        return Err("--all cannot be combined with --source-* filters".into());
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("redrive", parse_args);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_target(false)
        .try_init();
    let result = if args.demo {
        demo().await
    } else {
        let bootstrap = args.bootstrap.clone().unwrap_or_default();
        let dlq = args.dlq_topic.clone().unwrap_or_default();
        let group = args
            .group
            .clone()
            .unwrap_or_else(|| format!("{dlq}.redrive"));
        let options = Options {
            select: args.select.clone(),
            list: args.list,
            from_beginning: args.from_beginning,
        };
        redrive(&bootstrap, &dlq, &group, &options)
            .await
            .map(|_| ())
    };
    cli::exit_status("redrive failed", result)
}

// ---------------------------------------------------------------------------
// The redrive
// ---------------------------------------------------------------------------

struct Options {
    select: Select,
    list: bool,
    from_beginning: bool,
}

/// What a redrive did.
#[derive(Debug, Default)]
struct Report {
    read: usize,
    redriven: Vec<Redriven>,
    /// Records that carry no readable dead-letter headers.
    unreadable: usize,
}

/// One redriven record.
#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug`.
struct Redriven {
    /// Where it came from: source topic, partition, offset.
    from: (String, i32, i64),
    /// Where its copy landed in the source topic: partition, offset.
    to: (i32, i64),
}

/// Reads `dlq` from `group`'s position to its current end, republishes the
/// chosen records to their source topics, then commits the group past what
/// it read (unless listing).
async fn redrive(
    bootstrap: &str,
    dlq: &str,
    group: &str,
    options: &Options,
) -> Result<Report, BoxError> {
    let (b, t, g, from_beginning) = (
        bootstrap.to_owned(),
        dlq.to_owned(),
        group.to_owned(),
        options.from_beginning,
    );
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
        println!(
            "  {dlq}[{}]@{} <- {}[{}]@{}  attempts {}, {}: {}  {}",
            r.partition(),
            r.offset(),
            d.topic,
            d.partition,
            d.offset,
            d.attempts.map_or("?".into(), |a| a.to_string()),
            d.error_type.as_deref().unwrap_or("?"),
            d.error_message.as_deref().unwrap_or(""),
            if chosen { "-> redrive" } else { "" }
        );
        // A record that went through retry tiers (`OnExhausted::RetryTopics`)
        // lists its failed stops; its source fields name the original
        // record, so it is redriven to the source topic like any other.
        for stop in &d.history {
            println!(
                "    failed on {} at {} ms: {}",
                stop.topic, stop.failed_at_ms, stop.error_type
            );
        }
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

// ---------------------------------------------------------------------------
// The demo
// ---------------------------------------------------------------------------

const DEMO_TOPIC: &str = "orders";
const DEMO_DLQ: &str = "orders.dlt";
const DEMO_GROUP: &str = "billing";
const DEMO_PARTITIONS: i32 = 2;
/// Every demo step gives up after this long.
const DEMO_STEP: Duration = Duration::from_secs(30);

/// Parses `amount=<decimal>`; with `comma_decimals`, also `12,50`.
fn amount(record: &Record, comma_decimals: bool) -> Result<f64, BoxError> {
    let text = std::str::from_utf8(record.payload().unwrap_or_default()).map_err(permanent)?;
    let value = text
        .strip_prefix("amount=")
        .ok_or_else(|| permanent(format!("no amount in {text:?}")))?;
    let value = if comma_decimals {
        value.replace(',', ".")
    } else {
        value.to_owned()
    };
    value
        .parse::<f64>()
        .map_err(|e| permanent(format!("amount {text:?}: {e}")))
}

/// Starts the mock broker, gets a record dead-lettered by version 1 of a
/// handler, redrives it, and lets version 2 (fixed) handle it.
async fn demo() -> Result<(), BoxError> {
    // 1. A mock Kafka cluster inside this process (librdkafka's mock broker),
    //    running until `broker` is dropped at the end of the demo.
    let broker = MockBroker::start()?;
    broker.create_topic(DEMO_TOPIC, DEMO_PARTITIONS)?;
    broker.create_topic(DEMO_DLQ, 1)?;
    let bootstrap = broker.bootstrap().to_owned();
    println!(
        "mock Kafka broker at {bootstrap}: topics {DEMO_TOPIC:?} ({DEMO_PARTITIONS} partitions), {DEMO_DLQ:?} (1 partition)"
    );

    // 2. Six orders; one written by a client that uses a decimal comma.
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()?;
    let orders = [
        ("order-1", "amount=12.50", None),
        ("order-2", "amount=3.99", None),
        ("order-3", "amount=120.00", None),
        ("order-4", "amount=7,25", Some("shop-de")),
        ("order-5", "amount=0.99", None),
        ("order-6", "amount=45.10", None),
    ];
    for (key, payload, origin) in orders {
        let mut r = FutureRecord::to(DEMO_TOPIC).key(key).payload(payload);
        if let Some(origin) = origin {
            r = r.headers(OwnedHeaders::new().insert(KafkaHeader {
                key: "origin",
                value: Some(origin),
            }));
        }
        producer.send(r, TIMEOUT).await.map_err(|(e, _)| e)?;
    }
    println!("produced {} orders\n", orders.len());

    // 3. Version 1 cannot parse "7,25": a permanent error, dead-lettered.
    println!("== billing v1: amounts with a decimal point only; dead-letter what fails");
    let v1 = |r: Record| async move {
        let a = amount(&r, false)?;
        println!("  v1 billed {} {a:.2}", key(&r));
        Ok::<(), BoxError>(())
    };
    run_until_caught_up(&bootstrap, v1, Some(DEMO_DLQ)).await?;

    // 4. The redrive, after the fix is deployed.
    println!("\n== redrive {DEMO_DLQ} -> {DEMO_TOPIC}");
    let group = format!("{DEMO_DLQ}.redrive");
    let all = Options {
        select: Select {
            all: true,
            ..Select::default()
        },
        list: false,
        from_beginning: false,
    };
    let report = redrive(&bootstrap, DEMO_DLQ, &group, &all).await?;
    if report.redriven.len() != 1 {
        return Err(format!("expected one record to redrive, got {report:?}").into());
    }

    // 5. Version 2 accepts decimal commas: the redriven order is billed.
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
    run_until_caught_up(&bootstrap, v2, None).await?;
    let billed = billed.lock().unwrap().clone();
    if billed != ["order-4"] {
        return Err(format!("v2 should bill only the redriven order-4, billed {billed:?}").into());
    }

    // 6. Redriven once: the tool's group is past the record now.
    println!("\n== redrive again");
    let again = redrive(&bootstrap, DEMO_DLQ, &group, &all).await?;
    if !again.redriven.is_empty() {
        return Err("a second redrive republished records".into());
    }
    println!("\ndemo done: order-4 was parked by v1, redriven, and billed by v2");
    Ok(())
}

fn key(r: &Record) -> String {
    String::from_utf8_lossy(r.key().unwrap_or_default()).into_owned()
}

/// Runs a consumer of the demo topic in the demo group until its committed
/// offsets reach the topic's end (and, with `dlq`, that topic holds a
/// record), then stops it.
async fn run_until_caught_up<H: fresh_consumer::Handler>(
    bootstrap: &str,
    handler: H,
    dlq: Option<&str>,
) -> Result<(), BoxError> {
    let stop = tokio_util::sync::CancellationToken::new();
    let consumer = FreshConsumer::new(handler)
        .bootstrap_servers(bootstrap)
        .group_id(DEMO_GROUP)
        .topics([DEMO_TOPIC])
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .set("fetch.wait.max.ms", "10")
        .commit_interval(Duration::from_millis(100))
        .retry(RetryPolicy::new().backoff(Duration::from_millis(20), Duration::from_millis(200)))
        .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
        .run_until(stop.clone().cancelled_owned());
    let task = tokio::spawn(consumer);
    let (b, d) = (bootstrap.to_owned(), dlq.map(str::to_owned));
    let caught_up = tokio::task::spawn_blocking(move || wait_caught_up(&b, d.as_deref())).await?;
    stop.cancel();
    let summary = task.await??;
    caught_up?;
    println!(
        "  ({} record(s) received, {} succeeded, committed {:?})",
        summary.records_received,
        summary.records_succeeded,
        summary
            .committed
            .iter()
            .map(|(tp, o)| (tp.partition, *o))
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// Waits until the demo group's committed offsets equal the demo topic's
/// high watermarks (and `dlq`, if given, is not empty).
fn wait_caught_up(bootstrap: &str, dlq: Option<&str>) -> Result<(), BoxError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", DEMO_GROUP)
        .set("enable.auto.commit", "false")
        .create()?;
    let deadline = Instant::now() + DEMO_STEP;
    loop {
        let mut tpl = TopicPartitionList::new();
        let mut ends = Vec::new();
        for p in 0..DEMO_PARTITIONS {
            tpl.add_partition(DEMO_TOPIC, p);
            ends.push(c.fetch_watermarks(DEMO_TOPIC, p, TIMEOUT)?.1);
        }
        let committed = c.committed_offsets(tpl, TIMEOUT)?;
        let at_end = (0..DEMO_PARTITIONS).all(|p| {
            matches!(
                committed.find_partition(DEMO_TOPIC, p).map(|e| e.offset()),
                Some(Offset::Offset(o)) if o == ends[p as usize]
            )
        });
        let parked = match dlq {
            None => true,
            Some(t) => c.fetch_watermarks(t, 0, TIMEOUT)?.1 > 0,
        };
        if at_end && parked {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the consumer did not catch up within {DEMO_STEP:?}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
