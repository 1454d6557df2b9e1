//! Issue 26, first slice: handler outputs (`FreshConsumer::outputs`,
//! `fresh_consumer::output::outputs()`), the origin time they carry across hops,
//! and `origin_time(true)` reading it back as the end-to-end age.
//!
//! `a_failed_delivery_fails_the_attempt_and_holds_the_commit` needs the
//! mock's injected Produce errors and skips on a real cluster; the others
//! run on both.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::metrics::{
    ERROR_TYPE, EVENT_AGE, MESSAGING_DESTINATION_NAME, MESSAGING_OPERATION_NAME, MESSAGING_SYSTEM,
    ORIGIN_TIME_MALFORMED, PROCESS_DURATION, SENT_MESSAGES, TIMESTAMP_TYPE,
};
use fresh_consumer::output::{ORIGIN_TIME_HEADER, OutputError, Outputs};
use fresh_consumer::testing::TestMetrics;
use fresh_consumer::{
    Batch, BatchError, BoxError, ConfigError, Record,
    output::{Output, OutputConfig},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use rdkafka::types::RDKafkaApiKey;
use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS;
use support::kafka::{TestCluster, now_ms};
use support::metrics::{Attrs, partition_attrs, with};
use support::otlp_receiver::attrs;
use support::run::start;
use support::wait::{WAIT, wait_until};

/// A header as `TestCluster::produce_with_headers` takes it.
type Header<'a> = (&'a str, Option<&'a [u8]>);

/// The attributes of `messaging.client.sent.messages` for `topic`.
fn sent_attrs(topic: &str) -> Attrs {
    attrs(&[
        (MESSAGING_SYSTEM, "kafka"),
        (MESSAGING_DESTINATION_NAME, topic),
        (MESSAGING_OPERATION_NAME, "send"),
    ])
}

fn header_text(r: &Record, name: &str) -> Option<String> {
    r.header(name)
        .flatten()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// A per-record handler's outputs arrive with its key, payload and
/// headers, plus the input's origin time (its timestamp: it carried none)
/// and the context of the attempt's process span; the input is committed
/// and every output counted as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_arrive_with_the_origin_time_and_the_process_span_context() {
    let (cluster, topic, group) = TestCluster::with_topic("out-in", 1).await;
    let out_topic = cluster.topic("out-out", 2).await;
    let origin = now_ms() - 10_000;
    for i in 0..5 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        cluster
            .produce_with_headers(&topic, 0, &k, &v, Some(origin + i), &[])
            .await;
    }
    let metrics = TestMetrics::new();
    let spans = InMemorySpanExporter::default();
    let tracer = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let to = out_topic.clone();
    let handler = move |r: Record| {
        let to = to.clone();
        async move {
            let payload = format!("out-{}", String::from_utf8_lossy(r.payload().unwrap()));
            fresh_consumer::output::outputs()?
                .send(
                    Output::to(to)
                        .key(r.key().unwrap())
                        .payload(payload)
                        .header("hop", "1"),
                )
                .await?;
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new().producer_property("linger.ms", "1"))
            .meter_provider(metrics.provider())
            .tracer_provider(&tracer)
            .trace_propagator(TraceContextPropagator::new()),
    );
    cluster.wait_committed(&group, &topic, &[5]).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 5, "{summary:?}");

    let mut outs = cluster.read_topic(&out_topic, 2).await;
    outs.sort_by_key(|r| r.key().map(<[u8]>::to_vec));
    assert_eq!(outs.len(), 5, "{outs:?}");
    let process_spans: Vec<String> = spans
        .get_finished_spans()
        .expect("spans")
        .iter()
        .filter(|s| s.name == format!("process {topic}"))
        .map(|s| format!("{}-{}", s.span_context.trace_id(), s.span_context.span_id()))
        .collect();
    assert_eq!(process_spans.len(), 5, "{process_spans:?}");
    for (i, r) in outs.iter().enumerate() {
        assert_eq!(r.key(), Some(format!("k{i}").as_bytes()));
        assert_eq!(r.payload(), Some(format!("out-v{i}").as_bytes()));
        assert_eq!(header_text(r, "hop").as_deref(), Some("1"));
        assert_eq!(
            header_text(r, ORIGIN_TIME_HEADER),
            Some((origin + i as i64).to_string()),
            "the origin time is the input's timestamp"
        );
        let traceparent = header_text(r, "traceparent").expect("traceparent");
        let ids = traceparent.split('-').collect::<Vec<_>>();
        assert!(
            process_spans.contains(&format!("{}-{}", ids[1], ids[2])),
            "{traceparent} names a process span: {process_spans:?}"
        );
    }
    metrics.flush().await.expect("flush the test metrics");
    assert_eq!(
        metrics.counter_total(SENT_MESSAGES, &sent_attrs(&out_topic)),
        5.0
    );
    assert_eq!(
        metrics.counter_total(
            SENT_MESSAGES,
            &with(&sent_attrs(&out_topic), &[(ERROR_TYPE, "_MSG_TIMED_OUT")])
        ),
        0.0
    );
    metrics
        .shutdown()
        .await
        .expect("shut the test metrics down");
}

