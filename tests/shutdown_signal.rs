//! A consumer process stopped the way Kubernetes stops a pod: SIGTERM.
//!
//! The child calls [`FreshConsumer::run`] and has no signal code of its
//! own: what these tests check is the library's default. The test binary
//! re-executes itself (`child_consumer` is the consumer process when
//! `FRESH_CHILD_BOOTSTRAP` is set, and passes as a no-op otherwise); the
//! child appends `partition offset` lines to a file as its handler
//! succeeds, and prints its run summary on stderr.
//!
//! - SIGTERM under traffic: exit status 0, the committed offsets are exactly
//!   what was handled, the final metric export reached an OTLP receiver
//!   (the export interval is an hour, so only the shutdown's flush can
//!   deliver it), and a restarted process handles no record twice.
//! - SIGTERM before the first assignment: exit status 0, nothing handled,
//!   nothing committed.
//! - A second SIGTERM during a shutdown that waits on a hung handler ends
//!   the run at once ([`RunError::Interrupted`]), never a hang.
//! - A record that fails with a permanent error under the default
//!   `OnExhausted::Block`: with no `tracing` subscriber installed the child
//!   still says so on stderr at ERROR; nothing past it is committed; the
//!   run summary names it.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::EVENT_AGE;
use fresh_consumer::otlp::{OtlpConfig, OtlpProtocol};
use fresh_consumer::{Record, RunError, permanent};
use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::otlp_receiver::{OtlpReceiver, histogram_points};
use support::wait::wait_until;

/// Where the child writes its `partition offset` lines.
const CHILD_OUT: &str = "FRESH_CHILD_OUT";
/// The child's handler delay per record, in milliseconds.
const CHILD_DELAY_MS: &str = "FRESH_CHILD_DELAY_MS";
/// An OTLP/gRPC endpoint to export the child's metrics to (optional).
const CHILD_OTLP: &str = "FRESH_CHILD_OTLP";
/// `hang`: the handler never returns; `fail:N`: the record at offset N of
/// partition 0 fails with a permanent error, and no `tracing` subscriber is
/// installed (optional).
const CHILD_MODE: &str = "FRESH_CHILD_MODE";

const PARTITIONS: i32 = 3;
/// How long a child may take to exit after SIGTERM (its shutdown timeout
/// is 10 s; a deadline, not a measurement).
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

/// The consumer process. A no-op unless started by a test of this file.
#[test]
fn child_consumer() {
    let Some(target) = child::target() else {
        return;
    };
    let out = child::var(CHILD_OUT);
    let delay = Duration::from_millis(child::var(CHILD_DELAY_MS).parse().expect("delay in ms"));
    let mode = std::env::var(CHILD_MODE).unwrap_or_default();
    let fail_at: Option<i64> = mode
        .strip_prefix("fail:")
        .map(|n| n.parse().expect("offset"));
    if fail_at.is_none() {
        logs::init();
    }
    let lines = child::line_writer(&out, delay);
    let hang = mode == "hang";
    let handler = move |r: Record| {
        let write = lines(r.clone());
        async move {
            if hang {
                println!("handler hangs at {}:{}", r.partition(), r.offset());
                std::future::pending::<()>().await;
            }
            if r.partition() == 0 && Some(r.offset()) == fail_at {
                return Err(permanent(std::io::Error::other("malformed order")));
            }
            write.await.map_err(Into::into)
        }
    };
    child::block_on(async {
        let provider = std::env::var(CHILD_OTLP).ok().map(|endpoint| {
            OtlpConfig::new()
                .with_protocol(OtlpProtocol::Grpc)
                .with_endpoint(endpoint)
                .with_export_interval(Duration::from_secs(3600))
                .build()
                .expect("OTLP meter provider")
        });
        let mut consumer = child::consumer(handler, &target);
        if let Some(provider) = &provider {
            consumer = consumer.meter_provider(provider);
        }
        if hang {
            // Only a second signal can end this shutdown early.
            consumer = consumer
                .revoke_timeout(Duration::from_secs(120))
                .shutdown_timeout(Duration::from_secs(120));
        }
        println!("child running");
        match consumer.run().await {
            Ok(summary) => eprintln!("child summary: {summary:?}"),
            Err(RunError::Interrupted) => eprintln!("child interrupted"),
            Err(e) => panic!("the child consumer failed: {e}"),
        }
    });
}

/// A child consumer process and the lines it wrote.
struct Consumer {
    process: ChildProcess,
    out: PathBuf,
}

impl Consumer {
    fn spawn(
        name: &str,
        dir: &Path,
        cluster: &TestCluster,
        group: &str,
        topic: &str,
        delay_ms: u64,
        extra: &[(&str, String)],
    ) -> Self {
        let out = dir.join(format!("{name}.out"));
        let mut command = child::command("child_consumer", cluster, group, topic);
        command
            .env(CHILD_OUT, &out)
            .env(CHILD_DELAY_MS, delay_ms.to_string());
        for (k, v) in extra {
            command.env(k, v);
        }
        Consumer {
            process: ChildProcess::spawn(name, dir, command),
            out,
        }
    }

