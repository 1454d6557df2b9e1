//! Offset resets: where a partition starts when the group has no committed
//! offset for it or its offset is out of range, and what the library does
//! about a retention overrun.
//!
//! librdkafka runs with `auto.offset.reset=error`, so it never moves a
//! partition on its own (with `earliest` or `latest` it would, and a
//! retention overrun would read as zero lag). Instead:
//!
//! 1. **At assignment** (in the rebalance callback, before librdkafka starts
//!    fetching) the library reads the group's committed offsets and the
//!    partitions' log start offsets and high watermarks, and assigns each
//!    partition an explicit start: the committed offset when it is in range;
//!    the user's `auto.offset.reset` (`earliest` by default) when there is
//!    none; and, when it is out of range, what
//!    [`RetentionOverrunPolicy`](crate::health::RetentionOverrunPolicy) says, after
//!    counting and logging the overrun.
//! 2. **While running**, a partition whose fetch position falls out of range
//!    (the consumer fell behind retention, or a read at assignment failed)
//!    makes librdkafka stop that partition's fetcher and report
//!    `RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET`, without saying which partition.
//!    The statistics report the stopped fetcher (`fetch_state` = `none`); the
//!    health thread then reads the partition's watermarks, applies the same
//!    decision to the next offset after the last record fetched, and
//!    restarts the partition (re-assigning it: a stopped fetcher cannot
//!    seek).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::{Offset, TopicPartitionList};

use crate::engine::assignment::Assignment;
use crate::engine::partition::PartitionState;
use crate::engine::watchdog::IDLE_POLL_TICK;
use crate::health::RetentionOverrunPolicy;
use crate::health::hub::HealthHub;
use crate::health::partition::{AnomalyKind, OffsetAnomaly};

/// Offset-reset requests: librdkafka's out-of-range error and the
/// statistics that show which partition's fetcher stopped meet here, and
/// become [`Request`]s for the health thread.
pub(crate) struct Resets {
    tx: Mutex<Option<std::sync::mpsc::Sender<Request>>>,
    /// An offset-reset error waits for a statistics report to show which
    /// partition it was.
    error_at: Mutex<Option<Instant>>,
    /// `None` when statistics are off.
    statistics_interval: Option<Duration>,
    /// The configuration of the consumer that finds where a truncated log
    /// diverges ([`truncation::divergence`]).
    probe: rdkafka::ClientConfig,
}

impl Resets {
    pub(crate) fn new(statistics_interval: Option<Duration>, probe: rdkafka::ClientConfig) -> Self {
        Resets {
            tx: Mutex::new(None),
            error_at: Mutex::new(None),
            statistics_interval,
            probe,
        }
    }

    /// Connects the health thread's request channel.
    pub(crate) fn connect(&self, tx: std::sync::mpsc::Sender<Request>) {
        *lock(&self.tx) = Some(tx);
    }

    /// librdkafka reported `RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET`: some
    /// partition's offset is out of range and its fetcher stopped. The next
    /// statistics report shows which; without statistics every partition is
    /// checked.
    pub(crate) fn offset_reset_error(&self) {
        if self.statistics_interval.is_some() {
            *lock(&self.error_at) = Some(Instant::now());
        } else {
            self.request(Request::CheckAll);
        }
    }

    fn request(&self, r: Request) {
        if let Some(tx) = lock(&self.tx).as_ref() {
            let _ = tx.send(r);
        }
    }

    /// How long after a restart a partition is not restarted again
    /// (statistics may still show its old state).
    pub(crate) fn restart_quiet(&self) -> Duration {
        2 * (self.statistics_interval.unwrap_or_default() + IDLE_POLL_TICK)
    }

