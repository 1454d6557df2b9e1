//! Transactional outputs (exactly once into Kafka): one Kafka transaction
//! per commit cycle on the output producer, and the gate that keeps the
//! handler calls writing into it apart from its commit.
//!
//! The committer thread (`commit.rs`) owns the cycle: it closes the
//! [`Gate`] (waiting for the handler calls inside it), adds the completed
//! input offsets with `send_offsets_to_transaction` and the consumer's
//! group metadata (KIP-447), commits, and begins the next transaction. A
//! handler call holds the gate open from before it runs until its record
//! is completed, so a transaction never carries a call's outputs without
//! its record's offset (or the other way round). A call that wrote outputs
//! and failed dooms the transaction: it is aborted, and every partition
//! that wrote into it is rewound to its last committed offset (the worker
//! does it before its next call, see `worker/source.rs`). A fatal producer
//! error (fenced by a newer producer with the same `transactional.id`)
//! stops the run: nothing is committed after it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;

use crate::output::OutputProducer;
use tokio_util::sync::CancellationToken;

use crate::engine::partition::PartitionState;
use crate::metrics::instruments::{Instruments, kafka_error_name};

/// How long `init_transactions`, `send_offsets_to_transaction`,
/// `commit_transaction` and `abort_transaction` may take.
pub(crate) const TRANSACTION_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an abort the library decided on waits for the transaction's
/// outputs to be written first (see [`Transactions::end`]).
const ABORT_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// How much longer than its own timeout `send_offsets_to_transaction` is
/// waited for (see [`Transactions::send_offsets`]).
const SEND_OFFSETS_GRACE: Duration = Duration::from_secs(1);

/// The abort reason of a transaction whose `send_offsets_to_transaction`
/// did not return in time.
const SEND_OFFSETS_TIMED_OUT: &str = "send_offsets_timed_out";

/// The abort reason of a transaction the broker timed out.
const TIMED_OUT: &str = "transaction_timeout";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Handler calls enter it shared (async); the committer closes it (a
/// thread, with a deadline) for a transaction's commit or abort. Once the
/// committer waits, new calls wait behind it, so a busy partition cannot
/// hold a cycle's end off for ever.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    /// The last call inside left (the committer waits for it).
    empty: Condvar,
    /// The committer opened the gate again (calls wait for it).
    opened: tokio::sync::Notify,
}

#[derive(Default)]
struct GateState {
    /// Handler calls inside.
    inside: usize,
    /// The committer closed it, or waits to.
    closed: bool,
}

/// A handler call inside the gate; leaves on drop.
pub(crate) struct Inside<'a>(&'a Gate);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.0.state);
        s.inside -= 1;
        if s.inside == 0 && s.closed {
            self.0.empty.notify_all();
        }
    }
}

/// The gate closed by the committer; opens on drop.
pub(crate) struct Closed<'a>(&'a Gate);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).closed = false;
        self.0.opened.notify_waiters();
    }
}

impl Gate {
    /// Enters, waiting while the committer has it closed.
    pub(crate) async fn enter(&self) -> Inside<'_> {
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            // Registered before the check: an opening after it wakes us.
            opened.as_mut().enable();
            {
                let mut s = lock(&self.state);
                if !s.closed {
                    s.inside += 1;
                    return Inside(self);
                }
            }
            opened.await;
        }
    }

    /// Completes at the gate's next opening (the end of the committer's
    /// next cycle, whether or not it ended the transaction). Enable it
    /// before checking what the opening would change, so an opening in
    /// between is not missed.
    pub(crate) fn next_opening(&self) -> tokio::sync::futures::Notified<'_> {
        self.opened.notified()
    }

    /// Closes it once the calls inside left, waiting at most `wait`
    /// (blocking the thread). `None` when calls were still inside at the
    /// deadline: the gate is open again.
    pub(crate) fn close(&self, wait: Duration) -> Option<Closed<'_>> {
        let deadline = Instant::now() + wait;
        let mut s = lock(&self.state);
        s.closed = true;
        while s.inside > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.closed = false;
                drop(s);
                self.opened.notify_waiters();
                return None;
            }
            s = self
                .empty
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Some(Closed(self))
    }
}

