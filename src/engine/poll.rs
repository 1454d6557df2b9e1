//! The poll loop: polls librdkafka's main queue (rebalances, errors, and
//! the records of partitions whose queue could not be split), hands records
//! to the partition workers in batches, pauses full partitions, and runs the
//! bounded shutdown.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::engine::commit::CommitCmd;
use crate::engine::context::Ctx;
use crate::engine::context::Kafka;
use crate::engine::partition::PartitionState;
use crate::engine::shared::{Ctrl, Engine};
use crate::handler::Handler;
use crate::record::Record;
use crate::summary::RunSummary;

/// How long the poll loop waits for room in a full partition buffer before
/// it pauses the partition (see
/// [`max_buffered_records`](crate::FreshConsumer::max_buffered_records)).
/// A worker that keeps up frees a slot in microseconds.
const FULL_BUFFER_WAIT: Duration = Duration::from_millis(1);

/// After a wait for room timed out, the partition's worker is slow: for this
/// long its full buffer pauses it at once, so a slow partition cannot hold
/// the poll loop (and the other partitions) to its pace.
const SLOW_PARTITION_HOLD: Duration = Duration::from_secs(1);

/// Why the poll loop ended.
pub(crate) enum Stop {
    Signal,
    Fatal(KafkaError),
}

/// The poll loop's view of one assigned partition.
struct Slot {
    state: Arc<PartitionState>,
    /// Records taken from librdkafka in the current drain, not yet handed
    /// to the worker.
    staged: Vec<Record>,
    /// Records fetched while the worker's buffer was full (the partition is
    /// paused meanwhile, or about to be); handed over in order before
    /// anything newer.
    overflow: VecDeque<Record>,
    /// Why the partition is paused, if it is.
    pauses: Pauses,
    /// Until when a full buffer pauses the partition without waiting.
    slow_until: Option<Instant>,
}

/// The assigned partitions by topic, then partition number. A handful of
/// topics at most: a scan comparing names beats hashing each record's topic.
type Slots = Vec<(Arc<str>, Vec<Option<Slot>>)>;

/// The slot of `topic`/`partition`, if assigned.
fn slot_mut<'a>(slots: &'a mut Slots, topic: &str, partition: i32) -> Option<&'a mut Slot> {
    slots
        .iter_mut()
        .find(|(t, _)| &**t == topic)
        .and_then(|(_, v)| v.get_mut(usize::try_from(partition).ok()?))
        .and_then(Option::as_mut)
}

/// The poll loop's slot of `state`, if it is still assigned.
fn slot_of<'a>(slots: &'a mut Slots, state: &Arc<PartitionState>) -> Option<&'a mut Slot> {
    slot_mut(slots, &state.topic, state.partition).filter(|s| Arc::ptr_eq(&s.state, state))
}

/// At most this many records are taken from librdkafka's queue per wake of
/// the poll loop before they are handed to the workers. Handing records over
/// in batches wakes each worker once per batch instead of once per record,
/// and takes each partition's tracker lock once per batch.
const MAX_DRAIN: usize = 256;

pub(crate) struct PollLoop<H: Handler> {
    consumer: Arc<Kafka<H>>,
    engine: Arc<Engine>,
    ctrl_rx: mpsc::UnboundedReceiver<Ctrl>,
    tick: Duration,
    /// Topic -> partition -> slot, refreshed when the assignment changes.
    slots: Slots,
    slots_epoch: u64,
    /// Partitions with staged records, in the order they were first staged.
    staged: Vec<Arc<PartitionState>>,
    /// Records received in the current drain (added to the shared counter
    /// once per drain).
    received: u64,
}

impl<H: Handler> PollLoop<H> {
    pub(crate) fn new(
        consumer: Arc<Kafka<H>>,
        engine: Arc<Engine>,
        ctrl_rx: mpsc::UnboundedReceiver<Ctrl>,
        tick: Duration,
    ) -> Self {
        PollLoop {
            consumer,
            engine,
            ctrl_rx,
            tick,
            slots: Vec::new(),
            slots_epoch: u64::MAX,
            staged: Vec::new(),
            received: 0,
        }
    }

