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
//! With `--bootstrap host:port` the example uses that cluster instead of the
//! embedded broker. Every `-X key=value` is a librdkafka property given to
//! every client the example creates (consumer, producer, admin), for
//! security settings and the like. Without `--topic` it creates a topic of
//! its own (3 partitions), runs the demo workload in it and deletes it at
//! the end; with `--topic NAME` it reads that existing topic from the start
//! and produces nothing, until Ctrl-C / SIGTERM or `--exit-after-records N`.
//! On a cluster, the consumer group is a fresh `quickstart-…` one (or
//! `--group NAME`), so no other group's offsets are touched. The cluster is
//! checked first with a metadata request of at most 10 s: an unreachable
//! cluster or a missing topic ends the run with a message and exit status 1.
//!
//! Demo mode (the default) starts a mock Kafka cluster inside this process,
//! creates a 3-partition topic and produces a few thousand keyed records with a
//! real producer while the consumer runs. The workload is skewed the way real
//! ones are: one hot key carries most records, so one partition gets most of
//! the work and falls behind, and a few records carry timestamps minutes old
//! (late events). The handler simulates work with a short async sleep, and
//! fails now and then on the first attempt so the retry path runs too. The
//! consumer stops when every record was handled, or on Ctrl-C / SIGTERM.
//!
//! Serve mode (`--serve`) produces nothing itself. It prints the broker's
//! bootstrap address and the topic, and consumes whatever other clients
//! produce until Ctrl-C / SIGTERM, or until `--exit-after-records N` records
//! were handled:
//!
//! ```text
//! printf 'k1:hello\nk2:world\n' | kcat -P -b <bootstrap> -t quickstart -K:
//! ```
//!
//! At the end the example prints, per partition, what was handled and
//! committed, and the event-age distribution read back from the metrics
//! pipeline (an in-process reader on the same `SdkMeterProvider` the consumer
//! records into). When `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is set, the same provider also
//! exports over OTLP, configured by the standard `OTEL_*` variables through
//! `fresh_consumer::otlp`. When `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the consumer also exports
//! traces there: a `process <topic>` span per handler attempt
//! (`OtlpConfig::tracer_provider`, sampler from `OTEL_TRACES_SAMPLER`),
//! linked to the trace context of records that carry a W3C `traceparent`
//! header (`kcat -P -H traceparent=00-…`).
//!
//! The mock broker comes from `examples/support/mock_broker.rs` (shared with
//! the other examples and the benches). On a cluster given with
//! `--bootstrap`, the mock-only `fetch.wait.max.ms` setting is not applied.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/mock_broker.rs"]
mod mock_broker;
#[path = "support/names.rs"]
mod names;

use std::collections::{BTreeMap, HashSet};
use std::error::Error;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::metrics::{MESSAGING_DESTINATION_NAME, MESSAGING_DESTINATION_PARTITION_ID};
use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::{FreshConsumer, Record, RunSummary, TopicPartition};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::Notify;

use mock_broker::MockBroker;

/// The topic on the embedded broker; on a cluster, the prefix of the topic
/// the demo creates.
const TOPIC: &str = "quickstart";
/// Partitions of the topic the demo creates.
const PARTITIONS: i32 = 3;
const GROUP: &str = "quickstart";
/// How long the first metadata request to a cluster given with
/// `--bootstrap` may take before the run ends with "cannot reach".
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// Records produced in demo mode unless `--records N` says otherwise.
const DEFAULT_RECORDS: u64 = 4_000;
/// The hot key's share of the demo records, in percent.
const HOT_KEY_PERCENT: u64 = 60;
const HOT_KEY: &str = "customer-0042";
/// Share of demo records stamped minutes in the past (late events), in percent.
const LATE_PERCENT: u64 = 2;
/// Simulated work per record.
const WORK: Duration = Duration::from_millis(1);
/// Every this-many-th offset fails on its first attempt (a simulated timeout).
const FAIL_EVERY: i64 = 997;
/// Demo mode gives up after this long, whatever happened.
const DEMO_DEADLINE: Duration = Duration::from_secs(45);

