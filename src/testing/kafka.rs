//! [`TestKafka`]: the broker of a test (librdkafka's mock broker in this
//! process, or an existing cluster), and the reads and writes a test makes
//! on it.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    BaseProducer, DefaultProducerContext, FutureProducer, FutureRecord, Producer,
};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::error::{REQUEST_TIMEOUT, TestingError};
use super::produce::TestRecord;
use super::run::wait_for;
use crate::consumer::FreshConsumer;
use crate::failure::dead_letter::DeadLetterRecord;
use crate::handler::Handler;
use crate::record::Record;

/// The Kafka cluster of a test: librdkafka's mock broker running in this
/// process ([`start`](Self::start)), or an existing cluster
/// ([`connect`](Self::connect)). The mock broker lives as long as this
/// value: keep it alive until every client of it is done.
pub struct TestKafka {
    /// The client that owns the mock cluster (`None` on an existing
    /// cluster): a client configured with `test.mock.num.brokers` starts
    /// one, and stops it when dropped. Declared after `producer`, so the
    /// producer goes first.
    producer: FutureProducer,
    owner: Option<BaseProducer>,
    bootstrap: String,
}

impl std::fmt::Debug for TestKafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestKafka")
            .field("bootstrap", &self.bootstrap)
            .field("mock", &self.owner.is_some())
            .finish()
    }
}

impl TestKafka {
    /// Starts librdkafka's mock broker (one broker on a loopback port) in
    /// this process, with the first join of a group not delayed
    /// (`group.initial.rebalance.delay.ms` 0, where a real broker's default
    /// waits 3 s).
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when librdkafka cannot start it.
    pub fn start() -> Result<Self, TestingError> {
        Self::start_with_brokers(1)
    }

