//! Judging with the members' assignments (issue 45, item 2): a partition
//! that carries most of its own consumer's backlog is hot, whatever the
//! group-wide shares say.

use super::*;
use crate::monitor::report::PartitionOwner;

fn owner(member: &str) -> Option<PartitionOwner> {
    Some(PartitionOwner {
        member_id: member.into(),
        client_id: format!("client-{member}"),
        host: "/127.0.0.1".into(),
    })
}

/// 6 partitions, consumer `a` owns 0-2 and `b` 3-5; partitions 0 and 3
/// take 47 records/s each (committed at 40/s), the others 1/s. Every
/// partition waits about 89 s (the neighbours behind the hot ones), so no
/// time-lag share stands out, and each hot partition carries half the
/// group's offset lag: below the group-wide `skew_share`.
fn two_hot(owners: bool) -> GroupReport {
    run(&mut GroupTracker::default(), &rules(), 8, |c| {
        (0..6)
            .map(|p| {
                let hot = p == 0 || p == 3;
                let (produced, committed) = if hot { (47, 40) } else { (1, 1) };
                let base = if hot { 3_000 } else { 40 };
                let mut o = obs(
                    p,
                    Some(committed * c),
                    0,
                    base + produced * c,
                    at(
                        committed * c,
                        NOW_MS + c * 1000 - 89_000 + i64::from(p) * 500,
                    ),
                );
                if owners {
                    o.owner = owner(if p < 3 { "a" } else { "b" });
                }
                o
            })
            .collect()
    })
}

#[test]
fn a_hot_partition_on_each_consumer_is_skewed_once_the_owners_are_known() {
    let without = two_hot(false);
    assert_eq!(
        without.diagnosis,
        Diagnosis::ConsumerBound,
        "the group-wide shares cannot see it: {without:#?}"
    );
    let r = two_hot(true);
    assert_eq!(r.diagnosis, Diagnosis::Skewed, "{r:#?}");
    let named: Vec<i32> = r.named.iter().map(|tp| tp.partition).collect();
    assert_eq!(named, vec![0, 3]);
    let Scaling::Withheld { reason } = &r.scaling else {
        panic!("{:?}", r.scaling)
    };
    assert!(
        reason.contains("t-0: ")
            && reason.contains("of the 3 partitions consumer client-a at /127.0.0.1 owns")
            && reason.contains("t-3: "),
        "{reason}"
    );
    assert_eq!(r.partitions[4].owner, owner("b"));
}

#[test]
fn an_evenly_loaded_group_with_known_owners_stays_consumer_bound() {
    let r = run(&mut GroupTracker::default(), &rules(), 4, |c| {
        (0..4)
            .map(|p| {
                let mut o = obs(
                    p,
                    Some(100 * c),
                    0,
                    200 * c + 5000,
                    at(100 * c, NOW_MS - 60_000),
                );
                o.owner = owner(if p < 2 { "a" } else { "b" });
                o
            })
            .collect()
    });
    assert_eq!(r.diagnosis, Diagnosis::ConsumerBound, "{r:#?}");
}

#[test]
fn a_hot_partition_that_keeps_up_is_not_skewed() {
    // Consumer `a`'s partition 0 carries all its backlog and production but
    // is fresh (5 s): not what holds the group back. Consumer `b` is behind
    // evenly on its two (90 s). Consumer-bound, not skewed.
    let r = run(&mut GroupTracker::default(), &rules(), 4, |c| {
        let now = NOW_MS + c * 1000;
        let mut v = vec![
            obs(
                0,
                Some(100 * c),
                0,
                5_000 + 100 * c,
                at(100 * c, now - 5_000),
            ),
            obs(1, Some(c), 0, 40 + c, at(c, now - 5_000)),
            obs(
                2,
                Some(50 * c),
                0,
                5_000 + 100 * c,
                at(50 * c, NOW_MS - 90_000),
            ),
            obs(
                3,
                Some(50 * c),
                0,
                5_000 + 100 * c,
                at(50 * c, NOW_MS - 90_000),
            ),
        ];
        for (i, o) in v.iter_mut().enumerate() {
            o.owner = owner(if i < 2 { "a" } else { "b" });
        }
        v
    });
    assert_eq!(r.diagnosis, Diagnosis::ConsumerBound, "{r:#?}");
}

