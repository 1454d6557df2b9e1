//! Issue 46, item 3: no transactional member dies of aborts.
//!
//! Two transforming consumer processes (cooperative-sticky, each with its
//! own `transactional.id`), the first call of 1 % of the inputs failing
//! after its output was sent (every such failure aborts the open transaction and
//! rewinds the partitions that wrote into it; the failing input is handled
//! again and succeeds), 40,002 inputs over six
//! partitions, one SIGKILL of one member and a new incarnation of it (whose
//! `init_transactions` ends the killed one's open transaction). Neither
//! member may end its run: no `RunError::Fatal` (nothing fenced them), no
//! partition blocked by refused sends, and a `read_committed` reader sees
//! each input's output exactly once.
//!
//! Needs a real broker (the mock writes no transaction markers and does not
//! time transactions out): skipped on the mock.

mod support;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::{ERROR_TYPE, TRANSACTIONS};
use fresh_consumer::output::OutputError;
use fresh_consumer::testing::TestMetrics;
use fresh_consumer::{
    BoxError, Record,
    failure::RetryPolicy,
    output::{Output, OutputConfig},
};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCoordinator;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, read_committed};
use support::metrics::transaction_attrs;
use support::run::start;
use support::wait::WAIT;

const PARTITIONS: i32 = 6;
const PER_PARTITION: usize = 6_667;

const OUT_TOPIC: &str = "FRESH_TXA_OUT_TOPIC";
const MEMBER: &str = "FRESH_TXA_MEMBER";
/// Set to turn librdkafka's `eos` debug log on in the members (to see
/// which transactional call failed, and in which producer state).
const DEBUG: &str = "FRESH_TXA_DEBUG";

/// Whether the input `n` (partition and offset) fails its first call
/// after sending (about one input in a hundred; splitmix64, so the
/// failures spread). Only its first call in a process: a failure on every
/// call of 1 % of the calls would doom nearly every transaction of a
/// 50 ms commit cycle (about 150 calls) and the group would crawl.
fn fails(n: u64) -> bool {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).is_multiple_of(100)
}

/// The member process: writes one output per input (keyed by the input's
/// `partition/offset`), and fails 1 % of its calls after the output was
/// sent. Runs until the parent closes its stdin or kills it; prints how
/// its run ended.
#[test]
fn child_aborting_transformer() {
    let Some(target) = child::target() else {
        return;
    };
    support::logs::init();
    let to = child::var(OUT_TOPIC);
    let member = child::var(MEMBER);
    // The inputs whose first call failed already (in this process).
    let failed = Arc::new(Mutex::new(HashSet::new()));
    let handler = move |r: Record| {
        let (to, failed) = (to.clone(), Arc::clone(&failed));
        async move {
            fresh_consumer::output::outputs()?
                .send(
                    Output::to(&to)
                        .key(format!("{}/{}", r.partition(), r.offset()))
                        .payload(r.payload().unwrap_or_default()),
                )
                .await?;
            let id = ((r.partition() as u64) << 32) | r.offset() as u64;
            if fails(id) && failed.lock().unwrap().insert(id) {
                return Err::<(), BoxError>("injected failure after the output was sent".into());
            }
            Ok(())
        }
    };
    let mut outputs = OutputConfig::new().transactional_id(format!("{}-tx-{member}", target.group));
    if std::env::var(DEBUG).is_ok() {
        outputs = outputs.producer_property("debug", "eos");
    }
    let consumer = child::consumer(handler, &target)
        .set("partition.assignment.strategy", "cooperative-sticky")
        .outputs(outputs);
    let result = child::block_on(consumer.run_until(child::stdin_closed()));
    match &result {
        Ok(summary) => eprintln!(
            "child result: Ok (records_blocked={})",
            summary.records_blocked
        ),
        Err(e) => eprintln!("child result: Err({e:?})"),
    }
}

