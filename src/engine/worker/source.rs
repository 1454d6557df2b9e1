//! Where a worker takes its partition's records from: the hand-over
//! channel from the poll loop, or the partition's own librdkafka queue,
//! read in batches once a record was taken; what the queue reports besides
//! records (an unreadable record batch, an offset out of range, transaction
//! markers passed without records), and the seeks that step past them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::StreamExt;
use rdkafka::consumer::ConsumerContext;
use tokio::sync::mpsc;

use crate::engine::partition::PartitionState;
use crate::engine::queue::{QueueHandle, READ_BATCH};
use crate::engine::shared::Ctrl;
use crate::engine::watchdog::IDLE_POLL_TICK;
use crate::handler::Handler;
use crate::record::Record;

use super::task::Worker;

/// A worker's seek is tried at most this many times while librdkafka drops
/// it as outdated (a newer operation on the partition, such as a
/// rebalance's pause or resume, was served first).
const SEEK_ATTEMPTS: u32 = 5;

/// Where a worker takes its partition's records from.
pub(super) enum Source<'a, C: ConsumerContext + 'static> {
    /// Handed over by the poll loop (the partition's queue could not be
    /// split).
    Channel(mpsc::Receiver<Record>),
    /// Read from the partition's own librdkafka queue: no hand-over, and
    /// librdkafka's per-partition queue is the buffer.
    Queue(SplitSource<'a, C>),
}

/// The unreadable record batch a worker is passing (see
/// [`Worker::unreadable`]).
#[derive(Debug, Default)]
pub(super) struct Unreadable {
    /// The first offset of the last batch counted.
    pub(super) batch: Option<i64>,
    /// The offset the worker last repositioned to past it, if it did.
    pub(super) target: Option<i64>,
}

/// A partition's own queue, as its worker reads it.
pub(super) struct SplitSource<'a, C: ConsumerContext + 'static> {
    /// Waits for the queue to fill (librdkafka's queue callback wakes the
    /// task); reads one message at a time when `handle` is `None`.
    pub(super) stream: rdkafka::consumer::MessageStream<'a, C>,
    /// Reads ready messages in batches, and the queue's length.
    pub(super) handle: Option<&'a QueueHandle>,
    /// Records read in a batch and not taken yet, in offset order.
    pub(super) ready: std::collections::VecDeque<Record>,
    /// Whether a record was taken: batches are read only from then on (see
    /// [`QueueHandle::read_batch`]).
    pub(super) started: bool,
    /// The unreadable record batch being passed (see
    /// [`Worker::unreadable`]), so that librdkafka's repeated reports of
    /// one record count once.
    pub(super) unreadable: Unreadable,
}

impl<C: ConsumerContext> SplitSource<'_, C> {
    /// The next record read in a batch, if any. Refreshes how many records
    /// wait in the queue: health's position estimate adds them, and a slow
    /// handler can take a while to get through a batch.
    pub(super) fn take_ready(&mut self, state: &PartitionState) -> Option<Record> {
        let r = self.ready.pop_front()?;
        if let Some(handle) = self.handle {
            state.waiting.store(handle.len(), Ordering::Relaxed);
        }
        Some(r)
    }
}

impl<H: Handler> Worker<H> {
    /// The next record that is ready now, if any.
    pub(super) fn try_next<C: ConsumerContext>(&self, src: &mut Source<'_, C>) -> Option<Record> {
        match src {
            Source::Channel(rx) => {
                let r = rx.try_recv().ok()?;
                self.resume_if_drained(rx);
                Some(r)
            }
            Source::Queue(q) => {
                if let Some(r) = q.take_ready(&self.state) {
                    return Some(r);
                }
                if self.state.stop.is_cancelled() {
                    return None;
                }
                // A poll that returns at once (`messaging.client.operation.duration`).
                let started = Instant::now();
                match q.handle {
                    Some(handle) if q.started => {
                        self.read_batch(handle, &mut q.ready, &mut q.unreadable);
                        let r = q.ready.pop_front()?;
                        self.state.metrics.polled(started.elapsed());
                        Some(r)
                    }
                    _ => loop {
                        let m = q.stream.next().now_or_never().flatten()?;
                        if let Some(r) = self.accept(m, q.handle, q.started, &mut q.unreadable) {
                            q.started = true;
                            self.state.metrics.polled(started.elapsed());
                            return Some(r);
                        }
                    },
                }
            }
        }
    }

