//! The consumer's metrics as they arrive over the wire at an in-process OTLP
//! receiver: names, units, descriptions, attributes, bucket boundaries and
//! counts; failed attempts, missing timestamps and clock skew; the event-time
//! header; the shutdown flush on both runtime flavours; an unreachable
//! collector; the exponential histogram option.
//!
//! Every provider exports every 60 s (or, for the unreachable collector,
//! often), so what arrives came through the consumer's shutdown flush.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fresh_consumer::Record;
use fresh_consumer::metrics::*;
use fresh_consumer::otlp::{self, OtlpConfig, OtlpProtocol};
use opentelemetry_sdk::metrics::SdkMeterProvider;

use support::kafka::{TestCluster, now_ms, summary_committed, tp};
use support::logs;
use support::metrics::{Attrs, group_attrs, otlp_config, otlp_provider, partition_attrs, with};
use support::otlp_receiver::{
    OtlpReceiver, attribute_kinds, exponential_histogram_points, histogram_point_with,
    histogram_points, kind, number_points, number_value_with, sum_shape, sum_total_matching,
};
use support::run::{Running, start};
use support::wait::{WAIT, wait_until};

const FLUSH: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A gRPC provider for `receiver` that exports every 60 s: within a test,
/// data only arrives through a flush.
fn provider_for(receiver: &OtlpReceiver) -> SdkMeterProvider {
    otlp_provider(receiver, Duration::from_secs(60), "metrics-otlp-test")
}

/// The log capture, an OTLP/gRPC receiver and a [`provider_for`] it.
async fn wire() -> (OtlpReceiver, SdkMeterProvider) {
    logs::init();
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    (receiver, provider)
}

/// Shuts the provider down (so dropping it does not block a current-thread
/// runtime for 5 s).
async fn shutdown(provider: &SdkMeterProvider) {
    let _ = fresh_consumer::metrics::shutdown(provider, FLUSH).await;
}

/// What the handler saw of one record: partition, offset, key, and the age
/// of its record timestamp in seconds when the handler returned.
type SeenRecord = (i32, i64, String, Option<f64>);

/// Every record the handler saw, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<SeenRecord>>>);

impl Seen {
    fn push(&self, r: &Record) {
        let age = r
            .timestamp()
            .millis()
            .map(|ms| age_of(ms, SystemTime::now()));
        let key = String::from_utf8_lossy(r.key().unwrap_or_default()).into_owned();
        self.0
            .lock()
            .unwrap()
            .push((r.partition(), r.offset(), key, age));
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn ages(&self, partition: i32) -> Vec<f64> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, ..)| *p == partition)
            .filter_map(|(.., age)| *age)
            .collect()
    }
}

fn age_of(ms: i64, now: SystemTime) -> f64 {
    now.duration_since(UNIX_EPOCH).unwrap().as_secs_f64() - ms as f64 / 1000.0
}

/// A handler that notes every record as succeeded.
fn recorder(
    seen: &Seen,
) -> impl Fn(Record) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    let seen = seen.clone();
    move |r: Record| {
        seen.push(&r);
        std::future::ready(Ok(()))
    }
}

/// The index of the explicit bucket holding `v` (upper bounds inclusive).
fn bucket(bounds: &[f64], v: f64) -> usize {
    bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len())
}

// ---------------------------------------------------------------------------
// 1. Names, units, descriptions, attributes, boundaries, counts
// ---------------------------------------------------------------------------