/// How many lines of `log` contain `needle`.
fn lines_with(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_member_dies_of_aborts() {
    let started = Instant::now();
    let (cluster, topic, group) = TestCluster::with_topic("tx-aborts", PARTITIONS).await;
    if !cluster.is_real() {
        eprintln!("skipped: needs a real broker (the mock writes no transaction markers)");
        return;
    }
    let out_topic = cluster.topic("tx-aborts-out", PARTITIONS).await;
    cluster
        .produce_many(&topic, PARTITIONS, PER_PARTITION)
        .await;
    let dir: PathBuf = std::env::temp_dir().join(format!("fresh-{group}"));
    std::fs::create_dir_all(&dir).expect("child dir");
    let spawn = |name: &str, member: usize| {
        let mut command = child::command("child_aborting_transformer", &cluster, &group, &topic);
        command
            .env(OUT_TOPIC, &out_topic)
            .env(MEMBER, member.to_string());
        if let Ok(v) = std::env::var(DEBUG) {
            command.env(DEBUG, v).env("RUST_LOG", "librdkafka=debug");
        }
        ChildProcess::spawn(name, &dir, command)
    };
    let total = PARTITIONS as i64 * PER_PARTITION as i64;
    let committed = || async {
        let offsets = cluster.committed(&group, &topic, PARTITIONS).await;
        offsets.iter().map(|o| (*o).max(0)).sum::<i64>()
    };
    let mut a = spawn("member-a", 0);
    let mut b = spawn("member-b", 1);
    // SIGKILL member b a third of the way through, then start it again
    // (same transactional id).
    // Deadlines, not waits: 36 s for the whole run on a quiet 2-core
    // machine, several times that under load.
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed().await < total / 3 {
        assert!(Instant::now() < deadline, "a third committed in time");
        a.assert_running();
        b.assert_running();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.kill();
    eprintln!(
        "killed member b at {} of {total} committed",
        committed().await
    );
    let mut b2 = spawn("member-b2", 1);
    let deadline = Instant::now() + Duration::from_secs(240);
    while committed().await < total {
        if Instant::now() > deadline {
            panic!(
                "not every input committed in time ({} of {total})",
                committed().await
            );
        }
        a.assert_running();
        b2.assert_running();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.stop().await;
    b2.stop().await;
    let logs = [a.log_text(), b.log_text(), b2.log_text()];
    let keys = {
        let (bs, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&bs, &t, PARTITIONS))
            .await
            .unwrap()
    };
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for k in &keys {
        *counts.entry(k.as_str()).or_default() += 1;
    }
    let lost = (0..PARTITIONS)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| format!("{p}/{o}")))
        .filter(|id| !counts.contains_key(id.as_str()))
        .count();
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    let aborted: usize = logs
        .iter()
        .map(|l| lines_with(l, "transaction aborted"))
        .sum();
    let fatal: usize = logs.iter().map(|l| lines_with(l, "Fatal")).sum();
    let blocked: usize = logs
        .iter()
        .map(|l| lines_with(l, "stopped at offset"))
        .sum();
    eprintln!(
        "FIGURES inputs={total} outputs={} lost={lost} duplicates={duplicates} aborted_transactions={aborted} fatal={fatal} blocked={blocked} ({:?})",
        keys.len(),
        started.elapsed()
    );
    for (name, log) in ["member-a", "member-b2"].iter().zip([&logs[0], &logs[2]]) {
        assert!(
            log.contains("child result: Ok"),
            "{name} must end its run itself: {}",
            log.lines()
                .filter(|l| l.contains("child result") || l.contains("ERROR"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(fatal, 0, "no member may die of a fatal transaction error");
    assert_eq!(blocked, 0, "no partition may stop on refused sends");
    assert_eq!((lost, duplicates), (0, 0), "exactly once");
    assert!(
        aborted > 100,
        "the handler failures must abort transactions (else this test proves nothing): {aborted}"
    );
}

/// Waits until the run's transactions committed `want` (its health
/// snapshot's committed offsets: the mock answers TxnOffsetCommit without
/// storing the offsets), stops the run (which must not have failed) and
/// checks its summary says the same.
async fn settle_on_mock(
    topic: &str,
    want: &[i64],
    run: support::run::Running,
) -> fresh_consumer::RunSummary {
    support::run::wait_snapshot(&run.health, WAIT, "every input committed", |s| {
        want.iter().enumerate().all(|(p, o)| {
            s.partition(topic, p as i32)
                .is_some_and(|r| r.committed_offset == Some(*o))
        })
    })
    .await;
    let summary = run.stop().await;
    support::kafka::assert_summary_committed(&summary, topic, want);
    summary
}

/// A handler that writes one output per input into `to`, keyed
/// `partition/offset`.
fn one_output_each(to: &str) -> impl fresh_consumer::Handler + Clone {
    let to = to.to_owned();
    move |r: Record| {
        let to = to.clone();
        async move {
            fresh_consumer::output::outputs()?
                .send(Output::to(&to).key(format!("{}/{}", r.partition(), r.offset())))
                .await?;
            Ok::<(), BoxError>(())
        }
    }
}

/// A one-partition input topic `<name>` with 20 records and its output
/// topic on a three-broker mock cluster, both led by broker 1; the group's
/// coordinator on broker `group_at`, its transactional id's on `txn_at`.
struct Placed {
    topic: String,
    out_topic: String,
    group: String,
    id: String,
}

async fn place(
    cluster: &TestCluster,
    mock: &rdkafka::mocking::MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
    name: &str,
    group_at: i32,
    txn_at: i32,
) -> Placed {
    let topic = cluster.topic(name, 1).await;
    let out_topic = cluster.topic(&format!("{name}-out"), 1).await;
    let group = support::kafka::unique(&format!("g-{name}"));
    let id = format!("{group}-tx");
    mock.coordinator(MockCoordinator::Group(group.clone()), group_at)
        .expect("group coordinator");
    mock.coordinator(MockCoordinator::Transaction(id.clone()), txn_at)
        .expect("transaction coordinator");
    for t in [&topic, &out_topic] {
        mock.partition_leader(t, 0, Some(1)).expect("leader");
    }
    cluster.produce_many(&topic, 1, 20).await;
    Placed {
        topic,
        out_topic,
        group,
        id,
    }
}

/// The transactions counter's value for aborts with `error_type`.
fn aborts(metrics: &TestMetrics, group: &str, error_type: &str) -> f64 {
    let mut attrs = transaction_attrs(group, "aborted");
    attrs.insert(ERROR_TYPE.to_owned(), error_type.to_owned());
    metrics.counter_total(TRANSACTIONS, &attrs)
}

/// The broker answers `EndTxn` with `INVALID_TXN_STATE` (twice: the
/// first producer's commit, then its replacement's), which librdkafka
/// makes fatal although no other producer has the transactional id: the
/// library replaces the producer (same id), counts the transaction as
/// aborted (`error.type` `INVALID_TXN_STATE`), rewinds, and the run goes
/// on to commit every input. Before issue 46 the run ended with
/// `RunError::Fatal`. Needs the mock broker's fault injection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_txn_state_from_the_broker_is_recovered_not_fatal() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-invalid-state", 1).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker's fault injection (EndTxn errors)")
    else {
        return;
    };
    let out_topic = cluster.topic("tx-invalid-state-out", 1).await;
    cluster.produce_many(&topic, 1, 30).await;
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE,
        ],
    );
    let metrics = TestMetrics::new();
    let handler = one_output_each(&out_topic);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new().transactional_id(format!("{group}-tx")))
            .meter_provider(metrics.provider()),
    );
    settle_on_mock(&topic, &[30], run).await;
    metrics.flush().await.expect("flush the test metrics");
    assert_eq!(
        aborts(&metrics, &group, "INVALID_TXN_STATE"),
        2.0,
        "each refused EndTxn aborts (and counts) one transaction"
    );
}

