use super::*;

const WINDOW: Duration = Duration::from_secs(10);

fn rules() -> Rules {
    Rules {
        window: WINDOW,
        stall_after: Duration::from_secs(5),
        lag_threshold: Duration::from_secs(30),
        skew_share: 0.75,
        drain_target: Duration::from_secs(60),
        current_replicas: Some(2),
    }
}

fn obs(p: i32, committed: Option<i64>, start: i64, end: i64, head: HeadRead) -> Observation {
    Observation {
        topic: "t".into(),
        partition: p,
        committed,
        log_start: start,
        high_watermark: end,
        last_stable: end,
        end,
        head,
        owner: None,
        replication: None,
    }
}

fn at(offset: i64, ms: i64) -> HeadRead {
    HeadRead::Read {
        offset,
        timestamp: RecordTimestamp::CreateTime(ms),
    }
}

const NOW_MS: i64 = 1_700_000_000_000;

#[test]
fn time_lag_is_now_minus_the_timestamp_and_zero_without_lag() {
    let mut g = GroupTracker::default();
    let now = Instant::now();
    let r = g.evaluate(
        "g",
        &[
            obs(0, Some(10), 0, 20, at(10, NOW_MS - 42_000)),
            obs(1, Some(5), 0, 5, HeadRead::NotNeeded),
            obs(2, None, 0, 5, HeadRead::NotNeeded),
        ],
        None,
        &rules(),
        now,
        NOW_MS,
    );
    let p = &r.partitions;
    assert_eq!(p[0].time_lag, Some(Duration::from_secs(42)));
    assert_eq!(p[0].timestamp, HeadTimestamp::CreateTime(NOW_MS - 42_000));
    assert_eq!(p[0].status, LagStatus::Lagging);
    assert_eq!(p[0].offset_lag, Some(10));
    assert_eq!(p[1].time_lag, Some(Duration::ZERO));
    assert_eq!(p[1].status, LagStatus::Ok);
    assert_eq!(p[2].time_lag, None);
    assert_eq!(p[2].status, LagStatus::NoCommittedOffset);
    assert_eq!(r.total_lag, 10);
}

#[test]
fn missing_and_future_timestamps_count_once_per_record() {
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let missing = HeadRead::Read {
        offset: 3,
        timestamp: RecordTimestamp::CreateTime(-1),
    };
    for i in 0..3 {
        let r = g.evaluate(
            "g",
            &[
                obs(0, Some(3), 0, 9, missing),
                obs(1, Some(7), 0, 9, at(7, NOW_MS + 60_000)),
            ],
            None,
            &rules(),
            t0 + Duration::from_secs(i),
            NOW_MS,
        );
        assert_eq!(r.partitions[0].time_lag, None);
        assert_eq!(r.partitions[0].timestamp, HeadTimestamp::Missing);
        assert_eq!(r.partitions[1].time_lag, Some(Duration::ZERO));
        assert_eq!((r.timestamps_missing, r.timestamps_future), (1, 1));
    }
    let r = g.evaluate(
        "g",
        &[
            obs(
                0,
                Some(4),
                0,
                9,
                HeadRead::Read {
                    offset: 4,
                    timestamp: RecordTimestamp::NotAvailable,
                },
            ),
            obs(1, Some(7), 0, 9, at(7, NOW_MS + 60_000)),
        ],
        None,
        &rules(),
        t0 + Duration::from_secs(4),
        NOW_MS,
    );
    assert_eq!((r.timestamps_missing, r.timestamps_future), (2, 1));
}

#[test]
fn out_of_range_counts_deleted_records_and_the_margin_shrinks_before() {
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    // The log start moves 100 records/s toward a frozen committed offset at 1000.
    let mut etas = Vec::new();
    for s in 0..5i64 {
        let r = g.evaluate(
            "g",
            &[obs(0, Some(1000), s * 100, 5000, at(1000, NOW_MS - 1000))],
            None,
            &rules(),
            t0 + Duration::from_secs(s as u64),
            NOW_MS,
        );
        let p = &r.partitions[0];
        assert_eq!(p.retention_margin, Some(1000 - s * 100));
        if s > 0 {
            etas.push(p.retention_eta.expect("an eta once the log start moved"));
        }
    }
    assert!((etas[0].as_secs_f64() - 9.0).abs() < 0.01, "{etas:?}");
    assert!(etas.windows(2).all(|w| w[1] < w[0]), "{etas:?}");
    let r = g.evaluate(
        "g",
        &[obs(0, Some(1000), 1300, 5000, at(1300, NOW_MS - 1000))],
        None,
        &rules(),
        t0 + Duration::from_secs(6),
        NOW_MS,
    );
    let p = &r.partitions[0];
    assert_eq!(p.status, LagStatus::OutOfRange { deleted: 300 });
    assert_eq!(p.retention_margin, Some(-300));
    assert_eq!(p.retention_eta, None);
}

