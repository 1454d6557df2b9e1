//! Two members of one group hand partitions over while records keep arriving:
//! member A starts alone, member B joins mid-stream, then A leaves. Nothing
//! may be lost, the group's committed offsets may never move backwards (a
//! commit sent for a partition after it was revoked would show up as a
//! rewind), A may never commit a partition after B took it over, and a record
//! may only be handled again when it was not committed yet.
//!
//! Two variants: the classic protocol (eager: every member gives up every
//! partition at each rebalance) and KIP-848 (`group.protocol=consumer`:
//! incremental, only moved partitions are revoked). On the mock broker the
//! classic variant always sees duplicates: the mock refuses OffsetCommit with
//! REBALANCE_IN_PROGRESS while the group is joining (a real broker accepts
//! commits of the current generation then), so the periodic commit and the
//! commit on revoke both fail and the work done since the last commit is
//! redone. Zero duplicates are required only when no commit failed, which is
//! the case in the KIP-848 variant.
//!
//! Runs on the mock broker by default, or on a real cluster through
//! `FRESH_CONSUMER_TEST_BOOTSTRAP` (the KIP-848 variant needs Kafka 4.0 or
//! later there: `FRESH_CONSUMER_TEST_KIP848=0` skips it on an older cluster).

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::{FreshConsumer, Handler, Record, RunSummary, TopicPartition};
use rdkafka::producer::FutureRecord;
use support::kafka::{OffsetReader, TestCluster, unique};
use support::logs;
use support::run::start;
use support::wait::{wait_until, within};
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 6;
const TOTAL: usize = 6_000;
/// The first `GATE` records are produced at once, so A has a backlog (and
/// work in flight) when B joins. The producer then holds until B has started,
/// produces the next `GATE` records at about 1,000 records/s, holds before
/// `2 * GATE` until A was told to leave, and produces the rest at the same
/// pace: each membership change happens while records are still arriving,
/// however slow the machine.
const GATE: usize = TOTAL / 3;
const BATCH: usize = 30;
const BATCH_PAUSE: Duration = Duration::from_millis(30);
/// Time each handler call takes (about 500 records/s per partition), so
/// records are in flight at each revoke.
const HANDLER_DELAY: Duration = Duration::from_millis(2);
/// B joins once A has handled this many records, a quarter of its backlog.
const B_JOINS_AFTER: usize = 500;
/// `0` skips the KIP-848 variant on a real cluster (older than Kafka 4.0).
const KIP848_ENV: &str = "FRESH_CONSUMER_TEST_KIP848";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Member {
    A,
    B,
}

/// One handler call that succeeded.
#[derive(Clone, Copy, Debug)]
struct Handled {
    member: Member,
    partition: i32,
    offset: i64,
    started: Instant,
}

type Log = Arc<Mutex<Vec<Handled>>>;

fn recorder(member: Member, log: &Log) -> impl Handler {
    let log = Arc::clone(log);
    move |r: Record| {
        let log = Arc::clone(&log);
        async move {
            let started = Instant::now();
            tokio::time::sleep(HANDLER_DELAY).await;
            log.lock().unwrap().push(Handled {
                member,
                partition: r.partition(),
                offset: r.offset(),
                started,
            });
            Ok::<(), std::io::Error>(())
        }
    }
}

/// A committed-offset sample: the values the broker answered with, taken
/// when the answer was in (the state it shows is from before `answered`).
struct Sample {
    answered: Instant,
    offsets: Vec<i64>,
}

/// Samples the group's committed offsets every `every` on a thread of its own
/// and records every move backwards.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<Sample>, Vec<String>, usize)>,
}

impl Sampler {
    fn start(reader: OffsetReader, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut samples: Vec<Sample> = Vec::new();
                let mut rewinds = Vec::new();
                let mut errors = 0;
                let mut high: Vec<i64> = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    match reader.committed(Duration::from_secs(5)) {
                        Ok(offsets) => {
                            let answered = Instant::now();
                            if high.is_empty() {
                                high = vec![-1001; offsets.len()];
                            }
                            for (p, (&now, high)) in offsets.iter().zip(high.iter_mut()).enumerate()
                            {
                                if now < *high {
                                    rewinds.push(format!(
                                        "partition {p}: committed offset went back from {high} to {now} (sample {})",
                                        samples.len()
                                    ));
                                }
                                *high = (*high).max(now);
                            }
                            samples.push(Sample { answered, offsets });
                        }
                        Err(_) => errors += 1,
                    }
                    std::thread::sleep(every);
                }
                (samples, rewinds, errors)
            })
        };
        Sampler { stop, thread }
    }

    fn finish(self) -> (Vec<Sample>, Vec<String>, usize) {
        self.stop.store(true, Ordering::Release);
        self.thread.join().expect("sampler thread")
    }
}

