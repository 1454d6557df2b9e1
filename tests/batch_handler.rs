//! Batch handlers (`FreshConsumer::batched`, issue 25): batches of one
//! partition in offset order up to `max_batch_records`; a failure named at
//! a record commits exactly the prefix before it and sends that record
//! alone through the retry policy and `OnExhausted`; whole-batch failures
//! (a panic, a timeout, an index outside the batch, an error without an
//! index) retry the whole batch, then fall back to one record at a time;
//! a rebalance mid-batch commits only completed records and drops late
//! completions; key order is refused; the metrics count records per
//! batch.
//!
//! Runs on librdkafka's mock broker, or on a real cluster named by
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`. Waits are deadlines, never fixed sleeps.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::failure::dead_letter as dlt;
use fresh_consumer::metrics::{BATCH_MESSAGES, EVENT_AGE, PROCESS_DURATION};
use fresh_consumer::{
    Batch, BatchError, ConfigError, FreshConsumer, OnExhausted, ProcessingOrder, RunError,
    failure::{DeadLetter, RetryPolicy},
};

use support::handled::Seen;
use support::kafka::{TestCluster, unique};
use support::logs;
use support::metrics::partition_attrs;
use support::run::{start, wait_snapshot};
use support::wait::{WAIT, wait_until};

/// One call of a batch handler: its partition and offsets.
type Call = (i32, Vec<i64>);

/// Every call of a batch handler, and the records it completed.
#[derive(Clone, Default)]
struct Log {
    /// (partition, offsets) per call, in call order.
    calls: Arc<Mutex<Vec<Call>>>,
    /// Offsets the handler reported as done (a whole batch, or the prefix
    /// before the record it named).
    succeeded: Seen,
}

impl Log {
    /// A batch handler that logs each call, then asks `decide` (given the
    /// batch and how many calls came before it for its first record).
    fn handler(
        &self,
        decide: impl Fn(&Batch, usize) -> Result<(), BatchError> + Send + Sync + 'static,
    ) -> impl fresh_consumer::BatchHandler {
        self.slow_handler(|_, _| None, decide)
    }

    /// [`Self::handler`], waiting first for as long as `slow` says.
    fn slow_handler(
        &self,
        slow: impl Fn(&Batch, usize) -> Option<Duration> + Send + Sync + 'static,
        decide: impl Fn(&Batch, usize) -> Result<(), BatchError> + Send + Sync + 'static,
    ) -> impl fresh_consumer::BatchHandler {
        let log = self.clone();
        let slow = Arc::new(slow);
        let decide = Arc::new(decide);
        move |batch: Batch| {
            let log = log.clone();
            let slow = Arc::clone(&slow);
            let decide = Arc::clone(&decide);
            async move {
                let before = {
                    let mut calls = log.calls.lock().unwrap();
                    let first = (batch.partition(), batch.first_offset());
                    let before = calls.iter().filter(|(p, o)| (*p, o[0]) == first).count();
                    calls.push((
                        batch.partition(),
                        batch.iter().map(|r| r.offset()).collect(),
                    ));
                    before
                };
                if let Some(wait) = slow(&batch, before) {
                    tokio::time::sleep(wait).await;
                }
                let result = decide(&batch, before);
                let done = match &result {
                    Ok(()) => batch.len(),
                    // An index outside the batch completes nothing.
                    Err(e) => e.failed_at().filter(|&i| i < batch.len()).unwrap_or(0),
                };
                for r in &batch[..done] {
                    log.succeeded.push(r);
                }
                result
            }
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The calls whose batch holds `(partition, offset)`.
    fn calls_with(&self, partition: i32, offset: i64) -> Vec<Vec<i64>> {
        self.calls()
            .into_iter()
            .filter(|(p, o)| *p == partition && o.contains(&offset))
            .map(|(_, o)| o)
            .collect()
    }
}

fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::new()
        .max_attempts(max_attempts)
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
}

/// Batches hold one partition's records in offset order, at most
/// `max_batch_records` of them, and together every record exactly once;
/// the process duration is recorded once per call, the batch size
/// histogram counts every record, and the event age once per record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_hold_one_partition_in_offset_order_up_to_max_records() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("batch-shape", 3).await;
    cluster.produce_many(&topic, 3, 1_000).await;
    let metrics = TestMetrics::new();
    let log = Log::default();
    let run = start(
        cluster
            .batched(&group, &topic, log.handler(|_, _| Ok(())))
            .max_batch_records(100)
            .meter_provider(metrics.provider()),
    );
    cluster.wait_committed(&group, &topic, &[1_000; 3]).await;
    let summary = run.stop().await;
    metrics.flush().await.expect("flush the metrics");

    log.succeeded.assert_exactly_once_in_order(&[1_000; 3]);
    let calls = log.calls();
    for (p, offsets) in &calls {
        assert!(
            !offsets.is_empty() && offsets.len() <= 100,
            "partition {p}: {offsets:?}"
        );
        assert!(
            offsets.windows(2).all(|w| w[1] == w[0] + 1),
            "partition {p}: consecutive offsets: {offsets:?}"
        );
    }
    // Produced before the consumer started: the queue holds full batches.
    assert!(
        calls.iter().filter(|(_, o)| o.len() == 100).count() >= 3,
        "full batches: {:?}",
        calls.iter().map(|(_, o)| o.len()).collect::<Vec<_>>()
    );
    assert_eq!(summary.records_succeeded, 3_000);
    assert_eq!(summary.failed_attempts, 0);

    for p in 0..3 {
        let attrs = partition_attrs(&topic, p, &group);
        let calls_p = calls.iter().filter(|(q, _)| *q == p).count() as u64;
        let batches = metrics.histogram(BATCH_MESSAGES, &attrs);
        let (sum, count) = (batches.sum, batches.count);
        assert_eq!((sum, count), (1_000.0, calls_p), "{BATCH_MESSAGES} p{p}");
        let durations = metrics.histogram(PROCESS_DURATION, &attrs).count;
        assert_eq!(
            durations, calls_p,
            "{PROCESS_DURATION}: once per call, p{p}"
        );
        let ages = metrics.histogram(EVENT_AGE, &attrs).count;
        assert_eq!(ages, 1_000, "{EVENT_AGE}: once per record, p{p}");
    }
    let _ = metrics.shutdown().await;
}

/// A batch closes once it holds `max_batch_records`, gathering records
/// produced after the member was assigned (one at a time, each
/// acknowledged before the next: normally after the batch's first was
/// taken), well before its 30 s `max_batch_wait`; a short batch goes once
/// `max_batch_wait` passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_closes_at_max_records_or_after_max_wait() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("batch-gather", 1).await;
    let log = Log::default();
    let run = start(
        cluster
            .batched(&group, &topic, log.handler(|_, _| Ok(())))
            .max_batch_records(3)
            .max_batch_wait(Duration::from_secs(30)),
    );
    wait_snapshot(&run.health, WAIT, "the partition assigned", |s| {
        !s.partitions.is_empty()
    })
    .await;
    for _ in 0..3 {
        cluster.produce_many(&topic, 1, 1).await;
    }
    cluster.wait_committed(&group, &topic, &[3]).await;
    run.stop().await;
    assert_eq!(log.calls(), vec![(0, vec![0, 1, 2])]);

    let log = Log::default();
    let run = start(
        cluster
            .batched(
                &unique("g-batch-gather-lone"),
                &topic,
                log.handler(|_, _| Ok(())),
            )
            .max_batch_records(10)
            .max_batch_wait(Duration::from_millis(200)),
    );
    wait_until(
        WAIT,
        "the 3 records handled in a batch short of 10",
        || async { log.succeeded.count(0) == 3 },
    )
    .await;
    run.stop().await;
    assert_eq!(log.calls(), vec![(0, vec![0, 1, 2])]);
}

/// A batch that fails at a named record completes exactly the records
/// before it: under the block policy the committed offset stays at the
/// failed record, which is retried alone (batches of one), and no record
/// after it is ever reported done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_named_in_a_batch_commits_exactly_the_prefix() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("batch-prefix", 1).await;
    cluster.produce_many(&topic, 1, 50).await;
    let log = Log::default();
    let handler = log.handler(
        |batch, _| match batch.iter().position(|r| r.offset() == 20) {
            Some(i) => Err(BatchError::at(
                i,
                std::io::Error::other("row 20 violates a constraint"),
            )),
            None => Ok(()),
        },
    );
    let run = start(
        cluster
            .batched(&group, &topic, handler)
            .retry(fast_retry(3))
            .on_exhausted(OnExhausted::Block),
    );
    wait_until(WAIT, "record 20 retried alone, blocked", || async {
        log.calls_with(0, 20)
            .iter()
            .filter(|o| o.len() == 1)
            .count()
            >= 4
    })
    .await;
    cluster.wait_committed(&group, &topic, &[20]).await;
    let summary = run.stop().await;

    assert_eq!(log.succeeded.of(0), (0..20).collect::<Vec<_>>());
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![20]);
    // Nothing after record 20 was handled again after the first batch that
    // held it: every later call is record 20 alone.
    let with_20 = log.calls_with(0, 20);
    assert!(
        with_20[0].len() > 1,
        "the first call was a batch: {with_20:?}"
    );
    assert!(with_20[1..].iter().all(|o| o == &vec![20]), "{with_20:?}");
    assert_eq!(summary.records_succeeded, 20);
}

/// A record failing in the middle of a batch is dead-lettered alone after
/// its attempts (its batch call counts as the first); every other record
/// succeeds exactly once, and the partition commits to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_failing_in_the_middle_is_dead_lettered_alone() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("batch-dlq", 2).await;
    let dlq = unique("batch-dlq-dlt");
    cluster.create_topic(&dlq, 1).await;
    cluster.produce_many(&topic, 2, 100).await;
    let log = Log::default();
    let handler = log.handler(|batch, _| {
        match batch
            .iter()
            .position(|r| (r.partition(), r.offset()) == (1, 37))
        {
            Some(i) => Err(BatchError::at(i, std::io::Error::other("poison"))),
            None => Ok(()),
        }
    });
    let run = start(
        cluster
            .batched(&group, &topic, handler)
            .retry(fast_retry(3))
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new().topic(&dlq))),
    );
    cluster.wait_committed(&group, &topic, &[100, 100]).await;
    let summary = run.stop().await;

    let parked = cluster.read_topic(&dlq, 1).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    let header =
        |name: &str| String::from_utf8(parked[0].header(name).flatten().unwrap().to_vec()).unwrap();
    assert_eq!(header(dlt::PARTITION), "1");
    assert_eq!(header(dlt::OFFSET), "37");
    assert_eq!(header(dlt::ATTEMPTS), "3");
    let mut want: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    want.insert(0, (0..100).collect());
    want.insert(1, (0..100).filter(|&o| o != 37).collect());
    assert_eq!(
        log.succeeded.snapshot(),
        want,
        "every other record once, in order"
    );
    // Attempts 2 and 3 were record 37 alone.
    let alone = log
        .calls_with(1, 37)
        .into_iter()
        .filter(|o| o == &vec![37])
        .count();
    assert_eq!(alone, 2);
    assert_eq!(summary.records_dead_lettered, 1);
    assert_eq!(summary.records_succeeded, 199);
    assert_eq!(summary.failed_attempts, 3);
}

/// How a whole-batch failure is made, for
/// [`a_whole_batch_failure_retries_the_whole_batch`].
#[derive(Clone, Copy, Debug)]
enum WholeFailure {
    Panic,
    Timeout,
    IndexOutside,
    NoIndex,
}

/// A panic, a handler timeout, an index outside the batch and an error
/// without an index fail the whole batch: the next call is the same batch
/// again (nothing of it was completed), and once it succeeds everything is
/// committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_batch_failure_retries_the_whole_batch() {
    logs::init();
    for kind in [
        WholeFailure::Panic,
        WholeFailure::Timeout,
        WholeFailure::IndexOutside,
        WholeFailure::NoIndex,
    ] {
        let (cluster, topic, group) = TestCluster::with_topic("batch-whole", 1).await;
        cluster.produce_many(&topic, 1, 30).await;
        let log = Log::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let first_call = {
            let calls = Arc::clone(&calls);
            move || calls.fetch_add(1, Ordering::SeqCst) == 0
        };
        // Longer than the handler timeout: the first call is dropped (and
        // logged) before it decides.
        let slow = move |_: &Batch, before: usize| {
            (matches!(kind, WholeFailure::Timeout) && before == 0)
                .then_some(Duration::from_secs(30))
        };
        let handler = log.slow_handler(slow, move |batch, _| {
            if matches!(kind, WholeFailure::Timeout) || !first_call() {
                return Ok(());
            }
            match kind {
                WholeFailure::Panic => panic!("bug in the sink"),
                WholeFailure::Timeout => unreachable!("returned above"),
                WholeFailure::IndexOutside => Err(BatchError::at(
                    batch.len() + 5,
                    std::io::Error::other("wrong index"),
                )),
                WholeFailure::NoIndex => Err(std::io::Error::other("sink down").into()),
            }
        });
        let run = start(
            cluster
                .batched(&group, &topic, handler)
                .retry(fast_retry(5))
                .handler_timeout(Duration::from_millis(200)),
        );
        cluster.wait_committed(&group, &topic, &[30]).await;
        let summary = run.stop().await;

        let all = log.calls();
        assert!(all.len() >= 2, "{kind:?}: {all:?}");
        assert_eq!(
            all[1].1, all[0].1,
            "{kind:?}: the failed batch is retried as a whole"
        );
        assert_eq!(log.succeeded.of(0), (0..30).collect::<Vec<_>>(), "{kind:?}");
        assert_eq!(summary.failed_attempts, 1, "{kind:?}");
        assert_eq!(summary.records_succeeded, 30, "{kind:?}");
    }
}

/// A whole-batch failure that persists past the attempts is handled one
/// record at a time: the record that fails alone takes `OnExhausted` on its
/// own (skipped here), the others succeed, and nothing past a record is
/// committed before it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_batch_failure_falls_back_to_one_record_at_a_time() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("batch-fallback", 1).await;
    cluster.produce_many(&topic, 1, 10).await;
    let log = Log::default();
    // Any batch holding record 5 fails without saying which record.
    let handler = log.handler(|batch, _| {
        if batch.iter().any(|r| r.offset() == 5) {
            return Err(std::io::Error::other("constraint violated somewhere").into());
        }
        Ok(())
    });
    let run = start(
        cluster
            .batched(&group, &topic, handler)
            .max_batch_records(10)
            .retry(fast_retry(2))
            .on_exhausted(OnExhausted::SkipAndCommitPast),
    );
    cluster.wait_committed(&group, &topic, &[10]).await;
    let summary = run.stop().await;

    assert_eq!(
        log.succeeded.of(0),
        [0, 1, 2, 3, 4, 6, 7, 8, 9],
        "all but record 5, once each, in order"
    );
    assert_eq!(
        log.calls_with(0, 5).iter().filter(|o| o.len() == 1).count(),
        2
    );
    assert_eq!(summary.records_skipped, 1);
    assert_eq!(summary.records_succeeded, 9);
}

/// A rebalance while a batch runs: the member whose partition is revoked
/// finishes its batch after the revoke, counts it as late completions and
/// commits none of it; the next owner handles those records and commits
/// them. Every record is handled at least once and both summaries add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_mid_batch_commits_only_completed_records() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("batch-rebalance", 2).await;
    cluster.produce_many(&topic, 2, 40).await;
    // The first member's first batch of each partition waits until
    // released; everything else is handled at once.
    let release = Arc::new(tokio::sync::Notify::new());
    let waiting = Arc::new(AtomicUsize::new(0));
    let first_seen = Seen::default();
    let first = {
        let release = Arc::clone(&release);
        let waiting = Arc::clone(&waiting);
        let seen = first_seen.clone();
        let handler = move |batch: Batch| {
            let release = Arc::clone(&release);
            let waiting = Arc::clone(&waiting);
            let seen = seen.clone();
            async move {
                if batch.first_offset() == 0 {
                    waiting.fetch_add(1, Ordering::SeqCst);
                    release.notified().await;
                }
                for r in &batch {
                    seen.push(r);
                }
                Ok::<(), BatchError>(())
            }
        };
        start(
            cluster
                .batched_kip848(&group, &topic, handler)
                .revoke_timeout(Duration::from_millis(500)),
        )
    };
    wait_until(WAIT, "the first member's batches waiting", || async {
        waiting.load(Ordering::SeqCst) == 2
    })
    .await;
    let second_seen = Seen::default();
    let second = {
        let seen = second_seen.clone();
        let handler = move |batch: Batch| {
            let seen = seen.clone();
            async move {
                for r in &batch {
                    seen.push(r);
                }
                Ok::<(), BatchError>(())
            }
        };
        start(cluster.batched_kip848(&group, &topic, handler))
    };
    wait_until(WAIT, "the second member handled a partition", || async {
        second_seen.total() == 40
    })
    .await;
    let moved = if second_seen.count(0) == 40 { 0 } else { 1 };
    // The batch of the partition that moved completes after its revoke.
    release.notify_waiters();
    cluster.wait_committed(&group, &topic, &[40, 40]).await;
    let (a, b) = (first.stop().await, second.stop().await);

    assert_eq!(second_seen.of(moved), (0..40).collect::<Vec<_>>());
    assert!(
        a.late_completions >= 1,
        "the first member's batch of partition {moved} completed late: {a:?}"
    );
    let committed_by_first = a
        .committed
        .iter()
        .filter(|(tp, _)| tp.partition == moved)
        .count();
    assert_eq!(
        committed_by_first, 0,
        "the first member committed nothing of the partition it lost: {a:?}"
    );
    for (name, s) in [("first", &a), ("second", &b)] {
        assert_eq!(
            s.records_received,
            s.records_succeeded + s.late_completions + s.records_unassigned,
            "{name}: {s:?}"
        );
    }
}

/// Bad batch settings are a `ConfigError` before any I/O.
#[test]
fn bad_batch_settings_are_refused_before_any_io() {
    let handler = |_: Batch| async { Ok::<(), BatchError>(()) };
    let base = || {
        FreshConsumer::batched(handler)
            .bootstrap_servers("127.0.0.1:1")
            .group_id("g")
            .topics(["t"])
    };
    assert!(base().validate().is_ok());
    let invalid = |c: FreshConsumer<_>| match c.validate() {
        Err(ConfigError::InvalidOption { option, reason }) => (option, reason),
        other => panic!("{other:?}"),
    };
    assert_eq!(invalid(base().max_batch_records(0)).0, "max_batch_records");
    assert_eq!(
        invalid(base().max_batch_wait(Duration::ZERO)).0,
        "max_batch_wait"
    );
    assert_eq!(
        invalid(
            base()
                .set("max.poll.interval.ms", "15000")
                .max_batch_wait(Duration::from_secs(15))
        )
        .0,
        "max_batch_wait"
    );
    let (option, reason) =
        invalid(base().processing_order(ProcessingOrder::Key { max_in_flight: 4 }));
    assert_eq!(option, "processing_order");
    assert!(reason.contains("batch"), "{reason}");
    // Key order with one in flight is partition order: allowed.
    assert!(
        base()
            .processing_order(ProcessingOrder::Key { max_in_flight: 1 })
            .validate()
            .is_ok()
    );
    // And `run` says the same before touching the network.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(base().max_batch_records(0).run_until(async {}));
    assert!(matches!(err, Err(RunError::Config(_))), "{err:?}");
}
