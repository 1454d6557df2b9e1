//! A compacted topic (`cleanup.policy=compact`): the log cleaner removes
//! every record but the latest of each key from closed segments, leaving
//! gaps in the offsets. A committed offset that points into a gap is not a
//! loss (the log start did not pass it) and not a stall: the consumer reads
//! on from the next surviving record, commits up to the high watermark and
//! stays healthy.
//!
//! Real clusters only: librdkafka's mock broker has no log cleaner.

mod support;

use std::time::{Duration, Instant};

use fresh_consumer::health::HealthThresholds;
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use support::handled::Seen;
use support::kafka::{TestCluster, now_ms, unique};
use support::logs;
use support::run::{assert_caught_up_for, start, wait_snapshot};
use support::wait::{WAIT, wait_for};

/// Records produced, and keys they cycle through.
const RECORDS: i64 = 60;
const KEYS: i64 = 5;

/// The offsets a plain reader finds from the log start to the high
/// watermark `hi`.
async fn surviving(cluster: &TestCluster, topic: &str, hi: i64) -> Vec<i64> {
    let (bootstrap, topic) = (cluster.bootstrap().to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", unique("g-compaction-reader"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("reader");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .unwrap();
        reader.assign(&tpl).expect("assign");
        let mut offsets = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while offsets.last().is_none_or(|&o| o + 1 < hi) && Instant::now() < deadline {
            if let Some(m) = reader.poll(Duration::from_millis(100)) {
                offsets.push(m.expect("read").offset());
            }
        }
        offsets
    })
    .await
    .expect("reader task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_offset_in_a_compacted_gap_is_neither_a_stall_nor_a_loss() {
    logs::init();
    let cluster = TestCluster::start();
    if !cluster.is_real() {
        eprintln!("skipped: needs a real cluster (the mock broker has no log cleaner)");
        return;
    }
    let topic = unique("compacted");
    // Every record its own segment (its CreateTime is a second after the
    // previous one, segment.ms is 100 ms), so the cleaner may compact all
    // but the active segment at once.
    cluster
        .create_topic_with(
            &topic,
            1,
            &[
                ("cleanup.policy", "compact"),
                ("segment.ms", "100"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("min.compaction.lag.ms", "0"),
            ],
        )
        .await;
    let base = now_ms() - (RECORDS + 60) * 1_000;
    for i in 0..RECORDS {
        let key = format!("k{}", i % KEYS);
        cluster
            .produce(&topic, 0, &key, "v", Some(base + i * 1_000))
            .await;
    }
    let (lo, hi) = cluster.watermarks(&topic, 0).await;
    assert_eq!((lo, hi), (0, RECORDS));
    // Wait for the end state, not for a first pass: the cleaner may run
    // again while the consumer reads, and a record that vanishes between
    // this read and the consumer's is a race in the test, not a loss. The
    // end state: the last record (alone in the active segment, which the
    // cleaner never touches) and the latest record of each key below it,
    // offsets 54 to 59 (measured on Apache Kafka 4.3.1).
    let compacted: Vec<i64> = (RECORDS - KEYS - 1..RECORDS).collect();
    let kept = wait_for(
        Duration::from_secs(60),
        "the log cleaner compacted the topic to the latest record per key",
        || surviving(&cluster, &topic, hi),
        |o| *o == compacted,
    )
    .await;
    let (lo_after, _) = cluster.watermarks(&topic, 0).await;
    println!("after compaction: log start {lo_after}, surviving offsets {kept:?}");
    assert_eq!(lo_after, 0, "compaction does not move the log start");

    // Committed at an offset that no longer exists (below the first
    // surviving record, above the log start).
    let gap = kept[0] / 2;
    assert!(gap > 0 && !kept.contains(&gap));
    let group = unique("g-compacted");
    cluster.commit_offset(&group, &topic, 0, gap).await;

    let stall_after = Duration::from_secs(2);
    let seen = Seen::default();
    let run = start(
        cluster
            .consumer(&group, &topic, seen.recorder())
            .statistics_interval(Duration::from_millis(100))
            .health_thresholds(
                HealthThresholds::default()
                    .with_stall_after(stall_after)
                    .with_no_success_after(Duration::from_secs(3))
                    .with_lag_growth_window(Duration::from_secs(2)),
            ),
    );
    let want: Vec<i64> = kept.iter().copied().filter(|&o| o >= gap).collect();
    wait_for(
        WAIT,
        "every surviving record handled",
        || async { seen.of(0) },
        |got| *got == want,
    )
    .await;
    cluster.wait_committed(&group, &topic, &[hi]).await;
    let s = wait_snapshot(&run.health, WAIT, "caught up", |s| {
        s.partition(&topic, 0).is_some_and(|p| p.lag == Some(0))
    })
    .await;
    println!("{s}");
    // Longer than stall_after: ok and healthy, no reason (no retention
    // overrun, no stall).
    assert_caught_up_for(&run.health, &topic, stall_after * 2).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_received, want.len() as u64);
    assert_eq!(summary.records_unreadable, 0);
    assert_eq!(seen.of(0), want, "each surviving record once, in order");
}
