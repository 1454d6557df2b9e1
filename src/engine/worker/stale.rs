//! The stale-record policy at the worker
//! ([`FreshConsumer::max_record_age`](crate::FreshConsumer::max_record_age)):
//! a record whose event age is above the maximum when it reaches the
//! handler is skipped or written out (through `park.rs`) instead, and each
//! run of consecutive stale records is logged at its start and its end.

use std::time::{Duration, SystemTime};

use crate::failure::OnStale;
use crate::failure::dead_letter::{FailureInfo, Origin};
use crate::handler::Handler;
use crate::record::{EventTime, Record};

use super::park::{BlockGuard, Outgoing, To};
use super::task::{Done, StaleRun, Worker};

impl<H: Handler> Worker<H> {
    /// The event age of `record` (whose event time is `event_time`) when
    /// the stale-record policy sheds it; `None` when it is to be handled
    /// (fresh, no usable event time, no policy, or a retry-tier record the
    /// policy does not apply to). A fresh record ends a run of stale ones.
    pub(super) fn stale_age(&self, record: &Record, event_time: EventTime) -> Option<Duration> {
        let stale = self.engine.stale.as_ref()?;
        if !stale.applies_to(&self.engine.exhausted, record.topic()) {
            return None;
        }
        let age = stale.age_above(event_time, crate::record::unix_ms(SystemTime::now()));
        if age.is_none() {
            self.end_stale_run();
        }
        age
    }

    /// Logs the end of the partition's run of stale records, if one is open.
    pub(super) fn end_stale_run(&self) {
        let Some(stale) = &self.engine.stale else {
            return;
        };
        let run = self
            .stale_run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(run) = run {
            tracing::info!(
                topic = %self.state.topic,
                partition = self.state.partition,
                first_offset = run.first,
                last_offset = run.last,
                records = run.records,
                max_record_age = ?stale.max_age,
                action = stale.action.as_str(),
                "run of stale records ended: they were not handled"
            );
        }
    }

    /// Notes `record` (of event age `age`) in the partition's run of stale
    /// records; the first of a run is logged.
    fn note_stale(&self, record: &Record, age: Duration) {
        let Some(stale) = &self.engine.stale else {
            return;
        };
        let offset = record.offset();
        let mut run = self.stale_run.lock().unwrap_or_else(|e| e.into_inner());
        match run.as_mut() {
            Some(r) => {
                r.last = offset;
                r.records += 1;
            }
            None => {
                *run = Some(StaleRun {
                    first: offset,
                    last: offset,
                    records: 1,
                });
                let destination = stale.topic_for(&self.engine.exhausted, record.topic());
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset,
                    age = ?age,
                    max_record_age = ?stale.max_age,
                    action = stale.action.as_str(),
                    destination = destination.as_deref().unwrap_or(""),
                    "record older than max_record_age: not handled; the records after it that are as old neither (logged once per run)"
                );
            }
        }
    }

    /// Sheds a stale `record` (event age `age`) without calling the
    /// handler: commits past it ([`OnStale::Skip`]), or writes it to its
    /// topic and commits past it once the broker acknowledged the write.
    pub(super) async fn shed(
        &self,
        record: &Record,
        origin: &Option<Origin>,
        age: Duration,
    ) -> Done {
        let Some(stale) = &self.engine.stale else {
            return Done::Completed { succeeded_at: None };
        };
        self.note_stale(record, age);
        let writer = stale.writer(&self.engine.exhausted);
        let topic = stale.topic_for(&self.engine.exhausted, record.topic());
        let (Some(writer), Some(topic)) = (writer, topic) else {
            // `OnStale::Skip`.
            return self.shed_skipped(record.offset());
        };
        debug_assert!(!matches!(stale.action, OnStale::Skip));
        let now = SystemTime::now();
        let failure = FailureInfo {
            attempts: 0,
            error_type: "stale",
            error_message: format!("event age {age:?} above max_record_age {:?}", stale.max_age),
            first_failure: now,
            last_failure: now,
        };
        let origin = origin.clone().unwrap_or_else(|| Origin::of(record));
        let out = Outgoing {
            origin: &origin,
            failure: &failure,
            topic,
            to: To::Stale,
        };
        let mut blocked = BlockGuard {
            worker: self,
            blocked: false,
        };
        self.write_out(writer, record, out, &mut blocked, &[]).await
    }

    /// Takes the stale records out of a batch before the batch handler sees
    /// it, shedding each in offset order ([`Self::shed`]); returns the
    /// fresh ones, in offset order. `None` when the worker stopped
    /// meanwhile (the records left are counted as unassigned: the next
    /// owner gets them).
    pub(super) async fn shed_from_batch(&self, records: Vec<Record>) -> Option<Vec<Record>> {
        if self.engine.stale.is_none() {
            return Some(records);
        }
        let mut fresh = Vec::with_capacity(records.len());
        let mut left = records.len();
        for record in records {
            left -= 1;
            let (origin, event_time) = self.origin_and_event_time(&record);
            let Some(age) = self.stale_age(&record, event_time) else {
                fresh.push(record);
                continue;
            };
            match self.shed(&record, &origin, age).await {
                Done::Completed { .. } => {}
                // `Rewind` never: shedding makes no handler call.
                Done::Stopped | Done::Rewind => {
                    self.unhandled(1 + fresh.len() + left);
                    return None;
                }
                // Written after the revoke: counted as a late completion.
                Done::Late => {
                    self.unhandled(fresh.len() + left);
                    return None;
                }
            }
        }
        Some(fresh)
    }
}
