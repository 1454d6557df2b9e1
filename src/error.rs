//! Errors returned by the library.

use rdkafka::error::KafkaError;

/// A configuration that cannot run. Returned by
/// [`FreshConsumer::run_until`](crate::FreshConsumer::run_until) and
/// [`FreshConsumer::validate`](crate::FreshConsumer::validate) before any
/// network I/O. Never contains the value of a secret property.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Neither [`bootstrap_servers`](crate::FreshConsumer::bootstrap_servers)
    /// nor the `bootstrap.servers` property was set.
    #[error("no bootstrap servers: call `bootstrap_servers(..)` or set `bootstrap.servers`")]
    MissingBootstrapServers,
    /// Neither [`group_id`](crate::FreshConsumer::group_id) nor the `group.id`
    /// property was set. Commits need a consumer group.
    #[error("no consumer group: call `group_id(..)` or set `group.id`")]
    MissingGroupId,
    /// No topic to subscribe to.
    #[error("no topics: call `topics(..)` with at least one topic")]
    MissingTopics,
    /// A topic name is empty.
    #[error("empty topic name")]
    EmptyTopicName,
    /// A librdkafka property that would commit behind the library's back
    /// (`enable.auto.commit`, `enable.auto.offset.store`) was set to `true`.
    #[error(
        "`{property}` cannot be enabled: the library commits only past handled records; use `{instead}` instead"
    )]
    AutoCommit {
        /// The property that was set.
        property: &'static str,
        /// The library option that controls commits instead.
        instead: &'static str,
    },
    /// One of the library's own options has an invalid value.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The builder method's name.
        option: &'static str,
        /// Why the value is invalid.
        reason: String,
    },
    /// The retry-topic policy ([`OnExhausted::RetryTopics`](crate::OnExhausted::RetryTopics))
    /// cannot run with these topics.
    #[error("invalid retry topics")]
    RetryTopics(#[source] RetryTopicsError),
    /// A dead-letter producer property
    /// ([`DeadLetter::producer_property`](crate::failure::DeadLetter::producer_property),
    /// also for [`RetryTopics`](crate::failure::RetryTopics)' tier writes) that would
    /// let the library commit past a record whose dead-letter or retry-tier
    /// write the brokers did not durably acknowledge, or that could not be
    /// written at all: `acks` other than `all`/`-1`, `enable.idempotence`
    /// other than `true`, more than 5 requests in flight, a
    /// `transactional.id`.
    #[error(
        "dead-letter producer property `{property}={value}` is refused: {reason}; the dead-letter producer always uses acks=all with enable.idempotence=true"
    )]
    DeadLetterProducerProperty {
        /// The property name, as given.
        property: String,
        /// The value given.
        value: String,
        /// What the value would cost.
        reason: &'static str,
    },
    /// An output producer property ([`OutputConfig::producer_property`](crate::output::OutputConfig::producer_property))
    /// that would let a commit cover an output the brokers did not durably
    /// acknowledge (`acks` other than `all`/`-1`, `enable.idempotence` other
    /// than `true`, more than 5 requests in flight), or a `transactional.id`
    /// (set [`OutputConfig::transactional_id`](crate::output::OutputConfig::transactional_id)
    /// instead).
    #[error(
        "output producer property `{property}={value}` is refused: {reason}; the output producer always uses acks=all with enable.idempotence=true"
    )]
    OutputProducerProperty {
        /// The property name, as given.
        property: String,
        /// The value given.
        value: String,
        /// What the value would cost.
        reason: &'static str,
    },
    /// librdkafka rejected a property (unknown name or invalid value), or
    /// the library does not support the value (`enable.partition.eof=true`).
    /// For secret properties the reason does not repeat the value.
    #[error("invalid librdkafka property `{property}`: {reason}")]
    InvalidProperty {
        /// The property name.
        property: String,
        /// Why: librdkafka's reason, or the library's for a value it does not
        /// support (secret values redacted).
        reason: String,
    },
}

