//! The engine under faults, on librdkafka's mock broker: a broker that goes
//! down (at shutdown, mid-stream), failing offset commits, a panicking
//! handler, backpressure, a current-thread runtime, and secrets that must not
//! leak into logs, `Debug` output or errors.
//!
//! Tests that inject faults need the mock broker and skip themselves on a real
//! cluster (`FRESH_CONSUMER_TEST_BOOTSTRAP`).

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fresh_consumer::{Record, TopicPartition};
use support::kafka::{TestCluster, unique, wait_until};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Everything any test of this binary logged, at TRACE level for every target
/// (librdkafka's log lines included), as formatted text.
fn captured_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(Arc::default)
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, once per test binary, a global subscriber with two layers: the
/// usual test output (RUST_LOG, default `warn,fresh_consumer=info`) and a
/// capture of everything at TRACE into [`captured_logs`]. It is global (not
/// thread-local) because librdkafka logs from its own threads and the engine
/// from its committer and close threads. It also bridges the `log` crate, so
/// rdkafka's `ClientConfig::new()` picks librdkafka's debug log level.
fn init() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let buf = Arc::clone(captured_logs());
        let capture = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || Capture(Arc::clone(&buf)))
            .with_filter(tracing_subscriber::filter::LevelFilter::TRACE);
        let console = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(
                EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn,fresh_consumer=info".into()),
            );
        let _ = tracing_subscriber::registry()
            .with(capture)
            .with(console)
            .try_init();
    });
}

/// Offsets whose handler succeeded, per partition, in the order they succeeded.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<BTreeMap<i32, Vec<i64>>>>);

impl Seen {
    fn push(&self, partition: i32, offset: i64) {
        self.0
            .lock()
            .unwrap()
            .entry(partition)
            .or_default()
            .push(offset);
    }
    fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
    fn snapshot(&self) -> BTreeMap<i32, Vec<i64>> {
        self.0.lock().unwrap().clone()
    }
    /// Every offset `0..counts[p]` of every partition succeeded exactly once,
    /// in offset order.
    fn assert_exactly_once_in_order(&self, counts: &[i64]) {
        let seen = self.snapshot();
        for (p, &n) in counts.iter().enumerate() {
            let got = seen.get(&(p as i32)).cloned().unwrap_or_default();
            let want: Vec<i64> = (0..n).collect();
            if got != want {
                let first_bad = got
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(want.len()));
                panic!(
                    "partition {p}: {} records succeeded, expected offsets 0..{n} once each in order; \
                     first difference at index {first_bad}: got {:?}",
                    got.len(),
                    &got[first_bad.saturating_sub(2)..(first_bad + 3).min(got.len())]
                );
            }
        }
    }
    /// Every offset `0..counts[p]` of every partition succeeded at least once.
    fn assert_at_least_once(&self, counts: &[i64]) {
        let seen = self.snapshot();
        for (p, &n) in counts.iter().enumerate() {
            let mut got = seen.get(&(p as i32)).cloned().unwrap_or_default();
            got.sort_unstable();
            got.dedup();
            assert_eq!(
                got,
                (0..n).collect::<Vec<_>>(),
                "partition {p}: not every offset below {n} succeeded"
            );
        }
    }
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.to_owned(),
        partition,
    }
}

type Ready = std::future::Ready<Result<(), std::io::Error>>;

/// A handler that records every record as succeeded.
fn recorder(seen: &Seen) -> impl Fn(Record) -> Ready + Send + Sync + 'static {
    let seen = seen.clone();
    move |r: Record| {
        seen.push(r.partition(), r.offset());
        std::future::ready(Ok(()))
    }
}

/// Waits until the group's committed offsets for partitions `0..want.len()`
/// equal `want`; at the deadline, panics with what was handled and committed.
async fn wait_committed(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
    want: &[i64],
    seen: &Seen,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = cluster.committed(group, topic, want.len() as i32).await;
        if got == want {
            return;
        }
        if Instant::now() > deadline {
            let handled: Vec<(i32, usize, Option<i64>)> = seen
                .snapshot()
                .iter()
                .map(|(p, v)| (*p, v.len(), v.last().copied()))
                .collect();
            panic!(
                "timed out after {timeout:?} waiting for committed offsets {want:?}: committed {got:?}; \
                 handled (partition, records, last offset): {handled:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The captured log text written since byte `from`.
fn logs_since(from: usize) -> String {
    String::from_utf8_lossy(&captured_logs().lock().unwrap()[from..]).into_owned()
}

/// An error's `Display` and `Debug` output and its whole source chain.
fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = format!("{e} {e:?}");
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(" | {s} {s:?}"));
        source = s.source();
    }
    text
}

