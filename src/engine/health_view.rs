//! What the engine shows the health evaluation: the [`EngineView`] and
//! [`PartitionView`] implementations, and the health thread, which
//! evaluates the partitions that are not quiet every 100 ms and all of them
//! once a second (so stall clocks and lag samples are exact to that; see
//! `health::judge::full_evaluation_every`), restarts partitions whose fetcher librdkafka stopped on an
//! out-of-range offset, refreshes the watermarks of partitions that do
//! not fetch (see [`refresh_watermarks`]), and reads the assigned
//! partitions' replication from the cluster's metadata (see
//! [`refresh_replication`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use crate::engine::assignment::Assignment;
use crate::engine::offset_reset::{self, Resets};
use crate::engine::partition::PartitionState;
use crate::engine::shared::Engine;
use crate::health::EVAL_TICK;
use crate::health::Replication;
use crate::health::hub::HealthHub;
use crate::health::partition::{PartitionHealth, lock};
use crate::health::view::{EngineView, PartitionView, Progress};

impl EngineView for Engine {
    fn partitions(&self) -> Vec<Arc<dyn PartitionView>> {
        self.assignment
            .partitions()
            .values()
            .map(|s| Arc::clone(s) as Arc<dyn PartitionView>)
            .collect()
    }

    fn assignment_size(&self) -> usize {
        self.assignment.partitions().len()
    }

    fn poll_gap(&self) -> Option<Duration> {
        (!self.poll_clock.is_suspended()).then(|| self.poll_clock.gap().1)
    }
}

impl PartitionView for PartitionState {
    fn topic(&self) -> &Arc<str> {
        &self.topic
    }

    fn partition(&self) -> i32 {
        self.partition
    }

    fn health(&self) -> &PartitionHealth {
        &self.health
    }

    fn attributes(&self) -> &[KeyValue] {
        self.metrics.attributes()
    }

    fn progress(&self) -> Progress {
        // With a split queue, records fetched but not yet taken by the
        // worker wait in librdkafka's queue: the position is past them.
        // Read under the tracker's lock, under which the worker updates both.
        let tr = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = self.waiting.load(Ordering::Relaxed) as i64;
        Progress {
            position: tr.position().map(|p| p + waiting),
            head: tr.head_entry(),
            completed: tr.committable(),
        }
    }

    fn committed(&self) -> Option<i64> {
        Some(self.committed.load(Ordering::Acquire)).filter(|&c| c >= 0)
    }

    fn is_assigned(&self) -> bool {
        !self.revoked.load(Ordering::Acquire)
    }

    fn waiting_for_due_time(&self) -> bool {
        self.held.load(Ordering::Acquire) > 0
    }

    fn paused_by_application(&self) -> bool {
        self.controls.is_paused(&self.topic, self.partition)
    }

    fn due_delay(&self) -> Duration {
        self.due_delay
    }

