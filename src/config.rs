//! The library's settings: defaults, validation, and what librdkafka is
//! given (with secrets redacted from everything shown).

use std::fmt;
use std::time::Duration;

use opentelemetry::metrics::Meter;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

use crate::error::{ConfigError, is_true};
use crate::failure::{OnExhausted, RetryPolicy, StaleSettings, StormGuard};
use crate::ordering::ProcessingOrder;
use crate::slo::FreshnessObjective;

/// Default for [`FreshConsumer::max_buffered_records`](crate::FreshConsumer::max_buffered_records).
pub const DEFAULT_MAX_BUFFERED_RECORDS: usize = 1_000;
/// Default for [`FreshConsumer::commit_interval`](crate::FreshConsumer::commit_interval).
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// librdkafka's `fetch.queue.backoff.ms` unless set: how soon librdkafka
/// looks again at a partition whose queue was full.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// Default for [`FreshConsumer::commit_batch_records`](crate::FreshConsumer::commit_batch_records).
pub const DEFAULT_COMMIT_BATCH_RECORDS: usize = 10_000;
/// Default for [`FreshConsumer::revoke_timeout`](crate::FreshConsumer::revoke_timeout).
pub const DEFAULT_REVOKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`FreshConsumer::shutdown_timeout`](crate::FreshConsumer::shutdown_timeout).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default for [`FreshConsumer::poll_warning_ratio`](crate::FreshConsumer::poll_warning_ratio).
pub const DEFAULT_POLL_WARNING_RATIO: f64 = 0.8;
/// Consumer properties librdkafka refuses with `group.protocol=consumer`
/// (KIP-848), and what replaces each.
const KIP848_REFUSED: [(&str, &str); 4] = [
    (
        "session.timeout.ms",
        "the session timeout is the broker's group.consumer.session.timeout.ms",
    ),
    (
        "heartbeat.interval.ms",
        "the heartbeat interval is the broker's group.consumer.heartbeat.interval.ms",
    ),
    (
        "partition.assignment.strategy",
        "the broker assigns; choose its assignor with group.remote.assignor",
    ),
    (
        "group.protocol.type",
        "the consumer protocol has no protocol type",
    ),
];

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_millis(300_000);

/// Everything but the handler.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) bootstrap_servers: Option<String>,
    pub(crate) group_id: Option<String>,
    pub(crate) topics: Vec<String>,
    pub(crate) properties: Vec<(String, String)>,
    pub(crate) max_buffered_records: usize,
    pub(crate) split_partition_queues: bool,
    pub(crate) commit_interval: Duration,
    pub(crate) commit_batch_records: usize,
    pub(crate) retry: RetryPolicy,
    pub(crate) on_exhausted: OnExhausted,
    pub(crate) storm_guard: StormGuard,
    /// The stale-record policy (`None`: every record is handled).
    pub(crate) stale: Option<StaleSettings>,
    /// Whether the stale-record policy checks retry-tier records too.
    pub(crate) stale_retry_tiers: bool,
    pub(crate) handler_timeout: Option<Duration>,
    pub(crate) objectives: Vec<FreshnessObjective>,
    pub(crate) slo_windows: (Duration, Duration),
    pub(crate) revoke_timeout: Duration,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) poll_warning_ratio: f64,
    pub(crate) meter: Option<Meter>,
    pub(crate) meter_provider: Option<SdkMeterProvider>,
    pub(crate) event_time_header: Option<String>,
    pub(crate) read_headers: bool,
    pub(crate) processing_order: ProcessingOrder,
    /// Partition health: the handle's hub, thresholds, retention-overrun
    /// policy, statistics interval (builder methods in `crate::health`).
    pub(crate) health: crate::health::hub::HealthSettings,
    /// Traces: the tracer provider (none: off) and its options.
    pub(crate) trace: crate::trace::TraceSettings,
    /// Batches for a batch handler (`None`: one record per handler call).
    pub(crate) batch: Option<crate::handler::BatchSettings>,
    /// Handler outputs (`None`: off, no producer).
    pub(crate) outputs: Option<crate::output::OutputConfig>,
    /// Take the event age from the origin-time header when present.
    pub(crate) origin_time: bool,
    /// The pauses set through the control handles.
    pub(crate) controls: std::sync::Arc<crate::control::Controls>,
}