/// Outputs that the broker does not acknowledge (injected Produce errors,
/// `message.timeout.ms` 200) fail their attempts: the record is retried,
/// nothing is committed meanwhile, and once the broker takes writes again
/// the record is committed with its output written at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_fails_the_attempt_and_holds_the_commit() {
    let (cluster, topic, group) = TestCluster::with_topic("out-fail", 1).await;
    let out_topic = cluster.topic("out-fail-out", 1).await;
    for i in 0..3 {
        cluster
            .produce_with_headers(&topic, 0, &format!("k{i}"), "v", None, &[])
            .await;
    }
    let Some(mock) = cluster.mock_or_skip("injected Produce errors") else {
        return;
    };
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 10_000],
    );
    let calls = Arc::new(Mutex::new(BTreeMap::<i64, u32>::new()));
    let seen = Arc::clone(&calls);
    let to = out_topic.clone();
    let handler = move |r: Record| {
        let (to, seen) = (to.clone(), Arc::clone(&seen));
        async move {
            *seen.lock().unwrap().entry(r.offset()).or_default() += 1;
            fresh_consumer::output::outputs()?
                .send(Output::to(to).key(r.key().unwrap()).payload("out"))
                .await?;
            Ok::<(), BoxError>(())
        }
    };
    let metrics = TestMetrics::new();
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new().producer_property("message.timeout.ms", "200"))
            .meter_provider(metrics.provider()),
    );
    wait_until(WAIT, "record 0 attempted three times", || async {
        calls.lock().unwrap().get(&0).copied().unwrap_or(0) >= 3
    })
    .await;
    assert_eq!(
        cluster.committed(&group, &topic, 1).await,
        vec![-1001],
        "nothing is committed while the output is not acknowledged"
    );
    assert_eq!(calls.lock().unwrap().get(&1), None, "record 1 waits");
    metrics.flush().await.expect("flush the test metrics");
    let failed = metrics.counter_total(
        SENT_MESSAGES,
        &with(&sent_attrs(&out_topic), &[(ERROR_TYPE, "_MSG_TIMED_OUT")]),
    );
    assert!(failed >= 2.0, "failed deliveries counted: {failed}");
    let (_, failed_attempts) = sum_count(
        &metrics,
        PROCESS_DURATION,
        &with(
            &partition_attrs(&topic, 0, &group),
            &[(ERROR_TYPE, "output_error")],
        ),
    );
    assert!(failed_attempts >= 2, "{failed_attempts}");

    mock.clear_request_errors(RDKafkaApiKey::Produce);
    cluster.wait_committed(&group, &topic, &[3]).await;
    run.stop().await;
    let outs = cluster.read_topic(&out_topic, 1).await;
    for i in 0..3 {
        let key = format!("k{i}");
        assert!(
            outs.iter().any(|r| r.key() == Some(key.as_bytes())),
            "{key} written at least once: {outs:?}"
        );
    }
    eprintln!(
        "attempts per offset {:?}; {} outputs for 3 inputs",
        calls.lock().unwrap(),
        outs.len()
    );
    metrics
        .shutdown()
        .await
        .expect("shut the test metrics down");
}