/// A write into the open transaction fails for good (the broker refuses a
/// produce request with INVALID_RECORD, once): librdkafka puts
/// the transaction into its abortable state and refuses the outputs sent
/// after it (`OutputError::TransactionFailed`). Those calls are not
/// attempts of their records: with one attempt per record and the
/// blocking policy, no record is blocked; the transaction is aborted at
/// once (not at the 5 s commit interval), its partitions are rewound, and
/// every input is committed. Needs the mock broker's fault injection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_refused_by_a_failed_transaction_are_not_attempts() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-refused", 2).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker's fault injection (Produce errors)")
    else {
        return;
    };
    let out_topic = cluster.topic("tx-refused-out", 1).await;
    cluster.produce_many(&topic, 2, 40).await;
    let metrics = TestMetrics::new();
    let refused = Arc::new(AtomicU32::new(0));
    let (to, seen) = (out_topic.clone(), Arc::clone(&refused));
    let handler = move |r: Record| {
        let (to, seen) = (to.clone(), Arc::clone(&seen));
        async move {
            // A record's outputs are written while the next records run.
            tokio::time::sleep(Duration::from_millis(5)).await;
            let sent = fresh_consumer::output::outputs()?
                .send(Output::to(&to).key(format!("{}/{}", r.partition(), r.offset())))
                .await;
            if let Err(OutputError::TransactionFailed { .. }) = &sent {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            sent?;
            Ok::<(), BoxError>(())
        }
    };
    // The output producer's first produce request fails for good.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD],
    );
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(RetryPolicy::default().max_attempts(1))
            .commit_interval(Duration::from_secs(5))
            .outputs(OutputConfig::new().transactional_id(format!("{group}-tx")))
            .meter_provider(metrics.provider()),
    );
    let summary = settle_on_mock(&topic, &[40, 40], run).await;
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the failed transaction refused outputs (else this test proves nothing)"
    );
    assert_eq!(
        summary.records_blocked, 0,
        "a refused call is not an attempt: {summary:?}"
    );
    metrics.flush().await.expect("flush the test metrics");
    assert!(
        aborts(&metrics, &group, "transaction_failed") >= 1.0,
        "the failed transaction is aborted as soon as a call saw it"
    );
}

