//! Issue 46: the group coordinator killed (`kill -9`) on a three-node
//! Apache Kafka cluster while a `FreshConsumer` commits every 50 ms under
//! `acks=all` producer traffic: every acknowledged record is handled, the
//! group's committed offsets never move backwards (sampled every 100 ms
//! from outside), commits that failed are counted the same in
//! `RunSummary::commit_failures` and `messaging.client.operation.duration`
//! (with `error.type`), and the group commits again through its new
//! coordinator. Prints the time from the kill to the first commit seen
//! from outside after it, and the longest commit (librdkafka holds a
//! synchronous commit until it finds the new coordinator: none failed in
//! the runs measured). With the test kit's 6 s `session.timeout.ms`, about
//! the failover's length, librdkafka may time the session out on its side:
//! the member loses its partitions and rejoins, and the records it handled
//! since its last commit are handled again (duplicates, printed).
//!
//! Needs the cluster `.ci/kafka start --nodes 3` starts (`KAFKA_NODES=3`,
//! `KAFKA_DIR`, `FRESH_CONSUMER_TEST_BOOTSTRAP`); skipped otherwise. The
//! killed node is started again at the end, and the test waits for full
//! ISR.

mod support;

use std::time::{Duration, Instant};

use fresh_consumer::Record;
use fresh_consumer::metrics::{
    CLIENT_OPERATION_DURATION, MESSAGING_CONSUMER_GROUP_NAME, MESSAGING_OPERATION_NAME,
};
use fresh_consumer::testing::TestMetrics;
use support::cluster::{Cluster3, Flow, Handled, Sampler, acked_ends, commit_outcomes, secs};
use support::kafka::unique;
use support::logs;
use support::run::start;
use support::wait::{wait_for, wait_until};

const PARTITIONS: i32 = 3;
/// The group must commit again within this of the kill.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// After that, 300 more records handled within this.
const FLOWING_AGAIN: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_coordinator_killed_loses_nothing_never_rewinds_and_commits_again() {
    logs::init();
    let Some(c) = Cluster3::from_env() else {
        return;
    };
    let _revive = c.revive_on_drop();
    let topic = c.topic("coordinator-kill", PARTITIONS, &[]).await;
    let group = unique("g-coordinator-kill");
    let handled = Handled::default();
    let handler = {
        let handled = handled.clone();
        move |r: Record| {
            let handled = handled.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                handled.push(&r);
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let metrics = TestMetrics::new();
    let run = start(
        c.kafka
            .consumer(&group, &topic, handler)
            .meter_provider(metrics.provider()),
    );
    let flow = Flow::start(c.bootstrap(), &topic);
    let sampler = Sampler::start(&c.kafka, &group, &topic, PARTITIONS);
    wait_until(
        Duration::from_secs(30),
        "records flowing, handled and committed",
        || async {
            flow.count() > 300
                && handled.len() > 300
                && sampler
                    .advanced_after(Instant::now() - Duration::from_secs(5))
                    .is_some()
        },
    )
    .await;

    let victim = c.group_coordinator(&group).await;
    let mut leaders = Vec::new();
    for p in 0..PARTITIONS {
        leaders.push(c.leader(&topic, p).await);
    }
    eprintln!("group coordinator {victim}, partition leaders {leaders:?}: killing node {victim}");
    let killed = Instant::now();
    c.kill(victim).await;
    // The node is dead when `kill` returns: a commit seen from then on
    // went through the new coordinator (one that ended while the kill was
    // under way may have gone through the old one).
    let dead = Instant::now();
    let committed_again = wait_for(
        RECOVERY_LIMIT,
        "the group's committed offsets moving again after the kill",
        || std::future::ready(sampler.advanced_after(dead)),
        |at| at.is_some(),
    )
    .await
    .unwrap();
    let recovered = committed_again.saturating_duration_since(killed);
    let gap = sampler.longest_gap_after(killed - Duration::from_millis(200));
    let coordinator = c.group_coordinator(&group).await;
    eprintln!(
        "the group commits again {} after the kill, through node {coordinator}; \
         longest gap between two offset reads {}",
        secs(recovered),
        secs(gap)
    );
    assert_ne!(coordinator, victim, "a new coordinator");
    let before = handled.len();
    wait_until(
        FLOWING_AGAIN,
        "records flowing after the failover",
        || async { handled.len() > before + 300 },
    )
    .await;

    let resumed = Instant::now();
    c.resume(victim).await;
    c.wait_isr(&[]).await;
    let back = resumed.elapsed();

    let acked = flow.finish().await;
    let high = c.kafka.high_watermarks(&topic, PARTITIONS).await;
    assert_eq!(
        acked_ends(&acked, PARTITIONS),
        high,
        "every record the cluster kept was acknowledged"
    );
    c.kafka
        .wait_committed_showing(&group, &topic, &high, Duration::from_secs(60), &())
        .await;
    let summary = run.stop().await;
    metrics.flush().await.expect("flush the test metrics");
    let outcomes = commit_outcomes(&metrics, &group);
    let longest_commit = metrics
        .histogram(
            CLIENT_OPERATION_DURATION,
            [
                (MESSAGING_CONSUMER_GROUP_NAME, group.as_str()),
                (MESSAGING_OPERATION_NAME, "commit"),
            ],
        )
        .max
        .unwrap_or_default();
    let (samples, backwards) = sampler.finish();
    let (lost, duplicates) = handled.lost_and_duplicates(&acked);
    let total: usize = acked.values().map(Vec::len).sum();
    let failed_in_metrics: u64 = outcomes
        .iter()
        .filter(|(k, _)| k.as_str() != "ok")
        .map(|(_, n)| n)
        .sum();
    eprintln!(
        "COORDINATOR KILLED: {total} records acknowledged, {} lost, {duplicates} duplicates, \
         {} backwards commits in {samples} samples; commits again {} after the kill (node \
         {victim} -> {coordinator}); node {victim} back with full ISR {} after its restart; \
         summary: commits {}, commit failures {}, rebalances {}; commit metrics by error.type \
         {outcomes:?}, longest commit {longest_commit:.1}s",
        lost.len(),
        backwards.len(),
        secs(recovered),
        secs(back),
        summary.commits,
        summary.commit_failures,
        summary.rebalances,
    );
    assert!(lost.is_empty(), "records never handled: {lost:?}");
    assert!(
        backwards.is_empty(),
        "committed offsets moved backwards: {backwards:?}"
    );
    assert!(
        samples >= 20,
        "the sampler read the offsets {samples} times"
    );
    // No commit has to fail: librdkafka keeps a synchronous commit, and
    // retries one whose coordinator died, until it finds the new
    // coordinator (measured: 0 failures, the longest commit ~ the
    // failover). What fails is counted, in both places.
    assert_eq!(
        failed_in_metrics, summary.commit_failures,
        "the metrics count the summary's failed commits: {outcomes:?}"
    );
    assert!(
        outcomes.get("ok").copied().unwrap_or(0) >= 1,
        "commits succeeded: {outcomes:?}"
    );
}
