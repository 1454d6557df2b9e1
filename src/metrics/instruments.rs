//! The instruments, built once, and the attribute sets, built once per
//! assigned partition. Nothing here allocates per record.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, UpDownCounter};
use rdkafka::error::RDKafkaErrorCode;

use crate::metrics::names::*;
use crate::slo::{SloRegistry, age_boundaries};
use std::sync::Arc;

/// Every instrument the library records into.
#[derive(Clone)]
pub(crate) struct Instruments {
    pub(super) event_age: Histogram<f64>,
    pub(super) process_duration: Histogram<f64>,
    pub(super) consumed: Counter<u64>,
    pub(super) batch_duration: Histogram<f64>,
    pub(super) batch_messages: Histogram<u64>,
    pub(super) poll_interval: Histogram<f64>,
    pub(super) poll_warnings: Counter<u64>,
    pub(super) poll_exceeded: Counter<u64>,
    pub(super) operation_duration: Histogram<f64>,
    pub(super) timestamp_missing: Counter<u64>,
    pub(super) clock_skew: Counter<u64>,
    pub(super) origin_malformed: Counter<u64>,
    pub(super) retries: Counter<u64>,
    pub(super) dead_letter: Counter<u64>,
    pub(super) skipped: Counter<u64>,
    pub(super) stale: Counter<u64>,
    pub(super) blocked: Gauge<u64>,
    pub(super) blocked_records: Counter<u64>,
    pub(super) sent: Counter<u64>,
    pub(super) transactions: Counter<u64>,
    pub(super) transaction_duration: Histogram<f64>,
    pub(super) retry_messages: Counter<u64>,
    pub(super) storm_guard: UpDownCounter<i64>,
    pub(super) slo_messages: Counter<u64>,
    pub(super) slo: Arc<SloRegistry>,
    pub(super) group_attrs: [KeyValue; 2],
    pub(super) commit_attrs: [KeyValue; 4],
    pub(super) poll_attrs: [KeyValue; 4],
    pub(super) group: String,
}

/// Outcome of recording an age (for tests and counters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum AgeOutcome {
    Recorded(f64),
    ClockSkew,
    Missing,
}

/// Computes the event age in seconds at `now_ns` (nanoseconds since the Unix
/// epoch).
pub(crate) fn event_age(event_ms: i64, now_ns: i64) -> AgeOutcome {
    let age_ns = now_ns.saturating_sub(event_ms.saturating_mul(1_000_000));
    if age_ns < 0 {
        AgeOutcome::ClockSkew
    } else {
        AgeOutcome::Recorded(age_ns as f64 / 1e9)
    }
}

