//! The instruments, built once, and the attribute sets, built once per
//! assigned partition. Nothing here allocates per record.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Gauge, Histogram, Meter, UpDownCounter,
};
use rdkafka::error::RDKafkaErrorCode;

use crate::metrics::*;
use crate::record::{EventTime, RecordTimestamp};
use crate::slo::{SloRegistry, SloResult, age_boundaries};
use std::sync::Arc;

/// Every instrument the library records into.
#[derive(Clone)]
pub(crate) struct Instruments {
    event_age: Histogram<f64>,
    process_duration: Histogram<f64>,
    consumed: Counter<u64>,
    batch_duration: Histogram<f64>,
    batch_messages: Histogram<u64>,
    poll_interval: Histogram<f64>,
    poll_warnings: Counter<u64>,
    poll_exceeded: Counter<u64>,
    operation_duration: Histogram<f64>,
    timestamp_missing: Counter<u64>,
    clock_skew: Counter<u64>,
    origin_malformed: Counter<u64>,
    retries: Counter<u64>,
    dead_letter: Counter<u64>,
    skipped: Counter<u64>,
    stale: Counter<u64>,
    blocked: Gauge<u64>,
    sent: Counter<u64>,
    retry_messages: Counter<u64>,
    storm_guard: UpDownCounter<i64>,
    slo_messages: Counter<u64>,
    slo: Arc<SloRegistry>,
    group_attrs: [KeyValue; 2],
    commit_attrs: [KeyValue; 4],
    poll_attrs: [KeyValue; 4],
    group: String,
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

