//! The freeze rules: when frozen commits make a partition `stalled` and a
//! group `stuck` or `dead`, the group's own commit rhythm, and groups the
//! brokers describe with no members.

use super::*;

/// The brokers describe the group with no members: records waiting make
/// it `dead` from its first sample (no history needed), nothing waiting
/// `idle`.
#[test]
fn an_empty_group_with_records_waiting_is_dead_from_its_first_sample() {
    let r = GroupTracker::default().evaluate(
        "g",
        &[
            obs(0, Some(5), 0, 9, at(5, NOW_MS - 3_000)),
            obs(1, Some(7), 0, 7, HeadRead::NotNeeded),
        ],
        Some(0),
        &rules(),
        Instant::now(),
        NOW_MS,
    );
    assert_eq!(r.diagnosis, Diagnosis::Dead);
    assert_eq!(
        r.named,
        vec![TopicPartition {
            topic: "t".into(),
            partition: 0
        }]
    );
    assert!(
        matches!(&r.scaling, Scaling::Withheld { reason } if reason.contains("no members while records wait")),
        "{:?}",
        r.scaling
    );
    let r = GroupTracker::default().evaluate(
        "g",
        &[obs(0, Some(9), 0, 9, HeadRead::NotNeeded)],
        Some(0),
        &rules(),
        Instant::now(),
        NOW_MS,
    );
    assert_eq!(r.diagnosis, Diagnosis::Idle);
}

/// A group that commits every 50 s (auto commit at a long interval) while
/// keeping up: records arrive at 10/s and the time lag stays at most 50 s,
/// under the 60 s threshold. Its commits are frozen for 50 s at a time,
/// longer than `stall_after` (30 s): once the monitor has seen one commit
/// move, it is never `dead` (it was for 20 s of every 50). Before that move
/// the monitor knows nothing of the rhythm: a freeze since its first sample
/// counts against `stall_after` (here 30-40 s, the one window left). When
/// the group really stops, it is `dead` once the freeze outlasts twice its
/// rhythm.
#[test]
fn a_group_with_a_slow_commit_rhythm_is_not_dead_between_its_commits() {
    let rules = Rules {
        window: Duration::from_secs(300),
        stall_after: Duration::from_secs(30),
        lag_threshold: Duration::from_secs(60),
        ..rules()
    };
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let offset = |t: i64| 10 * (t + 1_000);
    // The last commit at or before `t` (every 50 s from -10 s), until the
    // group stops committing at `stop`.
    let last_commit = |t: i64, stop: i64| {
        let t = t.min(stop);
        -10 + (t + 10).div_euclid(50) * 50
    };
    let mut dead_at = None;
    for step in 0..120 {
        let t = step * 5;
        let stop = 400;
        let c = last_commit(t, stop);
        let r = g.evaluate(
            "g",
            &[obs(
                0,
                Some(offset(c)),
                0,
                offset(t),
                at(offset(c), NOW_MS + c * 1000),
            )],
            Some(1),
            &rules,
            t0 + Duration::from_secs(t as u64),
            NOW_MS + t * 1000,
        );
        if (40..stop + 50).contains(&t) {
            assert_ne!(r.diagnosis, Diagnosis::Dead, "at {t} s: {r:#?}");
        } else if t >= stop && r.diagnosis == Diagnosis::Dead && dead_at.is_none() {
            dead_at = Some(t);
        }
    }
    // Stopped after its commit at 390 s, which caught up: records wait
    // from the next cycle (395 s). The cycles bound the rhythm from below
    // at 45 s (the last cycle without a move 45 s after the move), so it is
    // frozen for twice that (90 s) at 485 s.
    assert_eq!(dead_at, Some(485));
}

/// A frozen partition is `stalled` while its log end moves, and no longer
/// once the producer stopped for `stall_after` (5 s): it was `stalled` for
/// as long as it stayed frozen.
#[test]
fn stalled_ends_when_the_producer_stops() {
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut statuses = Vec::new();
    for c in 0..20i64 {
        // Records arrive for 10 s, then stop; the commit stays at 100.
        let end = 200 + 10 * c.min(10);
        let r = g.evaluate(
            "g",
            &[
                obs(0, Some(100), 0, end, at(100, NOW_MS - 3_000)),
                obs(1, Some(50 + c), 0, 50 + c, HeadRead::NotNeeded),
            ],
            Some(1),
            &rules(),
            t0 + Duration::from_secs(c as u64),
            NOW_MS + c * 1000,
        );
        statuses.push(r.partitions[0].status);
    }
    assert_eq!(statuses[8], LagStatus::Stalled, "{statuses:?}");
    assert_eq!(statuses[10], LagStatus::Stalled, "{statuses:?}");
    assert!(
        statuses[16..].iter().all(|s| *s != LagStatus::Stalled),
        "still stalled 6 s after the producer stopped: {statuses:?}"
    );
}

