//! A Kafka broker for the examples and the benches: librdkafka's mock
//! cluster, started inside this process. Nothing to install or run first.
//!
//! ```ignore
//! let broker = MockBroker::start()?;
//! broker.create_topic("orders", 3)?;
//! let consumer = FreshConsumer::new(handler)
//!     .bootstrap_servers(broker.bootstrap())
//!     .group_id("billing")
//!     .topics(["orders"])
//!     .set("fetch.wait.max.ms", "20"); // see below
//! ```
//!
//! The mock speaks the Kafka protocol on a loopback port, so any Kafka
//! client can use it: hand [`MockBroker::bootstrap`] to a producer, a
//! consumer, or `kcat -b <bootstrap>`. It lives as long as the
//! [`MockBroker`] value; keep that alive until every client is done.
//!
//! Where the mock differs from a real broker (librdkafka 2.12), and what the
//! examples and benches do about it:
//! - it holds an empty fetch for the full `fetch.wait.max.ms` (default
//!   500 ms) even when records arrive meanwhile, where a real broker answers
//!   early: consumers here set it to 10-20 ms;
//! - the first join of a group waits `group.initial.rebalance.delay.ms`
//!   (3 s, as on a real broker): [`MockBroker::start`] sets it to 0;
//! - a membership change waits `session.timeout.ms - 1000`: the benches set
//!   `session.timeout.ms=6000`;
//! - it keeps at most 5 MiB per partition and drops the oldest records past
//!   that (the low watermark moves).
//!
//! With a real cluster, none of this applies: pass its bootstrap servers
//! instead and drop the mock-only settings.
//!
//! This file is shared: each example includes it with
//! `#[path = "support/mock_broker.rs"] mod mock_broker;`, and the benches
//! through `benches/support/mod.rs`. (Cargo builds `examples/*.rs` and
//! `examples/*/main.rs` as examples; this folder has no `main.rs`, so it is
//! not one.)

// Each example and bench uses part of this module.
#![allow(dead_code)]

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseProducer, Producer};

/// librdkafka's mock Kafka cluster with one broker, running in this process
/// for as long as this value lives.
pub struct MockBroker {
    /// The client that owns the mock cluster: a client configured with
    /// `test.mock.num.brokers` starts one, and stops it when dropped.
    owner: BaseProducer,
    bootstrap: String,
}

impl MockBroker {
    /// Starts the mock cluster (one broker on a loopback port) and sets the
    /// group's initial rebalance delay to 0, so the first consumer joins at
    /// once instead of after 3 s.
    pub fn start() -> KafkaResult<Self> {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", "1")
            .create()?;
        let bootstrap = owner
            .client()
            .mock_cluster()
            .ok_or_else(|| KafkaError::ClientCreation("the mock cluster did not start".into()))?
            .bootstrap_servers();
        // rust-rdkafka has no safe call for the rebalance delay.
        // SAFETY: the pointer is the mock cluster of `owner`, alive while
        // `owner` is; it is only used during this call.
        unsafe {
            let cluster = rdkafka_sys::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
            rdkafka_sys::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, 0);
        }
        Ok(MockBroker { owner, bootstrap })
    }

    /// The address for `bootstrap.servers` (`127.0.0.1:PORT`).
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Creates `topic` with `partitions` partitions (replication factor 1).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> KafkaResult<()> {
        self.owner
            .client()
            .mock_cluster()
            .ok_or_else(|| KafkaError::ClientCreation("the mock cluster stopped".into()))?
            .create_topic(topic, partitions, 1)
    }
}
