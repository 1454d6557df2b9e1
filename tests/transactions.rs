//! Issue 26, item 2: transactional outputs (exactly once into Kafka,
//! `OutputConfig::transactional_id`).
//!
//! The mock broker has a transaction coordinator but writes no commit or
//! abort markers: a `read_committed` reader sees aborted outputs there. So
//! on the mock the tests check the transactions' flow (commits, aborts,
//! rewinds, offsets, metrics) and that every input's output arrived at
//! least once (it also answers TxnOffsetCommit without storing the
//! offsets: the offsets are checked in the run summary); on a real broker
//! they check exactly once and the group's committed offsets. The
//! transaction-timeout, fencing and kill tests need a real broker (the
//! mock does not time transactions out, does not fence an earlier producer
//! of the same transactional id, and a restarted member would start from
//! offsets it never stored) and skip on the mock.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::{
    ERROR_TYPE, EVENT_AGE, MESSAGING_CONSUMER_GROUP_NAME, TRANSACTION_DURATION, TRANSACTIONS,
};
use fresh_consumer::testing::TestMetrics;
use fresh_consumer::{
    BoxError, ConfigError, FreshConsumer, ProcessingOrder, Record, RunError,
    output::{Output, OutputConfig},
};
use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, read_committed};
use support::metrics::transaction_attrs;
use support::run::start;
use support::wait::{WAIT, wait_until};

/// The input an output was written for: `partition/offset`, its key.
fn input_id(r: &Record) -> String {
    format!("{}/{}", r.partition(), r.offset())
}

/// A handler writing one output per input to `to`, keyed by the input's
/// `partition/offset`.
async fn transform(to: &str, r: &Record) -> Result<(), BoxError> {
    fresh_consumer::output::outputs()?
        .send(
            Output::to(to)
                .key(input_id(r))
                .payload(r.payload().unwrap_or_default()),
        )
        .await?;
    Ok(())
}

/// Handler successes by input `partition/offset`.
#[derive(Clone, Default)]
struct Succeeded(Arc<Mutex<BTreeMap<String, u32>>>);

impl Succeeded {
    fn push(&self, r: &Record) {
        *self.0.lock().unwrap().entry(input_id(r)).or_default() += 1;
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Waits until the group committed `want` (a real broker), or, on the
/// mock (whose TxnOffsetCommit answers without storing the offsets), until
/// `inputs` inputs succeeded; then stops `run` and checks the offsets the
/// run committed in its transactions.
async fn settle(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
    want: &[i64],
    succeeded: &Succeeded,
    run: support::run::Running,
) -> fresh_consumer::RunSummary {
    let inputs = want.iter().sum::<i64>() as usize;
    if cluster.is_real() {
        cluster.wait_committed(group, topic, want).await;
    } else {
        wait_until(WAIT, "every input succeeded", || async {
            succeeded.len() >= inputs
        })
        .await;
    }
    let summary = run.stop().await;
    support::kafka::assert_summary_committed(&summary, topic, want);
    summary
}

/// How often each key occurs.
fn counts(keys: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in keys {
        *m.entry(k.clone()).or_default() += 1;
    }
    m
}

/// Asserts that every input `partition/offset` (`per_partition` records in
/// each of `partitions`) has exactly one output among `keys` on a real
/// broker, at least one on the mock (which shows aborted outputs).
fn assert_outputs(cluster: &TestCluster, keys: &[String], partitions: i32, per_partition: i64) {
    let counts = counts(keys);
    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    for p in 0..partitions {
        for o in 0..per_partition {
            let id = format!("{p}/{o}");
            match counts.get(&id).copied().unwrap_or(0) {
                0 => lost.push(id),
                1 => {}
                _ => duplicated.push(id),
            }
        }
    }
    assert!(lost.is_empty(), "inputs without an output: {lost:?}");
    assert_eq!(
        counts.len() as i64,
        partitions as i64 * per_partition,
        "outputs of unknown inputs: {counts:?}"
    );
    if cluster.is_real() {
        assert!(
            duplicated.is_empty(),
            "a read_committed reader sees these inputs' outputs more than once: {duplicated:?}"
        );
    } else {
        eprintln!(
            "mock broker (no transaction markers): {} inputs' aborted outputs are visible",
            duplicated.len()
        );
    }
}

/// The outputs of committed transactions reach a `read_committed` reader,
/// with the input offsets committed in the same transactions; the event
/// age of each record is recorded once its transaction committed, and the
/// transactions are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_outputs_and_offsets_reach_a_read_committed_reader() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-in", 3).await;
    let out_topic = cluster.topic("tx-out", 2).await;
    cluster.produce_many(&topic, 3, 40).await;
    let metrics = TestMetrics::new();
    let succeeded = Succeeded::default();
    let (to, done) = (out_topic.clone(), succeeded.clone());
    let handler = move |r: Record| {
        let (to, done) = (to.clone(), done.clone());
        async move {
            transform(&to, &r).await?;
            done.push(&r);
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new().transactional_id(format!("{group}-tx")))
            .meter_provider(metrics.provider()),
    );
    let summary = settle(&cluster, &group, &topic, &[40, 40, 40], &succeeded, run).await;
    assert_eq!(summary.records_succeeded, 120, "{summary:?}");
    let keys = {
        let (b, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&b, &t, 2))
            .await
            .unwrap()
    };
    assert_eq!(keys.len(), 120, "no transaction aborted: each output once");
    assert_outputs(&cluster, &keys, 3, 40);
    metrics.flush().await.expect("flush the test metrics");
    let committed = metrics.counter_total(TRANSACTIONS, &transaction_attrs(&group, "committed"));
    assert!(committed >= 1.0, "transactions counted: {committed}");
    assert_eq!(
        metrics.counter_total(TRANSACTIONS, &transaction_attrs(&group, "aborted")),
        0.0
    );
    let durations = metrics.histogram(
        TRANSACTION_DURATION,
        &transaction_attrs(&group, "committed"),
    );
    assert_eq!(durations.count as f64, committed);
    let ages = metrics.histogram(EVENT_AGE, [(MESSAGING_CONSUMER_GROUP_NAME, group.as_str())]);
    assert_eq!(ages.count, 120, "one age per record, at its commit");
}

