//! A Kafka cluster for integration tests: librdkafka's in-process mock broker
//! by default, or a real cluster when `FRESH_CONSUMER_TEST_BOOTSTRAP` names
//! its bootstrap servers. Tests that need fault injection call
//! [`TestCluster::mock`] and skip when it returns `None`.
#![allow(dead_code)]

#[path = "../../examples/support/names.rs"]
mod names;

use std::fmt::Debug;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fresh_consumer::testing::TestKafka;
use fresh_consumer::{BatchHandler, Batched, FreshConsumer, Handler, RunSummary, TopicPartition};

use super::wait::{WAIT, wait_for};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Message, ToBytes};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    DefaultProducerContext, DeliveryFuture, FutureProducer, FutureRecord, Producer,
};
use rdkafka::{Offset, TopicPartitionList};

/// The environment variable naming a real cluster's bootstrap servers.
pub const BOOTSTRAP_ENV: &str = "FRESH_CONSUMER_TEST_BOOTSTRAP";

/// The library's test kit (`fresh_consumer::testing::TestKafka`) with what
/// these tests add: a real cluster from [`BOOTSTRAP_ENV`], panics instead of
/// errors, and the reads and writes of the fault and retention tests.
pub struct TestCluster {
    /// The mock broker (or the real cluster): starts and owns it, creates
    /// topics on the mock, reads topics back, sets the mock's group timings.
    kafka: TestKafka,
    producer: FutureProducer,
    bootstrap: String,
    real: bool,
}

pub use names::unique;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What a run's summary says it committed for partitions
/// `0..partitions` of `topic` (`None` where it committed nothing).
pub fn summary_committed(summary: &RunSummary, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    (0..partitions)
        .map(|p| summary.committed.get(&tp(topic, p)).copied())
        .collect()
}

/// Asserts that a run's summary says it committed `want` for partitions
/// `0..want.len()` of `topic`.
pub fn assert_summary_committed(summary: &RunSummary, topic: &str, want: &[i64]) {
    assert_eq!(
        summary_committed(summary, topic, want.len() as i32),
        want.iter().map(|o| Some(*o)).collect::<Vec<_>>(),
        "offsets committed in the run: {summary:?}"
    );
}

/// A consumer of `topic` in `group` with the settings that keep tests fast
/// on the mock broker, but for the group's session and heartbeat timings
/// (see [`TestCluster::consumer`]).
pub fn fast_consumer<H: Handler>(
    handler: H,
    bootstrap: &str,
    group: &str,
    topic: &str,
) -> FreshConsumer<H> {
    fast(FreshConsumer::new(handler), bootstrap, group, topic)
}

/// [`fast_consumer`]'s settings on any consumer (a batched one too).
pub fn fast<H>(
    consumer: FreshConsumer<H>,
    bootstrap: &str,
    group: &str,
    topic: &str,
) -> FreshConsumer<H> {
    consumer
        .bootstrap_servers(bootstrap)
        .group_id(group)
        .topics([topic])
        .set("fetch.wait.max.ms", "10")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .commit_interval(Duration::from_millis(50))
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(100))
        .revoke_timeout(Duration::from_secs(2))
        .shutdown_timeout(Duration::from_secs(10))
}

/// Waits for the acknowledgement of every record in `pending` (from
/// [`TestCluster::enqueue`]); panics when one failed.
pub async fn acked(pending: impl IntoIterator<Item = DeliveryFuture>) {
    for f in pending {
        f.await.expect("delivery").map_err(|(e, _)| e).expect("ack");
    }
}

pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.to_owned(),
        partition,
    }
}

impl TestCluster {
    /// Starts a mock cluster with `brokers` brokers, or connects to the real
    /// cluster named by [`BOOTSTRAP_ENV`].
    pub fn start_with(brokers: i32) -> Self {
        if let Ok(bootstrap) = std::env::var(BOOTSTRAP_ENV) {
            let producer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("linger.ms", "5")
                .create()
                .expect("producer for the real cluster");
            return TestCluster {
                kafka: TestKafka::connect(&bootstrap).expect("the real cluster"),
                producer,
                bootstrap,
                real: true,
            };
        }
        // The mock broker, with the first join of a group not delayed.
        let kafka = TestKafka::start_with_brokers(brokers).expect("mock cluster");
        let bootstrap = kafka.bootstrap_servers().to_owned();
        let producer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("linger.ms", "2")
            .create()
            .expect("producer");
        TestCluster {
            kafka,
            producer,
            bootstrap,
            real: false,
        }
    }