// ---------------------------------------------------------------------------
// 1. Shutdown with the broker down
// ---------------------------------------------------------------------------

/// Completed work is pending when the broker goes down; the final commit
/// cannot reach it. Shutdown must still return within `shutdown_timeout`
/// (plus slack), say that it timed out, and report as committed only what
/// the broker acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_the_broker_down_returns_within_its_deadline() {
    init();
    let cluster = TestCluster::start();
    let Some(mock) = cluster.mock() else {
        eprintln!("skipped: needs the mock broker");
        return;
    };
    let topic = cluster.topic("down-shutdown", 3).await;
    let group = unique("g-down-shutdown");
    cluster.produce_many(&topic, 3, 50).await;

    // Partition 0 holds its records from offset 40 until released.
    let (release, released) = tokio::sync::watch::channel(false);
    let seen = Seen::default();
    let handler = {
        let seen = seen.clone();
        move |r: Record| {
            let (seen, mut released) = (seen.clone(), released.clone());
            async move {
                if r.partition() == 0 && r.offset() >= 40 {
                    let _ = released.wait_for(|r| *r).await;
                }
                seen.push(r.partition(), r.offset());
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let timeout = Duration::from_secs(3);
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .shutdown_timeout(timeout)
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_committed(
        &cluster,
        &group,
        &topic,
        &[40, 50, 50],
        &seen,
        Duration::from_secs(20),
    )
    .await;

    mock.broker_down(1).expect("broker down");
    release.send(true).unwrap();
    wait_until(
        Duration::from_secs(10),
        "all 150 records handled",
        || async { seen.total() == 150 },
    )
    .await;

    let started = Instant::now();
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    let took = started.elapsed();
    eprintln!("shutdown with the broker down took {took:?}: {summary:?}");
    assert!(
        took <= timeout + Duration::from_secs(2),
        "shutdown took {took:?} with shutdown_timeout {timeout:?}"
    );
    assert_eq!(summary.records_succeeded, 150);
    seen.assert_exactly_once_in_order(&[50, 50, 50]);
    // The broker never acknowledged p0 past 40: the summary must not claim it.
    assert_eq!(summary.committed.get(&tp(&topic, 0)), Some(&40));
    assert_eq!(summary.committed.get(&tp(&topic, 1)), Some(&50));
    assert_eq!(summary.committed.get(&tp(&topic, 2)), Some(&50));
    assert!(
        summary.shutdown_timed_out,
        "the final commit could not reach the broker, yet shutdown says it finished in time"
    );
    assert!(
        took >= timeout - Duration::from_millis(200),
        "shutdown_timed_out is set, so shutdown should have used its budget (took {took:?})"
    );

    mock.broker_up(1).expect("broker up");
    // Nothing past what succeeded is ever committed; p0's commit to 50 may
    // still land from the abandoned committer once the broker is back.
    let c = cluster.committed(&group, &topic, 3).await;
    assert!(c[0] == 40 || c[0] == 50, "{c:?}");
    assert_eq!(&c[1..], &[50, 50]);
}

// ---------------------------------------------------------------------------
// 2. The broker goes down and comes back mid-stream
// ---------------------------------------------------------------------------

/// A 1.5 s outage while 3 x 1,000 records are being handled: every record is
/// handled at least once and the committed offsets reach the high watermarks.
/// The small buffer keeps partitions pausing and resuming, so fetching (not
/// only committing) goes through the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_and_back_mid_stream_loses_nothing() {
    init();
    let cluster = TestCluster::start();
    let Some(mock) = cluster.mock() else {
        eprintln!("skipped: needs the mock broker");
        return;
    };
    let topic = cluster.topic("down-up", 3).await;
    let group = unique("g-down-up");
    cluster.produce_many(&topic, 3, 1_000).await;

    let seen = Seen::default();
    let handler = {
        let seen = seen.clone();
        move |r: Record| {
            let seen = seen.clone();
            async move {
                if r.offset() % 4 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                seen.push(r.partition(), r.offset());
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(20)
            .set("reconnect.backoff.ms", "50")
            .set("reconnect.backoff.max.ms", "200")
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_until(Duration::from_secs(20), "300 records handled", || async {
        seen.total() >= 300
    })
    .await;
    mock.broker_down(1).expect("broker down");
    let down_at = seen.total();
    // The outage itself: a fault of fixed length, not a wait for a condition.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let during = seen.total() - down_at;
    mock.broker_up(1).expect("broker up");

    let hw = cluster.high_watermarks(&topic, 3).await;
    assert_eq!(hw, vec![1_000; 3]);
    wait_committed(
        &cluster,
        &group,
        &topic,
        &hw,
        &seen,
        Duration::from_secs(30),
    )
    .await;
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    eprintln!("handled {down_at} before the outage, {during} during it; {summary:?}");
    seen.assert_at_least_once(&hw);
    assert!(summary.records_succeeded >= 3_000);
    for p in 0..3 {
        assert_eq!(summary.committed.get(&tp(&topic, p)), Some(&1_000));
    }
    assert!(!summary.shutdown_timed_out);
}

// ---------------------------------------------------------------------------
// 3. Offset commits fail
// ---------------------------------------------------------------------------

/// The broker answers the first OffsetCommit requests with coordinator,
/// timeout and membership errors. Nothing is lost, commits resume and reach
/// the high watermarks, and the failures show in the summary.
///
/// Measured: librdkafka retries COORDINATOR_NOT_AVAILABLE and
/// REQUEST_TIMED_OUT inside the synchronous commit (it just takes ~300 ms
/// longer); UNKNOWN_MEMBER_ID fails the commit (counted in
/// `commit_failures`), loses the assignment and rejoins, and the records are
/// handled again from the last committed offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_offset_commits_are_retried_and_counted() {
    use rdkafka::types::RDKafkaApiKey;
    use rdkafka::types::RDKafkaRespErr::*;

    init();
    let cluster = TestCluster::start();
    let Some(mock) = cluster.mock() else {
        eprintln!("skipped: needs the mock broker");
        return;
    };
    let topic = cluster.topic("commit-errors", 3).await;
    let group = unique("g-commit-errors");
    cluster.produce_many(&topic, 3, 300).await;
    mock.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[
            RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID,
            RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );

    let seen = Seen::default();
    let handler = {
        let seen = seen.clone();
        move |r: Record| {
            let seen = seen.clone();
            async move {
                if r.offset() % 10 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                seen.push(r.partition(), r.offset());
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            // UNKNOWN_MEMBER_ID makes librdkafka rejoin as a new member; the
            // mock group waits for the old member's session to expire.
            .set("session.timeout.ms", "2000")
            .set("heartbeat.interval.ms", "200")
            .run_until(stop.clone().cancelled_owned()),
    );
    let hw = vec![300; 3];
    wait_committed(
        &cluster,
        &group,
        &topic,
        &hw,
        &seen,
        Duration::from_secs(30),
    )
    .await;
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    eprintln!("{summary:?}");
    seen.assert_at_least_once(&hw);
    assert!(
        summary.commit_failures > 0,
        "injected OffsetCommit errors are not visible: {summary:?}"
    );
    assert!(summary.commits > 0);
    for p in 0..3 {
        assert_eq!(summary.committed.get(&tp(&topic, p)), Some(&300));
    }
}

// ---------------------------------------------------------------------------
// 4. A panicking handler
// ---------------------------------------------------------------------------

/// The handler panics on the first attempt of one record: the consumer keeps
/// running, the record is retried in place and succeeds, and everything is
/// handled once, in order, and committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_and_the_consumer_keeps_running() {
    init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("panic", 2).await;
    let group = unique("g-panic");
    cluster.produce_many(&topic, 2, 20).await;

    let attempts: Arc<Mutex<BTreeMap<(i32, i64), u32>>> = Arc::default();
    let seen = Seen::default();
    let handler = {
        let (seen, attempts) = (seen.clone(), Arc::clone(&attempts));
        move |r: Record| {
            let (seen, attempts) = (seen.clone(), Arc::clone(&attempts));
            async move {
                let n = {
                    let mut a = attempts.lock().unwrap();
                    let n = a.entry((r.partition(), r.offset())).or_default();
                    *n += 1;
                    *n
                };
                if r.partition() == 0 && r.offset() == 7 && n == 1 {
                    panic!("injected panic on the first attempt of offset 7");
                }
                seen.push(r.partition(), r.offset());
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .run_until(stop.clone().cancelled_owned()),
    );
    let hw = cluster.high_watermarks(&topic, 2).await;
    assert_eq!(hw, vec![20, 20]);
    wait_committed(
        &cluster,
        &group,
        &topic,
        &hw,
        &seen,
        Duration::from_secs(20),
    )
    .await;
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until after a handler panic");
    seen.assert_exactly_once_in_order(&hw);
    assert_eq!(attempts.lock().unwrap().get(&(0, 7)), Some(&2));
    assert_eq!(summary.failed_attempts, 1, "{summary:?}");
    assert_eq!(summary.records_succeeded, 40);
    assert_eq!(summary.committed.get(&tp(&topic, 0)), Some(&20));
    assert_eq!(summary.committed.get(&tp(&topic, 1)), Some(&20));
}

// ---------------------------------------------------------------------------
// 5. Backpressure
// ---------------------------------------------------------------------------

/// A 10-record bound, a slow partition and fast ones, each partition read
/// from its own queue (the default): every record exactly once and in
/// offset order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_keeps_order_and_loses_nothing() {
    backpressure(true).await;
}

/// The same through the poll loop's hand-over (`split_partition_queues
/// (false)`): pause, overflow and resume must hand every record over
/// exactly once and in offset order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_through_the_hand_over_keeps_order_and_loses_nothing() {
    backpressure(false).await;
}

async fn backpressure(split: bool) {
    init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("backpressure", 3).await;
    let group = unique("g-backpressure");
    let per_partition = 2_000;
    cluster.produce_many(&topic, 3, per_partition).await;

    let seen = Seen::default();
    let handler = {
        let seen = seen.clone();
        move |r: Record| {
            let seen = seen.clone();
            async move {
                // Partition 0 is slow-ish; partitions 1 and 2 are as fast as
                // the engine.
                if r.partition() == 0 && r.offset() % 5 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                seen.push(r.partition(), r.offset());
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(10)
            .split_partition_queues(split)
            .run_until(stop.clone().cancelled_owned()),
    );
    let hw = cluster.high_watermarks(&topic, 3).await;
    assert_eq!(hw, vec![per_partition as i64; 3]);
    wait_committed(
        &cluster,
        &group,
        &topic,
        &hw,
        &seen,
        Duration::from_secs(30),
    )
    .await;
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    seen.assert_exactly_once_in_order(&hw);
    assert_eq!(summary.records_succeeded, 3 * per_partition as u64);
    assert_eq!(summary.failed_attempts, 0);
    for p in 0..3 {
        assert_eq!(summary.committed.get(&tp(&topic, p)), Some(&hw[p as usize]));
    }
}

/// Through the poll loop's hand-over (`split_partition_queues(false)`, or a
/// partition whose queue could not be split), a paused partition that
/// drained is fetched again at once. A resume alone
/// does not wake librdkafka's broker thread: when it has nothing else to do
/// (no other partition to fetch, no heartbeat due) it idles on I/O first.
/// Here 400 records at ~2 ms each through a 40-record buffer pause and
/// resume the one partition about 20 times, each pause long enough (~40 ms)
/// for the broker thread to go idle; heartbeats and metadata refreshes,
/// which would wake it, are rare. The assertion is on the longest gap
/// between two handler calls. Measured: ~455 ms (one stall per run, three
/// runs out of three) with a plain resume; 3-5 ms with the fetch restarted
/// on resume. In the `hot_partition` bench (3,000 records, key order) the
/// stalls were ~0.9 s each and cut key-ordered throughput by 5x.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_partition_is_fetched_again_at_once() {
    init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("resume-stall", 1).await;
    let group = unique("g-resume-stall");
    cluster.produce_many(&topic, 1, 400).await;
    let seen = Seen::default();
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let handler = {
        let (seen, calls) = (seen.clone(), Arc::clone(&calls));
        move |r: Record| {
            let (seen, calls) = (seen.clone(), Arc::clone(&calls));
            async move {
                calls.lock().unwrap().push(Instant::now());
                tokio::time::sleep(Duration::from_millis(1)).await;
                seen.push(r.partition(), r.offset());
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(40)
            .split_partition_queues(false)
            .set("heartbeat.interval.ms", "2000")
            .set("topic.metadata.refresh.interval.ms", "60000")
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_until(Duration::from_secs(40), "400 records handled", || async {
        seen.total() >= 400
    })
    .await;
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    seen.assert_exactly_once_in_order(&[400]);
    assert_eq!(summary.committed.get(&tp(&topic, 0)), Some(&400));
    let calls = calls.lock().unwrap();
    let longest = calls
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap();
    let total = calls[calls.len() - 1].duration_since(calls[0]);
    eprintln!("400 records in {total:?}; longest gap between handler calls {longest:?}");
    assert!(
        longest < Duration::from_millis(250),
        "a resumed partition stalled for {longest:?}"
    );
}

// ---------------------------------------------------------------------------
// 6. A current-thread runtime
// ---------------------------------------------------------------------------

/// `run_until` on a current-thread runtime: records are handled, committed,
/// and shutdown returns.
#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("current-thread", 2).await;
    let group = unique("g-current-thread");
    cluster.produce_many(&topic, 2, 100).await;

    let seen = Seen::default();
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_committed(
        &cluster,
        &group,
        &topic,
        &[100, 100],
        &seen,
        Duration::from_secs(20),
    )
    .await;
    let started = Instant::now();
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    assert!(!summary.shutdown_timed_out, "{summary:?}");
    seen.assert_exactly_once_in_order(&[100, 100]);
    assert_eq!(summary.records_succeeded, 200);
    assert_eq!(summary.committed.get(&tp(&topic, 0)), Some(&100));
    assert_eq!(summary.committed.get(&tp(&topic, 1)), Some(&100));
}

/// Everything is committed before the broker goes down, so only leaving the
/// group needs the broker. Shutdown still returns within its deadline, and
/// `shutdown_timed_out` agrees with how long it took: set only when shutdown
/// waited until the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_the_broker_down_and_nothing_pending() {
    init();
    let cluster = TestCluster::start();
    let Some(mock) = cluster.mock() else {
        eprintln!("skipped: needs the mock broker");
        return;
    };
    let topic = cluster.topic("down-idle", 2).await;
    let group = unique("g-down-idle");
    cluster.produce_many(&topic, 2, 30).await;
    let seen = Seen::default();
    let timeout = Duration::from_secs(3);
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .shutdown_timeout(timeout)
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_committed(
        &cluster,
        &group,
        &topic,
        &[30, 30],
        &seen,
        Duration::from_secs(20),
    )
    .await;
    mock.broker_down(1).expect("broker down");

    let started = Instant::now();
    stop.cancel();
    let summary = run.await.unwrap().expect("run_until");
    let took = started.elapsed();
    eprintln!("idle shutdown with the broker down took {took:?}: {summary:?}");
    assert!(
        took <= timeout + Duration::from_secs(2),
        "shutdown took {took:?} with shutdown_timeout {timeout:?}"
    );
    if summary.shutdown_timed_out {
        assert!(
            took >= timeout - Duration::from_millis(200),
            "took {took:?}"
        );
    } else {
        assert!(took < timeout, "took {took:?}");
    }
    seen.assert_exactly_once_in_order(&[30, 30]);
    assert_eq!(summary.committed.get(&tp(&topic, 0)), Some(&30));
    assert_eq!(summary.committed.get(&tp(&topic, 1)), Some(&30));
    mock.broker_up(1).expect("broker up");
}

// ---------------------------------------------------------------------------
// 7. Secrets and configuration errors
// ---------------------------------------------------------------------------

/// SASL/PLAIN credentials with librdkafka's `debug=all`: the password shows
/// in neither the builder's `Debug`, nor any log line (librdkafka's debug
/// output, configuration dump included, is captured at TRACE for every
/// target), nor what `run_until` returns. The mock broker does not support
/// the SASL handshake, so authentication fails; that is fine here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_debug_output_logs_and_errors() {
    init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("secrets", 1).await;
    let group = unique("g-secrets");
    cluster.produce(&topic, 0, "k", "v", None).await;
    let secret = unique("pw-Zq9xK2");
    let client_id = unique("secret-client");
    let from = captured_logs().lock().unwrap().len();

    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, recorder(&seen))
        .set("client.id", &client_id)
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanisms", "PLAIN")
        .set("sasl.username", "u")
        .set("sasl.password", &secret)
        .set("debug", "all");
    let dbg = format!("{consumer:?} {consumer:#?}");
    assert!(!dbg.contains(&secret), "{dbg}");
    assert!(
        dbg.contains("sasl.password") && dbg.contains("[redacted]"),
        "{dbg}"
    );

    let stop = CancellationToken::new();
    let run = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
    // Until librdkafka has tried to authenticate (and failed, on the mock
    // broker), or a record was handled (a cluster that took the credentials).
    wait_until(
        Duration::from_secs(15),
        "an authentication attempt",
        || async { seen.total() > 0 || logs_since(from).contains("Authentication") },
    )
    .await;
    stop.cancel();
    let outcome = match run.await.unwrap() {
        Ok(summary) => format!("{summary:?}"),
        Err(e) => error_text(&e),
    };
    assert!(!outcome.contains(&secret), "{outcome}");

    let logs = logs_since(from);
    assert!(
        logs.contains(&client_id) && logs.contains("sasl.mechanisms = PLAIN"),
        "the capture must hold this consumer's librdkafka debug output (configuration dump included)"
    );
    let leaks: Vec<&str> = logs.lines().filter(|l| l.contains(&secret)).collect();
    assert!(leaks.is_empty(), "the password was logged: {leaks:#?}");
}

/// Configuration errors come back from `run_until` as typed errors, before
/// any network I/O (the bootstrap address is never contacted).
#[tokio::test]
async fn configuration_errors_come_back_from_run_until() {
    use fresh_consumer::{ConfigError, FreshConsumer, RunError};

    init();
    let seen = Seen::default();
    let base = || {
        FreshConsumer::new(recorder(&seen))
            .bootstrap_servers("127.0.0.1:1")
            .topics(["t"])
    };
    // A signal that has already fired: a config that wrongly passes returns
    // at once instead of hanging the test.
    let e = base()
        .group_id("g")
        .set("enable.auto.commit", "true")
        .run_until(std::future::ready(()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            RunError::Config(ConfigError::AutoCommit {
                property: "enable.auto.commit",
                instead: "commit_interval"
            })
        ),
        "{e:?}"
    );
    assert!(e.is_config());
    assert!(
        error_text(&e).contains("commit_interval"),
        "{}",
        error_text(&e)
    );

    let e = base().run_until(std::future::ready(())).await.unwrap_err();
    assert!(
        matches!(e, RunError::Config(ConfigError::MissingGroupId)),
        "{e:?}"
    );
    assert_eq!(seen.total(), 0);

    // Every property librdkafka itself treats as sensitive, and then some,
    // stays out of the builder's `Debug` output.
    let secret = unique("cfg-secret");
    let mut c = base().group_id("g");
    for key in [
        "sasl.password",
        "ssl.key.password",
        "ssl.key.pem",
        "ssl.keystore.password",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem",
    ] {
        c = c.set(key, format!("{key}={secret}"));
    }
    let dbg = format!("{c:?} {c:#?}");
    assert!(!dbg.contains(&secret), "{dbg}");
}

/// librdkafka echoes part of a malformed `sasl.oauthbearer.config` in the
/// token error ("Unrecognized sasl.oauthbearer.config beginning at: ...");
/// the library must not pass the secret on into its logs. The unsecured JWT
/// builder needs a librdkafka built with OpenSSL (`--features ssl`).
#[cfg(any(feature = "ssl", feature = "ssl-vendored"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_oauthbearer_config_is_not_echoed_into_logs() {
    init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("oauth-echo", 1).await;
    let group = unique("g-oauth-echo");
    let secret = unique("oauth-Zq9xK2");
    let from = captured_logs().lock().unwrap().len();
    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, recorder(&seen))
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanisms", "OAUTHBEARER")
        .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
        .set("sasl.oauthbearer.config", format!("principal=u {secret}"))
        .set("debug", "security,conf");
    let stop = CancellationToken::new();
    let run = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
    wait_until(Duration::from_secs(15), "the token error", || async {
        logs_since(from).contains("Unrecognized sasl.oauthbearer.config")
    })
    .await;
    stop.cancel();
    let outcome = match run.await.unwrap() {
        Ok(summary) => format!("{summary:?}"),
        Err(e) => error_text(&e),
    };
    assert!(!outcome.contains(&secret), "{outcome}");
    let logs = logs_since(from);
    let leaks: Vec<&str> = logs.lines().filter(|l| l.contains(&secret)).collect();
    assert!(leaks.is_empty(), "the secret was logged: {leaks:#?}");
}
