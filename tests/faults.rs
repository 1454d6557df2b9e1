//! The engine under faults, on librdkafka's mock broker: a broker that goes
//! down (at shutdown, mid-stream), failing offset commits, a panicking
//! handler, backpressure, a current-thread runtime, and secrets that must not
//! leak into logs, `Debug` output or errors.
//!
//! Tests that inject faults need the mock broker and skip themselves on a real
//! cluster (`FRESH_CONSUMER_TEST_BOOTSTRAP`).

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::{Record, RunSummary};

use support::handled::{Seen, with_state};
use support::kafka::{TestCluster, summary_committed, tp, unique};
use support::logs;
use support::run::{Running, start};
use support::wait::wait_until;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Every test of this binary captures everything at TRACE (librdkafka's log
/// lines included): the secrets tests search all of it.
fn init() {
    logs::init_everything();
}

/// [`init`], a cluster, a topic `{prefix}-…` with `per_partition` records in
/// each of its `partitions` partitions, and a group `g-{prefix}-…`.
async fn setup(
    prefix: &str,
    partitions: i32,
    per_partition: usize,
) -> (TestCluster, String, String) {
    init();
    let (cluster, topic, group) = TestCluster::with_topic(prefix, partitions).await;
    cluster
        .produce_many(&topic, partitions, per_partition)
        .await;
    (cluster, topic, group)
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

/// What `run_until` returned, as text: the summary, or the error with its
/// whole source chain.
async fn run_outcome(run: Running) -> String {
    match run.finish().await {
        Ok(summary) => format!("{summary:?}"),
        Err(e) => error_text(&e),
    }
}

/// Waits (up to 30 s) until `group` has committed `hw` for `topic`, showing
/// what `seen` handled if it never does; then stops `run` and checks that
/// every record below `hw` was handled at least once. Returns the summary.
async fn stop_once_committed(
    cluster: &TestCluster,
    (group, topic): (&str, &str),
    hw: &[i64],
    seen: &Seen,
    run: Running,
) -> RunSummary {
    cluster
        .wait_committed_showing(group, topic, hw, Duration::from_secs(30), seen)
        .await;
    let summary = run.stop().await;
    eprintln!("{summary:?}");
    seen.assert_at_least_once(hw);
    summary
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
    let (cluster, topic, group) = setup("down-shutdown", 3, 50).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };

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
                seen.push(&r);
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let timeout = Duration::from_secs(3);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .shutdown_timeout(timeout),
    );
    cluster
        .wait_committed_showing(
            &group,
            &topic,
            &[40, 50, 50],
            Duration::from_secs(20),
            &seen,
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

    let (summary, took) = run
        .stop_within(timeout + Duration::from_secs(2), "the broker down")
        .await;
    assert_eq!(summary.records_succeeded, 150);
    seen.assert_exactly_once_in_order(&[50, 50, 50]);
    // The broker never acknowledged p0 past 40: the summary must not claim it.
    assert_eq!(
        summary_committed(&summary, &topic, 3),
        [Some(40), Some(50), Some(50)]
    );
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
    let (cluster, topic, group) = setup("down-up", 3, 1_000).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };

    let seen = Seen::default();
    let handler = seen.slow_recorder(|r| r.offset() % 4 == 0);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(20)
            .set("reconnect.backoff.ms", "50")
            .set("reconnect.backoff.max.ms", "200"),
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
    eprintln!("handled {down_at} before the outage, {during} during it");
    let summary = stop_once_committed(&cluster, (&group, &topic), &hw, &seen, run).await;
    assert!(summary.records_succeeded >= 3_000);
    assert_eq!(summary_committed(&summary, &topic, 3), [Some(1_000); 3]);
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

    let (cluster, topic, group) = setup("commit-errors", 3, 300).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };
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
    let handler = seen.slow_recorder(|r| r.offset() % 10 == 0);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            // UNKNOWN_MEMBER_ID makes librdkafka rejoin as a new member; the
            // mock group waits for the old member's session to expire.
            .set("session.timeout.ms", "2000")
            .set("heartbeat.interval.ms", "200"),
    );
    let hw = vec![300; 3];
    let summary = stop_once_committed(&cluster, (&group, &topic), &hw, &seen, run).await;
    assert!(
        summary.commit_failures > 0,
        "injected OffsetCommit errors are not visible: {summary:?}"
    );
    assert!(summary.commits > 0);
    assert_eq!(summary_committed(&summary, &topic, 3), [Some(300); 3]);
}