    pub(crate) fn partition(
        &self,
        topic: &str,
        partition: i32,
        dead_letter_topic: Option<&str>,
        retry: Option<PartitionRetry<'_>>,
        stale: Option<PartitionStale<'_>>,
    ) -> PartitionInstruments {
        let mut base = vec![
            KeyValue::new(MESSAGING_SYSTEM, "kafka"),
            KeyValue::new(MESSAGING_DESTINATION_NAME, topic.to_owned()),
            KeyValue::new(MESSAGING_DESTINATION_PARTITION_ID, partition.to_string()),
            KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, self.group.clone()),
        ];
        if let Some(tier) = retry.as_ref().and_then(|r| r.tier) {
            base.push(KeyValue::new(RETRY_TIER, tier.to_string()));
        }
        // Objectives of a tier topic's records are the source topic's.
        let slo_topic = retry.as_ref().map_or(topic, |r| r.source);
        let with = |extra: &[KeyValue]| -> Box<[KeyValue]> {
            base.iter().cloned().chain(extra.iter().cloned()).collect()
        };
        let process = [KeyValue::new(MESSAGING_OPERATION_NAME, "process")];
        let process_err = |kind: &'static str| {
            let mut v = process.to_vec();
            v.push(KeyValue::new(ERROR_TYPE, kind));
            with(&v)
        };
        PartitionInstruments {
            i: self.clone(),
            base: with(&[]),
            age_create: Lazy::histogram(
                &self.event_age,
                with(&[KeyValue::new(TIMESTAMP_TYPE, "create_time")]),
            ),
            age_append: Lazy::histogram(
                &self.event_age,
                with(&[KeyValue::new(TIMESTAMP_TYPE, "log_append_time")]),
            ),
            age_header: Lazy::histogram(
                &self.event_age,
                with(&[KeyValue::new(TIMESTAMP_TYPE, "header")]),
            ),
            age_origin: Lazy::histogram(
                &self.event_age,
                with(&[KeyValue::new(TIMESTAMP_TYPE, "origin")]),
            ),
            process_ok: Lazy::histogram(&self.process_duration, with(&process)),
            poll: Lazy::histogram(
                &self.operation_duration,
                with(&[
                    KeyValue::new(MESSAGING_OPERATION_NAME, "poll"),
                    KeyValue::new(MESSAGING_OPERATION_TYPE, "receive"),
                ]),
            ),
            batch: Lazy::histogram(&self.batch_duration, with(&[])),
            process_error: process_err("handler_error"),
            process_panic: process_err("panic"),
            consumed: Lazy::counter(
                &self.consumed,
                with(&[KeyValue::new(MESSAGING_OPERATION_NAME, "poll")]),
            ),
            process_timeout: process_err("timeout"),
            process_output: process_err("output_error"),
            slo: self
                .slo
                .objectives
                .iter()
                .enumerate()
                .filter(|(_, o)| o.objective.applies_to(slo_topic))
                .map(|(index, o)| {
                    let threshold = o.objective.threshold_label();
                    let attrs = SloResult::ALL.map(|r| {
                        Lazy::counter(
                            &self.slo_messages,
                            with(&[
                                KeyValue::new(SLO_THRESHOLD, threshold.clone()),
                                KeyValue::new(SLO_RESULT, r.as_str()),
                            ]),
                        )
                    });
                    // Every result exists from the assignment on, at 0:
                    // `good / (good + late)` then reads 0, not empty, before
                    // the first good record.
                    for counter in &attrs {
                        counter.get().add(0);
                    }
                    SloAttrs {
                        index,
                        threshold_s: o.threshold_s,
                        counters: attrs,
                    }
                })
                .collect(),
            dead_letter: dead_letter_topic.map(|dlt| {
                let dlq = with(&[KeyValue::new(DEAD_LETTER_TOPIC, dlt.to_owned())]);
                let sent: Box<[KeyValue]> = [
                    KeyValue::new(MESSAGING_SYSTEM, "kafka"),
                    KeyValue::new(MESSAGING_DESTINATION_NAME, dlt.to_owned()),
                    KeyValue::new(MESSAGING_OPERATION_NAME, "send"),
                ]
                .into();
                (dlq, sent)
            }),
            stale: stale.map(|st| {
                let counted = with(&[KeyValue::new(STALE_ACTION, st.action)]);
                let sent = st.topic.map(|t| -> Box<[KeyValue]> {
                    [
                        KeyValue::new(MESSAGING_SYSTEM, "kafka"),
                        KeyValue::new(MESSAGING_DESTINATION_NAME, t.to_owned()),
                        KeyValue::new(MESSAGING_OPERATION_NAME, "send"),
                    ]
                    .into()
                });
                (counted, sent)
            }),
            retry_tiers: retry
                .map(|r| {
                    r.tier_topics
                        .iter()
                        .enumerate()
                        .map(|(i, t)| {
                            // The tier written to replaces a tier
                            // partition's own tier attribute.
                            let moved: Box<[KeyValue]> = base
                                .iter()
                                .filter(|kv| kv.key.as_str() != RETRY_TIER)
                                .cloned()
                                .chain([KeyValue::new(RETRY_TIER, (i + 1).to_string())])
                                .collect();
                            let sent: Box<[KeyValue]> = [
                                KeyValue::new(MESSAGING_SYSTEM, "kafka"),
                                KeyValue::new(MESSAGING_DESTINATION_NAME, t.clone()),
                                KeyValue::new(MESSAGING_OPERATION_NAME, "send"),
                            ]
                            .into();
                            (moved, sent)
                        })
                        .collect()
                })
                .unwrap_or_default(),
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

/// An instrument bound to one attribute set on first use (or on assignment,
/// see [`PartitionInstruments::bind_on_assignment`]). Binding resolves the attribute set once,
/// so a record costs ~20 ns instead of a lookup of the whole set; binding
/// lazily keeps attribute sets that may never see a value (a timestamp type
/// the topic does not use) out of the export, where the SDK would send them
/// as empty points.
pub(crate) struct Lazy<I, B> {
    instrument: I,
    attrs: Box<[KeyValue]>,
    bound: std::sync::OnceLock<B>,
}

impl Lazy<Histogram<f64>, BoundHistogram<f64>> {
    fn histogram(h: &Histogram<f64>, attrs: Box<[KeyValue]>) -> Self {
        Lazy {
            instrument: h.clone(),
            attrs,
            bound: std::sync::OnceLock::new(),
        }
    }

    fn get(&self) -> &BoundHistogram<f64> {
        self.bound.get_or_init(|| self.instrument.bind(&self.attrs))
    }
}

impl Lazy<Counter<u64>, BoundCounter<u64>> {
    fn counter(c: &Counter<u64>, attrs: Box<[KeyValue]>) -> Self {
        Lazy {
            instrument: c.clone(),
            attrs,
            bound: std::sync::OnceLock::new(),
        }
    }

    fn get(&self) -> &BoundCounter<u64> {
        self.bound.get_or_init(|| self.instrument.bind(&self.attrs))
    }
}

/// One objective's attribute sets for a partition, one per [`SloResult`].
struct SloAttrs {
    index: usize,
    threshold_s: f64,
    counters: [Lazy<Counter<u64>, BoundCounter<u64>>; SloResult::ALL.len()],
}

/// (partition attributes + dead-letter topic, attributes of the sends to the
/// dead-letter topic).
type DeadLetterAttrs = (Box<[KeyValue]>, Box<[KeyValue]>);
/// (partition attributes + the stale action, the sends' attributes when
/// stale records are written).
type StaleAttrs = (Box<[KeyValue]>, Option<Box<[KeyValue]>>);

/// A partition's stale-record policy, for its attributes.
pub(crate) struct PartitionStale<'a> {
    /// The [`STALE_ACTION`] value.
    pub(crate) action: &'static str,
    /// Where its stale records are written, when they are.
    pub(crate) topic: Option<&'a str>,
}

