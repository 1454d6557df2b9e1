//! The committer: a dedicated thread that commits completed offsets with
//! `CommitMode::Sync`, so each commit's outcome and latency are known (rdkafka
//! does not report manual asynchronous commits) and no async worker thread
//! ever blocks on the broker.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::partition::PartitionState;
use crate::shared::Shared;

/// Requests to the committer thread.
pub(crate) enum CommitCmd {
    /// Commit now (enough records completed since the last commit).
    Now,
    /// Commit these partitions (all when `None`) and report the result.
    Sync {
        only: Option<Vec<Arc<PartitionState>>>,
        reply: Sender<Result<usize, KafkaError>>,
    },
    /// End the thread.
    Stop,
}

/// Runs the committer loop until [`CommitCmd::Stop`] or every sender is gone.
pub(crate) fn run<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
    consumer: Arc<C>,
    shared: Arc<Shared>,
    rx: Receiver<CommitCmd>,
    interval: Duration,
) {
    let mut next = Instant::now() + interval;
    loop {
        let cmd = rx.recv_timeout(next.saturating_duration_since(Instant::now()));
        match cmd {
            Ok(CommitCmd::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(CommitCmd::Now) | Err(RecvTimeoutError::Timeout) => {
                shared.storm_sample();
                shared.instruments.slo_registry().sample();
                let _ = commit(&*consumer, &shared, None);
                next = Instant::now() + interval;
            }
            Ok(CommitCmd::Sync { only, reply }) => {
                let r = commit(&*consumer, &shared, only.as_deref());
                let _ = reply.send(r);
            }
        }
    }
}

/// Commits the completed offsets of `only` (or of every assigned partition)
/// that are ahead of the last commit. Returns how many partitions were
/// committed.
pub(crate) fn commit<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
    consumer: &C,
    shared: &Shared,
    only: Option<&[Arc<PartitionState>]>,
) -> Result<usize, KafkaError> {
    let _gate = shared
        .commit_gate
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let states = match only {
        Some(s) => s.to_vec(),
        None => shared.assigned(),
    };
    let mut tpl = TopicPartitionList::new();
    let mut entries = Vec::new();
    for s in states {
        if let Some(offset) = s.pending_commit() {
            tpl.add_partition_offset(&s.topic, s.partition, Offset::Offset(offset))?;
            entries.push((s, offset));
        }
    }
    // The count that asked for this commit starts again either way: a count
    // left at or above `commit_batch_records` would never cross it again.
    shared.reset_completed();
    if entries.is_empty() {
        return Ok(0);
    }
    let started = Instant::now();
    let result = consumer.commit(&tpl, CommitMode::Sync);
    let took = started.elapsed();
    match result {
        Ok(()) => {
            shared.instruments.commit(took, None);
            shared.counters.commits.fetch_add(1, Ordering::Relaxed);
            for (s, offset) in &entries {
                s.committed.fetch_max(*offset, Ordering::AcqRel);
                shared.note_committed(&s.topic, s.partition, *offset);
            }
            tracing::debug!(partitions = entries.len(), ?took, "committed offsets");
            Ok(entries.len())
        }
        Err(e) => {
            let code = e
                .rdkafka_error_code()
                .map(crate::instruments::kafka_error_name)
                .unwrap_or_else(|| "_OTHER".to_owned());
            shared.instruments.commit(took, Some(code));
            shared
                .counters
                .commit_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, partitions = entries.len(), ?took, "offset commit failed; the offsets stay pending and are committed again");
            Err(e)
        }
    }
}
