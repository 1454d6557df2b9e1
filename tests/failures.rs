//! Failing records (issue 4) on a Kafka broker: bounded retries, the
//! dead-letter topic and its header contract (native and Spring Kafka names),
//! a dead-letter topic that cannot be written, the block and skip policies,
//! permanent errors, the storm guard, panics and handler timeouts as failed
//! attempts, the metrics over the wire, and redrive from the dead-letter topic
//! back to the source topic.
//!
//! Runs on librdkafka's mock broker, or on a real cluster named by
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`; tests that inject broker faults need the
//! mock and skip themselves on a real cluster. Waits are deadlines, never
//! fixed sleeps.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::{Ready, ready};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle as ThreadHandle;
use std::time::{Duration, Instant};

use fresh_consumer::failure::dead_letter::{self as dlt, DeadLetterRecord};
use fresh_consumer::metrics::*;
use fresh_consumer::{
    OnExhausted, Record, RecordTimestamp,
    failure::{DeadLetter, DeadLetterHeaders, RetryPolicy, StormGuard},
    permanent,
};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaApiKey;
use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS;

use support::dead_letters;
use support::handled::{Seen, with_state};
use support::kafka::{TestCluster, now_ms, unique};
use support::logs::{self, lines_with as log_lines_with};
use support::metrics::{Attrs, group_attrs, otlp_provider, partition_attrs, with};
use support::otlp_receiver::{
    OtlpReceiver, attrs, histogram_point_with, histogram_points, number_points,
};
use support::run::start;
use support::wait::{WAIT, wait_until};

const FLUSH: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Whether a captured log line mentioning `subject` contains every one of
/// `needles` (tests run concurrently: the subject is unique to the test).
fn logged(subject: &str, needles: &[&str]) -> bool {
    log_lines_with(subject)
        .iter()
        .any(|l| needles.iter().all(|n| l.contains(n)))
}

/// An OTLP receiver and a provider exporting to it every `interval`.
async fn wire(interval: Duration) -> (OtlpReceiver, SdkMeterProvider) {
    let receiver = OtlpReceiver::start().await;
    let provider = otlp_provider(&receiver, interval, "failures-test");
    (receiver, provider)
}

/// Handler calls per (partition, offset), and the succeeded offsets per
/// partition in the order they succeeded.
#[derive(Clone, Default)]
struct Calls {
    calls: Arc<Mutex<BTreeMap<(i32, i64), u32>>>,
    succeeded: Seen,
}

impl Calls {
    /// Counts a call and returns its number (1-based) for this record.
    fn call(&self, r: &Record) -> u32 {
        let mut c = self.calls.lock().unwrap();
        let n = c.entry((r.partition(), r.offset())).or_default();
        *n += 1;
        *n
    }
    fn ok(&self, r: &Record) {
        self.succeeded.push(r);
    }
    fn of(&self, partition: i32, offset: i64) -> u32 {
        self.calls
            .lock()
            .unwrap()
            .get(&(partition, offset))
            .copied()
            .unwrap_or(0)
    }
    fn succeeded(&self, partition: i32) -> Vec<i64> {
        self.succeeded.of(partition)
    }
    fn total_succeeded(&self) -> usize {
        self.succeeded.total()
    }

    /// A handler that counts every call and fails the attempts for which
    /// `fail` (given the record and the call's number) returns an error; the
    /// others succeed.
    fn handler<E>(
        &self,
        fail: impl Fn(&Record, u32) -> Option<E> + Send + Sync + 'static,
    ) -> impl Fn(Record) -> Ready<Result<(), E>> + Send + Sync + 'static {
        let calls = self.clone();
        move |r: Record| {
            let n = calls.call(&r);
            if let Some(e) = fail(&r, n) {
                return ready(Err(e));
            }
            calls.ok(&r);
            ready(Ok(()))
        }
    }
}

/// `max_attempts` attempts, with a backoff growing from `initial_ms` to
/// `max_ms` milliseconds between them.
fn retry_policy(max_attempts: u32, initial_ms: u64, max_ms: u64) -> RetryPolicy {
    RetryPolicy::new().max_attempts(max_attempts).backoff(
        Duration::from_millis(initial_ms),
        Duration::from_millis(max_ms),
    )
}

/// Fixed CreateTime of every produced record: offset `i` is stamped
/// `base + i`, so a dead-lettered record's timestamp header is known exactly.
fn base_timestamp() -> i64 {
    now_ms() - 60_000
}

fn key_of(p: i32, i: i64) -> String {
    format!("k{p}-{i}")
}

fn payload_of(p: i32, i: i64) -> String {
    format!("p{p}-{i}")
}

/// The headers the record at `with_headers` carries, to be found again,
/// unchanged, in its dead-letter copy and its redriven copy.
fn original_headers() -> Vec<(&'static str, Option<Vec<u8>>)> {
    vec![
        ("trace-id", Some(b"trace-4711".to_vec())),
        ("null-valued", None),
        ("binary", Some(vec![0, 255, 7])),
    ]
}

/// One test's cluster, source topic `{prefix}-…` of `partitions`
/// partitions holding `per_partition` [`produce_records`] records each,
/// dead-letter topic name `{topic}.dlt` (created with `dlq_partitions`
/// partitions if given), group `g-{prefix}-…` and the records' base
/// timestamp, in that order.
async fn setup(
    prefix: &str,
    partitions: i32,
    per_partition: i64,
    dlq_partitions: Option<i32>,
    with_headers: Option<(i32, i64)>,
) -> (TestCluster, String, String, String, i64) {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic(prefix, partitions).await;
    let dlq = format!("{topic}.dlt");
    if let Some(n) = dlq_partitions {
        cluster.create_topic(&dlq, n).await;
    }
    let group = unique(&format!("g-{prefix}"));
    let base = base_timestamp();
    produce_records(
        &cluster,
        &topic,
        partitions,
        per_partition,
        base,
        with_headers,
    )
    .await;
    (cluster, topic, dlq, group, base)
}

/// Produces `per_partition` records to each of `partitions` partitions: key
/// `k{p}-{i}`, payload `p{p}-{i}`, CreateTime `base + i`; the record at
/// `with_headers` also carries [`original_headers`]. All acknowledged on
/// return, at offsets `0..per_partition` of an empty topic.
async fn produce_records(
    cluster: &TestCluster,
    topic: &str,
    partitions: i32,
    per_partition: i64,
    base: i64,
    with_headers: Option<(i32, i64)>,
) {
    let mut pending = Vec::new();
    for p in 0..partitions {
        for i in 0..per_partition {
            let (key, payload) = (key_of(p, i), payload_of(p, i));
            let mut r = FutureRecord::to(topic)
                .partition(p)
                .key(&key)
                .payload(&payload)
                .timestamp(base + i);
            if with_headers == Some((p, i)) {
                let mut h = OwnedHeaders::new();
                for (name, value) in original_headers() {
                    h = h.insert(KafkaHeader {
                        key: name,
                        value: value.as_deref(),
                    });
                }
                r = r.headers(h);
            }
            pending.push((
                p,
                i,
                cluster
                    .producer()
                    .send_result(r)
                    .map_err(|(e, _)| e)
                    .expect("enqueue"),
            ));
        }
    }
    for (p, i, f) in pending {
        let d = f.await.expect("delivery").map_err(|(e, _)| e).expect("ack");
        assert_eq!(
            (d.partition, d.offset),
            (p, i),
            "records land at known offsets"
        );
    }
}

/// Sum of the high watermarks of `topic`'s partitions `0..partitions`.
async fn record_count(cluster: &TestCluster, topic: &str, partitions: i32) -> i64 {
    cluster
        .high_watermarks(topic, partitions)
        .await
        .iter()
        .sum()
}

/// One sample of a [`Sampler`]: when the committed-offset read returned, the
/// committed offsets it returned, and then (read after them) the number of
/// records in the watched topic (the dead-letter topic), if one is watched
/// and its read succeeded.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    committed: Vec<i64>,
    watched: Option<i64>,
}

/// Samples a group's committed offsets (and optionally the record count of a
/// second topic, read right after) continuously on a thread of its own.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: ThreadHandle<Vec<Sample>>,
}

impl Sampler {
    fn start(
        cluster: &TestCluster,
        group: &str,
        topic: &str,
        partitions: i32,
        watched: Option<(&str, i32)>,
    ) -> Self {
        let reader = cluster.offset_reader(group, topic, partitions);
        let bootstrap = cluster.bootstrap().to_owned();
        let watched = watched.map(|(t, n)| (t.to_owned(), n));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let wm: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .create()
                    .expect("watermark reader");
                let mut samples = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let Ok(committed) = reader.committed(Duration::from_secs(5)) else {
                        continue;
                    };
                    let at = Instant::now();
                    // `None` as well when a read failed: no claim either way.
                    let watched = watched.as_ref().and_then(|(t, n)| {
                        (0..*n)
                            .map(|p| {
                                wm.fetch_watermarks(t, p, Duration::from_secs(5))
                                    .map(|(_, hi)| hi)
                                    .ok()
                            })
                            .sum::<Option<i64>>()
                    });
                    samples.push(Sample {
                        at,
                        committed,
                        watched,
                    });
                    std::thread::sleep(Duration::from_millis(2));
                }
                samples
            })
        };
        Sampler { stop, thread }
    }

    fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().expect("sampler thread")
    }
}

fn process_attrs(base: &Attrs, error_type: Option<&str>) -> Attrs {
    let mut a = with(base, &[(MESSAGING_OPERATION_NAME, "process")]);
    if let Some(e) = error_type {
        a.insert(ERROR_TYPE.to_owned(), e.to_owned());
    }
    a
}

fn sent_attrs(dlq: &str) -> Attrs {
    attrs(&[
        (MESSAGING_SYSTEM, "kafka"),
        (MESSAGING_DESTINATION_NAME, dlq),
        (MESSAGING_OPERATION_NAME, "send"),
    ])
}

/// Event-age samples recorded for partition attributes `base` (all
/// timestamp types).
fn event_age_count(receiver: &OtlpReceiver, base: &Attrs) -> u64 {
    let Some(m) = receiver.latest_metric(EVENT_AGE) else {
        return 0;
    };
    histogram_points(&m)
        .0
        .iter()
        .filter(|p| base.iter().all(|(k, v)| p.attributes.get(k) == Some(v)))
        .map(|p| p.count)
        .sum()
}

fn text<'a>(r: &'a Record, name: &str) -> &'a str {
    let v = r
        .header(name)
        .unwrap_or_else(|| panic!("header {name} missing: {:?}", r.headers()))
        .unwrap_or_else(|| panic!("header {name} is null"));
    std::str::from_utf8(v).unwrap_or_else(|_| panic!("header {name} is not UTF-8"))
}

/// The headers of `r` that are not dead-letter headers, as (name, value).
fn non_dlt_headers(r: &Record) -> Vec<(String, Option<Vec<u8>>)> {
    r.headers()
        .iter()
        .filter(|h| !h.name.starts_with("fresh_consumer.dlt.") && !h.name.starts_with("kafka_dlt-"))
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect()
}

fn expected_original_headers() -> Vec<(String, Option<Vec<u8>>)> {
    original_headers()
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v))
        .collect()
}

// ---------------------------------------------------------------------------
// 1. A poison record is dead-lettered once, with its headers, and committed
//    past only after the dead-letter write was acknowledged
// ---------------------------------------------------------------------------

/// 3,000 records on 3 partitions; the record at partition 1, offset 386
/// always fails (a transient error), with 4 attempts and the dead-letter
/// policy. Exactly 4 handler calls for it and one for every other record;
/// exactly one dead-letter record, carrying every documented header, the
/// original key, payload and headers; committed offsets end at the high
/// watermarks. On the mock the first dead-letter writes are refused by the
/// broker (NOT_ENOUGH_REPLICAS, retried inside the producer), which holds the
/// acknowledgement back for a while: a sampler reading the committed offsets
/// and then the dead-letter topic's size never sees partition 1 committed
/// past 386 while the dead-letter topic is still empty, and does see it
/// held at 386 meanwhile. Over the wire: 3 retries, one dead-letter message
/// with the dead-letter topic attribute, one send to the dead-letter topic,
/// and no event age for the dead-lettered record.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poison_record_is_dead_lettered_once_and_committed_past_after_the_ack() {
    logs::init();
    const PER_PARTITION: i64 = 1_000;
    const POISON: (i32, i64) = (1, 386);
    let started_ms = now_ms();
    let (receiver, provider) = wire(Duration::from_secs(60)).await;
    let (cluster, topic, dlq, group, base) =
        setup("poison", 3, PER_PARTITION, Some(3), Some(POISON)).await;
    if let Some(mock) = cluster.mock() {
        // Refuse the first dead-letter writes; the idempotent producer
        // retries them (retry.backoff.ms 100 ms, doubling), so the
        // acknowledgement comes a few hundred milliseconds late.
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 3],
        );
    }

    let calls = Calls::default();
    let handler = calls.handler(|r, _| {
        if (r.partition(), r.offset()) == POISON {
            assert_eq!(r.key(), Some(key_of(1, 386).as_bytes()));
            return Some(std::io::Error::other("cannot parse order: unexpected '}'"));
        }
        None
    });
    let sampler = Sampler::start(&cluster, &group, &topic, 3, Some((&dlq, 3)));
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(retry_policy(4, 10, 50))
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
            .meter_provider(&provider),
    );
    let hw = vec![PER_PARTITION; 3];
    cluster.wait_committed(&group, &topic, &hw).await;
    let samples = sampler.finish();
    let summary = run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, FLUSH).await;

    // Handler calls: 4 for the poison record, 1 for every other.
    assert_eq!(calls.of(POISON.0, POISON.1), 4);
    {
        let c = calls.calls.lock().unwrap();
        assert_eq!(c.len(), 3 * PER_PARTITION as usize);
        let more: Vec<_> = c
            .iter()
            .filter(|(k, n)| **k != POISON && **n != 1)
            .collect();
        assert!(more.is_empty(), "records handled more than once: {more:?}");
    }
    for p in 0..3 {
        let want: Vec<i64> = (0..PER_PARTITION).filter(|&i| (p, i) != POISON).collect();
        assert_eq!(calls.succeeded(p), want, "partition {p}: in order, once");
    }
    assert_eq!(cluster.high_watermarks(&topic, 3).await, hw);
    assert_eq!(cluster.committed(&group, &topic, 3).await, hw);
    assert_eq!(summary.records_succeeded, 3 * PER_PARTITION as u64 - 1);
    assert_eq!(summary.failed_attempts, 4);

    // Exactly one dead-letter record, with the documented headers.
    let parked = cluster.read_topic(&dlq, 3).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    let d = &parked[0];
    assert_eq!(d.key(), Some(key_of(1, 386).as_bytes()));
    assert_eq!(d.payload(), Some(payload_of(1, 386).as_bytes()));
    assert_eq!(non_dlt_headers(d), expected_original_headers());
    assert_eq!(text(d, dlt::TOPIC), topic);
    assert_eq!(text(d, dlt::PARTITION), "1");
    assert_eq!(text(d, dlt::OFFSET), "386");
    assert_eq!(text(d, dlt::TIMESTAMP), (base + 386).to_string());
    assert_eq!(text(d, dlt::TIMESTAMP_TYPE), "create_time");
    assert_eq!(text(d, dlt::GROUP), group);
    assert_eq!(text(d, dlt::ATTEMPTS), "4");
    assert_eq!(text(d, dlt::ERROR_TYPE), "handler_error");
    assert_eq!(
        text(d, dlt::ERROR_MESSAGE),
        "cannot parse order: unexpected '}'"
    );
    let first: i64 = text(d, dlt::FIRST_FAILURE).parse().unwrap();
    let last: i64 = text(d, dlt::LAST_FAILURE).parse().unwrap();
    assert!(
        started_ms <= first && first <= last && last <= now_ms(),
        "failure times {first}..{last} outside the test ({started_ms}..)"
    );
    // Exactly the documented native headers, each once, after the originals.
    let names: Vec<&str> = d.headers().iter().map(|h| h.name.as_str()).collect();
    let dlt_names: Vec<&str> = names[original_headers().len()..].to_vec();
    let want: BTreeSet<&str> = [
        dlt::TOPIC,
        dlt::PARTITION,
        dlt::OFFSET,
        dlt::TIMESTAMP,
        dlt::TIMESTAMP_TYPE,
        dlt::GROUP,
        dlt::ATTEMPTS,
        dlt::ERROR_TYPE,
        dlt::ERROR_MESSAGE,
        dlt::FIRST_FAILURE,
        dlt::LAST_FAILURE,
    ]
    .into();
    assert_eq!(dlt_names.len(), want.len(), "{names:?}");
    assert_eq!(dlt_names.iter().copied().collect::<BTreeSet<_>>(), want);
    let back = DeadLetterRecord::from_record(d).expect("readable dead-letter record");
    assert_eq!(
        (back.topic.as_str(), back.partition, back.offset),
        (topic.as_str(), 1, 386)
    );
    assert_eq!(back.timestamp, RecordTimestamp::CreateTime(base + 386));
    assert_eq!(back.attempts, Some(4));

    // Committed past 386 only once the dead-letter record existed.
    let early: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.committed[1] > POISON.1 && s.watched == Some(0))
        .collect();
    assert!(
        early.is_empty(),
        "partition 1 committed past the poison record before it was dead-lettered: {:?}",
        early.first()
    );
    let held = samples
        .iter()
        .filter(|s| s.committed[1] == POISON.1 && s.watched == Some(0))
        .count();
    eprintln!(
        "{} samples; {held} with partition 1 held at {} before the dead-letter write",
        samples.len(),
        POISON.1
    );
    if cluster.mock().is_some() {
        assert!(
            held > 0,
            "the sampler never saw the commit held at the poison record while the write was refused"
        );
    }
    assert!(samples.iter().all(|s| s.committed[1] <= PER_PARTITION));

    // Over the wire.
    let p1 = partition_attrs(&topic, 1, &group);
    let retries = receiver.metric(HANDLER_RETRIES);
    assert_eq!(number_points(&retries), vec![(p1.clone(), 3.0)]);
    let dead = receiver.metric(DEAD_LETTER_MESSAGES);
    assert_eq!(
        number_points(&dead),
        vec![(with(&p1, &[(DEAD_LETTER_TOPIC, &dlq)]), 1.0)]
    );
    assert_eq!(dead.unit, "{message}");
    let sent = receiver.metric(SENT_MESSAGES);
    assert_eq!(number_points(&sent), vec![(sent_attrs(&dlq), 1.0)]);
    let process = receiver.metric(PROCESS_DURATION);
    assert_eq!(
        histogram_point_with(&process, &process_attrs(&p1, Some("handler_error"))).count,
        4
    );
    for p in 0..3 {
        let pa = partition_attrs(&topic, p, &group);
        let want = if p == 1 {
            PER_PARTITION - 1
        } else {
            PER_PARTITION
        };
        assert_eq!(
            event_age_count(&receiver, &pa),
            want as u64,
            "partition {p}: one event age per succeeded record, none for the dead-lettered one"
        );
    }
    assert!(receiver.latest_metric(SKIPPED_MESSAGES).is_none());
    assert!(
        receiver
            .point(PARTITION_BLOCKED, &p1)
            .is_none_or(|v| v == 0.0),
        "a dead-letter write acknowledged after producer-internal retries does not block"
    );
}

// ---------------------------------------------------------------------------
// 2. A dead-letter topic with fewer partitions than the source
// ---------------------------------------------------------------------------

/// The source has 4 partitions, the dead-letter topic (named explicitly) 1:
/// a poison record in each source partition lands in dead-letter partition 0
/// with its own source partition and offset in the headers, and every source
/// partition is committed to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_topic_with_fewer_partitions_than_the_source_works() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("narrow", 4).await;
    let dlq = unique("narrow-dlq");
    cluster.create_topic(&dlq, 1).await;
    produce_records(&cluster, &topic, 4, 20, base_timestamp(), None).await;

    let calls = Calls::default();
    let handler = calls.handler(|r, _| (r.offset() == 7).then(|| std::io::Error::other("poison")));
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(retry_policy(2, 5, 20))
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new().topic(&dlq))),
    );
    cluster.wait_committed(&group, &topic, &[20; 4]).await;
    run.stop().await;

    let parked = cluster.read_topic(&dlq, 1).await;
    assert_eq!(parked.len(), 4, "{parked:?}");
    let mut sources: Vec<(i32, i64)> = parked
        .iter()
        .map(|r| {
            assert_eq!(r.partition(), 0);
            let d = DeadLetterRecord::from_record(r).unwrap();
            assert_eq!(d.topic, topic);
            assert_eq!(d.key.as_deref(), Some(key_of(d.partition, 7).as_bytes()));
            assert_eq!(d.attempts, Some(2));
            (d.partition, d.offset)
        })
        .collect();
    sources.sort();
    assert_eq!(sources, vec![(0, 7), (1, 7), (2, 7), (3, 7)]);
    for p in 0..4 {
        assert_eq!(calls.of(p, 7), 2);
        assert_eq!(calls.succeeded(p).len(), 19);
    }
}

// ---------------------------------------------------------------------------
// 3. Spring Kafka header names round-trip through DeadLetterRecord
// ---------------------------------------------------------------------------

/// With `DeadLetterHeaders::SpringKafka` the source fields carry Spring's
/// names and binary encodings (partition 4 bytes, offset and timestamp 8
/// bytes big-endian); `DeadLetterRecord::from_record` reads them back, and the
/// original headers survive without the dead-letter ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spring_kafka_headers_round_trip_through_dead_letter_record() {
    let (cluster, topic, dlq, group, base) = setup("spring", 1, 5, Some(2), Some((0, 2))).await;

    let handler = |r: Record| async move {
        if r.offset() == 2 {
            return Err(std::io::Error::other("spring-style failure"));
        }
        Ok(())
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(retry_policy(2, 5, 20))
            .on_exhausted(OnExhausted::DeadLetter(
                DeadLetter::new().headers(DeadLetterHeaders::SpringKafka),
            )),
    );
    cluster.wait_committed(&group, &topic, &[5]).await;
    run.stop().await;

    let parked = cluster.read_topic(&dlq, 2).await;
    assert_eq!(parked.len(), 1);
    let r = &parked[0];
    let raw = |name: &str| r.header(name).flatten().map(<[u8]>::to_vec);
    assert_eq!(raw(dlt::SPRING_TOPIC), Some(topic.clone().into_bytes()));
    assert_eq!(
        raw(dlt::SPRING_PARTITION),
        Some(0i32.to_be_bytes().to_vec())
    );
    assert_eq!(raw(dlt::SPRING_OFFSET), Some(2i64.to_be_bytes().to_vec()));
    assert_eq!(
        raw(dlt::SPRING_TIMESTAMP),
        Some((base + 2).to_be_bytes().to_vec())
    );
    assert_eq!(text(r, dlt::SPRING_TIMESTAMP_TYPE), "CREATE_TIME");
    assert_eq!(text(r, dlt::SPRING_GROUP), group);
    assert_eq!(text(r, dlt::SPRING_EXCEPTION_FQCN), "handler_error");
    assert_eq!(
        text(r, dlt::SPRING_EXCEPTION_MESSAGE),
        "spring-style failure"
    );
    assert_eq!(text(r, dlt::ATTEMPTS), "2");
    for native in [
        dlt::TOPIC,
        dlt::PARTITION,
        dlt::OFFSET,
        dlt::GROUP,
        dlt::ERROR_TYPE,
    ] {
        assert_eq!(r.header(native), None, "{native} written in Spring mode");
    }

    let d = DeadLetterRecord::from_record(r).expect("readable");
    assert_eq!(d.topic, topic);
    assert_eq!(d.partition, 0);
    assert_eq!(d.offset, 2);
    assert_eq!(d.timestamp, RecordTimestamp::CreateTime(base + 2));
    assert_eq!(d.group.as_deref(), Some(group.as_str()));
    assert_eq!(d.attempts, Some(2));
    assert_eq!(d.error_type.as_deref(), Some("handler_error"));
    assert_eq!(d.error_message.as_deref(), Some("spring-style failure"));
    assert_eq!(d.key.as_deref(), Some(key_of(0, 2).as_bytes()));
    assert_eq!(d.payload.as_deref(), Some(payload_of(0, 2).as_bytes()));
    let headers: Vec<(String, Option<Vec<u8>>)> = d
        .headers
        .iter()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    assert_eq!(headers, expected_original_headers());
}

// ---------------------------------------------------------------------------
// 4. The dead-letter topic cannot be written
// ---------------------------------------------------------------------------

/// Every Produce request is refused (NOT_ENOUGH_REPLICAS: `acks=all` cannot
/// be met) and the dead-letter producer gives a write up after
/// `message.timeout.ms` = 300 ms. Meanwhile partition 1 stays committed at
/// the poison record, is reported blocked (`fresh_consumer.partition.blocked`
/// = 1 over the wire), the failed sends are counted with their error, and
/// partitions 0 and 2 are committed to their ends. Once the broker accepts
/// writes again the record is parked exactly once, the commit moves to the
/// end, and the gauge returns to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_dead_letter_topic_blocks_the_partition_until_it_recovers() {
    const POISON: i64 = 10;
    let (cluster, topic, dlq, group, _) = setup("dlq-down", 3, 30, Some(1), None).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };
    let (receiver, provider) = wire(Duration::from_millis(100)).await;
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 10_000],
    );

    let calls = Calls::default();
    let handler = calls.handler(|r, _| {
        ((r.partition(), r.offset()) == (1, POISON)).then(|| permanent("malformed"))
    });
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(
                RetryPolicy::new().backoff(Duration::from_millis(10), Duration::from_millis(100)),
            )
            .on_exhausted(OnExhausted::DeadLetter(
                DeadLetter::new().producer_property("message.timeout.ms", "300"),
            ))
            .meter_provider(&provider),
    );
    let p1 = partition_attrs(&topic, 1, &group);
    let sent_failed = with(&sent_attrs(&dlq), &[(ERROR_TYPE, "_MSG_TIMED_OUT")]);
    cluster
        .wait_committed(&group, &topic, &[30, POISON, 30])
        .await;
    wait_until(
        WAIT,
        "partition 1 reported blocked over the wire",
        || async { receiver.point(PARTITION_BLOCKED, &p1) == Some(1.0) },
    )
    .await;
    wait_until(WAIT, "two failed dead-letter writes counted", || async {
        receiver
            .point(SENT_MESSAGES, &sent_failed)
            .is_some_and(|v| v >= 2.0)
    })
    .await;
    // The record is still neither handled nor parked: nothing moved.
    assert_eq!(
        cluster.committed(&group, &topic, 3).await,
        vec![30, POISON, 30]
    );
    assert_eq!(record_count(&cluster, &dlq, 1).await, 0);
    assert_eq!(calls.of(1, POISON), 1, "a permanent error is not retried");
    assert_eq!(calls.of(1, POISON + 1), 0, "nothing after the record ran");
    assert!(
        logged(&topic, &["writing to the dead-letter topic failed"]),
        "the failed write is logged"
    );

    mock.clear_request_errors(RDKafkaApiKey::Produce);
    cluster.wait_committed(&group, &topic, &[30; 3]).await;
    wait_until(WAIT, "the gauge back to 0", || async {
        receiver.point(PARTITION_BLOCKED, &p1) == Some(0.0)
    })
    .await;
    let summary = run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, FLUSH).await;

    let parked = cluster.read_topic(&dlq, 1).await;
    assert_eq!(parked.len(), 1, "parked exactly once: {parked:?}");
    assert_eq!(text(&parked[0], dlt::OFFSET), POISON.to_string());
    assert_eq!(text(&parked[0], dlt::ERROR_TYPE), "permanent");
    assert_eq!(calls.of(1, POISON), 1);
    assert_eq!(
        calls.succeeded(1),
        (0..30).filter(|&i| i != POISON).collect::<Vec<_>>()
    );
    assert_eq!(summary.records_succeeded, 89);
    assert_eq!(
        receiver.point(
            DEAD_LETTER_MESSAGES,
            &with(&p1, &[(DEAD_LETTER_TOPIC, &dlq)])
        ),
        Some(1.0)
    );
    assert_eq!(receiver.point(SENT_MESSAGES, &sent_attrs(&dlq)), Some(1.0));
}

/// Dead-letter producer properties that would weaken the acknowledged write
/// the source offset is committed past (issue 31, item 7) are refused by
/// `validate()` and by `run_until` before anything starts, for the
/// dead-letter policy and for the retry tiers (which write with the same
/// producer); the values the producer uses anyway are accepted. Before the
/// fix all of them were accepted: `acks=0` alone then failed only when the
/// run created the producer (`RunError::Client`), and with
/// `enable.idempotence=false` too the mock broker refusing every write left
/// the dead-letter topic empty while the source was committed past.
#[tokio::test]
async fn producer_properties_that_weaken_the_dead_letter_write_are_refused() {
    use fresh_consumer::{ConfigError, FreshConsumer, RunError, failure::RetryTopics};
    let consumer = |policy: OnExhausted| {
        FreshConsumer::new(|_r: Record| ready(Ok::<(), std::io::Error>(())))
            .bootstrap_servers("127.0.0.1:1")
            .group_id("g")
            .topics(["orders"])
            .on_exhausted(policy)
    };
    let policies = |dl: DeadLetter| {
        [
            OnExhausted::DeadLetter(dl.clone()),
            OnExhausted::RetryTopics(RetryTopics::new([Duration::from_secs(1)]).dead_letter(dl)),
        ]
    };
    for (k, v) in [
        ("acks", "0"),
        ("acks", "1"),
        ("request.required.acks", "0"),
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", "6"),
        ("max.in.flight", "10"),
        ("transactional.id", "dlt-tx"),
    ] {
        for policy in policies(DeadLetter::new().producer_property(k, v)) {
            let e = consumer(policy.clone())
                .validate()
                .expect_err(&format!("{k}={v} refused"));
            assert!(
                matches!(&e, ConfigError::DeadLetterProducerProperty { property, value, .. }
                    if property == k && value == v),
                "{k}={v}: {e:?}"
            );
            let message = e.to_string();
            assert!(
                message.contains(&format!("`{k}={v}`")) && message.contains("acks=all"),
                "{message}"
            );
            match consumer(policy).run_until(std::future::pending()).await {
                Err(RunError::Config(c)) => assert_eq!(c, e),
                other => panic!("{k}={v}: run_until returned {other:?}"),
            }
        }
    }
    for (k, v) in [
        ("acks", "all"),
        ("acks", "-1"),
        ("enable.idempotence", "true"),
        ("max.in.flight.requests.per.connection", "5"),
        ("message.timeout.ms", "300"),
    ] {
        for policy in policies(DeadLetter::new().producer_property(k, v)) {
            consumer(policy)
                .validate()
                .unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
    }
}

// ---------------------------------------------------------------------------
// 5. Block policy
// ---------------------------------------------------------------------------

/// With the block policy and 2 attempts, a record that fails 3 times and
/// then succeeds blocks its partition after its second attempt, is retried
/// at the capped backoff, and succeeds once. A sampler of the committed
/// offsets shows partition 0 held at the record (and never past it) in every
/// read that returned before the success; afterwards it reaches the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_policy_holds_the_partition_until_the_record_succeeds() {
    const POISON: i64 = 5;
    let (cluster, topic, _, group, _) = setup("block", 2, 20, None, None).await;

    let calls = Calls::default();
    let success_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handler = with_state(
        (calls.clone(), Arc::clone(&success_at)),
        |r: Record, (calls, success_at)| async move {
            let n = calls.call(&r);
            if (r.partition(), r.offset()) == (0, POISON) {
                if n <= 3 {
                    return Err(std::io::Error::other("downstream unavailable"));
                }
                *success_at.lock().unwrap() = Some(Instant::now());
            }
            calls.ok(&r);
            Ok(())
        },
    );
    let sampler = Sampler::start(&cluster, &group, &topic, 2, None);
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(retry_policy(2, 10, 300))
            .on_exhausted(OnExhausted::Block),
    );
    cluster.wait_committed(&group, &topic, &[20, 20]).await;
    let samples = sampler.finish();
    let summary = run.stop().await;

    let success_at = success_at.lock().unwrap().expect("the record succeeded");
    assert_eq!(calls.of(0, POISON), 4, "3 failures, then one success");
    assert_eq!(
        calls.succeeded(0),
        (0..20).collect::<Vec<_>>(),
        "handled once, in order"
    );
    assert_eq!(calls.succeeded(1), (0..20).collect::<Vec<_>>());
    assert_eq!(summary.failed_attempts, 3);
    // Reads that returned before the success never show partition 0 past it.
    let before: Vec<&Sample> = samples.iter().filter(|s| s.at < success_at).collect();
    let past: Vec<&&Sample> = before.iter().filter(|s| s.committed[0] > POISON).collect();
    assert!(
        past.is_empty(),
        "committed past the blocked record: {:?}",
        past.first()
    );
    let held = before.iter().filter(|s| s.committed[0] == POISON).count();
    eprintln!(
        "{} samples before the success, {held} held at {POISON}",
        before.len()
    );
    assert!(
        held > 0,
        "the sampler never saw the commit held at the record"
    );
    assert!(
        logged(
            &topic,
            &["partition stopped at a record whose attempts ran out"]
        ),
        "the block is logged"
    );
}

// ---------------------------------------------------------------------------
// 6. A permanent error
// ---------------------------------------------------------------------------

/// `permanent(e)` skips the retries: one handler call, straight to the
/// dead-letter topic with `error.type=permanent` and attempts 1; no retry
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_is_not_retried() {
    let (cluster, topic, dlq, group, _) = setup("permanent", 1, 6, Some(1), None).await;
    let (receiver, provider) = wire(Duration::from_secs(60)).await;

    let calls = Calls::default();
    let handler = calls.handler(|r, _| {
        if r.offset() == 2 {
            let e = "twelve".parse::<u32>().unwrap_err();
            return Some(permanent(e));
        }
        None
    });
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(RetryPolicy::new().max_attempts(5))
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
            .meter_provider(&provider),
    );
    cluster.wait_committed(&group, &topic, &[6]).await;
    let summary = run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, FLUSH).await;

    assert_eq!(calls.of(0, 2), 1, "no retries");
    assert_eq!(summary.failed_attempts, 1);
    let parked = cluster.read_topic(&dlq, 1).await;
    assert_eq!(parked.len(), 1);
    assert_eq!(text(&parked[0], dlt::ERROR_TYPE), "permanent");
    assert_eq!(text(&parked[0], dlt::ATTEMPTS), "1");
    assert_eq!(
        text(&parked[0], dlt::ERROR_MESSAGE),
        "invalid digit found in string"
    );
    assert!(
        receiver.latest_metric(HANDLER_RETRIES).is_none(),
        "no retry counted"
    );
    let p0 = partition_attrs(&topic, 0, &group);
    assert_eq!(
        receiver.point(
            DEAD_LETTER_MESSAGES,
            &with(&p0, &[(DEAD_LETTER_TOPIC, &dlq)])
        ),
        Some(1.0)
    );
    assert_eq!(event_age_count(&receiver, &p0), 5);
}

// ---------------------------------------------------------------------------
// 7. Skip policy
// ---------------------------------------------------------------------------

/// `SkipAndCommitPast`: the record is given up after its attempts and
/// committed past; counted in `fresh_consumer.skipped.messages`, logged at
/// ERROR, and it records no event age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_policy_commits_past_and_counts_the_record() {
    let (receiver, provider) = wire(Duration::from_secs(60)).await;
    let (cluster, topic, _, group, _) = setup("skip", 2, 10, None, None).await;

    let calls = Calls::default();
    let handler = calls.handler(|r, _| {
        ((r.partition(), r.offset()) == (0, 3)).then(|| std::io::Error::other("still failing"))
    });
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(retry_policy(3, 5, 20))
            .on_exhausted(OnExhausted::SkipAndCommitPast)
            .meter_provider(&provider),
    );
    cluster.wait_committed(&group, &topic, &[10, 10]).await;
    let summary = run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, FLUSH).await;

    assert_eq!(calls.of(0, 3), 3);
    assert_eq!(calls.succeeded(0), vec![0, 1, 2, 4, 5, 6, 7, 8, 9]);
    assert_eq!(summary.records_succeeded, 19);
    let p0 = partition_attrs(&topic, 0, &group);
    let p1 = partition_attrs(&topic, 1, &group);
    let skipped = receiver.metric(SKIPPED_MESSAGES);
    assert_eq!(number_points(&skipped), vec![(p0.clone(), 1.0)]);
    assert_eq!(skipped.unit, "{message}");
    assert_eq!(receiver.point(HANDLER_RETRIES, &p0), Some(2.0));
    assert_eq!(
        event_age_count(&receiver, &p0),
        9,
        "no event age for the skipped record"
    );
    assert_eq!(event_age_count(&receiver, &p1), 10);
    assert!(receiver.latest_metric(DEAD_LETTER_MESSAGES).is_none());
    assert!(
        logged(&topic, &["ERROR", "skip policy"]),
        "the skip is logged at ERROR"
    );
}

// ---------------------------------------------------------------------------
// 8. Storm guard
// ---------------------------------------------------------------------------

/// 90 % of the records fail (permanently, so no retry delays), with the
/// dead-letter policy and a storm guard judging more than 50 % failing once
/// 10 records finished. One partition, so the arithmetic is exact: offset 0
/// succeeds, offsets 1..=8 are dead-lettered (fewer than 10 finished), and
/// offset 9 (10 finished, 9 failed) trips the guard: the partition blocks
/// there instead of dead-lettering, the log says so, and
/// `fresh_consumer.storm_guard.active` and `fresh_consumer.partition.blocked`
/// read 1 over the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_guard_turns_dead_lettering_into_blocking() {
    let (receiver, provider) = wire(Duration::from_millis(100)).await;
    let (cluster, topic, dlq, group, _) = setup("storm", 1, 100, Some(1), None).await;

    let calls = Calls::default();
    let handler = calls
        .handler(|r, _| (r.offset() % 10 != 0).then(|| permanent("dependency returns garbage")));
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .retry(
                RetryPolicy::new().backoff(Duration::from_millis(10), Duration::from_millis(100)),
            )
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
            .storm_guard(
                StormGuard::new()
                    .max_failure_ratio(0.5)
                    .window(Duration::from_secs(60))
                    .min_records(10),
            )
            .meter_provider(&provider),
    );
    let p0 = partition_attrs(&topic, 0, &group);
    let g = group_attrs(&group);
    wait_until(WAIT, "the storm guard active over the wire", || async {
        receiver.point(STORM_GUARD_ACTIVE, &g) == Some(1.0)
    })
    .await;
    wait_until(WAIT, "partition 0 reported blocked", || async {
        receiver.point(PARTITION_BLOCKED, &p0) == Some(1.0)
    })
    .await;
    cluster.wait_committed(&group, &topic, &[9]).await;
    // Blocked, not dead-lettering: further attempts of offset 9 keep failing
    // and nothing more reaches the dead-letter topic.
    wait_until(WAIT, "offset 9 retried while blocked", || async {
        calls.of(0, 9) >= 3
    })
    .await;
    assert_eq!(record_count(&cluster, &dlq, 1).await, 8);
    assert_eq!(calls.of(0, 10), 0, "nothing after the blocking record ran");
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![9]);
    // The guard's own line names no topic; no other test of this binary
    // fails enough records to trip its guard.
    assert!(
        !log_lines_with("storm guard tripped").is_empty(),
        "the guard says so in the log"
    );
    assert!(
        logged(
            &topic,
            &["storm_guard=true", "partition stopped at a record"]
        ),
        "the block names the storm guard"
    );
    run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, FLUSH).await;

    let parked = cluster.read_topic(&dlq, 1).await;
    let offsets: Vec<String> = parked
        .iter()
        .map(|r| text(r, dlt::OFFSET).to_owned())
        .collect();
    assert_eq!(offsets, (1..=8).map(|i| i.to_string()).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------
// 9. Panics and handler timeouts are failed attempts
// ---------------------------------------------------------------------------

/// With `handler_timeout` 300 ms and 2 attempts (dead-letter policy): a
/// record that panics once and one that hangs once each succeed on their
/// second attempt; one that always panics and one that always hangs are
/// dead-lettered with `error.type` `panic` and `timeout`. Every failed attempt
/// shows in `messaging.process.duration` with its `error.type`, and the
/// consumer keeps handling the records after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_timeouts_are_failed_attempts_and_the_consumer_keeps_running() {
    let (receiver, provider) = wire(Duration::from_secs(60)).await;
    let (cluster, topic, dlq, group, _) = setup("panic-timeout", 1, 8, Some(1), None).await;
    // Offsets: 1 panics once, 2 hangs once, 3 always panics, 4 always hangs.
    let calls = Calls::default();
    let cancelled = Arc::new(AtomicUsize::new(0));
    let handler = with_state(
        (calls.clone(), Arc::clone(&cancelled)),
        |r: Record, (calls, cancelled)| async move {
            let n = calls.call(&r);
            let hang = |cancelled: Arc<AtomicUsize>| async move {
                // Counts the abandoned attempt when its future is dropped.
                struct OnDrop(Arc<AtomicUsize>);
                impl Drop for OnDrop {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _guard = OnDrop(cancelled);
                tokio::time::sleep(Duration::from_secs(30)).await;
            };
            match (r.offset(), n) {
                (1, 1) | (3, _) => panic!("handler bug at offset {}", r.offset()),
                (2, 1) | (4, _) => hang(cancelled).await,
                _ => {}
            }
            calls.ok(&r);
            Ok::<(), std::io::Error>(())
        },
    );
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .handler_timeout(Duration::from_millis(300))
            .retry(retry_policy(2, 5, 20))
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new()))
            .meter_provider(&provider),
    );
    cluster.wait_committed(&group, &topic, &[8]).await;
    let summary = run.stop().await;
    let _ = fresh_consumer::metrics::shutdown(&provider, FLUSH).await;

    assert_eq!(calls.succeeded(0), vec![0, 1, 2, 5, 6, 7]);
    for (offset, n) in [(1, 2), (2, 2), (3, 2), (4, 2)] {
        assert_eq!(calls.of(0, offset), n, "offset {offset}");
    }
    assert_eq!(
        cancelled.load(Ordering::SeqCst),
        3,
        "timed-out attempts were dropped"
    );
    assert_eq!(summary.failed_attempts, 6);
    assert_eq!(summary.records_succeeded, 6);

    let parked = cluster.read_topic(&dlq, 1).await;
    let got: Vec<(String, String, String)> = parked
        .iter()
        .map(|r| {
            (
                text(r, dlt::OFFSET).to_owned(),
                text(r, dlt::ERROR_TYPE).to_owned(),
                text(r, dlt::ERROR_MESSAGE).to_owned(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "3".to_owned(),
                "panic".to_owned(),
                "handler panicked: handler bug at offset 3".to_owned()
            ),
            (
                "4".to_owned(),
                "timeout".to_owned(),
                "handler did not finish within 300ms".to_owned()
            ),
        ]
    );

    let p0 = partition_attrs(&topic, 0, &group);
    let process = receiver.metric(PROCESS_DURATION);
    assert_eq!(
        histogram_point_with(&process, &process_attrs(&p0, Some("panic"))).count,
        3
    );
    let timeouts = histogram_point_with(&process, &process_attrs(&p0, Some("timeout")));
    assert_eq!(timeouts.count, 3);
    assert!(timeouts.min.unwrap() >= 0.3, "{timeouts:?}");
    assert_eq!(
        histogram_point_with(&process, &process_attrs(&p0, None)).count,
        6
    );
    assert_eq!(receiver.point(HANDLER_RETRIES, &p0), Some(4.0));
    assert_eq!(event_age_count(&receiver, &p0), 6);
}

// ---------------------------------------------------------------------------
// 10. Redrive: a parked record goes back to its source topic
// ---------------------------------------------------------------------------

/// The redrive of `examples/redrive.rs`, through its own steps
/// (`examples/support/dead_letters.rs`): reads the dead-letter topic from
/// `group`'s committed position (earliest when none) to its current end,
/// republishes every record to its source topic and partition with the
/// original key, payload, timestamp and headers (not the dead-letter
/// headers), waits for the acknowledgements, then commits the group past
/// what it read. Returns the redriven records' source positions.
async fn redrive(bootstrap: &str, dlq: &str, group: &str) -> Vec<(String, i32, i64)> {
    let (b, t, g) = (bootstrap.to_owned(), dlq.to_owned(), group.to_owned());
    let (consumer, parked, next) =
        tokio::task::spawn_blocking(move || dead_letters::read_dead_letters(&b, &t, &g, false))
            .await
            .expect("reader task")
            .expect("read the dead-letter topic");
    if parked.is_empty() {
        return Vec::new();
    }

    let producer = dead_letters::producer(bootstrap).expect("redrive producer");
    let mut redriven = Vec::new();
    for r in &parked {
        let d = DeadLetterRecord::from_record(r).expect("a dead-letter record");
        dead_letters::republish(&producer, &d)
            .await
            .expect("redrive write acknowledged");
        redriven.push((d.topic.clone(), d.partition, d.offset));
    }
    // Only after every write was acknowledged: a crash before this commit
    // redrives again (at least once), never loses a record.
    tokio::task::spawn_blocking(move || consumer.commit(&next, CommitMode::Sync))
        .await
        .expect("commit task")
        .expect("commit the redrive group");
    redriven
}

/// A record whose handler is broken for it is dead-lettered; after the fix
/// the redrive republishes it to its source topic and partition with the
/// original key, payload, timestamp and headers (none of the dead-letter
/// headers), and the fixed consumer, restarted in the same group, handles it.
/// A second redrive in the same redrive group finds nothing: each parked
/// record is redriven once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_round_trips_a_parked_record_to_its_source_topic() {
    let (cluster, topic, dlq, group, base) = setup("redrive", 2, 5, Some(1), Some((1, 3))).await;

    // Version 1: cannot handle the record at partition 1, offset 3.
    let calls = Calls::default();
    let broken = calls.handler(|r, _| {
        (r.payload() == Some(payload_of(1, 3).as_bytes()))
            .then(|| permanent("unsupported order format"))
    });
    let run = start(
        cluster
            .consumer(&group, &topic, broken)
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new())),
    );
    cluster.wait_committed(&group, &topic, &[5, 5]).await;
    run.stop().await;
    assert_eq!(calls.total_succeeded(), 9);
    assert_eq!(record_count(&cluster, &dlq, 1).await, 1);

    // The redrive.
    let redrive_group = unique("g-redrive-tool");
    let redriven = redrive(cluster.bootstrap(), &dlq, &redrive_group).await;
    assert_eq!(redriven, vec![(topic.clone(), 1, 3)]);
    assert_eq!(cluster.high_watermarks(&topic, 2).await, vec![5, 6]);

    // Version 2, same group: handles the redriven record (and nothing else).
    let seen: Arc<Mutex<Vec<Record>>> = Arc::default();
    let fixed = {
        let seen = Arc::clone(&seen);
        move |r: Record| {
            seen.lock().unwrap().push(r);
            std::future::ready(Ok::<(), std::io::Error>(()))
        }
    };
    let run = start(cluster.consumer(&group, &topic, fixed));
    cluster.wait_committed(&group, &topic, &[5, 6]).await;
    run.stop().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let r = &seen[0];
    assert_eq!((r.partition(), r.offset()), (1, 5));
    assert_eq!(r.key(), Some(key_of(1, 3).as_bytes()));
    assert_eq!(r.payload(), Some(payload_of(1, 3).as_bytes()));
    assert_eq!(r.timestamp(), RecordTimestamp::CreateTime(base + 3));
    let headers: Vec<(String, Option<Vec<u8>>)> = r
        .headers()
        .iter()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers,
        expected_original_headers(),
        "original headers only"
    );

    // Redriven once: the redrive group is past it.
    assert!(
        redrive(cluster.bootstrap(), &dlq, &redrive_group)
            .await
            .is_empty()
    );
}

// ---------------------------------------------------------------------------
// 11. A handler that panics before it returns its future
// ---------------------------------------------------------------------------

/// A handler closure that does its work synchronously and returns a ready
/// future (like `std::future::ready`) panics in the call itself, not while
/// its future is polled. That panic is a failed attempt like any other: the
/// record is retried and succeeds, and the partition is committed to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_panicking_before_it_returns_a_future_is_a_failed_attempt() {
    let (cluster, topic, _, group, _) = setup("sync-panic", 1, 5, None, None).await;
    let calls = Calls::default();
    let handler = {
        let calls = calls.clone();
        move |r: Record| {
            if calls.call(&r) == 1 && r.offset() == 2 {
                panic!("synchronous handler bug");
            }
            calls.ok(&r);
            std::future::ready(Ok::<(), std::io::Error>(()))
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .on_exhausted(OnExhausted::Block),
    );
    cluster.wait_committed(&group, &topic, &[5]).await;
    let summary = run.stop().await;
    assert_eq!(calls.of(0, 2), 2);
    assert_eq!(calls.succeeded(0), vec![0, 1, 2, 3, 4]);
    assert_eq!(summary.failed_attempts, 1);
}

// ---------------------------------------------------------------------------
// 12. The dead-letter producer hits a fatal error
// ---------------------------------------------------------------------------

/// The idempotent dead-letter producer treats OUT_OF_ORDER_SEQUENCE_NUMBER
/// as fatal: every later write on it fails with `_FATAL`. The writer
/// replaces such a producer, so the record is parked on a later write
/// attempt and the partition moves on instead of staying blocked until a
/// restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_dead_letter_producer_is_replaced() {
    use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    let (cluster, topic, dlq, group, _) = setup("dlq-fatal", 1, 10, Some(1), None).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    let handler = |r: Record| async move {
        if r.offset() == 3 {
            return Err(permanent("malformed"));
        }
        Ok::<(), fresh_consumer::BoxError>(())
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .on_exhausted(OnExhausted::DeadLetter(DeadLetter::new())),
    );
    cluster.wait_committed(&group, &topic, &[10]).await;
    run.stop().await;
    let parked = cluster.read_topic(&dlq, 1).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(text(&parked[0], dlt::OFFSET), "3");
    assert!(
        logged(&dlq, &["replaced it with a new one"]),
        "the replacement is logged"
    );
}

/// A fetch error reaches the partition's own queue as an error event, whose
/// offset is the next record not fetched yet. When the worker reads it in a
/// batch, librdkafka moves the partition's position one past it, and
/// librdkafka fetches from that position when it resumes the partitions a
/// member keeps through an incremental rebalance. The library seeks such a
/// partition back to the records its worker took, so the kept partition
/// skips nothing (without that, offset 3 of the kept partition was never
/// handled, and the commit went past it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_error_before_an_incremental_rebalance_skips_no_record() {
    logs::init();
    let cluster = TestCluster::start();
    let Some(mock) = cluster.mock_or_skip("the mock cluster's fault injection") else {
        return;
    };
    cluster.set_consumer_group_timings(6_000, 200);
    let topic = cluster.topic("fetch-error-kept", 2).await;
    let group = unique("g-fetch-error-kept");
    let produce = |from: usize, to: usize| {
        let (cluster, topic) = (&cluster, &topic);
        async move {
            for p in 0..2 {
                for i in from..to {
                    cluster.produce(topic, p, "k", &format!("v{i}"), None).await;
                }
            }
        }
    };
    produce(0, 3).await;
    let handled: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    // Holds each partition's worker in the handler of offset 2, so that the
    // error event waits in the queue and is read in a batch afterwards (an
    // idle worker takes a lone event through the single-message path).
    let (open, gate) = tokio::sync::watch::channel(false);
    let member = || {
        let handled = Arc::clone(&handled);
        let gate = gate.clone();
        let c = cluster
            .consumer_kip848(&group, &topic, move |r: Record| {
                let handled = Arc::clone(&handled);
                let mut gate = gate.clone();
                async move {
                    if r.offset() == 2 {
                        let _ = gate.wait_for(|open| *open).await;
                    }
                    handled.lock().unwrap().insert((r.partition(), r.offset()));
                    Ok::<(), std::io::Error>(())
                }
            })
            // Keeps the records produced after the error unfetched until
            // the rebalance has paused and resumed the partitions.
            .set("fetch.error.backoff.ms", "5000");
        start(c)
    };
    let a = member();
    wait_until(
        WAIT,
        "A is in the handler of offset 2 on both partitions",
        || async { handled.lock().unwrap().len() == 4 },
    )
    .await;
    // The next fetch fails for both partitions (one request, one broker).
    mock.request_errors(
        RDKafkaApiKey::Fetch,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_MSG],
    );
    // Nothing shows when the failed fetch's error events have reached the
    // partitions' queues: the client fetches every 10 ms here
    // (`fetch.wait.max.ms`), so a second is ample.
    tokio::time::sleep(Duration::from_secs(1)).await;
    open.send_replace(true);
    wait_until(
        WAIT,
        "A read the error events and committed to the end",
        || async {
            log_lines_with(&topic)
                .iter()
                .filter(|l| l.contains("consume error"))
                .count()
                >= 2
                && cluster.committed(&group, &topic, 2).await == vec![3, 3]
        },
    )
    .await;
    produce(3, 5).await;
    let b = member();
    wait_until(WAIT, "one partition each", || async {
        a.health.snapshot().partitions.len() == 1 && b.health.snapshot().partitions.len() == 1
    })
    .await;
    cluster.wait_committed(&group, &topic, &[5, 5]).await;
    tokio::join!(a.stop(), b.stop());
    let handled = handled.lock().unwrap();
    for p in 0..2 {
        let offsets: Vec<i64> = handled
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|&(_, o)| o)
            .collect();
        assert_eq!(offsets, vec![0, 1, 2, 3, 4], "partition {p}");
    }
}