// ---------------------------------------------------------------------------
// 4. A panicking handler
// ---------------------------------------------------------------------------

/// The handler panics on the first attempt of one record: the consumer keeps
/// running, the record is retried in place and succeeds, and everything is
/// handled once, in order, and committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_and_the_consumer_keeps_running() {
    let (cluster, topic, group) = setup("panic", 2, 20).await;

    let attempts: Arc<Mutex<BTreeMap<(i32, i64), u32>>> = Arc::default();
    let seen = Seen::default();
    let handler = with_state(
        (seen.clone(), Arc::clone(&attempts)),
        |r: Record, (seen, attempts)| async move {
            let n = {
                let mut a = attempts.lock().unwrap();
                let n = a.entry((r.partition(), r.offset())).or_default();
                *n += 1;
                *n
            };
            if r.partition() == 0 && r.offset() == 7 && n == 1 {
                panic!("injected panic on the first attempt of offset 7");
            }
            seen.push(&r);
            Ok::<(), std::io::Error>(())
        },
    );
    let run = start(cluster.consumer(&group, &topic, handler));
    let hw = cluster.high_watermarks(&topic, 2).await;
    assert_eq!(hw, vec![20, 20]);
    cluster
        .wait_committed_showing(&group, &topic, &hw, Duration::from_secs(20), &seen)
        .await;
    let summary = run.finish().await.expect("run_until after a handler panic");
    seen.assert_exactly_once_in_order(&hw);
    assert_eq!(attempts.lock().unwrap().get(&(0, 7)), Some(&2));
    assert_eq!(summary.failed_attempts, 1, "{summary:?}");
    assert_eq!(summary.records_succeeded, 40);
    assert_eq!(summary_committed(&summary, &topic, 2), [Some(20), Some(20)]);
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
    let (cluster, topic, group) = TestCluster::with_topic("backpressure", 3).await;
    let per_partition = 2_000;
    cluster.produce_many(&topic, 3, per_partition).await;

    let seen = Seen::default();
    // Partition 0 is slow-ish; partitions 1 and 2 are as fast as
    // the engine.
    let handler = seen.slow_recorder(|r| r.partition() == 0 && r.offset() % 5 == 0);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(10)
            .split_partition_queues(split),
    );
    let hw = cluster.high_watermarks(&topic, 3).await;
    assert_eq!(hw, vec![per_partition as i64; 3]);
    cluster
        .wait_committed_showing(&group, &topic, &hw, Duration::from_secs(30), &seen)
        .await;
    let summary = run.stop().await;
    seen.assert_exactly_once_in_order(&hw);
    assert_eq!(summary.records_succeeded, 3 * per_partition as u64);
    assert_eq!(summary.failed_attempts, 0);
    assert_eq!(
        summary_committed(&summary, &topic, 3),
        hw.iter().copied().map(Some).collect::<Vec<_>>()
    );
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
///
/// A pass whose longest gap is over the bound runs once more on a new topic
/// and group, and the test fails only if that one stalls too: one
/// descheduling of a loaded machine must not fail it, while the bug stalled
/// every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_partition_is_fetched_again_at_once() {
    let bound = Duration::from_millis(250);
    let first = longest_gap_through_pauses().await;
    if first < bound {
        return;
    }
    eprintln!("longest gap {first:?} over {bound:?}: once more");
    let second = longest_gap_through_pauses().await;
    assert!(
        second < bound,
        "a resumed partition stalled for {first:?}, then for {second:?}"
    );
}

/// The longest gap between two handler calls over 400 records of one
/// partition through a 40-record buffer, through the poll loop's hand-over.
async fn longest_gap_through_pauses() -> Duration {
    let (cluster, topic, group) = setup("resume-stall", 1, 400).await;
    let seen = Seen::default();
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let handler = with_state(
        (seen.clone(), Arc::clone(&calls)),
        |r: Record, (seen, calls)| async move {
            calls.lock().unwrap().push(Instant::now());
            tokio::time::sleep(Duration::from_millis(1)).await;
            seen.push(&r);
            Ok::<(), std::io::Error>(())
        },
    );
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(40)
            .split_partition_queues(false)
            .set("heartbeat.interval.ms", "2000")
            .set("topic.metadata.refresh.interval.ms", "60000"),
    );
    wait_until(Duration::from_secs(40), "400 records handled", || async {
        seen.total() >= 400
    })
    .await;
    let summary = run.stop().await;
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
    longest
}