#[derive(Debug)]
struct Args {
    serve: bool,
    exit_after: Option<u64>,
    records: Option<u64>,
    /// A cluster of the user's instead of the embedded broker.
    bootstrap: Option<String>,
    /// librdkafka properties (`-X key=value`) for every client.
    properties: Vec<(String, String)>,
    /// An existing topic to read (no demo records are produced).
    topic: Option<String>,
    group: Option<String>,
}

impl Args {
    /// Whether the demo workload runs (and must complete).
    fn demo(&self) -> bool {
        !self.serve && self.topic.is_none()
    }
}

const USAGE: &str = "\
usage: quickstart [--records N]
       quickstart --serve [--exit-after-records N]
       quickstart --bootstrap HOST:PORT [-X KEY=VALUE]... [--records N] [--group NAME]
       quickstart --bootstrap HOST:PORT [-X KEY=VALUE]... --topic NAME [--exit-after-records N] [--group NAME]

Without --bootstrap: an embedded mock Kafka broker. Without --serve, produce N
(default 4000) demo records into it, consume them, print a freshness table.
With --serve: keep the broker up, print its bootstrap address, consume what
other clients (kcat) produce until Ctrl-C/SIGTERM or N records were handled.

--bootstrap HOST:PORT  use this cluster instead (bootstrap.servers; a
                       comma-separated list works too)
-X KEY=VALUE           a librdkafka property for every client (repeatable),
                       e.g. -X security.protocol=SASL_SSL
--topic NAME           read this existing topic from the start, produce
                       nothing; without it, the demo runs in a topic the
                       example creates (and deletes at the end)
--group NAME           the consumer group (default: a new quickstart-... one)

OTEL_EXPORTER_OTLP_ENDPOINT set: also export the metrics over OTLP.";

fn parse_args() -> Result<Args, String> {
    parse_args_from(std::env::args().skip(1))
}

fn parse_args_from(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        serve: false,
        exit_after: None,
        records: None,
        bootstrap: None,
        properties: Vec::new(),
        topic: None,
        group: None,
    };
    let text = |flag: &str, value: Option<String>| {
        value
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| format!("{flag} needs a value"))
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--serve" => args.serve = true,
            "--exit-after-records" => args.exit_after = Some(cli::number(&arg, it.next())?),
            "--records" => args.records = Some(cli::number(&arg, it.next())?),
            "--bootstrap" => args.bootstrap = Some(text(&arg, it.next())?),
            "--topic" => args.topic = Some(text(&arg, it.next())?),
            "--group" => args.group = Some(text(&arg, it.next())?),
            "-X" => {
                let kv = text(&arg, it.next())?;
                let (key, value) = kv
                    .split_once('=')
                    .filter(|(k, _)| !k.trim().is_empty())
                    .ok_or_else(|| format!("-X needs KEY=VALUE, got {kv:?}"))?;
                args.properties
                    .push((key.trim().to_owned(), value.to_owned()));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if args.serve && args.bootstrap.is_some() {
        return Err(
            "--serve keeps the embedded broker up; it does not apply with --bootstrap".into(),
        );
    }
    if args.topic.is_some() && args.bootstrap.is_none() {
        return Err("--topic reads an existing topic of the cluster given with --bootstrap".into());
    }
    if args.group.is_some() && args.bootstrap.is_none() {
        return Err("--group applies with --bootstrap".into());
    }
    if args.exit_after.is_some() && !args.serve && args.topic.is_none() {
        return Err("--exit-after-records only applies with --serve or --topic".into());
    }
    if args.records.is_some() && !args.demo() {
        return Err(
            "--records sets the demo workload; it does not apply with --serve or --topic".into(),
        );
    }
    Ok(args)
}

/// What the example consumes: the cluster's address, the client properties,
/// the topic and its partition count.
struct Target {
    bootstrap: String,
    properties: Vec<(String, String)>,
    topic: String,
    partitions: i32,
    /// The topic was created by this run (on a user's cluster: delete it at
    /// the end).
    created: bool,
}

impl Target {
    /// A client configuration for this cluster: `bootstrap.servers` and
    /// every `-X` property.
    fn config(&self) -> ClientConfig {
        client_config(&self.bootstrap, &self.properties)
    }
}

fn client_config(bootstrap: &str, properties: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    for (key, value) in properties {
        config.set(key, value);
    }
    config
}

/// An error of the user's cluster (unreachable, missing topic), with what to
/// do about it.
#[derive(Debug)]
struct ClusterError(String);

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for ClusterError {}