impl Instruments {
    pub(crate) fn new(meter: &Meter, group: &str, slo: Arc<SloRegistry>) -> Self {
        let hist = |name: &'static str, desc: &'static str, bounds: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(desc)
                .with_boundaries(bounds.to_vec())
                .build()
        };
        let counter = |name: &'static str, unit: &'static str, desc: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(desc)
                .build()
        };
        let group_attrs = [
            KeyValue::new(MESSAGING_SYSTEM, "kafka"),
            KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, group.to_owned()),
        ];
        Instruments {
            event_age: hist(
                EVENT_AGE,
                "Age of the record's event time when its handler succeeded.",
                &age_boundaries(
                    EVENT_AGE_BOUNDARIES,
                    &slo.objectives
                        .iter()
                        .map(|o| o.objective.clone())
                        .collect::<Vec<_>>(),
                ),
            ),
            slo_messages: counter(
                SLO_MESSAGES,
                "{message}",
                "Finished records per freshness objective, by result (good when the event age was at most the threshold).",
            ),
            slo,
            process_duration: hist(
                PROCESS_DURATION,
                "Duration of one handler attempt.",
                MESSAGING_DURATION_BOUNDARIES,
            ),
            consumed: counter(
                CONSUMED_MESSAGES,
                "{message}",
                "Records received from Kafka.",
            ),
            batch_duration: hist(
                BATCH_DURATION,
                "Duration of a run of one partition's records handled back to back.",
                DURATION_BOUNDARIES,
            ),
            batch_messages: meter
                .u64_histogram(BATCH_MESSAGES)
                .with_unit("{message}")
                .with_description("Records per call of a batch handler.")
                .with_boundaries(BATCH_MESSAGES_BOUNDARIES.to_vec())
                .build(),
            poll_interval: hist(
                POLL_INTERVAL,
                "Gap between two polls of librdkafka by the poll loop.",
                DURATION_BOUNDARIES,
            ),
            poll_warnings: counter(
                POLL_INTERVAL_WARNINGS,
                "{warning}",
                "Poll gaps that crossed the warning share of max.poll.interval.ms.",
            ),
            poll_exceeded: counter(
                POLL_INTERVAL_EXCEEDED,
                "{event}",
                "Times librdkafka reported max.poll.interval.ms exceeded.",
            ),
            operation_duration: hist(
                CLIENT_OPERATION_DURATION,
                "Duration of messaging operation initiated by a producer or consumer client.",
                MESSAGING_DURATION_BOUNDARIES,
            ),
            timestamp_missing: counter(
                EVENT_TIMESTAMP_MISSING,
                "{message}",
                "Succeeded records without a usable event time.",
            ),
            clock_skew: counter(
                EVENT_CLOCK_SKEW,
                "{message}",
                "Succeeded records timestamped later than the consumer's clock.",
            ),
            origin_malformed: counter(
                ORIGIN_TIME_MALFORMED,
                "{message}",
                "Succeeded records whose origin-time header could not be read.",
            ),
            retries: counter(
                HANDLER_RETRIES,
                "{attempt}",
                "Handler attempts that were retries of a failed attempt.",
            ),
            dead_letter: counter(
                DEAD_LETTER_MESSAGES,
                "{message}",
                "Records parked in a dead-letter topic after their attempts ran out.",
            ),
            skipped: counter(
                SKIPPED_MESSAGES,
                "{message}",
                "Records given up and committed past after their attempts ran out (skip policy).",
            ),
            stale: counter(
                STALE_MESSAGES,
                "{message}",
                "Records not handled because their event age was above the maximum record age.",
            ),
            blocked: meter
                .u64_gauge(PARTITION_BLOCKED)
                .with_unit("1")
                .with_description(
                    "1 while the partition is blocked by a record whose attempts ran out, else 0.",
                )
                .build(),
            blocked_records: counter(
                BLOCKED_MESSAGES,
                "{message}",
                "Records that stopped their partition: attempts ran out (or a permanent error) under the block policy, or their dead-letter write failed.",
            ),
            transactions: counter(
                TRANSACTIONS,
                "{transaction}",
                "Kafka transactions of transactional outputs, by outcome (committed, aborted with error.type).",
            ),
            transaction_duration: hist(
                TRANSACTION_DURATION,
                "Duration of a Kafka transaction of transactional outputs, from its first output to its commit or abort.",
                DURATION_BOUNDARIES,
            ),
            sent: counter(
                SENT_MESSAGES,
                "{message}",
                "Records sent by the library (handler outputs, dead-letter and retry-tier writes), with error.type when not acknowledged.",
            ),
            retry_messages: counter(
                RETRY_MESSAGES,
                "{message}",
                "Records moved to a retry tier, per tier written to.",
            ),
            storm_guard: meter
                .i64_up_down_counter(STORM_GUARD_ACTIVE)
                .with_unit("1")
                .with_description(
                    "1 while the storm guard holds records back from the dead-letter topic, else 0.",
                )
                .build(),
            commit_attrs: [
                group_attrs[0].clone(),
                group_attrs[1].clone(),
                KeyValue::new(MESSAGING_OPERATION_NAME, "commit"),
                KeyValue::new(MESSAGING_OPERATION_TYPE, "settle"),
            ],
            poll_attrs: [
                group_attrs[0].clone(),
                group_attrs[1].clone(),
                KeyValue::new(MESSAGING_OPERATION_NAME, "poll"),
                KeyValue::new(MESSAGING_OPERATION_TYPE, "receive"),
            ],
            group_attrs,
            group: group.to_owned(),
        }
    }

    /// One handler output to `topic` settled: acknowledged (`error`
    /// `None`), or failed with the Kafka error name `error`.
    pub(crate) fn output_sent(&self, topic: &str, error: Option<String>) {
        let mut attrs = vec![
            KeyValue::new(MESSAGING_SYSTEM, "kafka"),
            KeyValue::new(MESSAGING_DESTINATION_NAME, topic.to_owned()),
            KeyValue::new(MESSAGING_OPERATION_NAME, "send"),
        ];
        if let Some(e) = error {
            attrs.push(KeyValue::new(ERROR_TYPE, e));
        }
        self.sent.add(1, &attrs);
    }

    /// Counts a transaction that ended (`abort_reason`: `None` when it
    /// committed) and records its duration.
    pub(crate) fn transaction(&self, took: Duration, abort_reason: Option<String>) {
        let mut attrs = self.group_attrs.to_vec();
        let outcome = if abort_reason.is_some() {
            "aborted"
        } else {
            "committed"
        };
        attrs.push(KeyValue::new(TRANSACTION_OUTCOME, outcome));
        self.transaction_duration.record(took.as_secs_f64(), &attrs);
        if let Some(reason) = abort_reason {
            attrs.push(KeyValue::new(ERROR_TYPE, reason));
        }
        self.transactions.add(1, &attrs);
    }

    /// Counts the transaction an earlier producer with the same
    /// `transactional.id` left open, which `init_transactions` had the
    /// coordinator end ([`TRANSACTIONS`], `aborted`, [`ERROR_TYPE`]
    /// `predecessor_open`); no duration (its start is not known).
    pub(crate) fn predecessor_transaction_ended(&self) {
        let mut attrs = self.group_attrs.to_vec();
        attrs.push(KeyValue::new(TRANSACTION_OUTCOME, "aborted"));
        attrs.push(KeyValue::new(ERROR_TYPE, "predecessor_open"));
        self.transactions.add(1, &attrs);
    }

    /// The freshness objectives' registry.
    pub(crate) fn slo_registry(&self) -> &SloRegistry {
        &self.slo
    }

    /// Records the storm guard tripping (`true`) or clearing (`false`).
    pub(crate) fn storm_guard(&self, active: bool) {
        self.storm_guard
            .add(if active { 1 } else { -1 }, &self.group_attrs);
    }

    pub(crate) fn poll_interval(&self, gap: Duration) {
        self.poll_interval
            .record(gap.as_secs_f64(), &self.group_attrs);
    }

    pub(crate) fn poll_warning(&self) {
        self.poll_warnings.add(1, &self.group_attrs);
    }

    pub(crate) fn poll_exceeded(&self) {
        self.poll_exceeded.add(1, &self.group_attrs);
    }

    /// A poll of librdkafka's main queue returned records after `took`
    /// (see [`CLIENT_OPERATION_DURATION`] for what a poll is): the group's
    /// attributes only, as such a poll can return records of several
    /// partitions.
    pub(crate) fn polled(&self, took: Duration) {
        self.operation_duration
            .record(took.as_secs_f64(), &self.poll_attrs);
    }

    pub(crate) fn commit(&self, took: Duration, error: Option<String>) {
        match error {
            None => self
                .operation_duration
                .record(took.as_secs_f64(), &self.commit_attrs),
            Some(e) => {
                let mut attrs = self.commit_attrs.to_vec();
                attrs.push(KeyValue::new(ERROR_TYPE, e));
                self.operation_duration.record(took.as_secs_f64(), &attrs);
            }
        }
    }
}