    pub fn start() -> Self {
        Self::start_with(1)
    }

    /// A cluster, a topic `{prefix}-…` of `partitions` partitions and a
    /// group name `g-{prefix}-…`.
    pub async fn with_topic(prefix: &str, partitions: i32) -> (Self, String, String) {
        let cluster = Self::start();
        let topic = cluster.topic(prefix, partitions).await;
        let group = unique(&format!("g-{prefix}"));
        (cluster, topic, group)
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn is_real(&self) -> bool {
        self.real
    }

    /// The mock cluster, for fault injection; `None` on a real cluster, after
    /// noting that the test skips itself because it `needs` the mock.
    pub fn mock_or_skip(&self, needs: &str) -> Option<MockCluster<'_, DefaultProducerContext>> {
        let mock = self.mock();
        if mock.is_none() {
            eprintln!("skipped: needs {needs}");
        }
        mock
    }

    /// The mock cluster, for fault injection; `None` on a real cluster.
    pub fn mock(&self) -> Option<MockCluster<'_, DefaultProducerContext>> {
        self.kafka.mock_cluster()
    }

    /// Creates a topic with a unique name and returns the name.
    pub async fn topic(&self, prefix: &str, partitions: i32) -> String {
        let name = unique(prefix);
        self.create_topic(&name, partitions).await;
        name
    }

    /// Creates a topic with exactly this name.
    ///
    /// On a real cluster the topic keeps its records regardless of their
    /// timestamps (`retention.ms=-1`): tests produce records stamped years
    /// ago, and a broker's time retention (7 days by default, judged by the
    /// largest timestamp of a segment) deletes such a segment at its next
    /// retention check, before the test reads it (seen on Apache Kafka
    /// 4.3.1). The mock broker has no time retention.
    pub async fn create_topic(&self, name: &str, partitions: i32) {
        self.create_topic_with(name, partitions, &[]).await;
    }

    /// Creates a topic with exactly this name and, on a real cluster, these
    /// topic configs (`retention.ms=-1` unless `configs` sets it). The mock
    /// broker takes no topic configs: they are ignored there.
    pub async fn create_topic_with(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        if !self.real {
            self.kafka
                .create_topic(name, partitions)
                .await
                .expect("create topic");
            return;
        }
        let admin = self.admin();
        let mut t = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        if !configs.iter().any(|(k, _)| *k == "retention.ms") {
            t = t.set("retention.ms", "-1");
        }
        for (k, v) in configs {
            t = t.set(k, v);
        }
        let r = admin
            .create_topics([&t], &AdminOptions::new())
            .await
            .expect("create topic");
        for r in r {
            r.expect("topic created");
        }
    }

    /// Creates a topic with this name on a real cluster; `false` while the
    /// broker refuses (a topic of that name is still being deleted).
    pub async fn try_create_topic(&self, name: &str, partitions: i32) -> bool {
        let t =
            NewTopic::new(name, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
        match self.admin().create_topics([&t], &AdminOptions::new()).await {
            Ok(r) => r.into_iter().all(|r| r.is_ok()),
            Err(_) => false,
        }
    }

    /// Deletes a topic (real clusters only: the mock broker does not
    /// implement DeleteTopics) and waits until the broker answered.
    pub async fn delete_topic(&self, name: &str) {
        assert!(self.real, "the mock broker does not implement DeleteTopics");
        let r = self
            .admin()
            .delete_topics(&[name], &AdminOptions::new())
            .await
            .expect("delete topic");
        for r in r {
            r.expect("topic deleted");
        }
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("admin client")
    }

    /// The log start offset and high watermark of one partition.
    pub async fn watermarks(&self, topic: &str, partition: i32) -> (i64, i64) {
        let bootstrap = self.bootstrap.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let c: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .create()
                .expect("watermark reader");
            c.fetch_watermarks(&topic, partition, Duration::from_secs(10))
                .expect("watermarks")
        })
        .await
        .expect("watermark task")
    }

    /// Deletes the records of one partition below `before` (DeleteRecords,
    /// what `kafka-delete-records` sends): the log start offset moves to
    /// `before`, as retention moves it. Returns the new log start. Real
    /// clusters only (the mock broker does not implement DeleteRecords).
    pub async fn delete_records_before(&self, topic: &str, partition: i32, before: i64) -> i64 {
        assert!(
            self.real,
            "the mock broker does not implement DeleteRecords"
        );
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(before))
            .unwrap();
        let got = self
            .admin()
            .delete_records(&tpl, &AdminOptions::new())
            .await
            .expect("delete records");
        let e = got
            .find_partition(topic, partition)
            .expect("the partition in the answer");
        e.error().expect("records deleted");
        match e.offset() {
            Offset::Offset(o) => o,
            other => panic!("DeleteRecords answered {other:?}"),
        }
    }

    /// Retention, the same on both brokers: the mock broker keeps at most
    /// 5 MiB per partition and drops older records as they are produced; on
    /// a real cluster this deletes the records below `high watermark -
    /// keep` (DeleteRecords), where `keep` is how many records of the
    /// test's size the mock keeps (5 MiB / record size). Returns the log
    /// start offset and high watermark after it.
    pub async fn apply_retention(&self, topic: &str, partition: i32, keep: i64) -> (i64, i64) {
        let (lo, hi) = self.watermarks(topic, partition).await;
        if !self.real || hi - keep <= lo {
            return (lo, hi);
        }
        let lo = self
            .delete_records_before(topic, partition, hi - keep)
            .await;
        (lo, hi)
    }

    pub fn producer(&self) -> &FutureProducer {
        &self.producer
    }

    /// Produces one record and waits for its acknowledgement. Returns its offset.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        key: &str,
        payload: &str,
        timestamp_ms: Option<i64>,
    ) -> i64 {
        self.produce_with_headers(topic, partition, key, payload, timestamp_ms, &[])
            .await
    }

    /// Hands `record` to the producer without waiting for its
    /// acknowledgement; wait for it with [`acked`].
    pub fn enqueue<K, P>(&self, record: FutureRecord<'_, K, P>) -> DeliveryFuture
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        self.producer
            .send_result(record)
            .map_err(|(e, _)| e)
            .expect("enqueue")
    }

    /// Produces `per_partition` records to each of `partitions` partitions
    /// (payload `p{partition}-{i}`), all acknowledged on return.
    pub async fn produce_many(&self, topic: &str, partitions: i32, per_partition: usize) {
        let mut futures = Vec::with_capacity(per_partition * partitions as usize);
        for p in 0..partitions {
            for i in 0..per_partition {
                let payload = format!("p{p}-{i}");
                let key = format!("k{i}");
                futures.push(
                    self.enqueue(
                        FutureRecord::to(topic)
                            .partition(p)
                            .key(&key)
                            .payload(&payload),
                    ),
                );
            }
            if futures.len() > 50_000 {
                acked(futures.drain(..)).await;
            }
        }
        acked(futures).await;
    }

    /// Produces `n` records of `size` bytes (keys `bulk-{i}`) to one
    /// partition, all acknowledged on return.
    pub async fn produce_bulk(&self, topic: &str, partition: i32, n: usize, size: usize) {
        let payload = vec![b'x'; size];
        let futures: Vec<_> = (0..n)
            .map(|i| {
                let key = format!("bulk-{i}");
                self.enqueue(
                    FutureRecord::to(topic)
                        .partition(partition)
                        .key(&key)
                        .payload(&payload[..]),
                )
            })
            .collect();
        acked(futures).await;
    }

    /// Commits `offset` for `partition` in `group`, as a member of the group
    /// would.
    pub async fn commit_offset(&self, group: &str, topic: &str, partition: i32, offset: i64) {
        let committer = self.offset_reader(group, topic, partition + 1);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .unwrap();
        tokio::task::spawn_blocking(move || {
            committer
                .consumer
                .commit(&tpl, CommitMode::Sync)
                .expect("commit")
        })
        .await
        .expect("commit task");
    }

    /// The group's committed offsets (next offset to read; -1001 when none)
    /// for partitions `0..partitions`, read from the broker.
    /// A failed read is tried again for up to [`WAIT`] (a broker that just
    /// started may answer the first offset fetch with a retriable error,
    /// such as its offsets topic still loading).
    pub async fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
        let reader = self.offset_reader(group, topic, partitions);
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + WAIT;
            loop {
                match reader.committed(Duration::from_secs(10)) {
                    Ok(offsets) => return offsets,
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("reading committed offsets failed ({e}); reading again");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => panic!("committed offsets: {e}"),
                }
            }
        })
        .await
        .expect("offset reader task")
    }

    /// Waits (up to [`WAIT`]) until the group's committed offsets for
    /// partitions `0..want.len()` equal `want`; at the deadline, panics with
    /// what was committed.
    pub async fn wait_committed(&self, group: &str, topic: &str, want: &[i64]) {
        self.wait_committed_showing(group, topic, want, WAIT, &())
            .await;
    }

    /// Like [`wait_committed`](Self::wait_committed), with a deadline of its
    /// own, and showing what `handled` shows at the deadline.
    pub async fn wait_committed_showing(
        &self,
        group: &str,
        topic: &str,
        want: &[i64],
        timeout: Duration,
        handled: &impl Debug,
    ) {
        let what = format!("committed offsets {want:?}");
        let n = want.len() as i32;
        wait_for(
            timeout,
            &what,
            || async {
                (
                    self.committed(group, topic, n).await,
                    format!("{handled:?}"),
                )
            },
            |(got, _)| got == want,
        )
        .await;
    }

    /// High watermarks of partitions `0..partitions`.
    pub async fn high_watermarks(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let bootstrap = self.bootstrap.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let c: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .create()
                .expect("watermark reader");
            (0..partitions)
                .map(|p| {
                    c.fetch_watermarks(&topic, p, Duration::from_secs(10))
                        .expect("watermarks")
                        .1
                })
                .collect()
        })
        .await
        .expect("watermark task")
    }

    /// A consumer with settings that keep tests fast on the mock broker.
    pub fn consumer<H: Handler>(&self, group: &str, topic: &str, handler: H) -> FreshConsumer<H> {
        self.classic(FreshConsumer::new(handler), group, topic)
    }

    /// [`consumer`](Self::consumer) for a batch handler.
    pub fn batched<B: BatchHandler>(
        &self,
        group: &str,
        topic: &str,
        handler: B,
    ) -> FreshConsumer<Batched<B>> {
        self.classic(FreshConsumer::batched(handler), group, topic)
    }

    fn classic<H>(&self, consumer: FreshConsumer<H>, group: &str, topic: &str) -> FreshConsumer<H> {
        fast(consumer, &self.bootstrap, group, topic)
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "500")
    }
}