/// The idempotent output producer treats OUT_OF_ORDER_SEQUENCE_NUMBER as
/// fatal and then fails every later write: the library replaces it, so
/// the record's next attempt goes through and the partition moves on
/// instead of retrying on a dead producer until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_output_producer_is_replaced() {
    use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
    support::logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("out-fatal", 1).await;
    let out_topic = cluster.topic("out-fatal-out", 1).await;
    for i in 0..3 {
        cluster
            .produce_with_headers(&topic, 0, &format!("k{i}"), "v", None, &[])
            .await;
    }
    let Some(mock) = cluster.mock_or_skip("injected Produce errors") else {
        return;
    };
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    let to = out_topic.clone();
    let handler = move |r: Record| {
        let to = to.clone();
        async move {
            fresh_consumer::output::outputs()?
                .send(Output::to(to).key(r.key().unwrap()))
                .await?;
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .outputs(OutputConfig::new()),
    );
    cluster.wait_committed(&group, &topic, &[3]).await;
    run.stop().await;
    let outs = cluster.read_topic(&out_topic, 1).await;
    for i in 0..3 {
        let key = format!("k{i}");
        assert!(
            outs.iter().any(|r| r.key() == Some(key.as_bytes())),
            "{key}: {outs:?}"
        );
    }
    assert!(
        support::logs::count(|e| e.mentions("the output producer raised a fatal error")) >= 1,
        "the replacement is logged"
    );
}

/// Under key order several handler calls of one partition run at once on
/// the worker's task: each sees its own handle (its own record's origin
/// time), and each output carries its own input's origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_under_key_order_each_get_their_own_handle() {
    const N: i64 = 24;
    let (cluster, topic, group) = TestCluster::with_topic("out-keys", 1).await;
    let out_topic = cluster.topic("out-keys-out", 1).await;
    let base = now_ms() - 30_000;
    for i in 0..N {
        let key = format!("key-{}", i % 6);
        cluster
            .produce_with_headers(&topic, 0, &key, &i.to_string(), Some(base + i), &[])
            .await;
    }
    let mismatches = Arc::new(AtomicU32::new(0));
    let bad = Arc::clone(&mismatches);
    let to = out_topic.clone();
    let handler = move |r: Record| {
        let (to, bad) = (to.clone(), Arc::clone(&bad));
        async move {
            let out = fresh_consumer::output::outputs()?;
            // Another key's call runs meanwhile on the same task.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if out.origin_time_ms() != r.timestamp().millis() {
                bad.fetch_add(1, Ordering::Relaxed);
            }
            out.send(
                Output::to(to)
                    .key(r.key().unwrap())
                    .payload(r.payload().unwrap()),
            )
            .await?;
            Ok::<(), BoxError>(())
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .processing_order(fresh_consumer::ProcessingOrder::Key { max_in_flight: 6 })
            .outputs(OutputConfig::new()),
    );
    cluster.wait_committed(&group, &topic, &[N]).await;
    run.stop().await;
    assert_eq!(mismatches.load(Ordering::Relaxed), 0);
    let outs = cluster.read_topic(&out_topic, 1).await;
    assert_eq!(outs.len(), N as usize);
    for r in &outs {
        let i: i64 = String::from_utf8_lossy(r.payload().unwrap())
            .parse()
            .unwrap();
        assert_eq!(
            header_text(r, ORIGIN_TIME_HEADER),
            Some((base + i).to_string()),
            "output of input {i}"
        );
    }
}