/// A handler error after the call wrote an output aborts the transaction
/// and rewinds the partitions that wrote into it; a handler error without
/// outputs (on a partition whose handler writes none) retries in place
/// and aborts nothing. In the end each input's output is there once
/// (read_committed) and the offsets are committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_error_after_outputs_aborts_only_what_it_must() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-err", 2).await;
    let out_topic = cluster.topic("tx-err-out", 1).await;
    cluster.produce_many(&topic, 2, 20).await;
    let metrics = TestMetrics::new();
    let calls = Arc::new(Mutex::new(BTreeMap::<String, u32>::new()));
    let succeeded = Succeeded::default();
    let (to, seen, done) = (out_topic.clone(), Arc::clone(&calls), succeeded.clone());
    let handler = move |r: Record| {
        let (to, seen, done) = (to.clone(), Arc::clone(&seen), done.clone());
        async move {
            let n = {
                let mut seen = seen.lock().unwrap();
                let n = seen.entry(input_id(&r)).or_default();
                *n += 1;
                *n
            };
            // Partition 0 transforms; partition 1 only consumes.
            if r.partition() == 0 {
                transform(&to, &r).await?;
            }
            if n == 1 && (r.partition(), r.offset()) == (0, 12) {
                return Err("fails after its output".into());
            }
            if n == 1 && (r.partition(), r.offset()) == (1, 7) {
                return Err("fails without outputs".into());
            }
            done.push(&r);
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new().transactional_id(format!("{group}-tx")))
            .meter_provider(metrics.provider()),
    );
    settle(&cluster, &group, &topic, &[20, 20], &succeeded, run).await;
    let calls = calls.lock().unwrap().clone();
    for o in 0..20 {
        let n = calls.get(&format!("1/{o}")).copied().unwrap_or(0);
        let want = if o == 7 { 2 } else { 1 };
        assert_eq!(
            n, want,
            "partition 1 is never rewound: record {o} called {n} times"
        );
    }
    assert!(
        calls.get("0/12").copied().unwrap_or(0) >= 2,
        "the failed record is handled again: {calls:?}"
    );
    let keys = {
        let (b, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&b, &t, 1))
            .await
            .unwrap()
    };
    assert_outputs(&cluster, &keys, 1, 20);
    metrics.flush().await.expect("flush the test metrics");
    let mut aborted = transaction_attrs(&group, "aborted");
    aborted.insert(ERROR_TYPE.to_owned(), "handler_failed".to_owned());
    assert_eq!(
        metrics.counter_total(TRANSACTIONS, &aborted),
        1.0,
        "one abort, for the failure after an output"
    );
}

