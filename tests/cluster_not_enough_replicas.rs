//! Issue 46, bad input: `min.insync.replicas` not met for the library's
//! output and dead-letter producers. The output and dead-letter topics
//! want all three replicas in sync (`min.insync.replicas=3`); one node is
//! killed, so every `acks=all` write to them is refused with
//! `NOT_ENOUGH_REPLICAS`. Meanwhile: no record whose output (or dead
//! letter) was refused is completed, nothing is committed past it, the
//! refused writes are counted (`messaging.client.sent.messages` with
//! `error.type` `NOT_ENOUGH_REPLICAS`), and the consumer's health names
//! the input partitions under-replicated (2 of 3 in sync). When the node
//! is back and in sync, everything recovers by itself: every input
//! committed, each with its output (at least once) and the poison record
//! dead-lettered once.
//!
//! Needs the cluster `.ci/kafka start --nodes 3` starts; skipped otherwise.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fresh_consumer::metrics::{ERROR_TYPE, SENT_MESSAGES};
use fresh_consumer::testing::TestMetrics;
use fresh_consumer::{
    BoxError, OnExhausted, Record,
    failure::{DeadLetter, RetryPolicy},
    health::HealthReason,
    output::{Output, OutputConfig},
    permanent,
};
use support::cluster::{Cluster3, secs};
use support::kafka::unique;
use support::logs;
use support::run::{start, wait_snapshot};
use support::wait::wait_until;

const PARTITIONS: i32 = 2;
/// The node is down at least this long while refused writes are watched.
const DOWN_FOR: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_refused_for_want_of_in_sync_replicas_hold_the_commit_and_recover() {
    logs::init();
    let Some(c) = Cluster3::from_env() else {
        return;
    };
    let _revive = c.revive_on_drop();
    let topic = c.topic("nerepl-in", PARTITIONS, &[]).await;
    let out = c
        .topic("nerepl-out", 1, &[("min.insync.replicas", "3")])
        .await;
    let dlq = c
        .topic("nerepl-dlq", 1, &[("min.insync.replicas", "3")])
        .await;
    let group = unique("g-nerepl");
    let handler = {
        let out = out.clone();
        move |r: Record| {
            let out = out.clone();
            async move {
                if r.key() == Some(b"poison".as_slice()) {
                    return Err::<(), BoxError>(permanent("poison"));
                }
                fresh_consumer::output::outputs()?
                    .send(Output::to(&out).key(format!("{}/{}", r.partition(), r.offset())))
                    .await?;
                Ok(())
            }
        }
    };
    let metrics = TestMetrics::new();
    let run = start(
        c.kafka
            .consumer(&group, &topic, handler)
            .retry(
                // A record whose output is refused retries in place until
                // the node is back (a permanent error goes to the
                // dead-letter topic at once).
                RetryPolicy::default()
                    .max_attempts(1_000)
                    .backoff(Duration::from_millis(200), Duration::from_secs(1)),
            )
            .on_exhausted(OnExhausted::DeadLetter(
                DeadLetter::new()
                    .topic(&dlq)
                    .producer_property("message.timeout.ms", "2000"),
            ))
            .outputs(OutputConfig::new().producer_property("message.timeout.ms", "2000"))
            .meter_provider(metrics.provider()),
    );
    for p in 0..PARTITIONS {
        for i in 0..5 {
            c.kafka
                .produce(&topic, p, &format!("k{i}"), "x", None)
                .await;
        }
    }
    c.kafka.wait_committed(&group, &topic, &[5, 5]).await;

    // A node down: two replicas in sync of the three the output and
    // dead-letter topics want.
    // Not the output partition's leader: its writes are refused, not
    // moved (a leader's failover is tests/cluster_leader_killed.rs).
    let victim = c.leader(&out, 0).await % 3 + 1;
    c.kill(victim).await;
    let killed = Instant::now();
    wait_until(Duration::from_secs(30), "the ISR shrunk to 2", || async {
        c.isr(&out, 0).await.split(',').count() == 2
    })
    .await;
    eprintln!(
        "node {victim} killed; output ISR {} after {}",
        c.isr(&out, 0).await,
        secs(killed.elapsed())
    );
    // Partition 0: records with outputs; partition 1: a poison record
    // (dead-lettered after its attempts) and one behind it.
    for i in 5..10 {
        c.kafka
            .produce(&topic, 0, &format!("k{i}"), "x", None)
            .await;
    }
    c.kafka.produce(&topic, 1, "poison", "x", None).await;
    c.kafka.produce(&topic, 1, "k6", "x", None).await;
    let s = wait_snapshot(&run.health, Duration::from_secs(30), "the input partitions under-replicated", |s| {
        (0..PARTITIONS).all(|p| {
            s.partition(&topic, p).is_some_and(|r| {
                r.reasons.iter().any(|x| {
                    matches!(x, HealthReason::UnderReplicated(r) if (r.replicas, r.in_sync) == (3, 2))
                })
            })
        })
    })
    .await;
    eprintln!("health while the node is down:\n{s}");
    // Refused writes counted, the commit held at the first refused record.
    // librdkafka retries a write refused with NOT_ENOUGH_REPLICAS until
    // its message.timeout.ms, then fails it as timed out.
    let refused = || async {
        metrics.flush().await.expect("flush the test metrics");
        ["NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT"]
            .iter()
            .map(|e| metrics.counter_total(SENT_MESSAGES, [(ERROR_TYPE, *e)]))
            .sum::<f64>()
    };
    wait_until(
        Duration::from_secs(30),
        "refused writes counted",
        || async { refused().await >= 2.0 },
    )
    .await;
    let held_from = Instant::now();
    while held_from.elapsed() < DOWN_FOR {
        let committed = c.kafka.committed(&group, &topic, PARTITIONS).await;
        assert_eq!(committed, [5, 5], "nothing committed past a refused write");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let refused_down = refused().await;

    let resumed = Instant::now();
    c.resume(victim).await;
    c.wait_isr(&[&topic, &out, &dlq]).await;
    c.kafka
        .wait_committed_showing(&group, &topic, &[10, 7], Duration::from_secs(60), &())
        .await;
    let recovered = resumed.elapsed();
    let summary = run.stop().await;
    let outputs = support::cluster::read_committed(c.bootstrap(), &out, 1);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for k in &outputs {
        *counts.entry(k.clone()).or_default() += 1;
    }
    let dead = support::cluster::read_committed(c.bootstrap(), &dlq, 1);
    eprintln!(
        "NOT_ENOUGH_REPLICAS: {refused_down} refused writes counted while node {victim} was down, \
         commits held at [5, 5]; recovered (every input committed) {} after the node's restart; \
         {} outputs for 16 inputs with one, {} dead letters; {summary:?}",
        secs(recovered),
        outputs.len(),
        dead.len()
    );
    let missing: Vec<String> = (0..10)
        .map(|o| format!("0/{o}"))
        .chain((0..5).chain(6..7).map(|o| format!("1/{o}")))
        .filter(|k| !counts.contains_key(k))
        .collect();
    assert!(missing.is_empty(), "inputs without an output: {missing:?}");
    assert_eq!(
        dead.len(),
        1,
        "the poison record dead-lettered once: {dead:?}"
    );
}