/// Reads a group's committed offsets again and again through one client:
/// cheap enough to sample every few milliseconds (each read of
/// [`TestCluster::committed`] creates a client).
pub struct OffsetReader {
    consumer: BaseConsumer,
    topic: String,
    partitions: i32,
}

impl OffsetReader {
    /// The committed offsets of partitions `0..partitions` (-1001 when none).
    /// Blocking: call it from a thread of its own or `spawn_blocking`.
    pub fn committed(&self, timeout: Duration) -> rdkafka::error::KafkaResult<Vec<i64>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let got = self.consumer.committed_offsets(tpl, timeout)?;
        Ok((0..self.partitions)
            .map(
                |p| match got.find_partition(&self.topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => o,
                    _ => -1001,
                },
            )
            .collect())
    }
}

impl TestCluster {
    /// A reusable reader of `group`'s committed offsets for `topic`.
    ///
    /// It reads what is committed now, without waiting for offsets an open
    /// transaction holds: under librdkafka's default `read_committed` an
    /// offset fetch asks for stable offsets (`require_stable`), and the
    /// broker keeps answering UNSTABLE_OFFSET_COMMIT while a SIGKILLed
    /// transactional member's transaction is open, until its successor
    /// fences it (a slow child start on a loaded machine made a 10 s read
    /// time out twice in CI).
    pub fn offset_reader(&self, group: &str, topic: &str, partitions: i32) -> OffsetReader {
        let consumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_uncommitted")
            .create()
            .expect("offset reader");
        OffsetReader {
            consumer,
            topic: topic.to_owned(),
            partitions,
        }
    }