/// Asks the user's cluster for its metadata (the topic's, with `--topic`),
/// waiting at most [`METADATA_TIMEOUT`]. Returns the broker count and, with
/// `--topic`, the topic's partition count.
async fn probe(
    bootstrap: &str,
    properties: &[(String, String)],
    topic: Option<&str>,
) -> Result<(usize, Option<i32>), Box<dyn Error>> {
    let client: BaseConsumer = client_config(bootstrap, properties).create()?;
    let topic_name = topic.map(str::to_owned);
    // `fetch_metadata` blocks: keep it off the async worker threads.
    let metadata = tokio::task::spawn_blocking(move || {
        client.fetch_metadata(topic_name.as_deref(), METADATA_TIMEOUT)
    })
    .await?
    .map_err(|e| {
        ClusterError(format!(
            "cannot reach the Kafka cluster at {bootstrap} within {}s: {e} (check the address, \
             and the -X security properties the cluster needs)",
            METADATA_TIMEOUT.as_secs()
        ))
    })?;
    let brokers = metadata.brokers().len();
    let Some(name) = topic else {
        return Ok((brokers, None));
    };
    let found = metadata.topics().iter().find(|t| t.name() == name);
    match found {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok((brokers, Some(t.partitions().len() as i32)))
        }
        Some(t) => {
            let why = t
                .error()
                .map(|e| rdkafka::error::RDKafkaErrorCode::from(e).to_string())
                .unwrap_or_else(|| "no partitions".to_owned());
            Err(ClusterError(format!(
                "topic {name:?} does not exist on {bootstrap} or is not readable ({why}); \
                 --topic reads an existing topic (leave it out to run the demo in a topic \
                 of its own)"
            ))
            .into())
        }
        None => Err(ClusterError(format!("topic {name:?} does not exist on {bootstrap}")).into()),
    }
}

/// Creates the demo's topic on the user's cluster: a name of its own,
/// [`PARTITIONS`] partitions, up to 3 replicas.
async fn create_demo_topic(
    bootstrap: &str,
    properties: &[(String, String)],
    brokers: usize,
) -> Result<String, Box<dyn Error>> {
    let name = names::unique(TOPIC);
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap, properties).create()?;
    let replicas = brokers.clamp(1, 3) as i32;
    let topic = NewTopic::new(&name, PARTITIONS, TopicReplication::Fixed(replicas));
    // librdkafka gives up by itself after the request timeout (a broker
    // without CreateTopics, such as librdkafka's mock, never answers).
    let options = AdminOptions::new()
        .operation_timeout(Some(METADATA_TIMEOUT))
        .request_timeout(Some(METADATA_TIMEOUT));
    let refused = |e: &dyn std::fmt::Display| {
        ClusterError(format!(
            "could not create topic {name:?} on {bootstrap}: {e} (pass --topic NAME to read \
             an existing topic instead)"
        ))
    };
    let results = tokio::time::timeout(
        METADATA_TIMEOUT * 2,
        admin.create_topics([&topic], &options),
    )
    .await
    .map_err(|_| refused(&"no answer in time"))?
    .map_err(|e| refused(&e))?;
    for r in results {
        r.map_err(|(_, code)| refused(&code))?;
    }
    Ok(name)
}

