//! Issue 46: the leader of a consumed partition killed (`kill -9`) on a
//! three-node Apache Kafka cluster while a producer writes with `acks=all`
//! (`min.insync.replicas=2`) and a `FreshConsumer` consumes: every
//! acknowledged record is handled, the group's committed offsets never move
//! backwards (sampled every 100 ms from outside), and the partition is
//! consumed again from its new leader. Prints the time from the kill to
//! the new leader in the metadata and to the first record handled from it.
//!
//! Needs the cluster `.ci/kafka start --nodes 3` starts (`KAFKA_NODES=3`,
//! `KAFKA_DIR`, `FRESH_CONSUMER_TEST_BOOTSTRAP`); skipped otherwise. The
//! killed node is started again at the end, and the test waits for full
//! ISR, so the cluster is whole for the next test.

mod support;

use std::time::{Duration, Instant};

use fresh_consumer::Record;
use support::cluster::{Cluster3, Flow, Handled, Sampler, acked_ends, secs};
use support::kafka::unique;
use support::logs;
use support::run::start;
use support::wait::{wait_for, wait_until};

const PARTITIONS: i32 = 3;
/// The failover must be over, and the partition consumed again, within
/// this of the kill (measured: about 5 s; `broker.session.timeout.ms` is
/// 3 s, and a new controller first gives every broker a new session).
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_of_a_consumed_partition_killed_loses_nothing_and_never_rewinds() {
    logs::init();
    let Some(c) = Cluster3::from_env() else {
        return;
    };
    let _revive = c.revive_on_drop();
    let topic = c.topic("leader-kill", PARTITIONS, &[]).await;
    let group = unique("g-leader-kill");
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
    let run = start(c.kafka.consumer(&group, &topic, handler));
    let flow = Flow::start(c.bootstrap(), &topic);
    let sampler = Sampler::start(&c.kafka, &group, &topic, PARTITIONS);
    wait_until(
        Duration::from_secs(30),
        "records flowing and handled",
        || async { flow.count() > 300 && handled.len() > 300 },
    )
    .await;

    // The leader of a partition that is not the group coordinator's too,
    // when there is one: this test is about the partition, the coordinator
    // has tests/cluster_coordinator_killed.rs.
    let coordinator = c.group_coordinator(&group).await;
    let mut leaders = Vec::new();
    for p in 0..PARTITIONS {
        leaders.push(c.leader(&topic, p).await);
    }
    let partition = (0..PARTITIONS)
        .find(|p| leaders[*p as usize] != coordinator)
        .unwrap_or(0);
    let victim = leaders[partition as usize];
    eprintln!(
        "leaders {leaders:?}, group coordinator {coordinator}: killing node {victim}, leader of partition {partition}"
    );

    let killed = Instant::now();
    c.kill(victim).await;
    // The node is dead when `kill` returns: a record acknowledged from now
    // on was written through the new leader.
    let dead = Instant::now();
    let acked_at_kill = flow.acked_end(partition);
    let new_leader = wait_for(
        RECOVERY_LIMIT,
        "a new leader in the metadata",
        || c.try_leader(&topic, partition),
        |l| l.is_some_and(|l| l != victim),
    )
    .await
    .unwrap();
    let leader_after = killed.elapsed();
    eprintln!(
        "node {new_leader} leads partition {partition} {} after the kill (isr {})",
        secs(leader_after),
        c.isr(&topic, partition).await
    );
    let first = wait_for(
        RECOVERY_LIMIT,
        "a record of the partition written after the kill handled",
        || std::future::ready(handled.first_at_or_above(partition, acked_at_kill, dead)),
        |at| at.is_some(),
    )
    .await
    .unwrap();
    let consumed_after = first.saturating_duration_since(killed);
    eprintln!(
        "first record from the new leader (offset >= {acked_at_kill}) handled {} after the kill",
        secs(consumed_after)
    );
    let before = handled.len();
    wait_until(
        Duration::from_secs(60),
        "records flowing after the failover",
        || async { handled.len() > before + 300 },
    )
    .await;

    // The node back, all replicas in sync, while the flow goes on.
    let resumed = Instant::now();
    c.resume(victim).await;
    c.wait_isr(&[&topic]).await;
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
    let (samples, backwards) = sampler.finish();
    let (lost, duplicates) = handled.lost_and_duplicates(&acked);
    let total: usize = acked.values().map(Vec::len).sum();
    eprintln!(
        "LEADER KILLED: {total} records acknowledged, {} lost, {duplicates} duplicates, \
         {} backwards commits in {samples} samples; new leader in the metadata {} after the kill, \
         first record from it handled {} after the kill; node {victim} back with full ISR {} after \
         its restart; commits {}, commit failures {}, rebalances {}",
        lost.len(),
        backwards.len(),
        secs(leader_after),
        secs(consumed_after),
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
    assert!(
        consumed_after <= RECOVERY_LIMIT,
        "consumed again {consumed_after:?} after the kill"
    );
}