// ---------------------------------------------------------------------------
// 6. A current-thread runtime
// ---------------------------------------------------------------------------

/// `run_until` on a current-thread runtime: records are handled, committed,
/// and shutdown returns.
#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    let (cluster, topic, group) = setup("current-thread", 2, 100).await;

    let seen = Seen::default();
    let run = start(cluster.consumer(&group, &topic, seen.recorder()));
    cluster
        .wait_committed_showing(&group, &topic, &[100, 100], Duration::from_secs(20), &seen)
        .await;
    let started = Instant::now();
    let summary = run.stop().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    assert!(!summary.shutdown_timed_out, "{summary:?}");
    seen.assert_exactly_once_in_order(&[100, 100]);
    assert_eq!(summary.records_succeeded, 200);
    assert_eq!(
        summary_committed(&summary, &topic, 2),
        [Some(100), Some(100)]
    );
}

/// Everything is committed before the broker goes down, so only leaving the
/// group needs the broker. Shutdown still returns within its deadline, and
/// `shutdown_timed_out` agrees with how long it took: set only when shutdown
/// waited until the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_the_broker_down_and_nothing_pending() {
    let (cluster, topic, group) = setup("down-idle", 2, 30).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };
    let timeout = Duration::from_secs(3);
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, seen.recorder())
            .shutdown_timeout(timeout),
    );
    cluster
        .wait_committed_showing(&group, &topic, &[30, 30], Duration::from_secs(20), &seen)
        .await;
    mock.broker_down(1).expect("broker down");

    let (summary, took) = run
        .stop_within(timeout + Duration::from_secs(2), "idle, the broker down")
        .await;
    if summary.shutdown_timed_out {
        assert!(
            took >= timeout - Duration::from_millis(200),
            "took {took:?}"
        );
    } else {
        assert!(took < timeout, "took {took:?}");
    }
    seen.assert_exactly_once_in_order(&[30, 30]);
    assert_eq!(summary_committed(&summary, &topic, 2), [Some(30), Some(30)]);
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
    let (cluster, topic, group) = TestCluster::with_topic("secrets", 1).await;
    cluster.produce(&topic, 0, "k", "v", None).await;
    let secret = unique("pw-Zq9xK2");
    let client_id = unique("secret-client");
    let from = logs::mark();

    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, seen.recorder())
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

    let run = start(consumer);
    // Until librdkafka has tried to authenticate (and failed, on the mock
    // broker), or a record was handled (a cluster that took the credentials).
    wait_until(
        Duration::from_secs(15),
        "an authentication attempt",
        || async { seen.total() > 0 || logs::text_since(from).contains("Authentication") },
    )
    .await;
    let outcome = run_outcome(run).await;
    assert!(!outcome.contains(&secret), "{outcome}");

    let logs = logs::text_since(from);
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
        FreshConsumer::new(seen.recorder())
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
    let (cluster, topic, group) = TestCluster::with_topic("oauth-echo", 1).await;
    let secret = unique("oauth-Zq9xK2");
    let from = logs::mark();
    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, seen.recorder())
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanisms", "OAUTHBEARER")
        .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
        .set("sasl.oauthbearer.config", format!("principal=u {secret}"))
        .set("debug", "security,conf");
    let run = start(consumer);
    wait_until(Duration::from_secs(15), "the token error", || async {
        logs::text_since(from).contains("Unrecognized sasl.oauthbearer.config")
    })
    .await;
    let outcome = run_outcome(run).await;
    assert!(!outcome.contains(&secret), "{outcome}");
    let logs = logs::text_since(from);
    let leaks: Vec<&str> = logs.lines().filter(|l| l.contains(&secret)).collect();
    assert!(leaks.is_empty(), "the secret was logged: {leaks:#?}");
}
