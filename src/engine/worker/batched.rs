//! Batch handlers ([`FreshConsumer::batched`](crate::FreshConsumer::batched)):
//! a partition's records in batches, in offset order, one batch at a time.
//! A batch is what the source holds ready, topped up for at most
//! `max_wait` after its first record while it is short of `max_records`.
//! A record the handler names as failed goes through `attempt.rs` on its
//! own; a whole batch whose attempts ran out is handled one record at a
//! time there.

use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use rdkafka::consumer::ConsumerContext;

use crate::handler::{BatchSettings, Handler};
use crate::metrics::instruments::AttemptError;
use crate::record::{EventTime, Record};
use crate::trace::{BatchTrace, Outcome};

use super::attempt::PriorFailure;
use super::outcome::{Retry, Returned};
use super::source::Source;
use super::task::{Done, FLUSH_EVERY, Worker};

impl<H: Handler> Worker<H> {
    /// Runs the batch handler over the partition's records until the
    /// worker stops.
    pub(super) async fn run_batched<C: ConsumerContext>(
        &self,
        src: &mut Source<'_, C>,
        batch: &BatchSettings,
    ) {
        let mut busy_start: Option<Instant> = None;
        // A retry-tier record that was not due when the previous batch
        // closed: the first of the next batch.
        let mut carry: Option<Record> = None;
        loop {
            let first = match carry.take().or_else(|| self.try_next(src)) {
                Some(r) => r,
                None => match self.next_after_idle(src, &mut busy_start).await {
                    Some(r) => r,
                    None => break,
                },
            };
            if self.state.stop.is_cancelled() || !self.wait_until_due(&first).await {
                // Taken, never handled: the next owner gets it.
                self.unhandled(1);
                break;
            }
            let Some(records) = self.collect(src, first, batch, &mut carry).await else {
                break;
            };
            // Stale records never reach the batch handler.
            let Some(records) = self.shed_from_batch(records).await else {
                break;
            };
            if records.is_empty() {
                continue;
            }
            if !self.wait_while_paused().await || !self.take_turn(records.len(), &mut None).await {
                self.unhandled(records.len());
                break;
            }
            busy_start.get_or_insert_with(Instant::now);
            match self.handle_batch(records, batch).await {
                Done::Completed { .. } => {}
                Done::Stopped | Done::Late | Done::Rewind => break,
            }
            if self.unflushed.load(Ordering::Relaxed) >= FLUSH_EVERY {
                self.flush_counts();
            }
        }
        if carry.take().is_some() {
            self.unhandled(1);
        }
        if let Some(start) = busy_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
    }

    /// Forms a batch starting with `first`: the records ready now, then,
    /// while fewer than `max_records`, those that arrive within `max_wait`
    /// of `first` being taken. A retry-tier record not due yet closes the
    /// batch and is left in `carry`. `None` when the worker stopped
    /// meanwhile (the records taken are counted as unassigned: the next
    /// owner gets them).
    async fn collect<C: ConsumerContext>(
        &self,
        src: &mut Source<'_, C>,
        first: Record,
        batch: &BatchSettings,
        carry: &mut Option<Record>,
    ) -> Option<Vec<Record>> {
        let max = batch.max_records;
        let mut records = Vec::with_capacity(max.min(64));
        records.push(first);
        // Records of a retry tier wait for their due times.
        let tier = self.engine.exhausted.tier_of(&self.state.topic).is_some();
        // `false`: the record is not due, so the batch closes.
        let mut admit = |records: &mut Vec<Record>, r: Record| -> bool {
            if tier
                && let Some(due) = self.due_ms_of(&r)
                && due > crate::record::unix_ms(SystemTime::now())
            {
                *carry = Some(r);
                return false;
            }
            records.push(r);
            true
        };
        let deadline = tokio::time::sleep(batch.max_wait);
        tokio::pin!(deadline);
        loop {
            while records.len() < max {
                match self.try_next(src) {
                    Some(r) => {
                        if !admit(&mut records, r) {
                            return Some(records);
                        }
                    }
                    None => break,
                }
            }
            if records.len() >= max {
                return Some(records);
            }
            tokio::select! {
                biased;
                _ = self.state.stop.cancelled() => {
                    self.unhandled(records.len());
                    return None;
                }
                () = &mut deadline => return Some(records),
                r = self.next(src) => match r {
                    Some(r) => {
                        if !admit(&mut records, r) {
                            return Some(records);
                        }
                    }
                    // The source ended: the batch is what it holds; the
                    // next take ends the worker.
                    None => return Some(records),
                },
            }
        }
    }