    /// A statistics report arrived; `stopped` lists the assigned partitions
    /// whose fetcher it showed stopped, with the number of consecutive
    /// reports that did.
    pub(crate) fn statistics_received(
        &self,
        now: Instant,
        stopped: Vec<(Arc<PartitionState>, u32)>,
    ) {
        let quiet = self.restart_quiet();
        let mut pending = lock(&self.error_at);
        let error = pending.is_some();
        // A fetcher stopped for three reports in a row is restarted even
        // without the error (one may have been missed).
        let candidates: Vec<Arc<PartitionState>> = stopped
            .into_iter()
            .filter(|(s, runs)| {
                (error || *runs >= 3)
                    && !s.health.is_failed()
                    && s.health.restart_settled(now, quiet)
            })
            .map(|(s, _)| s)
            .collect();
        if !candidates.is_empty() {
            *pending = None;
            drop(pending);
            self.request(Request::Stopped(candidates));
        } else if pending.is_some_and(|at| now.saturating_duration_since(at) > quiet * 2) {
            *pending = None;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Work for the health thread.
pub(crate) enum Request {
    /// These partitions' fetchers are stopped (statistics `fetch_state` =
    /// `none`, after an offset-reset error).
    Stopped(Vec<Arc<PartitionState>>),
    /// An offset-reset error while statistics are off: check every assigned
    /// partition against its watermarks.
    CheckAll,
}

/// Handles a [`Request`]: decides for each partition in it, and restarts
/// the ones to be consumed from somewhere else.
pub(crate) fn resolve<C, X>(
    consumer: &C,
    assignment: &Assignment,
    hub: &HealthHub,
    resets: &Resets,
    request: Request,
) where
    C: Consumer<X>,
    X: ConsumerContext,
{
    let Some(cfg) = hub.config() else {
        return;
    };
    // No rebalance callback runs while we decide and re-assign.
    let _assigning = hub.assign_lock();
    if assignment.is_closing() {
        return;
    }
    let epoch = assignment.epoch.load(Ordering::Acquire);
    let now = Instant::now();
    let (candidates, stopped) = match request {
        Request::Stopped(v) => (v, true),
        Request::CheckAll => (assignment.assigned(), false),
    };
    // Each partition's decision; truncation checks wait for one probe.
    let mut decided: Vec<Decided> = Vec::new();
    let mut checks: Vec<(usize, truncation::Check)> = Vec::new();
    for state in candidates {
        if state.revoked.load(Ordering::Acquire)
            || state.health.is_failed()
            || !state.health.restart_settled(now, resets.restart_quiet())
        {
            continue;
        }
        let (fetched, epoch) = {
            let t = state.tracker.lock().unwrap_or_else(|e| e.into_inner());
            (t.position(), t.position_epoch())
        };
        let position = fetched.or_else(|| match state.health.start() {
            Offset::Offset(o) => Some(o),
            Offset::Beginning | Offset::End => None,
            _ => committed_offset(consumer, &state),
        });
        let (lo, hi) = match consumer.fetch_watermarks(&state.topic, state.partition, READ_TIMEOUT)
        {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(topic = %state.topic, partition = state.partition, error = %e, "reading watermarks of a stopped partition failed; retrying at the next statistics report");
                continue;
            }
        };
        let d = classify(
            position,
            Some(lo),
            Some(hi),
            cfg.retention_policy,
            cfg.new_partitions,
        );
        // Stopped inside the log's offsets, with the leader epoch of the
        // record before the position known: librdkafka's validation may
        // have found the log truncated below it (new records reuse the
        // lost ones' offsets). Checked below, all at once.
        if stopped
            && d.anomaly.is_none()
            && let (Some(p), Some(e)) = (position, epoch)
            && p > lo
        {
            checks.push((
                decided.len(),
                truncation::Check {
                    topic: state.topic.to_string(),
                    partition: state.partition,
                    position: p,
                    epoch: e,
                },
            ));
        }
        decided.push(Decided {
            state,
            position,
            running: fetched.is_some(),
            lo,
            hi,
            d,
        });
    }
    if !checks.is_empty() {
        let found = truncation::divergence(
            &resets.probe,
            &checks.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
            READ_TIMEOUT,
        );
        for ((i, c), to) in checks.iter().zip(found) {
            if let Some(to) = to {
                let hi = decided[*i].hi;
                decided[*i].d = truncated(c.position, to, hi, cfg.retention_policy);
            }
        }
    }
    let mut restarts: Vec<(Arc<PartitionState>, i64)> = Vec::new();
    for Decided {
        state,
        position,
        running,
        lo,
        hi,
        d,
    } in decided
    {
        if !needs_restart(stopped, &d, position) {
            continue;
        }
        if let Some(Offset::Offset(o)) = d.start
            && !state
                .tracker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .can_restart_at(o)
        {
            // Below records still in the handler: they complete first
            // (the fetcher is stopped, nothing new arrives meanwhile).
            tracing::debug!(topic = %state.topic, partition = state.partition, offset = o, "restart below the position waits for the delivered records to complete");
            continue;
        }
        if let Some(kind) = d.anomaly {
            report(
                hub,
                &state,
                OffsetAnomaly {
                    kind,
                    policy: cfg.retention_policy,
                    resumed_at: d.start.and_then(|o| match o {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    }),
                    at: now,
                },
                running,
            );
        }
        match d.start {
            Some(Offset::Offset(o)) => restarts.push((state, o)),
            Some(_) => {
                // A new partition: the logical start resolves to a number.
                let o = if matches!(d.start, Some(Offset::End)) {
                    hi
                } else {
                    lo
                };
                restarts.push((state, o));
            }
            None => state.health.fail(),
        }
    }
    if restarts.is_empty() {
        return;
    }
    if assignment.epoch.load(Ordering::Acquire) != epoch {
        tracing::debug!("assignment changed while deciding; the new assignment decides afresh");
        return;
    }
    let result = {
        // librdkafka resumes the partitions inside these calls: no worker's
        // seek may interleave (see `Assignment::assigning`).
        let _assigning = assignment.assigning();
        // Before librdkafka fetches from the new offsets: a restart below
        // the position starts the partition's tracking afresh, or the
        // records now at those offsets would be ignored as redeliveries
        // (and committed past, never handled).
        for (state, offset) in &restarts {
            state.restart_tracking_at(*offset);
        }
        match consumer.rebalance_protocol() {
            RebalanceProtocol::Cooperative => restart_incremental(consumer, &restarts),
            _ => restart_eager(consumer, assignment, &restarts),
        }
    };
    match result {
        Ok(()) => {
            for (state, offset) in &restarts {
                state.health.restarted(now, Offset::Offset(*offset));
                tracing::info!(topic = %state.topic, partition = state.partition, offset, "partition fetch restarted");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "restarting stopped partitions failed; retrying at the next statistics report");
        }
    }
}

/// A stopped partition's decision, before it is acted on.
struct Decided {
    state: Arc<PartitionState>,
    /// Where it was to continue.
    position: Option<i64>,
    /// `position` is the consumer's own (a record was taken), not the
    /// group's committed offset.
    running: bool,
    lo: i64,
    hi: i64,
    d: Decision,
}

/// The decision for a partition whose log was truncated below `position`:
/// the leader's log continues past the group's records at `to`. By the
/// retention-overrun policy: resume at `to` (earliest: every record now in
/// the log past what the group read is handled), at the high watermark
/// (latest), or stop (fail).
fn truncated(position: i64, to: i64, hi: i64, policy: RetentionOverrunPolicy) -> Decision {
    let resume = match policy {
        RetentionOverrunPolicy::Earliest => Some(to),
        RetentionOverrunPolicy::Latest => Some(hi.max(to)),
        RetentionOverrunPolicy::Fail => None,
    };
    Decision {
        start: resume.map(Offset::Offset),
        estimate: Some(resume.unwrap_or(position)),
        anomaly: Some(AnomalyKind::LogTruncation {
            offset: position,
            truncated_to: to,
            high_watermark: hi,
        }),
    }
}

/// Whether a partition checked after an offset-reset error (`stopped`:
/// statistics showed its fetcher stopped; else every partition is checked
/// because statistics are off) is restarted, by its decision `d` and the
/// position it continues at (`None` before it took a record and without a
/// numeric start).
fn needs_restart(stopped: bool, d: &Decision, position: Option<i64>) -> bool {
    if stopped || d.anomaly.is_some() {
        return true;
    }
    // In range, and nothing says its fetcher stopped: kept. Nothing taken
    // yet and a start at the log end: librdkafka resolved the end when it
    // assigned the partition, and a restart at today's end would skip the
    // records produced since.
    position.is_none() && !matches!(d.start, Some(Offset::End))
}

fn committed_offset<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    state: &PartitionState,
) -> Option<i64> {
    let mut tpl = TopicPartitionList::with_capacity(1);
    tpl.add_partition(&state.topic, state.partition);
    let got = consumer.committed_offsets(tpl, READ_TIMEOUT).ok()?;
    match got.find_partition(&state.topic, state.partition)?.offset() {
        Offset::Offset(o) if o >= 0 => Some(o),
        _ => None,
    }
}

fn restart_incremental<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    restarts: &[(Arc<PartitionState>, i64)],
) -> rdkafka::error::KafkaResult<()> {
    for (state, offset) in restarts {
        let mut out = TopicPartitionList::with_capacity(1);
        out.add_partition(&state.topic, state.partition);
        consumer.incremental_unassign(&out)?;
        let mut back = TopicPartitionList::with_capacity(1);
        back.add_partition_offset(&state.topic, state.partition, Offset::Offset(*offset))?;
        consumer.incremental_assign(&back)?;
    }
    Ok(())
}