/// Why the open transaction must be aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Doom {
    /// A handler call that wrote into it failed.
    HandlerFailed,
    /// librdkafka refused a handler call's output because the transaction
    /// failed (its abortable state): it cannot commit, and its outputs
    /// are not written any more.
    TransactionFailed,
}

/// The transactions of one run: the transactional output producer, the
/// gate, and the open transaction's state.
pub(crate) struct Transactions {
    /// The output producer (transactional).
    outputs: Arc<OutputProducer>,
    /// Its `transaction.timeout.ms`.
    timeout: Duration,
    pub(crate) gate: Gate,
    /// How long a commit waits for the handler calls inside the gate.
    pub(crate) gate_wait: Duration,
    open: Mutex<Open>,
    /// The fatal error that ended the transactions, if any.
    fatal: Mutex<Option<KafkaError>>,
    /// Cancelled on a fatal error: the run stops.
    shutdown: CancellationToken,
    instruments: Instruments,
}

/// The open transaction.
#[derive(Default)]
struct Open {
    /// The partitions whose handler calls wrote outputs into it.
    members: Vec<Arc<PartitionState>>,
    /// When the first handler call that wrote into it started.
    since: Option<Instant>,
    doom: Option<Doom>,
}

/// How a transaction's end went, for the committer.
pub(crate) enum Ended {
    /// Committed with the offsets given.
    Committed,
    /// Aborted for this reason (the members rewind); the offsets given
    /// were not committed.
    Aborted(String),
    /// Nothing to commit: still open.
    Empty,
}

impl Transactions {
    pub(crate) fn new(
        outputs: Arc<OutputProducer>,
        timeout: Duration,
        gate_wait: Duration,
        shutdown: CancellationToken,
        instruments: Instruments,
    ) -> Self {
        Transactions {
            outputs,
            timeout,
            gate: Gate::default(),
            gate_wait,
            open: Mutex::new(Open::default()),
            fatal: Mutex::new(None),
            shutdown,
            instruments,
        }
    }

    /// `init_transactions` (fencing any earlier producer with the same
    /// `transactional.id`, and aborting its open transaction), then the
    /// first transaction begins. Blocking. At start-up (not after a
    /// recovery, whose old transaction is counted already) the earlier
    /// producer's open transaction is counted and logged: the coordinator
    /// answered `InitProducerId` with `CONCURRENT_TRANSACTIONS` while it
    /// ended it.
    pub(crate) fn init(&self) -> Result<(), KafkaError> {
        let waits = self.outputs.init_waits();
        self.init_producer()?;
        if self.outputs.init_waits() > waits {
            self.instruments.predecessor_transaction_ended();
            tracing::warn!(
                "init_transactions waited while the transaction coordinator ended a transaction an earlier producer with this transactional.id left open (a member that was killed or lost): an open one is aborted, its outputs never reach read_committed readers and its inputs are handled again from the committed offsets"
            );
        }
        Ok(())
    }

    /// `init_transactions`, then the first transaction begins.
    fn init_producer(&self) -> Result<(), KafkaError> {
        let producer = self.producer();
        producer.init_transactions(TRANSACTION_CALL_TIMEOUT)?;
        producer.begin_transaction()
    }

    /// How long a commit, an abort or a new producer's `init_transactions`
    /// waits before it is resumed or given up:
    /// 30 s, or `transaction.timeout.ms` when shorter (past it the
    /// coordinator aborts the open transaction itself).
    fn call_timeout(&self) -> Duration {
        TRANSACTION_CALL_TIMEOUT.min(self.timeout)
    }

    /// The transactional producer now.
    fn producer(&self) -> crate::failure::producer::LibProducer {
        self.outputs.handle()
    }