/// A member killed with its transaction open leaves it open at the
/// transaction coordinator. The next producer with its transactional id
/// (a restarted member) has the coordinator abort it in
/// `init_transactions`: the library counts it (`fresh_consumer.transactions`,
/// `aborted`, `error.type` `predecessor_open`) and logs it, and the
/// predecessor's output never reaches a `read_committed` reader. A second
/// start after a clean stop counts nothing. Needs a real broker (the mock
/// does not end a predecessor's transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_a_killed_predecessor_left_open_is_counted() {
    let (cluster, topic, group) = TestCluster::with_topic("tx-predecessor", 1).await;
    if !cluster.is_real() {
        eprintln!(
            "skipped: needs a real broker (the mock does not end a predecessor's transaction)"
        );
        return;
    }
    support::logs::init();
    let out_topic = cluster.topic("tx-predecessor-out", 1).await;
    cluster.produce_many(&topic, 1, 5).await;
    let id = format!("{group}-tx");
    // The predecessor: an output in its transaction, which it never ends
    // (as a member SIGKILLed between two commits).
    let predecessor: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("transactional.id", &id)
        .create()
        .expect("the predecessor producer");
    {
        let (p, to) = (predecessor.clone(), out_topic.clone());
        tokio::task::spawn_blocking(move || {
            let timeout = Duration::from_secs(10);
            p.init_transactions(timeout).expect("init");
            p.begin_transaction().expect("begin");
            let record = FutureRecord::<str, str>::to(&to)
                .key("predecessor")
                .payload("x");
            drop(p.send_result(record).map_err(|(e, _)| e).expect("queued"));
            p.flush(timeout).expect("written into the open transaction");
        })
        .await
        .unwrap();
    }
    let handler = one_output_each(&out_topic);
    for (run, want) in [(1, 1.0), (2, 0.0)] {
        let metrics = TestMetrics::new();
        let running = start(
            cluster
                .consumer(&group, &topic, handler.clone())
                .outputs(OutputConfig::new().transactional_id(&id))
                .meter_provider(metrics.provider()),
        );
        cluster.wait_committed(&group, &topic, &[5]).await;
        running.stop().await;
        metrics.flush().await.expect("flush the test metrics");
        assert_eq!(
            aborts(&metrics, &group, "predecessor_open"),
            want,
            "start {run}: the predecessor's open transaction counted once, at the first start only"
        );
        let logged = support::logs::count(|e| e.mentions("left open"));
        assert_eq!(logged, run.min(1), "and logged once");
    }
    tokio::task::spawn_blocking(move || drop(predecessor))
        .await
        .unwrap();
    let keys = {
        let (b, t) = (cluster.bootstrap().to_owned(), out_topic.clone());
        tokio::task::spawn_blocking(move || read_committed(&b, &t, 1))
            .await
            .unwrap()
    };
    let mut keys = keys;
    keys.sort();
    assert_eq!(
        keys,
        ["0/0", "0/1", "0/2", "0/3", "0/4"],
        "the predecessor's output was aborted; each input's output is there once"
    );
}