    /// [`start`](Self::start) with `brokers` brokers (from 1), for tests
    /// of broker failures ([`mock_cluster`](Self::mock_cluster)).
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when librdkafka cannot start them.
    pub fn start_with_brokers(brokers: i32) -> Result<Self, TestingError> {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .create()
            .map_err(TestingError::kafka("start the mock broker"))?;
        let bootstrap = owner
            .client()
            .mock_cluster()
            .ok_or_else(|| TestingError::Kafka {
                what: "start the mock broker".into(),
                source: KafkaError::ClientCreation("no mock cluster".into()),
            })?
            .bootstrap_servers();
        // rust-rdkafka has no safe call for the rebalance delay.
        // SAFETY: the pointer is the mock cluster of `owner`, alive while
        // `owner` is; it is only used during this call.
        unsafe {
            let cluster =
                rdkafka::bindings::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
            rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, 0);
        }
        let producer = producer(&bootstrap)?;
        Ok(TestKafka {
            producer,
            owner: Some(owner),
            bootstrap,
        })
    }

    /// An existing cluster at `bootstrap` (`bootstrap.servers`), for running
    /// the same test on a real broker. Topics are created with replication
    /// factor 1 and `retention.ms=-1` (records stamped long ago would
    /// otherwise be deleted by the broker's time retention before the test
    /// reads them), and never deleted.
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when the producer cannot be created (a
    /// malformed address; an unreachable cluster fails at the first
    /// request instead).
    pub fn connect(bootstrap: impl Into<String>) -> Result<Self, TestingError> {
        let bootstrap = bootstrap.into();
        Ok(TestKafka {
            producer: producer(&bootstrap)?,
            owner: None,
            bootstrap,
        })
    }

    /// [`connect`](Self::connect) to the cluster named by the environment
    /// variable `var` when it is set and not empty, else
    /// [`start`](Self::start) the mock broker: one test for both.
    ///
    /// # Errors
    /// As [`connect`](Self::connect) and [`start`](Self::start).
    pub fn from_env(var: &str) -> Result<Self, TestingError> {
        match std::env::var(var) {
            Ok(b) if !b.trim().is_empty() => Self::connect(b),
            _ => Self::start(),
        }
    }

    /// The address to give `bootstrap.servers` (`127.0.0.1:PORT` for the
    /// mock broker).
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap
    }

    /// `true` for the mock broker, `false` for an existing cluster.
    pub fn is_mock(&self) -> bool {
        self.owner.is_some()
    }

    /// rdkafka's handle on the mock cluster, for fault injection
    /// (`request_errors`, `broker_down`, ...); `None` on an existing
    /// cluster.
    pub fn mock_cluster(&self) -> Option<MockCluster<'_, DefaultProducerContext>> {
        self.owner.as_ref().and_then(|o| o.client().mock_cluster())
    }

    /// Mock broker only: the session timeout and heartbeat interval it
    /// hands to members of the consumer group protocol (KIP-848,
    /// `group.protocol=consumer`; librdkafka's mock defaults are 30 s and
    /// 3 s, so a member that leaves uncleanly is noticed after 30 s).
    /// Returns `false` on an existing cluster, where the broker's
    /// `group.consumer.*` settings apply.
    pub fn set_consumer_group_timings(&self, session_ms: i32, heartbeat_ms: i32) -> bool {
        let Some(owner) = &self.owner else {
            return false;
        };
        // SAFETY: the pointer is the mock cluster of `owner`, alive while
        // `owner` is; it is only used during these calls.
        unsafe {
            let cluster =
                rdkafka::bindings::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
            rdkafka::bindings::rd_kafka_mock_set_group_consumer_session_timeout_ms(
                cluster, session_ms,
            );
            rdkafka::bindings::rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(
                cluster,
                heartbeat_ms,
            );
        }
        true
    }

    /// The kit's producer (`linger.ms=2`), for records [`TestRecord`] does
    /// not describe.
    pub fn producer(&self) -> &FutureProducer {
        &self.producer
    }

    /// Creates topic `name` with `partitions` partitions (replication factor
    /// 1; on an existing cluster with `retention.ms=-1`, see
    /// [`connect`](Self::connect)).
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when the broker refuses (the topic exists,
    /// `partitions` is below 1).
    pub async fn create_topic(&self, name: &str, partitions: i32) -> Result<(), TestingError> {
        let what = || format!("create topic {name}");
        if let Some(mock) = self.mock_cluster() {
            return mock
                .create_topic(name, partitions, 1)
                .map_err(TestingError::kafka(what()));
        }
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(TestingError::kafka(what()))?;
        let topic =
            NewTopic::new(name, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
        let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
        for result in admin
            .create_topics([&topic], &options)
            .await
            .map_err(TestingError::kafka(what()))?
        {
            result.map_err(|(_, code)| TestingError::Kafka {
                what: what(),
                source: KafkaError::AdminOp(code),
            })?;
        }
        Ok(())
    }

    /// Produces `record` to `topic` and waits for the broker's
    /// acknowledgement. Returns its (partition, offset).
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when the write fails (an unknown topic after
    /// `message.timeout.ms`, 300 s by default on the kit's producer: create
    /// the topic first).
    pub async fn produce(
        &self,
        topic: &str,
        record: TestRecord,
    ) -> Result<(i32, i64), TestingError> {
        let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic);
        if let Some(k) = &record.key {
            out = out.key(k);
        }
        if let Some(p) = &record.payload {
            out = out.payload(p);
        }
        if let Some(p) = record.partition {
            out = out.partition(p);
        }
        if !record.headers.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
            for (name, value) in &record.headers {
                headers = headers.insert(KafkaHeader {
                    key: name,
                    value: value.as_deref(),
                });
            }
            out = out.headers(headers);
        }
        if let Some(ms) = record.timestamp_at_send() {
            out = out.timestamp(ms);
        }
        let delivery = self
            .producer
            .send(out, Duration::from_secs(0))
            .await
            .map_err(|(e, _)| TestingError::Kafka {
                what: format!("produce to {topic}"),
                source: e,
            })?;
        Ok((delivery.partition, delivery.offset))
    }

    /// The committed offsets of `group` for every partition of `topic`
    /// (Kafka's "next offset to read"), partition 0 first; `None` for a
    /// partition without one.
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when the metadata or the offset fetch fails.
    pub async fn committed(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<Vec<Option<i64>>, TestingError> {
        let (bootstrap, group, topic) =
            (self.bootstrap.clone(), group.to_owned(), topic.to_owned());
        blocking(move || {
            let what = || format!("committed offsets of {group} on {topic}");
            let reader = reader(&bootstrap, &group).map_err(TestingError::kafka(what()))?;
            let n = partition_count(&reader, &topic).map_err(TestingError::kafka(what()))?;
            let mut tpl = TopicPartitionList::new();
            for p in 0..n {
                tpl.add_partition(&topic, p);
            }
            let got = reader
                .committed_offsets(tpl, REQUEST_TIMEOUT)
                .map_err(TestingError::kafka(what()))?;
            Ok((0..n)
                .map(
                    |p| match got.find_partition(&topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => Some(o),
                        _ => None,
                    },
                )
                .collect())
        })
        .await
    }

    /// Waits until the committed offsets of `group` for partitions
    /// `0..want.len()` of `topic` equal `want`.
    ///
    /// # Errors
    /// [`TestingError::Timeout`] (with the offsets last read) when they do
    /// not within `timeout`; [`TestingError::Kafka`] when a read fails.
    pub async fn wait_committed(
        &self,
        group: &str,
        topic: &str,
        want: &[i64],
        timeout: Duration,
    ) -> Result<(), TestingError> {
        let what = format!("committed offsets {want:?} of {group} on {topic}");
        let want: Vec<Option<i64>> = want.iter().map(|&o| Some(o)).collect();
        // A read that fails is read again: a broker that just started may
        // answer the first offset fetch with a retriable error.
        wait_for(
            timeout,
            &what,
            || async {
                self.committed(group, topic)
                    .await
                    .map(|mut got| {
                        got.truncate(want.len());
                        got
                    })
                    .map_err(|e| crate::error::error_chain(&e))
            },
            |got| got.as_ref().is_ok_and(|got| *got == want),
        )
        .await
        .map(|_| ())
    }

    /// Every record of `topic` (every partition, each in offset order, up
    /// to its high watermark when called), read without a consumer group.
    ///
    /// # Errors
    /// [`TestingError::Kafka`] when a read fails; [`TestingError::Timeout`]
    /// when the records are not all read within [`REQUEST_TIMEOUT`].
    pub async fn read_topic(&self, topic: &str) -> Result<Vec<Record>, TestingError> {
        let (bootstrap, topic) = (self.bootstrap.clone(), topic.to_owned());
        blocking(move || read_all(&bootstrap, &topic)).await
    }

    /// The records of a dead-letter or retry-tier topic, with where they
    /// came from and why they failed (see [`crate::failure::dead_letter`]).
    ///
    /// # Errors
    /// As [`read_topic`](Self::read_topic), and
    /// [`TestingError::NotDeadLetter`] for a record without dead-letter
    /// headers.
    pub async fn read_dead_letters(
        &self,
        topic: &str,
    ) -> Result<Vec<DeadLetterRecord>, TestingError> {
        self.read_topic(topic)
            .await?
            .iter()
            .map(|r| {
                DeadLetterRecord::from_record(r).map_err(|_| TestingError::NotDeadLetter {
                    topic: r.topic().to_owned(),
                    partition: r.partition(),
                    offset: r.offset(),
                })
            })
            .collect()
    }

    /// A consumer of `topics` in `group` on this cluster that runs `handler`,
    /// with the settings of [`configure`](Self::configure).
    pub fn consumer<H, I, S>(&self, handler: H, group: &str, topics: I) -> FreshConsumer<H>
    where
        H: Handler,
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.configure(FreshConsumer::new(handler), group, topics)
    }

    /// Points `consumer` (a batched one too) at this cluster, `group` and
    /// `topics`, with settings that keep a test fast: `fetch.wait.max.ms`
    /// 10 ms, `session.timeout.ms` 6 s with heartbeats every 500 ms,
    /// metadata refreshed every second, commits every 50 ms, retries after
    /// 10 ms backing off to 100 ms, `revoke_timeout` 2 s and
    /// `shutdown_timeout` 10 s. Every setting can be overridden by calling
    /// its setter after this.
    pub fn configure<H, I, S>(
        &self,
        consumer: FreshConsumer<H>,
        group: &str,
        topics: I,
    ) -> FreshConsumer<H>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        consumer
            .bootstrap_servers(self.bootstrap.clone())
            .group_id(group)
            .topics(topics)
            .set("fetch.wait.max.ms", "10")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "500")
            .commit_interval(Duration::from_millis(50))
            .retry_backoff(Duration::from_millis(10), Duration::from_millis(100))
            .revoke_timeout(Duration::from_secs(2))
            .shutdown_timeout(Duration::from_secs(10))
    }
}