#[derive(Clone, Copy, Debug)]
enum Protocol {
    /// The classic protocol (JoinGroup/SyncGroup): an eager rebalance revokes
    /// every partition of every member.
    Classic,
    /// KIP-848 (`group.protocol=consumer`): incremental, only moved
    /// partitions are revoked.
    Consumer,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_with_the_classic_protocol_loses_nothing_and_never_rewinds() {
    handover(Protocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_with_the_consumer_protocol_loses_nothing_and_never_rewinds() {
    if std::env::var_os(support::kafka::BOOTSTRAP_ENV).is_some()
        && std::env::var(KIP848_ENV).is_ok_and(|v| v == "0")
    {
        eprintln!("skipped: {KIP848_ENV}=0 (a cluster older than Kafka 4.0 has no KIP-848)");
        return;
    }
    handover(Protocol::Consumer).await;
}

fn member<H: Handler>(
    cluster: &TestCluster,
    protocol: Protocol,
    group: &str,
    topic: &str,
    handler: H,
) -> FreshConsumer<H> {
    match protocol {
        // A membership change waits session.timeout.ms - 1 s on the mock
        // broker: 3 s keeps each change at about 2 s. (A real broker refuses
        // less than group.min.session.timeout.ms, 6 s by default.)
        Protocol::Classic if !cluster.is_real() => cluster
            .consumer(group, topic, handler)
            .set("session.timeout.ms", "3000")
            .set("heartbeat.interval.ms", "300"),
        Protocol::Classic => cluster.consumer(group, topic, handler),
        Protocol::Consumer => cluster.consumer_kip848(group, topic, handler),
    }
}

async fn handover(protocol: Protocol) {
    logs::init();
    let began = Instant::now();
    let cluster = TestCluster::start();
    if matches!(protocol, Protocol::Consumer) {
        cluster.set_consumer_group_timings(6_000, 200);
    }
    let topic = cluster.topic("rebalance", PARTITIONS).await;
    let group = unique("g-rebalance");
    let sampler = Sampler::start(
        cluster.offset_reader(&group, &topic, PARTITIONS),
        Duration::from_millis(20),
    );

    let log: Log = Arc::default();
    let b_started = CancellationToken::new();
    let a_leaves = CancellationToken::new();

    // The producer: record i goes to partition i % PARTITIONS.
    let producer = {
        let producer = cluster.producer().clone();
        let topic = topic.clone();
        let (b_started, a_leaves) = (b_started.clone(), a_leaves.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while i < TOTAL {
                if i == GATE {
                    b_started.cancelled().await;
                }
                if i == 2 * GATE {
                    a_leaves.cancelled().await;
                }
                let mut acks = Vec::with_capacity(BATCH);
                for _ in 0..BATCH.min(TOTAL - i) {
                    let payload = format!("r{i}");
                    let r = FutureRecord::to(&topic)
                        .partition((i % PARTITIONS as usize) as i32)
                        .key("k")
                        .payload(&payload);
                    acks.push(
                        producer
                            .send_result(r)
                            .map_err(|(e, _)| e)
                            .expect("enqueue"),
                    );
                    i += 1;
                }
                for a in acks {
                    a.await.expect("delivery").map_err(|(e, _)| e).expect("ack");
                }
                if i > GATE {
                    tokio::time::sleep(BATCH_PAUSE).await;
                }
            }
        })
    };

    let count = |m: Member| log.lock().unwrap().iter().filter(|h| h.member == m).count();

    let join = |m: Member| {
        start(member(
            &cluster,
            protocol,
            &group,
            &topic,
            recorder(m, &log),
        ))
    };

    // Member A alone.
    let run_a = join(Member::A);
    wait_until(
        Duration::from_secs(20),
        "A handled its first records",
        || async { count(Member::A) >= B_JOINS_AFTER },
    )
    .await;

    // B joins mid-stream.
    let run_b = join(Member::B);
    b_started.cancel();
    let b_joined_at = Instant::now();
    // Both members work after the rebalance: B handled records, and A handled
    // records that started after B's first one (in an eager rebalance A lost
    // everything and got its share back).
    wait_until(
        Duration::from_secs(30),
        "B and A both consuming",
        || async {
            let log = log.lock().unwrap();
            let Some(b_first) = log
                .iter()
                .filter(|h| h.member == Member::B)
                .map(|h| h.started)
                .min()
            else {
                return false;
            };
            let b_count = log.iter().filter(|h| h.member == Member::B).count();
            let a_after = log
                .iter()
                .filter(|h| h.member == Member::A && h.started > b_first)
                .count();
            b_count >= 300 && a_after >= 100
        },
    )
    .await;
    let both_at = Instant::now();

    // A leaves mid-stream.
    a_leaves.cancel();
    let summary_a = within(Duration::from_secs(20), "A's shutdown", run_a.finish())
        .await
        .expect("A ran without a fatal error");
    let a_left_at = Instant::now();

    tokio::time::timeout(Duration::from_secs(30), producer)
        .await
        .expect("producer finished")
        .unwrap();
    let high = cluster.high_watermarks(&topic, PARTITIONS).await;
    assert_eq!(
        high.iter().sum::<i64>(),
        TOTAL as i64,
        "high watermarks {high:?}"
    );

    // B drains everything and commits it.
    wait_until(
        Duration::from_secs(30),
        "B committed up to the high watermarks",
        || async { cluster.committed(&group, &topic, PARTITIONS).await == high },
    )
    .await;
    let summary_b = within(Duration::from_secs(20), "B's shutdown", run_b.finish())
        .await
        .expect("B ran without a fatal error");
    let committed = cluster.committed(&group, &topic, PARTITIONS).await;
    let (samples, rewinds, sample_errors) = sampler.finish();
    let log = log.lock().unwrap().clone();

    let report = Report::new(&log, &summary_a, &summary_b);
    eprintln!(
        "{protocol:?}: B joined at {:?}, both consuming at {:?}, A left at {:?}, done at {:?}; \
         {} samples ({sample_errors} failed reads); {}",
        b_joined_at - began,
        both_at - began,
        a_left_at - began,
        began.elapsed(),
        samples.len(),
        report.describe()
    );

    // 1. Nothing lost: every produced record was handled by someone.
    let handled: BTreeSet<(i32, i64)> = log.iter().map(|h| (h.partition, h.offset)).collect();
    let missing: Vec<(i32, i64)> = (0..PARTITIONS)
        .flat_map(|p| (0..high[p as usize]).map(move |o| (p, o)))
        .filter(|k| !handled.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} records never handled, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(
        handled.len(),
        TOTAL,
        "handled something that was not produced"
    );

    // 2. The group's final committed offsets are the high watermarks, and B's
    //    summary says it committed them.
    assert_eq!(committed, high, "final committed offsets");
    for p in 0..PARTITIONS {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition: p,
        };
        assert_eq!(
            summary_b.committed.get(&tp),
            Some(&high[p as usize]),
            "B's last commit of partition {p}"
        );
        if let Some(&a) = summary_a.committed.get(&tp) {
            assert!(
                a <= high[p as usize],
                "A committed {a} past the end of partition {p}"
            );
        }
    }

    // 3. The committed offset never went backwards.
    assert!(
        samples.len() >= 20,
        "too few committed-offset samples: {}",
        samples.len()
    );
    assert!(
        rewinds.is_empty(),
        "committed offsets rewound ({} samples below an earlier one), first:\n{}",
        rewinds.len(),
        rewinds[..rewinds.len().min(10)].join("\n")
    );

    // 4. No handler ever ran on a record that was already committed: a record
    //    handled twice was not committed when it was handled again. (Sound:
    //    committed offsets only move forward, and a sample answered before the
    //    handler started saw a state from before it started.)
    let mut high_so_far: Vec<Vec<i64>> = Vec::with_capacity(samples.len());
    let mut running = vec![-1001; PARTITIONS as usize];
    for s in &samples {
        for (r, &o) in running.iter_mut().zip(&s.offsets) {
            *r = (*r).max(o);
        }
        high_so_far.push(running.clone());
    }
    let mut redone = Vec::new();
    for h in &log {
        let before = samples.partition_point(|s| s.answered < h.started);
        if before == 0 {
            continue;
        }
        let c = high_so_far[before - 1][h.partition as usize];
        if h.offset < c {
            redone.push(format!(
                "{:?} handled {}:{} after the group had committed {c}",
                h.member, h.partition, h.offset
            ));
        }
    }
    assert!(
        redone.is_empty(),
        "{} committed records handled again, first:\n{}",
        redone.len(),
        redone[..redone.len().min(10)].join("\n")
    );

    // 4b. A never committed a partition after handing it to B. Partitions
    //     only move from A to B here, and B starts a partition at the
    //     committed offset, so A's last commit of a partition is at or below
    //     the first offset B handled in it. A commit A sent after the revoke
    //     (of work it completed but could not commit in time) lands above it.
    //     Unlike the sampler, this does not depend on catching the moment.
    for p in 0..PARTITIONS {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition: p,
        };
        let b_first = log
            .iter()
            .filter(|h| h.member == Member::B && h.partition == p)
            .map(|h| h.offset)
            .min();
        if let (Some(&a_last), Some(b_first)) = (summary_a.committed.get(&tp), b_first) {
            assert!(
                a_last <= b_first,
                "partition {p}: A's last commit {a_last} is past B's first record {b_first}: \
                 A committed after the partition was revoked"
            );
        }
    }

