//! A handler's tests written only with `fresh_consumer::testing`, as a
//! service's author would write them: no helper of this repository's own.
//! On the in-process mock broker by default, on the cluster named by
//! `FRESH_CONSUMER_TEST_BOOTSTRAP` when it is set.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fresh_consumer::metrics::{
    DEAD_LETTER_MESSAGES, EVENT_AGE, MESSAGING_DESTINATION_NAME, SLO_MESSAGES, SLO_RESULT,
    STALE_MESSAGES,
};
use fresh_consumer::testing::{
    TestKafka, TestMetrics, TestRecord, TestingError, spawn, wait_until,
};
use fresh_consumer::{
    BoxError, OnExhausted, Record,
    failure::{DeadLetter, OnStale},
    permanent,
    slo::FreshnessObjective,
};

const DEADLINE: Duration = Duration::from_secs(20);

/// The handler under test: applies a payment; a payment without an amount
/// header can never succeed, and one for a blocked account fails.
#[derive(Clone, Default)]
struct Payments {
    applied: Arc<Mutex<Vec<String>>>,
}

impl Payments {
    async fn apply(&self, record: Record) -> Result<(), BoxError> {
        let Some(Some(amount)) = record.header("amount") else {
            return Err(permanent(std::io::Error::other("no amount header")));
        };
        let account = String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned();
        if account == "blocked" {
            return Err(permanent(std::io::Error::other("account blocked")));
        }
        let amount = String::from_utf8_lossy(amount).into_owned();
        self.applied
            .lock()
            .unwrap()
            .push(format!("{account}:{amount}"));
        Ok(())
    }
}

/// A name no earlier run used (a real cluster keeps its topics and groups).
fn unique(prefix: &str) -> String {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{ns}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_are_applied_dead_lettered_and_measured() -> Result<(), TestingError> {
    let kafka = TestKafka::from_env("FRESH_CONSUMER_TEST_BOOTSTRAP")?;
    let (topic, group) = (unique("payments"), unique("payments-app"));
    let dlt = format!("{topic}.dlt");
    kafka.create_topic(&topic, 2).await?;
    kafka.create_topic(&dlt, 1).await?;

    let payment = |account: &str, amount: &str, partition| {
        TestRecord::new("payment")
            .key(account)
            .header("amount", amount)
            .partition(partition)
    };
    kafka.produce(&topic, payment("alice", "10", 0)).await?;
    kafka.produce(&topic, payment("blocked", "99", 0)).await?;
    kafka
        .produce(&topic, TestRecord::new("no amount").key("bob").partition(1))
        .await?;
    // Made an hour ago: handled, but late against the objective.
    kafka
        .produce(
            &topic,
            payment("carol", "7", 1).age(Duration::from_secs(3600)),
        )
        .await?;

    let payments = Payments::default();
    let handler = payments.clone();
    let metrics = TestMetrics::new();
    let consumer = kafka
        .consumer(
            move |r: Record| {
                let h = handler.clone();
                async move { h.apply(r).await }
            },
            &group,
            [topic.as_str()],
        )
        .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
        .freshness_objective(FreshnessObjective::new(Duration::from_secs(30), 0.99))
        .meter_provider(metrics.provider());
    let running = spawn(consumer);
    kafka
        .wait_committed(&group, &topic, &[2, 2], DEADLINE)
        .await?;
    let summary = running.stop().await?;

    let mut applied = payments.applied.lock().unwrap().clone();
    applied.sort();
    assert_eq!(applied, ["alice:10", "carol:7"]);
    assert_eq!(
        (summary.records_succeeded, summary.records_dead_lettered),
        (2, 2)
    );
    assert_eq!(kafka.committed(&group, &topic).await?, [Some(2), Some(2)]);

    let mut parked = kafka.read_dead_letters(&dlt).await?;
    parked.sort_by_key(|d| (d.partition, d.offset));
    let why: Vec<(i32, i64, Option<&str>)> = parked
        .iter()
        .map(|d| (d.partition, d.offset, d.error_type.as_deref()))
        .collect();
    assert_eq!(why, [(0, 1, Some("permanent")), (1, 0, Some("permanent"))]);
    assert!(
        parked[0]
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("account blocked"))
    );

    metrics.flush().await?;
    let on_topic = |result: &str| {
        metrics.counter_total(
            SLO_MESSAGES,
            [
                (MESSAGING_DESTINATION_NAME, topic.as_str()),
                (SLO_RESULT, result),
            ],
        )
    };
    assert_eq!(
        (
            on_topic("good"),
            on_topic("late"),
            on_topic("dead_lettered")
        ),
        (1.0, 1.0, 2.0)
    );
    assert_eq!(
        metrics.counter_total(
            DEAD_LETTER_MESSAGES,
            [(MESSAGING_DESTINATION_NAME, topic.as_str())]
        ),
        2.0
    );
    let ages = metrics.histogram(EVENT_AGE, [(MESSAGING_DESTINATION_NAME, topic.as_str())]);
    assert_eq!(ages.count, 2);
    assert!(ages.max.is_some_and(|max| max >= 3600.0), "{ages:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_older_than_ten_minutes_is_skipped() -> Result<(), TestingError> {
    let kafka = TestKafka::from_env("FRESH_CONSUMER_TEST_BOOTSTRAP")?;
    let (topic, group) = (unique("prices"), unique("price-alerts"));
    kafka.create_topic(&topic, 1).await?;
    for minutes in [30, 20, 0] {
        kafka
            .produce(
                &topic,
                TestRecord::new(format!("{minutes} min old"))
                    .header("amount", "1")
                    .age(Duration::from_secs(minutes * 60)),
            )
            .await?;
    }
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let s = Arc::clone(&seen);
    let metrics = TestMetrics::new();
    let consumer = kafka
        .consumer(
            move |r: Record| {
                s.lock().unwrap().push(r.offset());
                std::future::ready(Ok::<(), std::io::Error>(()))
            },
            &group,
            [topic.as_str()],
        )
        .max_record_age(Duration::from_secs(600), OnStale::Skip)
        .meter_provider(metrics.provider());
    let running = spawn(consumer);
    // Waiting on the handler instead of the commit: the kit's waits take
    // any condition.
    wait_until(DEADLINE, "the fresh record handled", || {
        let seen = Arc::clone(&seen);
        async move { !seen.lock().unwrap().is_empty() }
    })
    .await?;
    kafka.wait_committed(&group, &topic, &[3], DEADLINE).await?;
    assert!(!running.is_finished());
    let summary = running.stop().await?;
    assert_eq!(*seen.lock().unwrap(), [2]);
    assert_eq!(summary.records_stale, 2);
    metrics.flush().await?;
    assert_eq!(
        metrics.counter_total(
            STALE_MESSAGES,
            [(MESSAGING_DESTINATION_NAME, topic.as_str())]
        ),
        2.0
    );
    Ok(())
}