fn producer(bootstrap: &str) -> Result<FutureProducer, TestingError> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "2")
        .create()
        .map_err(TestingError::kafka("create the producer"))
}

/// A consumer for reads (never subscribes, never commits).
fn reader(bootstrap: &str, group: &str) -> Result<BaseConsumer, KafkaError> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
}

fn partition_count(c: &BaseConsumer, topic: &str) -> Result<i32, KafkaError> {
    let md = c.fetch_metadata(Some(topic), REQUEST_TIMEOUT)?;
    let t = md.topics().iter().find(|t| t.name() == topic);
    match t {
        Some(t) if t.error().is_none() => Ok(t.partitions().len() as i32),
        Some(t) => Err(KafkaError::MetadataFetch(
            t.error()
                .map(Into::into)
                .unwrap_or(rdkafka::types::RDKafkaErrorCode::UnknownTopic),
        )),
        None => Err(KafkaError::MetadataFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownTopic,
        )),
    }
}

/// Reads every partition of `topic` from its log start to its high
/// watermark as it is now.
fn read_all(bootstrap: &str, topic: &str) -> Result<Vec<Record>, TestingError> {
    let what = || format!("read {topic}");
    let c =
        reader(bootstrap, "fresh-consumer-testing-reader").map_err(TestingError::kafka(what()))?;
    let n = partition_count(&c, topic).map_err(TestingError::kafka(what()))?;
    let mut tpl = TopicPartitionList::new();
    let mut remaining = 0;
    for p in 0..n {
        let (lo, hi) = c
            .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
            .map_err(TestingError::kafka(what()))?;
        if hi > lo {
            tpl.add_partition_offset(topic, p, Offset::Offset(lo))
                .map_err(TestingError::kafka(what()))?;
            remaining += hi - lo;
        }
    }
    let mut out = Vec::new();
    if remaining == 0 {
        return Ok(out);
    }
    c.assign(&tpl).map_err(TestingError::kafka(what()))?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    while remaining > 0 {
        if Instant::now() > deadline {
            return Err(TestingError::Timeout {
                what: what(),
                timeout: REQUEST_TIMEOUT,
                last: format!("{} records read, {remaining} not", out.len()),
            });
        }
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                out.push(Record::from_message(topic, &m, true));
                remaining -= 1;
            }
            Some(Err(e)) => {
                return Err(TestingError::Kafka {
                    what: what(),
                    source: e,
                });
            }
            None => {}
        }
    }
    out.sort_by_key(|r| (r.partition(), r.offset()));
    Ok(out)
}

/// Runs a blocking librdkafka call off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, TestingError> + Send + 'static,
) -> Result<T, TestingError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(TestingError::Task)?
}