/// Runs `cycles` one second apart; `f(cycle)` gives the observations.
fn run(
    g: &mut GroupTracker,
    rules: &Rules,
    cycles: u64,
    f: impl Fn(i64) -> Vec<Observation>,
) -> GroupReport {
    let t0 = Instant::now();
    let mut last = None;
    for c in 0..cycles {
        last = Some(g.evaluate(
            "g",
            &f(c as i64),
            None,
            rules,
            t0 + Duration::from_secs(c),
            NOW_MS + c as i64 * 1000,
        ));
    }
    last.unwrap()
}

#[test]
fn idle_and_no_offsets() {
    let r = run(&mut GroupTracker::default(), &rules(), 2, |_| {
        vec![obs(0, Some(5), 0, 5, HeadRead::NotNeeded)]
    });
    assert_eq!(r.diagnosis, Diagnosis::Idle);
    let r = run(&mut GroupTracker::default(), &rules(), 2, |_| {
        vec![obs(0, None, 0, 5, HeadRead::NotNeeded)]
    });
    assert_eq!(r.diagnosis, Diagnosis::NoOffsets);
}

#[test]
fn records_waiting_with_an_unknown_time_lag_are_never_ok() {
    // The record at the committed offset has no timestamp (the demo's
    // partition 2), or was not read in time: the time lag is unknown, not
    // zero, and the status says so.
    let missing = HeadRead::Read {
        offset: 5,
        timestamp: RecordTimestamp::NotAvailable,
    };
    for head in [missing, HeadRead::Unread] {
        let r = run(&mut GroupTracker::default(), &rules(), 3, |c| {
            vec![
                obs(0, Some(5 + c), 0, 20 + c, head),
                obs(1, Some(10 + c), 0, 10 + c, HeadRead::NotNeeded),
            ]
        });
        let p = &r.partitions[0];
        assert_eq!(p.offset_lag, Some(15), "{head:?}");
        assert_eq!(p.time_lag, None, "{head:?}");
        assert_eq!(p.status, LagStatus::TimeLagUnknown, "{head:?}");
        assert_eq!(r.partitions[1].status, LagStatus::Ok);
        assert_eq!(r.max_time_lag, Some(Duration::ZERO));
    }
}

#[test]
fn transaction_markers_the_probe_read_past_are_not_lag() {
    // The committed offset sits before the last commit marker of an idle
    // transactional partition; the probe reached the end without a
    // record: caught up and idle, however long (it read `dead` before).
    let r = run(&mut GroupTracker::default(), &rules(), 30, |_| {
        vec![obs(0, Some(100), 0, 101, HeadRead::NothingReadable)]
    });
    let p = &r.partitions[0];
    assert_eq!(
        (p.status, p.offset_lag, p.time_lag),
        (LagStatus::Ok, Some(0), Some(Duration::ZERO))
    );
    assert_eq!(p.timestamp, HeadTimestamp::CaughtUp);
    assert_eq!(r.diagnosis, Diagnosis::Idle);
}

#[test]
fn lag_counts_to_the_last_stable_offset_under_read_committed() {
    use crate::monitor::reader::observation;
    // 10 committed records, 5 of an open transaction above them; the
    // group committed 10.
    let marks = (0, 15, 10);
    let o = observation("t", 0, marks, Some(10), true);
    assert_eq!((o.end, o.high_watermark, o.last_stable), (10, 15, 10));
    let r = GroupTracker::default().evaluate("g", &[o], None, &rules(), Instant::now(), NOW_MS);
    let p = &r.partitions[0];
    assert_eq!(p.offset_lag, Some(0), "nothing readable waits");
    assert_eq!(p.time_lag, Some(Duration::ZERO));
    assert_eq!(p.timestamp, HeadTimestamp::CaughtUp);
    assert_eq!((p.high_watermark, p.last_stable), (15, 10));
    assert_eq!(r.diagnosis, Diagnosis::Idle);

    // read_uncommitted: the open transaction's records wait.
    let o = observation("t", 0, marks, Some(10), false);
    assert_eq!(o.end, 15);
    let o = Observation {
        head: at(10, NOW_MS - 2_000),
        ..o
    };
    let r = GroupTracker::default().evaluate("g", &[o], None, &rules(), Instant::now(), NOW_MS);
    let p = &r.partitions[0];
    assert_eq!(p.offset_lag, Some(5));
    assert_eq!(p.time_lag, Some(Duration::from_secs(2)));
    assert_eq!(r.total_lag, 5);

    // read_committed with 3 records committed above the group's offset
    // and the open transaction beyond: lag 3, to the LSO.
    let o = observation("t", 0, (0, 18, 13), Some(10), true);
    let r = GroupTracker::default().evaluate("g", &[o], None, &rules(), Instant::now(), NOW_MS);
    assert_eq!(r.partitions[0].offset_lag, Some(3));
}

