//! Why the monitor could not start or a cycle failed ([`MonitorError`]).

use rdkafka::error::KafkaError;

use crate::error::ConfigError;

/// Why the monitor could not start or a cycle failed. Never contains the
/// value of a secret property.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MonitorError {
    /// The configuration is invalid (no bootstrap servers, no group, no
    /// topic, a zero duration, a property librdkafka rejects, a property
    /// the monitor sets itself); nothing was connected.
    #[error("invalid monitor configuration: {0}")]
    Config(#[from] ConfigError),
    /// No broker answered a metadata request within the request timeout
    /// when the monitor connected.
    #[error("no broker of `{bootstrap}` answered")]
    Unreachable {
        /// The bootstrap servers tried.
        bootstrap: String,
        /// librdkafka's error (for example `BrokerTransportFailure` or
        /// `OperationTimedOut`).
        #[source]
        source: KafkaError,
    },
    /// A watched topic does not exist (or the client may not see it).
    #[error("unknown topic `{topic}`")]
    UnknownTopic {
        /// The topic name.
        topic: String,
    },
    /// A read of one cycle failed (metadata, list offsets, offset fetch,
    /// assign). [`Monitor::run_until`](crate::monitor::Monitor::run_until) counts it and goes on.
    #[error("kafka {operation} failed")]
    Kafka {
        /// `metadata`, `list offsets`, `offset fetch`, `list groups`
        /// (discovery) or `assign`.
        operation: &'static str,
        /// librdkafka's error.
        #[source]
        source: KafkaError,
    },
    /// The blocking reader thread panicked (a bug).
    #[error("the monitor's reader thread panicked")]
    ReaderPanicked,
    /// More groups or partitions to watch than the caps allow
    /// ([`GroupMonitor::max_groups`](crate::monitor::GroupMonitor::max_groups), [`GroupMonitor::max_partitions`](crate::monitor::GroupMonitor::max_partitions)):
    /// discovery found more groups, or the watched topics have more
    /// partitions. The cycle watches none rather than an arbitrary subset;
    /// narrow the filter or the topics, or raise the cap.
    #[error("{count} {what} to watch, above the cap of {max}")]
    TooMany {
        /// `groups` or `partitions`.
        what: &'static str,
        /// How many there were (groups: named plus discovered candidates;
        /// partitions: of all watched topics).
        count: usize,
        /// The cap.
        max: usize,
    },
}

impl MonitorError {
    /// The `error.type` of a failed cycle in `fresh_consumer.monitor.cycles`:
    /// `config`, `unreachable`, `unknown_topic`, `kafka`, `reader_panicked`
    /// or `too_many`.
    pub fn kind(&self) -> &'static str {
        match self {
            MonitorError::TooMany { .. } => "too_many",
            MonitorError::Config(_) => "config",
            MonitorError::Unreachable { .. } => "unreachable",
            MonitorError::UnknownTopic { .. } => "unknown_topic",
            MonitorError::Kafka { .. } => "kafka",
            MonitorError::ReaderPanicked => "reader_panicked",
        }
    }
}
