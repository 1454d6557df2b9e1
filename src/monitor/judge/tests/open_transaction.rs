//! Records behind an open transaction (issue 45, defect 7): a `read_committed`
//! group that has read everything up to the last stable offset, with the
//! high watermark above it, is `open_transaction` once the last stable
//! offset has stood `stall_after`; the cycle in which such a transaction
//! ends (the last stable offset jumps, old records readable at once) is not
//! `consumer_bound`.

use super::*;
use crate::monitor::reader::observation;

/// Partition `p` under `read_committed`: high watermark `high`, last stable
/// offset `stable`, committed `committed`, the record at the committed
/// offset `age_ms` old when records wait.
fn txn(p: i32, committed: i64, high: i64, stable: i64, age_ms: i64, now_ms: i64) -> Observation {
    let mut o = observation("t", p, (0, high, stable), Some(committed), true);
    if stable > committed {
        o.head = at(committed, now_ms - age_ms);
    }
    o
}

#[test]
fn a_group_caught_up_behind_an_open_transaction_reads_open_transaction() {
    let rules = rules();
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut seen = Vec::new();
    // 279 records of a transaction open above offset 100 on p0; p1 plain.
    // The group has read everything up to the last stable offset.
    for c in 0..8u64 {
        let now_ms = NOW_MS + c as i64 * 1000;
        let r = g.evaluate(
            "g",
            &[
                txn(0, 100, 379, 100, 0, now_ms),
                txn(1, 50, 50, 50, 0, now_ms),
            ],
            Some(1),
            &rules,
            t0 + Duration::from_secs(c),
            now_ms,
        );
        assert_eq!(
            r.total_lag, 0,
            "nothing a read_committed consumer can read waits"
        );
        assert_eq!(
            r.partitions[0].transaction_open_for,
            Some(Duration::from_secs(c)),
            "the last stable offset has stood since the first cycle"
        );
        assert_eq!(r.partitions[1].transaction_open_for, None);
        seen.push(r.diagnosis);
        if c >= 5 {
            assert_eq!(
                r.named,
                vec![TopicPartition {
                    topic: "t".into(),
                    partition: 0
                }]
            );
            let Scaling::Withheld { reason } = &r.scaling else {
                panic!("{:?}", r.scaling)
            };
            assert!(
                reason.starts_with("279 records on 1 partition(s)"),
                "{reason}"
            );
        }
    }
    // Idle until the last stable offset has stood `stall_after` (5 s).
    assert_eq!(&seen[..5], &[Diagnosis::Idle; 5], "{seen:?}");
    assert_eq!(&seen[5..], &[Diagnosis::OpenTransaction; 3], "{seen:?}");

    // The transaction commits: the last stable offset reaches the high
    // watermark; nothing open any more.
    let now_ms = NOW_MS + 8_000;
    let r = g.evaluate(
        "g",
        &[
            txn(0, 379, 379, 379, 0, now_ms),
            txn(1, 50, 50, 50, 0, now_ms),
        ],
        Some(1),
        &rules,
        t0 + Duration::from_secs(8),
        now_ms,
    );
    assert_eq!(r.partitions[0].transaction_open_for, None);
    assert_eq!(r.diagnosis, Diagnosis::Idle);
}

#[test]
fn a_moving_last_stable_offset_is_ordinary_transactional_traffic() {
    // Transactions committing every cycle: the high watermark is above the
    // last stable offset at every read (the next transaction is open), but
    // the last stable offset moves. Never `open_transaction`.
    let rules = rules();
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    for c in 0..12i64 {
        let now_ms = NOW_MS + c * 1000;
        let stable = 100 + c * 10;
        let r = g.evaluate(
            "g",
            &[txn(0, stable, stable + 4, stable, 0, now_ms)],
            Some(1),
            &rules,
            t0 + Duration::from_secs(c as u64),
            now_ms,
        );
        assert_eq!(r.partitions[0].transaction_open_for, Some(Duration::ZERO));
        assert_eq!(r.diagnosis, Diagnosis::Idle, "cycle {c}");
    }
}

#[test]
fn a_group_reading_uncommitted_never_waits_on_a_transaction() {
    let rules = rules();
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut last = None;
    for c in 0..8u64 {
        let now_ms = NOW_MS + c as i64 * 1000;
        let mut o = observation("t", 0, (0, 379, 100), Some(379), false);
        o.head = HeadRead::NotNeeded;
        last = Some(g.evaluate(
            "g",
            &[o],
            Some(1),
            &rules,
            t0 + Duration::from_secs(c),
            now_ms,
        ));
    }
    let r = last.unwrap();
    assert_eq!(r.partitions[0].transaction_open_for, None);
    assert_eq!(r.diagnosis, Diagnosis::Idle);
}

#[test]
fn records_a_long_open_transaction_releases_at_once_are_not_consumer_bound() {
    // Issue 45's case: a transaction hangs for a minute; when it ends, the
    // last stable offset jumps ~400 records of ~60 s-old records on each
    // partition. That cycle read `consumer_bound` (and the scaler served
    // 3 replicas). It reads `keeping_up`; the next cycle judges the
    // consumers on what they did with them.
    let rules = rules();
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let parts = 3;
    for c in 0..10u64 {
        let now_ms = NOW_MS + c as i64 * 1000;
        let obs: Vec<Observation> = (0..parts)
            .map(|p| txn(p, 100, 500, 100, 0, now_ms))
            .collect();
        g.evaluate(
            "g",
            &obs,
            Some(1),
            &rules,
            t0 + Duration::from_secs(c),
            now_ms,
        );
    }
    let now_ms = NOW_MS + 10_000;
    let released: Vec<Observation> = (0..parts)
        .map(|p| txn(p, 100, 500, 500, 60_000, now_ms))
        .collect();
    let r = g.evaluate(
        "g",
        &released,
        Some(1),
        &rules,
        t0 + Duration::from_secs(10),
        now_ms,
    );
    assert_eq!(r.total_lag, 1_200);
    assert!(r.max_time_lag.is_some_and(|t| t >= rules.lag_threshold));
    assert_eq!(r.diagnosis, Diagnosis::KeepingUp, "{r:#?}");
    assert!(
        !matches!(r.scaling, Scaling::Suggest { .. }),
        "{:?}",
        r.scaling
    );

    // Still there a cycle later, nothing drained, commits frozen: judged on
    // the consumers again (no longer explained by the release).
    let now_ms = NOW_MS + 11_000;
    let later: Vec<Observation> = (0..parts)
        .map(|p| txn(p, 100, 500, 500, 61_000, now_ms))
        .collect();
    let r = g.evaluate(
        "g",
        &later,
        Some(1),
        &rules,
        t0 + Duration::from_secs(11),
        now_ms,
    );
    assert_ne!(r.diagnosis, Diagnosis::KeepingUp, "{r:#?}");
}
