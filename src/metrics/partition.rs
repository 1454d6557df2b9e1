//! One partition's instruments: its attribute sets, built on assignment by
//! [`Instruments::partition`], and the bound instruments the worker records
//! through (the success path of every record). The group's instruments are
//! in `instruments.rs`.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram};

use super::instruments::{AgeOutcome, AttemptError, Instruments, event_age};
use crate::metrics::names::*;
use crate::record::{EventTime, RecordTimestamp};
use crate::slo::SloResult;

impl Instruments {
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

    /// A record stopped the partition (once per record).
    pub(crate) fn record_blocked(&self) {
        self.i.blocked_records.add(1, &self.base);
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
