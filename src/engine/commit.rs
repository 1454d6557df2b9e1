//! The committer: a dedicated thread that commits completed offsets with
//! `CommitMode::Sync`, so each commit's outcome and latency are known (rdkafka
//! does not report manual asynchronous commits) and no async worker thread
//! ever blocks on the broker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SendError, Sender};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;

use crate::engine::assignment::Assignment;
use crate::engine::counters::Counters;
use crate::engine::leader_epoch;
use crate::engine::partition::{CommitQueue, PartitionState};
use crate::engine::transaction::{Ended, Transactions};
use crate::failure::Exhausted;
use crate::metrics::instruments::{Instruments, kafka_error_name};

/// Requests to the committer thread.
pub(crate) enum CommitCmd {
    /// Commit now (enough records completed since the last commit).
    Now,
    /// Commit these partitions (every assigned one when `None`) and report
    /// the result.
    Sync {
        only: Option<Vec<Arc<PartitionState>>>,
        reply: Sender<Result<usize, KafkaError>>,
    },
    /// End the thread.
    Stop,
}

/// What commits need: the assignment (which partitions, under its gate),
/// the counters and the summary's committed offsets, the commit-duration
/// instrument, and the count that triggers a commit between intervals.
pub(crate) struct Committer {
    assignment: Arc<Assignment>,
    counters: Arc<Counters>,
    instruments: Instruments,
    tx: Sender<CommitCmd>,
    /// The partitions with completions since their last commit.
    pub(crate) queue: CommitQueue,
    /// Records completed since the last commit.
    completed_since_commit: AtomicUsize,
    /// Commit when this many records completed since the last commit.
    batch_records: usize,
    /// Transactional outputs: offsets are committed inside transactions.
    pub(crate) transactions: Option<Arc<Transactions>>,
}

impl Committer {
    pub(crate) fn new(
        assignment: Arc<Assignment>,
        counters: Arc<Counters>,
        instruments: Instruments,
        tx: Sender<CommitCmd>,
        batch_records: usize,
        transactions: Option<Arc<Transactions>>,
    ) -> Self {
        Committer {
            assignment,
            counters,
            instruments,
            tx,
            queue: CommitQueue::default(),
            completed_since_commit: AtomicUsize::new(0),
            batch_records,
            transactions,
        }
    }

    /// Sends `cmd` to the committer thread; `Err` once it ended.
    pub(crate) fn send(&self, cmd: CommitCmd) -> Result<(), SendError<CommitCmd>> {
        self.tx.send(cmd)
    }

    /// `n` more records completed: asks for a commit when the count since
    /// the last commit reaches `commit_batch_records`.
    pub(crate) fn records_completed(&self, n: usize) {
        let before = self.completed_since_commit.fetch_add(n, Ordering::Relaxed);
        if before < self.batch_records && before + n >= self.batch_records {
            let _ = self.tx.send(CommitCmd::Now);
        }
    }

    /// Commits the completed offsets ahead of the last commit of the
    /// partitions in `scope`. Returns how many partitions were committed.
    pub(crate) fn commit<C: Consumer<X>, X: ConsumerContext>(
        &self,
        consumer: &C,
        scope: Scope<'_>,
    ) -> Result<usize, KafkaError> {
        if let Some(tx) = &self.transactions {
            return self.commit_transaction(tx, consumer, scope);
        }
        let _gate = self
            .assignment
            .commit_gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let states = match scope {
            Scope::Only(s) => s.to_vec(),
            Scope::All => self.assignment.assigned(),
            Scope::Completed => self.queue.take(),
        };
        let mut tpl = TopicPartitionList::new();
        let mut entries = Vec::new();
        for s in states {
            if let Some(point) = s.pending_commit() {
                entries.push((s, point));
            }
        }
        for (s, (offset, epoch)) in &entries {
            if let Err(e) = leader_epoch::add(&mut tpl, &s.topic, s.partition, *offset, *epoch) {
                self.queue.put_back(entries.into_iter().map(|(s, _)| s));
                return Err(e);
            }
        }
        let entries: Vec<(Arc<PartitionState>, i64)> =
            entries.into_iter().map(|(s, (o, _))| (s, o)).collect();
        // The count that asked for this commit starts again either way: a count
        // left at or above `commit_batch_records` would never cross it again.
        self.completed_since_commit.store(0, Ordering::Relaxed);
        if entries.is_empty() {
            return Ok(0);
        }
        let started = Instant::now();
        let result = consumer.commit(&tpl, CommitMode::Sync);
        let took = started.elapsed();
        match result {
            Ok(()) => {
                self.instruments.commit(took, None);
                self.counters.commits.fetch_add(1, Ordering::Relaxed);
                for (s, offset) in &entries {
                    s.committed.fetch_max(*offset, Ordering::AcqRel);
                    self.counters.note_committed(&s.topic, s.partition, *offset);
                }
                tracing::debug!(partitions = entries.len(), ?took, "committed offsets");
                Ok(entries.len())
            }
            Err(e) => {
                let code = e
                    .rdkafka_error_code()
                    .map(kafka_error_name)
                    .unwrap_or_else(|| "_OTHER".to_owned());
                self.instruments.commit(took, Some(code));
                self.counters
                    .commit_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, partitions = entries.len(), ?took, "offset commit failed; the offsets stay pending and are committed again");
                self.queue.put_back(entries.into_iter().map(|(s, _)| s));
                Err(e)
            }
        }
    }
}