    /// The worker went idle (nothing ready): adds its counts to the shared
    /// counters, ends the partition's busy period (`busy_start`, recorded
    /// as its batch duration), and waits for the next record. `None` when
    /// the worker is stopped or the source ended.
    pub(super) async fn next_after_idle<C: ConsumerContext>(
        &self,
        src: &mut Source<'_, C>,
        busy_start: &mut Option<Instant>,
    ) -> Option<Record> {
        self.flush_counts();
        if let Some(start) = busy_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
        tokio::select! {
            biased;
            _ = self.state.stop.cancelled() => None,
            r = self.next(src) => r,
        }
    }

    /// Waits for the next record. `None` when the source ended.
    /// Cancel-safe: a record is only taken when it is returned.
    pub(super) async fn next<C: ConsumerContext>(&self, src: &mut Source<'_, C>) -> Option<Record> {
        match src {
            Source::Channel(rx) => {
                let r = rx.recv().await?;
                self.resume_if_drained(rx);
                Some(r)
            }
            Source::Queue(q) => {
                if let Some(r) = q.take_ready(&self.state) {
                    return Some(r);
                }
                // A stopped worker (its partition revoked or lost, or the
                // run ending) never reads librdkafka's partition queue
                // again: the queue is the partition's, not the worker's,
                // and once the partition is assigned again it holds the
                // new assignment's records. Taken by the old worker they
                // were counted unassigned and never handled, and
                // librdkafka's position moved past them for the new
                // worker (192 records lost on three nodes, when a member
                // got its lost partitions back during a transactional
                // commit that then aborted and rewound the old workers).
                if self.state.stop.is_cancelled() {
                    return None;
                }
                // A poll (`messaging.client.operation.duration`): from here
                // to a record in hand, re-polled every `IDLE_POLL_TICK`
                // while the queue stays empty (an empty poll, not
                // recorded), as a client polling with a timeout would. The
                // re-poll also bounds any lost wake-up to a tick (one CI
                // run once left an error event unread for 15 s: likely the
                // wake-up an earlier worker's late queue drop turned off,
                // see `rewire_successor`, which now turns it back on).
                let mut started = Instant::now();
                loop {
                    if self.state.stop.is_cancelled() {
                        return None;
                    }
                    let polled = tokio::select! {
                        biased;
                        m = tokio::time::timeout(IDLE_POLL_TICK, q.stream.next()) => m,
                        _ = self.state.wake.notified() => {
                            if let Some(handle) = q.handle
                                && self.state.rewire.swap(false, Ordering::AcqRel)
                            {
                                handle.wake_on_records(&self.state.wake);
                            }
                            // An idle partition rewinds at once.
                            self.rewind_queue(q);
                            // Records may have arrived: poll again.
                            continue;
                        }
                    };
                    let m = match polled {
                        Ok(m) => m?,
                        Err(_empty) => {
                            if let Some(handle) = q.handle
                                && q.started
                            {
                                self.pass_markers(handle);
                            }
                            started = Instant::now();
                            continue;
                        }
                    };
                    if let Some(r) = self.accept(m, q.handle, q.started, &mut q.unreadable) {
                        q.started = true;
                        self.state.metrics.polled(started.elapsed());
                        return Some(r);
                    }
                    // An error event, or a record delivered before: that
                    // poll returned no record.
                    started = Instant::now();
                }
            }
        }
    }