/// Settings checked and turned into a librdkafka configuration.
pub(crate) struct Validated {
    pub(crate) client_config: ClientConfig,
    pub(crate) group_id: String,
    pub(crate) topics: Vec<String>,
    pub(crate) max_poll_interval: Duration,
    /// Text to redact from librdkafka's log lines and errors: see
    /// [`secret_fragments`].
    pub(crate) secrets: Vec<String>,
    pub(crate) health: crate::health::thresholds::HealthConfig,
    /// The tier topics of [`OnExhausted::RetryTopics`] (empty otherwise).
    pub(crate) tiers: crate::failure::TierPlan,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bootstrap_servers: None,
            group_id: None,
            topics: Vec::new(),
            properties: Vec::new(),
            max_buffered_records: DEFAULT_MAX_BUFFERED_RECORDS,
            split_partition_queues: true,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            commit_batch_records: DEFAULT_COMMIT_BATCH_RECORDS,
            retry: RetryPolicy::default(),
            on_exhausted: OnExhausted::default(),
            storm_guard: StormGuard::default(),
            stale: None,
            stale_retry_tiers: false,
            handler_timeout: None,
            objectives: Vec::new(),
            slo_windows: (
                crate::slo::DEFAULT_SHORT_WINDOW,
                crate::slo::DEFAULT_LONG_WINDOW,
            ),
            revoke_timeout: DEFAULT_REVOKE_TIMEOUT,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            poll_warning_ratio: DEFAULT_POLL_WARNING_RATIO,
            meter: None,
            meter_provider: None,
            event_time_header: None,
            read_headers: true,
            processing_order: ProcessingOrder::Partition,
            health: crate::health::hub::HealthSettings::default(),
            trace: crate::trace::TraceSettings::default(),
            batch: None,
            outputs: None,
            origin_time: false,
            controls: std::sync::Arc::default(),
        }
    }
}

impl Settings {
    /// Checks the settings, group by group (each check is in the function
    /// of its group below), and turns them into a librdkafka configuration.
    pub(crate) fn validate(&self) -> Result<Validated, ConfigError> {
        self.check_properties()?;
        let group_id = self.check_group()?;
        self.check_processing()?;
        self.check_freshness()?;
        let tiers = self.check_failures()?;
        self.check_outputs()?;
        self.check_headers()?;
        let (client_config, health) = self.client_config(&group_id)?;
        let max_poll_interval = self.check_timeouts()?;
        Ok(Validated {
            client_config,
            group_id,
            topics: self.topics.clone(),
            max_poll_interval,
            secrets: secret_fragments(&self.properties),
            health,
            tiers,
        })
    }