impl Committer {
    /// [`Self::commit`] with transactional outputs: ends the open
    /// transaction (see `transaction.rs`) with the completed offsets of
    /// every partition (a transaction is one atomic step: `scope` only
    /// widens what is looked at), once the handler calls inside the gate
    /// left. When they do not leave within the gate's wait, nothing
    /// happens (`Err(Canceled)`; the next cycle tries again).
    fn commit_transaction<C: Consumer<X>, X: ConsumerContext>(
        &self,
        tx: &Transactions,
        consumer: &C,
        scope: Scope<'_>,
    ) -> Result<usize, KafkaError> {
        if let Some(e) = tx.fatal() {
            return Err(e);
        }
        let Some(_closed) = tx.gate.close(tx.gate_wait) else {
            tracing::debug!(
                "handler calls still inside the transaction; it ends at the next commit"
            );
            // Nothing was committed: a revoke or the shutdown says so.
            return Err(KafkaError::Canceled);
        };
        let _gate = self
            .assignment
            .commit_gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut states = self.queue.take();
        match scope {
            Scope::Only(s) => states.extend(s.iter().cloned()),
            Scope::All => states.extend(self.assignment.assigned()),
            Scope::Completed => {}
        }
        states.sort_by_key(|s| Arc::as_ptr(s) as usize);
        states.dedup_by(|a, b| Arc::ptr_eq(a, b));
        self.completed_since_commit.store(0, Ordering::Relaxed);
        let mut tpl = TopicPartitionList::new();
        let mut entries = Vec::new();
        for s in states {
            if let Some((offset, epoch)) = s.pending_commit() {
                leader_epoch::add(&mut tpl, &s.topic, s.partition, offset, epoch)?;
                entries.push((s, offset));
            }
        }
        let committed: Vec<Arc<PartitionState>> =
            entries.iter().map(|(s, _)| Arc::clone(s)).collect();
        let started = Instant::now();
        let ended = tx.end(consumer, &tpl, &committed);
        let took = started.elapsed();
        match ended {
            Ok(Ended::Empty) => Ok(0),
            Ok(Ended::Committed) => {
                self.instruments.commit(took, None);
                self.counters.commits.fetch_add(1, Ordering::Relaxed);
                for (s, offset) in &entries {
                    s.committed.fetch_max(*offset, Ordering::AcqRel);
                    self.counters.note_committed(&s.topic, s.partition, *offset);
                }
                tracing::debug!(
                    partitions = entries.len(),
                    ?took,
                    "transaction committed with its input offsets"
                );
                Ok(entries.len())
            }
            Ok(Ended::Aborted(reason)) => {
                tracing::debug!(%reason, "the transaction and its input offsets were not committed");
                self.counters
                    .commit_failures
                    .fetch_add(1, Ordering::Relaxed);
                // The partitions that did not write into it keep their
                // completions for the next transaction.
                self.queue.put_back(
                    entries
                        .into_iter()
                        .map(|(s, _)| s)
                        .filter(|s| !s.rewind.load(Ordering::Acquire)),
                );
                // Its outputs and offsets were not committed (the abort's
                // reason was logged and counted).
                Err(KafkaError::Canceled)
            }
            Err(e) => Err(e),
        }
    }
}

/// Which partitions a commit looks at.
pub(crate) enum Scope<'a> {
    /// These partitions.
    Only(&'a [Arc<PartitionState>]),
    /// Every assigned partition (a revoke without a list, shutdown).
    All,
    /// The partitions with completions since their last commit (the
    /// periodic commit).
    Completed,
}

/// Runs the committer loop until [`CommitCmd::Stop`] or every sender is
/// gone: commits every `interval` (and when asked), and takes the storm
/// guard's and the freshness objectives' samples at the same pace.
pub(crate) fn run<C: Consumer<X>, X: ConsumerContext>(
    consumer: Arc<C>,
    committer: Arc<Committer>,
    exhausted: Arc<Exhausted>,
    rx: Receiver<CommitCmd>,
    interval: Duration,
) {
    let mut next = Instant::now() + interval;
    loop {
        let cmd = rx.recv_timeout(next.saturating_duration_since(Instant::now()));
        match cmd {
            Ok(CommitCmd::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(CommitCmd::Now) | Err(RecvTimeoutError::Timeout) => {
                exhausted.sample(committer.counters.outcomes());
                committer.instruments.slo_registry().sample();
                let _ = committer.commit(&*consumer, Scope::Completed);
                next = Instant::now() + interval;
            }
            Ok(CommitCmd::Sync { only, reply }) => {
                let scope = match only.as_deref() {
                    Some(s) => Scope::Only(s),
                    None => Scope::All,
                };
                let r = committer.commit(&*consumer, scope);
                let _ = reply.send(r);
            }
        }
    }
}