    /// What the partition's own queue gave: a record is copied out, counted
    /// and tracked with its event time (what the poll loop's `stage` and
    /// `hand_over` do for a channel source); an error goes to
    /// `queue_error`. `None` for an error, and for a record at or below the
    /// last delivered offset (fetched again after the library restarted the
    /// partition).
    ///
    /// An unreadable record reported here (an idle worker reads one message
    /// at a time) comes without its offset (rust-rdkafka reports only the
    /// error code): once a record was taken (`started`) it is the next one,
    /// as the records before it in the queue were taken before it.
    pub(super) fn accept(
        &self,
        m: Result<rdkafka::message::BorrowedMessage<'_>, rdkafka::error::KafkaError>,
        handle: Option<&QueueHandle>,
        started: bool,
        noted: &mut Unreadable,
    ) -> Option<Record> {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                // A single poll does not move the position for an error.
                let next = self
                    .state
                    .tracker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .position();
                match (handle, is_unreadable(&e)) {
                    // rust-rdkafka reports no offset with the error: it is
                    // the next record to take (once one was taken), else
                    // the partition's start.
                    (Some(handle), true) => {
                        let at = if started {
                            next
                        } else {
                            self.start_offset(handle)
                        };
                        match at {
                            Some(at) => {
                                if let Some(target) = self.unreadable(at, next, noted) {
                                    self.reposition(handle, target);
                                }
                            }
                            None => {
                                self.queue_error(e);
                            }
                        }
                    }
                    _ => {
                        self.queue_error(e);
                    }
                }
                return None;
            }
        };
        let depth = handle;
        let record = Record::from_message(&self.state.topic, &m, self.engine.settings.read_headers);
        drop(m);
        if let Some(depth) = depth {
            self.state.waiting.store(depth.len(), Ordering::Relaxed);
        }
        self.unflushed_received.fetch_add(1, Ordering::Relaxed);
        let new = self
            .state
            .delivery(self.engine.settings.event_time_header.as_deref())
            .is_new(&record);
        new.then_some(record)
    }

    /// Reads the records ready in the partition's own queue, up to
    /// [`READ_BATCH`], into `ready`: copied out, counted and tracked with
    /// their event times under one lock (as `accept` does one by one). An
    /// error goes to `queue_error`; a record at or below the last delivered
    /// offset is skipped.
    pub(super) fn read_batch(
        &self,
        handle: &QueueHandle,
        ready: &mut std::collections::VecDeque<Record>,
        noted: &mut Unreadable,
    ) {
        let mut read: Vec<Record> = Vec::with_capacity(READ_BATCH);
        // Whether an error event moved librdkafka's position past the next
        // record (see `QueueHandle::read_batch`).
        let mut reposition = false;
        // The offset of a record librdkafka could not read, if any.
        let mut unreadable: Option<i64> = None;
        handle.read_batch(self.engine.settings.max_buffered_records, |m| {
            // SAFETY: a live message for the duration of this call.
            let (err, offset) = unsafe { ((*m).err, (*m).offset) };
            if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__BAD_MSG {
                // Its offset is the unreadable record's own (the first of
                // its record batch), not the fetch position.
                unreadable = unreadable.max(Some(offset));
            } else if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                // SAFETY: a live consumer message without error.
                let record = unsafe {
                    Record::from_native(&self.state.topic, m, self.engine.settings.read_headers)
                };
                read.push(record);
            } else {
                // As rust-rdkafka reports it for a `BorrowedMessage` (no
                // partition EOF: `enable.partition.eof` is refused).
                let handled_elsewhere =
                    self.queue_error(rdkafka::error::KafkaError::MessageConsumption(err.into()));
                reposition |= !handled_elsewhere;
            }
        });
        self.unflushed_received
            .fetch_add(read.len() as u64, Ordering::Relaxed);
        let mut delivery = self
            .state
            .delivery(self.engine.settings.event_time_header.as_deref());
        for record in read {
            if delivery.is_new(&record) {
                ready.push_back(record);
            }
        }
        // Under the tracker's lock, as health reads them: the position
        // moved past the records taken, and those left wait in the queue.
        self.state.waiting.store(handle.len(), Ordering::Relaxed);
        // The next record to take (known: the batch path runs only once a
        // record was taken).
        let next = delivery.position();
        drop(delivery);
        let mut target = if reposition { next } else { None };
        if let Some(u) = unreadable
            && let Some(past) = self.unreadable(u, next, noted)
        {
            target = Some(past);
        }
        // At once, before the next read: records fetched from the wrong
        // position can then never be taken (the seek's new version makes
        // them outdated).
        if let Some(offset) = target {
            self.reposition(handle, offset);
        }
    }

    /// A record batch librdkafka cannot read (it failed the CRC check of
    /// `check.crcs`) reported at offset `u` (the batch's first offset), with
    /// `next` the next offset the worker takes (`None` before the first
    /// record). Its records cannot be handled and are never delivered.
    /// Counted and logged once per batch; returns the offset to reposition
    /// to (else `None`).
    ///
    /// librdkafka 2.12.1 does not skip a v2 batch that fails the check (its
    /// reader takes the batch's length for an absolute position), and a
    /// fetch from any offset inside the batch returns the whole batch: so
    /// the worker steps past it one offset at a time. The first step goes
    /// to `u + 1`; each report of the same batch after a step (nothing
    /// taken since: the fetch at the step's offset hit the batch again)
    /// steps one further, until a fetch lands past the batch's end. Each
    /// step is one seek and one fetch; a report that comes after records
    /// past the batch were taken is stale and ignored.
    pub(super) fn unreadable(
        &self,
        u: i64,
        next: Option<i64>,
        skip: &mut Unreadable,
    ) -> Option<i64> {
        if let Some(batch) = skip.batch
            && u <= batch
        {
            return match skip.target {
                Some(t) if next.is_none_or(|n| n <= t) => {
                    tracing::debug!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        batch,
                        offset = t,
                        "offset inside the unreadable record batch; stepping past it"
                    );
                    skip.target = Some(t + 1);
                    skip.target
                }
                _ => {
                    tracing::debug!(
                        topic = %self.state.topic,
                        partition = self.state.partition,
                        offset = u,
                        "unreadable record batch reported again"
                    );
                    None
                }
            };
        }
        skip.batch = Some(u);
        self.engine
            .counters
            .unreadable
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            topic = %self.state.topic,
            partition = self.state.partition,
            offset = u,
            "record cannot be read (its record batch failed librdkafka's CRC check); the batch is skipped and committed past: it is lost to this consumer group"
        );
        // Past it already when the worker took a record after it.
        skip.target = next.is_none_or(|n| u >= n).then_some(u + 1);
        skip.target
    }

    /// Where the partition's records start when none was taken yet: the
    /// offset it was assigned (or restarted) at, or for a logical start the
    /// log start or end offset librdkafka last saw (cached from fetch
    /// responses, no request). `None` when unknown.
    pub(super) fn start_offset(&self, handle: &QueueHandle) -> Option<i64> {
        match self.state.health.start() {
            rdkafka::Offset::Offset(o) if o >= 0 => Some(o),
            rdkafka::Offset::Beginning => handle.cached_watermarks().map(|(lo, _)| lo),
            rdkafka::Offset::End => handle.cached_watermarks().map(|(_, hi)| hi),
            _ => None,
        }
    }

    /// Called when the partition's queue stayed empty for a tick: when
    /// every record taken completed and librdkafka's position is past them,
    /// the offsets in between hold transaction markers (or, under
    /// `read_committed`, records of aborted transactions), which no consumer
    /// receives. The committable offset moves to the position, so an idle
    /// partition of a transactional topic commits at its end (lag 0) as the
    /// Java consumer's position-based commit does, instead of one below it
    /// for ever (a stall). Not while a reposition is unconfirmed.
    pub(super) fn pass_markers(&self, handle: &QueueHandle) {
        if self.position_doubtful.load(Ordering::Relaxed)
            || self.state.revoked.load(Ordering::Acquire)
            || handle.len() > 0
        {
            return;
        }
        let Some(position) = handle.position() else {
            return;
        };
        let passed = {
            let mut tracker = self.state.tracker.lock().unwrap_or_else(|e| e.into_inner());
            tracker.pass_to(position)
        };
        if passed {
            tracing::debug!(
                topic = %self.state.topic,
                partition = self.state.partition,
                position,
                "passed offsets without records (transaction markers)"
            );
            self.state.queue_commit(&self.engine.committer.queue);
        }
    }

    /// Transactional outputs: after a transaction the partition wrote
    /// into was aborted ([`PartitionState::rewind`]), seeks the partition
    /// back to its last committed offset (before this member committed:
    /// the first offset it took) and forgets the records taken since, so
    /// they are read and handled again. Nothing happens without a pending
    /// rewind. A partition without its own queue handle cannot be sought:
    /// the run stops (never committing past the aborted records).
    pub(super) fn rewind<C: ConsumerContext>(&self, src: &mut Source<'_, C>) {
        match src {
            Source::Queue(q) => self.rewind_queue(q),
            Source::Channel(_) => self.rewind_at(None),
        }
    }

    /// [`Self::rewind`] on the partition's own queue.
    pub(super) fn rewind_queue<C: ConsumerContext>(&self, q: &mut SplitSource<'_, C>) {
        if self.state.rewind.load(Ordering::Acquire) {
            q.ready.clear();
            self.rewind_at(q.handle);
        }
    }

    fn rewind_at(&self, handle: Option<&QueueHandle>) {
        if !self.state.rewind.load(Ordering::Acquire) {
            return;
        }
        let committed = self.state.committed.load(Ordering::Acquire);
        let target = self
            .state
            .tracker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rewind_target((committed != crate::engine::partition::NO_OFFSET).then_some(committed));
        match (target, handle) {
            // Nothing taken yet: nothing to take again.
            (None, _) => {}
            (Some(offset), Some(handle)) => {
                // First: once the seek is served, records fetched before it
                // are outdated and never read.
                self.reposition(handle, offset);
                self.state
                    .tracker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .rewind_to(offset);
                tracing::info!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset,
                    "rewound after an aborted transaction; the records from here on are handled again"
                );
            }
            (Some(offset), None) => {
                tracing::error!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    offset,
                    "an aborted transaction must rewind a partition whose queue could not be split: stopping the consumer (nothing past the aborted records is committed)"
                );
                if let Some(tx) = &self.engine.transactions {
                    tx.stop(rdkafka::error::KafkaError::Seek(format!(
                        "cannot rewind {}:{} to {offset}",
                        self.state.topic, self.state.partition
                    )));
                }
                return;
            }
        }
        self.state.rewind.store(false, Ordering::Release);
    }

    /// Seeks the partition to `offset`, the next record the worker takes,
    /// and makes sure librdkafka served the seek: a seek that librdkafka
    /// dropped as outdated (a rebalance's pause or resume, called in the
    /// same instant, got a newer version and was served first) is sent
    /// again, up to [`SEEK_ATTEMPTS`] times. Under
    /// [`Assignment::seeking`](crate::engine::assignment::Assignment::seeking),
    /// so that the seek never makes librdkafka drop a rebalance's resume.
    /// Not once the partition is stopping (revoked, lost or shutting down):
    /// it may already be someone else's, or this member's again with a new
    /// position. Blocks the task's thread (in `block_in_place` on a
    /// multi-thread runtime) until librdkafka answered: normally well
    /// under a millisecond, at most [`SEEK_TIMEOUT`] per attempt.
    pub(super) fn reposition(&self, handle: &QueueHandle, offset: i64) {
        use rdkafka::types::RDKafkaRespErr as E;
        let stopping =
            || self.state.stop.is_cancelled() || self.state.revoked.load(Ordering::Acquire);
        self.position_doubtful.store(true, Ordering::Relaxed);
        let seek = || {
            for attempt in 1..=SEEK_ATTEMPTS {
                if stopping() {
                    return;
                }
                let result = {
                    let _seeking = self.engine.assignment.seeking();
                    handle.seek(offset)
                };
                match result {
                    Ok(()) => {
                        self.position_doubtful.store(false, Ordering::Relaxed);
                        return;
                    }
                    Err((E::RD_KAFKA_RESP_ERR__OUTDATED, _)) => {
                        tracing::info!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            offset,
                            attempt,
                            "repositioning seek dropped by librdkafka as outdated (a newer operation on the partition, such as a rebalance's pause or resume, was served first); seeking again"
                        );
                    }
                    Err((
                        E::RD_KAFKA_RESP_ERR__STATE
                        | E::RD_KAFKA_RESP_ERR__PREV_IN_PROGRESS
                        | E::RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                        | E::RD_KAFKA_RESP_ERR__DESTROY,
                        reason,
                    )) => {
                        tracing::debug!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            %reason,
                            "repositioning seek not served: the partition is not fetching (stopping or restarting)"
                        );
                        return;
                    }
                    Err((_, reason)) => {
                        tracing::warn!(
                            topic = %self.state.topic,
                            partition = self.state.partition,
                            offset,
                            %reason,
                            "repositioning the partition failed"
                        );
                        return;
                    }
                }
            }
            tracing::warn!(
                topic = %self.state.topic,
                partition = self.state.partition,
                offset,
                attempts = SEEK_ATTEMPTS,
                "repositioning seek dropped as outdated every time; left to librdkafka"
            );
        };
        if stopping() {
            return;
        }
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(seek),
            _ => seek(),
        }
    }

    /// An error on the partition's own queue (librdkafka puts a partition's
    /// consume errors there, not on the main queue). `true` when the
    /// library restarts the partition's fetch for it anyway (an offset out
    /// of range).
    pub(super) fn queue_error(&self, e: rdkafka::error::KafkaError) -> bool {
        use rdkafka::error::RDKafkaErrorCode;
        match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::AutoOffsetReset) => {
                // As in the poll loop: librdkafka stopped the partition's
                // fetcher; the health thread decides and restarts it.
                tracing::debug!(error = %e, "offset out of range; handled by the library");
                self.engine.resets.offset_reset_error();
                true
            }
            _ => {
                tracing::warn!(
                    topic = %self.state.topic,
                    partition = self.state.partition,
                    error = %e,
                    "consume error"
                );
                false
            }
        }
    }

    /// Asks the poll loop to refill and resume the partition when it paused
    /// it and the buffer has drained to half. Called as a record is taken.
    pub(super) fn resume_if_drained(&self, rx: &mpsc::Receiver<Record>) {
        // Pairs with the fence in the poll loop's `request_resume`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.state.wants_resume.load(Ordering::Acquire)
            && rx.len() <= self.engine.settings.max_buffered_records / 2
            && self.state.wants_resume.swap(false, Ordering::AcqRel)
        {
            let _ = self
                .engine
                .ctrl_tx
                .send(Ctrl::Drained(Arc::clone(&self.state)));
        }
    }
}

/// Whether a consume error reports a record librdkafka could not read
/// (`__BAD_MSG`: its record batch failed the CRC check).
fn is_unreadable(e: &rdkafka::error::KafkaError) -> bool {
    e.rdkafka_error_code() == Some(rdkafka::error::RDKafkaErrorCode::BadMessage)
}