/// A handler slower than `transaction.timeout.ms`: the broker aborts the
/// transaction; the library aborts its side, rewinds and handles the
/// records again, and in the end each input's output is there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_timeout_aborts_rewinds_and_recovers() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-timeout", 1).await;
    if !cluster.is_real() {
        eprintln!("skipped: needs a real broker (the mock does not time transactions out)");
        return;
    }
    let out_topic = cluster.topic("tx-timeout-out", 1).await;
    cluster.produce_many(&topic, 1, 10).await;
    let metrics = TestMetrics::new();
    let slow_once = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicU32::new(0));
    let (to, slow, n) = (
        out_topic.clone(),
        Arc::clone(&slow_once),
        Arc::clone(&calls),
    );
    let handler = move |r: Record| {
        let (to, slow, n) = (to.clone(), Arc::clone(&slow), Arc::clone(&n));
        async move {
            n.fetch_add(1, Ordering::Relaxed);
            transform(&to, &r).await?;
            if r.offset() == 4 && slow.swap(false, Ordering::AcqRel) {
                // Past the transaction timeout (2 s; the broker checks
                // every second).
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(
                OutputConfig::new()
                    .transactional_id(format!("{group}-tx"))
                    .producer_property("transaction.timeout.ms", "2000"),
            )
            .meter_provider(metrics.provider()),
    );
    cluster.wait_committed(&group, &topic, &[10]).await;
    run.stop().await;
    let keys = {
        let (b, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&b, &t, 1))
            .await
            .unwrap()
    };
    assert_outputs(&cluster, &keys, 1, 10);
    assert!(
        calls.load(Ordering::Relaxed) > 10,
        "records handled again after the abort"
    );
    metrics.flush().await.expect("flush the test metrics");
    let mut timed_out = transaction_attrs(&group, "aborted");
    timed_out.insert(ERROR_TYPE.to_owned(), "transaction_timeout".to_owned());
    let aborted = metrics.counter_total(TRANSACTIONS, &timed_out);
    assert!(aborted >= 1.0, "the timed-out transaction was aborted");
}

/// A second member with the same transactional id (a restarted member
/// while its earlier incarnation still runs: a zombie) fences the first:
/// the first run ends with `RunError::Fatal` and commits nothing more; the
/// second takes the partitions over, and no output of the first's open
/// transaction is visible after the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_member_with_the_same_transactional_id_fences_the_first() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-fence", 2).await;
    if !cluster.is_real() {
        eprintln!(
            "skipped: needs a real broker (the mock does not fence an earlier producer of the same transactional id)"
        );
        return;
    }
    let out_topic = cluster.topic("tx-fence-out", 1).await;
    cluster.produce_many(&topic, 2, 30).await;
    let tx_id = format!("{group}-tx");
    let first_calls = Arc::new(AtomicU32::new(0));
    let (to, n) = (out_topic.clone(), Arc::clone(&first_calls));
    let slow = move |r: Record| {
        let (to, n) = (to.clone(), Arc::clone(&n));
        async move {
            n.fetch_add(1, Ordering::Relaxed);
            transform(&to, &r).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<(), BoxError>(())
        }
    };
    let first = start(
        cluster
            .consumer(&group, &topic, slow)
            .outputs(OutputConfig::new().transactional_id(tx_id.clone()))
            .commit_interval(Duration::from_millis(300)),
    );
    wait_until(WAIT, "the first member handles records", || async {
        first_calls.load(Ordering::Relaxed) >= 6
    })
    .await;
    let to = out_topic.clone();
    let fast = move |r: Record| {
        let to = to.clone();
        async move { transform(&to, &r).await }
    };
    let second = start(
        cluster
            .consumer(&group, &topic, fast)
            .outputs(OutputConfig::new().transactional_id(tx_id)),
    );
    wait_until(WAIT, "the first member is fenced and stops", || async {
        first.is_finished()
    })
    .await;
    let first_calls_at_stop = first_calls.load(Ordering::Relaxed);
    match first.finish().await {
        Err(RunError::Fatal(e)) => eprintln!("first member: fatal: {e}"),
        other => panic!("the fenced member ends with RunError::Fatal: {other:?}"),
    }
    cluster.wait_committed(&group, &topic, &[30, 30]).await;
    second.stop().await;
    eprintln!("the first member handled {first_calls_at_stop} records before it was fenced");
    let keys = {
        let (b, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&b, &t, 1))
            .await
            .unwrap()
    };
    assert_outputs(&cluster, &keys, 2, 30);
}