/// Consumer `a` drains a backlog on partition 0 (records waiting, commits
/// moving) while its partition 1 waits its turn: frozen 8 s (over
/// `stall_after`, 5 s) as records arrive. Consumer `b` keeps up. Without the
/// owners that reads `stuck` (a poison record); with them, partition 1
/// waits behind its neighbour. A partition frozen on a consumer that has
/// nothing else to do is `stuck` either way.
#[test]
fn a_partition_waiting_behind_its_consumers_backlog_is_not_stuck() {
    let frame = |owners: bool, draining: bool| {
        move |c: i64| {
            let now = NOW_MS + c * 1000;
            let p0 = if draining {
                obs(
                    0,
                    Some(100 * c),
                    0,
                    5_000 + 100 * c,
                    at(100 * c, now - 20_000),
                )
            } else {
                obs(0, Some(100 * c), 0, 100 * c, HeadRead::NotNeeded)
            };
            let mut v = vec![
                p0,
                obs(1, Some(50), 0, 60 + 5 * c, at(50, NOW_MS - 20_000)),
                obs(2, Some(10 * c), 0, 10 * c + 1, at(10 * c, now - 100)),
                obs(3, Some(10 * c), 0, 10 * c + 1, at(10 * c, now - 100)),
            ];
            if owners {
                for (i, o) in v.iter_mut().enumerate() {
                    o.owner = owner(if i < 2 { "a" } else { "b" });
                }
            }
            v
        }
    };
    let blind = run(
        &mut GroupTracker::default(),
        &rules(),
        12,
        frame(false, true),
    );
    assert_eq!(blind.diagnosis, Diagnosis::Stuck, "{blind:#?}");
    let seen = run(
        &mut GroupTracker::default(),
        &rules(),
        12,
        frame(true, true),
    );
    assert_ne!(seen.diagnosis, Diagnosis::Stuck, "{seen:#?}");
    assert_eq!(seen.partitions[1].status, LagStatus::Stalled);
    let poison = run(
        &mut GroupTracker::default(),
        &rules(),
        12,
        frame(true, false),
    );
    assert_eq!(poison.diagnosis, Diagnosis::Stuck, "{poison:#?}");
    assert_eq!(poison.named.len(), 1);
    assert_eq!(poison.named[0].partition, 1);
}

/// This library's own consumer handles its partitions concurrently: a
/// poison record blocks partition 1 while partition 0, on the same
/// consumer, keeps up with a few records in flight (offset lag 3, its
/// commit moving). Partition 1 is not waiting behind a larger backlog: it
/// is `stuck` (as `tests/monitor.rs` checks on both brokers).
#[test]
fn a_blocked_partition_beside_a_neighbour_keeping_up_is_stuck() {
    let r = run(&mut GroupTracker::default(), &rules(), 12, |c| {
        let now = NOW_MS + c * 1000;
        let mut v = vec![
            obs(0, Some(20 * c), 0, 20 * c + 3, at(20 * c, now - 150)),
            obs(1, Some(50), 0, 60 + 20 * c, at(50, NOW_MS - 20_000)),
            obs(2, Some(20 * c), 0, 20 * c, HeadRead::NotNeeded),
        ];
        for o in &mut v {
            o.owner = owner("a");
        }
        v
    });
    assert_eq!(r.diagnosis, Diagnosis::Stuck, "{r:#?}");
    assert_eq!(r.named.len(), 1);
    assert_eq!(r.named[0].partition, 1);
}
