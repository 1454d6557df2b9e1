//! The poll-interval watchdog, observed through the library's metrics (the
//! SDK's in-memory exporter) and in the log: a handler that blocks the async
//! runtime is warned about once per crossing, while it blocks; an idle
//! consumer is not; a poll loop on another worker of a multi-thread runtime
//! keeps polling; blocking past `max.poll.interval.ms` is counted once.
//!
//! All tests use `session.timeout.ms` = 6000 (the support default) and a
//! `max.poll.interval.ms` just above it, with `poll_warning_ratio` 0.2: the
//! warning threshold is about 1.2 s. Each test uses its own
//! `max.poll.interval.ms`, which the watchdog's warning log carries, so the
//! log capture can tell the tests of this binary apart.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::*;
use fresh_consumer::{Record, RunSummary};

use support::kafka::{TestCluster, unique};
use support::logs;
use support::metrics::{group_attrs, sum_shape, unit_and_description};
use support::run::{Running, start};
use support::wait::{WAIT, wait_until};

const RATIO: f64 = 0.2;
/// How long a blocking handler blocks: well past the ~1.2 s threshold,
/// well below `max.poll.interval.ms`.
const BLOCK: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------
// Log queries
// ---------------------------------------------------------------------------

/// Watchdog warnings logged for the consumer with this `max.poll.interval.ms`
/// (the watchdog module's log target, wherever it sits in the crate).
fn logged_warnings(max_poll_ms: u64) -> usize {
    let wanted = format!("max_poll_interval_ms={max_poll_ms} ");
    logs::count(|e| e.is_from("watchdog") && e.fields.contains(&wanted))
}

/// Library log events whose message starts with `prefix` and whose fields
/// mention `topic`.
fn logged(prefix: &str, topic: &str) -> usize {
    logs::count(|e| e.is_library() && e.message.starts_with(prefix) && e.fields.contains(topic))
}

// ---------------------------------------------------------------------------
// Consumer and handler
// ---------------------------------------------------------------------------

/// One test's consumer: its own topic (with `keys` produced to it, one
/// record each), group, `max.poll.interval.ms` and metrics, and a
/// [`blocker`] handler that blocks for `block`.
struct Watched {
    metrics: TestMetrics,
    cluster: TestCluster,
    topic: String,
    group: String,
    max_poll_ms: u64,
    blocks: Blocks,
    run: Running,
}

impl Watched {
    async fn start(prefix: &str, max_poll_ms: u64, keys: &[&str], block: Duration) -> Self {
        logs::init();
        let metrics = TestMetrics::new();
        let cluster = TestCluster::start();
        let topic = cluster.topic(prefix, 1).await;
        let group = unique(&format!("g-{prefix}"));
        for key in keys {
            cluster.produce(&topic, 0, key, "v", None).await;
        }
        let blocks = Blocks::default();
        let run = start(
            cluster
                .consumer(&group, &topic, blocker(&blocks, block, max_poll_ms))
                .set("max.poll.interval.ms", max_poll_ms.to_string())
                .poll_warning_ratio(RATIO)
                .meter_provider(metrics.provider()),
        );
        Watched {
            metrics,
            cluster,
            topic,
            group,
            max_poll_ms,
            blocks,
            run,
        }
    }

    /// Waits until the handler handled `n` records.
    async fn wait_handled(&self, n: usize) {
        let what = format!("{n} records handled");
        wait_until(WAIT, &what, || async { self.blocks.len() >= n }).await;
    }

    /// Stops the consumer and exports its metrics.
    async fn stop(self) -> (Finished, RunSummary) {
        let summary = self.run.stop().await;
        self.metrics.flush().await.expect("flush the metrics");
        let finished = Finished {
            warned_while_blocking: self.blocks.warned_while_blocking(),
            metrics: self.metrics,
            topic: self.topic,
            group: self.group,
            max_poll_ms: self.max_poll_ms,
        };
        (finished, summary)
    }
}

/// What a stopped [`Watched`] consumer left behind.
struct Finished {
    metrics: TestMetrics,
    topic: String,
    group: String,
    max_poll_ms: u64,
    warned_while_blocking: Vec<bool>,
}

impl Finished {
    fn warnings_logged(&self) -> usize {
        logged_warnings(self.max_poll_ms)
    }

    /// (warnings, exceeded) as counted; a counter never recorded into is not
    /// exported at all and counts as 0.
    fn counters(&self) -> (f64, f64) {
        let g = group_attrs(&self.group);
        (
            self.metrics.counter_total(POLL_INTERVAL_WARNINGS, &g),
            self.metrics.counter_total(POLL_INTERVAL_EXCEEDED, &g),
        )
    }

    /// The longest poll gap recorded (s) and how many gaps were recorded.
    fn gaps(&self) -> (f64, u64) {
        let gaps = self
            .metrics
            .histogram(POLL_INTERVAL, &group_attrs(&self.group));
        (gaps.max.unwrap_or(0.0), gaps.count)
    }