    pub(crate) async fn poll_loop(&mut self) -> Stop {
        let stop = self.engine.shutdown.clone();
        self.engine.poll_clock.polled(&self.engine.instruments);
        let consumer = Arc::clone(&self.consumer);
        let engine = Arc::clone(&self.engine);
        let tick = self.tick;
        // One stream for the whole loop: `recv()` would register and remove
        // a waker slot (a lock) per record.
        let mut stream = consumer.stream();
        loop {
            // A poll (`messaging.client.operation.duration`) starts with the
            // wait; an idle tick or a control message ends it empty.
            let poll_started = Instant::now();
            let event = tokio::select! {
                biased;
                () = stop.cancelled() => return Stop::Signal,
                Some(ctrl) = self.ctrl_rx.recv() => Err(ctrl),
                // Every poll of the stream polls librdkafka's main queue
                // (rebalance events, errors, and the records of partitions
                // whose queue could not be split): each one ends a gap.
                r = tokio::time::timeout(tick, std::future::poll_fn(|cx| {
                    engine.poll_clock.polled(&engine.instruments);
                    stream.poll_next_unpin(cx)
                })) => Ok(r),
            };
            let first = match event {
                Err(Ctrl::Drained(state)) => {
                    self.refill(&state);
                    continue;
                }
                Err(Ctrl::Hold(state, hold)) => {
                    self.hold(&state, hold);
                    continue;
                }
                // Idle tick (or the stream's end, which rdkafka never reports).
                Ok(Err(_)) | Ok(Ok(None)) => continue,
                Ok(Ok(Some(r))) => r,
            };
            // Take what librdkafka has ready (up to MAX_DRAIN records)
            // without waiting, then hand it over.
            let mut next = Some(first);
            let mut error = None;
            let mut taken = 0;
            let mut records = 0;
            while let Some(r) = next.take() {
                match r {
                    Ok(message) => {
                        // Rebalance callbacks run inside the poll: refresh first.
                        self.refresh_slots();
                        self.stage(message);
                        records += 1;
                    }
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
                taken += 1;
                if taken == MAX_DRAIN {
                    break;
                }
                next = stream.next().now_or_never().flatten();
            }
            if records > 0 {
                self.engine.instruments.polled(poll_started.elapsed());
            }
            self.hand_over().await;
            if let Some(e) = error
                && let Some(fatal) = self.on_error(e)
            {
                return Stop::Fatal(fatal);
            }
        }
    }

    /// Takes one fetched record into its partition's staging batch.
    fn stage(&mut self, message: BorrowedMessage<'_>) {
        self.received += 1;
        let Some(slot) = slot_mut(&mut self.slots, message.topic(), message.partition()) else {
            // Fetched before a revoke: not ours any more, never committed by us.
            self.engine.counters.unassigned(1);
            return;
        };
        let record = Record::from_message(
            &slot.state.topic,
            &message,
            self.engine.settings.read_headers,
        );
        drop(message);
        if slot.staged.is_empty() {
            self.staged.push(Arc::clone(&slot.state));
        }
        slot.staged.push(record);
    }

    /// Hands the staged records to their workers: per partition, one tracker
    /// lock and one burst of sends. A partition whose buffer filled keeps the
    /// rest in its overflow and gets a short wait for room (then a pause).
    async fn hand_over(&mut self) {
        let received = std::mem::take(&mut self.received);
        self.engine
            .counters
            .received
            .fetch_add(received, Ordering::Relaxed);
        let mut full = Vec::new();
        for state in std::mem::take(&mut self.staged) {
            let Some(slot) = slot_of(&mut self.slots, &state) else {
                continue;
            };
            let mut batch = std::mem::take(&mut slot.staged);
            state.metrics.consumed(batch.len() as u64);
            {
                let mut delivery =
                    state.delivery(self.engine.settings.event_time_header.as_deref());
                batch.retain(|r| delivery.is_new(r));
            }
            let mut closed = 0u64;
            for record in batch.drain(..) {
                if !slot.overflow.is_empty() {
                    slot.overflow.push_back(record);
                    continue;
                }
                match state.tx.try_send(record) {
                    Ok(()) => {}
                    Err(TrySendError::Full(record)) => slot.overflow.push_back(record),
                    Err(TrySendError::Closed(_)) => closed += 1,
                }
            }
            // Keep the staging buffer's allocation for the next drain.
            slot.staged = batch;
            if closed > 0 {
                self.engine.counters.unassigned(closed);
                if !state.stop.is_cancelled() {
                    // A worker reading its split queue dropped this channel:
                    // librdkafka should never deliver that partition's
                    // records here. They are tracked, never completed, so
                    // the partition's commit holds below them (a stall the
                    // partition health shows, never a lost record).
                    tracing::error!(
                        topic = %state.topic,
                        partition = state.partition,
                        records = closed,
                        "records of a partition read from its own queue arrived on the main queue; its commits hold below them"
                    );
                }
            }
            if !slot.overflow.is_empty() && !slot.pauses.full {
                full.push(state);
            }
        }
        for state in full {
            self.wait_for_room(&state).await;
        }
    }

    /// A partition's buffer is full and records wait in its overflow: hand
    /// them over as room appears, and pause the partition only when no room
    /// appeared for [`FULL_BUFFER_WAIT`] (a worker that keeps up frees a slot
    /// in microseconds; the poll loop then runs at its pace). Pausing is not
    /// free: librdkafka drops the partition's prefetched records and fetches
    /// them again after the resume.
    async fn wait_for_room(&mut self, state: &Arc<PartitionState>) {
        let Some(slot) = slot_of(&mut self.slots, state) else {
            return;
        };
        let slow = slot.slow_until.is_some_and(|until| Instant::now() < until);
        let wait = if slow {
            Duration::ZERO
        } else {
            FULL_BUFFER_WAIT
        };
        loop {
            while let Some(record) = slot.overflow.pop_front() {
                match state.tx.try_send(record) {
                    Ok(()) => {}
                    Err(TrySendError::Full(record)) => {
                        slot.overflow.push_front(record);
                        break;
                    }
                    Err(TrySendError::Closed(_)) => {
                        let n = slot.overflow.len() as u64 + 1;
                        slot.overflow.clear();
                        self.engine.counters.unassigned(n);
                        return;
                    }
                }
            }
            if slot.overflow.is_empty() {
                return;
            }
            match tokio::time::timeout(wait, state.tx.reserve()).await {
                Ok(Ok(permit)) => {
                    if let Some(record) = slot.overflow.pop_front() {
                        permit.send(record);
                    }
                }
                // Closed: the next try_send counts the rest as unassigned.
                Ok(Err(_closed)) => {}
                Err(_elapsed) => break,
            }
        }
        if !slow {
            slot.slow_until = Some(Instant::now() + SLOW_PARTITION_HOLD);
        }
        if slot.pauses.set(Pause::Full, true) == Change::Pause
            && let Err(e) = self.consumer.pause(&single(state))
        {
            tracing::warn!(error = %e, "pausing a full partition failed");
        }
        request_resume(&self.engine, state);
    }

    fn on_error(&mut self, e: KafkaError) -> Option<KafkaError> {
        match e.rdkafka_error_code() {
            Some(RDKafkaErrorCode::AutoOffsetReset) => {
                // An offset out of range (librdkafka runs with
                // auto.offset.reset=error): librdkafka stopped that
                // partition's fetcher, the health thread decides and
                // restarts it (see `crate::engine::offset_reset`).
                tracing::debug!(error = %e, "offset out of range; handled by the library");
                self.engine.resets.offset_reset_error();
                None
            }
            Some(RDKafkaErrorCode::PollExceeded) => {
                self.engine.instruments.poll_exceeded();
                tracing::error!(
                    "max.poll.interval.ms exceeded: librdkafka left the group and the assignment is lost; it rejoins on the next poll"
                );
                None
            }
            _ => {
                if let Some((code, reason)) = self.consumer.client().fatal_error() {
                    tracing::error!(?code, %reason, "fatal librdkafka error; shutting down");
                    return Some(e);
                }
                tracing::warn!(error = %e, "consume error");
                None
            }
        }
    }

    fn refresh_slots(&mut self) {
        let epoch = self.engine.assignment.epoch.load(Ordering::Acquire);
        if epoch == self.slots_epoch {
            return;
        }
        self.slots_epoch = epoch;
        let mut old = std::mem::take(&mut self.slots);
        for ((topic, partition), state) in self.engine.assignment.partitions().iter() {
            let p = *partition as usize;
            let kept = old
                .iter_mut()
                .find(|(t, _)| t == topic)
                .and_then(|(_, v)| v.get_mut(p))
                .filter(|s| s.as_ref().is_some_and(|s| Arc::ptr_eq(&s.state, state)))
                .and_then(Option::take);
            let slot = kept.unwrap_or_else(|| Slot {
                slow_until: None,
                state: Arc::clone(state),
                staged: Vec::new(),
                overflow: VecDeque::new(),
                pauses: Pauses::default(),
            });
            let i = match self.slots.iter().position(|(t, _)| t == topic) {
                Some(i) => i,
                None => {
                    self.slots.push((Arc::clone(topic), Vec::new()));
                    self.slots.len() - 1
                }
            };
            let v = &mut self.slots[i].1;
            if v.len() <= p {
                v.resize_with(p + 1, || None);
            }
            v[p] = Some(slot);
        }
        // Records staged for a partition that is no longer ours were never
        // delivered: they are not tracked, so never committed by us.
        let dropped: usize = old
            .iter()
            .flat_map(|(_, v)| v.iter().flatten())
            .map(|s| s.staged.len() + s.overflow.len())
            .sum();
        if dropped > 0 {
            self.engine.counters.unassigned(dropped as u64);
        }
    }

    /// A paused partition's worker drained to half: hand over the overflow
    /// and resume fetching once it is empty.
    fn refill(&mut self, state: &Arc<PartitionState>) {
        self.refresh_slots();
        let Some(slot) = slot_of(&mut self.slots, state) else {
            return;
        };
        while let Some(r) = slot.overflow.pop_front() {
            match slot.state.tx.try_send(r) {
                Ok(()) => {}
                Err(TrySendError::Full(r)) => {
                    slot.overflow.push_front(r);
                    request_resume(&self.engine, &slot.state);
                    return;
                }
                Err(TrySendError::Closed(_)) => {
                    let n = slot.overflow.len() as u64 + 1;
                    slot.overflow.clear();
                    self.engine.counters.unassigned(n);
                    return;
                }
            }
        }
        // The buffer no longer holds the partition paused; a retry-tier
        // hold may still (its end resumes it then).
        if slot.pauses.set(Pause::Full, false) == Change::Resume {
            match self.consumer.resume(&single(&slot.state)) {
                Ok(()) => restart_fetch(&*self.consumer, &slot.state),
                Err(e) => tracing::warn!(error = %e, "resuming a drained partition failed"),
            }
        }
    }

    /// Pauses a retry-tier partition while its worker waits for a record's
    /// due time (`hold`), and resumes it once the record is due (unless its
    /// full buffer keeps it paused: the drain resumes it then). Pausing
    /// stops the fetch (librdkafka drops what it prefetched and fetches
    /// again from the position after the resume), so a waiting tier holds
    /// no more than what its worker already took.
    fn hold(&mut self, state: &Arc<PartitionState>, hold: bool) {
        self.refresh_slots();
        let Some(slot) = slot_of(&mut self.slots, state) else {
            return;
        };
        match slot.pauses.set(Pause::Held, hold) {
            Change::Pause => {
                if let Err(e) = self.consumer.pause(&single(&slot.state)) {
                    tracing::warn!(error = %e, "pausing a retry-tier partition failed");
                }
            }
            Change::Resume => match self.consumer.resume(&single(&slot.state)) {
                Ok(()) => restart_fetch(&*self.consumer, &slot.state),
                Err(e) => tracing::warn!(error = %e, "resuming a retry-tier partition failed"),
            },
            Change::None => {}
        }
    }

    pub(crate) async fn shutdown(
        self,
        timeout: Duration,
        committer: std::thread::JoinHandle<()>,
        provider: Option<&opentelemetry_sdk::metrics::SdkMeterProvider>,
    ) -> RunSummary {
        let started = Instant::now();
        let deadline = started + timeout;
        // Records the poll loop still holds for a worker in a full
        // buffer's overflow (received, tracked, never handed over) are
        // never handled by this member. (Staging is handed over before the
        // loop returns.)
        let held: usize = self
            .slots
            .iter()
            .flat_map(|(_, v)| v.iter().flatten())
            .map(|s| s.overflow.len())
            .sum();
        if held > 0 {
            self.engine.counters.unassigned(held as u64);
        }
        self.engine.poll_clock.suspend();
        self.engine.shutdown.cancel();
        let mut timed_out = false;
        // 1. Handlers that are running finish (up to half the budget).
        let states = self.engine.assignment.assigned();
        let handlers_deadline = started + timeout / 2;
        let wait = {
            let states = states.clone();
            tokio::task::spawn_blocking(move || {
                states
                    .iter()
                    .filter(|s| !s.wait_stopped_blocking(handlers_deadline))
                    .count()
            })
        };
        let still_running = wait.await.unwrap_or(states.len());
        if still_running > 0 {
            timed_out = true;
            tracing::warn!(
                still_running,
                "shutdown: handlers still running at the deadline; their records stay uncommitted"
            );
        }
        // 2. Commit completed work synchronously.
        let (reply, rx) = std::sync::mpsc::channel();
        let cmd = CommitCmd::Sync { only: None, reply };
        if self.engine.committer.send(cmd).is_ok() {
            let budget = deadline
                .saturating_duration_since(Instant::now())
                .mul_f64(0.5);
            let r = tokio::task::spawn_blocking(move || rx.recv_timeout(budget)).await;
            match r {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(error = %e, "shutdown: final commit failed; uncommitted records will be redelivered");
                }
                _ => {
                    timed_out = true;
                    tracing::warn!(
                        "shutdown: final commit did not finish in time; uncommitted records will be redelivered"
                    );
                }
            }
        }
        // Nothing is committed after this point; a revoke during close is a no-op.
        self.engine
            .assignment
            .closing
            .store(true, Ordering::Release);
        self.engine
            .assignment
            .remove(&states, Duration::from_millis(100));
        let _ = self.engine.committer.send(CommitCmd::Stop);
        // 3. Leave the group (closing blocks, so it runs on a thread of its
        // own) while the metrics are flushed, so a silent collector cannot
        // delay the group leave and the other members' rebalance.
        let summary = self.engine.counters.summary();
        let consumer = self.consumer;
        drop(self.slots);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let closer = std::thread::Builder::new()
            .name("fresh-close".into())
            .spawn(move || {
                let _ = committer.join();
                drop(consumer);
                let _ = done_tx.send(());
            });
        // 4. Flush metrics so the last interval is not lost.
        if let Some(provider) = provider {
            let budget = deadline.saturating_duration_since(Instant::now());
            if !crate::metrics::flush::flush(provider, budget).await {
                timed_out = true;
            }
        }
        if closer.is_ok() {
            let budget = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(budget, done_rx).await.is_err() {
                timed_out = true;
                tracing::warn!(
                    "shutdown: leaving the group did not finish in time (broker unreachable?); returning anyway"
                );
            }
        }
        RunSummary {
            shutdown_timed_out: timed_out,
            ..summary
        }
    }
}

