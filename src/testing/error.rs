//! Why a step of the test kit failed, and how long its reads wait.

use std::time::Duration;

/// How long the kit's own reads wait for a broker's answer (admin
/// requests, offset fetches, reading a topic back).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a step of the test kit failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestingError {
    /// A Kafka client (the mock broker's owner, the producer, the admin
    /// client, a reader) failed; `what` says which step.
    #[error("{what}")]
    Kafka {
        /// The step, for example `create topic orders`.
        what: String,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A wait passed its deadline.
    #[error("timed out after {timeout:?} waiting for {what}; last seen: {last}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The deadline.
        timeout: Duration,
        /// What the last look saw.
        last: String,
    },
    /// A record read back from a dead-letter or retry-tier topic has no
    /// dead-letter headers.
    #[error("record at {topic}/{partition}@{offset} is not a dead-letter record")]
    NotDeadLetter {
        /// Its topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
    },
    /// Exporting the metrics recorded so far failed.
    #[error("metrics flush failed")]
    Metrics(#[source] crate::metrics::FlushError),
    /// The consumer's run returned an error.
    #[error("the consumer's run failed")]
    Run(#[source] crate::error::RunError),
    /// The consumer's task panicked or was cancelled.
    #[error("the consumer's task ended abnormally")]
    Task(#[source] tokio::task::JoinError),
}

impl TestingError {
    pub(super) fn kafka(
        what: impl Into<String>,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        let what = what.into();
        move |source| TestingError::Kafka { what, source }
    }
}
