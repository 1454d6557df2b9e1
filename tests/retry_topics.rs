//! Non-blocking retry topics (issue 14) on a Kafka broker: a failing record
//! moves through delay tiers while its source partition goes on, is handled
//! no earlier than each tier's due time, reaches the dead-letter topic with
//! its tier history after the last tier (at once for a permanent error),
//! loses nothing when the republish fails or the consumer restarts while it
//! waits, and its event age counts from its original time.
//!
//! Runs on librdkafka's mock broker, or on a real cluster named by
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`; the test that injects produce errors
//! needs the mock and skips itself on a real cluster. Waits are deadlines;
//! due times are checked against the timestamps the library wrote, never
//! against a timed sleep.

mod support;

use fresh_consumer::testing::TestMetrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::failure::dead_letter::{self as dlt, DeadLetterRecord};
use fresh_consumer::metrics::*;
use fresh_consumer::{
    OnExhausted, Record, RecordTimestamp,
    failure::{DeadLetter, DeadLetterHeaders, RetryTopics},
    permanent,
};
use rdkafka::types::RDKafkaApiKey;
use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS;

use support::dead_letters;
use support::kafka::{TestCluster, now_ms, unique};
use support::metrics::{partition_attrs, with};
use support::run::start;
use support::wait::{WAIT, wait_until};

/// One handler call: where the record was read, its payload, the wall
/// clock (ms since the Unix epoch) when the attempt started, and whether it
/// succeeded.
#[derive(Clone, Debug)]
struct Call {
    topic: String,
    offset: i64,
    payload: String,
    at_ms: i64,
    ok: bool,
}

/// Every handler call, in order.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    /// A handler that records each call and fails when `fail(payload, n)`
    /// (n: the call's number for that payload, from 1) says so.
    fn handler(
        &self,
        fail: impl Fn(&str, usize) -> Option<fresh_consumer::BoxError> + Send + Sync + 'static,
    ) -> impl Fn(Record) -> std::future::Ready<Result<(), fresh_consumer::BoxError>>
    + Send
    + Sync
    + 'static {
        let calls = self.clone();
        move |r: Record| {
            let at_ms = now_ms();
            let payload = String::from_utf8_lossy(r.payload().unwrap_or_default()).into_owned();
            let mut c = calls.0.lock().unwrap();
            let n = c.iter().filter(|c| c.payload == payload).count() + 1;
            let result = fail(&payload, n);
            c.push(Call {
                topic: r.topic().to_owned(),
                offset: r.offset(),
                payload,
                at_ms,
                ok: result.is_none(),
            });
            std::future::ready(match result {
                None => Ok(()),
                Some(e) => Err(e),
            })
        }
    }

    fn of(&self, payload: &str) -> Vec<Call> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.payload == payload)
            .cloned()
            .collect()
    }

    fn all(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }
}

/// A cluster, a one-partition source topic with `n` records (payload
/// `p-{i}`, key `k-{i}`, CreateTime `base + i`), its tier topics and its
/// dead-letter topic (one partition each), and a group.
struct Setup {
    cluster: TestCluster,
    topic: String,
    tiers: Vec<String>,
    dlq: String,
    group: String,
    base: i64,
}

async fn setup(prefix: &str, n: i64, policy: &RetryTopics, base: i64) -> Setup {
    support::logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic(prefix, 1).await;
    let tiers: Vec<String> = (1..=policy.tiers())
        .map(|k| policy.tier_topic(&topic, k))
        .collect();
    for t in &tiers {
        cluster.create_topic(t, 1).await;
    }
    let dlq = format!("{topic}.dlt");
    cluster.create_topic(&dlq, 1).await;
    for i in 0..n {
        cluster
            .produce(
                &topic,
                0,
                &format!("k-{i}"),
                &format!("p-{i}"),
                Some(base + i),
            )
            .await;
    }
    let group = unique(&format!("g-{prefix}"));
    Setup {
        cluster,
        topic,
        tiers,
        dlq,
        group,
        base,
    }
}

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

fn text<'a>(r: &'a Record, name: &str) -> &'a str {
    std::str::from_utf8(r.header(name).flatten().unwrap_or_default()).unwrap()
}

fn num(r: &Record, name: &str) -> i64 {
    text(r, name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} in {r:?}"))
}

/// A tier record's write time: its timestamp, which the due time counts
/// from.
fn written_ms(r: &Record) -> i64 {
    match r.timestamp() {
        RecordTimestamp::CreateTime(ms) => ms,
        other => panic!("tier record timestamp {other:?}"),
    }
}

/// Asserts the attempt from `tier_topic` happened no earlier than the tier
/// record's due time, and that the due time is its write time plus `delay`.
fn assert_due_honoured(call: &Call, tier_record: &Record, delay: Duration) {
    let due = num(tier_record, dlt::RETRY_DUE);
    assert_eq!(
        due,
        written_ms(tier_record) + delay.as_millis() as i64,
        "due = write time + delay"
    );
    assert!(
        call.at_ms >= due,
        "attempted from {} at {} ms, before its due time {due} ms",
        call.topic,
        call.at_ms
    );
    eprintln!(
        "{}: attempted {} ms after its due time (delay {delay:?})",
        call.topic,
        call.at_ms - due
    );
}

/// A poison record at offset 3 of 20 with tiers of 1 s and 2 s: the
/// partition's later records are all handled before it leaves tier 1; it
/// is attempted at or after each due time; it lands in the dead-letter
/// topic exactly once with its origin, three attempts and the tier history;
/// and the committed offsets of the source and both tier topics reach their
/// high watermarks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_record_passes_both_tiers_to_the_dead_letter_topic_without_holding_its_partition()
{
    const POISON: i64 = 3;
    let policy = RetryTopics::new([ms(1000), ms(2000)]);
    let s = setup("rt-poison", 20, &policy, now_ms() - 60_000).await;
    let calls = Calls::default();
    let handler = calls.handler(|p, _| (p == "p-3").then(|| "always fails".into()));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy.clone())),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[20]).await;
    for t in &s.tiers {
        s.cluster.wait_committed(&s.group, t, &[1]).await;
    }
    s.cluster.wait_committed(&s.group, &s.dlq, &[-1001]).await;
    wait_until(WAIT, "the dead-letter write", || async {
        s.cluster.high_watermarks(&s.dlq, 1).await == vec![1]
    })
    .await;
    let summary = run.stop().await;

    let poison = calls.of("p-3");
    assert_eq!(
        poison.iter().map(|c| c.topic.as_str()).collect::<Vec<_>>(),
        [s.topic.as_str(), &s.tiers[0], &s.tiers[1]],
        "one attempt on the source and one per tier: {poison:?}"
    );
    // Later records of the source partition did not wait for the poison.
    let all = calls.all();
    let later: Vec<&Call> = all
        .iter()
        .filter(|c| c.topic == s.topic && c.offset > POISON)
        .collect();
    assert_eq!(later.len(), 16);
    assert!(
        later.iter().all(|c| c.ok && c.at_ms <= poison[1].at_ms),
        "every later record was handled before the poison left tier 1"
    );
    let tier1 = s.cluster.read_topic(&s.tiers[0], 1).await;
    let tier2 = s.cluster.read_topic(&s.tiers[1], 1).await;
    assert_eq!((tier1.len(), tier2.len()), (1, 1));
    assert_due_honoured(&poison[1], &tier1[0], ms(1000));
    assert_due_honoured(&poison[2], &tier2[0], ms(2000));
    // The tier records describe the original record.
    for (k, r) in [(1, &tier1[0]), (2, &tier2[0])] {
        let d = DeadLetterRecord::from_record(r).unwrap();
        assert_eq!(
            (d.topic.as_str(), d.partition, d.offset),
            (s.topic.as_str(), 0, POISON)
        );
        assert_eq!(d.timestamp, RecordTimestamp::CreateTime(s.base + POISON));
        assert_eq!(d.retry_tier, Some(k));
        assert_eq!(d.attempts, Some(k));
        assert_eq!(d.key.as_deref(), Some(&b"k-3"[..]));
    }

    let parked = s.cluster.read_topic(&s.dlq, 1).await;
    assert_eq!(parked.len(), 1, "dead-lettered exactly once: {parked:?}");
    let d = DeadLetterRecord::from_record(&parked[0]).unwrap();
    assert_eq!(
        (d.topic.as_str(), d.partition, d.offset),
        (s.topic.as_str(), 0, POISON)
    );
    assert_eq!(d.timestamp, RecordTimestamp::CreateTime(s.base + POISON));
    assert_eq!(d.group.as_deref(), Some(s.group.as_str()));
    assert_eq!(d.attempts, Some(3));
    assert_eq!(d.error_type.as_deref(), Some("handler_error"));
    assert_eq!(d.error_message.as_deref(), Some("always fails"));
    assert_eq!(d.retry_tier, None);
    assert_eq!(d.payload.as_deref(), Some(&b"p-3"[..]));
    assert!(
        d.headers.is_empty(),
        "no library header left: {:?}",
        d.headers
    );
    let stops: Vec<&str> = d.history.iter().map(|h| h.topic.as_str()).collect();
    assert_eq!(stops, [s.topic.as_str(), &s.tiers[0], &s.tiers[1]]);
    assert!(d.history.iter().all(|h| h.error_type == "handler_error"));
    assert!(
        d.history
            .windows(2)
            .all(|w| w[0].failed_at_ms <= w[1].failed_at_ms),
        "{:?}",
        d.history
    );

    // Offsets reach the high watermarks.
    assert_eq!(s.cluster.high_watermarks(&s.topic, 1).await, vec![20]);
    assert_eq!(s.cluster.committed(&s.group, &s.topic, 1).await, vec![20]);
    for t in &s.tiers {
        assert_eq!(s.cluster.committed(&s.group, t, 1).await, vec![1]);
    }
    assert_eq!(summary.records_succeeded, 19);
    assert_eq!(summary.records_retried, 2);
    assert_eq!(summary.records_dead_lettered, 1);
    // Each receipt ends in one counter: 20 source records, 2 tier records.
    assert_eq!(summary.records_received, 22);

    // The redrive tool reads the parked record back to its source topic,
    // with the original key, payload and timestamp, and none of the
    // library's headers.
    let producer = dead_letters::producer(s.cluster.bootstrap()).unwrap();
    dead_letters::republish(&producer, &d).await.unwrap();
    let source = s.cluster.read_topic(&s.topic, 1).await;
    let redriven = source.last().unwrap();
    assert_eq!(redriven.offset(), 20);
    assert_eq!(redriven.payload(), Some(&b"p-3"[..]));
    assert_eq!(
        redriven.timestamp(),
        RecordTimestamp::CreateTime(s.base + POISON)
    );
    assert!(redriven.headers().is_empty(), "{:?}", redriven.headers());
}

/// A record that fails once and succeeds in tier 1 is handled twice in
/// total and never reaches tier 2 or the dead-letter topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_succeeds_in_tier_1_never_reaches_tier_2() {
    let policy = RetryTopics::new([ms(300), ms(600)]);
    let s = setup("rt-once", 5, &policy, now_ms() - 60_000).await;
    let calls = Calls::default();
    let handler = calls.handler(|p, n| (p == "p-2" && n == 1).then(|| "flaky".into()));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy)),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[5]).await;
    s.cluster.wait_committed(&s.group, &s.tiers[0], &[1]).await;
    let summary = run.stop().await;
    let p2 = calls.of("p-2");
    assert_eq!(p2.len(), 2, "{p2:?}");
    assert_eq!(p2[1].topic, s.tiers[0]);
    assert!(p2[1].ok);
    assert_eq!(s.cluster.high_watermarks(&s.tiers[1], 1).await, vec![0]);
    assert_eq!(s.cluster.high_watermarks(&s.dlq, 1).await, vec![0]);
    assert_eq!(summary.records_succeeded, 5);
    assert_eq!(summary.records_dead_lettered, 0);
}

/// A `permanent` error skips the tiers: straight to the dead-letter topic,
/// after one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_goes_straight_to_the_dead_letter_topic() {
    let policy = RetryTopics::new([ms(300)]).in_place_retries(3);
    let s = setup("rt-permanent", 4, &policy, now_ms() - 60_000).await;
    let calls = Calls::default();
    let handler = calls.handler(|p, _| (p == "p-1").then(|| permanent("malformed")));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy)),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[4]).await;
    run.stop().await;
    assert_eq!(calls.of("p-1").len(), 1, "a permanent error is not retried");
    assert_eq!(s.cluster.high_watermarks(&s.tiers[0], 1).await, vec![0]);
    let parked = s.cluster.read_topic(&s.dlq, 1).await;
    assert_eq!(parked.len(), 1);
    let d = DeadLetterRecord::from_record(&parked[0]).unwrap();
    assert_eq!((d.offset, d.attempts), (1, Some(1)));
    assert_eq!(d.error_type.as_deref(), Some("permanent"));
    assert!(d.history.is_empty(), "{:?}", d.history);
}

/// In-place retries come first: with 2 of them a record that fails three
/// times on its source and then succeeds never goes to a tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_retries_come_before_the_first_tier() {
    let policy = RetryTopics::new([ms(300)]).in_place_retries(2);
    let s = setup("rt-inplace", 3, &policy, now_ms() - 60_000).await;
    let calls = Calls::default();
    let handler = calls.handler(|p, n| (p == "p-0" && n <= 2).then(|| "flaky".into()));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy)),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[3]).await;
    run.stop().await;
    let p0 = calls.of("p-0");
    assert_eq!(p0.len(), 3);
    assert!(p0.iter().all(|c| c.topic == s.topic));
    assert_eq!(s.cluster.high_watermarks(&s.tiers[0], 1).await, vec![0]);
}

/// The event age of a record handled in tier 2 counts from its original
/// timestamp: at least the sum of the tier delays, recorded under the tier
/// partition's attributes (with `fresh_consumer.retry.tier` = 2); the tier
/// writes are counted per tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_age_of_a_retried_record_counts_from_its_original_time() {
    let delays = [ms(500), ms(1000)];
    let policy = RetryTopics::new(delays);
    // Stamped now: only the tiers make it old.
    let s = setup("rt-age", 1, &policy, now_ms()).await;
    let calls = Calls::default();
    let handler = calls.handler(|_, n| (n <= 2).then(|| "not yet".into()));
    let metrics = TestMetrics::new();
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy))
            .meter_provider(metrics.provider()),
    );
    s.cluster.wait_committed(&s.group, &s.tiers[1], &[1]).await;
    run.stop().await;
    metrics.flush().await.expect("flush the metrics");
    let c = calls.of("p-0");
    assert_eq!(c.len(), 3);
    assert_eq!(c[2].topic, s.tiers[1]);
    let tier2 = with(
        &partition_attrs(&s.tiers[1], 0, &s.group),
        &[(TIMESTAMP_TYPE, "create_time"), (RETRY_TIER, "2")],
    );
    let ages = metrics.histogram(EVENT_AGE, &tier2);
    let (max, count) = (ages.max, ages.count);
    assert_eq!(count, 1);
    let age = max.unwrap();
    let sum: f64 = delays.iter().map(Duration::as_secs_f64).sum();
    eprintln!("event age of the record handled in tier 2: {age:.3} s (delays sum {sum} s)");
    assert!(age >= sum, "age {age} s < the tier delays' sum {sum} s");
    let source = partition_attrs(&s.topic, 0, &s.group);
    // Moved from tier 1 (where it failed) to tier 2.
    let tier1 = partition_attrs(&s.tiers[0], 0, &s.group);
    assert_eq!(
        metrics.counter_total(RETRY_MESSAGES, &with(&source, &[(RETRY_TIER, "1")])),
        1.0
    );
    assert_eq!(
        metrics.counter_total(RETRY_MESSAGES, &with(&tier1, &[(RETRY_TIER, "2")])),
        1.0
    );
    let _ = metrics.shutdown().await;
}

/// Spring Kafka's `kafka_dlt-original-*` headers on a source record (a
/// record redriven from a Spring dead-letter topic, or forged) do not change
/// its origin under the native header style (issue 31, item 8). `p-0`
/// carries a lone `kafka_dlt-original-topic`, `p-1` a complete forged
/// Spring set naming another topic, partition, offset and time; both fail
/// through the tier to the dead-letter topic; `p-2` (a lone header too)
/// fails permanently and goes straight there; `p-3` and `p-4` (like `p-0`
/// and `p-1`) fail once and succeed from the tier. Every tier and
/// dead-letter record names the source record (topic, partition, offset,
/// timestamp), reads back in the native style and with the redrive tool's
/// reading, lists the source and the tier as its stops, and keeps the
/// foreign headers as the user's, once; the event age of the records handled
/// from the tier counts from their source timestamps, an hour ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_headers_on_a_source_record_do_not_change_its_origin_under_native_headers() {
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};

    let policy = RetryTopics::new([ms(300)]);
    let base = now_ms() - 3_600_000;
    let s = setup("rt-foreign", 0, &policy, base).await;
    let forged_ts = (base - 86_400_000).to_be_bytes();
    let (partition, offset) = (7i32.to_be_bytes(), 999i64.to_be_bytes());
    let lone: Vec<(&str, Option<&[u8]>)> = vec![(dlt::SPRING_TOPIC, Some(b"spring.orders"))];
    let forged: Vec<(&str, Option<&[u8]>)> = vec![
        (dlt::SPRING_TOPIC, Some(b"elsewhere")),
        (dlt::SPRING_PARTITION, Some(&partition)),
        (dlt::SPRING_OFFSET, Some(&offset)),
        (dlt::SPRING_TIMESTAMP, Some(&forged_ts)),
        (dlt::SPRING_TIMESTAMP_TYPE, Some(b"CREATE_TIME")),
    ];
    let sent = [&lone, &forged, &lone, &lone, &forged];
    for (i, headers) in sent.iter().enumerate() {
        s.cluster
            .produce_with_headers(
                &s.topic,
                0,
                &format!("k-{i}"),
                &format!("p-{i}"),
                Some(base + i as i64),
                headers,
            )
            .await;
    }
    let calls = Calls::default();
    let handler = calls.handler(|p, n| match p {
        "p-0" | "p-1" => Some("always fails".into()),
        "p-2" => Some(permanent("malformed")),
        _ => (n == 1).then(|| "fails once".into()),
    });
    let metrics = TestMetrics::new();
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy))
            .meter_provider(metrics.provider()),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[5]).await;
    s.cluster.wait_committed(&s.group, &s.tiers[0], &[4]).await;
    wait_until(WAIT, "three dead-letter writes", || async {
        s.cluster.high_watermarks(&s.dlq, 1).await == vec![3]
    })
    .await;
    run.stop().await;
    metrics.flush().await.expect("flush the metrics");

    let index = |r: &Record| -> usize {
        String::from_utf8_lossy(r.payload().unwrap())[2..]
            .parse()
            .unwrap()
    };
    let source_of = |i: usize| {
        (
            s.topic.clone(),
            0,
            i as i64,
            RecordTimestamp::CreateTime(base + i as i64),
        )
    };
    let origin = |d: &DeadLetterRecord| (d.topic.clone(), d.partition, d.offset, d.timestamp);
    let tier = s.cluster.read_topic(&s.tiers[0], 1).await;
    assert_eq!(tier.len(), 4, "{tier:?}");
    let parked = s.cluster.read_topic(&s.dlq, 1).await;
    assert_eq!(parked.len(), 3, "{parked:?}");
    for r in tier.iter().chain(&parked) {
        let i = index(r);
        let what = format!("p-{i} in {}", r.topic());
        let d = DeadLetterRecord::from_record(r).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(origin(&d), source_of(i), "{what}: {r:?}");
        let native = DeadLetterRecord::from_record_with(r, DeadLetterHeaders::Native)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(origin(&native), source_of(i), "{what}");
        let own: Vec<(String, Option<Vec<u8>>)> = d
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let expected: Vec<(String, Option<Vec<u8>>)> = sent[i]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(
            own, expected,
            "{what}: the foreign headers are the user's, once"
        );
        assert_eq!(
            r.headers().iter().filter(|h| h.name == dlt::TOPIC).count(),
            1,
            "{what}: one source topic header"
        );
        if r.topic() == s.dlq {
            let stops: Vec<&str> = d.history.iter().map(|h| h.topic.as_str()).collect();
            if i == 2 {
                assert!(stops.is_empty(), "{what}: {stops:?}");
                assert_eq!(d.attempts, Some(1), "{what}");
            } else {
                assert_eq!(stops, [s.topic.as_str(), &s.tiers[0]], "{what}");
                assert_eq!(d.attempts, Some(2), "{what}");
            }
        }
    }

    // The records handled from the tier are an hour old: not the tier write's age (under a
    // second), nor the forged timestamp's (a day more).
    let wanted = with(
        &partition_attrs(&s.tiers[0], 0, &s.group),
        &[(TIMESTAMP_TYPE, "create_time"), (RETRY_TIER, "1")],
    );
    let (min, max, count) = metrics
        .metric(EVENT_AGE, |m| {
            let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
                panic!("{EVENT_AGE} is not an f64 histogram");
            };
            let p = h
                .data_points()
                .find(|p| {
                    p.attributes()
                        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                        .collect::<support::metrics::Attrs>()
                        == wanted
                })
                .expect("the tier partition's event age");
            (p.min().unwrap(), p.max().unwrap(), p.count())
        })
        .expect("event age exported");
    eprintln!("event age in the tier: {min:.1} .. {max:.1} s over {count} records");
    assert_eq!(count, 2);
    assert!(
        (3_600.0..3_900.0).contains(&min) && (3_600.0..3_900.0).contains(&max),
        "event age {min:.1} .. {max:.1} s, want about 3,600 s"
    );
    let _ = metrics.shutdown().await;
}

/// Every Produce request is refused while the poison record is to be moved
/// to tier 1: the source partition stays committed at the record (nothing
/// lost), and once writes are accepted the record moves on and is handled
/// from the tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_republish_loses_nothing() {
    const POISON: i64 = 2;
    let policy = RetryTopics::new([ms(200)])
        .dead_letter(DeadLetter::new().producer_property("message.timeout.ms", "300"));
    let s = setup("rt-down", 6, &policy, now_ms() - 60_000).await;
    let Some(mock) = s.cluster.mock_or_skip("the mock broker") else {
        return;
    };
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 10_000],
    );
    let calls = Calls::default();
    let handler = calls.handler(|p, n| (p == "p-2" && n == 1).then(|| "once".into()));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy)),
    );
    s.cluster
        .wait_committed(&s.group, &s.topic, &[POISON])
        .await;
    wait_until(WAIT, "a failed tier write logged", || async {
        support::logs::lines_with(&s.topic)
            .iter()
            .any(|l| l.contains("writing to the retry tier failed"))
    })
    .await;
    assert_eq!(
        s.cluster.committed(&s.group, &s.topic, 1).await,
        vec![POISON]
    );
    assert_eq!(s.cluster.high_watermarks(&s.tiers[0], 1).await, vec![0]);
    mock.clear_request_errors(RDKafkaApiKey::Produce);
    s.cluster.wait_committed(&s.group, &s.topic, &[6]).await;
    s.cluster.wait_committed(&s.group, &s.tiers[0], &[1]).await;
    run.stop().await;
    let p2 = calls.of("p-2");
    assert_eq!(p2.len(), 2, "{p2:?}");
    assert!(p2[1].ok && p2[1].topic == s.tiers[0]);
    assert_eq!(s.cluster.read_topic(&s.tiers[0], 1).await.len(), 1);
}

/// The consumer stops while records wait in a tier (their due time is
/// seconds away) and starts again in the same group: every record is handled
/// at least once, and none from the tier before its due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_waiting_in_a_tier_survive_a_restart() {
    let delay = ms(2500);
    let policy = RetryTopics::new([delay]);
    let s = setup("rt-restart", 5, &policy, now_ms() - 60_000).await;
    let calls = Calls::default();
    // Every record fails on the source (its first call), and succeeds
    // from the tier.
    let handler = {
        let topic = s.topic.clone();
        calls.handler(move |_, n| (n == 1).then(|| format!("fails on {topic}").into()))
    };
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy.clone())),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[5]).await;
    wait_until(WAIT, "five records in the tier", || async {
        s.cluster.high_watermarks(&s.tiers[0], 1).await == vec![5]
    })
    .await;
    run.stop().await;
    let handled_before = calls.all().iter().filter(|c| c.topic == s.tiers[0]).count();
    eprintln!("tier records handled before the restart: {handled_before}");

    let handler = calls.handler(|_, n| (n == 1).then(|| "unreachable".into()));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .on_exhausted(OnExhausted::RetryTopics(policy)),
    );
    s.cluster.wait_committed(&s.group, &s.tiers[0], &[5]).await;
    run.stop().await;
    let tier = s.cluster.read_topic(&s.tiers[0], 1).await;
    assert_eq!(tier.len(), 5);
    for r in &tier {
        let p = String::from_utf8_lossy(r.payload().unwrap()).into_owned();
        let from_tier: Vec<Call> = calls
            .of(&p)
            .into_iter()
            .filter(|c| c.topic == s.tiers[0])
            .collect();
        assert!(!from_tier.is_empty(), "{p} handled from the tier");
        assert!(from_tier.iter().any(|c| c.ok));
        for c in &from_tier {
            assert_due_honoured(c, r, delay);
        }
    }
}

/// The less-travelled paths: partitions handed over by the poll loop
/// (`split_partition_queues(false)`, where the poll loop's own pause for a
/// full buffer meets the tier's pause) and key order (several tier records
/// waiting at once, one pause for all of them). Ten records of five keys
/// fail once each; every one is handled from the tier no earlier than its
/// due time, and all offsets are committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_order_and_poll_loop_hand_over_honour_due_times() {
    let delay = ms(700);
    let policy = RetryTopics::new([delay]);
    let s = setup("rt-keys", 10, &policy, now_ms() - 60_000).await;
    let calls = Calls::default();
    let handler = calls.handler(|_, n| (n == 1).then(|| "first try fails".into()));
    let run = start(
        s.cluster
            .consumer(&s.group, &s.topic, handler)
            .split_partition_queues(false)
            .max_buffered_records(2)
            .processing_order(fresh_consumer::ProcessingOrder::Key { max_in_flight: 4 })
            .on_exhausted(OnExhausted::RetryTopics(policy)),
    );
    s.cluster.wait_committed(&s.group, &s.topic, &[10]).await;
    s.cluster.wait_committed(&s.group, &s.tiers[0], &[10]).await;
    run.stop().await;
    let tier = s.cluster.read_topic(&s.tiers[0], 1).await;
    assert_eq!(tier.len(), 10);
    for r in &tier {
        let p = String::from_utf8_lossy(r.payload().unwrap()).into_owned();
        let c = calls.of(&p);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[1].ok && c[1].topic == s.tiers[0]);
        assert_due_honoured(&c[1], r, delay);
    }
}

/// Where the crash test's child writes `payload topic` lines as its handler
/// succeeds.
const CHILD_OUT: &str = "FRESH_CHILD_OUT";

/// The consumer process of `a_crash_between_the_tier_write_and_the_commit_loses_nothing`
/// (a no-op when run as itself): retry topics with one 1 s tier; every
/// record fails on the source and succeeds from the tier; commits only at
/// shutdown (a 1 h interval), so a SIGKILL always lands between a tier
/// write and the source commit.
#[test]
fn retry_topics_child_consumer() {
    use std::io::Write;
    use support::child;
    let Some(target) = child::target() else {
        return;
    };
    support::logs::init();
    let out = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(child::var(CHILD_OUT))
            .expect("output file"),
    ));
    let source = target.topic.clone();
    let handler = move |r: Record| {
        let result = if r.topic() == source {
            Err(std::io::Error::other("fails on the source"))
        } else {
            let line = format!(
                "{} {}\n",
                String::from_utf8_lossy(r.payload().unwrap_or_default()),
                r.topic()
            );
            let mut f = out.lock().unwrap();
            f.write_all(line.as_bytes()).and_then(|()| f.flush())
        };
        std::future::ready(result)
    };
    let consumer = child::consumer(handler, &target)
        .commit_interval(Duration::from_secs(3600))
        .commit_batch_records(1_000_000)
        .on_exhausted(OnExhausted::RetryTopics(RetryTopics::new([ms(1000)])));
    let summary =
        child::block_on(consumer.run_until(child::stdin_closed())).expect("the child consumer ran");
    eprintln!("child summary: {summary:?}");
}

/// A consumer process is SIGKILLed after its records were written to the
/// tier (acknowledged) and before the source offsets were committed; a
/// second process in the same group handles every record (at least once:
/// the source records fail again and are written to the tier a second
/// time), and the source is committed to its end only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_tier_write_and_the_commit_loses_nothing() {
    use support::child::{self, ChildProcess};
    let policy = RetryTopics::new([ms(1000)]);
    let s = setup("rt-crash", 3, &policy, now_ms() - 60_000).await;
    let dir = std::env::temp_dir().join(unique("rt-crash"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("handled.out");
    let spawn = |name: &str| {
        let mut command = child::command(
            "retry_topics_child_consumer",
            &s.cluster,
            &s.group,
            &s.topic,
        );
        command.env(CHILD_OUT, &out);
        ChildProcess::spawn(name, &dir, command)
    };
    let mut first = spawn("first");
    wait_until(WAIT, "three records written to the tier", || async {
        s.cluster.high_watermarks(&s.tiers[0], 1).await == vec![3]
    })
    .await;
    first.assert_running();
    first.kill();
    assert_eq!(
        s.cluster.committed(&s.group, &s.topic, 1).await,
        vec![-1001],
        "the source was not committed before the crash"
    );

    let mut second = spawn("second");
    // Lines of `payload tier-topic`: one per tier record handled.
    let handled = || {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let mut payloads: Vec<String> = text
            .lines()
            .filter_map(|l| l.split(' ').next().map(str::to_owned))
            .collect();
        payloads.sort();
        payloads
    };
    // The source records fail again in the second process and are written
    // to the tier a second time; all six tier records are handled.
    wait_until(WAIT, "every tier record handled", || {
        let done = handled().len() >= 6;
        async move { done }
    })
    .await;
    let status = second.stop().await;
    assert!(status.success(), "{status}");
    assert_eq!(
        handled(),
        ["p-0", "p-0", "p-1", "p-1", "p-2", "p-2"],
        "each record handled once per tier copy: at least once"
    );
    assert_eq!(s.cluster.committed(&s.group, &s.topic, 1).await, vec![3]);
    assert_eq!(s.cluster.high_watermarks(&s.tiers[0], 1).await, vec![6]);
    assert_eq!(s.cluster.committed(&s.group, &s.tiers[0], 1).await, vec![6]);
    let _ = std::fs::remove_dir_all(&dir);
}
