//! The poll-interval watchdog, observed over the wire (an in-process OTLP
//! receiver) and in the log: a handler that blocks the async runtime is
//! warned about once per crossing, while it blocks; an idle consumer is
//! not; a poll loop on another worker of a multi-thread runtime keeps
//! polling; blocking past `max.poll.interval.ms` is counted once.
//!
//! All tests use `session.timeout.ms` = 6000 (the support default) and a
//! `max.poll.interval.ms` just above it, with `poll_warning_ratio` 0.2: the
//! warning threshold is about 1.2 s. Each test uses its own
//! `max.poll.interval.ms`, which the watchdog's warning log carries, so the
//! log capture can tell the tests of this binary apart.

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::*;
use fresh_consumer::otlp::{self, OtlpConfig};
use fresh_consumer::{FreshConsumer, Handler, Record, RunError, RunSummary};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, filter};

use support::kafka::{TestCluster, unique, wait_until};
use support::otlp_receiver::{
    OtlpReceiver, attrs, histogram_point_with, sum_shape, sum_total_matching,
};

const WAIT: Duration = Duration::from_secs(15);
const RATIO: f64 = 0.2;
/// How long a blocking handler blocks: well past the ~1.2 s threshold,
/// well below `max.poll.interval.ms`.
const BLOCK: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------
// Log capture
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Captured {
    target: String,
    message: String,
    fields: String,
}

fn captured() -> &'static Mutex<Vec<Captured>> {
    static CAPTURED: OnceLock<Mutex<Vec<Captured>>> = OnceLock::new();
    CAPTURED.get_or_init(Mutex::default)
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, "{}={value:?} ", field.name());
        }
    }
}

/// Keeps the library's events at INFO and above.
struct Capture;

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        captured().lock().unwrap().push(Captured {
            target: event.metadata().target().to_owned(),
            message: fields.message,
            fields: fields.rest,
        });
    }
}

fn init() {
    let capture = Capture.with_filter(filter::filter_fn(|m| {
        m.target().starts_with("fresh_consumer") && *m.level() <= tracing::Level::INFO
    }));
    let fmt = tracing_subscriber::fmt::layer()
        .with_test_writer()
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,fresh_consumer=info".into()),
        );
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(capture)
        .try_init();
}

/// Watchdog warnings logged for the consumer with this `max.poll.interval.ms`.
fn logged_warnings(max_poll_ms: u64) -> usize {
    let wanted = format!("max_poll_interval_ms={max_poll_ms} ");
    captured()
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.target == "fresh_consumer::engine::watchdog" && c.fields.contains(&wanted))
        .count()
}

/// Library log events whose message starts with `prefix` and whose fields
/// mention `topic`.
fn logged(prefix: &str, topic: &str) -> usize {
    captured()
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.message.starts_with(prefix) && c.fields.contains(topic))
        .count()
}

// ---------------------------------------------------------------------------
// Consumer and handler
// ---------------------------------------------------------------------------

fn provider_for(receiver: &OtlpReceiver) -> SdkMeterProvider {
    OtlpConfig::new()
        .with_endpoint(receiver.endpoint())
        .with_export_interval(Duration::from_secs(60))
        .build()
        .expect("provider")
}

struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<RunSummary, RunError>>,
}

impl Running {
    async fn stop(self) -> RunSummary {
        self.stop.cancel();
        self.task.await.expect("run_until task").expect("run_until")
    }
}

fn start<H: Handler>(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
    handler: H,
    max_poll_ms: u64,
    provider: &SdkMeterProvider,
) -> Running {
    let consumer: FreshConsumer<H> = cluster
        .consumer(group, topic, handler)
        .set("max.poll.interval.ms", max_poll_ms.to_string())
        .poll_warning_ratio(RATIO)
        .meter_provider(provider);
    let stop = CancellationToken::new();
    let task = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
    Running { stop, task }
}