    // 5. Both members went through rebalances.
    assert!(summary_a.rebalances > 0, "A saw no rebalance");
    assert!(summary_b.rebalances > 0, "B saw no rebalance");
    assert!(!summary_a.shutdown_timed_out && !summary_b.shutdown_timed_out);

    // 6. Duplicates need a reason: when no commit failed and no handler
    //    completed after its partition was revoked, every handover committed
    //    all the work that was done, so no record may have been handled twice.
    let clean = |s: &RunSummary| s.commit_failures == 0 && s.late_completions == 0;
    if clean(&summary_a) && clean(&summary_b) {
        assert_eq!(
            report.duplicates, 0,
            "records handled twice although every commit succeeded: {:?}",
            report.first_duplicates
        );
    }
}

/// What the two members did, for the assertions and the test log.
struct Report {
    per_member: BTreeMap<Member, usize>,
    duplicates: usize,
    same_member_duplicates: usize,
    first_duplicates: Vec<(i32, i64, Vec<Member>)>,
    a: String,
    b: String,
}

impl Report {
    fn new(log: &[Handled], a: &RunSummary, b: &RunSummary) -> Self {
        let mut by_record: HashMap<(i32, i64), Vec<Member>> = HashMap::new();
        let mut per_member = BTreeMap::new();
        for h in log {
            by_record
                .entry((h.partition, h.offset))
                .or_default()
                .push(h.member);
            *per_member.entry(h.member).or_default() += 1;
        }
        let mut dups: Vec<(i32, i64, Vec<Member>)> = by_record
            .into_iter()
            .filter(|(_, m)| m.len() > 1)
            .map(|((p, o), m)| (p, o, m))
            .collect();
        dups.sort();
        let same_member_duplicates = dups
            .iter()
            .filter(|(_, _, m)| m.iter().collect::<BTreeSet<_>>().len() < m.len())
            .count();
        let summary = |s: &RunSummary| {
            format!(
                "received {} succeeded {} commits {} commit_failures {} rebalances {} late {} unassigned {}",
                s.records_received,
                s.records_succeeded,
                s.commits,
                s.commit_failures,
                s.rebalances,
                s.late_completions,
                s.records_unassigned
            )
        };
        Report {
            per_member,
            duplicates: dups.len(),
            same_member_duplicates,
            first_duplicates: dups.iter().take(10).cloned().collect(),
            a: summary(a),
            b: summary(b),
        }
    }

    fn describe(&self) -> String {
        format!(
            "handled {:?}, {} records handled more than once ({} by the same member), first {:?}; A: {}; B: {}",
            self.per_member,
            self.duplicates,
            self.same_member_duplicates,
            self.first_duplicates,
            self.a,
            self.b
        )
    }
}
