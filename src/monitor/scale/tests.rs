//! The autoscaling rules on the seeds' scenarios and on synthetic reports:
//! holds, one-step scale-up, hysteresis, rebalances, errors.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::monitor::report::{HeadTimestamp, LagStatus, PartitionLag};
use crate::monitor::scenarios::{self, CURRENT, PARTITIONS};

fn request(group: &str) -> ScaleRequest {
    ScaleRequest {
        group: group.into(),
        ..ScaleRequest::default()
    }
}

fn scaler(policy: ScalePolicy) -> Autoscaler {
    Autoscaler::new(policy, None).unwrap()
}

#[test]
fn the_five_scenarios_scale_up_only_the_consumer_bound_group() {
    let mut a = scaler(ScalePolicy::new().current_replicas(CURRENT));
    let report = scenarios::report();
    // Two cycles: a scale-up needs the backlog to persist past one.
    a.observe(Arc::new(report.clone()));
    a.observe(Arc::new(report.clone()));
    for g in &report.groups {
        let d = a.decide("ns/so", &request(&g.group)).unwrap();
        assert!(d.active, "{}: records wait", g.group);
        match g.group.as_str() {
            "evenly-loaded" => {
                // One step, to what the monitor's suggestion says.
                let Scaling::Suggest {
                    replicas: Some(n), ..
                } = g.scaling
                else {
                    panic!("{:?}", g.scaling)
                };
                assert_eq!(d.replicas, n);
                assert!(n > CURRENT && n <= PARTITIONS as u32, "{n}");
                assert_eq!(d.action, ScaleAction::Up { from: CURRENT });
            }
            "bursty-producer" => {
                assert_eq!((d.replicas, d.action), (CURRENT, ScaleAction::Steady));
            }
            other => {
                let want = match other {
                    "hot-partition" => HoldReason::Skewed,
                    "poison-record" => HoldReason::Stuck,
                    "dead-group" => HoldReason::Dead,
                    _ => unreachable!("{other}"),
                };
                assert_eq!(d.replicas, CURRENT, "{other} holds");
                assert!(
                    matches!(&d.action, ScaleAction::Held { reason, why } if *reason == want && !why.is_empty()),
                    "{other}: {:?}",
                    d.action
                );
            }
        }
    }
}

#[test]
fn a_group_not_watched_a_topic_not_watched_no_report_and_no_count_are_errors() {
    let mut a = scaler(ScalePolicy::new());
    assert_eq!(
        a.decide("ns/so", &request("evenly-loaded")),
        Err(ScaleError::NoReport)
    );
    a.observe(Arc::new(scenarios::report()));
    assert_eq!(
        a.decide("ns/so", &request("nobody")),
        Err(ScaleError::NotWatched {
            group: "nobody".into()
        })
    );
    let mut r = request("bursty-producer");
    r.topics = vec!["orders".into(), "payments".into()];
    assert_eq!(
        a.decide("ns/so", &r),
        Err(ScaleError::TopicNotWatched {
            topic: "payments".into()
        })
    );
    // The brokers do not describe these groups and no count was given.
    assert_eq!(
        a.decide("ns/so", &request("bursty-producer")),
        Err(ScaleError::CurrentUnknown {
            group: "bursty-producer".into()
        })
    );
}

fn at(s: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
}

fn partition(p: i32, time_lag: Duration) -> PartitionLag {
    PartitionLag {
        topic: "orders".into(),
        partition: p,
        committed: Some(0),
        log_start: 0,
        high_watermark: 100,
        last_stable: 100,
        offset_lag: Some(100),
        time_lag: Some(time_lag),
        timestamp: HeadTimestamp::CreateTime(0),
        commit_unchanged_for: Some(Duration::ZERO),
        waiting_for: None,
        transaction_open_for: None,
        owner: None,
        replication: None,
        log_end_moved: false,
        retention_margin: Some(0),
        retention_eta: None,
        status: LagStatus::Ok,
    }
}