/// What a [`blocker`] handler did: per handled record, its key and, for a
/// record it blocked on, whether the watchdog's warning was logged before
/// the block ended.
#[derive(Clone, Default)]
struct Blocks(Arc<Mutex<Vec<Handled>>>);

/// A handled record's key, and for a block whether it was warned about.
type Handled = (String, Option<bool>);

impl Blocks {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn warned_while_blocking(&self) -> Vec<bool> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, w)| *w)
            .collect()
    }
}

/// A handler that blocks its thread (`std::thread::sleep`, the classic
/// mistake) for `block` on the first delivery of every record whose key
/// starts with `block`, and returns at once otherwise.
fn blocker(
    blocks: &Blocks,
    block: Duration,
    max_poll_ms: u64,
) -> impl Fn(Record) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    let blocks = blocks.clone();
    let blocked_once: Arc<Mutex<BTreeMap<i64, bool>>> = Arc::default();
    move |r: Record| {
        let key = String::from_utf8_lossy(r.key().unwrap_or_default()).into_owned();
        let first = blocked_once
            .lock()
            .unwrap()
            .insert(r.offset(), true)
            .is_none();
        let mut warned = None;
        if key.starts_with("block") && first {
            let before = logged_warnings(max_poll_ms);
            std::thread::sleep(block);
            warned = Some(logged_warnings(max_poll_ms) > before);
        }
        blocks.0.lock().unwrap().push((key, warned));
        std::future::ready(Ok(()))
    }
}

fn group_attrs(group: &str) -> BTreeMap<String, String> {
    attrs(&[
        (MESSAGING_SYSTEM, "kafka"),
        (MESSAGING_CONSUMER_GROUP_NAME, group),
    ])
}

/// (warnings, exceeded) as received; a counter never recorded into is not
/// exported at all and counts as 0.
fn poll_counters(receiver: &OtlpReceiver, group: &str) -> (f64, f64) {
    let g = group_attrs(group);
    (
        sum_total_matching(receiver.latest_metric(POLL_INTERVAL_WARNINGS).as_ref(), &g),
        sum_total_matching(receiver.latest_metric(POLL_INTERVAL_EXCEEDED).as_ref(), &g),
    )
}

/// The longest poll gap recorded and how many gaps were recorded.
fn poll_gaps(receiver: &OtlpReceiver, group: &str) -> (f64, u64) {
    let m = receiver
        .latest_metric(POLL_INTERVAL)
        .expect("poll interval exported");
    let p = histogram_point_with(&m, &group_attrs(group));
    (p.max.unwrap_or(0.0), p.count)
}

