//! A consumer process killed with SIGKILL mid-stream, then restarted: nothing
//! is lost, the dead process had committed nothing it had not handled, and
//! the restarted one redoes only records that were not committed.
//!
//! The test binary re-executes itself: `child_consumer` acts as the consumer
//! process when `FRESH_CHILD_BOOTSTRAP` is set (and passes as a no-op
//! otherwise). The child runs a `FreshConsumer` against the parent's cluster
//! (the mock broker listens on loopback TCP, reachable from another process)
//! and appends `partition offset` lines to a file as its handler succeeds. It
//! stops gracefully when its stdin closes.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::child::{self, ChildProcess};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::wait::wait_until;

const CHILD_OUT: &str = "FRESH_CHILD_OUT";
const CHILD_DELAY_MS: &str = "FRESH_CHILD_DELAY_MS";

const PARTITIONS: i32 = 3;
const PER_PARTITION: usize = 1_000;
/// The first child's time per record: about 1 s per 330 records and
/// partition, so the kill lands early in the stream.
const SLOW_MS: u64 = 3;
/// Lines the first child must have written before it is killed.
const KILL_AFTER_LINES: usize = 600;

/// The consumer process. A no-op unless started by `killed_mid_stream_and_restarted`.
#[test]
fn child_consumer() {
    let Some(target) = child::target() else {
        return;
    };
    let out = child::var(CHILD_OUT);
    let delay = Duration::from_millis(child::var(CHILD_DELAY_MS).parse().expect("delay in ms"));
    logs::init();

    let handler = child::line_writer(&out, delay);
    let summary =
        child::block_on(child::consumer(handler, &target).run_until(child::stdin_closed()))
            .expect("the child consumer ran without a fatal error");
    eprintln!("child summary: {summary:?}");
}

/// A child consumer process and the file of `partition offset` lines it
/// writes as its handler succeeds.
struct ChildConsumer {
    process: ChildProcess,
    out: PathBuf,
}

impl ChildConsumer {
    fn spawn(
        name: &str,
        dir: &Path,
        cluster: &TestCluster,
        group: &str,
        topic: &str,
        delay_ms: u64,
    ) -> Self {
        let out = dir.join(format!("{name}.out"));
        let mut command = child::command("child_consumer", cluster, group, topic);
        command
            .env(CHILD_OUT, &out)
            .env(CHILD_DELAY_MS, delay_ms.to_string());
        ChildConsumer {
            process: ChildProcess::spawn(name, dir, command),
            out,
        }
    }

    fn lines(&self) -> usize {
        std::fs::read(&self.out)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0)
    }

    /// Every complete `partition offset` line, in file order.
    fn handled(&self) -> Vec<(i32, i64)> {
        child::handled_lines(&self.out)
    }
}

