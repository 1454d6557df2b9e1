//! The six stages of `examples/signals.rs`, in the guide's order
//! (`docs/guide/signals.md`): each creates a topic and a group of its own,
//! produces its workload, runs a consumer (`Broker::consumer`, in the
//! example) on it, waits for the signal the guide names, and reads what
//! offset lag shows from outside beside what the library shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fresh_consumer::metrics::{
    EVENT_AGE, OFFSET_RESETS, PARTITION_BLOCKED, PARTITION_STALL_AGE, POLL_INTERVAL,
    PROCESS_DURATION, REBALANCE_TYPE, REBALANCES, RETENTION_OVERRUN_MESSAGES,
};
use fresh_consumer::{
    BoxError, Record,
    failure::RetryPolicy,
    health::{HealthReason, PartitionStatus},
    slo::FreshnessObjective,
};

use crate::Working;
use crate::kit::{self, Broker, Metrics, Outcome, Running, StageError, Workload, secs, watch};

/// How long a stage waits for its signal.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The stages, in the guide's order.
pub const STAGES: [&str; 6] = [
    "count-without-age",
    "hot-partition",
    "slow-dependency",
    "rebalance-loop",
    "stuck-partition",
    "retention-overrun",
];

/// Runs one of [`STAGES`].
pub async fn run(stage: &str, broker: &Broker) -> Result<Outcome, StageError> {
    match stage {
        "count-without-age" => count_without_age(broker).await,
        "hot-partition" => hot_partition(broker).await,
        "slow-dependency" => slow_dependency(broker).await,
        "rebalance-loop" => rebalance_loop(broker).await,
        "stuck-partition" => stuck_partition(broker).await,
        _ => retention_overrun(broker).await,
    }
}

/// Count without age: a modest lag of old records.
async fn count_without_age(broker: &Broker) -> Result<Outcome, StageError> {
    let (topic, group) = broker.stage("count-without-age", 1).await?;
    let ten_minutes_ago = kit::now_ms() - 600_000;
    broker
        .produce(
            &topic,
            0,
            &Workload::keyed("order", 30).stamped(ten_minutes_ago),
        )
        .await?;
    let metrics = Metrics::new();
    let objective = Duration::from_secs(30);
    let run = Running::start(
        broker
            .consumer(
                &topic,
                &group,
                Working(Duration::from_millis(100)),
                &metrics,
            )
            .freshness_objective(FreshnessObjective::new(objective, 0.99)),
    );
    let (s, after) = watch(&run.health, DEADLINE, "head age above 5 min", |s| {
        s.partition(&topic, 0).is_some_and(|p| {
            p.head_age > Duration::from_secs(300) && p.lag.is_some_and(|l| l > 0 && l <= 30)
        })
    })
    .await?;
    let lag = broker.outside_lag(&group, &topic, 1).await?;
    let head_age = s
        .partition(&topic, 0)
        .map(|p| p.head_age)
        .unwrap_or_default();
    watch(&run.health, DEADLINE, "all 30 records handled", |s| {
        s.partition(&topic, 0)
            .is_some_and(|p| p.committed_offset == Some(30))
    })
    .await?;
    let done = run.health.snapshot();
    let late = done.objectives.first().map_or(0, |o| o.long.bad);
    metrics.flush().await;
    let max_age = metrics.histogram(EVENT_AGE, &[]).map_or(0.0, |h| h.max);
    run.stop().await?;
    Ok(Outcome {
        stage: "count without age: 30 records stamped 10 minutes ago, 100 ms of work each",
        lag: format!(
            "{} records (about {} of work: looks harmless)",
            lag[0],
            secs(Duration::from_millis(100) * lag[0] as u32)
        ),
        library: vec![
            format!(
                "head of the line {} old (fresh_consumer.partition.head.age)",
                secs(head_age)
            ),
            format!("event age up to {max_age:.1} s (fresh_consumer.event.age)"),
            format!(
                "{late} of 30 records late against a {} s objective (fresh_consumer.slo.messages)",
                objective.as_secs()
            ),
        ],
        shown_after: after,
    })
}