/// Five records stamped now-0.3 s, now-1.2 s, now-3 s, now-6 s and
/// now-120 s land in five different buckets of the event-age histogram
/// (each at least 200 ms below its bucket's upper bound, so a loaded
/// machine's delay from production to success keeps them apart), and
/// every instrument arrives with its documented name, unit, description and
/// attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_arrive_with_names_units_attributes_and_buckets() {
    let (receiver, provider) = wire().await;
    let (cluster, topic, group) = TestCluster::with_topic("wire", 2).await;
    let seen = Seen::default();

    // A warm-up record on partition 0: once it is handled, the consumer is
    // assigned and fetching, so the records on partition 1 are handled
    // within milliseconds of being produced.
    cluster.produce(&topic, 0, "warm-up", "w", None).await;
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .meter_provider(&provider),
    );
    wait_until(WAIT, "the warm-up record handled", || async {
        seen.len() == 1
    })
    .await;

    let nominal = [0.3, 1.2, 3.0, 6.0, 120.0];
    for (i, age) in nominal.iter().enumerate() {
        let ts = now_ms() - (age * 1000.0) as i64;
        cluster
            .produce(&topic, 1, &format!("k{i}"), "v", Some(ts))
            .await;
    }
    wait_until(WAIT, "the five records handled", || async {
        seen.len() == 6
    })
    .await;
    wait_until(WAIT, "committed reaches the high watermark", || async {
        cluster.committed(&group, &topic, 2).await == vec![1, 5]
    })
    .await;
    assert_eq!(
        receiver.request_count(),
        0,
        "nothing is exported before the shutdown flush (60 s interval)"
    );
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 6);
    assert!(!summary.shutdown_timed_out, "{summary:?}");
    assert_eq!(summary.committed.get(&tp(&topic, 1)), Some(&5));

    // Everything below came through the shutdown flush: no waiting.
    assert!(receiver.request_count() >= 1, "the shutdown flush exported");
    let expected = [
        (
            EVENT_AGE,
            "histogram",
            "s",
            "Age of the record's event time when its handler succeeded.",
        ),
        (
            PROCESS_DURATION,
            "histogram",
            "s",
            "Duration of one handler attempt.",
        ),
        (
            CONSUMED_MESSAGES,
            "sum",
            "{message}",
            "Records received from Kafka.",
        ),
        (
            BATCH_DURATION,
            "histogram",
            "s",
            "Duration of a run of one partition's records handled back to back.",
        ),
        (
            POLL_INTERVAL,
            "histogram",
            "s",
            "Gap between two polls of librdkafka by the poll loop.",
        ),
        (
            CLIENT_OPERATION_DURATION,
            "histogram",
            "s",
            "Duration of messaging operation initiated by a producer or consumer client.",
        ),
    ];
    for (name, want_kind, unit, description) in expected {
        let m = receiver.metric(name);
        assert_eq!(kind(&m), want_kind, "{name}");
        assert_eq!(m.unit, unit, "{name}");
        assert_eq!(m.description, description, "{name}");
        assert_eq!(
            receiver.scope_of(name),
            Some((
                "fresh-consumer".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned()
            )),
            "{name}: instrumentation scope = crate name and version"
        );
        // Partition ids are strings, never ints.
        for (key, kinds) in attribute_kinds(&m) {
            assert_eq!(kinds, BTreeSet::from(["string"]), "{name}: {key}");
        }
        if kind(&m) == "histogram" {
            let (points, temporality) = histogram_points(&m);
            assert_eq!(temporality, 2, "{name}: cumulative");
            // The messaging conventions' advice for `messaging.*`
            // durations; the library's own ones resolve 1 ms to 10 min.
            let want = if name == EVENT_AGE {
                EVENT_AGE_BOUNDARIES
            } else if name.starts_with("messaging.") {
                MESSAGING_DURATION_BOUNDARIES
            } else {
                DURATION_BOUNDARIES
            };
            for p in &points {
                assert_eq!(p.bounds, want, "{name} boundaries");
            }
        }
    }
    // Nothing went wrong, so these were never recorded into (and are not
    // exported at all) or are zero.
    for name in [
        POLL_INTERVAL_WARNINGS,
        POLL_INTERVAL_EXCEEDED,
        EVENT_TIMESTAMP_MISSING,
        EVENT_CLOCK_SKEW,
    ] {
        assert_eq!(receiver.counter_total(name, &Attrs::new()), 0.0, "{name}");
    }

    let p0 = partition_attrs(&topic, 0, &group);
    let p1 = partition_attrs(&topic, 1, &group);

    // Event age: one point per partition and timestamp type; the five
    // records in five different buckets.
    let age = receiver.metric(EVENT_AGE);
    let (points, _) = histogram_points(&age);
    assert_eq!(points.len(), 2, "{points:?}");
    let create_time = [(TIMESTAMP_TYPE, "create_time")];
    assert_eq!(
        histogram_point_with(&age, &with(&p0, &create_time)).count,
        1
    );
    let point = histogram_point_with(&age, &with(&p1, &create_time));
    assert_eq!(point.count, 5);
    // Where each sample must be: the age the handler saw when it returned
    // (the library measures microseconds later; allow 5 ms at a boundary).
    let ages = seen.ages(1);
    eprintln!("ages at handler return: {ages:?}");
    assert_eq!(ages.len(), 5);
    let mut want = vec![0u64; EVENT_AGE_BOUNDARIES.len() + 1];
    for (&a, &n) in ages.iter().zip(&nominal) {
        assert!(a >= n - 0.002, "age {a} below its nominal {n}");
        want[bucket(EVENT_AGE_BOUNDARIES, a)] += 1;
        let near = bucket(EVENT_AGE_BOUNDARIES, a + 0.005);
        if near != bucket(EVENT_AGE_BOUNDARIES, a) && point.bucket_counts[near] == 1 {
            want[bucket(EVENT_AGE_BOUNDARIES, a)] -= 1;
            want[near] += 1;
        }
    }
    assert_eq!(point.bucket_counts, want, "event-age buckets");
    let used: Vec<usize> = (0..want.len())
        .filter(|&i| point.bucket_counts[i] > 0)
        .collect();
    assert_eq!(
        used.len(),
        5,
        "ages {nominal:?} land in five different buckets (delays from production to \
         success: {:?}); buckets {used:?}",
        ages.iter()
            .zip(&nominal)
            .map(|(a, n)| a - n)
            .collect::<Vec<_>>()
    );
    assert!(used.iter().all(|&i| point.bucket_counts[i] == 1));
    let sum: f64 = ages.iter().sum();
    assert!(
        (point.sum.unwrap() - sum).abs() < 0.05,
        "{point:?} vs {sum}"
    );
    assert!(
        point.min.unwrap() >= 0.3 - 0.002 && point.max.unwrap() >= 120.0,
        "{point:?}"
    );

    // Records received, per partition.
    let consumed = receiver.metric(CONSUMED_MESSAGES);
    assert_eq!(sum_shape(&consumed), (true, 2), "monotonic, cumulative");
    // The convention lists no `messaging.operation.type` for this counter.
    let poll = [(MESSAGING_OPERATION_NAME, "poll")];
    assert_eq!(number_value_with(&consumed, &with(&p0, &poll)), 1.0);
    assert_eq!(number_value_with(&consumed, &with(&p1, &poll)), 5.0);
    assert_eq!(number_points(&consumed).len(), 2);

    // One point per attempt, none failed.
    let process = receiver.metric(PROCESS_DURATION);
    let ok = [(MESSAGING_OPERATION_NAME, "process")];
    assert_eq!(histogram_point_with(&process, &with(&p0, &ok)).count, 1);
    assert_eq!(histogram_point_with(&process, &with(&p1, &ok)).count, 5);
    assert_eq!(
        histogram_points(&process).0.len(),
        2,
        "no error.type points"
    );

    // Batches carry the partition attributes only.
    let batch = receiver.metric(BATCH_DURATION);
    let b1 = histogram_point_with(&batch, &p1);
    assert!(b1.count >= 1 && b1.count <= 5, "{b1:?}");
    assert!(histogram_point_with(&batch, &p0).count >= 1);

    // Poll gaps: one point, group attributes.
    let poll_interval = receiver.metric(POLL_INTERVAL);
    let gaps = histogram_point_with(&poll_interval, &group_attrs(&group));
    assert!(gaps.count >= 1, "{gaps:?}");
    assert_eq!(histogram_points(&poll_interval).0.len(), 1);

    // Client operations: commits (settle) and polls (receive).
    let commits = receiver.metric(CLIENT_OPERATION_DURATION);
    let (points, _) = histogram_points(&commits);
    let commit_points = points
        .iter()
        .filter(|p| {
            p.attributes
                .get(MESSAGING_OPERATION_NAME)
                .map(String::as_str)
                == Some("commit")
        })
        .count();
    assert_eq!(commit_points, 1, "no failed commits: {points:?}");
    let commit = histogram_point_with(
        &commits,
        &with(
            &group_attrs(&group),
            &[
                (MESSAGING_OPERATION_NAME, "commit"),
                (MESSAGING_OPERATION_TYPE, "settle"),
            ],
        ),
    );
    assert_eq!(commit.count, summary.commits, "{summary:?}");
    assert!(commit.count >= 1);
    // Polls: each partition's own queue (split by default) was polled;
    // every poll returned at least one record, so there are at most as many
    // polls as records (1 on partition 0, 5 on partition 1), and every point
    // is a poll of one partition or a commit.
    let receive = [
        (MESSAGING_OPERATION_NAME, "poll"),
        (MESSAGING_OPERATION_TYPE, "receive"),
    ];
    let polls0 = histogram_point_with(&commits, &with(&p0, &receive));
    let polls1 = histogram_point_with(&commits, &with(&p1, &receive));
    assert_eq!(polls0.count, 1, "{polls0:?}");
    assert!((1..=5).contains(&polls1.count), "{polls1:?}");
    assert_eq!(points.len(), 3, "{points:?}");

    shutdown(&provider).await;
}