/// Makes librdkafka fetch a just-resumed partition now. A resume does not
/// wake the broker thread: when the resumed partition was the only one that
/// broker thread had to fetch, it idles on I/O for up to a second first
/// (measured: ~0.9 s stalls of a hot partition after each resume). A seek
/// to the partition's current position (where the resume fetches from
/// anyway) starts the fetcher, which wakes the broker thread. Asynchronous:
/// a seek that fails leaves the plain resume in place.
///
/// Not under a lock with a worker's repositioning seek (which could then
/// be overridden by this position): the partition was paused, so no fetch
/// is in flight whose error event the worker could read and seek back
/// for before this seek, a few instructions after the resume.
fn restart_fetch<C: Consumer<Ctx<H>>, H: Handler>(consumer: &C, state: &PartitionState) {
    let position = consumer.position().ok().and_then(|tpl| {
        tpl.find_partition(&state.topic, state.partition)
            .map(|e| e.offset())
    });
    if let Some(offset @ Offset::Offset(_)) = position
        && let Err(e) = consumer.seek(&state.topic, state.partition, offset, Duration::ZERO)
    {
        tracing::debug!(error = %e, "restarting the fetch of a resumed partition failed");
    }
}

fn single(state: &PartitionState) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::with_capacity(1);
    tpl.add_partition(&state.topic, state.partition);
    tpl
}