    /// The warning threshold (s).
    fn threshold(&self) -> f64 {
        self.max_poll_ms as f64 / 1000.0 * RATIO
    }
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

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

/// One handler blocks the current-thread runtime (and with it the poll
/// loop) for 2 s, past the 1.2 s threshold: exactly one warning, logged
/// while the handler was still blocking.
#[tokio::test]
async fn a_blocked_runtime_is_warned_once_while_it_is_blocked() {
    let w = Watched::start("block-once", 6_000, &["block", "after"], BLOCK).await;
    w.wait_handled(2).await;
    let (f, summary) = w.stop().await;

    assert_eq!(
        f.warned_while_blocking,
        vec![true],
        "the warning fires during the gap, not after the next poll"
    );
    assert_eq!(f.warnings_logged(), 1);
    assert_eq!(f.counters(), (1.0, 0.0), "(warnings, exceeded)");
    let (max_gap, _) = f.gaps();
    assert!(max_gap >= BLOCK.as_secs_f64(), "longest gap {max_gap} s");
    assert_eq!(summary.rebalances, 1, "still in the group: {summary:?}");
    assert_eq!(summary.records_succeeded, 2);
    let _ = f.metrics.shutdown().await;
}

/// Two blocks separated by polls are two crossings: two warnings. The
/// second record can only reach the handler through a poll, so the loop
/// polled in between.
#[tokio::test]
async fn two_separate_blocks_are_two_warnings() {
    let w = Watched::start("block-twice", 6_050, &["block-1"], BLOCK).await;
    w.wait_handled(1).await;
    w.cluster.produce(&w.topic, 0, "block-2", "v", None).await;
    w.wait_handled(2).await;
    let (f, summary) = w.stop().await;

    assert_eq!(f.warned_while_blocking, vec![true, true]);
    assert_eq!(f.warnings_logged(), 2);
    assert_eq!(f.counters(), (2.0, 0.0), "(warnings, exceeded)");
    assert_eq!(summary.rebalances, 1, "{summary:?}");
    let _ = f.metrics.shutdown().await;
}

/// On a multi-thread runtime the poll loop runs on another worker while a
/// handler blocks one: it keeps polling, so there is nothing to warn about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_one_worker_of_a_multi_thread_runtime_is_not_warned() {
    let w = Watched::start("block-mt", 6_100, &["block", "after"], BLOCK).await;
    w.wait_handled(2).await;
    let (f, summary) = w.stop().await;

    assert_eq!(f.warned_while_blocking, vec![false]);
    assert_eq!(f.warnings_logged(), 0);
    assert_eq!(f.counters(), (0.0, 0.0), "(warnings, exceeded)");
    let (max_gap, _) = f.gaps();
    assert!(
        max_gap < f.threshold(),
        "the loop kept polling: longest gap {max_gap} s"
    );
    assert_eq!(summary.records_succeeded, 2);
    let _ = f.metrics.shutdown().await;
}

/// An idle consumer on an empty topic, for longer than
/// `max.poll.interval.ms`: no warning, nothing exceeded, never kicked out
/// of the group (one assignment, no revoke, no loss), and it still consumes.
#[tokio::test]
async fn an_idle_consumer_is_neither_warned_nor_kicked_out() {
    const MAX_POLL_MS: u64 = 6_150;
    let w = Watched::start("idle", MAX_POLL_MS, &[], BLOCK).await;
    wait_until(WAIT, "the partition assigned", || async {
        logged("partitions assigned", &w.topic) == 1
    })
    .await;
    // Idle on purpose: longer than max.poll.interval.ms.
    let idle = Duration::from_millis(MAX_POLL_MS + 1_500);
    tokio::time::sleep(idle).await;
    w.cluster.produce(&w.topic, 0, "late", "v", None).await;
    w.wait_handled(1).await;
    let (f, summary) = w.stop().await;

    assert_eq!(f.warnings_logged(), 0);
    assert_eq!(f.counters(), (0.0, 0.0), "(warnings, exceeded)");
    let (max_gap, gaps) = f.gaps();
    assert!(max_gap < f.threshold(), "longest gap {max_gap} s");
    // The idle tick is a quarter of the threshold: about 0.3 s.
    assert!(
        gaps as f64 >= idle.as_secs_f64() / (f.threshold() / 4.0) * 0.8,
        "{gaps} gaps recorded in {idle:?}"
    );
    assert_eq!(
        summary.rebalances, 1,
        "one assignment, no revoke: {summary:?}"
    );
    assert_eq!(logged("partitions assigned", &f.topic), 1);
    assert_eq!(logged("partitions lost", &f.topic), 0);
    assert_eq!(logged("partitions revoked", &f.topic), 0);
    assert_eq!(summary.records_succeeded, 1);
    let _ = f.metrics.shutdown().await;
}

/// A handler that blocks the current-thread runtime past
/// `max.poll.interval.ms`: librdkafka leaves the group and, at the next
/// poll, reports it twice (error event and consume error); the library
/// counts it once, next to the one warning that came before; the partition
/// is lost and assigned again.
#[tokio::test]
async fn blocking_past_max_poll_interval_is_counted_once() {
    const MAX_POLL_MS: u64 = 6_200;
    let started = Instant::now();
    let block = Duration::from_millis(MAX_POLL_MS + 2_000);
    let w = Watched::start("exceeded", MAX_POLL_MS, &["block"], block).await;
    w.wait_handled(1).await;
    wait_until(WAIT, "the partition assigned again", || async {
        logged("partitions assigned", &w.topic) >= 2
    })
    .await;
    let (f, summary) = w.stop().await;
    eprintln!("took {:?}: {summary:?}", started.elapsed());

    assert_eq!(f.counters(), (1.0, 1.0), "(warnings, exceeded)");
    assert_eq!(f.warned_while_blocking, vec![true]);
    assert_eq!(logged("partitions lost", &f.topic), 1);
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
        let (got_unit, got_description) = unit_and_description(&f.metrics, name).expect(name);
        assert_eq!(got_unit, unit, "{name}");
        assert_eq!(got_description, description, "{name}");
        assert_eq!(
            sum_shape(&f.metrics, name),
            (true, true),
            "{name}: monotonic, cumulative"
        );
    }
    let _ = f.metrics.shutdown().await;
}