/// Hot partition: one key carries most records.
async fn hot_partition(broker: &Broker) -> Result<Outcome, StageError> {
    let (topic, group) = broker.stage("hot-partition", 4).await?;
    broker
        .produce(&topic, 0, &Workload::keyed("hot", 400))
        .await?;
    for p in 1..4 {
        broker
            .produce(&topic, p, &Workload::keyed(&format!("cold-{p}"), 10))
            .await?;
    }
    let metrics = Metrics::new();
    let run = Running::start(broker.consumer(
        &topic,
        &group,
        Working(Duration::from_millis(5)),
        &metrics,
    ));
    let (s, after) = watch(
        &run.health,
        DEADLINE,
        "partition 0 behind, 1-3 caught up",
        |s| {
            s.partition(&topic, 0)
                .is_some_and(|p| p.head_age > Duration::from_secs(1))
                && (1..4).all(|p| {
                    s.partition(&topic, p)
                        .is_some_and(|p| p.lag == Some(0) && p.committed_offset == Some(10))
                })
        },
    )
    .await?;
    let lag = broker.outside_lag(&group, &topic, 4).await?;
    let total: u64 = lag.iter().sum();
    let per = |p: i32| {
        s.partition(&topic, p).map_or_else(String::new, |r| {
            format!(
                "partition {p}: lag {}, head age {}",
                r.lag.unwrap_or(0),
                secs(r.head_age)
            )
        })
    };
    run.stop().await?;
    Ok(Outcome {
        stage: "hot partition: 400 records on partition 0, 10 on each of partitions 1-3",
        lag: format!(
            "{total} records in total, {} per partition on average (what a summed or averaged lag graph plots)",
            total / 4
        ),
        library: vec![
            per(0),
            format!("{}; partitions 2-3 the same", per(1)),
            "per partition, never summed by the library (fresh_consumer.partition.lag, .head.age): take the max".into(),
        ],
        shown_after: after,
    })
}

/// Slow dependency: the handler slows down while records keep arriving.
async fn slow_dependency(broker: &Broker) -> Result<Outcome, StageError> {
    let (topic, group) = broker.stage("slow-dependency", 1).await?;
    let slow = Arc::new(AtomicBool::new(false));
    let flag = slow.clone();
    let handler = move |_r: Record| {
        let slow = flag.load(Ordering::Relaxed);
        async move {
            let work = if slow { 60 } else { 1 };
            tokio::time::sleep(Duration::from_millis(work)).await;
            Ok::<(), BoxError>(())
        }
    };
    let metrics = Metrics::new();
    let run = Running::start(broker.consumer(&topic, &group, handler, &metrics));
    let producing = broker.produce_at(&topic, 0, 40.0);
    // Two seconds at 1 ms per record: keeping up.
    watch(&run.health, DEADLINE, "80 records handled", |s| {
        s.partition(&topic, 0)
            .is_some_and(|p| p.committed_offset.is_some_and(|c| c >= 80))
    })
    .await?;
    metrics.flush().await;
    let before = metrics.histogram(PROCESS_DURATION, &[]).unwrap_or_default();
    slow.store(true, Ordering::Relaxed);
    let (s, after) = watch(&run.health, DEADLINE, "reason LagGrowing", |s| {
        s.partition(&topic, 0).is_some_and(|p| {
            p.reasons
                .iter()
                .any(|r| matches!(r, HealthReason::LagGrowing { .. }))
        })
    })
    .await?;
    let lag = broker.outside_lag(&group, &topic, 1).await?;
    metrics.flush().await;
    let now = metrics.histogram(PROCESS_DURATION, &[]).unwrap_or_default();
    let poll_max = metrics.histogram(POLL_INTERVAL, &[]).map_or(0.0, |h| h.max);
    producing.stop().await?;
    run.stop().await?;
    let p = s.partition(&topic, 0).expect("watched");
    let growing = p
        .reasons
        .iter()
        .find_map(|r| match r {
            HealthReason::LagGrowing { from, to, over } => {
                Some(format!("{from} to {to} records over {}", secs(*over)))
            }
            _ => None,
        })
        .unwrap_or_default();
    Ok(Outcome {
        stage: "slow dependency: 40 records/s, the handler goes from 1 ms to 60 ms per record",
        lag: format!("{} records, creeping up", lag[0]),
        library: vec![
            format!(
                "messaging.process.duration mean {:.1} ms before, {:.1} ms since the slowdown",
                before.mean() * 1e3,
                now.since(&before).mean() * 1e3
            ),
            format!("fresh_consumer.poll.interval at most {poll_max:.2} s (flat: polling is fine)"),
            format!(
                "status {} (lag grew {growing} while commits advanced: reason LagGrowing)",
                p.status.as_str()
            ),
        ],
        shown_after: after,
    })
}

