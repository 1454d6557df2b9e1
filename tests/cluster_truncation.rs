//! Issue 46: a partition's log made shorter than the consumer's position
//! by an unclean leader election, on a three-node Apache Kafka cluster.
//!
//! The partition has two replicas (nodes 1 and 2; node 3 keeps the
//! controller quorum at two of three throughout) and
//! `min.insync.replicas=1`:
//! 1. `OLD` records are written to both replicas and handled;
//! 2. the follower (node 2) is paused (SIGSTOP): fenced, it leaves the ISR;
//!    `GONE` more records are written to the leader alone (`acks=1`), and
//!    handled and committed: the consumer's position is `OLD + GONE`;
//! 3. the leader (node 1) is killed (`kill -9`), the follower resumed
//!    (SIGCONT), `unclean.leader.election.enable=true` set on the topic and
//!    an unclean election run (ElectLeaders UNCLEAN): node 2 leads with
//!    the log ending at `OLD`, below the consumer's position;
//! 4. `NEW` records (more than `GONE`) are written to the new leader, at
//!    offsets `OLD..OLD + NEW`, which reuse the lost records' offsets and go
//!    past the group's committed offset.
//!
//! Kafka 4.3.1 formats with eligible leader replicas on
//! (`eligible.leader.replicas.version=1`, KIP-966): with the follower
//! fenced the ISR is `[1]`; once node 1 is fenced too the ISR is empty and
//! node 1 is the ELR. Setting `unclean.leader.election.enable=true` alone
//! did not elect node 2 within 16 s (measured); ElectLeaders UNCLEAN
//! elected it at once, ELR and all. The cluster keeps ELR on.
//!
//! What the library must do: every new record handled (none skipped
//! silently because its offset is below the old committed offset), and the
//! truncation shown (logged, counted in `fresh_consumer.offset.resets`).
//! Each test prints what happened to each group of records. Two cases: the
//! consumer runs through the truncation, and the group is stopped during
//! it.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::Record;
use fresh_consumer::metrics::{OFFSET_RESET_REASON, OFFSET_RESETS};
use fresh_consumer::testing::TestMetrics;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use support::cluster::{Cluster3, secs};
use support::kafka::unique;
use support::logs;
use support::run::start;
use support::wait::wait_for;

/// The two tests kill, pause and elect on the same nodes: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const OLD: i64 = 100;
const GONE: i64 = 50;
const NEW: i64 = 100;
const LEADER: i32 = 1;
const FOLLOWER: i32 = 2;

/// Every handler call: (offset, payload).
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<(i64, String)>>>);

impl Calls {
    fn push(&self, r: &Record) {
        let payload = String::from_utf8_lossy(r.payload().unwrap_or_default()).into_owned();
        self.0.lock().unwrap().push((r.offset(), payload));
    }

    /// How often each payload with `prefix` was handled.
    fn by_payload(&self, prefix: &str) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (_, p) in self.0.lock().unwrap().iter() {
            if p.starts_with(prefix) {
                *m.entry(p.clone()).or_default() += 1;
            }
        }
        m
    }

    fn distinct(&self, prefix: &str) -> usize {
        self.by_payload(prefix).len()
    }
}

async fn produce(producer: &FutureProducer, topic: &str, prefix: &str, n: i64) -> Vec<i64> {
    let mut futures = Vec::new();
    for i in 0..n {
        let payload = format!("{prefix}-{i}");
        futures.push(
            producer
                .send_result(
                    FutureRecord::<(), _>::to(topic)
                        .partition(0)
                        .payload(&payload),
                )
                .map_err(|(e, _)| e)
                .expect("enqueue"),
        );
    }
    let mut offsets = Vec::new();
    for f in futures {
        offsets.push(
            f.await
                .expect("delivery")
                .map_err(|(e, _)| e)
                .expect("ack")
                .offset,
        );
    }
    offsets
}