/// With the partitions' queues not split, the poll loop reads every record
/// from librdkafka's main queue: its polls are
/// `messaging.client.operation.duration` points with the group's attributes
/// (one poll can return several partitions' records), one per poll that
/// returned records, and none per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_the_main_queue_carry_the_group_attributes() {
    let (receiver, provider) = wire().await;
    let (cluster, topic, group) = TestCluster::with_topic("wire-main", 2).await;
    cluster.produce_many(&topic, 2, 10).await;
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .split_partition_queues(false)
            .meter_provider(&provider),
    );
    wait_until(WAIT, "the 20 records handled", || async {
        seen.len() == 20
    })
    .await;
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 20);

    let operations = receiver.metric(CLIENT_OPERATION_DURATION);
    let polls = histogram_point_with(
        &operations,
        &with(
            &group_attrs(&group),
            &[
                (MESSAGING_OPERATION_NAME, "poll"),
                (MESSAGING_OPERATION_TYPE, "receive"),
            ],
        ),
    );
    assert!((1..=20).contains(&polls.count), "{polls:?}");
    let (points, _) = histogram_points(&operations);
    assert!(
        points.iter().all(|p| !p
            .attributes
            .contains_key(MESSAGING_DESTINATION_PARTITION_ID)),
        "no per-partition polls without split queues: {points:?}"
    );
    for p in &points {
        assert_eq!(p.bounds, MESSAGING_DURATION_BOUNDARIES);
    }
    shutdown(&provider).await;
}