/// A group `g` on 8 partitions at second `s`: consumer-bound (time lag
/// 60 s, producing 100/s, committing 50/s), or keeping up with the time lag
/// given.
fn report(
    s: u64,
    diagnosis: Diagnosis,
    lag: Duration,
    members: Option<u32>,
    state: &str,
) -> Arc<MonitorReport> {
    Arc::new(MonitorReport {
        taken_at: at(s),
        cycle_duration: Duration::ZERO,
        records_read: 0,
        groups: vec![GroupReport {
            group: "g".into(),
            partitions: (0..8).map(|p| partition(p, lag)).collect(),
            members,
            state: Some(state.into()),
            assignor: None,
            diagnosis,
            named: vec![],
            total_lag: 800,
            max_time_lag: Some(lag),
            commit_rate: 50.0,
            produce_rate: 100.0,
            drain_time: None,
            scaling: Scaling::NotNeeded,
            timestamps_missing: 0,
            timestamps_future: 0,
            assignments_unreadable: 0,
        }],
    })
}

/// A group reading two topics (8 partitions of `orders`, 3 of `payments`):
/// with `range` (or an assignor not named) the cap is the larger topic's 8,
/// not their sum, 11; with `cooperative-sticky` it is 11. A trigger naming
/// a topic the monitor watches but the group does not read is an error
/// that says so.
#[test]
fn the_cap_follows_the_assignor_and_the_topics_the_group_reads() {
    let mut r = report(
        0,
        Diagnosis::ConsumerBound,
        Duration::from_secs(60),
        Some(2),
        "Stable",
    );
    {
        let g = &mut Arc::get_mut(&mut r).unwrap().groups[0];
        for p in 0..3 {
            let mut row = partition(p, Duration::from_secs(60));
            row.topic = "payments".into();
            g.partitions.push(row);
        }
        // Far behind: asks for as many as it can use.
        g.commit_rate = 1.0;
    }
    for (assignor, cap) in [
        (None, 8),
        (Some("range"), 8),
        (Some("cooperative-sticky"), 11),
    ] {
        let mut r = r.clone();
        Arc::make_mut(&mut r).groups[0].assignor = assignor.map(str::to_owned);
        assert_eq!(r.groups[0].replica_cap(), cap, "{assignor:?}");
        let mut a = scaler(ScalePolicy::new());
        a.observe(r.clone());
        a.observe(r);
        let d = a.decide("ns/so", &request("g")).unwrap();
        assert_eq!(
            (d.replicas, d.action),
            (cap, ScaleAction::Up { from: 2 }),
            "{assignor:?}"
        );
    }
    // Another group reads `refunds`, which `g` does not.
    let mut r = r.clone();
    let mut other = r.groups[0].clone();
    other.group = "other".into();
    other.partitions[0].topic = "refunds".into();
    Arc::make_mut(&mut r).groups.push(other);
    let mut a = scaler(ScalePolicy::new());
    a.observe(r);
    let mut asked = request("g");
    asked.topics = vec!["orders".into(), "refunds".into()];
    assert_eq!(
        a.decide("ns/so", &asked),
        Err(ScaleError::TopicNotRead {
            topic: "refunds".into(),
            group: "g".into()
        })
    );
    asked.topics = vec!["invoices".into()];
    assert_eq!(
        a.decide("ns/so", &asked),
        Err(ScaleError::TopicNotWatched {
            topic: "invoices".into()
        })
    );
}

/// A group `g` the brokers describe with no members, no commit moving:
/// `report`'s with 0 members, state `Empty`, commit rate 0.
fn empty(s: u64, diagnosis: Diagnosis, lag: Duration, total_lag: u64) -> Arc<MonitorReport> {
    let mut r = report(s, diagnosis, lag, Some(0), "Empty");
    let g = &mut Arc::get_mut(&mut r).unwrap().groups[0];
    g.commit_rate = 0.0;
    g.total_lag = total_lag;
    r
}