/// Rebalance loop: a member that joins and leaves again and again (a crash
/// loop, a bad deploy).
async fn rebalance_loop(broker: &Broker) -> Result<Outcome, StageError> {
    let (topic, group) = broker.stage("rebalance-loop", 2).await?;
    let metrics = Metrics::new();
    let staying = Running::start(
        broker
            .consumer(&topic, &group, Working(Duration::from_millis(1)), &metrics)
            .set("heartbeat.interval.ms", "500"),
    );
    watch(
        &staying.health,
        DEADLINE,
        "the first member owns both partitions",
        |s| s.partitions.len() == 2,
    )
    .await?;
    let producing = broker.produce_at(&topic, 0, 20.0);
    let started = Instant::now();
    let mut max_lag = 0;
    for _ in 0..3 {
        let churn = Running::start(
            broker
                .consumer(
                    &topic,
                    &group,
                    Working(Duration::from_millis(1)),
                    &Metrics::new(),
                )
                .set("heartbeat.interval.ms", "500"),
        );
        watch(
            &churn.health,
            DEADLINE,
            "the second member got a partition",
            |s| !s.partitions.is_empty(),
        )
        .await?;
        max_lag = max_lag.max(broker.outside_lag(&group, &topic, 2).await?.iter().sum());
        churn.stop().await?;
        watch(
            &staying.health,
            DEADLINE,
            "the first member owns both partitions again",
            |s| s.partitions.len() == 2,
        )
        .await?;
        max_lag = max_lag.max(broker.outside_lag(&group, &topic, 2).await?.iter().sum());
    }
    producing.stop().await?;
    let s = staying.health.snapshot();
    metrics.flush().await;
    let by_type = |t: &str| metrics.counter(REBALANCES, &[(REBALANCE_TYPE, t)]);
    staying.stop().await?;
    if s.rebalances < 6 {
        return Err(StageError::Missed(format!(
            "the staying member counted {} rebalances, fewer than the 6 it went through",
            s.rebalances
        )));
    }
    Ok(Outcome {
        stage: "rebalance loop: a second member joins and leaves the group 3 times",
        lag: format!(
            "{max_lag} records at most (sampled at every join and leave): a lag that rises and falls, like a slow consumer's"
        ),
        library: vec![
            format!(
                "{} rebalances seen by the member that stayed (fresh_consumer.rebalances: assigned {}, revoked {}, lost {})",
                s.rebalances,
                by_type("assigned"),
                by_type("revoked"),
                by_type("lost")
            ),
            format!(
                "its member id changed {} times (HealthSnapshot::member_id_changes; a member that is thrown out gets a new one)",
                s.member_id_changes
            ),
            "a rate of fresh_consumer.rebalances that keeps rising is the loop; a handler past max.poll.interval.ms shows in fresh_consumer.poll.interval.warnings first".into(),
        ],
        shown_after: Some(started.elapsed()),
    })
}