// ---------------------------------------------------------------------------
// 2. Failures, missing timestamps, clock skew, the event-time header
// ---------------------------------------------------------------------------

/// A record whose handler fails twice (then succeeds) and one that panics
/// once leave one age sample each, for the success, and their failed
/// attempts show in `messaging.process.duration` with `error.type`; a record
/// that never succeeds leaves no age sample; records without a usable
/// timestamp (-1 is "none" in Kafka; a negative one) count as missing; a
/// record stamped 30 s in the future is recorded as age 0 and counted as
/// clock skew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_missing_timestamps_and_clock_skew() {
    let (receiver, provider) = wire().await;
    let (cluster, topic, group) = TestCluster::with_topic("wire-fail", 2).await;

    let attempts: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let seen = Seen::default();
    let handler = {
        let (attempts, seen) = (Arc::clone(&attempts), seen.clone());
        move |r: Record| {
            let (attempts, seen) = (Arc::clone(&attempts), seen.clone());
            async move {
                let key = String::from_utf8_lossy(r.key().unwrap_or_default()).into_owned();
                let n = {
                    let mut a = attempts.lock().unwrap();
                    let n = a.entry(key.clone()).or_default();
                    *n += 1;
                    *n
                };
                match key.as_str() {
                    "fail-twice" if n <= 2 => Err(std::io::Error::other("downstream unavailable")),
                    "panic-once" if n == 1 => panic!("handler bug"),
                    "always-fail" => Err(std::io::Error::other("poison record")),
                    _ => {
                        seen.push(&r);
                        Ok(())
                    }
                }
            }
        }
    };
    // 6 s ago: (5, 10] until 4 s after production, for the consumer's start,
    // its group join and the retries, on a loaded machine too.
    let ago = |s: i64| Some(now_ms() - s * 1000);
    cluster.produce(&topic, 0, "fail-twice", "v", ago(6)).await;
    cluster.produce(&topic, 0, "panic-once", "v", ago(6)).await;
    // librdkafka sends -1 as "no timestamp": the record arrives NotAvailable.
    cluster
        .produce(&topic, 0, "no-timestamp", "v", Some(-1))
        .await;
    // A real broker rejects other negative timestamps; the mock keeps them.
    let mock = cluster.mock().is_some();
    if mock {
        cluster.produce(&topic, 0, "negative", "v", Some(-5)).await;
    }
    let n: usize = if mock { 6 } else { 5 };
    cluster
        .produce(&topic, 0, "future", "v", Some(now_ms() + 30_000))
        .await;
    cluster.produce(&topic, 0, "ok", "v", ago(6)).await;
    cluster.produce(&topic, 1, "always-fail", "v", ago(6)).await;

    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .meter_provider(&provider),
    );
    wait_until(WAIT, "the records of partition 0 succeeded", || async {
        seen.len() == n
    })
    .await;
    wait_until(WAIT, "partition 0 committed to its end", || async {
        cluster.committed(&group, &topic, 2).await[0] == n as i64
    })
    .await;
    wait_until(WAIT, "the poison record failed 3 times", || async {
        attempts
            .lock()
            .unwrap()
            .get("always-fail")
            .copied()
            .unwrap_or(0)
            >= 3
    })
    .await;
    let summary = run.stop().await;
    let poison_attempts = attempts.lock().unwrap()["always-fail"];
    assert_eq!(summary.records_succeeded, n as u64);
    assert_eq!(
        cluster.committed(&group, &topic, 2).await,
        vec![n as i64, -1001]
    );
    {
        let seen = seen.0.lock().unwrap();
        let keys: Vec<&str> = seen.iter().map(|(_, _, k, _)| k.as_str()).collect();
        let mut want = vec![
            "fail-twice",
            "panic-once",
            "no-timestamp",
            "negative",
            "future",
            "ok",
        ];
        if !mock {
            want.retain(|k| *k != "negative");
        }
        assert_eq!(keys, want);
    }

    let p0 = partition_attrs(&topic, 0, &group);
    let p1 = partition_attrs(&topic, 1, &group);

    // Ages: fail-twice, panic-once, ok (about 6 s) and future (0). Nothing
    // for the records without a timestamp, nothing for partition 1.
    let age = receiver.metric(EVENT_AGE);
    let (points, _) = histogram_points(&age);
    assert_eq!(points.len(), 1, "only partition 0, create time: {points:?}");
    let point = histogram_point_with(&age, &with(&p0, &[(TIMESTAMP_TYPE, "create_time")]));
    assert_eq!(point.count, 4, "{point:?}");
    assert_eq!(point.min, Some(0.0), "the future record counts as age 0");
    let mut want = vec![0u64; EVENT_AGE_BOUNDARIES.len() + 1];
    want[0] = 1; // 0 <= 0.001
    want[bucket(EVENT_AGE_BOUNDARIES, 6.01)] = 3; // (5, 10]
    assert_eq!(point.bucket_counts, want);
    assert!(
        point.max.unwrap() > 6.0 && point.max.unwrap() < 10.0,
        "{point:?}"
    );

    assert_eq!(
        number_value_with(&receiver.metric(EVENT_TIMESTAMP_MISSING), &p0),
        n as f64 - 4.0,
        "no-timestamp and negative"
    );
    assert_eq!(
        number_points(&receiver.metric(EVENT_TIMESTAMP_MISSING)).len(),
        1
    );
    assert_eq!(
        number_value_with(&receiver.metric(EVENT_CLOCK_SKEW), &p0),
        1.0
    );
    assert_eq!(number_points(&receiver.metric(EVENT_CLOCK_SKEW)).len(), 1);
    for (name, description) in [
        (
            EVENT_TIMESTAMP_MISSING,
            "Succeeded records without a usable event time.",
        ),
        (
            EVENT_CLOCK_SKEW,
            "Succeeded records timestamped later than the consumer's clock.",
        ),
    ] {
        let m = receiver.metric(name);
        assert_eq!(m.unit, "{message}", "{name}");
        assert_eq!(m.description, description, "{name}");
        assert_eq!(sum_shape(&m), (true, 2), "{name}: monotonic, cumulative");
    }
    let consumed = receiver.metric(CONSUMED_MESSAGES);
    assert_eq!(sum_total_matching(Some(&consumed), &p0), n as f64);
    assert_eq!(sum_total_matching(Some(&consumed), &p1), 1.0);

    // Attempts: one success per record; two handler errors and one panic on
    // partition 0; every attempt of the poison record on partition 1.
    let process = receiver.metric(PROCESS_DURATION);
    let op = [(MESSAGING_OPERATION_NAME, "process")];
    let err = |kind: &'static str| {
        let mut a: Vec<(&str, &str)> = op.to_vec();
        a.push((ERROR_TYPE, kind));
        a
    };
    assert_eq!(
        histogram_point_with(&process, &with(&p0, &op)).count,
        n as u64
    );
    assert_eq!(
        histogram_point_with(&process, &with(&p0, &err("handler_error"))).count,
        2
    );
    assert_eq!(
        histogram_point_with(&process, &with(&p0, &err("panic"))).count,
        1
    );
    assert_eq!(
        histogram_point_with(&process, &with(&p1, &err("handler_error"))).count,
        u64::from(poison_attempts)
    );
    // Partition 1's success series exists from its assignment on, empty.
    assert_eq!(
        histogram_point_with(&process, &with(&p1, &op)).count,
        0,
        "no success recorded for partition 1"
    );
    assert_eq!(
        histogram_points(&process).0.len(),
        5,
        "partition 0: success, handler_error, panic; partition 1: handler_error and an empty success"
    );
    assert_eq!(summary.failed_attempts, 3 + u64::from(poison_attempts));

    shutdown(&provider).await;
}