    /// The value of librdkafka property `key` (the last one set).
    fn prop(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// librdkafka properties the library owns or cannot work with.
    fn check_properties(&self) -> Result<(), ConfigError> {
        let prop = |key: &str| self.prop(key);
        for (property, instead) in [
            ("enable.auto.commit", "commit_interval"),
            ("enable.auto.offset.store", "commit_batch_records"),
        ] {
            if prop(property).is_some_and(is_true) {
                return Err(ConfigError::AutoCommit { property, instead });
            }
        }
        if prop("enable.partition.eof").is_some_and(is_true) {
            return Err(ConfigError::InvalidProperty {
                property: "enable.partition.eof".to_owned(),
                reason: "the library does not hand partition-EOF events to the handler (health \
                         reports a caught-up partition as lag 0); leave it false"
                    .to_owned(),
            });
        }
        if !self.split_partition_queues && prop("check.crcs").is_some_and(is_true) {
            // The poll loop learns of a batch that fails the check only as
            // a consume error without partition or offset (rust-rdkafka
            // drops them), so it could neither count nor pass it: the
            // partition would stall at it for ever.
            return Err(ConfigError::InvalidProperty {
                property: "check.crcs".to_owned(),
                reason: "needs split_partition_queues(true): without split queues a record                          batch that fails the check cannot be located, counted or passed, and                          its partition would stop at it"
                    .to_owned(),
            });
        }
        if prop("group.protocol").is_some_and(|p| p.trim().eq_ignore_ascii_case("consumer")) {
            // KIP-848: the broker owns these; librdkafka refuses them only
            // when the client is created, with RunError::Client.
            for (property, instead) in KIP848_REFUSED {
                if prop(property).is_some() {
                    return Err(ConfigError::InvalidProperty {
                        property: property.to_owned(),
                        reason: format!(
                            "not supported with group.protocol=consumer (KIP-848): {instead}"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The cluster, the group and the topics: the group id.
    fn check_group(&self) -> Result<String, ConfigError> {
        let prop = |key: &str| self.prop(key);
        let bootstrap = self
            .bootstrap_servers
            .as_deref()
            .or(prop("bootstrap.servers"))
            .or(prop("metadata.broker.list"));
        if bootstrap.is_none_or(|b| b.trim().is_empty()) && prop("test.mock.num.brokers").is_none()
        {
            return Err(ConfigError::MissingBootstrapServers);
        }
        let group_id = self
            .group_id
            .as_deref()
            .or(prop("group.id"))
            .filter(|g| !g.trim().is_empty())
            .ok_or(ConfigError::MissingGroupId)?
            .to_owned();
        if self.topics.is_empty() {
            return Err(ConfigError::MissingTopics);
        }
        if self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(ConfigError::EmptyTopicName);
        }
        Ok(group_id)
    }

    /// How records are taken and handled: buffers, order, batches,
    /// commits, the handler's timeout, the poll warning, the event time.
    fn check_processing(&self) -> Result<(), ConfigError> {
        if self.max_buffered_records == 0 {
            return Err(invalid("max_buffered_records", "must be at least 1"));
        }
        if let Err(reason) = self.processing_order.validate() {
            return Err(invalid("processing_order", reason));
        }
        if let Some(batch) = &self.batch {
            if batch.max_records == 0 {
                return Err(invalid("max_batch_records", "must be at least 1"));
            }
            if batch.max_wait.is_zero() {
                return Err(invalid("max_batch_wait", "must be more than zero"));
            }
            if matches!(self.processing_order, ProcessingOrder::Key { max_in_flight } if max_in_flight > 1)
            {
                return Err(invalid(
                    "processing_order",
                    "a batch handler takes a partition's records in offset order: key order cannot be combined with it",
                ));
            }
        }
        if self.commit_interval.is_zero() {
            return Err(invalid("commit_interval", "must be more than zero"));
        }
        if self.commit_batch_records == 0 {
            return Err(invalid("commit_batch_records", "must be at least 1"));
        }
        if self.handler_timeout.is_some_and(|t| t.is_zero()) {
            return Err(invalid("handler_timeout", "must be more than zero"));
        }
        if !(self.poll_warning_ratio > 0.0 && self.poll_warning_ratio <= 1.0) {
            return Err(invalid("poll_warning_ratio", "must be in (0, 1]"));
        }
        if let Some(h) = &self.event_time_header
            && h.is_empty()
        {
            return Err(invalid("event_time_header", "must not be empty"));
        }
        Ok(())
    }

    /// Freshness objectives and their windows.
    fn check_freshness(&self) -> Result<(), ConfigError> {
        for o in &self.objectives {
            if let Err(reason) = o.validate() {
                return Err(invalid("freshness_objective", reason));
            }
        }
        let (short, long) = self.slo_windows;
        if short.is_zero() || short >= long {
            return Err(invalid(
                "slo_windows",
                "short must be more than zero and less than long",
            ));
        }
        Ok(())
    }

    /// Retries, the storm guard, the exhausted-record policy (its retry
    /// tiers: the plan returned) and the stale-record policy.
    fn check_failures(&self) -> Result<crate::failure::TierPlan, ConfigError> {
        if let Err(reason) = self.retry.validate() {
            return Err(invalid("retry", reason));
        }
        if self.storm_guard.enabled
            && !(self.storm_guard.max_failure_ratio > 0.0
                && self.storm_guard.max_failure_ratio <= 1.0
                && !self.storm_guard.window.is_zero())
        {
            return Err(invalid(
                "storm_guard",
                "max_failure_ratio must be in (0, 1] and the window more than zero",
            ));
        }
        if let OnExhausted::DeadLetter(dl) = &self.on_exhausted
            && dl.topic.as_deref().is_some_and(|t| t.trim().is_empty())
        {
            return Err(invalid(
                "on_exhausted",
                "dead-letter topic must not be empty",
            ));
        }
        // The tier writes and the final dead-letter writes share one
        // producer, with the dead-letter configuration.
        match &self.on_exhausted {
            OnExhausted::DeadLetter(dl) => dl.check_producer_properties()?,
            OnExhausted::RetryTopics(rt) => rt.dead_letter.check_producer_properties()?,
            _ => {}
        }
        let tiers = match &self.on_exhausted {
            OnExhausted::RetryTopics(rt) => {
                rt.plan(&self.topics).map_err(ConfigError::RetryTopics)?
            }
            _ => crate::failure::TierPlan::default(),
        };
        if let Some(stale) = &self.stale {
            let mut topics = self.topics.clone();
            topics.extend(tiers.topics().map(str::to_owned));
            if let Err(reason) = stale.validate(&topics) {
                return Err(invalid("max_record_age", reason));
            }
            if stale.action.writes() && !self.read_headers {
                return Err(invalid(
                    "read_headers",
                    "stale records written to a topic carry the original record's headers: headers must be read",
                ));
            }
        }
        Ok(tiers)
    }

    /// Handler outputs and their transactions.
    fn check_outputs(&self) -> Result<(), ConfigError> {
        if let Some(outputs) = &self.outputs {
            outputs.check()?;
            if outputs.is_transactional() {
                let unsupported = if self.batch.is_some() {
                    Some("a batch handler")
                } else if matches!(self.processing_order, ProcessingOrder::Key { max_in_flight } if max_in_flight > 1)
                {
                    Some("key order with more than one record in flight")
                } else if !self.split_partition_queues {
                    Some("split_partition_queues(false)")
                } else {
                    None
                };
                if let Some(what) = unsupported {
                    return Err(ConfigError::InvalidOption {
                        option: "transactional_id",
                        reason: format!(
                            "transactional outputs do not support {what} yet (an aborted transaction rewinds a partition, which only the one-record-at-a-time loop on a split partition queue does)"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// What needs the records' headers read.
    fn check_headers(&self) -> Result<(), ConfigError> {
        if !self.read_headers {
            if self.origin_time || self.outputs.is_some() {
                return Err(invalid(
                    "read_headers",
                    "`origin_time` and `outputs` read the input's origin-time header: headers must be read",
                ));
            }
            if self.event_time_header.is_some() {
                return Err(invalid(
                    "read_headers",
                    "`event_time_header` takes the event time from a header: headers must be read",
                ));
            }
            if matches!(
                self.on_exhausted,
                OnExhausted::DeadLetter(_) | OnExhausted::RetryTopics(_)
            ) {
                return Err(invalid(
                    "read_headers",
                    "dead-letter records carry the original record's headers: headers must be read",
                ));
            }
        }

        Ok(())
    }

    /// The librdkafka configuration (parsed by librdkafka now, before
    /// any client exists) and the health options it decides.
    fn client_config(
        &self,
        group_id: &str,
    ) -> Result<(ClientConfig, crate::health::thresholds::HealthConfig), ConfigError> {
        let prop = |key: &str| self.prop(key);
        let mut cc = ClientConfig::new();
        cc.set("auto.offset.reset", "earliest");
        for (k, v) in &self.properties {
            cc.set(k, v);
        }
        if let Some(b) = &self.bootstrap_servers {
            cc.set("bootstrap.servers", b);
        }
        cc.set("group.id", group_id);
        cc.set("enable.auto.commit", "false");
        cc.set("enable.auto.offset.store", "false");
        // Workers read their partitions' own queues (split off the main
        // queue), so librdkafka's per-partition queue is the buffer: it
        // fetches while a partition holds fewer than `max_buffered_records`,
        // and looks again soon after a worker drained it (librdkafka's
        // default backoff of a second would idle a drained partition).
        if self.split_partition_queues && prop("queued.min.messages").is_none() {
            cc.set("queued.min.messages", self.max_buffered_records.to_string());
        }
        if self.split_partition_queues && prop("fetch.queue.backoff.ms").is_none() {
            cc.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
        }
        // The library decides offset resets (auto.offset.reset=error for
        // librdkafka) and reads librdkafka's statistics.
        let health = self.health.configure(
            &mut cc,
            prop("auto.offset.reset"),
            prop("statistics.interval.ms"),
            prop("isolation.level"),
            self.commit_interval,
        )?;
        // Let librdkafka parse every property now, before any client exists.
        cc.create_native_config().map_err(redact_config_error)?;

        Ok((cc, health))
    }

    /// Waits that must end within `max.poll.interval.ms`: the interval.
    fn check_timeouts(&self) -> Result<Duration, ConfigError> {
        let prop = |key: &str| self.prop(key);
        let max_poll_interval = match prop("max.poll.interval.ms") {
            Some(v) => Duration::from_millis(v.trim().parse::<u64>().map_err(|_| {
                ConfigError::InvalidProperty {
                    property: "max.poll.interval.ms".into(),
                    reason: "not a number of milliseconds".into(),
                }
            })?),
            None => DEFAULT_MAX_POLL_INTERVAL,
        };
        if self.revoke_timeout >= max_poll_interval {
            return Err(invalid(
                "revoke_timeout",
                "must be below max.poll.interval.ms",
            ));
        }
        if self
            .batch
            .as_ref()
            .is_some_and(|b| b.max_wait >= max_poll_interval)
        {
            return Err(invalid(
                "max_batch_wait",
                "must be below max.poll.interval.ms",
            ));
        }
        Ok(max_poll_interval)
    }
}

/// [`ConfigError::InvalidOption`] for `option`.
fn invalid(option: &'static str, reason: &str) -> ConfigError {
    ConfigError::InvalidOption {
        option,
        reason: reason.to_owned(),
    }
}

/// `true` for librdkafka properties whose values must never be shown.
pub(crate) fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("passphrase")
        || k.contains("secret")
        || k == "sasl.oauthbearer.config"
        || k == "ssl.key.pem"
        || k == "ssl_key"
        || k.contains("private.key")
        || k.contains("token")
}

/// The values of secret properties, longest first, for redaction from
/// librdkafka's log lines and errors, which may echo a value or part of it
/// (a malformed `sasl.oauthbearer.config` is reported as "Unrecognized
/// sasl.oauthbearer.config beginning at: <the rest of the value>", an invalid
/// extension by its value). Each value is listed whole, and by its
/// whitespace-separated parts and their `key=value` values of at least 4
/// bytes.
pub(crate) fn secret_fragments(properties: &[(String, String)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, v) in properties {
        if !is_secret_property(k) || v.is_empty() {
            continue;
        }
        out.push(v.clone());
        for part in v.split_whitespace() {
            let value = part.split_once('=').map(|(_, value)| value);
            out.extend(
                [Some(part), value]
                    .into_iter()
                    .flatten()
                    .filter(|p| p.len() >= 4)
                    .map(str::to_owned),
            );
        }
    }
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

pub(crate) fn redact_config_error(e: KafkaError) -> ConfigError {
    match e {
        KafkaError::ClientConfig(_, desc, key, value) => {
            let reason = if is_secret_property(&key) || value.is_empty() {
                if value.is_empty() {
                    desc
                } else {
                    desc.replace(&value, "[redacted]")
                }
            } else {
                desc
            };
            ConfigError::InvalidProperty {
                property: key,
                reason: if reason.is_empty() {
                    "rejected by librdkafka".into()
                } else {
                    reason
                },
            }
        }
        other => ConfigError::InvalidProperty {
            property: String::new(),
            reason: other.to_string(),
        },
    }
}

pub(crate) struct RedactedProperties<'a>(pub(crate) &'a [(String, String)]);

impl fmt::Debug for RedactedProperties<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in self.0 {
            if is_secret_property(k) {
                m.entry(k, &"[redacted]");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}