/// The group coordinator goes down mid-transaction: librdkafka 2.12.1's
/// `send_offsets_to_transaction` ignores its timeout and waits for the
/// coordinator (confluentinc/librdkafka#5456; on a real cluster, when the
/// coordinator it remembers left the cluster, until another broker changes
/// state, #5511: a transactional member of a rolling restart stopped
/// committing for good). The library gives the call up after its timeout
/// (`transaction.timeout.ms`, 3 s here) and a second, starts a new producer
/// with the same transactional id, counts the transaction as aborted
/// (`error.type` `send_offsets_timed_out`) and rewinds; once the
/// coordinator is back every input is committed. Before issue 46 the
/// commit cycle waited as long as the coordinator was down (15 s here), and
/// no transaction ended meanwhile. Needs the mock broker's fault injection
/// (coordinators placed per group, a broker taken down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_offsets_stuck_on_a_lost_group_coordinator_is_given_up() {
    let cluster = TestCluster::start_with(3);
    let Some(mock) =
        cluster.mock_or_skip("the mock broker's fault injection (coordinators, a broker down)")
    else {
        return;
    };
    let Placed {
        topic,
        out_topic,
        group,
        id,
    } = place(&cluster, &mock, "tx-stuck", 2, 1).await;
    let handler = one_output_each(&out_topic);
    let metrics = TestMetrics::new();
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            // The member outlives the coordinator's absence.
            .set("session.timeout.ms", "45000")
            .set("heartbeat.interval.ms", "1000")
            .outputs(
                OutputConfig::new()
                    .transactional_id(&id)
                    .producer_property("transaction.timeout.ms", "3000"),
            )
            .meter_provider(metrics.provider()),
    );
    let committed = |want: i64| {
        let topic = topic.clone();
        move |s: &fresh_consumer::health::HealthSnapshot| {
            s.partition(&topic, 0)
                .is_some_and(|r| r.committed_offset == Some(want))
        }
    };
    support::run::wait_snapshot(&run.health, WAIT, "the first 20 committed", committed(20)).await;
    mock.broker_down(2).expect("the group coordinator down");
    let down = Instant::now();
    cluster.produce_many(&topic, 1, 20).await;
    support::wait::wait_until(
        Duration::from_secs(12),
        "a stuck send_offsets_to_transaction given up",
        || async {
            metrics.flush().await.expect("flush the test metrics");
            aborts(&metrics, &group, "send_offsets_timed_out") >= 1.0
        },
    )
    .await;
    let given_up = down.elapsed();
    // Down 15 s in all: longer than a call given up (4 s) by far.
    support::wait::wait_until(Duration::from_secs(20), "15 s down", || async {
        down.elapsed() >= Duration::from_secs(15)
    })
    .await;
    mock.broker_up(2).expect("the group coordinator back");
    support::run::wait_snapshot(&run.health, WAIT, "all 40 committed", committed(40)).await;
    let summary = run.stop().await;
    support::kafka::assert_summary_committed(&summary, &topic, &[40]);
    metrics.flush().await.expect("flush the test metrics");
    eprintln!(
        "send_offsets_to_transaction given up {given_up:?} after the group coordinator went down; {} such aborts while it was down 15 s",
        aborts(&metrics, &group, "send_offsets_timed_out")
    );
}