/// With `event_time_header`, the age comes from the header (ASCII decimal
/// or 8 bytes big-endian milliseconds) with `timestamp.type=header`, not from
/// the record timestamp; a missing, null or unparsable header counts as a
/// missing timestamp and leaves no age sample.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_time_header_is_the_age_source_when_configured() {
    let (receiver, provider) = wire().await;
    let (cluster, topic, group) = TestCluster::with_topic("wire-header", 1).await;
    const HEADER: &str = "event-time";

    // The record timestamps are "now" (CreateTime); the headers say 7 s and
    // 20 s ago.
    let ascii = (now_ms() - 7_000).to_string();
    let binary = (now_ms() - 20_000).to_be_bytes();
    let produce = |key: &'static str, headers: Vec<(&'static str, Option<Vec<u8>>)>| {
        let cluster = &cluster;
        let topic = topic.clone();
        async move {
            let h: Vec<(&str, Option<&[u8]>)> =
                headers.iter().map(|(k, v)| (*k, v.as_deref())).collect();
            cluster
                .produce_with_headers(&topic, 0, key, "v", None, &h)
                .await
        }
    };
    produce("ascii", vec![(HEADER, Some(ascii.into_bytes()))]).await;
    produce("binary", vec![(HEADER, Some(binary.to_vec()))]).await;
    produce("absent", vec![("other", Some(b"1".to_vec()))]).await;
    produce("null", vec![(HEADER, None)]).await;
    produce("garbage", vec![(HEADER, Some(b"soon".to_vec()))]).await;

    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .event_time_header(HEADER)
            .meter_provider(&provider),
    );
    wait_until(WAIT, "five records handled", || async { seen.len() == 5 }).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 5);

    let p0 = partition_attrs(&topic, 0, &group);
    let age = receiver.metric(EVENT_AGE);
    let (points, _) = histogram_points(&age);
    assert_eq!(points.len(), 1, "only timestamp.type=header: {points:?}");
    let point = histogram_point_with(&age, &with(&p0, &[(TIMESTAMP_TYPE, "header")]));
    assert_eq!(point.count, 2);
    let mut want = vec![0u64; EVENT_AGE_BOUNDARIES.len() + 1];
    want[bucket(EVENT_AGE_BOUNDARIES, 7.01)] = 1; // (5, 10]
    want[bucket(EVENT_AGE_BOUNDARIES, 20.01)] = 1; // (15, 30]
    assert_eq!(
        point.bucket_counts, want,
        "ages from the headers, not the record timestamps"
    );
    assert!(
        point.min.unwrap() >= 7.0 && point.max.unwrap() >= 20.0,
        "{point:?}"
    );
    assert_eq!(
        number_value_with(&receiver.metric(EVENT_TIMESTAMP_MISSING), &p0),
        3.0,
        "absent, null and unparsable headers"
    );
    assert_eq!(receiver.counter_total(EVENT_CLOCK_SKEW, &Attrs::new()), 0.0);

    shutdown(&provider).await;
}