/// The `error.type` of a failed commit: librdkafka's name for the error code,
/// as Kafka spells it (`NOT_COORDINATOR`, `UNKNOWN_MEMBER_ID`; local errors
/// start with `_`, e.g. `_TRANSPORT`). A bounded set of values.
pub(crate) fn kafka_error_name(code: RDKafkaErrorCode) -> String {
    match rdkafka::types::RDKafkaRespErr::try_from(code as i32) {
        Ok(err) => {
            // SAFETY: `rd_kafka_err2name` returns a pointer to a static,
            // NUL-terminated string for every error code (rdkafka's own
            // `Display` for error codes relies on `rd_kafka_err2str` likewise).
            let name =
                unsafe { std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_err2name(err)) };
            name.to_string_lossy().into_owned()
        }
        Err(_) => format!("{code:?}"),
    }
}

/// Failure class of a handler attempt, for `error.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttemptError {
    Handler,
    Panic,
    Timeout,
    /// The handler succeeded, but an output it sent was not acknowledged.
    Output,
}

impl AttemptError {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AttemptError::Handler => "handler_error",
            AttemptError::Panic => "panic",
            AttemptError::Timeout => "timeout",
            AttemptError::Output => "output_error",
        }
    }
}

/// The `error.type` of a failed Kafka operation (see [`kafka_error_name`]).
pub(crate) fn kafka_error_name_of(e: &rdkafka::error::KafkaError) -> String {
    e.rdkafka_error_code()
        .map(kafka_error_name)
        .unwrap_or_else(|| "_OTHER".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_is_now_minus_event_time() {
        let now = 10_000_000_000;
        assert_eq!(event_age(7_500, now), AgeOutcome::Recorded(2.5));
        assert_eq!(event_age(10_000, now), AgeOutcome::Recorded(0.0));
        assert_eq!(event_age(10_001, now), AgeOutcome::ClockSkew);
    }

    #[test]
    fn commit_error_type_is_the_kafka_error_name() {
        assert_eq!(
            kafka_error_name(RDKafkaErrorCode::NotCoordinator),
            "NOT_COORDINATOR"
        );
        assert_eq!(
            kafka_error_name(RDKafkaErrorCode::UnknownMemberId),
            "UNKNOWN_MEMBER_ID"
        );
        assert_eq!(
            kafka_error_name(RDKafkaErrorCode::BrokerTransportFailure),
            "_TRANSPORT"
        );
    }

    #[test]
    fn messaging_durations_use_the_conventions_advice() {
        // semantic-conventions v1.44, docs/messaging/messaging-metrics.md,
        // for messaging.client.operation.duration and
        // messaging.process.duration.
        let advised = [
            0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        ];
        assert_eq!(MESSAGING_DURATION_BOUNDARIES, advised);
        // The library's own durations resolve at least as finely.
        for b in advised {
            assert!(DURATION_BOUNDARIES.contains(&b), "{b}");
        }
    }

    #[test]
    fn boundaries_cover_ms_to_a_week_and_are_sorted() {
        assert!(EVENT_AGE_BOUNDARIES.windows(2).all(|w| w[0] < w[1]));
        assert!(DURATION_BOUNDARIES.windows(2).all(|w| w[0] < w[1]));
        assert!(EVENT_AGE_BOUNDARIES[0] <= 0.001);
        assert!(*EVENT_AGE_BOUNDARIES.last().unwrap() >= 7.0 * 86_400.0);
        assert!(*DURATION_BOUNDARIES.last().unwrap() >= 300.0);
        // The test ages of the over-the-wire test land in five different buckets.
        let bucket = |v: f64| EVENT_AGE_BOUNDARIES.iter().position(|&b| v <= b);
        let b: Vec<_> = [0.05, 0.2, 0.9, 3.0, 120.0].map(bucket).to_vec();
        let mut d = b.clone();
        d.dedup();
        assert_eq!(b.len(), d.len());
    }
}