/// Deletes the topic the demo created on the user's cluster (best effort).
async fn delete_demo_topic(target: &Target) {
    let admin: Result<AdminClient<DefaultClientContext>, _> = target.config().create();
    let Ok(admin) = admin else {
        return;
    };
    let options = AdminOptions::new()
        .operation_timeout(Some(METADATA_TIMEOUT))
        .request_timeout(Some(METADATA_TIMEOUT));
    let deleted = tokio::time::timeout(
        METADATA_TIMEOUT * 2,
        admin.delete_topics(&[target.topic.as_str()], &options),
    )
    .await;
    match deleted {
        Ok(Ok(results)) if results.iter().all(Result::is_ok) => {
            println!("deleted topic {:?}", target.topic);
        }
        Ok(Ok(results)) => eprintln!(
            "could not delete topic {:?}: {:?}",
            target.topic,
            results
                .into_iter()
                .filter_map(Result::err)
                .collect::<Vec<_>>()
        ),
        Ok(Err(e)) => eprintln!("could not delete topic {:?}: {e}", target.topic),
        Err(_) => eprintln!(
            "could not delete topic {:?}: no answer in time",
            target.topic
        ),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("quickstart", parse_args);
    cli::exit_status("quickstart", run(args).await)
}

async fn run(args: Args) -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    // 1. The broker: librdkafka's mock cluster, in this process (it speaks
    //    the Kafka protocol on a loopback port, so any Kafka client can
    //    connect to it; it runs until `cluster` is dropped), or the user's
    //    cluster, checked with a bounded metadata request first.
    // `broker` (the embedded one) lives until the end of this function.
    let (broker, target) = match &args.bootstrap {
        None => {
            let broker = MockBroker::start()?;
            broker.create_topic(TOPIC, PARTITIONS)?;
            let target = Target {
                bootstrap: broker.bootstrap().to_owned(),
                properties: args.properties.clone(),
                topic: TOPIC.to_owned(),
                partitions: PARTITIONS,
                created: false,
            };
            println!(
                "mock Kafka broker: {}, topic {TOPIC:?} with {PARTITIONS} partitions",
                target.bootstrap
            );
            (Some(broker), target)
        }
        Some(bootstrap) => {
            let (brokers, partitions) =
                probe(bootstrap, &args.properties, args.topic.as_deref()).await?;
            let (topic, partitions, created) = match (&args.topic, partitions) {
                (Some(topic), Some(partitions)) => (topic.clone(), partitions, false),
                _ => (
                    create_demo_topic(bootstrap, &args.properties, brokers).await?,
                    PARTITIONS,
                    true,
                ),
            };
            println!(
                "Kafka cluster: {bootstrap} ({brokers} broker(s)), topic {topic:?} with \
                 {partitions} partitions{}",
                if created {
                    " (created for this run)"
                } else {
                    ""
                }
            );
            let target = Target {
                bootstrap: bootstrap.clone(),
                properties: args.properties.clone(),
                topic,
                partitions,
                created,
            };
            (None, target)
        }
    };
    let result = consume(&args, broker.is_some(), &target).await;
    if target.created {
        delete_demo_topic(&target).await;
    }
    drop(broker);
    result
}