/// Found by CI's `cluster_txn_coordinator_killed` on three nodes (192
/// records lost, 64 per partition: one read batch each). The transaction
/// coordinator answers 10 s late (added round-trip time on its broker)
/// while a transaction's offsets are being sent, so the transaction gate
/// stays closed and the workers wait at it with records in hand; the
/// group coordinator then answers a heartbeat with UNKNOWN_MEMBER_ID: the
/// partitions are lost (their workers still running) and assigned to the
/// member again at once. Then the in-flight commit fails (TxnOffsetCommit
/// answered UNKNOWN_MEMBER_ID, as for a removed member) and the
/// transaction is aborted, which rewinds its members: the old workers.
/// Before the fix an old worker read its partition's librdkafka queue
/// again after the rewind; that queue is the partition's and held the new
/// assignment's records, which it took, counted unassigned and never
/// handled, and librdkafka's position moved past them for the new worker.
/// Every input must be handled, none taken by a stopped worker. Needs the
/// mock broker's fault injection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rewound_after_its_partitions_were_lost_takes_nothing_from_the_next_assignment() {
    support::logs::init();
    let cluster = TestCluster::start_with(3);
    let Some(mock) =
        cluster.mock_or_skip("the mock broker's fault injection (round-trip time, errors)")
    else {
        return;
    };
    const PARTS: i32 = 3;
    const PER: usize = 300;
    let topic = cluster.topic("tx-lost", PARTS).await;
    let out_topic = cluster.topic("tx-lost-out", 1).await;
    let group = support::kafka::unique("g-tx-lost");
    let id = format!("{group}-tx");
    mock.coordinator(MockCoordinator::Group(group.clone()), 3)
        .expect("group coordinator");
    mock.coordinator(MockCoordinator::Transaction(id.clone()), 2)
        .expect("transaction coordinator");
    for p in 0..PARTS {
        mock.partition_leader(&topic, p, Some(1)).expect("leader");
    }
    mock.partition_leader(&out_topic, 0, Some(1))
        .expect("leader");
    let seen: Arc<Mutex<HashSet<(i32, i64)>>> = Arc::default();
    let (to, s) = (out_topic.clone(), Arc::clone(&seen));
    let handler = move |r: Record| {
        let (to, s) = (to.clone(), Arc::clone(&s));
        async move {
            fresh_consumer::output::outputs()?
                .send(Output::to(&to).key(format!("{}/{}", r.partition(), r.offset())))
                .await?;
            s.lock().unwrap().insert((r.partition(), r.offset()));
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .commit_interval(Duration::from_millis(100))
            .outputs(OutputConfig::new().transactional_id(&id)),
    );
    cluster.produce_many(&topic, PARTS, 20).await;
    support::wait::wait_until(WAIT, "the first records handled", || async {
        seen.lock().unwrap().len() >= 3 * 20
    })
    .await;
    let mark = support::logs::mark();
    mock.request_errors(
        RDKafkaApiKey::TxnOffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID],
    );
    mock.broker_round_trip_time(2, Duration::from_secs(10))
        .expect("rtt");
    // A first wave: its outputs and the commit after it wait on the slow
    // transaction coordinator, the gate closed; the second wave's calls
    // wait at the gate.
    cluster.produce_many(&topic, PARTS, PER / 2).await;
    let slow = std::time::Instant::now();
    support::wait::wait_until(
        Duration::from_secs(10),
        "2 s into the slow period",
        || async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            slow.elapsed() >= Duration::from_secs(2)
        },
    )
    .await;
    cluster.produce_many(&topic, PARTS, PER / 2).await;
    mock.request_errors(
        RDKafkaApiKey::Heartbeat,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID],
    );
    support::wait::wait_until(Duration::from_secs(60), "the partitions lost", || async {
        support::logs::text_since(mark).contains("partitions lost")
    })
    .await;
    support::wait::wait_until(
        Duration::from_secs(60),
        "the transaction aborted",
        || async { support::logs::text_since(mark).contains("transaction aborted") },
    )
    .await;
    mock.broker_round_trip_time(2, Duration::ZERO).expect("rtt");
    let want = PARTS as usize * (20 + PER);
    let all = support::wait::wait_for(
        Duration::from_secs(60),
        "every input handled",
        || std::future::ready(seen.lock().unwrap().len()),
        |n| *n >= want,
    )
    .await;
    let summary = run.stop().await;
    let text = support::logs::text_since(mark);
    let mut order: Vec<(usize, &str)> = [
        "partitions lost",
        "partitions assigned",
        "transaction aborted",
    ]
    .into_iter()
    .filter_map(|w| text.find(w).map(|i| (i, w)))
    .collect();
    order.sort();
    eprintln!("events: {order:?}; {all} of {want} handled; {summary:?}");
    assert_eq!(
        summary.records_unassigned, 0,
        "records taken by a stopped worker"
    );
}