    fn blocked(&self) -> Option<crate::summary::BlockedRecord> {
        if self.blocked_since.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.blocked_record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Starts the health thread. It ends when the consumer shuts down.
pub(crate) fn spawn<C, X>(
    consumer: Weak<C>,
    assignment: Arc<Assignment>,
    health: Arc<HealthHub>,
    resets: Arc<Resets>,
    shutdown: CancellationToken,
) -> std::io::Result<()>
where
    C: Consumer<X> + Send + Sync + 'static,
    X: ConsumerContext + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    resets.connect(tx);
    std::thread::Builder::new()
        .name("fresh-health".into())
        .spawn(move || {
            let mut refreshed_at = Instant::now();
            let mut full_at = Instant::now();
            let mut replication_at: Option<Instant> = None;
            loop {
                match rx.recv_timeout(EVAL_TICK) {
                    Ok(request) => {
                        if let Some(c) = consumer.upgrade()
                            && !shutdown.is_cancelled()
                        {
                            offset_reset::resolve(&*c, &assignment, &health, &resets, request);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                }
                if shutdown.is_cancelled() {
                    return;
                }
                if let Some(every) = health
                    .config()
                    .and_then(|c| c.statistics_interval)
                    .map(|i| i.max(MIN_REFRESH_INTERVAL))
                    && refreshed_at.elapsed() >= every
                    && let Some(c) = consumer.upgrade()
                {
                    refreshed_at = Instant::now();
                    refresh_watermarks(&*c, &assignment, every);
                }
                // Every 30 s, and within 5 s of a new assignment.
                let unread = || {
                    assignment
                        .assigned()
                        .iter()
                        .any(|s| s.health.replication().is_none())
                };
                if replication_at.is_none_or(|at| {
                    at.elapsed() >= REPLICATION_EVERY
                        || (at.elapsed() >= REPLICATION_RETRY && unread())
                }) && let Some(c) = consumer.upgrade()
                {
                    replication_at = Some(Instant::now());
                    refresh_replication(&*c, &assignment);
                }
                let full = health
                    .full_evaluation_every()
                    .is_none_or(|every| full_at.elapsed() >= every);
                if full {
                    full_at = Instant::now();
                }
                health.tick(full);
            }
        })
        .map(|_| ())
}

/// Refreshes of a partition that does not fetch are at least this far apart
/// (and at least one statistics interval).
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// The most partitions one refresh queries (the stalest first); the rest
/// wait for the next round.
const MAX_REFRESH_PARTITIONS: usize = 256;

/// How long one refresh waits for the brokers.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the assigned partitions' replication is read.
const REPLICATION_EVERY: Duration = Duration::from_secs(30);

/// How soon a partition whose replication is not known yet (newly
/// assigned, or the last read failed) is read again.
const REPLICATION_RETRY: Duration = Duration::from_secs(5);

/// Reads the replication of every assigned partition (replicas, in-sync
/// replicas, the cluster's brokers) with one Metadata request per assigned
/// topic, for [`HealthReason::UnderReplicated`](crate::health::HealthReason::UnderReplicated);
/// logs each partition that turns under-replicated, and back.
pub(crate) fn refresh_replication<C, X>(consumer: &C, assignment: &Assignment)
where
    C: Consumer<X>,
    X: ConsumerContext + 'static,
{
    let states = assignment.assigned();
    let mut topics: Vec<&Arc<str>> = states.iter().map(|s| &s.topic).collect();
    topics.sort();
    topics.dedup();
    for topic in topics {
        let md = match consumer.fetch_metadata(Some(topic), REFRESH_TIMEOUT) {
            Ok(md) => md,
            Err(e) => {
                tracing::debug!(error = %e, %topic, "reading the partitions' replication failed; retried in 5 s");
                continue;
            }
        };
        let brokers = md.brokers().len() as u32;
        let Some(t) = md.topics().iter().find(|t| t.name() == &**topic) else {
            continue;
        };
        for p in t.partitions() {
            let now = Replication {
                replicas: p.replicas().len() as u32,
                in_sync: p.isr().len() as u32,
                brokers,
            };
            for s in states
                .iter()
                .filter(|s| s.topic == *topic && s.partition == p.id())
            {
                let was = s.health.replication();
                s.health.set_replication(now);
                let was_under = was.is_some_and(|r| r.is_under_replicated());
                if now.is_under_replicated() && (!was_under || was != Some(now)) {
                    tracing::warn!(
                        topic = %s.topic,
                        partition = s.partition,
                        replicas = now.replicas,
                        in_sync = now.in_sync,
                        brokers = now.brokers,
                        "partition under-replicated: consumption goes on from its leader, but one more broker loss can stop it, and acks=all writes (outputs, dead letters) are refused below min.insync.replicas"
                    );
                } else if was_under && !now.is_under_replicated() {
                    tracing::info!(topic = %s.topic, partition = s.partition, replicas = now.replicas, "partition fully replicated again");
                }
            }
        }
    }
}

/// Karafka's "lag compensation": librdkafka's statistics carry the
/// watermarks of a partition's last Fetch response, so a partition that
/// does not fetch (paused by backpressure, or its fetch queue full while a
/// worker is slow or blocked) reports the lag of the moment it stopped.
/// Every `every` (the statistics interval, at least 1 s), the partitions
/// with records fetched but not completed whose readable end has not moved
/// for `every` are queried with two batched ListOffsets requests (latest
/// and earliest, one per partition leader, at the consumer's isolation
/// level: the latest is the last stable offset under `read_committed`), at
/// most [`MAX_REFRESH_PARTITIONS`] per round. A caught-up partition fetches
/// (librdkafka long-polls it), so it is never queried.
pub(crate) fn refresh_watermarks<C, X>(consumer: &C, assignment: &Assignment, every: Duration)
where
    C: Consumer<X>,
    X: ConsumerContext + 'static,
{
    let now = Instant::now();
    let mut stale: Vec<(Instant, Arc<PartitionState>)> = assignment
        .assigned()
        .into_iter()
        // Records fetched but not completed: the head of the line exists.
        .filter(|s| s.progress().head.is_some() && lock(&s.health.stats).needs_refresh(now, every))
        .map(|s| {
            let since = lock(&s.health.stats).end_changed_at().unwrap_or(now);
            (since, s)
        })
        .collect();
    if stale.is_empty() {
        return;
    }
    stale.sort_by_key(|(since, _)| *since);
    stale.truncate(MAX_REFRESH_PARTITIONS);
    let list = |offset: Offset| {
        let mut tpl = TopicPartitionList::with_capacity(stale.len());
        for (_, s) in &stale {
            let _ = tpl.add_partition_offset(&s.topic, s.partition, offset);
        }
        tpl
    };
    let query = |offset: Offset| match consumer.offsets_for_times(list(offset), REFRESH_TIMEOUT) {
        Ok(tpl) => Some(tpl),
        Err(e) => {
            tracing::debug!(error = %e, "refreshing the watermarks of partitions that do not fetch failed; retried next round");
            None
        }
    };
    let Some(ends) = query(Offset::End) else {
        return;
    };
    let starts = query(Offset::Beginning);
    let at = Instant::now();
    for (_, s) in &stale {
        let offset_of = |tpl: &TopicPartitionList| {
            tpl.find_partition(&s.topic, s.partition)
                .filter(|e| e.error().is_ok())
                .and_then(|e| match e.offset() {
                    Offset::Offset(n) if n >= 0 => Some(n),
                    _ => None,
                })
        };
        if let Some(end) = offset_of(&ends) {
            let lo = starts.as_ref().and_then(offset_of);
            lock(&s.health.stats).refresh(at, lo, end);
        }
    }
}