/// Stuck partition: one record fails every attempt and blocks its partition.
async fn stuck_partition(broker: &Broker) -> Result<Outcome, StageError> {
    let (topic, group) = broker.stage("stuck-partition", 2).await?;
    broker
        .produce(&topic, 0, &Workload::keyed("good", 3))
        .await?;
    broker
        .produce(&topic, 0, &Workload::keyed("poison", 1))
        .await?;
    let handler = |r: Record| async move {
        if r.key() == Some(b"poison".as_slice()) {
            Err::<(), BoxError>("the payload does not parse".into())
        } else {
            Ok(())
        }
    };
    let metrics = Metrics::new();
    let run = Running::start(
        broker.consumer(&topic, &group, handler, &metrics).retry(
            RetryPolicy::new()
                .max_attempts(3)
                .backoff(Duration::from_millis(50), Duration::from_millis(200)),
        ),
    );
    let to_p0 = broker.produce_at(&topic, 0, 10.0);
    let to_p1 = broker.produce_at(&topic, 1, 10.0);
    let (s, after) = watch(
        &run.health,
        DEADLINE,
        "partition 0 blocked and stalled",
        |s| {
            s.partition(&topic, 0).is_some_and(|p| {
                p.status == PartitionStatus::Stall
                    && p.reasons
                        .iter()
                        .any(|r| matches!(r, HealthReason::BlockedByFailingRecord { .. }))
            })
        },
    )
    .await?;
    let lag = broker.outside_lag(&group, &topic, 2).await?;
    metrics.flush().await;
    let blocked = metrics.gauge(PARTITION_BLOCKED, 0);
    let stall_age = metrics.gauge(PARTITION_STALL_AGE, 0);
    to_p0.stop().await?;
    to_p1.stop().await?;
    run.stop().await?;
    let p0 = s.partition(&topic, 0).expect("watched");
    let p1 = s.partition(&topic, 1).map_or("?", |p| p.status.as_str());
    let blocked_for = p0
        .reasons
        .iter()
        .find_map(|r| match r {
            HealthReason::BlockedByFailingRecord { duration, .. } => Some(secs(*duration)),
            _ => None,
        })
        .unwrap_or_default();
    Ok(Outcome {
        stage: "stuck partition: the record at offset 3 of partition 0 fails every attempt",
        lag: format!(
            "partition 0: {} and growing, partition 1: {} (looks like a slow consumer)",
            lag[0], lag[1]
        ),
        library: vec![
            format!(
                "partition 0 status {}: blocked by a failing record for {blocked_for}, committed offset held at {}",
                p0.status.as_str(),
                p0.committed_offset.unwrap_or(-1)
            ),
            format!(
                "fresh_consumer.partition.blocked {blocked}, fresh_consumer.partition.stall.age {stall_age:.1} s; partition 1 status {p1}"
            ),
        ],
        shown_after: after,
    })
}

/// Retention overrun: records deleted before the group read them.
async fn retention_overrun(broker: &Broker) -> Result<Outcome, StageError> {
    let (topic, group) = broker.stage("retention-overrun", 1).await?;
    // 120 records of 64 KiB: the mock broker keeps 5 MiB (80 of them).
    broker
        .produce(&topic, 0, &Workload::keyed("bulk", 120).sized(64 * 1024))
        .await?;
    broker.commit(&group, &topic, 0, 10).await?;
    let log_start = broker.apply_retention(&topic, 0, 40).await?;
    let before = broker.outside_lag(&group, &topic, 1).await?;
    let metrics = Metrics::new();
    let run = Running::start(broker.consumer(
        &topic,
        &group,
        Working(Duration::from_millis(1)),
        &metrics,
    ));
    let (s, after) = watch(
        &run.health,
        DEADLINE,
        "reason RetentionOverrun, caught up",
        |s| {
            s.partition(&topic, 0).is_some_and(|p| {
                p.lag == Some(0)
                    && p.reasons
                        .iter()
                        .any(|r| matches!(r, HealthReason::RetentionOverrun { .. }))
            })
        },
    )
    .await?;
    let lag = broker.outside_lag(&group, &topic, 1).await?;
    metrics.flush().await;
    let overrun = metrics.counter(RETENTION_OVERRUN_MESSAGES, &[]);
    let resets = metrics.counter(OFFSET_RESETS, &[]);
    let summary = run.stop().await?;
    let lost = s
        .partition(&topic, 0)
        .and_then(|p| {
            p.reasons.iter().find_map(|r| match r {
                HealthReason::RetentionOverrun { lost, .. } => Some(*lost),
                _ => None,
            })
        })
        .unwrap_or_default();
    Ok(Outcome {
        stage: "retention overrun: committed at offset 10, the log start moved past it",
        lag: format!(
            "{} before the consumer started, {} once it caught up (the lost records never show)",
            before[0], lag[0]
        ),
        library: vec![
            format!(
                "reason RetentionOverrun: {lost} records lost (log start {log_start}), logged at ERROR"
            ),
            format!(
                "fresh_consumer.retention.overrun.messages {overrun}, fresh_consumer.offset.resets {resets}; {} records handled of {} produced",
                summary.records_received, 120
            ),
        ],
        shown_after: after,
    })
}