/// Runs the consumer on `target` (and the demo producer, unless reading an
/// existing topic or serving), then prints the report.
/// `embedded`: `target` is the embedded mock broker.
async fn consume(args: &Args, embedded: bool, target: &Target) -> Result<(), Box<dyn Error>> {
    let records = args.records.unwrap_or(DEFAULT_RECORDS);
    let group = match (&args.group, embedded) {
        (Some(group), _) => group.clone(),
        (None, true) => GROUP.to_owned(),
        // A group of its own: no other group's offsets are touched, and the
        // topic is read from the start (`auto.offset.reset=earliest`).
        (None, false) => names::unique(GROUP),
    };

    // 2. Metrics: one provider, one in-process reader for the table printed at
    //    the end, plus an OTLP exporter when an endpoint is configured.
    let ages = AgeReader::new(&target.topic);
    let (provider, otlp_endpoint) = meter_provider(&ages)?;
    // Traces: only when an OTLP endpoint for them is configured.
    let traces = tracer_provider()?;

    // 3. The handler and the stop condition.
    let stop_after = if args.demo() {
        Some(records)
    } else {
        args.exit_after
    };
    // Simulated failures only in the demo's own records, never in a topic
    // of the user's.
    let state = Arc::new(State::new(target.partitions, stop_after, args.demo()));
    let handler = {
        let state = Arc::clone(&state);
        move |record: Record| {
            let state = Arc::clone(&state);
            async move { state.handle(record).await }
        }
    };

    if let Some(endpoint) = &otlp_endpoint {
        println!("exporting metrics over OTLP to {endpoint}");
    }
    if let Some((_, endpoint)) = &traces {
        println!("exporting traces over OTLP to {endpoint}");
    }
    let bootstrap = &target.bootstrap;
    let topic = &target.topic;
    let started = Instant::now();
    let (producer_task, progress_task) = if !args.demo() {
        if args.serve {
            // Lines for scripts (see .ci/run) and a command for people.
            println!("bootstrap={bootstrap}");
            println!("topic={topic}");
            println!(
                "serving: produce with `kcat -P -b {bootstrap} -t {topic} -K:` (lines key:value); \
                 Ctrl-C to stop{}",
                args.exit_after
                    .map(|n| format!(", or stops after {n} records"))
                    .unwrap_or_default()
            );
        } else {
            println!(
                "reading topic {topic:?} from the start as group {group:?}; nothing is produced; \
                 Ctrl-C to stop{}",
                args.exit_after
                    .map(|n| format!(", or stops after {n} records"))
                    .unwrap_or_default()
            );
        }
        (None, Some(tokio::spawn(progress(Arc::clone(&state)))))
    } else {
        println!(
            "producing {records} records: key {HOT_KEY:?} carries {HOT_KEY_PERCENT}%, \
             {LATE_PERCENT}% are stamped minutes old"
        );
        let producer: FutureProducer = target.config().set("linger.ms", "5").create()?;
        let state = Arc::clone(&state);
        let topic = topic.clone();
        let task = tokio::spawn(async move {
            let produced = produce_demo(producer, &topic, records).await;
            if produced.is_err() {
                // Nothing more will arrive: do not wait for the deadline.
                state.abort.notify_one();
            }
            produced
        });
        (Some(task), None)
    };

    let mut consumer = FreshConsumer::new(handler)
        .bootstrap_servers(bootstrap.clone())
        .group_id(group.clone())
        .topics([topic.clone()])
        .commit_interval(Duration::from_millis(200))
        .retry_backoff(Duration::from_millis(50), Duration::from_secs(1))
        .shutdown_timeout(Duration::from_secs(10))
        .meter_provider(&provider);
    if let Some((tracer_provider, _)) = &traces {
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
        .run_until(stop_signal(Arc::clone(&state), args.demo()))
        .await?;
    let elapsed = started.elapsed();
    if let Some(task) = progress_task {
        task.abort();
    }

    if let Some(task) = producer_task {
        match tokio::time::timeout(Duration::from_secs(5), task).await {
            Ok(Ok(Ok(produced))) => println!("produced {produced} records"),
            Ok(Ok(Err(e))) => eprintln!("producer: {e}"),
            Ok(Err(e)) => eprintln!("producer task: {e}"),
            Err(_) => eprintln!("producer still running at exit"),
        }
    }

    // The consumer flushed the provider at shutdown, so the in-process reader
    // holds the final (cumulative) histograms.
    let end_offsets = log_end_offsets(target).await;
    print_report(&state, &summary, &ages, target, &end_offsets, elapsed);

    if let Err(e) = fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(10)).await {
        eprintln!("metrics: {}", cli::chain(&e));
    }
    if let Some((tracer_provider, _)) = traces {
        // The consumer flushed it at shutdown; this exports what is left,
        // off the runtime's threads (see `OtlpConfig::tracer_provider`).
        match tokio::task::spawn_blocking(move || tracer_provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("traces: {}", cli::chain(&e)),
            Err(e) => eprintln!("traces: {e}"),
        }
    }

    // The demo doubles as a smoke test: everything produced must have been
    // handled, and every partition committed up to its log end.
    if args.demo() {
        let handled = state.total.load(Ordering::Relaxed);
        let committed_to_end = (0..target.partitions).all(|p| {
            let committed = summary.committed.get(&TopicPartition {
                topic: topic.clone(),
                partition: p,
            });
            match end_offsets[p as usize] {
                Some(0) => committed.is_none_or(|&c| c == 0),
                Some(end) => committed == Some(&end),
                None => false,
            }
        });
        if handled != records || !committed_to_end {
            return Err(format!(
                "demo incomplete: {handled} of {records} records handled; committed offsets {:?}, \
                 log end offsets {end_offsets:?}",
                summary.committed
            )
            .into());
        }
    }
    Ok(())
}

/// What the handler counts, and the condition that ends the run.
struct State {
    handled: Vec<AtomicU64>,
    /// The partition the hot key was seen on (-1 until then).
    hot_partition: AtomicI32,
    total: AtomicU64,
    failed_once: Mutex<HashSet<(i32, i64)>>,
    /// Whether the handler fails now and then on a first attempt (demo
    /// records only).
    simulate_failures: bool,
    target: Option<u64>,
    /// Notified when `target` records were handled.
    done: Notify,
    /// Notified when the run cannot complete (the demo producer failed).
    abort: Notify,
}