/// A batch handler's outputs carry the oldest origin time of their batch,
/// and the batch is committed once they are acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_outputs_carry_the_oldest_origin_of_their_batch() {
    let (cluster, topic, group) = TestCluster::with_topic("out-batch", 1).await;
    let out_topic = cluster.topic("out-batch-out", 1).await;
    // Newest first: the oldest origin of a batch is its last record's.
    let base = now_ms() - 5_000;
    let stamps: Vec<i64> = (0..6).map(|i| base - i * 1_000).collect();
    for (i, ts) in stamps.iter().enumerate() {
        cluster
            .produce_with_headers(&topic, 0, &format!("k{i}"), "v", Some(*ts), &[])
            .await;
    }
    let batches = Arc::new(Mutex::new(Vec::<(Vec<i64>, Option<i64>)>::new()));
    let seen = Arc::clone(&batches);
    let to = out_topic.clone();
    let handler = move |batch: Batch| {
        let (to, seen) = (to.clone(), Arc::clone(&seen));
        async move {
            let out = fresh_consumer::output::outputs().map_err(BatchError::new)?;
            let stamps = batch
                .iter()
                .map(|r| r.timestamp().millis().unwrap())
                .collect();
            seen.lock().unwrap().push((stamps, out.origin_time_ms()));
            for r in batch.iter() {
                out.send(Output::to(to.clone()).key(r.key().unwrap()))
                    .await
                    .map_err(BatchError::new)?;
            }
            Ok::<(), BatchError>(())
        }
    };
    let metrics = TestMetrics::new();
    let run = start(
        cluster
            .batched(&group, &topic, handler)
            .max_batch_wait(Duration::from_millis(200))
            .outputs(OutputConfig::new())
            .meter_provider(metrics.provider()),
    );
    cluster.wait_committed(&group, &topic, &[6]).await;
    run.stop().await;
    let batches = batches.lock().unwrap().clone();
    eprintln!("batches (input timestamps, origin): {batches:?}");
    let mut origin_of_key = BTreeMap::new();
    let mut i = 0;
    for (stamps, origin) in &batches {
        assert_eq!(*origin, stamps.iter().copied().min(), "{batches:?}");
        for _ in stamps {
            origin_of_key.insert(format!("k{i}"), origin.unwrap().to_string());
            i += 1;
        }
    }
    let outs = cluster.read_topic(&out_topic, 1).await;
    assert_eq!(outs.len(), 6, "{outs:?}");
    for r in &outs {
        let key = String::from_utf8_lossy(r.key().unwrap()).into_owned();
        assert_eq!(
            header_text(r, ORIGIN_TIME_HEADER).as_ref(),
            origin_of_key.get(&key),
            "{key}"
        );
    }
    metrics.flush().await.expect("flush the test metrics");
    assert_eq!(
        metrics.counter_total(SENT_MESSAGES, &sent_attrs(&out_topic)),
        6.0
    );
    metrics
        .shutdown()
        .await
        .expect("shut the test metrics down");
}

