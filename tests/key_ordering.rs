//! Key-ordered concurrency within a partition (`ProcessingOrder::Key`), on a
//! Kafka broker (the mock cluster, or a real one through
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`): records with the same key run one at a
//! time in offset order, different keys of one partition run concurrently up
//! to `max_in_flight`, and the committed offset never passes a record that
//! has not completed.
//!
//! Nothing here asserts on wall time: concurrency is what the handlers
//! observed (how many ran at once), waits have deadlines.

mod support;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::{
    ConfigError, FreshConsumer, OnExhausted, ProcessingOrder, Record, TopicPartition,
    failure::RetryPolicy, health::HealthReason,
};
use rdkafka::producer::FutureRecord;
use support::kafka::TestCluster;
use support::logs;
use support::run::{Running, start};
use support::wait::wait_until;

const WAIT: Duration = Duration::from_secs(30);

type Key = Option<Vec<u8>>;
type BoxFut = Pin<Box<dyn Future<Output = Result<(), std::io::Error>> + Send>>;

/// What the handlers observed: how many ran at once, whether two records of
/// one key ever overlapped, the order each key's records started in, and
/// which offsets succeeded.
#[derive(Default)]
struct Probe(Mutex<Seen>);

#[derive(Default)]
struct Seen {
    running: usize,
    max_running: usize,
    running_keys: HashSet<Key>,
    /// A record started while another record with its key was running.
    same_key_overlaps: usize,
    /// Per key, the offsets in the order their handling started (a retry
    /// of the same record is not repeated).
    started: HashMap<Key, Vec<i64>>,
    /// Offsets in the order they succeeded.
    succeeded: Vec<i64>,
    attempts: HashMap<i64, u32>,
}

impl Probe {
    fn start(&self, r: &Record) {
        let mut s = self.0.lock().unwrap();
        s.running += 1;
        s.max_running = s.max_running.max(s.running);
        let key = r.key().map(<[u8]>::to_vec);
        if !s.running_keys.insert(key.clone()) {
            s.same_key_overlaps += 1;
        }
        let started = s.started.entry(key).or_default();
        if started.last() != Some(&r.offset()) {
            started.push(r.offset());
        }
        *s.attempts.entry(r.offset()).or_default() += 1;
    }

    fn end(&self, r: &Record, ok: bool) {
        let mut s = self.0.lock().unwrap();
        s.running -= 1;
        s.running_keys.remove(&r.key().map(<[u8]>::to_vec));
        if ok {
            s.succeeded.push(r.offset());
        }
    }

    fn succeeded(&self) -> usize {
        self.0.lock().unwrap().succeeded.len()
    }

    fn attempts(&self, offset: i64) -> u32 {
        self.0
            .lock()
            .unwrap()
            .attempts
            .get(&offset)
            .copied()
            .unwrap_or(0)
    }

    fn started(&self, key: Option<&str>) -> Vec<i64> {
        let key = key.map(|k| k.as_bytes().to_vec());
        self.0
            .lock()
            .unwrap()
            .started
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }

    /// Same-key records never overlapped, and each key's records started in
    /// offset order, each once: exactly the offsets `keys` gives that key.
    fn assert_key_order(&self, keys: &[Option<String>]) {
        let s = self.0.lock().unwrap();
        assert_eq!(s.same_key_overlaps, 0, "two records of one key overlapped");
        let mut want: HashMap<Key, Vec<i64>> = HashMap::new();
        for (o, k) in keys.iter().enumerate() {
            want.entry(k.as_ref().map(|k| k.as_bytes().to_vec()))
                .or_default()
                .push(o as i64);
        }
        for (key, offsets) in &want {
            let got = s.started.get(key).cloned().unwrap_or_default();
            assert_eq!(
                &got,
                offsets,
                "key {:?}: records must start in offset order, each once",
                key.as_deref().map(String::from_utf8_lossy)
            );
        }
    }

    /// Every offset `0..n` succeeded exactly once.
    fn assert_exactly_once(&self, n: i64) {
        let mut got = self.0.lock().unwrap().succeeded.clone();
        got.sort_unstable();
        assert_eq!(got, (0..n).collect::<Vec<_>>(), "each offset exactly once");
    }
}

/// A handler that reports each attempt to `probe` around `work`.
fn probed<W, Fut>(probe: &Arc<Probe>, work: W) -> impl Fn(Record) -> BoxFut + Send + Sync + 'static
where
    W: Fn(Record) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), std::io::Error>> + Send + 'static,
{
    let probe = Arc::clone(probe);
    move |r: Record| {
        let probe = Arc::clone(&probe);
        let work = work(r.clone());
        Box::pin(async move {
            probe.start(&r);
            let result = work.await;
            probe.end(&r, result.is_ok());
            result
        })
    }
}

/// A consumer in key order, at most `max_in_flight` records at once, of a
/// new topic `{prefix}-…` holding one record per entry of `keys` (see
/// [`produce_keyed`]), with a [`probed`] handler that takes `work` (a sleep)
/// per record. Returns the cluster, topic, group, probe and the running
/// consumer.
async fn key_ordered(
    prefix: &str,
    keys: &[Option<String>],
    work: Duration,
    max_in_flight: usize,
) -> (TestCluster, String, String, Arc<Probe>, Running) {
    let (cluster, topic, group) = TestCluster::with_topic(prefix, 1).await;
    produce_keyed(&cluster, &topic, keys).await;
    let probe = Arc::new(Probe::default());
    let handler = probed(&probe, move |_r| async move {
        tokio::time::sleep(work).await;
        Ok(())
    });
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .processing_order(ProcessingOrder::Key { max_in_flight }),
    );
    (cluster, topic, group, probe, run)
}

/// A [`probed`] handler that holds the record at `offset` until `gate`
/// hands out a permit, and lets every other record through at once.
fn gated_at(
    probe: &Arc<Probe>,
    gate: &Arc<tokio::sync::Semaphore>,
    offset: i64,
) -> impl Fn(Record) -> BoxFut + Send + Sync + 'static {
    let gate = Arc::clone(gate);
    probed(probe, move |r| {
        let gate = Arc::clone(&gate);
        async move {
            if r.offset() == offset {
                let _ = gate.acquire().await.expect("gate");
            }
            Ok(())
        }
    })
}

/// Produces one record per entry of `keys` (`None`: a null key) to
/// partition 0, in order, so record `i` has offset `i` on a new topic. All
/// acknowledged on return.
async fn produce_keyed(cluster: &TestCluster, topic: &str, keys: &[Option<String>]) {
    let mut acks = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let payload = format!("v{i}");
        let mut r = FutureRecord::<str, str>::to(topic)
            .partition(0)
            .payload(&payload);
        if let Some(k) = key {
            r = r.key(k.as_str());
        }
        acks.push(
            cluster
                .producer()
                .send_result(r)
                .map_err(|(e, _)| e)
                .expect("enqueue"),
        );
    }
    for (i, ack) in acks.into_iter().enumerate() {
        let (_, offset) = ack
            .await
            .expect("delivery")
            .map(|d| (d.partition, d.offset))
            .map_err(|(e, _)| e)
            .expect("ack");
        assert_eq!(offset, i as i64, "records are produced in order");
    }
}

fn keys(n: usize, key: impl Fn(usize) -> Option<String>) -> Vec<Option<String>> {
    (0..n).map(key).collect()
}

/// `n` keys drawn from `distinct` keys (`key-0000`, ...) by a fixed
/// pseudo-random sequence: unlike a round robin, records of one key often
/// follow each other closely, so they meet in flight.
fn random_keys(n: usize, distinct: u64) -> Vec<Option<String>> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Some(format!("key-{:04}", x % distinct))
        })
        .collect()
}

fn tp(topic: &str) -> TopicPartition {
    TopicPartition {
        topic: topic.to_owned(),
        partition: 0,
    }
}

async fn wait_committed(cluster: &TestCluster, group: &str, topic: &str, want: i64) {
    wait_until(WAIT, &format!("committed offset {want}"), || async {
        cluster.committed(group, topic, 1).await == vec![want]
    })
    .await;
}

// ---------------------------------------------------------------------------

/// 100 records over 10 keys (in a random order), a 50 ms handler,
/// `max_in_flight` 4: each key's records run one at a time in offset order,
/// and up to 4 (never more) run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_stays_in_order_and_different_keys_run_concurrently() {
    logs::init();
    let keys = random_keys(100, 10);
    let (cluster, topic, group, probe, run) =
        key_ordered("key-order", &keys, Duration::from_millis(50), 4).await;
    wait_until(WAIT, "100 records handled", || async {
        probe.succeeded() == 100
    })
    .await;
    wait_committed(&cluster, &group, &topic, 100).await;
    let summary = run.stop().await;

    probe.assert_key_order(&keys);
    probe.assert_exactly_once(100);
    let max = probe.0.lock().unwrap().max_running;
    eprintln!("max concurrency observed: {max}");
    assert!(
        (2..=4).contains(&max),
        "different keys run concurrently, at most max_in_flight = 4 at once: {max}"
    );
    assert_eq!(summary.records_succeeded, 100);
    assert_eq!(summary.committed.get(&tp(&topic)), Some(&100));
}

/// Handlers that mostly never wait: nine records in ten complete on their
/// first poll, where the worker finishes them in place and starts the next
/// record of their lane the same way; every tenth waits 2 ms, so records
/// queue behind it in its lane and run in place one after another when it
/// ends. Keys stay in order, nothing is lost or run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_that_never_wait_keep_key_order() {
    logs::init();
    const N: usize = 2_000;
    let (cluster, topic, group) = TestCluster::with_topic("key-instant", 1).await;
    let keys = random_keys(N, 50);
    produce_keyed(&cluster, &topic, &keys).await;
    let probe = Arc::new(Probe::default());
    let handler = probed(&probe, |r| async move {
        if r.offset() % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    });
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .processing_order(ProcessingOrder::Key { max_in_flight: 16 }),
    );
    wait_until(WAIT, "2,000 records handled", || async {
        probe.succeeded() == N
    })
    .await;
    wait_committed(&cluster, &group, &topic, N as i64).await;
    let summary = run.stop().await;

    probe.assert_key_order(&keys);
    probe.assert_exactly_once(N as i64);
    assert_eq!(summary.records_succeeded, N as u64);
    assert_eq!(summary.committed.get(&tp(&topic)), Some(&(N as i64)));
}

/// A slow record at offset 5 (its own key) while the 29 others, all of
/// different keys, finish: the committed offset stays at 5 until it
/// finishes, then jumps to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_never_passes_an_unfinished_earlier_offset() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("key-commit", 1).await;
    let keys = keys(30, |i| {
        Some(if i == 5 {
            "slow".to_owned()
        } else {
            format!("k{i}")
        })
    });
    produce_keyed(&cluster, &topic, &keys).await;

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let probe = Arc::new(Probe::default());
    let handler = gated_at(&probe, &gate, 5);
    // Samples the group's committed offset from the start; each sample
    // notes whether the slow record had been released when it returned.
    let released = Arc::new(AtomicBool::new(false));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let reader = cluster.offset_reader(&group, &topic, 1);
        let (released, sampling) = (Arc::clone(&released), Arc::clone(&sampling));
        std::thread::spawn(move || {
            let mut before_release = Vec::new();
            while sampling.load(Ordering::SeqCst) {
                if let Ok(c) = reader.committed(Duration::from_secs(5)) {
                    // Read after the sample returned: `false` means the whole
                    // read happened before the release.
                    if !released.load(Ordering::SeqCst) {
                        before_release.push(c[0]);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            before_release
        })
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .processing_order(ProcessingOrder::Key { max_in_flight: 8 }),
    );
    wait_until(WAIT, "the 29 other records handled", || async {
        probe.succeeded() == 29
    })
    .await;
    wait_committed(&cluster, &group, &topic, 5).await;
    // Several commit intervals (50 ms) with everything after offset 5 done:
    // still committed at 5.
    let since = Instant::now();
    wait_until(WAIT, "10 commit intervals pass", || async {
        assert_eq!(cluster.committed(&group, &topic, 1).await, vec![5]);
        since.elapsed() >= Duration::from_millis(500)
    })
    .await;
    assert_eq!(probe.started(Some("slow")), vec![5]);

    released.store(true, Ordering::SeqCst);
    gate.add_permits(1);
    wait_committed(&cluster, &group, &topic, 30).await;
    sampling.store(false, Ordering::SeqCst);
    let samples = sampler.join().expect("sampler");
    let summary = run.stop().await;

    eprintln!(
        "{} samples before the release, max {:?}",
        samples.len(),
        samples.iter().max()
    );
    assert!(samples.len() >= 5, "the sampler sampled: {samples:?}");
    assert!(
        samples.iter().all(|&c| c <= 5),
        "committed past the unfinished offset 5: {samples:?}"
    );
    assert!(samples.contains(&5));
    probe.assert_exactly_once(30);
    let order = probe.0.lock().unwrap().succeeded.clone();
    assert_eq!(order.last(), Some(&5), "offset 5 finished last: {order:?}");
    assert_eq!(summary.committed.get(&tp(&topic)), Some(&30));
}

/// Offset 2 (key `k2`) fails until told otherwise; its attempts run out and
/// the block policy holds it. The other keys' records keep succeeding while
/// it is blocked (the later ones only start once it is), `k2`'s later
/// records wait behind it, the commit holds at 2, and the partition reports
/// itself blocked the whole time, since the same moment (other keys
/// succeeding do not clear it). Once it succeeds, `k2` continues in order
/// and the commit reaches the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_key_holds_the_commit_but_not_the_other_keys() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("key-fail", 1).await;
    let keys = keys(40, |i| Some(format!("k{}", i % 4)));
    produce_keyed(&cluster, &topic, &keys).await;

    let failing = Arc::new(AtomicBool::new(true));
    // Set once offset 2 is retried after its attempts ran out (blocked).
    let (is_blocked, blocked_rx) = tokio::sync::watch::channel(false);
    let probe = Arc::new(Probe::default());
    let handler = {
        let failing = Arc::clone(&failing);
        let probe2 = Arc::clone(&probe);
        probed(&probe, move |r| {
            let fail = r.offset() == 2 && failing.load(Ordering::SeqCst);
            // `probe` counted this attempt already when the future runs.
            let (probe, is_blocked) = (Arc::clone(&probe2), is_blocked.clone());
            let mut blocked_rx = blocked_rx.clone();
            async move {
                if fail {
                    if probe.attempts(2) >= 4 {
                        let _ = is_blocked.send(true);
                    }
                    return Err(std::io::Error::other("downstream unavailable"));
                }
                if r.offset() >= 20 {
                    let _ = blocked_rx.wait_for(|b| *b).await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            }
        })
    };
    let consumer = cluster
        .consumer(&group, &topic, handler)
        .processing_order(ProcessingOrder::Key { max_in_flight: 8 })
        .retry(
            RetryPolicy::new()
                .max_attempts(3)
                .backoff(Duration::from_millis(10), Duration::from_millis(50)),
        )
        .on_exhausted(OnExhausted::Block);
    let health = consumer.health_handle();
    // When the partition became blocked (wall clock), if it is.
    let blocked_since = || {
        let s = health.snapshot();
        s.partition(&topic, 0).and_then(|p| {
            p.reasons.iter().find_map(|r| match r {
                HealthReason::BlockedByFailingRecord { duration, .. } => {
                    Some(s.taken_at - *duration)
                }
                _ => None,
            })
        })
    };
    let run = start(consumer);

    wait_until(WAIT, "offset 2 blocked after its attempts", || async {
        probe.attempts(2) >= 4 && blocked_since().is_some()
    })
    .await;
    let since = blocked_since().expect("blocked");
    let handled_when_blocked = probe.succeeded();
    // The 30 records of k0, k1 and k3 succeed while offset 2 is blocked; the
    // partition stays blocked since the same moment.
    wait_until(WAIT, "the other keys handled", || async {
        let now = blocked_since().expect("still blocked while other keys succeed");
        let drift = now.duration_since(since).unwrap_or_else(|e| e.duration());
        assert!(
            drift < Duration::from_millis(50),
            "blocked since moved by {drift:?}"
        );
        probe.succeeded() == 30
    })
    .await;
    assert!(
        handled_when_blocked < 30,
        "other keys succeeded after the block ({handled_when_blocked} before)"
    );
    wait_committed(&cluster, &group, &topic, 2).await;
    // More blocked retries later: the commit and k2 still wait.
    let attempts = probe.attempts(2);
    wait_until(WAIT, "two more attempts of offset 2", || async {
        probe.attempts(2) >= attempts + 2
    })
    .await;
    assert!(blocked_since().is_some(), "still blocked");
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![2]);
    assert_eq!(
        probe.started(Some("k2")),
        vec![2],
        "k2 waits behind offset 2"
    );
    assert_eq!(probe.succeeded(), 30);

    failing.store(false, Ordering::SeqCst);
    wait_committed(&cluster, &group, &topic, 40).await;
    wait_until(WAIT, "the partition unblocked", || async {
        blocked_since().is_none()
    })
    .await;
    let summary = run.stop().await;

    probe.assert_key_order(&keys);
    probe.assert_exactly_once(40);
    assert_eq!(summary.records_succeeded, 40);
    assert!(summary.failed_attempts >= 6);
}

/// The look-ahead is bounded by `max_buffered_records`: behind an
/// unfinished record, the worker takes at most that many records past the
/// committed prefix, however many keys are idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn look_ahead_past_an_unfinished_record_is_bounded() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("key-window", 1).await;
    let keys = keys(60, |i| Some(format!("k{i}")));
    produce_keyed(&cluster, &topic, &keys).await;

    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let probe = Arc::new(Probe::default());
    let handler = gated_at(&probe, &gate, 0);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .max_buffered_records(10)
            .processing_order(ProcessingOrder::Key { max_in_flight: 4 }),
    );
    // Offset 0 and the 9 records after it fill the window of 10.
    wait_until(WAIT, "9 records past offset 0 handled", || async {
        probe.succeeded() == 9
    })
    .await;
    let since = Instant::now();
    wait_until(WAIT, "a while with offset 0 unfinished", || async {
        assert_eq!(probe.succeeded(), 9, "taken past the look-ahead bound");
        since.elapsed() >= Duration::from_millis(500)
    })
    .await;
    gate.add_permits(1);
    wait_committed(&cluster, &group, &topic, 60).await;
    run.stop().await;
    probe.assert_exactly_once(60);
    probe.assert_key_order(&keys);
}

/// Records with a null key form one lane: one at a time, in offset order,
/// concurrently with keyed records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_key_records_form_one_sequential_lane() {
    logs::init();
    let keys = keys(40, |i| (i % 2 == 1).then(|| format!("k{i}")));
    let (cluster, topic, group, probe, run) =
        key_ordered("key-null", &keys, Duration::from_millis(10), 8).await;
    wait_committed(&cluster, &group, &topic, 40).await;
    run.stop().await;

    probe.assert_key_order(&keys);
    probe.assert_exactly_once(40);
    assert_eq!(
        probe.started(None),
        (0..40).step_by(2).collect::<Vec<_>>(),
        "null-key records in offset order"
    );
    assert!(probe.0.lock().unwrap().max_running >= 2);
}

/// Shutdown mid-stream (handlers running, records waiting behind busy
/// keys), then a restart in the same group: every record is handled, the
/// first run's commit covers exactly a prefix it completed, the second run
/// starts at that commit, and the group ends committed at the high
/// watermark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_and_restart_lose_nothing() {
    logs::init();
    const N: i64 = 2_000;
    let (cluster, topic, group) = TestCluster::with_topic("key-restart", 1).await;
    // 20 keys for 16 handler slots: records often wait behind a busy key.
    let keys = random_keys(N as usize, 20);
    produce_keyed(&cluster, &topic, &keys).await;
    let order = ProcessingOrder::Key { max_in_flight: 16 };
    let work = |_r: Record| async {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(())
    };

    // 1. Stopped after 500 records.
    let first = Arc::new(Probe::default());
    let run = start(
        cluster
            .consumer(&group, &topic, probed(&first, work))
            .processing_order(order),
    );
    wait_until(WAIT, "500 records handled", || async {
        first.succeeded() >= 500
    })
    .await;
    let summary = run.stop().await;
    assert!(!summary.shutdown_timed_out);
    assert_eq!(
        first.0.lock().unwrap().running,
        0,
        "every handler call ended before the run returned"
    );
    let committed = *summary.committed.get(&tp(&topic)).expect("a commit");
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![committed]);
    let done_first: HashSet<i64> = first.0.lock().unwrap().succeeded.iter().copied().collect();
    assert!(
        (0..committed).all(|o| done_first.contains(&o)),
        "the commit ({committed}) covers only records the first run completed"
    );
    assert!(committed < N, "stopped mid-stream");
    {
        let s = first.0.lock().unwrap();
        assert_eq!(s.same_key_overlaps, 0);
        for offsets in s.started.values() {
            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
        }
    }
    eprintln!(
        "first run: {} handled, committed {committed}",
        done_first.len()
    );

    // 2. Restarted: continues from the commit.
    let second = Arc::new(Probe::default());
    let run = start(
        cluster
            .consumer(&group, &topic, probed(&second, work))
            .processing_order(order),
    );
    wait_committed(&cluster, &group, &topic, N).await;
    run.stop().await;
    assert_eq!(cluster.high_watermarks(&topic, 1).await, vec![N]);
    let s = second.0.lock().unwrap();
    assert_eq!(s.same_key_overlaps, 0);
    assert_eq!(
        s.succeeded.iter().min(),
        Some(&committed),
        "the restart starts at the committed offset"
    );
    let all: HashSet<i64> = done_first.iter().chain(&s.succeeded).copied().collect();
    assert_eq!(all.len() as i64, N, "every record handled");
    // Within the second run each key is in offset order, from the commit on.
    let want = keys[committed as usize..].iter().enumerate().fold(
        HashMap::<Key, Vec<i64>>::new(),
        |mut m, (i, k)| {
            m.entry(k.as_ref().map(|k| k.as_bytes().to_vec()))
                .or_default()
                .push(committed + i as i64);
            m
        },
    );
    for (key, offsets) in want {
        assert_eq!(s.started.get(&key), Some(&offsets));
    }
}

/// The hot-partition workload: one partition, 1,000 keys (in a random
/// order), a 1 ms handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_partition_with_a_thousand_keys() {
    logs::init();
    const N: usize = 5_000;
    let keys = random_keys(N, 1_000);
    let (cluster, topic, group, probe, run) =
        key_ordered("key-hot", &keys, Duration::from_millis(1), 64).await;
    wait_committed(&cluster, &group, &topic, N as i64).await;
    let summary = run.stop().await;

    probe.assert_key_order(&keys);
    probe.assert_exactly_once(N as i64);
    let max = probe.0.lock().unwrap().max_running;
    eprintln!("max concurrency observed: {max}");
    assert!((2..=64).contains(&max), "{max}");
    assert_eq!(summary.records_succeeded, N as u64);
    assert_eq!(summary.committed.get(&tp(&topic)), Some(&(N as i64)));
    assert_eq!(cluster.high_watermarks(&topic, 1).await, vec![N as i64]);
}

#[test]
fn max_in_flight_must_be_at_least_one() {
    let consumer = |order| {
        FreshConsumer::new(|_r: Record| async { Ok::<(), std::io::Error>(()) })
            .bootstrap_servers("localhost:9092")
            .group_id("g")
            .topics(["t"])
            .processing_order(order)
    };
    match consumer(ProcessingOrder::Key { max_in_flight: 0 }).validate() {
        Err(ConfigError::InvalidOption { option, reason }) => {
            assert_eq!(option, "processing_order");
            assert!(reason.contains("max_in_flight"), "{reason}");
        }
        other => panic!("expected an invalid option: {other:?}"),
    }
    for ok in [
        ProcessingOrder::Partition,
        ProcessingOrder::Key { max_in_flight: 1 },
        ProcessingOrder::Key { max_in_flight: 256 },
    ] {
        consumer(ok).validate().expect("valid");
    }
}