// ---------------------------------------------------------------------------
// 3. The shutdown flush
// ---------------------------------------------------------------------------

/// 5 records handled, export interval 60 s, shutdown: the receiver has an
/// event-age count of 5, received during `run_until`'s shutdown.
async fn shutdown_flush_exports_the_last_interval() {
    let (receiver, provider) = wire().await;
    let (cluster, topic, group) = TestCluster::with_topic("flush", 1).await;
    for i in 0..5 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "v", Some(now_ms() - 1_000))
            .await;
    }
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .meter_provider(&provider),
    );
    wait_until(WAIT, "five records handled", || async { seen.len() == 5 }).await;
    assert_eq!(
        receiver.request_count(),
        0,
        "nothing exported before shutdown"
    );

    let started = Instant::now();
    let summary = run.stop().await;
    let took = started.elapsed();
    eprintln!("shutdown took {took:?}");
    assert!(!summary.shutdown_timed_out, "{summary:?}");
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");

    // Already there when run_until returned: the flush waited for the export.
    let p0 = partition_attrs(&topic, 0, &group);
    let age = receiver
        .latest_metric(EVENT_AGE)
        .expect("event age flushed at shutdown");
    let point = histogram_point_with(&age, &with(&p0, &[(TIMESTAMP_TYPE, "create_time")]));
    assert_eq!(point.count, 5);
    assert_eq!(receiver.counter_total(CONSUMED_MESSAGES, &p0), 5.0);

    shutdown(&provider).await;
}

#[tokio::test]
async fn shutdown_flush_on_a_current_thread_runtime() {
    shutdown_flush_exports_the_last_interval().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_flush_on_a_multi_thread_runtime() {
    shutdown_flush_exports_the_last_interval().await;
}

// ---------------------------------------------------------------------------
// 4. An unreachable collector
// ---------------------------------------------------------------------------

/// An address on which nothing listens: bound, then released.
async fn closed_port() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// The shutdown timeout of the consumers of [`consume_all`].
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// A consumer exporting to `provider`, with a shutdown timeout of
/// [`SHUTDOWN_TIMEOUT`], of a new topic `{prefix}-…` holding `per_partition`
/// records in each of `partitions` partitions: returned once it handled
/// them all, with its cluster, topic, group and what it handled.
async fn consume_all(
    prefix: &str,
    partitions: i32,
    per_partition: usize,
    provider: &SdkMeterProvider,
) -> (TestCluster, String, String, Seen, Running) {
    let (cluster, topic, group) = TestCluster::with_topic(prefix, partitions).await;
    cluster
        .produce_many(&topic, partitions, per_partition)
        .await;
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .meter_provider(provider)
            .shutdown_timeout(SHUTDOWN_TIMEOUT),
    );
    let all = partitions as usize * per_partition;
    wait_until(WAIT, &format!("{all} records handled"), || async {
        seen.len() == all
    })
    .await;
    (cluster, topic, group, seen, run)
}