/// Asks for a [`Ctrl::Drained`] once the partition's buffer has drained to
/// half. The worker checks `wants_resume` only when it takes a record, so a
/// worker that emptied its buffer before the flag was raised (for example
/// during the synchronous `pause` call) would never ask, and the partition
/// would stay paused with its overflow stuck: check the buffer again after
/// raising the flag, and ask on the worker's behalf. The fences pair with the
/// worker's (store flag / read buffer here, take record / read flag there).
fn request_resume(engine: &Engine, state: &Arc<PartitionState>) {
    state.wants_resume.store(true, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
    let buffered = state.tx.max_capacity() - state.tx.capacity();
    if buffered <= engine.settings.max_buffered_records / 2
        && state.wants_resume.swap(false, Ordering::SeqCst)
    {
        let _ = engine.ctrl_tx.send(Ctrl::Drained(Arc::clone(state)));
    }
}

/// Why the poll loop holds a partition paused in librdkafka: its worker's
/// buffer is full and records wait in the overflow ([`Pause::Full`]), or
/// its worker waits for a retry-tier record's due time ([`Pause::Held`]).
/// The partition is paused while either reason holds and resumed when the
/// last one clears, whichever clears last (a resume that each side left to
/// the other once kept a tier paused for good: the buffer drained during
/// the hold, and the hold's end then saw the buffer's pause still set).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pauses {
    full: bool,
    held: bool,
}