    /// Runs the batch handler on `records` until every record of it is
    /// done (succeeded, parked or given up), or the worker must stop
    /// (counted here: late completions and unassigned records).
    async fn handle_batch(&self, mut records: Vec<Record>, batch: &BatchSettings) -> Done {
        let retry = &self.engine.settings.retry;
        let exhausted = &self.engine.exhausted;
        let max_attempts = exhausted
            .attempts_in_place(&self.state.topic)
            .unwrap_or(retry.max_attempts);
        let mut attempt: u32 = 0;
        let mut trace = BatchTrace::new(self.state.trace.as_ref(), &records);
        loop {
            attempt += 1;
            let n = records.len();
            let span = trace.attempt(records[0].offset(), n, attempt);
            self.state.metrics.batch_handled(n);
            let started = Instant::now();
            let origin_ms = self.oldest_origin(&records);
            let result = self.call_batch(&span, batch, &records, origin_ms).await;
            let ended = Instant::now();
            let took = ended.saturating_duration_since(started);
            let (kind, error) = match result {
                Ok(Ok(())) => {
                    let returned = Returned {
                        took,
                        ended,
                        failed: None,
                    };
                    return self
                        .batch_returned(&records, returned, span)
                        .expect("a batch that succeeded is done");
                }
                Ok(Err(e)) => match e.failed_at() {
                    Some(i) if i < n => {
                        // The records before `i` succeeded; `i` failed.
                        let error = e.into_error();
                        let returned = Returned {
                            took,
                            ended,
                            failed: Some((i, &error)),
                        };
                        if let Some(done) = self.batch_returned(&records, returned, span) {
                            return done;
                        }
                        let rest = records.split_off(i + 1);
                        let failed = records.pop().expect("index i is in the batch");
                        tracing::debug!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            offset = failed.offset(),
                            succeeded = i,
                            after = rest.len(),
                            "batch handler failed at a record; the records before it completed, it is retried on its own"
                        );
                        let prior = PriorFailure {
                            kind: AttemptError::Handler,
                            error,
                        };
                        match self
                            .attempt_until_done(failed, None, Some(prior), false)
                            .await
                        {
                            Done::Completed { .. } => {}
                            Done::Stopped | Done::Rewind => {
                                self.unhandled(1 + rest.len());
                                return Done::Stopped;
                            }
                            Done::Late => {
                                self.unhandled(rest.len());
                                return Done::Late;
                            }
                        }
                        if rest.is_empty() {
                            return Done::Completed { succeeded_at: None };
                        }
                        // The rest, as a new batch with attempts of its own.
                        records = rest;
                        attempt = 0;
                        trace = BatchTrace::new(self.state.trace.as_ref(), &records);
                        continue;
                    }
                    Some(i) => {
                        tracing::warn!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            index = i,
                            records = n,
                            "batch handler named a failed record outside its batch; the whole batch counts as failed"
                        );
                        (AttemptError::Handler, e.into_error())
                    }
                    None => (AttemptError::Handler, e.into_error()),
                },
                Err(failure) => failure,
            };
            // The whole batch failed.
            let (permanent, error_type) = self.attempt_failed(kind, &error, Some(took), &span);
            if self.state.revoked.load(Ordering::Acquire) || self.state.stop.is_cancelled() {
                return self.stopped(span, n);
            }
            if !permanent && attempt < max_attempts {
                let delay = retry.delay(attempt);
                let step = Retry::Batch {
                    first_offset: records[0].offset(),
                    records: n,
                    attempt,
                };
                self.retrying(step, delay, error_type, &error, span);
                if !self.sleep(delay).await {
                    self.unhandled(n);
                    return Done::Stopped;
                }
                continue;
            }
            tracing::warn!(
                topic = %self.state.topic,
                partition = self.state.partition,
                first_offset = records[0].offset(),
                records = n,
                attempts = attempt,
                error.type = error_type,
                error = %error,
                "batch handler failed on every attempt; handling its records one at a time, each with the retry policy and the exhausted-record policy of its own"
            );
            span.end(Outcome::Retried);
            return self.one_at_a_time(records).await;
        }
    }

    /// Handles `records` one at a time (each a batch of one), each until
    /// it is done, in offset order.
    async fn one_at_a_time(&self, records: Vec<Record>) -> Done {
        let mut left = records.len();
        for record in records {
            left -= 1;
            match self.attempt_until_done(record, None, None, false).await {
                Done::Completed { .. } => {}
                Done::Stopped | Done::Rewind => {
                    self.unhandled(1 + left);
                    return Done::Stopped;
                }
                Done::Late => {
                    self.unhandled(left);
                    return Done::Late;
                }
            }
        }
        Done::Completed { succeeded_at: None }
    }

    /// The oldest origin time of `records` (what a batch's outputs carry);
    /// `None` without outputs, or when none has a usable time.
    fn oldest_origin(&self, records: &[Record]) -> Option<i64> {
        self.engine.outputs.as_ref()?;
        let tier = self.engine.exhausted.tier_of(&self.state.topic).is_some();
        let header = self.engine.settings.event_time_header.as_deref();
        records
            .iter()
            .filter_map(|r| {
                let event_time = if tier {
                    self.origin_and_event_time(r).1
                } else {
                    EventTime::of(header, r)
                };
                self.times(r, event_time).origin_ms
            })
            .min()
    }
}
