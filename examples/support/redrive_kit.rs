//! The machinery of `examples/redrive.rs`: its command line, the report of
//! a redrive, and the demo's broker, orders, amount parser and wait for a
//! consumer to catch up. The steps of a redrive themselves are in `dead_letters.rs`
//! (shared with `tests/failures.rs`) and the example.

use std::time::{Duration, Instant};

use fresh_consumer::failure::dead_letter::DeadLetterRecord;
use fresh_consumer::{BoxError, FreshConsumer, Handler, Record, permanent};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::dead_letters::TIMEOUT;
use crate::mock_broker::MockBroker;

// ---------------------------------------------------------------------------
// The command line and the report
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
pub struct Args {
    pub demo: bool,
    pub bootstrap: Option<String>,
    pub dlq_topic: Option<String>,
    pub group: Option<String>,
    pub select: Select,
    pub list: bool,
    pub from_beginning: bool,
}

/// Which dead-lettered records to redrive.
#[derive(Debug, Default, Clone)]
pub struct Select {
    pub all: bool,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
}

impl Select {
    pub fn is_empty(&self) -> bool {
        !self.all && self.topic.is_none() && self.partition.is_none() && self.offset.is_none()
    }

    pub fn matches(&self, d: &DeadLetterRecord) -> bool {
        self.all
            || (self.topic.as_ref().is_none_or(|t| *t == d.topic)
                && self.partition.is_none_or(|p| p == d.partition)
                && self.offset.is_none_or(|o| o == d.offset))
    }
}

pub const USAGE: &str = "\
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

pub fn parse_args() -> Result<Args, String> {
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

/// What the tool does with the records it reads.
pub struct Options {
    pub select: Select,
    pub list: bool,
    pub from_beginning: bool,
}

/// What a redrive did.
#[derive(Debug, Default)]
pub struct Report {
    pub read: usize,
    pub redriven: Vec<Redriven>,
    /// Records that carry no readable dead-letter headers.
    pub unreadable: usize,
}

/// One redriven record.
#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug`.
pub struct Redriven {
    /// Where it came from: source topic, partition, offset.
    pub from: (String, i32, i64),
    /// Where its copy landed in the source topic: partition, offset.
    pub to: (i32, i64),
}

impl Args {
    /// The tool's run: bootstrap servers, dead-letter topic, its group
    /// (`<dlq-topic>.redrive` by default) and what to do.
    pub fn tool(&self) -> (String, String, String, Options) {
        let bootstrap = self.bootstrap.clone().unwrap_or_default();
        let dlq = self.dlq_topic.clone().unwrap_or_default();
        let group = self
            .group
            .clone()
            .unwrap_or_else(|| format!("{dlq}.redrive"));
        let options = Options {
            select: self.select.clone(),
            list: self.list,
            from_beginning: self.from_beginning,
        };
        (bootstrap, dlq, group, options)
    }
}

impl Options {
    /// Redrive every record read (the demo's).
    pub fn all() -> Self {
        Options {
            select: Select {
                all: true,
                ..Select::default()
            },
            list: false,
            from_beginning: false,
        }
    }
}

/// Prints one dead-lettered record read by a redrive: where it sits, where
/// it came from, why it failed, whether it is redriven now.
pub fn print_parked(dlq: &str, r: &Record, d: &DeadLetterRecord, chosen: bool) {
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
}

/// Logs (the library's warnings: a record dead-lettered, a shutdown) to
/// stderr; `RUST_LOG` overrides the level.
pub fn log_to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_target(false)
        .try_init();
}

// ---------------------------------------------------------------------------
// The demo
// ---------------------------------------------------------------------------

pub const DEMO_TOPIC: &str = "orders";
pub const DEMO_DLQ: &str = "orders.dlt";
pub const DEMO_GROUP: &str = "billing";
pub const DEMO_PARTITIONS: i32 = 2;
/// Every demo step gives up after this long.
pub const DEMO_STEP: Duration = Duration::from_secs(30);

/// Starts the demo's mock broker (librdkafka's, inside this process, until
/// the value is dropped) with the source topic and its dead-letter topic.
pub fn start_broker() -> Result<MockBroker, BoxError> {
    let broker = MockBroker::start()?;
    broker.create_topic(DEMO_TOPIC, DEMO_PARTITIONS)?;
    broker.create_topic(DEMO_DLQ, 1)?;
    println!(
        "mock Kafka broker at {}: topics {DEMO_TOPIC:?} ({DEMO_PARTITIONS} partitions), {DEMO_DLQ:?} (1 partition)",
        broker.bootstrap()
    );
    Ok(broker)
}

/// Produces the demo's six orders; one written by a client that uses a
/// decimal comma (with an `origin` header).
pub async fn produce_orders(bootstrap: &str) -> Result<(), BoxError> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
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
    Ok(())
}

/// Parses `amount=<decimal>`; with `comma_decimals`, also `12,50`.
pub fn amount(record: &Record, comma_decimals: bool) -> Result<f64, BoxError> {
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

/// A record's key, as text.
pub fn key(r: &Record) -> String {
    String::from_utf8_lossy(r.key().unwrap_or_default()).into_owned()
}

/// Runs `consumer` (of the demo topic, in the demo group) until its
/// committed offsets reach the topic's end (and, with `dlq`, that topic
/// holds a record), then stops it and prints its summary.
pub async fn run_until_caught_up<H: Handler>(
    consumer: FreshConsumer<H>,
    bootstrap: &str,
    dlq: Option<&str>,
) -> Result<(), BoxError> {
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
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