impl State {
    fn new(partitions: i32, target: Option<u64>, simulate_failures: bool) -> Self {
        State {
            handled: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            hot_partition: AtomicI32::new(-1),
            total: AtomicU64::new(0),
            failed_once: Mutex::new(HashSet::new()),
            simulate_failures,
            target,
            done: Notify::new(),
            abort: Notify::new(),
        }
    }

    /// The handler: simulated work, and a simulated transient failure on the
    /// first attempt of every `FAIL_EVERY`-th offset. A failed record is
    /// retried by the consumer; nothing after it in its partition is
    /// committed until it succeeds.
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
        if record.key() == Some(HOT_KEY.as_bytes()) {
            self.hot_partition
                .store(record.partition(), Ordering::Relaxed);
        }
        if let Some(n) = self.handled.get(record.partition() as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        if self.target == Some(total) {
            self.done.notify_one();
        }
        Ok(())
    }
}

/// Resolves on Ctrl-C, on SIGTERM, when the target count was handled, when
/// the run was aborted, or (in demo mode) at the safety deadline.
async fn stop_signal(state: Arc<State>, demo: bool) {
    let deadline = async {
        if demo {
            tokio::time::sleep(DEMO_DEADLINE).await;
            eprintln!("demo deadline of {DEMO_DEADLINE:?} reached; stopping");
        } else {
            std::future::pending::<()>().await;
        }
    };
    let done = async {
        if state.target == Some(0) {
            return;
        }
        state.done.notified().await;
    };
    tokio::select! {
        () = done => println!("all {} records handled; stopping", state.target.unwrap_or(0)),
        () = cli::shutdown_signal() => println!("signal received; stopping"),
        () = state.abort.notified() => eprintln!("aborted; stopping"),
        () = deadline => {}
    }
}

/// Serve mode: one line per second while records arrive.
async fn progress(state: Arc<State>) {
    let mut last = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let total = state.total.load(Ordering::Relaxed);
        if total != last {
            last = total;
            let per: Vec<String> = state
                .handled
                .iter()
                .enumerate()
                .map(|(p, n)| format!("p{p}={}", n.load(Ordering::Relaxed)))
                .collect();
            println!("handled {total} records ({})", per.join(" "));
        }
    }
}

/// Demo workload: `n` keyed records, produced at a steady pace over about two
/// seconds while the consumer runs. Returns how many were acknowledged.
async fn produce_demo(producer: FutureProducer, topic: &str, n: u64) -> Result<u64, String> {
    let now_ms = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64
    };
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let batches = 20;
    let per_batch = n.div_ceil(batches).max(1);
    let mut pending = Vec::with_capacity(n as usize);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for i in 0..n {
        if i % per_batch == 0 {
            tick.tick().await;
        }
        let key = if rng.below(100) < HOT_KEY_PERCENT {
            HOT_KEY.to_owned()
        } else {
            format!("customer-{:04}", rng.below(500))
        };
        let payload = format!(
            r#"{{"order":{i},"customer":"{key}","amount_cents":{}}}"#,
            100 + rng.below(9_900)
        );
        let mut record = FutureRecord::to(topic).key(&key).payload(&payload);
        if rng.below(100) < LATE_PERCENT {
            // A late event: it happened 1 to 10 minutes ago.
            let age_ms = 60_000 + rng.below(540_000) as i64;
            record = record.timestamp(now_ms() - age_ms);
        }
        let delivery = producer
            .send_result(record)
            .map_err(|(e, _)| format!("enqueue: {e}"))?;
        pending.push(delivery);
    }
    let mut acked = 0;
    for delivery in pending {
        match delivery.await {
            Ok(Ok(_)) => acked += 1,
            Ok(Err((e, _))) => return Err(format!("delivery: {e}")),
            Err(_) => return Err("delivery canceled".into()),
        }
    }
    producer
        .flush(Duration::from_secs(5))
        .map_err(|e| format!("flush: {e}"))?;
    Ok(acked)
}

