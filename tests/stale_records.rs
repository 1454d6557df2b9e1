//! The stale-record policy (`max_record_age`) on a Kafka broker: records
//! whose event age is above the maximum when they reach the handler are
//! skipped, or written to the dead-letter topic or a topic of their own,
//! without the handler seeing them; they are committed past, counted in
//! their metric, the run summary and the SLO (`stale`), and logged once per
//! run of consecutive stale records. A batch handler gets its batches
//! without them. Retry-tier records are left alone unless asked.
//!
//! Runs on librdkafka's mock broker, or on a real cluster named by
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`: records are produced with `CreateTime`
//! in the past. Every wait has a deadline.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::failure::dead_letter::DeadLetterRecord;
use fresh_consumer::metrics::*;
use fresh_consumer::{
    Batch, BatchError, ConfigError, FreshConsumer, OnExhausted, Record,
    failure::{DeadLetter, OnStale, RetryTopics},
    slo::{FreshnessObjective, SloResult},
};

use support::handled::Seen;
use support::kafka::{TestCluster, now_ms, summary_committed, unique};
use support::logs;
use support::metrics::{partition_attrs, with};
use support::run::start;
use support::wait::{WAIT, wait_until};

const MINUTE_MS: i64 = 60_000;
/// The maximum record age of these tests.
const MAX_AGE: Duration = Duration::from_secs(600);

/// Ages (ms) of the records of the skip and write tests: offsets 0, 1 and 3
/// are stale (two runs: 0-1 and 3), 2, 4 and 5 fresh.
const AGES_MS: [i64; 6] = [
    20 * MINUTE_MS,
    15 * MINUTE_MS,
    1_000,
    30 * MINUTE_MS,
    2_000,
    0,
];
const STALE: [i64; 3] = [0, 1, 3];
const FRESH: [i64; 3] = [2, 4, 5];

/// Produces one record per age of `ages_ms` to partition 0 of `topic`
/// (payload `p-{offset}`), stamped that long ago.
async fn produce_aged(cluster: &TestCluster, topic: &str, ages_ms: &[i64]) {
    let now = now_ms();
    for (i, age) in ages_ms.iter().enumerate() {
        cluster
            .produce(
                topic,
                0,
                &format!("k-{i}"),
                &format!("p-{i}"),
                Some(now - age),
            )
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_records_are_skipped_counted_in_the_slo_and_committed_past() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("stale-skip", 1).await;
    produce_aged(&cluster, &topic, &AGES_MS).await;
    let metrics = TestMetrics::new();
    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, seen.recorder())
        .max_record_age(MAX_AGE, OnStale::Skip)
        .freshness_objective(FreshnessObjective::new(Duration::from_secs(30), 0.99))
        .meter_provider(metrics.provider());
    let run = start(consumer);
    cluster.wait_committed(&group, &topic, &[6]).await;
    let snapshot = run.health.snapshot();
    let summary = run.stop().await;

    assert_eq!(seen.of(0), FRESH, "the handler never saw a stale record");
    assert_eq!(summary.records_stale, 3, "{summary:?}");
    assert_eq!(summary.records_succeeded, 3, "{summary:?}");
    assert_eq!(summary.records_skipped, 0, "{summary:?}");
    assert_eq!(summary_committed(&summary, &topic, 1), [Some(6)]);
    // In process, a stale record is bad: 3 good, 3 stale.
    let o = &snapshot.objectives[0];
    assert_eq!((o.short.good, o.short.bad), (3, 3), "{snapshot}");

    metrics.flush().await.expect("flush the metrics");
    let base = partition_attrs(&topic, 0, &group);
    assert_eq!(
        metrics.counter_total(STALE_MESSAGES, &with(&base, &[(STALE_ACTION, "skip")])),
        3.0
    );
    let slo = |result: SloResult| {
        metrics.counter_total(
            SLO_MESSAGES,
            &with(
                &base,
                &[(SLO_THRESHOLD, "30"), (SLO_RESULT, result.as_str())],
            ),
        )
    };
    assert_eq!(slo(SloResult::Stale), 3.0);
    assert_eq!(slo(SloResult::Good), 3.0);
    assert_eq!(slo(SloResult::Late) + slo(SloResult::Skipped), 0.0);
    // No event age for a record the handler never saw.
    let age = with(&base, &[(TIMESTAMP_TYPE, "create_time")]);
    assert_eq!(metrics.histogram(EVENT_AGE, &age).count, 3);

    // Logged once per run of stale records: two runs, each with a start
    // and an end.
    let starts =
        logs::count(|e| e.mentions(&topic) && e.mentions("record older than max_record_age"));
    let ends = logs::count(|e| e.mentions(&topic) && e.mentions("run of stale records ended"));
    assert_eq!((starts, ends), (2, 2));
    let _ = metrics.shutdown().await;
}

/// Reads the records of `topic` (one partition) as dead-letter records.
async fn read_written(cluster: &TestCluster, topic: &str, n: usize) -> Vec<DeadLetterRecord> {
    wait_until(WAIT, &format!("{n} records in {topic}"), || async {
        cluster.high_watermarks(topic, 1).await == [n as i64]
    })
    .await;
    cluster
        .read_topic(topic, 1)
        .await
        .iter()
        .map(|r| DeadLetterRecord::from_record(r).expect("dead-letter headers"))
        .collect()
}

/// Asserts that `written` holds the stale records of the `AGES_MS` run of
/// `source`, in offset order, with the dead-letter headers of a stale
/// record.
fn assert_stale_written(written: &[DeadLetterRecord], source: &str, group: &str) {
    let offsets: Vec<i64> = written.iter().map(|d| d.offset).collect();
    assert_eq!(offsets, STALE);
    for d in written {
        assert_eq!(d.topic, source);
        assert_eq!(d.group.as_deref(), Some(group));
        assert_eq!(d.attempts, Some(0));
        assert_eq!(d.error_type.as_deref(), Some("stale"));
        assert!(
            d.error_message
                .as_deref()
                .is_some_and(|m| m.contains("above max_record_age")),
            "{d:?}"
        );
        assert_eq!(
            d.payload.as_deref(),
            Some(format!("p-{}", d.offset).as_bytes())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_records_go_to_the_dead_letter_topic_without_the_handler() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("stale-dlt", 1).await;
    // The exhausted-record policy's dead-letter topic and producer are
    // shared.
    let dlt = unique("stale-dlt-parked");
    cluster.create_topic(&dlt, 1).await;
    produce_aged(&cluster, &topic, &AGES_MS).await;
    let metrics = TestMetrics::new();
    let seen = Seen::default();
    let consumer = cluster
        .consumer(&group, &topic, seen.recorder())
        .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new().topic(&dlt)))
        .max_record_age(MAX_AGE, OnStale::DeadLetter)
        .meter_provider(metrics.provider());
    let run = start(consumer);
    cluster.wait_committed(&group, &topic, &[6]).await;
    let summary = run.stop().await;

    assert_eq!(seen.of(0), FRESH);
    assert_eq!(summary.records_stale, 3, "{summary:?}");
    assert_eq!(summary.records_dead_lettered, 0, "{summary:?}");
    assert_stale_written(&read_written(&cluster, &dlt, 3).await, &topic, &group);

    metrics.flush().await.expect("flush the metrics");
    let base = partition_attrs(&topic, 0, &group);
    assert_eq!(
        metrics.counter_total(
            STALE_MESSAGES,
            &with(&base, &[(STALE_ACTION, "dead_letter")])
        ),
        3.0
    );
    // Not counted as dead-lettered after failing: the handler never failed.
    assert_eq!(metrics.counter_total(DEAD_LETTER_MESSAGES, &base), 0.0);
    let sent = [
        (MESSAGING_DESTINATION_NAME, dlt.as_str()),
        (MESSAGING_OPERATION_NAME, "send"),
    ];
    assert_eq!(
        metrics.counter_total(SENT_MESSAGES, &with(&Default::default(), &sent)),
        3.0
    );
    let _ = metrics.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_records_go_to_a_topic_of_their_own() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("stale-topic", 1).await;
    let stale_topic = format!("{topic}.stale");
    cluster.create_topic(&stale_topic, 1).await;
    produce_aged(&cluster, &topic, &AGES_MS).await;
    let seen = Seen::default();
    // No dead-letter policy: the stale records get a producer of their own.
    let consumer = cluster
        .consumer(&group, &topic, seen.recorder())
        .max_record_age(MAX_AGE, OnStale::Topic(stale_topic.clone()));
    let run = start(consumer);
    cluster.wait_committed(&group, &topic, &[6]).await;
    let summary = run.stop().await;

    assert_eq!(seen.of(0), FRESH);
    assert_eq!(summary.records_stale, 3, "{summary:?}");
    assert_stale_written(
        &read_written(&cluster, &stale_topic, 3).await,
        &topic,
        &group,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handler_never_sees_stale_records() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("stale-batch", 1).await;
    // Stale: 0, 3, 4 and 9 (the first, a run inside, the last).
    let old = 45 * MINUTE_MS;
    let ages = [old, 0, 0, old, old, 0, 0, 0, 0, old];
    produce_aged(&cluster, &topic, &ages).await;
    let batches: Arc<Mutex<Vec<Vec<i64>>>> = Arc::default();
    let b = Arc::clone(&batches);
    let consumer = cluster
        .batched(&group, &topic, move |batch: Batch| {
            b.lock()
                .unwrap()
                .push(batch.iter().map(Record::offset).collect());
            std::future::ready(Ok::<(), BatchError>(()))
        })
        .max_record_age(MAX_AGE, OnStale::Skip);
    let run = start(consumer);
    cluster.wait_committed(&group, &topic, &[10]).await;
    let summary = run.stop().await;

    let batches = batches.lock().unwrap().clone();
    let handled: Vec<i64> = batches.iter().flatten().copied().collect();
    assert_eq!(handled, [1, 2, 5, 6, 7, 8], "batches: {batches:?}");
    assert!(batches.iter().all(|b| !b.is_empty()), "{batches:?}");
    assert_eq!(summary.records_stale, 4, "{summary:?}");
    assert_eq!(summary.records_succeeded, 6, "{summary:?}");
    assert_eq!(summary_committed(&summary, &topic, 1), [Some(10)]);
}

/// One record through a retry tier: its first attempt (fresh) fails, and it
/// is read back from the tier after the tier's delay, older than the
/// maximum age by then. Returns the handler's calls (offsets and topics)
/// and the run summary.
async fn through_a_tier(prefix: &str, check_tiers: bool) -> (Vec<String>, u64) {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic(prefix, 1).await;
    let group = unique(&format!("g-{prefix}"));
    let policy = RetryTopics::new([Duration::from_secs(3)]).in_place_retries(0);
    cluster.create_topic(&format!("{topic}.retry.3s"), 1).await;
    cluster.create_topic(&format!("{topic}.dlt"), 1).await;
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let c = Arc::clone(&calls);
    let consumer = cluster
        .consumer(&group, &topic, move |r: Record| {
            let mut calls = c.lock().unwrap();
            calls.push(r.topic().to_owned());
            let first = calls.len() == 1;
            std::future::ready(if first {
                Err::<(), _>(std::io::Error::other("first attempt fails"))
            } else {
                Ok(())
            })
        })
        .on_exhausted(OnExhausted::RetryTopics(policy))
        // Fresh at its first attempt (produced while the consumer runs),
        // stale when the tier hands it back 3 s later.
        .max_record_age(Duration::from_secs(2), OnStale::Skip)
        .stale_retry_tier_records(check_tiers);
    let health = consumer.health_handle();
    let run = start(consumer);
    wait_until(WAIT, "the source partition assigned", || async {
        health.snapshot().partition(&topic, 0).is_some()
    })
    .await;
    cluster.produce(&topic, 0, "k", "v", None).await;
    let tier = format!("{topic}.retry.3s");
    cluster.wait_committed(&group, &tier, &[1]).await;
    let summary = run.stop().await;
    let calls = calls.lock().unwrap().clone();
    (calls, summary.records_stale)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_tier_records_are_handled_however_old_unless_asked() {
    let (calls, stale) = through_a_tier("stale-tier-kept", false).await;
    assert_eq!(
        calls.len(),
        2,
        "attempted at the source and at the tier: {calls:?}"
    );
    assert!(calls[1].ends_with(".retry.3s"), "{calls:?}");
    assert_eq!(stale, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_tier_records_are_shed_when_asked() {
    let (calls, stale) = through_a_tier("stale-tier-shed", true).await;
    assert_eq!(calls.len(), 1, "attempted at the source only: {calls:?}");
    assert_eq!(stale, 1);
}

#[test]
fn bad_stale_settings_are_config_errors() {
    let base = || {
        FreshConsumer::new(|_r: Record| std::future::ready(Ok::<(), std::io::Error>(())))
            .bootstrap_servers("127.0.0.1:1")
            .group_id("g")
            .topics(["orders"])
    };
    let option = |c: FreshConsumer<_>| match c.validate() {
        Err(ConfigError::InvalidOption { option, reason }) => (option, reason),
        other => panic!("not an invalid option: {other:?}"),
    };
    let (o, reason) = option(base().max_record_age(Duration::ZERO, OnStale::Skip));
    assert_eq!(o, "max_record_age");
    assert_eq!(reason, "the maximum age must be at least 1 ms");
    assert_eq!(
        option(base().max_record_age(Duration::from_secs(1), OnStale::Topic(String::new()))).0,
        "max_record_age"
    );
    let (o, reason) =
        option(base().max_record_age(Duration::from_secs(1), OnStale::Topic("orders".into())));
    assert_eq!(o, "max_record_age");
    assert!(reason.contains("subscribed"), "{reason}");
    assert_eq!(
        option(
            base()
                .read_headers(false)
                .max_record_age(Duration::from_secs(1), OnStale::DeadLetter)
        )
        .0,
        "read_headers"
    );
    base()
        .read_headers(false)
        .max_record_age(Duration::from_millis(1), OnStale::Skip)
        .validate()
        .expect("skipping needs no headers");
}