/// Three hops with known handler delays (400, 300 and 200 ms): the last
/// hop, reading the origin time (`origin_time(true)`), records an event
/// age of at least their sum for every record, from the source records'
/// own timestamps; a consumer of the same topic without it sees only the
/// last write's age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hops_end_to_end_age_is_at_least_the_sum_of_their_delays() {
    const N: usize = 5;
    let delays = [400u64, 300, 200];
    let cluster = TestCluster::start();
    let t1 = cluster.topic("hop-1", 1).await;
    let t2 = cluster.topic("hop-2", 1).await;
    let t3 = cluster.topic("hop-3", 1).await;
    let mut sources = Vec::new();
    for i in 0..N {
        cluster
            .produce_with_headers(&t1, 0, &format!("k{i}"), "v", None, &[])
            .await;
    }
    for r in cluster.read_topic(&t1, 1).await {
        sources.push(r.timestamp().millis().unwrap());
    }
    let forward = |to: String, delay: u64| {
        move |r: Record| {
            let to = to.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                fresh_consumer::output::outputs()?
                    .send(Output::to(to).key(r.key().unwrap()))
                    .await?;
                Ok::<(), BoxError>(())
            }
        }
    };
    let groups: Vec<String> = (1..=4)
        .map(|i| support::kafka::unique(&format!("g-hop-{i}")))
        .collect();
    let hop1 = start(
        cluster
            .consumer(&groups[0], &t1, forward(t2.clone(), delays[0]))
            .outputs(OutputConfig::new()),
    );
    let hop2 = start(
        cluster
            .consumer(&groups[1], &t2, forward(t3.clone(), delays[1]))
            .outputs(OutputConfig::new()),
    );
    let origins = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&origins);
    let last = delays[2];
    let end_to_end = TestMetrics::new();
    let hop3 = start(
        cluster
            .consumer(&groups[2], &t3, move |r: Record| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock()
                        .unwrap()
                        .push(header_text(&r, ORIGIN_TIME_HEADER));
                    tokio::time::sleep(Duration::from_millis(last)).await;
                    Ok::<(), BoxError>(())
                }
            })
            .origin_time(true)
            .meter_provider(end_to_end.provider()),
    );
    let hop_only = TestMetrics::new();
    let plain = start(
        cluster
            .consumer(&groups[3], &t3, move |_r: Record| async move {
                tokio::time::sleep(Duration::from_millis(last)).await;
                Ok::<(), BoxError>(())
            })
            .meter_provider(hop_only.provider()),
    );
    cluster.wait_committed(&groups[2], &t3, &[N as i64]).await;
    cluster.wait_committed(&groups[3], &t3, &[N as i64]).await;
    for run in [hop1, hop2, hop3, plain] {
        run.stop().await;
    }
    let mut got: Vec<i64> = origins
        .lock()
        .unwrap()
        .iter()
        .map(|o| o.as_deref().expect("origin header").parse().unwrap())
        .collect();
    got.sort();
    sources.sort();
    assert_eq!(got, sources, "the last hop reads the source timestamps");

    end_to_end.flush().await.expect("flush the test metrics");
    hop_only.flush().await.expect("flush the test metrics");
    let origin_age = with(
        &partition_attrs(&t3, 0, &groups[2]),
        &[(TIMESTAMP_TYPE, "origin")],
    );
    let (min, max, count) =
        min_max_count(&end_to_end, EVENT_AGE, &origin_age).expect("end-to-end ages recorded");
    let sum = delays.iter().sum::<u64>() as f64 / 1000.0;
    let plain_age = with(
        &partition_attrs(&t3, 0, &groups[3]),
        &[(TIMESTAMP_TYPE, "create_time")],
    );
    let (pmin, pmax, _) =
        min_max_count(&hop_only, EVENT_AGE, &plain_age).expect("hop ages recorded");
    eprintln!(
        "three hops, delays {delays:?} ms (sum {sum} s): end-to-end age min {min:.3} s max {max:.3} s over {count} records; the last hop's own age min {pmin:.3} s max {pmax:.3} s"
    );
    assert_eq!(count, N as u64);
    assert!(
        min >= sum,
        "end-to-end age {min} s is at least the sum of the delays {sum} s"
    );
    end_to_end
        .shutdown()
        .await
        .expect("shut the test metrics down");
    hop_only
        .shutdown()
        .await
        .expect("shut the test metrics down");
}

/// With `origin_time(true)`, a record's valid origin header sets its age,
/// an unreadable one is counted and the record's timestamp is used, and a
/// record without one uses its timestamp: all three are handled and
/// committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_origin_header_is_counted_and_the_record_handled() {
    let (cluster, topic, group) = TestCluster::with_topic("origin-bad", 1).await;
    let origin = (now_ms() - 60_000).to_string();
    let headers: [&[Header<'_>]; 3] = [
        &[(ORIGIN_TIME_HEADER, Some(origin.as_bytes()))],
        &[(ORIGIN_TIME_HEADER, Some(b"soon"))],
        &[],
    ];
    for h in headers {
        cluster
            .produce_with_headers(&topic, 0, "k", "v", None, h)
            .await;
    }
    let metrics = TestMetrics::new();
    let run = start(
        cluster
            .consumer(&group, &topic, |_r: Record| async {
                Ok::<(), BoxError>(())
            })
            .origin_time(true)
            .meter_provider(metrics.provider()),
    );
    cluster.wait_committed(&group, &topic, &[3]).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 3);
    metrics.flush().await.expect("flush the test metrics");
    let p = partition_attrs(&topic, 0, &group);
    assert_eq!(metrics.counter_total(ORIGIN_TIME_MALFORMED, &p), 1.0);
    let (min, _, n) = min_max_count(
        &metrics,
        EVENT_AGE,
        &with(&p, &[(TIMESTAMP_TYPE, "origin")]),
    )
    .expect("origin age");
    assert_eq!(n, 1);
    assert!(min >= 60.0, "{min}");
    let (_, max, n) = min_max_count(
        &metrics,
        EVENT_AGE,
        &with(&p, &[(TIMESTAMP_TYPE, "create_time")]),
    )
    .expect("create-time ages");
    assert_eq!(n, 2);
    assert!(max < 60.0, "{max}");
    metrics
        .shutdown()
        .await
        .expect("shut the test metrics down");
}