fn threshold(max_poll_ms: u64) -> f64 {
    max_poll_ms as f64 / 1000.0 * RATIO
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// One handler blocks the current-thread runtime (and with it the poll
/// loop) for 2 s, past the 1.2 s threshold: exactly one warning, logged
/// while the handler was still blocking.
#[tokio::test]
async fn a_blocked_runtime_is_warned_once_while_it_is_blocked() {
    const MAX_POLL_MS: u64 = 6_000;
    init();
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    let cluster = TestCluster::start();
    let topic = cluster.topic("block-once", 1).await;
    let group = unique("g-block-once");
    cluster.produce(&topic, 0, "block", "v", None).await;
    cluster.produce(&topic, 0, "after", "v", None).await;

    let blocks = Blocks::default();
    let run = start(
        &cluster,
        &group,
        &topic,
        blocker(&blocks, BLOCK, MAX_POLL_MS),
        MAX_POLL_MS,
        &provider,
    );
    wait_until(WAIT, "both records handled", || async { blocks.len() == 2 }).await;
    let summary = run.stop().await;

    assert_eq!(
        blocks.warned_while_blocking(),
        vec![true],
        "the warning fires during the gap, not after the next poll"
    );
    assert_eq!(logged_warnings(MAX_POLL_MS), 1);
    assert_eq!(
        poll_counters(&receiver, &group),
        (1.0, 0.0),
        "(warnings, exceeded)"
    );
    let (max_gap, _) = poll_gaps(&receiver, &group);
    assert!(max_gap >= BLOCK.as_secs_f64(), "longest gap {max_gap} s");
    assert_eq!(summary.rebalances, 1, "still in the group: {summary:?}");
    assert_eq!(summary.records_succeeded, 2);
    let _ = otlp::shutdown(&provider, Duration::from_secs(10)).await;
}

/// Two blocks separated by polls are two crossings: two warnings. The
/// second record can only reach the handler through a poll, so the loop
/// polled in between.
#[tokio::test]
async fn two_separate_blocks_are_two_warnings() {
    const MAX_POLL_MS: u64 = 6_050;
    init();
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    let cluster = TestCluster::start();
    let topic = cluster.topic("block-twice", 1).await;
    let group = unique("g-block-twice");
    cluster.produce(&topic, 0, "block-1", "v", None).await;

    let blocks = Blocks::default();
    let run = start(
        &cluster,
        &group,
        &topic,
        blocker(&blocks, BLOCK, MAX_POLL_MS),
        MAX_POLL_MS,
        &provider,
    );
    wait_until(WAIT, "the first block", || async { blocks.len() == 1 }).await;
    cluster.produce(&topic, 0, "block-2", "v", None).await;
    wait_until(WAIT, "the second block", || async { blocks.len() == 2 }).await;
    let summary = run.stop().await;

    assert_eq!(blocks.warned_while_blocking(), vec![true, true]);
    assert_eq!(logged_warnings(MAX_POLL_MS), 2);
    assert_eq!(
        poll_counters(&receiver, &group),
        (2.0, 0.0),
        "(warnings, exceeded)"
    );
    assert_eq!(summary.rebalances, 1, "{summary:?}");
    let _ = otlp::shutdown(&provider, Duration::from_secs(10)).await;
}

/// On a multi-thread runtime the poll loop runs on another worker while a
/// handler blocks one: it keeps polling, so there is nothing to warn about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_one_worker_of_a_multi_thread_runtime_is_not_warned() {
    const MAX_POLL_MS: u64 = 6_100;
    init();
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    let cluster = TestCluster::start();
    let topic = cluster.topic("block-mt", 1).await;
    let group = unique("g-block-mt");
    cluster.produce(&topic, 0, "block", "v", None).await;
    cluster.produce(&topic, 0, "after", "v", None).await;

    let blocks = Blocks::default();
    let run = start(
        &cluster,
        &group,
        &topic,
        blocker(&blocks, BLOCK, MAX_POLL_MS),
        MAX_POLL_MS,
        &provider,
    );
    wait_until(WAIT, "both records handled", || async { blocks.len() == 2 }).await;
    let summary = run.stop().await;

    assert_eq!(blocks.warned_while_blocking(), vec![false]);
    assert_eq!(logged_warnings(MAX_POLL_MS), 0);
    assert_eq!(
        poll_counters(&receiver, &group),
        (0.0, 0.0),
        "(warnings, exceeded)"
    );
    let (max_gap, _) = poll_gaps(&receiver, &group);
    assert!(
        max_gap < threshold(MAX_POLL_MS),
        "the loop kept polling: longest gap {max_gap} s"
    );
    assert_eq!(summary.records_succeeded, 2);
    let _ = otlp::shutdown(&provider, Duration::from_secs(10)).await;
}