/// Exports fail every 100 ms while records flow: consumption and commits
/// are unaffected, and `run_until` returns within its shutdown timeout
/// although the final flush cannot reach the collector.
async fn unreachable_collector(protocol: OtlpProtocol) {
    logs::init();
    let addr = closed_port().await;
    let endpoint = match protocol {
        OtlpProtocol::Grpc => format!("http://{addr}"),
        OtlpProtocol::HttpProtobuf => format!("http://{addr}/v1/metrics"),
    };
    let provider = OtlpConfig::new()
        .with_protocol(protocol)
        .with_endpoint(endpoint)
        .with_export_interval(Duration::from_millis(100))
        .with_timeout(Duration::from_secs(1))
        .build()
        .expect("provider");
    let (cluster, topic, group, seen, run) = consume_all("no-collector", 2, 100, &provider).await;
    let high = cluster.high_watermarks(&topic, 2).await;
    assert_eq!(high, vec![100, 100]);
    wait_until(WAIT, "committed reaches the high watermarks", || async {
        cluster.committed(&group, &topic, 2).await == high
    })
    .await;
    // More records while exports keep failing.
    cluster.produce_many(&topic, 2, 10).await;
    wait_until(WAIT, "220 records handled", || async { seen.len() == 220 }).await;
    wait_until(
        WAIT,
        "committed reaches the new high watermarks",
        || async { cluster.committed(&group, &topic, 2).await == vec![110, 110] },
    )
    .await;

    let what = format!("{protocol}: the collector unreachable");
    let (summary, _) = run
        .stop_within(SHUTDOWN_TIMEOUT + Duration::from_millis(500), &what)
        .await;
    assert_eq!(summary.records_succeeded, 220);
    assert_eq!(
        summary_committed(&summary, &topic, 2),
        [Some(110), Some(110)]
    );
    let _ = fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_grpc_collector_does_not_affect_consumption() {
    unreachable_collector(OtlpProtocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_http_collector_does_not_affect_consumption() {
    unreachable_collector(OtlpProtocol::HttpProtobuf).await;
}

/// A collector that accepts connections and never answers: the shutdown
/// flush cannot finish, yet `run_until` returns within its shutdown timeout
/// (reporting that it timed out), after committing everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_collector_does_not_stretch_shutdown_past_its_timeout() {
    logs::init();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let provider = OtlpConfig::new()
        .with_endpoint(format!("http://{addr}"))
        .with_export_interval(Duration::from_secs(60))
        .with_timeout(Duration::from_secs(10))
        .build()
        .expect("provider");
    let (cluster, topic, group, _, run) = consume_all("silent-collector", 1, 20, &provider).await;
    let (summary, _) = run
        .stop_within(
            SHUTDOWN_TIMEOUT + Duration::from_millis(500),
            "a silent collector",
        )
        .await;
    assert!(summary.shutdown_timed_out, "the flush could not finish");
    assert_eq!(summary.committed.get(&tp(&topic, 0)), Some(&20));
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![20]);
    let _ = fresh_consumer::metrics::shutdown(&provider, Duration::from_millis(100)).await;
    silent.abort();
}

// ---------------------------------------------------------------------------
// 6. Base-2 exponential histograms
// ---------------------------------------------------------------------------

/// Runs three records stamped 0.5 s, 3 s and 120 s ago through a consumer
/// with `provider`, and checks that the library's histograms arrived as
/// exponential histograms with the right counts and values.
async fn exponential_event_age(receiver: &OtlpReceiver, provider: &SdkMeterProvider) {
    let (cluster, topic, group) = TestCluster::with_topic("expo", 1).await;
    for (i, age) in [0.5, 3.0, 120.0].iter().enumerate() {
        let ts = now_ms() - (age * 1000.0) as i64;
        cluster
            .produce(&topic, 0, &format!("k{i}"), "v", Some(ts))
            .await;
    }
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .meter_provider(provider),
    );
    wait_until(WAIT, "three records handled", || async { seen.len() == 3 }).await;
    run.stop().await;

    let p0 = partition_attrs(&topic, 0, &group);
    let age = receiver.metric(EVENT_AGE);
    assert_eq!(kind(&age), "exponential_histogram");
    assert_eq!(age.unit, "s");
    let (points, temporality) = exponential_histogram_points(&age);
    assert_eq!(temporality, 2);
    assert_eq!(points.len(), 1);
    let point = &points[0];
    assert_eq!(
        point.attributes,
        with(&p0, &[(TIMESTAMP_TYPE, "create_time")])
    );
    assert_eq!(point.count, 3);
    assert_eq!(point.zero_count, 0);
    assert_eq!(point.negative_total, 0);
    assert_eq!(point.positive_counts.iter().sum::<u64>(), 3);
    let ages = seen.ages(0);
    let min = ages.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ages.iter().copied().fold(0.0, f64::max);
    assert!(
        (point.min.unwrap() - min).abs() < 0.005,
        "{point:?} vs {ages:?}"
    );
    assert!(
        (point.max.unwrap() - max).abs() < 0.005,
        "{point:?} vs {ages:?}"
    );
    // 0.5 s to 120 s in at most 160 buckets: still a fine scale.
    assert!(point.scale >= 3, "{point:?}");
    for a in &ages {
        assert!(
            point.count_at(point.bucket_index(*a)) >= 1,
            "{a} in {point:?}"
        );
    }

    // The durations are exponential too; the counters are still sums.
    for name in [
        PROCESS_DURATION,
        BATCH_DURATION,
        POLL_INTERVAL,
        CLIENT_OPERATION_DURATION,
    ] {
        assert_eq!(
            kind(&receiver.metric(name)),
            "exponential_histogram",
            "{name}"
        );
    }
    let process = exponential_histogram_points(&receiver.metric(PROCESS_DURATION)).0;
    assert_eq!(process.iter().map(|p| p.count).sum::<u64>(), 3);
    assert_eq!(kind(&receiver.metric(CONSUMED_MESSAGES)), "sum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_histograms_through_the_config_option() {
    logs::init();
    let receiver = OtlpReceiver::start().await;
    let provider = otlp_config(&receiver, Duration::from_secs(60))
        .with_exponential_histograms(
            otlp::DEFAULT_EXPONENTIAL_MAX_SIZE,
            otlp::DEFAULT_EXPONENTIAL_MAX_SCALE,
        )
        .build()
        .expect("provider");
    exponential_event_age(&receiver, &provider).await;
    shutdown(&provider).await;
}

/// The public view, on a provider built from `meter_provider_builder`
/// (as a user with their own views and readers would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_histograms_through_the_public_view() {
    logs::init();
    let receiver = OtlpReceiver::start().await;
    let provider = otlp_config(&receiver, Duration::from_secs(60))
        .meter_provider_builder()
        .expect("builder")
        .with_view(otlp::exponential_histogram_view(64, 10).expect("view"))
        .build();
    exponential_event_age(&receiver, &provider).await;
    shutdown(&provider).await;
}