    /// After a fatal error `e` on a transactional call (neither commit nor
    /// abort is possible on this producer any more): unless another
    /// producer with the same `transactional.id` fenced this one, the
    /// producer is replaced by a new one with the same id, whose
    /// `init_transactions` ends the old one's transaction (the broker
    /// aborts it), and transactions begin afresh: `Ok` with the abort's
    /// reason (the caller rewinds). `Err` (the run stops) for a fence:
    /// `_FENCED`, `PRODUCER_FENCED` or `INVALID_PRODUCER_EPOCH` while the
    /// open transaction (first written at `since`) is younger than
    /// `transaction.timeout.ms`. An older one was aborted by the broker,
    /// which bumps the producer's epoch: librdkafka reports that as a
    /// fence too, and it is recovered from.
    ///
    /// What recovers besides a timed-out transaction: librdkafka makes
    /// `INVALID_TXN_STATE` from the broker fatal, and the broker answers an
    /// abort with it when it has no transaction open for the id (issue 46:
    /// an abort right after a commit, whose next transaction's
    /// `AddPartitionsToTxn` the coordinator had refused with
    /// `CONCURRENT_TRANSACTIONS` while it wrote the commit's markers).
    fn recover(&self, e: KafkaError, since: Option<Instant>) -> Result<String, KafkaError> {
        let timed_out = since.is_some_and(|s| s.elapsed() >= self.timeout);
        let reason = if timed_out {
            tracing::warn!(error = %e, transaction_timeout = ?self.timeout, "the open transaction outlived transaction.timeout.ms and the broker aborted it (librdkafka reports the epoch bump as a fence); starting a new producer with the same transactional.id");
            TIMED_OUT.to_owned()
        } else if is_fence(&e) {
            return Err(self.set_fatal(e));
        } else {
            tracing::warn!(error = %e, "the transactional output producer raised a fatal error, but no other producer fenced it: starting a new producer with the same transactional.id (its init_transactions ends the old one's transaction)");
            e.rdkafka_error_code()
                .map(kafka_error_name)
                .unwrap_or_else(|| "_FATAL".to_owned())
        };
        self.restart_producer(reason)
    }

    /// Replaces the producer with a new one with the same
    /// `transactional.id` and begins its first transaction (its
    /// `init_transactions` ends the old one's): `Ok(reason)`; `Err` (the
    /// run stops) when that fails.
    ///
    /// The new producer's `init_transactions` is resumed while it times
    /// out (no transaction coordinator reachable: the member waits for the
    /// cluster, as a consumer does) until the run is shut down.
    fn restart_producer(&self, reason: String) -> Result<String, KafkaError> {
        let old = self.outputs.replace().map_err(|e| self.set_fatal(e))?;
        // Dropped here, on the committer's thread: purges, flushes and
        // joins the old producer's threads (unless a stuck call still
        // holds a handle: then where it ends).
        drop(old);
        let producer = self.producer();
        self.resumed("init_transactions", || {
            producer.init_transactions(self.call_timeout())
        })
        .map_err(|e| self.set_fatal(e))?;
        producer
            .begin_transaction()
            .map_err(|e| self.set_fatal(e))?;
        Ok(reason)
    }

    /// The fatal error that ended the transactions, if any.
    pub(crate) fn fatal(&self) -> Option<KafkaError> {
        lock(&self.fatal).clone()
    }

    /// Stops the run with `e` (a partition that cannot be rewound):
    /// nothing is committed from here on.
    pub(crate) fn stop(&self, e: KafkaError) {
        lock(&self.fatal).get_or_insert(e);
        self.shutdown.cancel();
    }

    fn set_fatal(&self, e: KafkaError) -> KafkaError {
        tracing::error!(error = %e, "the transactional output producer failed fatally (fenced by a newer producer with the same transactional.id, or a fatal broker error): the consumer stops, nothing more is committed");
        lock(&self.fatal).get_or_insert(e.clone());
        self.shutdown.cancel();
        e
    }

    /// A handler call of `state` that started at `call_started` wrote
    /// outputs into the open transaction (called inside the gate). The
    /// transaction's age counts from the earliest such call's start (its
    /// first output came at or after it).
    pub(crate) fn joined(&self, state: &Arc<PartitionState>, call_started: Instant) {
        let mut open = lock(&self.open);
        open.since = Some(open.since.map_or(call_started, |s| s.min(call_started)));
        if !state.in_transaction.swap(true, Ordering::AcqRel) {
            open.members.push(Arc::clone(state));
        }
    }

    /// The open transaction must be aborted (called inside the gate).
    /// [`Doom::TransactionFailed`] wins over an earlier reason: the abort
    /// must not wait for outputs that cannot be written any more.
    pub(crate) fn doom(&self, why: Doom) {
        let mut open = lock(&self.open);
        if why == Doom::TransactionFailed {
            open.doom = Some(why);
        } else {
            open.doom.get_or_insert(why);
        }
    }

