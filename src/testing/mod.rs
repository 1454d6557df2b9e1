//! A test kit for handlers and consumers (cargo feature `testing`): an
//! in-process Kafka broker, records produced with keys, headers and
//! timestamps in the past, a consumer run until a condition, and what it
//! left behind: committed offsets, the records of the dead-letter and
//! retry-tier topics, the exported metrics, the run summary.
//!
//! ```toml
//! [dev-dependencies]
//! fresh-consumer = { version = "0.1", features = ["testing"] }
//! ```
//!
//! - [`TestKafka`]: librdkafka's mock broker started in this process
//!   ([`TestKafka::start`]; no Kafka, JVM or network needed), or an
//!   existing cluster ([`TestKafka::connect`], [`TestKafka::from_env`]), so
//!   the same test runs on both. Creates topics, produces
//!   [`TestRecord`]s, reads topics back as [`Record`](crate::Record)s or
//!   [`DeadLetterRecord`](crate::failure::dead_letter::DeadLetterRecord)s, reads and
//!   waits for a group's committed offsets, and configures a consumer for
//!   it ([`TestKafka::consumer`]). [`TestKafka::mock_cluster`] hands out
//!   rdkafka's [`MockCluster`](rdkafka::mocking::MockCluster) for fault
//!   injection (request errors, broker downs).
//! - [`TestMetrics`]: a meter provider whose metrics stay in memory (the
//!   OpenTelemetry SDK's in-memory exporter); read counters, histograms and
//!   gauges back by name and attributes after [`TestMetrics::flush`].
//! - [`Running`]: a consumer spawned with [`spawn`], its
//!   [`HealthHandle`](crate::health::HealthHandle) readable while it runs, stopped
//!   with [`Running::stop`] for its [`RunSummary`](crate::RunSummary).
//!   [`wait_until`] waits for a condition with a deadline (never a fixed
//!   sleep).
//!
//! Every wait has a deadline and returns [`TestingError::Timeout`] when it
//! passes, with what it waited for and what it saw last.
//!
//! A handler tested end to end:
//!
//! ```
//! use std::time::Duration;
//! use fresh_consumer::metrics::{MESSAGING_DESTINATION_NAME, SLO_MESSAGES, SLO_RESULT};
//! use fresh_consumer::testing::{TestKafka, TestMetrics, TestRecord, spawn};
//! use fresh_consumer::{Record, permanent, slo::{FreshnessObjective}};
//!
//! /// Counts an order; an order without a payload can never succeed.
//! async fn count_order(record: Record) -> Result<(), fresh_consumer::BoxError> {
//!     match record.payload() {
//!         Some(_) => Ok(()),
//!         None => Err(permanent(std::io::Error::other("no payload"))),
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), fresh_consumer::testing::TestingError> {
//! let kafka = TestKafka::start()?;
//! kafka.create_topic("orders", 1).await?;
//! kafka.produce("orders", TestRecord::new("o-1").key("c-1")).await?;
//! // Produced 2 minutes ago: handled, but late against a 30 s objective.
//! kafka
//!     .produce("orders", TestRecord::new("o-2").key("c-2").age(Duration::from_secs(120)))
//!     .await?;
//!
//! let metrics = TestMetrics::new();
//! let consumer = kafka
//!     .consumer(count_order, "order-counter", ["orders"])
//!     .freshness_objective(FreshnessObjective::new(Duration::from_secs(30), 0.99))
//!     .meter_provider(metrics.provider());
//! let running = spawn(consumer);
//! kafka
//!     .wait_committed("order-counter", "orders", &[2], Duration::from_secs(15))
//!     .await?;
//! let summary = running.stop().await?;
//! assert_eq!(summary.records_succeeded, 2);
//!
//! metrics.flush().await?;
//! let slo = |result| {
//!     metrics.counter_total(SLO_MESSAGES, [(MESSAGING_DESTINATION_NAME, "orders"), (SLO_RESULT, result)])
//! };
//! assert_eq!((slo("good"), slo("late")), (1.0, 1.0));
//! # Ok(()) }
//! ```
//!
//! Where the mock broker differs from a real one (librdkafka 2.12): it holds
//! an empty fetch for the full `fetch.wait.max.ms` (the consumers of
//! [`TestKafka::consumer`] set 10 ms), waits `session.timeout.ms - 1 s` for
//! a member that left (they set 6 s), keeps at most 5 MiB per partition,
//! has no time retention, no transaction markers, and does not implement
//! DeleteTopics.

mod error;
mod kafka;
mod metrics;
mod produce;
mod run;

pub use error::{REQUEST_TIMEOUT, TestingError};
pub use kafka::TestKafka;
pub use metrics::{Attributes, HistogramTotals, TestMetrics};
pub use produce::TestRecord;
pub use run::{Running, spawn, wait_for, wait_until};

/// The seeds' five scenarios as the group monitor judges them, for testing
/// what acts on its reports (an autoscaler such as
/// `monitor::keda::KedaScaler` (feature `keda`), an alert): one
/// [`MonitorReport`](crate::monitor::MonitorReport) with a group per
/// scenario, each after 13 cycles a second apart of synthetic reads of a
/// topic `orders` with 8 partitions (window 10 s, stall_after 5 s, time-lag
/// threshold 30 s; the groups run 2 replicas, which the brokers do not
/// describe):
///
/// | group | scenario | diagnosis |
/// |---|---|---|
/// | `evenly-loaded` | every partition 50 s behind and falling further | `consumer_bound` |
/// | `hot-partition` | one partition behind, the others keep up | `skewed` |
/// | `poison-record` | one partition frozen while records arrive | `stuck` |
/// | `dead-group` | every commit frozen while records arrive | `dead` |
/// | `bursty-producer` | a burst of 2,000 records a partition, seconds old, read fast | `keeping_up` |
///
/// The monitor chapter's table "KEDA's rule beside the monitor's" (in
/// [`crate::guide::monitor`]) is computed from
/// the same reports.
pub fn monitor_scenarios() -> crate::monitor::MonitorReport {
    crate::monitor::scenarios::report()
}