/// A tiny deterministic PRNG (xorshift64), so the demo needs no extra crate.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Builds the meter provider: the in-process reader always, OTLP when an
/// endpoint is configured. Returns the OTLP endpoint in use, if any.
fn meter_provider(ages: &AgeReader) -> Result<(SdkMeterProvider, Option<String>), Box<dyn Error>> {
    // The in-process reader is exported to only when the provider is flushed
    // (the consumer does that at shutdown), hence the long interval.
    let local = PeriodicReader::builder(ages.clone())
        .with_interval(Duration::from_secs(3_600))
        .build();
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        return Ok((SdkMeterProvider::builder().with_reader(local).build(), None));
    }
    let mut config = OtlpConfig::from_env()?;
    if !set("OTEL_SERVICE_NAME") {
        config = config.with_service_name("fresh-consumer-quickstart");
    }
    let endpoint = format!("{} ({})", config.endpoint(), config.protocol());
    let provider = config.meter_provider_builder()?.with_reader(local).build();
    Ok((provider, Some(endpoint)))
}

/// Builds a tracer provider exporting over OTLP when an endpoint for traces
/// is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), with the endpoint in use; `None`
/// otherwise (no spans are created then).
fn tracer_provider() -> Result<Option<(SdkTracerProvider, String)>, Box<dyn Error>> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Ok(None);
    }
    let mut config = OtlpConfig::from_env()?;
    if !set("OTEL_SERVICE_NAME") {
        config = config.with_service_name("fresh-consumer-quickstart");
    }
    let endpoint = format!(
        "{} ({})",
        config.traces_endpoint(),
        config.traces_protocol()
    );
    Ok(Some((config.tracer_provider()?, endpoint)))
}

/// One partition's event-age histogram, merged over its attribute sets.
#[derive(Clone, Debug, Default)]
struct AgeHistogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    count: u64,
    min: f64,
    max: f64,
}

impl AgeHistogram {
    fn merge(&mut self, bounds: Vec<f64>, counts: Vec<u64>, min: f64, max: f64) {
        if self.counts.is_empty() {
            self.bounds = bounds;
            self.counts = counts;
            self.min = min;
            self.max = max;
        } else {
            for (a, b) in self.counts.iter_mut().zip(counts) {
                *a += b;
            }
            self.min = self.min.min(min);
            self.max = self.max.max(max);
        }
        self.count = self.counts.iter().sum();
    }

    /// Estimates the `q` quantile: finds the bucket holding that rank and
    /// interpolates linearly inside it, with the bucket clamped to the
    /// observed min and max. Only as precise as the bucket boundaries.
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).max(1.0);
        let mut below = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (below + c) as f64 >= rank {
                let lo = if i == 0 {
                    self.min
                } else {
                    self.bounds[i - 1].max(self.min)
                };
                let hi = self.bounds.get(i).map_or(self.max, |b| b.min(self.max));
                let within = (rank - below as f64) / c as f64;
                return Some(lo + (hi - lo) * within);
            }
            below += c;
        }
        Some(self.max)
    }
}

/// An in-process metric reader: a push exporter that keeps the latest
/// `fresh_consumer.event.age` data points per partition in memory. With
/// cumulative temporality the latest export holds everything since start.
///
/// It sits behind a `PeriodicReader` and is exported to whenever the provider
/// is flushed. (opentelemetry_sdk 0.33's `ManualReader` would do the same but
/// needs the `experimental_metrics_custom_reader` feature.)
#[derive(Clone)]
struct AgeReader {
    /// The topic whose partitions are read.
    topic: Arc<str>,
    ages: Arc<Mutex<BTreeMap<i32, AgeHistogram>>>,
}

impl AgeReader {
    fn new(topic: &str) -> Self {
        AgeReader {
            topic: topic.into(),
            ages: Arc::default(),
        }
    }

    fn snapshot(&self) -> BTreeMap<i32, AgeHistogram> {
        self.ages.lock().unwrap().clone()
    }
}