/// Why a [`RetryTopics`](crate::failure::RetryTopics) policy cannot run,
/// inside [`ConfigError::RetryTopics`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryTopicsError {
    /// No tier: give at least one delay.
    #[error("no retry tiers: give at least one delay")]
    NoTiers,
    /// A tier's delay is below 1 ms.
    #[error("tier {tier}: the delay must be at least 1 ms")]
    ZeroDelay {
        /// The tier, from 1.
        tier: usize,
    },
    /// A tier's delay is shorter than the one before it.
    #[error("tier {tier}: the delay is shorter than the previous tier's")]
    UnsortedDelays {
        /// The tier, from 1.
        tier: usize,
    },
    /// The suffix of the tier topic names is empty.
    #[error("the tier topic suffix must not be empty")]
    EmptySuffix,
    /// The dead-letter topic name is empty.
    #[error("the dead-letter topic must not be empty")]
    EmptyDeadLetterTopic,
    /// Two uses share one topic name (two tiers, a tier and a subscribed
    /// topic, the dead-letter topic and a source or tier).
    #[error("topic `{topic}` would be both {first} and {second}")]
    TopicCollision {
        /// The shared name.
        topic: String,
        /// Its first use.
        first: String,
        /// Its second use.
        second: String,
    },
    /// A subscription by pattern (`^...`): its tier topics cannot be known.
    #[error("pattern subscription `{pattern}`: retry topics need literal topic names")]
    PatternSubscription {
        /// The pattern.
        pattern: String,
    },
}

/// Why [`FreshConsumer::run_until`](crate::FreshConsumer::run_until) could not
/// run or stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration is invalid; nothing was started.
    #[error("invalid configuration")]
    Config(#[from] ConfigError),
    /// librdkafka could not create the consumer or subscribe.
    #[error("kafka client error")]
    Client(#[source] KafkaError),
    /// One of the consumer's threads (committer, poll-interval watchdog,
    /// health) could not be started; nothing was consumed.
    #[error("could not start a consumer thread")]
    Thread(#[source] std::io::Error),
    /// `run_until` was called outside a tokio runtime.
    #[error("no tokio runtime: run the consumer inside a tokio runtime")]
    NoRuntime,
    /// The consumer stopped on a fatal librdkafka error (for example a fenced
    /// static member); completed work was committed first where possible.
    /// With transactional outputs, also a fenced or otherwise fatal output
    /// producer (another producer with the same
    /// [`transactional_id`](crate::output::OutputConfig::transactional_id), a
    /// zombie after a rebalance): then nothing was committed after the
    /// error, and the open transaction's outputs are never visible to a
    /// `read_committed` reader.
    #[error("fatal kafka error")]
    Fatal(#[source] KafkaError),
    /// A second stop signal (SIGTERM or SIGINT) arrived while
    /// [`run`](crate::FreshConsumer::run) was shutting down after the
    /// first: the run ended at once, without waiting for running handlers
    /// or the final commit. Records completed since the last commit are
    /// redelivered to the group; nothing was committed past a record that
    /// did not complete.
    #[error("interrupted by a second stop signal during shutdown")]
    Interrupted,
}

impl RunError {
    /// `true` when the error is a configuration error.
    pub fn is_config(&self) -> bool {
        matches!(self, RunError::Config(_))
    }
}

/// `true` for what librdkafka reads as a true boolean property (`true`, `t`
/// or `1`, case-insensitive); anything else is false or a value librdkafka
/// rejects itself. Here, below every module that validates properties.
pub(crate) fn is_true(value: &str) -> bool {
    let v = value.trim();
    v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("t") || v == "1"
}

/// The error's message followed by its sources, `: `-separated (what a
/// dead-letter header, a span's status and the test kit carry).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

/// Writes `message()` to stderr as an ERROR line when no `tracing`
/// subscriber was ever installed, so a condition that stops work (a
/// partition stopped at a failing record) is seen by a service that never
/// set up logging. With a subscriber, the caller's `tracing::error!` is
/// the report and this prints nothing.
pub(crate) fn say_without_subscriber(message: impl FnOnce() -> String) {
    if !tracing::dispatcher::has_been_set() {
        eprintln!("ERROR fresh_consumer: {}", message());
    }
}