/// A reason in [`Pauses`].
#[derive(Debug, Clone, Copy)]
enum Pause {
    Full,
    Held,
}

/// What to do in librdkafka after [`Pauses::set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Pause,
    Resume,
    None,
}

impl Pauses {
    fn paused(self) -> bool {
        self.full || self.held
    }

    /// Sets or clears `reason`: [`Change::Pause`] when the partition was
    /// running and is paused now, [`Change::Resume`] when the last reason
    /// cleared, [`Change::None`] otherwise.
    fn set(&mut self, reason: Pause, on: bool) -> Change {
        let before = self.paused();
        match reason {
            Pause::Full => self.full = on,
            Pause::Held => self.held = on,
        }
        match (before, self.paused()) {
            (false, true) => Change::Pause,
            (true, false) => Change::Resume,
            _ => Change::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Change, Pause, Pauses};

    /// The sequence of the lost resume: the buffer fills during a hold,
    /// drains before the hold ends; the hold's end resumes.
    #[test]
    fn the_last_reason_to_clear_resumes() {
        let mut p = Pauses::default();
        assert_eq!(p.set(Pause::Held, true), Change::Pause);
        assert_eq!(p.set(Pause::Full, true), Change::None);
        assert_eq!(p.set(Pause::Full, false), Change::None);
        assert_eq!(p.set(Pause::Held, false), Change::Resume);
        // And the other way round.
        assert_eq!(p.set(Pause::Full, true), Change::Pause);
        assert_eq!(p.set(Pause::Held, true), Change::None);
        assert_eq!(p.set(Pause::Held, false), Change::None);
        assert_eq!(p.set(Pause::Full, false), Change::Resume);
    }

    /// A reason set or cleared twice changes nothing the second time.
    #[test]
    fn repeats_change_nothing() {
        let mut p = Pauses::default();
        assert_eq!(p.set(Pause::Full, false), Change::None);
        assert_eq!(p.set(Pause::Held, true), Change::Pause);
        assert_eq!(p.set(Pause::Held, true), Change::None);
        assert_eq!(p.set(Pause::Held, false), Change::Resume);
        assert_eq!(p.set(Pause::Held, false), Change::None);
        assert!(!p.paused());
    }
}