/// An empty group (0 members, state `Empty`): no error without
/// `current_replicas`; active with a backlog, one replica from zero, and no
/// `dead` or `rebalancing` hold; inactive without one.
#[test]
fn an_empty_group_is_answered_from_zero() {
    let mut a = scaler(ScalePolicy::new());
    a.observe(empty(0, Diagnosis::Idle, Duration::ZERO, 0));
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!(
        (d.active, d.replicas, d.action),
        (false, 1, ScaleAction::Steady)
    );

    // Records arrive while nobody reads: dead to the monitor, activation
    // to the scaler (a fresh ScaledObject: the first answer is one up from
    // zero).
    let mut b = scaler(ScalePolicy::new());
    b.observe(empty(5, Diagnosis::Dead, Duration::from_secs(90), 800));
    let d = b.decide("ns/so", &request("g")).unwrap();
    assert_eq!((d.active, d.replicas), (true, 1));
    assert_eq!(d.action, ScaleAction::Up { from: 0 });
    // The member count went 0 -> 0: no rebalance; answered again the same.
    b.observe(empty(10, Diagnosis::Dead, Duration::from_secs(95), 800));
    let d = b.decide("ns/so", &request("g")).unwrap();
    assert_eq!(
        (d.active, d.replicas, d.action),
        (true, 1, ScaleAction::Steady)
    );

    // The same with the scaler's earlier answer kept (KEDA scaled 3 to 0):
    // it answers 3 again once active, `min_replicas` never below.
    let mut c = scaler(ScalePolicy::new().min_replicas(2));
    c.observe(report(
        0,
        Diagnosis::KeepingUp,
        Duration::from_secs(1),
        Some(3),
        "Stable",
    ));
    assert_eq!(c.decide("ns/so", &request("g")).unwrap().replicas, 3);
    c.observe(empty(5, Diagnosis::Dead, Duration::from_secs(90), 800));
    let d = c.decide("ns/so", &request("g")).unwrap();
    assert_eq!(
        (d.active, d.replicas, d.action),
        (true, 3, ScaleAction::Steady)
    );

    // No members but commits moving (consumers that assign partitions
    // without joining): not empty, so its count is unknown as before.
    let mut e = scaler(ScalePolicy::new());
    e.observe(report(
        0,
        Diagnosis::KeepingUp,
        Duration::from_secs(1),
        Some(0),
        "Empty",
    ));
    assert!(matches!(
        e.decide("ns/so", &request("g")),
        Err(ScaleError::CurrentUnknown { .. })
    ));
}

#[test]
fn scales_up_in_one_step_capped_at_the_partition_count() {
    let mut a = scaler(ScalePolicy::new());
    // 2 members at 50/s for 100/s plus 800 records in 600 s: x2.03, so 5.
    // On the first consumer-bound cycle, no step yet: the backlog must
    // persist past one cycle.
    let first = report(
        0,
        Diagnosis::ConsumerBound,
        Duration::from_secs(60),
        Some(2),
        "Stable",
    );
    a.observe(first.clone());
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!((d.replicas, d.action), (2, ScaleAction::Steady));
    a.observe(first);
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!((d.replicas, d.action), (5, ScaleAction::Up { from: 2 }));
    // Asked again in the same cycle (KEDA calls GetMetrics and IsActive):
    // the same answer, no second step.
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!((d.replicas, d.action), (5, ScaleAction::Steady));
    // Still behind with 5 members: no step before the commit rate settled
    // (5 min), then one more.
    a.observe(report(
        60,
        Diagnosis::ConsumerBound,
        Duration::from_secs(60),
        Some(5),
        "Stable",
    ));
    a.observe(report(
        120,
        Diagnosis::ConsumerBound,
        Duration::from_secs(60),
        Some(5),
        "Stable",
    ));
    assert_eq!(a.decide("ns/so", &request("g")).unwrap().replicas, 5);
    a.observe(report(
        300,
        Diagnosis::ConsumerBound,
        Duration::from_secs(60),
        Some(5),
        "Stable",
    ));
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!((d.replicas, d.action), (8, ScaleAction::Up { from: 5 }));
    // A drain target of 1 s asks for far more: capped at 8 partitions.
    let mut fast = request("g");
    fast.drain_target = Some(Duration::from_secs(1));
    let d = a.decide("ns/other", &fast).unwrap();
    assert_eq!(d.replicas, 8);
}