/// An idle consumer on an empty topic, for longer than
/// `max.poll.interval.ms`: no warning, nothing exceeded, never kicked out
/// of the group (one assignment, no revoke, no loss), and it still consumes.
#[tokio::test]
async fn an_idle_consumer_is_neither_warned_nor_kicked_out() {
    const MAX_POLL_MS: u64 = 6_150;
    init();
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    let cluster = TestCluster::start();
    let topic = cluster.topic("idle", 1).await;
    let group = unique("g-idle");

    let blocks = Blocks::default();
    let run = start(
        &cluster,
        &group,
        &topic,
        blocker(&blocks, BLOCK, MAX_POLL_MS),
        MAX_POLL_MS,
        &provider,
    );
    wait_until(WAIT, "the partition assigned", || async {
        logged("partitions assigned", &topic) == 1
    })
    .await;
    // Idle on purpose: longer than max.poll.interval.ms.
    let idle = Duration::from_millis(MAX_POLL_MS + 1_500);
    tokio::time::sleep(idle).await;
    cluster.produce(&topic, 0, "late", "v", None).await;
    wait_until(WAIT, "the record handled", || async { blocks.len() == 1 }).await;
    let summary = run.stop().await;

    assert_eq!(logged_warnings(MAX_POLL_MS), 0);
    assert_eq!(
        poll_counters(&receiver, &group),
        (0.0, 0.0),
        "(warnings, exceeded)"
    );
    let (max_gap, gaps) = poll_gaps(&receiver, &group);
    assert!(max_gap < threshold(MAX_POLL_MS), "longest gap {max_gap} s");
    // The idle tick is a quarter of the threshold: about 0.3 s.
    assert!(
        gaps as f64 >= idle.as_secs_f64() / (threshold(MAX_POLL_MS) / 4.0) * 0.8,
        "{gaps} gaps recorded in {idle:?}"
    );
    assert_eq!(
        summary.rebalances, 1,
        "one assignment, no revoke: {summary:?}"
    );
    assert_eq!(logged("partitions assigned", &topic), 1);
    assert_eq!(logged("partitions lost", &topic), 0);
    assert_eq!(logged("partitions revoked", &topic), 0);
    assert_eq!(summary.records_succeeded, 1);
    let _ = otlp::shutdown(&provider, Duration::from_secs(10)).await;
}

/// A handler that blocks the current-thread runtime past
/// `max.poll.interval.ms`: librdkafka leaves the group and, at the next
/// poll, reports it twice (error event and consume error); the library
/// counts it once, next to the one warning that came before; the partition
/// is lost and assigned again.
#[tokio::test]
async fn blocking_past_max_poll_interval_is_counted_once() {
    const MAX_POLL_MS: u64 = 6_200;
    init();
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    let cluster = TestCluster::start();
    let topic = cluster.topic("exceeded", 1).await;
    let group = unique("g-exceeded");
    cluster.produce(&topic, 0, "block", "v", None).await;

    let blocks = Blocks::default();
    let block = Duration::from_millis(MAX_POLL_MS + 2_000);
    let started = Instant::now();
    let run = start(
        &cluster,
        &group,
        &topic,
        blocker(&blocks, block, MAX_POLL_MS),
        MAX_POLL_MS,
        &provider,
    );
    wait_until(WAIT, "the blocking record handled", || async {
        blocks.len() >= 1
    })
    .await;
    wait_until(WAIT, "the partition assigned again", || async {
        logged("partitions assigned", &topic) >= 2
    })
    .await;
    let summary = run.stop().await;
    eprintln!("took {:?}: {summary:?}", started.elapsed());

    assert_eq!(
        poll_counters(&receiver, &group),
        (1.0, 1.0),
        "(warnings, exceeded)"
    );
    assert_eq!(blocks.warned_while_blocking(), vec![true]);
    assert_eq!(logged("partitions lost", &topic), 1);
    assert!(summary.rebalances >= 3, "assign, lose, assign: {summary:?}");
    for (name, unit, description) in [
        (
            POLL_INTERVAL_WARNINGS,
            "{warning}",
            "Poll gaps that crossed the warning share of max.poll.interval.ms.",
        ),
        (
            POLL_INTERVAL_EXCEEDED,
            "{event}",
            "Times librdkafka reported max.poll.interval.ms exceeded.",
        ),
    ] {
        let m = receiver.latest_metric(name).expect(name);
        assert_eq!(m.unit, unit, "{name}");
        assert_eq!(m.description, description, "{name}");
        assert_eq!(sum_shape(&m), (true, 2), "{name}: monotonic, cumulative");
    }
    let _ = otlp::shutdown(&provider, Duration::from_secs(10)).await;
}