/// A partition's place under the retry-topic policy, for its attributes.
pub(crate) struct PartitionRetry<'a> {
    /// The source topic whose records the partition holds.
    pub(crate) source: &'a str,
    /// The partition's tier, when its topic is a tier topic.
    pub(crate) tier: Option<usize>,
    /// The source's tier topics, tier 1 first.
    pub(crate) tier_topics: Vec<String>,
}

/// Instruments with one partition's attribute sets, built on assignment.
pub(crate) struct PartitionInstruments {
    i: Instruments,
    base: Box<[KeyValue]>,
    age_create: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    age_append: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    age_header: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    age_origin: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    process_ok: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    /// `messaging.client.operation.duration` of the polls of the
    /// partition's own queue.
    poll: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    batch: Lazy<Histogram<f64>, BoundHistogram<f64>>,
    process_error: Box<[KeyValue]>,
    process_panic: Box<[KeyValue]>,
    consumed: Lazy<Counter<u64>, BoundCounter<u64>>,
    process_timeout: Box<[KeyValue]>,
    process_output: Box<[KeyValue]>,
    /// The freshness objectives that apply to this partition's topic.
    slo: Vec<SloAttrs>,
    /// Dead-letter attributes: (partition attributes + dead-letter topic,
    /// attributes of the sends to the dead-letter topic).
    dead_letter: Option<DeadLetterAttrs>,
    /// Per tier (tier 1 first): (partition attributes + the tier written
    /// to, attributes of the sends to the tier topic).
    retry_tiers: Vec<DeadLetterAttrs>,
    /// With a stale-record policy: (partition attributes + the action,
    /// attributes of the sends to the stale records' topic when they are
    /// written).
    stale: Option<StaleAttrs>,
}

impl PartitionInstruments {
    /// Binds, before records flow, the instruments every partition with
    /// records uses on its first batch: the consumed counter, the successful
    /// process duration, the batch duration and, when the partition is read
    /// from its own queue (`own_queue`), its poll duration. A bind costs
    /// ~3-4 us (the SDK copies, sorts and hashes the attribute set and
    /// allocates the aggregator): on a burst over 1,000 partitions it was
    /// paid inside the burst, once per partition and instrument. Their
    /// series exist from the assignment on, at 0 or as an empty histogram
    /// (as the SLO counters' do). The event age stays lazy: a topic uses one
    /// of its three timestamp types.
    pub(crate) fn bind_on_assignment(&self, own_queue: bool) {
        self.consumed.get();
        self.process_ok.get();
        self.batch.get();
        if own_queue {
            self.poll.get();
        }
    }

    /// The partition attributes, for the health instruments
    /// (`crate::health`), which are observed rather than recorded here.
    pub(crate) fn attributes(&self) -> &[KeyValue] {
        &self.base
    }

    /// `n` records were taken from librdkafka for this partition.
    pub(crate) fn consumed(&self, n: u64) {
        self.consumed.get().add(n);
    }

    /// A poll of the partition's own librdkafka queue returned records
    /// after `took` (see [`CLIENT_OPERATION_DURATION`]).
    pub(crate) fn polled(&self, took: Duration) {
        self.poll.get().record(took.as_secs_f64());
    }

    pub(crate) fn attempt(&self, took: Duration, error: Option<AttemptError>) {
        let attrs = match error {
            None => return self.process_ok.get().record(took.as_secs_f64()),
            Some(AttemptError::Handler) => &self.process_error,
            Some(AttemptError::Panic) => &self.process_panic,
            Some(AttemptError::Timeout) => &self.process_timeout,
            Some(AttemptError::Output) => &self.process_output,
        };
        self.i.process_duration.record(took.as_secs_f64(), attrs);
    }

    /// A succeeded record's origin-time header could not be read.
    pub(crate) fn origin_malformed(&self) {
        self.i.origin_malformed.add(1, &self.base);
    }

    /// A failed attempt is about to be retried.
    pub(crate) fn retry(&self) {
        self.i.retries.add(1, &self.base);
    }

    /// A record was given up (skip policy).
    pub(crate) fn skipped(&self) {
        self.i.skipped.add(1, &self.base);
        self.slo(|_| SloResult::Skipped);
    }