#[test]
fn holds_while_a_rebalance_is_in_progress() {
    let mut a = scaler(ScalePolicy::new());
    let bound = Diagnosis::ConsumerBound;
    let lag = Duration::from_secs(60);
    a.observe(report(0, bound, lag, Some(2), "PreparingRebalance"));
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!(d.replicas, 2);
    assert!(
        matches!(
            d.action,
            ScaleAction::Held {
                reason: HoldReason::Rebalancing,
                ..
            }
        ),
        "{:?}",
        d.action
    );
    // Stable again, but the member count changed since the last cycle.
    a.observe(report(5, bound, lag, Some(3), "Stable"));
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert!(
        matches!(
            d.action,
            ScaleAction::Held {
                reason: HoldReason::Rebalancing,
                ..
            }
        ),
        "{:?}",
        d.action
    );
    // Settled: one step from the answer held, for 3 members at x2.03.
    a.observe(report(10, bound, lag, Some(3), "Stable"));
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!((d.replicas, d.action), (7, ScaleAction::Up { from: 2 }));
}

#[test]
fn scales_down_one_replica_after_a_quiet_period_well_below_the_scale_up_point() {
    let policy = ScalePolicy::new()
        .scale_down_lag(Duration::from_secs(15))
        .scale_down_after(Duration::from_secs(600));
    let mut a = scaler(policy);
    let ask = |a: &mut Autoscaler| a.decide("ns/so", &request("g")).unwrap();
    // Two consumer-bound cycles: one step up.
    let bound = report(
        0,
        Diagnosis::ConsumerBound,
        Duration::from_secs(60),
        Some(2),
        "Stable",
    );
    a.observe(bound.clone());
    a.observe(bound);
    assert_eq!(ask(&mut a).replicas, 5);
    // Caught up, but 20 s behind: above the scale-down point, so no step
    // however long it lasts.
    let keeping = Diagnosis::KeepingUp;
    // The new replicas join (a rebalance: held, see above).
    a.observe(report(
        30,
        keeping,
        Duration::from_secs(20),
        Some(5),
        "Stable",
    ));
    for s in [60, 400, 800, 1300] {
        a.observe(report(
            s,
            keeping,
            Duration::from_secs(20),
            Some(5),
            "Stable",
        ));
        assert_eq!(
            (ask(&mut a).replicas, ask(&mut a).action),
            (5, ScaleAction::Steady),
            "at {s} s"
        );
    }
    // Quiet (5 s behind) from 1,400 s: nothing before 600 s of it.
    for s in [1400, 1700, 1999] {
        a.observe(report(
            s,
            keeping,
            Duration::from_secs(5),
            Some(5),
            "Stable",
        ));
        assert_eq!(ask(&mut a).replicas, 5, "at {s} s");
    }
    a.observe(report(
        2000,
        keeping,
        Duration::from_secs(5),
        Some(5),
        "Stable",
    ));
    let d = ask(&mut a);
    assert_eq!((d.replicas, d.action), (4, ScaleAction::Down { from: 5 }));
    // The next step needs another quiet period (and the member count to
    // settle).
    a.observe(report(
        2010,
        keeping,
        Duration::from_secs(5),
        Some(4),
        "Stable",
    ));
    a.observe(report(
        2300,
        keeping,
        Duration::from_secs(5),
        Some(4),
        "Stable",
    ));
    assert_eq!(ask(&mut a).replicas, 4);
    a.observe(report(
        2600,
        keeping,
        Duration::from_secs(5),
        Some(4),
        "Stable",
    ));
    assert_eq!(ask(&mut a).replicas, 3);
}

#[test]
fn never_answers_above_the_partition_count() {
    let mut a = scaler(ScalePolicy::new().current_replicas(20));
    a.observe(report(
        0,
        Diagnosis::Dead,
        Duration::from_secs(60),
        None,
        "Empty",
    ));
    let d = a.decide("ns/so", &request("g")).unwrap();
    assert_eq!(d.replicas, 8);
    assert!(matches!(
        d.action,
        ScaleAction::Held {
            reason: HoldReason::Dead,
            ..
        }
    ));
}

#[test]
fn a_group_that_disappears_is_forgotten() {
    let mut a = scaler(ScalePolicy::new().current_replicas(2));
    a.observe(report(0, Diagnosis::Idle, Duration::ZERO, None, "Empty"));
    assert!(a.decide("ns/so", &request("g")).is_ok());
    a.observe(Arc::new(MonitorReport {
        taken_at: at(5),
        cycle_duration: Duration::ZERO,
        records_read: 0,
        groups: vec![],
    }));
    assert!(matches!(
        a.decide("ns/so", &request("g")),
        Err(ScaleError::NotWatched { .. })
    ));
}