    /// Whether the open transaction must be aborted.
    pub(crate) fn is_doomed(&self) -> bool {
        lock(&self.open).doom.is_some()
    }

    /// Ends the open transaction, with the gate closed and the commit gate
    /// held: commits it with `offsets` (the completed input offsets; their
    /// partitions are `states`), or aborts it when it is doomed or one of
    /// its members cannot commit (revoked). `Err` for a fatal error (the
    /// run stops), or at shutdown for an abort that did not succeed (the
    /// transaction is left to the next producer with the id). Event ages
    /// of the committed records are recorded.
    pub(crate) fn end<C, X>(
        &self,
        consumer: &C,
        offsets: &rdkafka::TopicPartitionList,
        states: &[Arc<PartitionState>],
    ) -> Result<Ended, KafkaError>
    where
        C: rdkafka::consumer::Consumer<X>,
        X: rdkafka::consumer::ConsumerContext,
    {
        if let Some(e) = self.fatal() {
            return Err(e);
        }
        let (members, since, doom) = {
            let open = lock(&self.open);
            (open.members.clone(), open.since, open.doom)
        };
        if members.is_empty() && states.is_empty() && doom.is_none() {
            return Ok(Ended::Empty);
        }
        let started = since.unwrap_or_else(Instant::now);
        let revoked = members.iter().any(|m| m.revoked.load(Ordering::Acquire));
        let abort_reason = match doom {
            Some(Doom::HandlerFailed) => Some("handler_failed".to_owned()),
            Some(Doom::TransactionFailed) => Some("transaction_failed".to_owned()),
            None if revoked => Some("partition_revoked".to_owned()),
            None => None,
        };
        let reason = match abort_reason {
            Some(reason) => reason,
            None => match self.commit(consumer, offsets) {
                Ok(false) => {
                    tracing::warn!(timeout = ?TRANSACTION_CALL_TIMEOUT.min(self.timeout), "send_offsets_to_transaction did not return in time (librdkafka waits for a group coordinator that left: confluentinc/librdkafka#5456, #5511): starting a new producer with the same transactional.id, whose init_transactions ends the stuck transaction");
                    let reason = self.restart_producer(SEND_OFFSETS_TIMED_OUT.to_owned())?;
                    return Ok(self.aborted(&members, started, reason));
                }
                Ok(true) => {
                    self.instruments.transaction(started.elapsed(), None);
                    let now_ns = now_ns();
                    for s in states.iter().chain(&members) {
                        let ages = std::mem::take(&mut *lock(&s.ages));
                        for age in ages {
                            s.metrics.succeeded(age, now_ns);
                        }
                    }
                    self.next(&members)?;
                    return Ok(Ended::Committed);
                }
                Err(e) => {
                    let name = e
                        .rdkafka_error_code()
                        .map(kafka_error_name)
                        .unwrap_or_else(|| "_OTHER".to_owned());
                    if is_fatal(&e) {
                        let reason = self.recover(e, since)?;
                        return Ok(self.aborted(&members, started, reason));
                    }
                    name
                }
            },
        };
        let producer = self.producer();
        if doom == Some(Doom::HandlerFailed) || (doom.is_none() && revoked) {
            // The library's own decision, on a transaction librdkafka
            // still holds open: its outputs are written first. An abort
            // purges the outputs still queued, and a produce request
            // already built but not sent leaves a gap in the partition's
            // sequence numbers that fails the next transaction
            // (OUT_OF_ORDER_SEQUENCE_NUMBER); and an abort of a
            // transaction whose partitions the coordinator has not
            // registered yet is refused (INVALID_TXN_STATE, see
            // `recover`). Bounded: an output that cannot be written (the
            // transaction turned abortable meanwhile) is purged by the
            // abort after the wait.
            let _ = producer.flush(ABORT_FLUSH_TIMEOUT);
        }
        let abort = || producer.abort_transaction(self.call_timeout());
        let shutting_down = self.shutdown.is_cancelled();
        let result = if shutting_down {
            abort()
        } else {
            retried(abort)
        };
        if let Err(e) = result {
            if shutting_down && !is_fatal(&e) {
                // The run ends: no new producer. The transaction coordinator
                // ends the open transaction at the next producer with this
                // id (a restarted member) or at transaction.timeout.ms.
                tracing::warn!(error = %e, %reason, "shutdown: abort_transaction did not succeed; the transaction stays open until the next producer with this transactional.id or transaction.timeout.ms ends it (its outputs never reach read_committed readers; its inputs are handled again from the committed offsets)");
                return Err(e);
            }
            // A fatal producer (not fenced, see `recover`) starts afresh,
            // and so does one whose abort did not succeed (no transaction
            // coordinator reachable: librdkafka's retriable "timed out,
            // retry", three times; or a state it refuses the abort in): a
            // new producer with the same transactional.id has the
            // coordinator end the open transaction in its
            // `init_transactions`. Issue 46: a member died when no broker
            // was reachable for ten seconds.
            let reason = if is_fatal(&e) {
                self.recover(e, since)?
            } else {
                tracing::warn!(error = %e, %reason, timeout = ?self.call_timeout(), "abort_transaction did not succeed (no transaction coordinator reachable?): starting a new producer with the same transactional.id, whose init_transactions has the coordinator end the open transaction");
                self.restart_producer(reason)?
            };
            drop(producer);
            return Ok(self.aborted(&members, started, reason));
        }
        self.next(&members)?;
        Ok(self.aborted(&members, started, reason))
    }