fn producer(bootstrap: &str, acks: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", acks)
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", "30000")
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

/// `fresh_consumer.offset.resets` of `topic` by reason.
fn resets(metrics: &TestMetrics) -> BTreeMap<String, u64> {
    metrics
        .metric(OFFSET_RESETS, |m| {
            let mut out = BTreeMap::new();
            if let AggregatedMetrics::U64(MetricData::Sum(s)) = m.data() {
                for p in s.data_points() {
                    let reason = p
                        .attributes()
                        .find(|kv| kv.key.as_str() == OFFSET_RESET_REASON)
                        .map(|kv| kv.value.to_string())
                        .unwrap_or_default();
                    *out.entry(reason).or_default() += p.value();
                }
            }
            out
        })
        .unwrap_or_default()
}

/// What one truncation did to the records.
#[derive(Debug)]
struct Outcome {
    /// Old records (on both replicas) handled again after the truncation.
    old_again: usize,
    /// Records handled, then truncated away with the leader.
    gone_handled: usize,
    /// New records (at the lost records' offsets and past them) never
    /// handled.
    missing: Vec<i64>,
    /// The group's committed offset at the end.
    committed: Vec<i64>,
    /// `fresh_consumer.offset.resets` by reason.
    resets: BTreeMap<String, u64>,
    /// From the new leader's election until the group committed the new
    /// end.
    waited: Duration,
}

/// Steps 1-4 of the module's doc on a topic of its own. With
/// `stopped_during`, the consumer stops after step 2 (its last commit at
/// `OLD + GONE`) and a new one of the same group starts after step 4: the
/// truncation happens while nobody consumes, and the new records already
/// reach past the committed offset when the group comes back.
async fn truncate(c: &Cluster3, stopped_during: bool) -> Outcome {
    let topic = c
        .topic_on(
            "truncation",
            &[LEADER, FOLLOWER],
            &[("min.insync.replicas", "1")],
        )
        .await;
    let group = unique("g-truncation");
    let calls = Calls::default();
    let metrics = TestMetrics::new();
    let consumer = || {
        let calls = calls.clone();
        let handler = move |r: Record| {
            let calls = calls.clone();
            async move {
                calls.push(&r);
                Ok::<(), std::io::Error>(())
            }
        };
        start(
            c.kafka
                .consumer(&group, &topic, handler)
                .meter_provider(metrics.provider()),
        )
    };
    let mut run = Some(consumer());
    assert_eq!(
        c.leader(&topic, 0).await,
        LEADER,
        "the preferred leader leads"
    );

    // 1. On both replicas.
    let all = producer(c.bootstrap(), "all");
    produce(&all, &topic, "old", OLD).await;
    c.kafka.wait_committed(&group, &topic, &[OLD]).await;

    // 2. The follower out of the ISR; records on the leader alone.
    c.pause(FOLLOWER).await;
    let paused = Instant::now();
    wait_for(
        Duration::from_secs(30),
        "the paused follower out of the ISR",
        || c.isr(&topic, 0),
        |isr| isr == &LEADER.to_string(),
    )
    .await;
    eprintln!(
        "node {FOLLOWER} out of the ISR {} after SIGSTOP",
        secs(paused.elapsed())
    );
    let one = producer(c.bootstrap(), "1");
    let gone = produce(&one, &topic, "gone", GONE).await;
    assert_eq!(gone.first(), Some(&OLD), "offsets {gone:?}");
    c.kafka.wait_committed(&group, &topic, &[OLD + GONE]).await;
    if stopped_during {
        let summary = run.take().unwrap().stop().await;
        eprintln!("consumer stopped at {:?}", summary.committed);
    }

    // 3. The leader dies; the stale follower comes back and is elected
    // uncleanly.
    let killed = Instant::now();
    c.kill(LEADER).await;
    c.unpause(FOLLOWER).await;
    wait_for(
        Duration::from_secs(30),
        "the partition without a leader (node 1 fenced)",
        || c.try_leader(&topic, 0),
        |l| l.is_none(),
    )
    .await;
    eprintln!("no leader {} after the kill", secs(killed.elapsed()));
    c.set_topic_configs(
        &topic,
        &[
            ("min.insync.replicas", "1"),
            ("retention.ms", "-1"),
            ("unclean.leader.election.enable", "true"),
        ],
    )
    .await;
    let elected = c.elect_unclean(&topic, 0).await;
    eprintln!("{elected}");
    wait_for(
        Duration::from_secs(30),
        "node 2 leading",
        || c.try_leader(&topic, 0),
        |l| *l == Some(FOLLOWER),
    )
    .await;
    let truncated = Instant::now();
    let (low, high) = c.kafka.watermarks(&topic, 0).await;
    eprintln!(
        "node {FOLLOWER} leads {} after the kill; the log is now {low}..{high} (was 0..{})",
        secs(killed.elapsed()),
        OLD + GONE
    );
    assert_eq!(
        high, OLD,
        "the unclean election truncated the log to the follower's"
    );

    // 4. New records at the lost records' offsets, past the old commit.
    let new = produce(&all, &topic, "new", NEW).await;
    eprintln!(
        "new records at offsets {}..={}",
        new.first().unwrap(),
        new.last().unwrap()
    );
    if run.is_none() {
        run = Some(consumer());
    }
    // The group is done with everything below its committed offset: once
    // it committed the new end, a new record it did not handle was
    // skipped.
    c.kafka
        .wait_committed_showing(
            &group,
            &topic,
            &[OLD + NEW],
            Duration::from_secs(30),
            &calls.distinct("new-"),
        )
        .await;
    let waited = truncated.elapsed();
    let committed = c.kafka.committed(&group, &topic, 1).await;
    c.resume(LEADER).await;
    c.wait_isr(&[&topic]).await;
    let summary = run.take().unwrap().stop().await;
    metrics.flush().await.expect("flush the test metrics");
    let new_handled = calls.by_payload("new-");
    let outcome = Outcome {
        old_again: calls.by_payload("old-").values().map(|n| n - 1).sum(),
        gone_handled: calls.distinct("gone-"),
        missing: (0..NEW)
            .filter(|i| !new_handled.contains_key(&format!("new-{i}")))
            .map(|i| OLD + i)
            .collect(),
        committed,
        resets: resets(&metrics),
        waited,
    };
    eprintln!("{summary:?}");
    outcome
}

fn report(what: &str, o: &Outcome) {
    eprintln!(
        "TRUNCATION ({what}): {OLD} old records, handled again: {}; {GONE} handled then truncated \
         away: {} handled; {NEW} new records at offsets {OLD}..{}: {} never handled {:?} \
         (committed the new end {} after the election); committed after: {:?}; offset resets \
         by reason {:?}",
        o.old_again,
        o.gone_handled,
        OLD + NEW,
        o.missing.len(),
        o.missing,
        secs(o.waited),
        o.committed,
        o.resets,
    );
}

/// The consumer runs through the truncation. librdkafka validates its
/// position against the new leader (the leader epoch of the last record
/// it fetched) and stops the partition. If the new records have not
/// arrived yet, the position is above the new high watermark and the
/// partition restarts by `retention_overrun_policy` (`earliest`: at the
/// log start, so the old records are handled again); if they have, the
/// library finds where the log diverges and restarts there
/// (`log_truncation`). Either way it is counted once, and every new
/// record is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_truncated_below_the_position_while_consuming_loses_no_new_record() {
    logs::init();
    let Some(c) = Cluster3::from_env() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let _revive = c.revive_on_drop();
    let o = truncate(&c, false).await;
    report("consumer running", &o);
    assert!(
        o.missing.is_empty(),
        "new records written after the truncation never handled (skipped silently): {:?}",
        o.missing
    );
    let counted = o.resets.get("above_high_watermark").copied().unwrap_or(0)
        + o.resets.get("log_truncation").copied().unwrap_or(0);
    assert_eq!(counted, 1, "the truncation is counted once: {:?}", o.resets);
    if o.resets.contains_key("log_truncation") {
        assert_eq!(o.old_again, 0, "restarted where the log diverges");
    }
}

/// The group stopped during the truncation (its last commit above the new
/// log end) and back after new records took the lost records' offsets
/// and went past its committed offset. The committed offset is valid
/// again by the watermarks; only the leader epoch committed with it shows
/// the truncation (KIP-320). Before the library committed epochs
/// (measured 2026-12-07) the new member started at the committed offset
/// and skipped 50 of the 100 new records without a log line or a count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_truncated_below_the_committed_offset_while_stopped_loses_no_new_record() {
    logs::init();
    let Some(c) = Cluster3::from_env() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let _revive = c.revive_on_drop();
    let o = truncate(&c, true).await;
    report("consumer stopped during it", &o);
    assert!(
        o.missing.is_empty(),
        "new records written after the truncation never handled (skipped silently): {:?}",
        o.missing
    );
    assert_eq!(
        o.resets.get("log_truncation"),
        Some(&1),
        "the truncation is counted: {:?}",
        o.resets
    );
    assert_eq!(
        o.old_again, 0,
        "restarted where the log diverges, not at the log start"
    );
}