    /// Mock only: the KIP-848 (`group.protocol=consumer`) session timeout and
    /// heartbeat interval the broker hands to members (defaults 30 s / 3 s).
    /// Returns `false` on a real cluster, where the broker's settings apply.
    pub fn set_consumer_group_timings(&self, session_ms: i32, heartbeat_ms: i32) -> bool {
        self.kafka
            .set_consumer_group_timings(session_ms, heartbeat_ms)
    }

    /// Like [`consumer`](Self::consumer), for the KIP-848 group protocol
    /// (`group.protocol=consumer`): librdkafka refuses `session.timeout.ms` and
    /// `heartbeat.interval.ms` there (the broker decides them; see
    /// [`set_consumer_group_timings`](Self::set_consumer_group_timings)).
    pub fn consumer_kip848<H: Handler>(
        &self,
        group: &str,
        topic: &str,
        handler: H,
    ) -> FreshConsumer<H> {
        fast_consumer(handler, &self.bootstrap, group, topic).set("group.protocol", "consumer")
    }

    /// [`consumer_kip848`](Self::consumer_kip848) for a batch handler.
    pub fn batched_kip848<B: BatchHandler>(
        &self,
        group: &str,
        topic: &str,
        handler: B,
    ) -> FreshConsumer<Batched<B>> {
        fast(
            FreshConsumer::batched(handler),
            &self.bootstrap,
            group,
            topic,
        )
        .set("group.protocol", "consumer")
    }
}