    /// After an abort (the next transaction has begun): counts it and
    /// marks its members to rewind.
    fn aborted(&self, members: &[Arc<PartitionState>], started: Instant, reason: String) -> Ended {
        self.instruments
            .transaction(started.elapsed(), Some(reason.clone()));
        for m in members {
            lock(&m.ages).clear();
            m.in_transaction.store(false, Ordering::Release);
            m.rewind.store(true, Ordering::Release);
            // An idle worker rewinds at once.
            m.wake.notify_one();
        }
        *lock(&self.open) = Open::default();
        tracing::warn!(
            reason = %reason,
            partitions = members.len(),
            "transaction aborted; the partitions that wrote outputs into it are rewound to their last committed offsets and handled again"
        );
        Ended::Aborted(reason)
    }

    /// Adds `offsets` (if any) and commits, retrying a retriable error.
    /// `Ok(false)` when `send_offsets_to_transaction` did not return in
    /// time (see [`Self::send_offsets`]): nothing was committed.
    fn commit<C, X>(
        &self,
        consumer: &C,
        offsets: &rdkafka::TopicPartitionList,
    ) -> Result<bool, KafkaError>
    where
        C: rdkafka::consumer::Consumer<X>,
        X: rdkafka::consumer::ConsumerContext,
    {
        if offsets.count() > 0 {
            let mut tries = 0;
            loop {
                tries += 1;
                let metadata = consumer.group_metadata().ok_or(KafkaError::Canceled)?;
                match self.send_offsets(offsets, metadata) {
                    None => return Ok(false),
                    Some(Err(KafkaError::Transaction(e))) if e.is_retriable() && tries < 3 => {
                        tracing::debug!(error = %e, "retriable transaction error; trying again");
                    }
                    Some(r) => break r?,
                }
            }
        }
        // A retriable error (timed out: no transaction coordinator
        // reachable) leaves the commit's outcome open: librdkafka may have
        // sent it, and the coordinator completes a commit it prepared even
        // for a new producer. The call is resumed until the outcome is
        // known, never followed by an abort and a rewind to offsets that
        // may be committed already (their outputs would be written twice).
        let producer = self.producer();
        self.resumed("commit_transaction", || {
            producer.commit_transaction(self.call_timeout())
        })
        .map(|()| true)
    }

    /// Calls `op` (the transactional call `what`) again while it fails
    /// with a retriable error (librdkafka: "timed out, retry call to
    /// resume"), until the run is shut down; logs each retry.
    fn resumed(
        &self,
        what: &str,
        mut op: impl FnMut() -> Result<(), KafkaError>,
    ) -> Result<(), KafkaError> {
        let mut tries = 0u32;
        loop {
            match op() {
                Err(KafkaError::Transaction(e))
                    if e.is_retriable() && !self.shutdown.is_cancelled() =>
                {
                    tries += 1;
                    tracing::warn!(error = %e, tries, call = what, "a transactional call did not finish (no transaction coordinator reachable?): resuming it");
                }
                other => return other,
            }
        }
    }