/// The issue-45 scenario: 6 partitions, 2 consumers, 95 % of the traffic
/// on p0, whose consumer also owns p1 and p2. They wait behind p0, so
/// p0-p2 show about the same time lag (89, 87, 85 s) and the time-lag rule
/// sees no skew; p0 carries 97 % of the offset lag and 95 % of the
/// produce rate. Skewed, withheld, p0 named: never consumer-bound.
#[test]
fn a_hot_partition_sharing_its_consumer_is_skewed() {
    let r = run(&mut GroupTracker::default(), &rules(), 8, |c| {
        let mut v = Vec::new();
        for (p, lag_s, produced_per_s, committed_per_s) in
            [(0, 89_000, 95, 40), (1, 87_000, 1, 1), (2, 85_000, 1, 1)]
        {
            v.push(obs(
                p,
                Some(committed_per_s * c),
                0,
                if p == 0 { 3_000 } else { 40 } + produced_per_s * c,
                at(committed_per_s * c, NOW_MS + c * 1000 - lag_s),
            ));
        }
        // The other consumer keeps up with its three.
        for p in 3..6 {
            v.push(obs(p, Some(c), 0, c + 1, at(c, NOW_MS + c * 1000 - 200)));
        }
        v
    });
    assert_eq!(r.diagnosis, Diagnosis::Skewed, "{r:#?}");
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
        reason.contains("of the offset lag and") && reason.contains("of the produce rate"),
        "{reason}"
    );
}

#[test]
fn skewed_without_suggestion_consumer_bound_with_one() {
    // Partition 0 is 60 s behind and moving; the others keep up.
    let r = run(&mut GroupTracker::default(), &rules(), 4, |c| {
        let mut v = vec![obs(
            0,
            Some(100 * c),
            0,
            100 * c + 5000,
            at(100 * c, NOW_MS + c * 1000 - 60_000),
        )];
        for p in 1..4 {
            v.push(obs(
                p,
                Some(10 * c),
                0,
                10 * c + 1,
                at(10 * c, NOW_MS + c * 1000 - 50),
            ));
        }
        v
    });
    assert_eq!(r.diagnosis, Diagnosis::Skewed);
    assert_eq!(r.named.len(), 1);
    assert!(matches!(r.scaling, Scaling::Withheld { .. }));

    // Every partition 60 s behind and rising, commits advancing.
    let rules = rules();
    let r = run(&mut GroupTracker::default(), &rules, 4, |c| {
        (0..4)
            .map(|p| {
                obs(
                    p,
                    Some(100 * c),
                    0,
                    200 * c + 5000,
                    at(100 * c, NOW_MS - 60_000),
                )
            })
            .collect()
    });
    assert_eq!(r.diagnosis, Diagnosis::ConsumerBound);
    let Scaling::Suggest {
        throughput_factor,
        current,
        replicas,
        capped,
    } = r.scaling
    else {
        panic!("{:?}", r.scaling)
    };
    assert_eq!(current, Some(2), "current_replicas, without members");
    // Produce 800/s + backlog (4 x 5300) / 60 s = 1153/s over a commit rate of 400/s.
    assert!((throughput_factor - (800.0 + 21_200.0 / 60.0) / 400.0).abs() < 1e-6);
    assert_eq!(
        replicas,
        Some(4),
        "ceil(2 x 2.88) = 6, capped at 4 partitions"
    );
    assert!(capped);
    assert_eq!(r.drain_time, None, "commits slower than produce");
}

/// Every partition 60 s behind and rising, commits advancing, over 8
/// partitions, with `members` described by the brokers.
fn consumer_bound(rules: &Rules, members: Option<u32>) -> GroupReport {
    let mut g = GroupTracker::default();
    let t0 = Instant::now();
    let mut last = None;
    for c in 0..4i64 {
        let obs: Vec<_> = (0..8)
            .map(|p| {
                obs(
                    p,
                    Some(100 * c),
                    0,
                    120 * c + 1000,
                    at(100 * c, NOW_MS - 60_000),
                )
            })
            .collect();
        last = Some(g.evaluate(
            "g",
            &obs,
            members,
            rules,
            t0 + Duration::from_secs(c as u64),
            NOW_MS + c * 1000,
        ));
    }
    let r = last.unwrap();
    assert_eq!(r.diagnosis, Diagnosis::ConsumerBound, "{r:?}");
    assert_eq!(r.members, members);
    r
}