/// With the eager protocol the only way to restart one partition is a new
/// assignment of all: every other partition continues at the offset after
/// its last fetched record (the poll loop drops anything fetched twice), a
/// stopped one at its decided offset. Partitions stopped by the fail policy
/// are left out. Only done when librdkafka's assignment is still the one
/// the library knows (no rebalance slipped in).
fn restart_eager<C: Consumer<X>, X: ConsumerContext>(
    consumer: &C,
    assignment: &Assignment,
    restarts: &[(Arc<PartitionState>, i64)],
) -> rdkafka::error::KafkaResult<()> {
    let assigned = assignment.assigned();
    let ours: BTreeSet<(String, i32)> = assigned
        .iter()
        .map(|s| (s.topic.to_string(), s.partition))
        .collect();
    let theirs: BTreeSet<(String, i32)> = consumer
        .assignment()?
        .elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect();
    // Partitions left out earlier (failed) are in ours, not theirs.
    let failed: BTreeSet<(String, i32)> = assigned
        .iter()
        .filter(|s| s.health.is_failed())
        .map(|s| (s.topic.to_string(), s.partition))
        .collect();
    if !theirs.is_subset(&ours) || !ours.difference(&theirs).all(|k| failed.contains(k)) {
        return Err(rdkafka::error::KafkaError::Canceled);
    }
    let mut tpl = TopicPartitionList::with_capacity(assigned.len());
    for s in &assigned {
        if s.revoked.load(Ordering::Acquire) || s.health.is_failed() {
            continue;
        }
        let offset = match restarts.iter().find(|(r, _)| Arc::ptr_eq(r, s)) {
            Some((_, o)) => Offset::Offset(*o),
            None => s
                .tracker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .position()
                .map(Offset::Offset)
                .unwrap_or_else(|| s.health.start()),
        };
        tpl.add_partition_offset(&s.topic, s.partition, offset)?;
    }
    consumer.assign(&tpl)
}