/// Found by the ten-minute transactional soak on three nodes (issue 46):
/// a handler failed after sending (the transaction must be aborted) while
/// no broker was reachable for about ten seconds; `abort_transaction`
/// returned librdkafka's retriable "timed out, retry", and the member
/// ended with `RunError::Fatal` though nothing fenced it. Here the
/// transaction coordinator is down for 20 s from the moment a handler
/// fails after its output was written: the abort times out (at
/// `transaction.timeout.ms`, 3 s here) and is called again, then the
/// producer is replaced by a new one with the same transactional id, whose
/// `init_transactions` waits for the coordinator and ends the old
/// transaction. The run goes on: the transaction is counted aborted
/// (`handler_failed`), its partition rewound, every input committed.
/// Needs the mock broker's fault injection (coordinators placed, a broker
/// taken down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_that_cannot_reach_the_transaction_coordinator_is_not_fatal() {
    abort_with_the_transaction_coordinator_down(false).await;
}

/// The same failed handler and coordinator outage, but the member is told
/// to stop (SIGTERM) while the coordinator is down: the final abort does not
/// succeed, and the run ends within its shutdown budget without a new
/// producer and without `RunError::Fatal` (the coordinator ends the open
/// transaction at the next producer with the id). Before, the failed
/// abort made the run end with `RunError::Fatal`. Needs the mock broker's
/// fault injection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_while_its_transaction_coordinator_is_down_stops_cleanly() {
    abort_with_the_transaction_coordinator_down(true).await;
}