    fn handled(&self) -> Vec<(i32, i64)> {
        child::handled_lines(&self.out)
    }

    async fn wait_log(&mut self, needle: &str, timeout: Duration) {
        let what = format!("{} to log {needle:?}", self.process.name);
        wait_until(timeout, &what, || {
            self.process.assert_running();
            let found = self.process.log_text().contains(needle);
            async move { found }
        })
        .await;
    }

    /// SIGTERM, then the exit status (a panic with the log when it does
    /// not exit in time).
    async fn terminate(&mut self) -> std::process::ExitStatus {
        self.process.terminate();
        let status = self.process.wait_exit(EXIT_DEADLINE).await;
        status.unwrap_or_else(|| {
            panic!(
                "{} still runs {EXIT_DEADLINE:?} after SIGTERM:\n{}",
                self.process.name,
                self.process.log_text()
            )
        })
    }
}

fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(prefix));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The offsets of partition `p` in `handled`, sorted.
fn offsets_of(handled: &[(i32, i64)], p: i32) -> Vec<i64> {
    let mut v: Vec<i64> = handled
        .iter()
        .filter(|(q, _)| *q == p)
        .map(|(_, o)| *o)
        .collect();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_traffic_commits_what_was_handled_and_flushes_metrics() {
    logs::init();
    let began = Instant::now();
    let (cluster, topic, group) = TestCluster::with_topic("sigterm", PARTITIONS).await;
    let receiver = OtlpReceiver::start().await;
    let dir = temp_dir("fresh-sigterm");
    cluster.produce_many(&topic, PARTITIONS, 500).await;

    // Records keep arriving while the first process runs and stops.
    let stop_producing = tokio_util::sync::CancellationToken::new();
    let producer = {
        let cluster_producer = cluster.producer().clone();
        let topic = topic.clone();
        let stop = stop_producing.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() && n < 3_000 {
                let p = (n % PARTITIONS as u64) as i32;
                let key = format!("k{n}");
                let record = rdkafka::producer::FutureRecord::to(&topic)
                    .partition(p)
                    .key(&key)
                    .payload("live");
                cluster_producer
                    .send(record, Duration::from_secs(10))
                    .await
                    .expect("produce under traffic");
                n += 1;
                if n.is_multiple_of(30) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            n
        })
    };

    let mut first = Consumer::spawn(
        "child-1",
        &dir,
        &cluster,
        &group,
        &topic,
        2,
        &[(CHILD_OTLP, receiver.endpoint())],
    );
    wait_until(
        Duration::from_secs(30),
        "the first child handled 300 records",
        || {
            first.process.assert_running();
            let n = first.handled().len();
            async move { n >= 300 }
        },
    )
    .await;
    assert_eq!(
        receiver.request_count(),
        0,
        "an export before the shutdown (the interval is an hour)"
    );
    let status = first.terminate().await;
    let stopped_after = began.elapsed();
    assert!(
        status.success(),
        "the first child did not exit 0 after SIGTERM ({status}):\n{}",
        first.process.log_text()
    );
    let log = first.process.log_text();
    assert!(log.contains("child summary:"), "no run summary:\n{log}");

    // Committed = exactly what was handled: every partition's handled
    // offsets are 0..k without a gap, and the committed offset is k.
    let handled_1 = first.handled();
    let committed = cluster.committed(&group, &topic, PARTITIONS).await;
    for p in 0..PARTITIONS {
        let offsets = offsets_of(&handled_1, p);
        let want: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, want, "partition {p}: handled offsets");
        assert_eq!(
            committed[p as usize],
            offsets.len() as i64,
            "partition {p}: committed offset after SIGTERM, handled {}",
            offsets.len()
        );
    }

    // The final export: every handled record's event age, flushed on the
    // way out.
    let age = receiver.metric(EVENT_AGE);
    let (points, _) = histogram_points(&age);
    let exported: u64 = points.iter().map(|p| p.count).sum();
    assert_eq!(
        exported,
        handled_1.len() as u64,
        "event-age samples in the final export"
    );

    // A restart handles the rest, and nothing twice.
    stop_producing.cancel();
    let produced_live = producer.await.expect("producer task");
    let high = cluster.high_watermarks(&topic, PARTITIONS).await;
    let mut second = Consumer::spawn("child-2", &dir, &cluster, &group, &topic, 0, &[]);
    let total: i64 = high.iter().sum();
    wait_until(
        Duration::from_secs(60),
        "the second child handled the rest",
        || {
            second.process.assert_running();
            let n = (handled_1.len() + second.handled().len()) as i64;
            async move { n >= total }
        },
    )
    .await;
    let status = second.terminate().await;
    assert!(status.success(), "the second child: {status}");
    let handled_2 = second.handled();
    let once_1: BTreeSet<(i32, i64)> = handled_1.iter().copied().collect();
    let twice: Vec<&(i32, i64)> = handled_2.iter().filter(|k| once_1.contains(k)).collect();
    assert!(
        twice.is_empty(),
        "handled again after a graceful SIGTERM: {:?}",
        &twice[..twice.len().min(10)]
    );
    let all: BTreeSet<(i32, i64)> = once_1.iter().chain(&handled_2).copied().collect();
    assert_eq!(all.len() as i64, total, "every record handled exactly once");
    assert_eq!(
        handled_1.len() + handled_2.len(),
        all.len(),
        "a record handled twice"
    );
    assert_eq!(cluster.committed(&group, &topic, PARTITIONS).await, high);
    eprintln!(
        "SIGTERM after {stopped_after:?}: child 1 handled {} (all committed, {exported} ages \
         exported on shutdown), {produced_live} produced under traffic, child 2 handled {}, \
         0 twice",
        handled_1.len(),
        handled_2.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_before_the_first_assignment_exits_0_with_nothing_committed() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("sigterm-early", PARTITIONS).await;
    let dir = temp_dir("fresh-sigterm-early");
    let mut child = Consumer::spawn("early", &dir, &cluster, &group, &topic, 0, &[]);
    child
        .wait_log("child running", Duration::from_secs(30))
        .await;
    let status = child.terminate().await;
    assert!(
        status.success(),
        "exit status {status}:\n{}",
        child.process.log_text()
    );
    let log = child.process.log_text();
    assert!(
        log.contains("child summary:") && log.contains("records_received: 0"),
        "no empty run summary:\n{log}"
    );
    assert!(child.handled().is_empty());
    let committed = cluster.committed(&group, &topic, PARTITIONS).await;
    assert!(
        committed.iter().all(|&c| c < 0),
        "committed offsets without records: {committed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_ends_a_hung_shutdown_at_once() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("sigterm-twice", 1).await;
    cluster.produce_many(&topic, 1, 5).await;
    let dir = temp_dir("fresh-sigterm-twice");
    let mut child = Consumer::spawn(
        "twice",
        &dir,
        &cluster,
        &group,
        &topic,
        0,
        &[(CHILD_MODE, "hang".to_owned())],
    );
    child
        .wait_log("handler hangs at 0:0", Duration::from_secs(30))
        .await;
    child.process.terminate();
    // The first signal was taken: the shutdown waits for the hung handler
    // (up to two minutes).
    child
        .wait_log("shutting down", Duration::from_secs(10))
        .await;
    let second_at = Instant::now();
    let status = child.terminate().await;
    let took = second_at.elapsed();
    let log = child.process.log_text();
    assert!(
        log.contains("child interrupted"),
        "the run did not end with RunError::Interrupted ({status}):\n{log}"
    );
    assert!(
        took < Duration::from_secs(10),
        "the second SIGTERM took {took:?} to end the process"
    );
    assert!(child.handled().is_empty());
    eprintln!("second SIGTERM: the process exited {took:?} later ({status})");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_under_block_is_loud_without_a_subscriber() {
    logs::init();
    const FAIL_AT: i64 = 20;
    let (cluster, topic, group) = TestCluster::with_topic("blocked-loud", 1).await;
    cluster.produce_many(&topic, 1, 50).await;
    let dir = temp_dir("fresh-blocked-loud");
    let mut child = Consumer::spawn(
        "blocked",
        &dir,
        &cluster,
        &group,
        &topic,
        0,
        &[(CHILD_MODE, format!("fail:{FAIL_AT}"))],
    );
    let line = format!("ERROR fresh_consumer: partition {topic}/0 stopped at offset {FAIL_AT}");
    child.wait_log(&line, Duration::from_secs(30)).await;
    cluster.wait_committed(&group, &topic, &[FAIL_AT]).await;
    let status = child.terminate().await;
    assert!(status.success(), "exit status {status}");
    let log = child.process.log_text();
    assert!(
        log.contains("malformed order") && log.contains("DeadLetter::default()"),
        "the stderr line names neither the error nor the way out:\n{log}"
    );
    assert_eq!(
        log.matches(&line).count(),
        1,
        "said more than once per record:\n{log}"
    );
    assert!(
        log.contains("records_blocked: 1") && log.contains(&format!("offset: {FAIL_AT}")),
        "the run summary does not name the blocked record:\n{log}"
    );
    assert_eq!(
        offsets_of(&child.handled(), 0),
        (0..FAIL_AT).collect::<Vec<_>>(),
        "handled past the blocking record"
    );
    assert_eq!(
        cluster.committed(&group, &topic, 1).await,
        vec![FAIL_AT],
        "committed past the blocking record"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