/// Records an anomaly: on the partition (for health), in the metrics, and
/// in an ERROR log naming the partition and the offsets. `running` is
/// `true` when the offset was the consumer's own position (it fell behind
/// while running) rather than the group's committed offset.
pub(crate) fn report(hub: &HealthHub, state: &PartitionState, a: OffsetAnomaly, running: bool) {
    hub.count_anomaly(state.metrics.attributes(), &a.kind);
    let policy = a.policy.as_str();
    let (topic, partition) = (&*state.topic, state.partition);
    let source = if running {
        "position"
    } else {
        "committed offset"
    };
    match a.kind {
        AnomalyKind::RetentionOverrun {
            offset,
            log_start,
            high_watermark,
            lost,
        } => {
            let then = match a.resumed_at {
                Some(r) if r == log_start => "resuming at the log start offset".to_owned(),
                Some(r) => format!(
                    "resuming at the high watermark {r} by policy: {} more records skipped",
                    r - log_start
                ),
                None => "the partition is stopped (retention_overrun_policy = fail)".to_owned(),
            };
            tracing::error!(
                topic,
                partition,
                committed_offset = offset,
                log_start_offset = log_start,
                high_watermark,
                lost,
                policy,
                "retention overrun on {topic}:{partition}: {lost} records were deleted by retention before this group processed them ({source} {offset}, log start offset {log_start}); {then}"
            );
        }
        AnomalyKind::AboveHighWatermark {
            offset,
            log_start,
            high_watermark,
        } => {
            let then = match a.resumed_at {
                Some(r) => format!("resuming at offset {r} (log start {log_start})"),
                None => "the partition is stopped (retention_overrun_policy = fail)".to_owned(),
            };
            tracing::error!(
                topic,
                partition,
                committed_offset = offset,
                log_start_offset = log_start,
                high_watermark,
                policy,
                "{source} {offset} of {topic}:{partition} is above the high watermark {high_watermark} (was the topic deleted and recreated?); {then}"
            );
        }
        AnomalyKind::LogTruncation {
            offset,
            truncated_to,
            high_watermark,
        } => {
            let gone = offset - truncated_to;
            let then = match a.resumed_at {
                Some(r) if r == truncated_to => format!(
                    "resuming at {r}: the records now at offsets {truncated_to}..{offset} are new and are handled"
                ),
                Some(r) => format!(
                    "resuming at the high watermark {r} by policy: the records at {truncated_to}..{r} are skipped"
                ),
                None => "the partition is stopped (retention_overrun_policy = fail)".to_owned(),
            };
            tracing::error!(
                topic,
                partition,
                committed_offset = offset,
                truncated_to,
                high_watermark,
                gone,
                policy,
                "log of {topic}:{partition} truncated below the {source} {offset} (an unclean leader election?): the leader's log diverges from the records this group read at offset {truncated_to}, and the {gone} records it read at {truncated_to}..{offset} are no longer in the log; {then}"
            );
        }
        AnomalyKind::NoCommittedOffset => {
            tracing::error!(
                topic,
                partition,
                "{topic}:{partition} has no committed offset and auto.offset.reset is `error`: the partition is not consumed"
            );
        }
    }
    state.health.set_anomaly(a);
    if a.resumed_at.is_none() {
        state.health.fail();
    }
}

mod decision;
mod plan;
pub(crate) mod truncation;

use decision::{Decision, READ_TIMEOUT, classify};
pub(crate) use plan::Plan;

#[cfg(test)]
mod tests;