impl Drop for ChildConsumer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {}: {} lines of output",
                self.process.name,
                self.lines()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_stream_and_restarted() {
    logs::init();
    let began = Instant::now();
    let (cluster, topic, group) = TestCluster::with_topic("crash", PARTITIONS).await;
    cluster
        .produce_many(&topic, PARTITIONS, PER_PARTITION)
        .await;
    let high = cluster.high_watermarks(&topic, PARTITIONS).await;
    assert_eq!(high, vec![PER_PARTITION as i64; PARTITIONS as usize]);
    let dir = std::env::temp_dir().join(unique("fresh-crash"));
    std::fs::create_dir_all(&dir).expect("temp dir");

    // 1. The first process, slow, killed mid-stream.
    let mut first = ChildConsumer::spawn("child-1", &dir, &cluster, &group, &topic, SLOW_MS);
    wait_until(
        Duration::from_secs(20),
        "the first child handled some hundreds of records",
        || {
            first.process.assert_running();
            let n = first.lines();
            async move { n >= KILL_AFTER_LINES }
        },
    )
    .await;
    first.process.kill();
    let killed_at = began.elapsed();
    // Read after the kill: the dead process commits nothing more, so this is
    // the tightest sound bound. (A commit it had already written to its
    // socket may still land, moving the offset further forward: the bound
    // then errs on the safe side, since committed offsets only grow.)
    let at_kill = cluster.committed(&group, &topic, PARTITIONS).await;
    let handled_1 = first.handled();
    let seen_1: BTreeSet<(i32, i64)> = handled_1.iter().copied().collect();
    eprintln!(
        "killed after {killed_at:?}: {} lines, committed {at_kill:?}",
        handled_1.len()
    );
    // Commit only past handled work, even at a crash: everything below the
    // committed offset was handled by the dead process.
    for p in 0..PARTITIONS {
        let unhandled: Vec<i64> = (0..at_kill[p as usize])
            .filter(|&o| !seen_1.contains(&(p, o)))
            .collect();
        assert!(
            unhandled.is_empty(),
            "partition {p}: committed {} but offsets {:?} were never handled",
            at_kill[p as usize],
            &unhandled[..unhandled.len().min(10)]
        );
    }
    // The kill landed mid-stream, after some commits (else the test proves
    // little).
    assert!(
        at_kill.iter().all(|&c| c > 0),
        "the first child committed nothing on some partition before the kill: {at_kill:?}"
    );
    assert!(
        at_kill.iter().zip(&high).any(|(c, h)| c < h),
        "the kill did not land mid-stream: committed {at_kill:?}"
    );
    // 2. The restarted process, fast, runs until everything was handled.
    let mut second = ChildConsumer::spawn("child-2", &dir, &cluster, &group, &topic, 0);
    let all: BTreeSet<(i32, i64)> = (0..PARTITIONS)
        .flat_map(|p| (0..high[p as usize]).map(move |o| (p, o)))
        .collect();
    wait_until(
        Duration::from_secs(30),
        "every record handled by one child or the other",
        || {
            second.process.assert_running();
            let seen: BTreeSet<(i32, i64)> = second.handled().into_iter().collect();
            let done = all.iter().all(|k| seen_1.contains(k) || seen.contains(k));
            async move { done }
        },
    )
    .await;
    // Close its stdin: it shuts down gracefully, committing what it did.
    let status = second.process.stop().await;
    assert!(
        status.success(),
        "the second child failed ({status}):\n{}",
        second.process.log_text()
    );
    let handled_2 = second.handled();
    let committed = cluster.committed(&group, &topic, PARTITIONS).await;

    // Every record handled at least once.
    let mut times: BTreeMap<(i32, i64), (u32, u32)> = BTreeMap::new();
    for k in &handled_1 {
        times.entry(*k).or_default().0 += 1;
    }
    for k in &handled_2 {
        times.entry(*k).or_default().1 += 1;
    }
    let missing: Vec<&(i32, i64)> = all.iter().filter(|k| !times.contains_key(k)).collect();
    assert!(
        missing.is_empty(),
        "never handled: {:?}",
        &missing[..missing.len().min(10)]
    );
    assert_eq!(
        times.len(),
        all.len(),
        "handled records that were never produced"
    );

    // Duplicates only among records that were not committed at the kill.
    let duplicates: Vec<((i32, i64), (u32, u32))> = times
        .iter()
        .filter(|(_, (a, b))| a + b > 1)
        .map(|(k, v)| (*k, *v))
        .collect();
    let bad: Vec<_> = duplicates
        .iter()
        .filter(|((p, o), _)| *o < at_kill[*p as usize])
        .collect();
    assert!(
        bad.is_empty(),
        "records committed before the kill were handled again: {:?}",
        &bad[..bad.len().min(10)]
    );
    // The restarted process started at the committed offsets: it redid no
    // committed work at all.
    for p in 0..PARTITIONS {
        let first_2 = handled_2
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, o)| *o)
            .min();
        if let Some(first_2) = first_2 {
            assert!(
                first_2 >= at_kill[p as usize],
                "partition {p}: the second child started at {first_2}, below the committed {}",
                at_kill[p as usize]
            );
        }
    }

    // The final committed offsets are the high watermarks.
    assert_eq!(committed, high, "final committed offsets");
    eprintln!(
        "done after {:?}: child 1 handled {}, child 2 handled {}, {} duplicates (all at or above \
         the committed offsets at the kill {at_kill:?}; child 1's last handled per partition {:?})",
        began.elapsed(),
        handled_1.len(),
        handled_2.len(),
        duplicates.len(),
        (0..PARTITIONS)
            .map(|p| handled_1
                .iter()
                .filter(|(q, _)| *q == p)
                .map(|(_, o)| *o)
                .max())
            .collect::<Vec<_>>()
    );
    drop(first);
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