/// A second member (its own transactional id) joining mid-stream takes
/// half the partitions over: the first commits its open transaction (with
/// the revoked partitions' offsets) before they move, so the new owner
/// starts after the outputs already committed and a read_committed reader
/// sees each input's output once (KIP-447: the offsets carry the group's
/// generation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_commits_the_open_transaction_before_the_partitions_move() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-handover", 4).await;
    if !cluster.is_real() {
        eprintln!(
            "skipped: needs a real broker (the mock stores no offsets committed in a transaction: the new owner would start over)"
        );
        return;
    }
    let out_topic = cluster.topic("tx-handover-out", 2).await;
    cluster.produce_many(&topic, 4, 100).await;
    let calls = Arc::new(AtomicU32::new(0));
    let member = |id: &str, calls: Arc<AtomicU32>| {
        let to = out_topic.clone();
        let handler = move |r: Record| {
            let (to, calls) = (to.clone(), Arc::clone(&calls));
            async move {
                calls.fetch_add(1, Ordering::Relaxed);
                transform(&to, &r).await?;
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<(), BoxError>(())
            }
        };
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new().transactional_id(format!("{group}-{id}")))
            .commit_interval(Duration::from_millis(500))
    };
    let first = start(member("a", Arc::clone(&calls)));
    wait_until(WAIT, "the first member is mid-stream", || async {
        calls.load(Ordering::Relaxed) >= 40
    })
    .await;
    let second = start(member("b", Arc::clone(&calls)));
    cluster.wait_committed(&group, &topic, &[100; 4]).await;
    let (a, b) = (first.stop().await, second.stop().await);
    assert!(
        a.rebalances >= 2 && b.records_succeeded > 0,
        "the partitions moved: {a:?} {b:?}"
    );
    let keys = {
        let (bootstrap, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&bootstrap, &t, 2))
            .await
            .unwrap()
    };
    assert_outputs(&cluster, &keys, 4, 100);
}

/// Settings transactions cannot run with are typed errors before any I/O.
#[tokio::test]
async fn bad_transactional_settings_are_typed_errors() {
    let base = || {
        FreshConsumer::new(|_r: Record| async { Ok::<(), BoxError>(()) })
            .bootstrap_servers("localhost:1")
            .group_id("g")
            .topics(["t"])
    };
    let invalid = |r: Result<_, ConfigError>| match r {
        Err(ConfigError::InvalidOption { option, reason }) => (option, reason),
        other => panic!("expected InvalidOption: {other:?}"),
    };
    let (option, _) = invalid(
        base()
            .outputs(OutputConfig::new().transactional_id(" "))
            .validate(),
    );
    assert_eq!(option, "transactional_id");
    match base()
        .outputs(OutputConfig::new().producer_property("transactional.id", "x"))
        .validate()
    {
        Err(ConfigError::OutputProducerProperty {
            property, reason, ..
        }) => {
            assert_eq!(property, "transactional.id");
            assert!(reason.contains("transactional_id"), "{reason}");
        }
        other => panic!("the raw property is refused: {other:?}"),
    }
    let tx = || OutputConfig::new().transactional_id("t-1");
    let (option, reason) = invalid(
        base()
            .outputs(tx())
            .processing_order(ProcessingOrder::Key { max_in_flight: 4 })
            .validate(),
    );
    assert_eq!(option, "transactional_id");
    assert!(reason.contains("key order"), "{reason}");
    let (_, reason) = invalid(
        base()
            .outputs(tx())
            .split_partition_queues(false)
            .validate(),
    );
    assert!(reason.contains("split_partition_queues"), "{reason}");
    assert!(base().outputs(tx()).validate().is_ok());
}

/// The kill test's child: a transforming consumer (transactional unless
/// `FRESH_TX_PLAIN` is set) run until the parent closes its stdin or
/// kills it.
#[test]
fn child_transformer() {
    let Some(target) = child::target() else {
        return;
    };
    let to = child::var(CHILD_OUT_TOPIC);
    let plain = std::env::var(CHILD_PLAIN).is_ok();
    let handler = move |r: Record| {
        let to = to.clone();
        async move {
            // About 1,000 records/s per partition: the kills land while
            // work remains.
            tokio::time::sleep(Duration::from_millis(1)).await;
            transform(&to, &r).await
        }
    };
    let outputs = if plain {
        OutputConfig::new()
    } else {
        // The same id in every incarnation: a new one fences a zombie.
        OutputConfig::new().transactional_id(format!("{}-tx", target.group))
    };
    // Static membership: a new incarnation takes the killed one's place
    // at once, instead of waiting for its session to time out.
    let consumer = child::consumer(handler, &target)
        .set("group.instance.id", format!("{}-member", target.group))
        .outputs(outputs)
        .commit_interval(Duration::from_millis(100));
    let result = child::block_on(consumer.run_until(child::stdin_closed()));
    eprintln!("child result: {result:?}");
}