#[test]
fn the_suggestion_counts_from_the_members_never_above_the_partitions() {
    // Produce 960/s + backlog (8 x 1060) / 60 s = 1101/s over a commit
    // rate of 800/s: x1.38.
    let factor = (960.0 + 8.0 * 1060.0 / 60.0) / 800.0;
    let suggestion = |r: &GroupReport| match r.scaling {
        Scaling::Suggest {
            throughput_factor,
            current,
            replicas,
            capped,
        } => {
            assert!((throughput_factor - factor).abs() < 1e-6);
            (current, replicas, capped)
        }
        ref other => panic!("{other:?}"),
    };
    let rules = rules(); // current_replicas: Some(2)
    // Three members described: ceil(3 x 1.38) = 5, the members win over
    // current_replicas.
    let r = consumer_bound(&rules, Some(3));
    assert_eq!(suggestion(&r), (Some(3), Some(5), false));
    // Six members: ceil(6 x 1.38) = 9, capped at the 8 partitions.
    let r = consumer_bound(&rules, Some(6));
    assert_eq!(suggestion(&r), (Some(6), Some(8), true));
    // Members unknown (the mock broker), or none while the commits advance
    // (consumers that assign partitions without joining the group): the
    // configured count, ceil(2 x 1.38) = 3.
    for members in [None, Some(0)] {
        let r = consumer_bound(&rules, members);
        assert_eq!(suggestion(&r), (Some(2), Some(3), false));
    }
    // Nothing known: a throughput factor only.
    let unknown = Rules {
        current_replicas: None,
        ..rules.clone()
    };
    let r = consumer_bound(&unknown, None);
    assert_eq!(suggestion(&r), (None, None, false));
    // Already a consumer per partition: withheld, with the reason.
    for members in [8, 11] {
        let r = consumer_bound(&rules, Some(members));
        let Scaling::Withheld { reason } = &r.scaling else {
            panic!("{:?}", r.scaling)
        };
        assert!(
            reason.contains(&format!("{members} consumers for 8 partitions")),
            "{reason}"
        );
    }
}

#[test]
fn keeping_up_below_the_threshold_or_falling() {
    let r = run(&mut GroupTracker::default(), &rules(), 4, |c| {
        (0..2)
            .map(|p| {
                obs(
                    p,
                    Some(100 * c),
                    0,
                    100 * c + 10,
                    at(100 * c, NOW_MS + c * 1000 - 2000),
                )
            })
            .collect()
    });
    assert_eq!(r.diagnosis, Diagnosis::KeepingUp);
    assert!(r.drain_time.is_none(), "commit rate equals produce rate");
    // 90 s behind and falling by 5 s a second (55 s at the end).
    let r = run(&mut GroupTracker::default(), &rules(), 8, |c| {
        (0..2)
            .map(|p| {
                obs(
                    p,
                    Some(600 * c),
                    0,
                    5000 + 100 * c,
                    at(600 * c, NOW_MS + c * 1000 - 90_000 + c * 5000),
                )
            })
            .collect()
    });
    assert_eq!(r.diagnosis, Diagnosis::KeepingUp);
    assert!(r.drain_time.is_some());
}

/// Commit and produce rates a few percent apart (noise on a group keeping
/// pace) give no drain time; 10 % apart, one.
#[test]
fn no_drain_time_from_noise_between_the_rates() {
    let drain = |commit_per_s: i64| {
        run(&mut GroupTracker::default(), &rules(), 8, |c| {
            vec![obs(
                0,
                Some(10_000 + commit_per_s * c),
                0,
                20_000 + 1_000 * c,
                at(10_000 + commit_per_s * c, NOW_MS + c * 1000 - 2000),
            )]
        })
        .drain_time
    };
    // 10,000 records behind, committing 1,030/s against 1,000/s
    // produced: 10,000 / 30 = 5.5 min would be noise.
    assert_eq!(drain(1_030), None);
    assert_eq!(drain(1_000), None);
    let d = drain(1_100).expect("10 % faster: draining");
    // (10,000 - 7 x 100) / 100 = 93 s.
    assert!(d.as_secs_f64() > 60.0 && d.as_secs_f64() < 120.0, "{d:?}");
}

/// Freezes: `dead`, `stuck`, `stalled`, the commit rhythm, empty groups.
mod freeze;

/// Records behind a producer's open transaction: `open_transaction`, and
/// the records its end releases at once.
mod open_transaction;

/// The members' assignments: a hot partition per consumer.
mod owners;