    /// A stale record was shed: skipped, or written (`error`: `None` when
    /// the broker acknowledged the write, else the error name, and nothing
    /// is counted but the failed send).
    pub(crate) fn stale(&self, error: Option<String>) {
        let Some((counted, sent)) = &self.stale else {
            return;
        };
        match error {
            None => {
                self.i.stale.add(1, counted);
                if let Some(sent) = sent {
                    self.i.sent.add(1, sent);
                }
                self.slo(|_| SloResult::Stale);
            }
            Some(e) => {
                if let Some(sent) = sent {
                    let mut attrs = sent.to_vec();
                    attrs.push(KeyValue::new(ERROR_TYPE, e));
                    self.i.sent.add(1, &attrs);
                }
            }
        }
    }

    /// Counts a finished record against every objective of the partition.
    fn slo(&self, result: impl Fn(f64) -> SloResult) {
        for o in &self.slo {
            let r = result(o.threshold_s);
            let i = SloResult::ALL.iter().position(|x| *x == r).unwrap_or(0);
            o.counters[i].get().add(1);
            self.i.slo.objectives[o.index].count(r);
        }
    }

    /// The partition became blocked (`true`) or moved on (`false`).
    pub(crate) fn blocked(&self, blocked: bool) {
        self.i.blocked.record(u64::from(blocked), &self.base);
    }

    /// A dead-letter write finished: `None` when acknowledged, else the
    /// error name.
    pub(crate) fn dead_lettered(&self, error: Option<String>) {
        let Some((dlq, sent)) = &self.dead_letter else {
            return;
        };
        match error {
            None => {
                self.i.dead_letter.add(1, dlq);
                self.i.sent.add(1, sent);
                self.slo(|_| SloResult::DeadLettered);
            }
            Some(e) => {
                let mut attrs = sent.to_vec();
                attrs.push(KeyValue::new(ERROR_TYPE, e));
                self.i.sent.add(1, &attrs);
            }
        }
    }

    /// A write to retry tier `tier` (from 1) finished: `None` when
    /// acknowledged, else the error name.
    pub(crate) fn retry_tier_written(&self, tier: usize, error: Option<String>) {
        let Some((moved, sent)) = tier.checked_sub(1).and_then(|i| self.retry_tiers.get(i)) else {
            return;
        };
        match error {
            None => {
                self.i.retry_messages.add(1, moved);
                self.i.sent.add(1, sent);
            }
            Some(e) => {
                let mut attrs = sent.to_vec();
                attrs.push(KeyValue::new(ERROR_TYPE, e));
                self.i.sent.add(1, &attrs);
            }
        }
    }

    pub(crate) fn batch(&self, took: Duration) {
        self.batch.get().record(took.as_secs_f64());
    }

    /// A batch handler was called with `records` records.
    pub(crate) fn batch_handled(&self, records: usize) {
        self.i.batch_messages.record(records as u64, &self.base);
    }

    /// The success path's instrumentation, after a handler attempt
    /// succeeded: the attempt's duration (`took`) and the record's event age
    /// at `ended`, the clock reading taken when the handler returned (the
    /// wall-clock time is derived from it, see
    /// [`WallClock`](crate::clock::WallClock)).
    pub(crate) fn handler_succeeded(
        &self,
        wall: &crate::clock::WallClock,
        event_time: EventTime,
        took: Duration,
        ended: std::time::Instant,
    ) -> AgeOutcome {
        self.attempt(took, None);
        self.succeeded(event_time, wall.unix_nanos(ended))
    }

    /// Records the age of a succeeded record at `now_ns` (nanoseconds since
    /// the Unix epoch). Returns what was recorded.
    pub(crate) fn succeeded(&self, event_time: EventTime, now_ns: i64) -> AgeOutcome {
        let (ms, attrs) = match event_time {
            EventTime::Record(RecordTimestamp::CreateTime(ms)) if ms >= 0 => (ms, &self.age_create),
            EventTime::Record(RecordTimestamp::LogAppendTime(ms)) if ms >= 0 => {
                (ms, &self.age_append)
            }
            EventTime::Header(ms) if ms >= 0 => (ms, &self.age_header),
            EventTime::Origin(ms) if ms >= 0 => (ms, &self.age_origin),
            _ => {
                self.i.timestamp_missing.add(1, &self.base);
                self.slo(|_| SloResult::NoTimestamp);
                return AgeOutcome::Missing;
            }
        };
        let outcome = event_age(ms, now_ns);
        match outcome {
            AgeOutcome::Recorded(age) => {
                attrs.get().record(age);
                self.slo(|threshold| SloResult::of_age(age, threshold));
            }
            AgeOutcome::ClockSkew => {
                attrs.get().record(0.0);
                self.i.clock_skew.add(1, &self.base);
                self.slo(|_| SloResult::Good);
            }
            AgeOutcome::Missing => {
                self.i.timestamp_missing.add(1, &self.base);
                self.slo(|_| SloResult::NoTimestamp);
            }
        }
        outcome
    }
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
