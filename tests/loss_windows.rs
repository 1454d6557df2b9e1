//! Issue 19: the loss and rewind windows the engine's own notes named, each
//! reproduced from outside on the embedded broker (or a real cluster via
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`), through the public API only.
//!
//! - The storm guard must not clear while every partition is blocked by it:
//!   nothing finishes then, and an empty window is no evidence that the
//!   storm is over.
//! - The run summary's counters add up after a revoke: every record received
//!   is succeeded, late, or unassigned (dropped unhandled, to be
//!   redelivered), also the records a worker had read ahead in a batch.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::{
    BoxError, DeadLetter, OnExhausted, Record, RetryPolicy, RunSummary, StormGuard, permanent,
};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::wait::wait_until;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// Handler calls per offset.
#[derive(Clone, Default)]
struct Attempts(Arc<Mutex<BTreeMap<i64, u32>>>);

impl Attempts {
    fn note(&self, offset: i64) {
        *self.0.lock().unwrap().entry(offset).or_default() += 1;
    }
    /// A handler noting each call, failing permanently unless `ok(offset)`.
    fn counting(
        &self,
        ok: fn(i64) -> bool,
    ) -> impl Fn(Record) -> std::future::Ready<Result<(), BoxError>> + Send + Sync + 'static {
        let attempts = self.clone();
        move |r: Record| {
            attempts.note(r.offset());
            std::future::ready(if ok(r.offset()) {
                Ok(())
            } else {
                Err(permanent("dependency returns garbage"))
            })
        }
    }

    fn of(&self, offset: i64) -> u32 {
        self.0.lock().unwrap().get(&offset).copied().unwrap_or(0)
    }
}

/// Records in a topic's partition 0 (its high watermark).
async fn count(cluster: &TestCluster, topic: &str) -> i64 {
    cluster.high_watermarks(topic, 1).await[0]
}

/// Window 3. One partition; every record but each tenth fails permanently,
/// dead-letter policy, a storm guard of 50 % over a 1 s window once 10
/// records finished. The guard trips at offset 9 and blocks the partition
/// there. While the partition is blocked nothing finishes: before the fix
/// the window emptied after 1 s, the guard cleared, and offset 9 (and each
/// further failing record, up to `min_records` per window) was
/// dead-lettered in the middle of the storm. Now the guard clears only on
/// evidence: `min_records` records finished in the window with a failure
/// share at or below the threshold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storm_guard_holds_while_every_partition_is_blocked() {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("storm-window", 1).await;
    let dlq = cluster.topic("storm-window-dlt", 1).await;
    for i in 0..100 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "v", None)
            .await;
    }
    let group = unique("g-storm-window");
    let attempts = Attempts::default();
    // Every tenth record succeeds; the others fail permanently.
    let handler = attempts.counting(|offset| offset % 10 == 0);
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .retry(RetryPolicy::new().backoff(Duration::from_millis(10), Duration::from_millis(50)))
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new().topic(&dlq)))
            .storm_guard(
                StormGuard::new()
                    .max_failure_ratio(0.5)
                    .window(Duration::from_secs(1))
                    .min_records(10),
            )
            .run_until(stop.clone().cancelled_owned()),
    );
    // Under the dead-letter policy a permanent error is decided at once: a
    // second attempt of a record means the storm guard blocked it.
    wait_until(WAIT, "the storm guard blocking offset 9", || async {
        attempts.of(9) >= 2
    })
    .await;
    let parked = count(&cluster, &dlq).await;
    assert_eq!(
        parked, 8,
        "offsets 1 to 8 were dead-lettered before the storm"
    );
    // Four windows of retries at the 50 ms capped backoff, with nothing
    // finishing anywhere.
    wait_until(
        WAIT,
        "offset 9 retried for four windows, or dead-lettered",
        || async { attempts.of(9) >= 80 || count(&cluster, &dlq).await > parked },
    )
    .await;
    assert_eq!(
        count(&cluster, &dlq).await,
        parked,
        "a record was dead-lettered while the storm guard had every partition blocked"
    );
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![9]);
    stop.cancel();
    run.await.unwrap().unwrap();
}

/// Window 5. A worker reads its partition's queue in batches: records read
/// ahead and not yet handled when the partition is revoked are dropped
/// (never committed, so redelivered to the next owner). Before the fix they
/// counted as received but in no other counter, so after a rebalance the
/// summary did not add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_adds_up_after_a_revoke() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("summary-revoke", 2).await;
    cluster.produce_many(&topic, 2, 1_000).await;
    let first = Member::join(&cluster, &group, &topic);
    wait_until(WAIT, "the first member handling records", || async {
        first.handled() >= 20
    })
    .await;
    // A second member joins: one partition moves to it mid-stream.
    let second = Member::join(&cluster, &group, &topic);
    wait_until(WAIT, "the second member handling records", || async {
        second.handled() >= 1
    })
    .await;
    wait_until(WAIT, "every record committed", || async {
        cluster.committed(&group, &topic, 2).await == vec![1_000, 1_000]
    })
    .await;
    let (first, second) = (first.leave(), second.leave());
    for (name, summary) in [("first", first.await), ("second", second.await)] {
        assert_adds_up(name, &summary);
    }
}

/// A KIP-848 group member whose handler takes 5 ms per record.
struct Member {
    handled: Arc<AtomicU64>,
    stop: CancellationToken,
    run: tokio::task::JoinHandle<Result<RunSummary, fresh_consumer::RunError>>,
}

impl Member {
    fn join(cluster: &TestCluster, group: &str, topic: &str) -> Self {
        let handled = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let counter = Arc::clone(&handled);
        let handler = move |_r: Record| {
            let counter = Arc::clone(&counter);
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                counter.fetch_add(1, Ordering::Relaxed);
                Ok::<(), BoxError>(())
            }
        };
        let run = tokio::spawn(
            cluster
                .consumer_kip848(group, topic, handler)
                .run_until(stop.clone().cancelled_owned()),
        );
        Member { handled, stop, run }
    }

    fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }

    async fn leave(self) -> RunSummary {
        self.stop.cancel();
        self.run.await.unwrap().unwrap()
    }
}

fn assert_adds_up(name: &str, s: &RunSummary) {
    assert_eq!(
        s.records_received,
        s.records_succeeded
            + s.records_dead_lettered
            + s.records_skipped
            + s.late_completions
            + s.records_unassigned,
        "{name} member: received = succeeded + dead-lettered + skipped + late + unassigned; {s:?}"
    );
}