    /// `send_offsets_to_transaction`, waited for at most the call's
    /// timeout (`transaction.timeout.ms`, at most 30 s) and a second:
    /// `None` when it did not return by then. librdkafka 2.12.1 does not
    /// bound the call (confluentinc/librdkafka#5456), and when the group
    /// coordinator it remembers left the cluster it waits until another
    /// broker changes state (#5511): the transactional member of a rolling
    /// restart stopped committing for good (issue 46). The call runs on a
    /// thread of its own holding a handle to the producer; left behind, it
    /// ends whenever librdkafka returns (the producer is replaced meanwhile,
    /// and its last handle dropped there).
    fn send_offsets(
        &self,
        offsets: &rdkafka::TopicPartitionList,
        metadata: rdkafka::consumer::ConsumerGroupMetadata,
    ) -> Option<Result<(), KafkaError>> {
        let call_timeout = TRANSACTION_CALL_TIMEOUT.min(self.timeout);
        let producer = self.producer();
        let offsets = offsets.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("fresh-send-offsets".into())
            .spawn(move || {
                let r = producer.send_offsets_to_transaction(&offsets, &metadata, call_timeout);
                let _ = tx.send(r);
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "no thread for send_offsets_to_transaction");
            return Some(Err(KafkaError::Canceled));
        }
        rx.recv_timeout(call_timeout + SEND_OFFSETS_GRACE).ok()
    }

    /// After a transaction ended: forgets its members and begins the next.
    fn next(&self, members: &[Arc<PartitionState>]) -> Result<(), KafkaError> {
        for m in members {
            m.in_transaction.store(false, Ordering::Release);
        }
        *lock(&self.open) = Open::default();
        self.producer()
            .begin_transaction()
            .map_err(|e| self.set_fatal(e))
    }
}

/// Calls `op` again while it fails with a retriable error (at most three
/// times in all).
fn retried(mut op: impl FnMut() -> Result<(), KafkaError>) -> Result<(), KafkaError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match op() {
            Err(KafkaError::Transaction(e)) if e.is_retriable() && tries < 3 => {
                tracing::debug!(error = %e, "retriable transaction error; trying again");
            }
            other => return other,
        }
    }
}

/// Whether a transactional call's error is fatal (fenced, or the producer
/// raised a fatal error): neither commit nor abort is possible.
fn is_fatal(e: &KafkaError) -> bool {
    match e {
        KafkaError::Transaction(e) => e.is_fatal(),
        _ => false,
    }
}

/// Whether `e` says that a newer producer with the same
/// `transactional.id` exists (or the broker aborted a timed-out
/// transaction, which bumps the epoch and reads the same).
fn is_fence(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    )
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_committer_waits_for_calls_inside_and_holds_new_ones_off() {
        let gate = Arc::new(Gate::default());
        let inside = gate.enter().await;
        let g = Arc::clone(&gate);
        let closer = std::thread::spawn(move || {
            let closed = g.close(Duration::from_secs(5));
            let got = closed.is_some();
            std::thread::sleep(Duration::from_millis(50));
            drop(closed);
            got
        });
        // Wait until the committer is waiting.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !lock(&gate.state).closed {
            assert!(Instant::now() < deadline);
            tokio::task::yield_now().await;
        }
        let g = Arc::clone(&gate);
        let late = tokio::spawn(async move {
            let _in = g.enter().await;
            Instant::now()
        });
        drop(inside);
        assert!(closer.join().unwrap(), "closed once the call left");
        let entered = late.await.unwrap();
        assert!(!lock(&gate.state).closed);
        assert!(entered.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_close_gives_up_at_its_deadline_and_opens_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let gate = Gate::default();
        let inside = rt.block_on(gate.enter());
        assert!(gate.close(Duration::from_millis(20)).is_none());
        let second = rt.block_on(gate.enter());
        drop((inside, second));
        assert!(gate.close(Duration::from_millis(20)).is_some());
    }
}