/// A handler fails after its output was written and the transaction
/// coordinator goes down at once (20 s); with `stop_while_down` the run is
/// stopped then.
async fn abort_with_the_transaction_coordinator_down(stop_while_down: bool) {
    support::logs::init();
    let cluster = TestCluster::start_with(3);
    let Some(mock) =
        cluster.mock_or_skip("the mock broker's fault injection (coordinators, a broker down)")
    else {
        return;
    };
    let Placed {
        topic,
        out_topic,
        group,
        id,
    } = place(&cluster, &mock, "tx-abort-down", 3, 2).await;
    // The first call of offset 10 writes its output, says so, waits for
    // the test to take the coordinator down, then fails.
    let reached = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = {
        let (to, reached, release) = (
            out_topic.clone(),
            Arc::clone(&reached),
            Arc::clone(&release),
        );
        move |r: Record| {
            let (to, reached, release, failed_once) = (
                to.clone(),
                Arc::clone(&reached),
                Arc::clone(&release),
                Arc::clone(&failed_once),
            );
            async move {
                fresh_consumer::output::outputs()?
                    .send(Output::to(&to).key(format!("{}/{}", r.partition(), r.offset())))
                    .await?;
                if r.offset() == 10 && !failed_once.swap(true, Ordering::AcqRel) {
                    reached.notify_one();
                    let _permit = release.acquire().await?;
                    return Err::<(), BoxError>("fails after its output was written".into());
                }
                Ok(())
            }
        }
    };
    let metrics = TestMetrics::new();
    let mark = support::logs::mark();
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .commit_interval(Duration::from_millis(200))
            .outputs(
                OutputConfig::new()
                    .transactional_id(&id)
                    .producer_property("transaction.timeout.ms", "3000"),
            )
            .meter_provider(metrics.provider()),
    );
    tokio::time::timeout(WAIT, reached.notified())
        .await
        .expect("offset 10 handled");
    mock.broker_down(2)
        .expect("the transaction coordinator down");
    let down = Instant::now();
    release.add_permits(1);
    if stop_while_down {
        let (summary, took) = run
            .stop_within(Duration::from_secs(15), "stopped with the coordinator down")
            .await;
        eprintln!("stopped {took:?} after the failure; {summary:?}");
        mock.broker_up(2).expect("the transaction coordinator back");
        return;
    }
    // Longer than the flush before the abort (its outputs time out at
    // transaction.timeout.ms, 3 s) and three abort calls (3 s each).
    support::wait::wait_until(Duration::from_secs(30), "20 s down", || async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        down.elapsed() >= Duration::from_secs(20)
    })
    .await;
    mock.broker_up(2).expect("the transaction coordinator back");
    settle_on_mock(&topic, &[20], run).await;
    metrics.flush().await.expect("flush the test metrics");
    let text = support::logs::text_since(mark);
    eprintln!(
        "aborts: handler_failed {}; abort calls given up: {}",
        aborts(&metrics, &group, "handler_failed"),
        lines_with(&text, "abort_transaction did not succeed")
    );
    assert!(
        aborts(&metrics, &group, "handler_failed") >= 1.0,
        "the failed handler's transaction is counted aborted"
    );
    assert!(
        lines_with(&text, "abort_transaction did not succeed") >= 1,
        "the abort could not reach the coordinator (else this test proves nothing)"
    );
}

/// A commit whose `EndTxn` the transaction coordinator keeps refusing as
/// still loading (`COORDINATOR_LOAD_IN_PROGRESS`, which librdkafka retries
/// inside the call) for longer than the call's timeout: librdkafka
/// returns "timed out, retry call to resume" with the commit's outcome
/// open. The library resumes the call until the outcome is known; it does
/// not abort (an abort after a commit the coordinator completes anyway
/// would rewind past committed offsets and write their outputs twice).
/// Nothing is counted aborted and every input is committed. Needs the mock
/// broker's fault injection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_times_out_is_resumed_not_aborted() {
    support::logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("tx-commit-slow", 1).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker's fault injection (EndTxn errors)")
    else {
        return;
    };
    let out_topic = cluster.topic("tx-commit-slow-out", 1).await;
    cluster.produce_many(&topic, 1, 30).await;
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 12],
    );
    let metrics = TestMetrics::new();
    let mark = support::logs::mark();
    let run = start(
        cluster
            .consumer(&group, &topic, one_output_each(&out_topic))
            .outputs(
                OutputConfig::new()
                    .transactional_id(format!("{group}-tx"))
                    .producer_property("transaction.timeout.ms", "2000"),
            )
            .meter_provider(metrics.provider()),
    );
    settle_on_mock(&topic, &[30], run).await;
    metrics.flush().await.expect("flush the test metrics");
    let resumed = lines_with(
        &support::logs::text_since(mark),
        "call=\"commit_transaction\"",
    );
    // Aborts of any error.type.
    let aborted = metrics.counter_total(TRANSACTIONS, &transaction_attrs(&group, "aborted"));
    eprintln!("commit_transaction resumed {resumed} times; aborted {aborted}");
    assert!(
        resumed >= 1,
        "the commit timed out at least once (else this test proves nothing)"
    );
    assert_eq!(aborted, 0.0, "a commit that timed out is not aborted");
}