#[test]
fn frozen_everywhere_while_the_log_end_moves_is_dead_from_stall_after() {
    // A killed consumer under steady traffic: commits frozen at 100, 10
    // records a second arriving on every partition, time lag growing with
    // the clock. Every partition with records waiting is frozen and none
    // advances: `dead` as soon as they are frozen (stall_after, 5 s), not
    // `stuck` until the window (10 s) passes.
    // The monitor saw the group commit once (90 at the first cycle, 100
    // from the second): its freezes count from the commits' evidence.
    let f = |c: i64| {
        let committed = if c == 0 { 90 } else { 100 };
        (0..4)
            .map(|p| {
                obs(
                    p,
                    Some(committed),
                    0,
                    200 + 10 * c,
                    at(committed, NOW_MS - 5_000),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let diagnoses: Vec<Diagnosis> = (0..12)
        .map(|c| {
            g.evaluate(
                "g",
                &f(c),
                None,
                &rules(),
                t0 + Duration::from_secs(c as u64),
                NOW_MS + c * 1000,
            )
            .diagnosis
        })
        .collect();
    assert!(
        !diagnoses.contains(&Diagnosis::Stuck),
        "never stuck: {diagnoses:?}"
    );
    let mut g = GroupTracker::default();
    let r = run(&mut g, &rules(), 6, f);
    assert_ne!(r.diagnosis, Diagnosis::Dead, "frozen 4 s < stall_after");
    let r = run(&mut GroupTracker::default(), &rules(), 7, f);
    assert_eq!(r.diagnosis, Diagnosis::Dead, "frozen 5 s >= stall_after");
    assert!(r.partitions.iter().all(|p| p.status == LagStatus::Stalled
        && p.log_end_moved
        && p.waiting_for == Some(Duration::from_secs(5))));
    let r = run(&mut g, &rules(), 12, f);
    assert_eq!(r.diagnosis, Diagnosis::Dead);
    assert_eq!(r.named.len(), 4);
    assert!(matches!(r.scaling, Scaling::Withheld { .. }));
    assert!(r.partitions.iter().all(|p| p.status == LagStatus::Stalled));
}

#[test]
fn frozen_over_a_static_backlog_is_lagging_not_stalled_and_the_group_dead() {
    // Commits frozen at 100 over a backlog that does not grow (a killed
    // consumer after the producers stopped): the record at the committed
    // offset was stamped 25 s before the first cycle, so its time lag
    // crosses the 30 s threshold at cycle 5.
    // The monitor saw one commit move (90, then 100 from the second cycle).
    let f = |c: i64| {
        let committed = if c == 0 { 90 } else { 100 };
        (0..4)
            .map(|p| obs(p, Some(committed), 0, 200, at(committed, NOW_MS - 25_000)))
            .collect::<Vec<_>>()
    };
    let mut g = GroupTracker::default();
    let r = run(&mut g, &rules(), 7, f);
    for p in &r.partitions {
        assert_eq!(p.status, LagStatus::Lagging, "{p:?}");
        assert!(!p.log_end_moved);
        assert_eq!(p.waiting_for, Some(Duration::from_secs(5)));
    }
    assert_ne!(r.diagnosis, Diagnosis::Stuck, "no log end moved");
    assert_eq!(r.diagnosis, Diagnosis::Dead, "dead covers a static backlog");
    let r = run(&mut g, &rules(), 12, f);
    assert_eq!(r.diagnosis, Diagnosis::Dead);
    assert!(r.partitions.iter().all(|p| p.status == LagStatus::Lagging));
}

#[test]
fn partitions_that_stop_a_little_apart_are_dead_never_stuck() {
    // A killed consumer's last commits land a little apart: partition 0
    // stops at cycle 0, partition 1 two cycles later (less than
    // stall_after, 5 s); records keep arriving on both. Partition 0 is
    // stalled from cycle 5 while partition 1's last move is not "after it
    // had been frozen for stall_after": never `stuck`; `dead` once both are
    // frozen.
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut seen = Vec::new();
    for c in 0..12i64 {
        let r = g.evaluate(
            "g",
            &[
                obs(0, Some(100), 0, 200 + 10 * c, at(100, NOW_MS)),
                obs(
                    1,
                    Some(100 + c.min(2)),
                    0,
                    200 + 10 * c,
                    at(100 + c.min(2), NOW_MS),
                ),
            ],
            None,
            &rules(),
            t0 + Duration::from_secs(c as u64),
            NOW_MS + c * 1000,
        );
        seen.push(r.diagnosis);
    }
    assert!(!seen.contains(&Diagnosis::Stuck), "{seen:?}");
    assert_eq!(seen[11], Diagnosis::Dead, "{seen:?}");
}

#[test]
fn one_frozen_partition_beside_advancing_ones_is_stuck_not_dead() {
    // Partition 1 frozen while its log end moves, partition 0 committing
    // every cycle: `stuck` past the window, never `dead`.
    let r = run(&mut GroupTracker::default(), &rules(), 25, |c| {
        vec![
            obs(
                0,
                Some(10 * c),
                0,
                10 * c + 2,
                at(10 * c, NOW_MS + c * 1000),
            ),
            obs(1, Some(7), 0, 9 + 10 * c, at(7, NOW_MS - 1000)),
        ]
    });
    assert_eq!(r.diagnosis, Diagnosis::Stuck);
    assert_eq!(r.named.len(), 1);
}

#[test]
fn records_after_a_long_idle_spell_are_neither_stalled_nor_dead() {
    // Idle (lag 0, commits unchanged) for 30 s, then records arrive and
    // keep arriving: the stall clock starts when they do.
    let mut g = GroupTracker::default();
    let r = run(&mut g, &rules(), 31, |_| {
        vec![obs(0, Some(100), 0, 100, HeadRead::NotNeeded)]
    });
    assert_eq!(r.diagnosis, Diagnosis::Idle);
    let t0 = Instant::now() + Duration::from_secs(31);
    for c in 0..3u64 {
        let r = g.evaluate(
            "g",
            &[obs(0, Some(100), 0, 101 + c as i64, at(100, NOW_MS))],
            None,
            &rules(),
            t0 + Duration::from_secs(c),
            NOW_MS,
        );
        let p = &r.partitions[0];
        assert!(
            p.commit_unchanged_for.unwrap() >= Duration::from_secs(30),
            "{p:?}"
        );
        assert_eq!(p.waiting_for, Some(Duration::from_secs(c)));
        assert_eq!(p.status, LagStatus::Ok, "cycle {c}");
        assert_ne!(r.diagnosis, Diagnosis::Dead, "cycle {c}");
        assert_ne!(r.diagnosis, Diagnosis::Stuck, "cycle {c}");
    }
}

#[test]
fn stuck_names_the_frozen_partition() {
    let r = run(&mut GroupTracker::default(), &rules(), 8, |c| {
        vec![
            obs(
                0,
                Some(10 + 50 * c),
                0,
                12 + 50 * c,
                at(10 + 50 * c, NOW_MS),
            ),
            obs(1, Some(7), 0, 9 + 50 * c, at(7, NOW_MS - 1000)),
            obs(2, Some(10 + 50 * c), 0, 10 + 50 * c, HeadRead::NotNeeded),
        ]
    });
    assert_eq!(r.diagnosis, Diagnosis::Stuck);
    assert_eq!(
        r.named,
        vec![TopicPartition {
            topic: "t".into(),
            partition: 1
        }]
    );
    assert!(matches!(r.scaling, Scaling::Withheld { .. }));
}

/// A group whose commits never moved since the monitor's first sample: the
/// freeze is only known to have lasted since then, so `dead` waits for
/// `window + stall_after` (15 s here; 90 s at `fresh-monitor`'s defaults),
/// not `stall_after`. A group auto-committing every minute that the
/// monitor starts beside read `dead` 30 s in (issue 45, item 6): at
/// `fresh-monitor`'s defaults (window 60 s, `stall_after` 30 s) it is never
/// `dead`, its first commit seen at most a minute and a cycle (8.1 s) in.
#[test]
fn without_a_commit_move_seen_dead_waits_for_the_window_and_stall_after() {
    let f = |c: i64| {
        (0..4)
            .map(|p| obs(p, Some(100), 0, 200 + 10 * c, at(100, NOW_MS - 5_000)))
            .collect::<Vec<_>>()
    };
    let diagnoses: Vec<Diagnosis> = {
        let mut g = GroupTracker::default();
        let t0 = Instant::now();
        (0..17)
            .map(|c| {
                g.evaluate(
                    "g",
                    &f(c),
                    Some(1),
                    &rules(),
                    t0 + Duration::from_secs(c as u64),
                    NOW_MS + c * 1000,
                )
                .diagnosis
            })
            .collect()
    };
    assert!(
        !diagnoses[..15].contains(&Diagnosis::Dead),
        "not before 15 s: {diagnoses:?}"
    );
    assert_eq!(diagnoses[15], Diagnosis::Dead, "{diagnoses:?}");

    // `fresh-monitor`'s defaults; a consumer keeping up (10 records/s) and
    // committing every 60 s, the last commit 1 s before the monitor's first
    // cycle; the monitor's cycles 5 s apart. Never dead.
    let rules = Rules {
        window: Duration::from_secs(60),
        stall_after: Duration::from_secs(30),
        lag_threshold: Duration::from_secs(60),
        ..rules()
    };
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let offset = |t: i64| 10 * (t + 1_000);
    for step in 0..60i64 {
        let t = step * 5;
        let c = -1 + (t + 1).div_euclid(60) * 60;
        let r = g.evaluate(
            "g",
            &[obs(
                0,
                Some(offset(c)),
                0,
                offset(t),
                at(offset(c), NOW_MS + c * 1000),
            )],
            Some(1),
            &rules,
            t0 + Duration::from_secs(t as u64),
            NOW_MS + t * 1000,
        );
        assert_ne!(r.diagnosis, Diagnosis::Dead, "at {t} s: {r:#?}");
    }
}