impl TestCluster {
    /// Produces one record with headers (`(name, value)`; `None` is a null
    /// value) and an optional timestamp, and waits for its acknowledgement.
    /// Returns its offset. `timestamp_ms` is passed to librdkafka as given
    /// (0 or `None` means "now").
    pub async fn produce_with_headers(
        &self,
        topic: &str,
        partition: i32,
        key: &str,
        payload: &str,
        timestamp_ms: Option<i64>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> i64 {
        use rdkafka::message::{Header, OwnedHeaders};
        let mut r = FutureRecord::to(topic)
            .partition(partition)
            .key(key)
            .payload(payload);
        if !headers.is_empty() {
            let mut owned = OwnedHeaders::new_with_capacity(headers.len());
            for (name, value) in headers {
                owned = owned.insert(Header {
                    key: name,
                    value: *value,
                });
            }
            r = r.headers(owned);
        }
        if let Some(ts) = timestamp_ms {
            r = r.timestamp(ts);
        }
        self.producer
            .send(r, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .expect("produce")
            .offset
    }
}

impl TestCluster {
    /// A transactional producer (`transactional.id` unique from `prefix`)
    /// with a transaction begun. Real clusters write its records' commit or
    /// abort markers; the mock broker has a transaction coordinator but
    /// writes no markers.
    pub async fn in_a_transaction(&self, prefix: &str) -> FutureProducer {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("transactional.id", unique(prefix))
            .create()
            .expect("transactional producer");
        let timeout = Duration::from_secs(10);
        let p = producer.clone();
        tokio::task::spawn_blocking(move || {
            p.init_transactions(timeout)?;
            p.begin_transaction()
        })
        .await
        .unwrap()
        .expect("transaction begun");
        producer
    }
}

impl TestCluster {
    /// Every record of `topic` up to the high watermarks as they are now,
    /// read without a consumer group, each partition in offset order
    /// (`partitions`: the topic's partition count, as the callers know it).
    pub async fn read_topic(&self, topic: &str, partitions: i32) -> Vec<fresh_consumer::Record> {
        let records = self.kafka.read_topic(topic).await.expect("read the topic");
        assert!(
            records.iter().all(|r| r.partition() < partitions),
            "{topic} has more than {partitions} partitions"
        );
        records
    }
}

/// Every record of `topic` a `read_committed` reader sees (up to the last
/// stable offset), as its key's text: read with partition EOF events so
/// that transaction markers and aborted records, which take offsets but
/// are not delivered, do not make the read wait.
pub fn read_committed(bootstrap: &str, topic: &str, partitions: i32) -> Vec<String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "fresh-consumer-tests-read-committed")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    c.assign(&tpl).expect("assign");
    let mut at_end = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while at_end.len() < partitions as usize {
        assert!(Instant::now() < deadline, "read {topic}: no EOF in time");
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                out.push(String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned());
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("read {topic}: {e}"),
            None => {}
        }
    }
    out
}