/// Bad input gets a typed error: an empty topic name, a handle kept past
/// its handler call, no handle outside one, and producer properties that
/// would weaken the acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_gets_typed_errors() {
    let (cluster, topic, group) = TestCluster::with_topic("out-misuse", 1).await;
    let out_topic = cluster.topic("out-misuse-out", 1).await;
    cluster
        .produce_with_headers(&topic, 0, "k", "v", None, &[])
        .await;
    let kept: Arc<Mutex<Option<Outputs>>> = Arc::default();
    let empty = Arc::new(AtomicU32::new(0));
    let (keep, empties) = (Arc::clone(&kept), Arc::clone(&empty));
    let handler = move |_r: Record| {
        let (keep, empties) = (Arc::clone(&keep), Arc::clone(&empties));
        async move {
            let out = fresh_consumer::output::outputs()?;
            if let Err(OutputError::EmptyTopic) = out.send(Output::to("")).await {
                empties.fetch_add(1, Ordering::Relaxed);
            }
            *keep.lock().unwrap() = Some(out);
            Ok::<(), BoxError>(())
        }
    };
    let consumer = cluster
        .consumer(&group, &topic, handler)
        .outputs(OutputConfig::new());
    assert_eq!(consumer.validate(), Ok(()));
    let run = start(consumer);
    cluster.wait_committed(&group, &topic, &[1]).await;
    run.stop().await;
    assert_eq!(empty.load(Ordering::Relaxed), 1);
    let out = kept.lock().unwrap().take().expect("handle kept");
    assert!(matches!(
        out.send(Output::to(&out_topic)).await,
        Err(OutputError::CallEnded)
    ));
    assert!(matches!(
        fresh_consumer::output::outputs(),
        Err(OutputError::OutsideHandler)
    ));
    assert_eq!(cluster.read_topic(&out_topic, 1).await.len(), 0);

    let refused = cluster
        .consumer(&group, &topic, |_r: Record| async {
            Ok::<(), BoxError>(())
        })
        .outputs(OutputConfig::new().producer_property("acks", "1"))
        .validate();
    assert!(
        matches!(&refused, Err(ConfigError::OutputProducerProperty { property, .. }) if property == "acks"),
        "{refused:?}"
    );
    let no_headers = cluster
        .consumer(&group, &topic, |_r: Record| async {
            Ok::<(), BoxError>(())
        })
        .origin_time(true)
        .read_headers(false)
        .validate();
    assert!(
        matches!(
            &no_headers,
            Err(ConfigError::InvalidOption {
                option: "read_headers",
                ..
            })
        ),
        "{no_headers:?}"
    );
}

/// (sum, count) over the points of histogram `name` whose attributes
/// include `wanted`.
fn sum_count(metrics: &TestMetrics, name: &str, wanted: &Attrs) -> (f64, u64) {
    let h = metrics.histogram(name, wanted);
    (h.sum, h.count)
}

/// (min, max, count) over the points of f64 histogram `name` whose
/// attributes include `wanted`; `None` when none recorded a value.
fn min_max_count(metrics: &TestMetrics, name: &str, wanted: &Attrs) -> Option<(f64, f64, u64)> {
    let h = metrics.histogram(name, wanted);
    Some((h.min?, h.max?, h.count)).filter(|_| h.count > 0)
}