// ---------------------------------------------------------------------------
// Failed commits
// ---------------------------------------------------------------------------

/// A commit the broker rejects arrives as a `messaging.client.operation.duration`
/// point with `error.type` = the Kafka error name (as documented), next to
/// the successful commits; one point per commit, as the run counted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_commits_carry_the_kafka_error_name() {
    use rdkafka::types::RDKafkaApiKey;
    use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE;
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("commit-error", 1).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker") else {
        return;
    };
    let receiver = OtlpReceiver::start().await;
    let provider = provider_for(&receiver);
    cluster.produce_many(&topic, 1, 10).await;
    // librdkafka retries coordinator and timeout errors itself; this one
    // reaches the caller.
    mock.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE],
    );
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .meter_provider(&provider),
    );
    wait_until(WAIT, "committed reaches the high watermark", || async {
        cluster.committed(&group, &topic, 1).await == vec![10]
    })
    .await;
    let summary = run.stop().await;
    assert_eq!(summary.commit_failures, 1, "{summary:?}");

    let commits = receiver.metric(CLIENT_OPERATION_DURATION);
    let polls = histogram_points(&commits)
        .0
        .iter()
        .filter(|p| {
            p.attributes
                .get(MESSAGING_OPERATION_NAME)
                .map(String::as_str)
                == Some("poll")
        })
        .count();
    let base = with(
        &group_attrs(&group),
        &[
            (MESSAGING_OPERATION_NAME, "commit"),
            (MESSAGING_OPERATION_TYPE, "settle"),
        ],
    );
    let failed = histogram_point_with(
        &commits,
        &with(&base, &[(ERROR_TYPE, "OFFSET_METADATA_TOO_LARGE")]),
    );
    assert_eq!(failed.count, 1);
    assert_eq!(histogram_point_with(&commits, &base).count, summary.commits);
    assert_eq!(histogram_points(&commits).0.len(), 2 + polls);
    shutdown(&provider).await;
}