impl PushMetricExporter for AgeReader {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let mut per_partition: BTreeMap<i32, AgeHistogram> = BTreeMap::new();
        let histograms = metrics
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .filter(|m| m.name() == EVENT_AGE)
            .filter_map(|m| match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => Some(h),
                _ => None,
            });
        for histogram in histograms {
            for point in histogram.data_points() {
                let attr = |key: &str| {
                    point
                        .attributes()
                        .find(|kv| kv.key.as_str() == key)
                        .map(|kv| kv.value.as_str().into_owned())
                };
                if attr(MESSAGING_DESTINATION_NAME).as_deref() != Some(&*self.topic) {
                    continue;
                }
                let Some(partition) =
                    attr(MESSAGING_DESTINATION_PARTITION_ID).and_then(|p| p.parse::<i32>().ok())
                else {
                    continue;
                };
                per_partition.entry(partition).or_default().merge(
                    point.bounds().collect(),
                    point.bucket_counts().collect(),
                    point.min().unwrap_or(0.0),
                    point.max().unwrap_or(0.0),
                );
            }
        }
        *self.ages.lock().unwrap() = per_partition;
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// The high watermark (log end offset) of each partition, read from the broker.
async fn log_end_offsets(target: &Target) -> Vec<Option<i64>> {
    let config = target.config();
    let topic = target.topic.clone();
    let partitions = target.partitions;
    // `fetch_watermarks` blocks: keep it off the async worker threads.
    tokio::task::spawn_blocking(move || {
        let client: Result<BaseConsumer, _> = config.create();
        let Ok(client) = client else {
            return vec![None; partitions as usize];
        };
        (0..partitions)
            .map(|p| {
                client
                    .fetch_watermarks(&topic, p, Duration::from_secs(5))
                    .ok()
                    .map(|(_, high)| high)
            })
            .collect()
    })
    .await
    .unwrap_or_else(|_| vec![None; partitions as usize])
}

fn print_report(
    state: &State,
    summary: &RunSummary,
    ages: &AgeReader,
    target: &Target,
    end_offsets: &[Option<i64>],
    elapsed: Duration,
) {
    let ages = ages.snapshot();
    let opt = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let age = |v: Option<f64>| v.map_or("-".to_owned(), human);
    println!();
    println!(
        "{:>9} {:>8} {:>10} {:>8} | {:>11} {:>9} {:>9} {:>9}",
        "partition",
        "handled",
        "committed",
        "log end",
        "age samples",
        "p50 age",
        "p99 age",
        "max age"
    );
    for p in 0..target.partitions {
        let handled = state.handled[p as usize].load(Ordering::Relaxed);
        let committed = summary
            .committed
            .get(&TopicPartition {
                topic: target.topic.clone(),
                partition: p,
            })
            .copied();
        let h = ages.get(&p).cloned().unwrap_or_default();
        let max = (h.count > 0).then_some(h.max);
        println!(
            "{:>9} {:>8} {:>10} {:>8} | {:>11} {:>9} {:>9} {:>9}",
            p,
            handled,
            opt(committed),
            opt(end_offsets.get(p as usize).copied().flatten()),
            h.count,
            age(h.quantile(0.5)),
            age(h.quantile(0.99)),
            age(max),
        );
    }
    println!();
    println!(
        "handled = handler succeeded; committed = the group's next offset to read \
         (everything below it succeeded); log end = high watermark."
    );
    println!(
        "Event age = handler success time minus record timestamp, read back from the \
         `{EVENT_AGE}` histogram: p50/p99 are estimates interpolated inside histogram \
         buckets, max is exact."
    );
    let hot = state.hot_partition.load(Ordering::Relaxed);
    if hot >= 0 {
        println!(
            "The hot key {HOT_KEY:?} hashes to partition {hot}: its records queue behind each \
             other (one partition is handled one record at a time, in offset order), so they \
             are handled later. Every partition ends with zero offset lag; the event age shows \
             which one was late, and by how much."
        );
    }
    println!(
        "run: received={} succeeded={} failed_attempts={} (retried) commits={} \
         commit_failures={} rebalance_events={} elapsed={:.1}s{}",
        summary.records_received,
        summary.records_succeeded,
        summary.failed_attempts,
        summary.commits,
        summary.commit_failures,
        summary.rebalances,
        elapsed.as_secs_f64(),
        if summary.shutdown_timed_out {
            " (shutdown timed out)"
        } else {
            ""
        }
    );
}

/// `12.3 ms`, `1.24 s`, `4m05s`.
fn human(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1_000.0)
    } else if seconds < 60.0 {
        format!("{seconds:.2} s")
    } else {
        let s = seconds.round() as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    }
}