const CHILD_OUT_TOPIC: &str = "FRESH_TX_OUT_TOPIC";
const CHILD_PLAIN: &str = "FRESH_TX_PLAIN";

/// One kill run: 20,000 inputs over 4 partitions, a transforming child
/// SIGKILLed at random points (`kills` times, then a last child that runs
/// to the end). Returns the output keys a read_committed reader sees.
async fn kill_run(transactional: bool, kills: usize) -> (usize, usize, usize) {
    const PARTITIONS: i32 = 4;
    const PER_PARTITION: usize = 5_000;
    let (cluster, topic, group) = TestCluster::with_topic(
        if transactional {
            "tx-kill"
        } else {
            "tx-kill-plain"
        },
        PARTITIONS,
    )
    .await;
    let out_topic = cluster.topic("tx-kill-out", 4).await;
    cluster
        .produce_many(&topic, PARTITIONS, PER_PARTITION)
        .await;
    let dir: PathBuf = std::env::temp_dir().join(format!("fresh-{group}"));
    std::fs::create_dir_all(&dir).expect("child dir");
    let spawn = |i: usize| {
        let mut command = child::command("child_transformer", &cluster, &group, &topic);
        command.env(CHILD_OUT_TOPIC, &out_topic);
        if !transactional {
            command.env(CHILD_PLAIN, "1");
        }
        ChildProcess::spawn(format!("transformer-{i}"), &dir, command)
    };
    // A cheap random source: the clock's nanoseconds.
    let random_ms = |lo: u64, hi: u64| {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as u64;
        lo + n % (hi - lo)
    };
    let total = (PARTITIONS as usize * PER_PARTITION) as i64;
    let committed = || async {
        let offsets = cluster.committed(&group, &topic, PARTITIONS).await;
        offsets.iter().map(|o| (*o).max(0)).sum::<i64>()
    };
    for i in 0..kills {
        let mut c = spawn(i);
        // Kill once the group committed its share of the inputs (a quarter
        // more per kill), at a random point after that.
        let share = total * (i as i64 + 1) / (kills as i64 + 1);
        let deadline = Instant::now() + WAIT;
        while committed().await < share && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(random_ms(0, 300))).await;
        c.assert_running();
        c.kill();
        eprintln!(
            "kill {}: {} of {total} inputs committed",
            i + 1,
            committed().await
        );
    }
    let mut last = spawn(kills);
    cluster
        .wait_committed(&group, &topic, &[PER_PARTITION as i64; PARTITIONS as usize])
        .await;
    last.stop().await;
    let keys = {
        let (b, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&b, &t, 4))
            .await
            .unwrap()
    };
    let counts = counts(&keys);
    let lost = (0..PARTITIONS)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| format!("{p}/{o}")))
        .filter(|id| !counts.contains_key(id))
        .count();
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    let mut log = std::fs::File::create(dir.join("result.txt")).expect("result file");
    let _ = writeln!(
        log,
        "transactional={transactional} outputs={} lost={lost} duplicates={duplicates}",
        keys.len()
    );
    (keys.len(), lost, duplicates)
}

/// SIGKILL a transforming consumer process at random points (3 kills,
/// 20,000 inputs): a read_committed reader sees each input's output
/// exactly once with transactions, and duplicates without (so the test
/// can fail). Needs a real broker (the mock writes no transaction markers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_transformers_write_each_output_exactly_once() {
    let started = Instant::now();
    let cluster = TestCluster::start();
    if !cluster.is_real() {
        eprintln!("skipped: needs a real broker (the mock writes no transaction markers)");
        return;
    }
    drop(cluster);
    let (outputs, lost, duplicates) = kill_run(true, 3).await;
    eprintln!(
        "transactional: {outputs} outputs, {lost} lost, {duplicates} duplicates ({:?})",
        started.elapsed()
    );
    assert_eq!((lost, duplicates), (0, 0), "exactly once with transactions");
    let plain_started = Instant::now();
    let (outputs, lost, duplicates) = kill_run(false, 3).await;
    eprintln!(
        "at-least-once: {outputs} outputs, {lost} lost, {duplicates} duplicates ({:?})",
        plain_started.elapsed()
    );
    assert_eq!(lost, 0, "at-least-once loses nothing either");
    assert!(
        duplicates > 0,
        "without transactions the kills leave duplicates (else this test could not fail)"
    );
}
