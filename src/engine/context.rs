//! librdkafka's callbacks: rebalances, errors, logs and statistics.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol, StreamConsumer,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Statistics, TopicPartitionList};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::engine::commit::CommitCmd;
use crate::engine::offset_reset::Plan;
use crate::engine::partition::PartitionState;
use crate::engine::queue::QueueHandle;
use crate::engine::shared::Engine;
use crate::engine::worker::{self, SplitQueue};
use crate::handler::Handler;
use crate::health::hub::RebalanceKind;

/// The engine's consumer: rust-rdkafka's stream consumer with the
/// engine's callbacks.
pub(crate) type Kafka<H> = rdkafka::consumer::StreamConsumer<Ctx<H>>;

/// The consumer context: owns nothing but handles to the shared state.
pub(crate) struct Ctx<H: Handler> {
    pub(crate) engine: Arc<Engine>,
    pub(crate) handler: Arc<H>,
    /// The consumer itself (set once it exists), to split each newly
    /// assigned partition's queue off the main queue.
    pub(crate) consumer: OnceLock<Weak<StreamConsumer<Ctx<H>>>>,
    /// Partition queues split for the assignment being applied, until its
    /// workers take them. Never kept past `start_workers`: a split queue holds
    /// the consumer, and the consumer holds this context.
    pub(crate) queues: Mutex<Vec<SplitFor<H>>>,
    /// Secret property values (and parts of them) that librdkafka's log
    /// lines and errors must not carry into ours; longest first.
    pub(crate) secrets: Vec<String>,
}

/// A split queue and the partition it belongs to.
type SplitFor<H> = ((String, i32), SplitQueue<Ctx<H>>);

impl<H: Handler> ClientContext for Ctx<H> {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::librdkafka_log::log(&self.secrets, level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let reason = crate::librdkafka_log::redact(&self.secrets, reason);
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::PollExceeded) => {
                // Also returned by the consumer's poll, where it is counted once.
                self.engine.health.connection.poll_exceeded();
                tracing::debug!(%reason, "librdkafka: max.poll.interval.ms exceeded");
            }
            Some(RDKafkaErrorCode::AutoOffsetReset) => {
                // A partition's offset is out of range and librdkafka
                // (auto.offset.reset=error) stopped its fetcher; the reason
                // does not say which partition. The library handles it.
                self.engine.resets.offset_reset_error();
                tracing::debug!(%reason, "librdkafka: offset out of range");
            }
            _ => tracing::warn!(error = %error, %reason, "librdkafka error"),
        }
    }

    fn stats(&self, statistics: Statistics) {
        let e = &self.engine;
        crate::engine::stats::ingest(&e.assignment, &e.health, &e.resets, &statistics);
    }
}

impl<H: Handler> ConsumerContext for Ctx<H> {
    /// rdkafka's default rebalance, plus the library's own steps: on
    /// assign, each partition's start offset is decided before librdkafka
    /// fetches (see `crate::engine::offset_reset`); on revoke, running handlers finish and
    /// completed offsets are committed before the partitions go.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let health = &self.engine.health;
        // A restart of stopped partitions (the health thread, rare) never
        // interleaves with this; it may hold the lock for a few broker
        // round trips, so wait for it off the async worker.
        let _assigning = if this_thread() == Thread::MultiThreadWorker {
            tokio::task::block_in_place(|| health.assign_lock())
        } else {
            health.assign_lock()
        };
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let started = Instant::now();
                let plan = if self.engine.assignment.closing.load(Ordering::Acquire) {
                    None
                } else {
                    self.plan(consumer, tpl)
                };
                if let Some(plan) = &plan {
                    plan.apply(tpl);
                }
                if self.engine.settings.split_partition_queues
                    && !self.engine.assignment.closing.load(Ordering::Acquire)
                {
                    self.split_queues(tpl);
                }
                // Workers start before librdkafka fetches: records find
                // their worker waiting, instead of arriving while 1,000
                // workers start (tens of milliseconds, `benches/scale.rs`).
                self.start_workers(tpl, plan.as_ref());
                let assigned = {
                    // librdkafka queues its resume of the partitions it
                    // paused for this rebalance inside the call: no worker's
                    // seek may interleave (see `Assignment::assigning`).
                    let _assigning = self.engine.assignment.assigning();
                    let assigned = if cooperative {
                        consumer.incremental_assign(tpl)
                    } else {
                        consumer.assign(tpl)
                    };
                    // Queued behind the fetch start, before the first
                    // fetch: a log truncated below the committed offset
                    // stops the partition (`__AUTO_OFFSET_RESET`), and the
                    // health thread finds where it diverges.
                    if assigned.is_ok()
                        && let Some(v) = plan.as_ref().and_then(|p| p.validations())
                        && let Err(e) = consumer.seek_partitions(v, Duration::ZERO)
                    {
                        tracing::warn!(error = %e, "validating the committed offsets against the leaders failed");
                    }
                    assigned
                };
                if let Err(e) = assigned {
                    tracing::warn!(error = %e, partitions = %describe(tpl), "assigning partitions failed");
                }
                health.rebalance(RebalanceKind::Assigned);
                self.engine
                    .counters
                    .rebalances
                    .fetch_add(1, Ordering::Relaxed);
                if !self.engine.assignment.closing.load(Ordering::Acquire) {
                    // A partition paused before a revoke must not stay
                    // paused now.
                    if let Err(e) = consumer.resume(tpl) {
                        tracing::debug!(error = %e, "resume after assignment");
                    }
                    // `took`: the library's part of the rebalance (reading
                    // committed offsets and watermarks, starting a worker
                    // per partition, assigning).
                    let took = started.elapsed();
                    tracing::info!(partitions = %describe(tpl), count = tpl.count(), ?took, "partitions assigned");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let lost = consumer.assignment_lost();
                health.rebalance(if lost {
                    RebalanceKind::Lost
                } else {
                    RebalanceKind::Revoked
                });
                self.on_revoke(tpl, lost);
                let unassigned = {
                    let _assigning = self.engine.assignment.assigning();
                    if cooperative {
                        consumer.incremental_unassign(tpl)
                    } else {
                        consumer.unassign()
                    }
                };
                if let Err(e) = unassigned {
                    tracing::warn!(error = %e, "unassigning partitions failed");
                }
            }
            other => {
                let code: RDKafkaErrorCode = other.into();
                tracing::warn!(error = %code, "rebalance error");
                // As rdkafka's default: give the assignment up.
                let _assigning = self.engine.assignment.assigning();
                let _ = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
            }
        }
        // The member id is read on an assignment only, never while closing:
        // `rd_kafka_memberid` asks the group's queue and waits for the answer
        // without a timeout, and on close the group can terminate between
        // our unassign and that question; librdkafka then drops the queued
        // question unanswered and the call never returns (seen on the mock
        // with `group.protocol=consumer`: the close thread hung in it in 2
        // of ~490 handovers under load). A revoke never changes the member
        // id anyway: a member that rejoins as a new member is seen at its
        // next assignment.
        if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS
            && !self.engine.assignment.closing.load(Ordering::Acquire)
        {
            health.member_id(member_id(consumer));
        }
    }
}

/// The group member id (`rd_kafka_memberid`), if the member has one.
fn member_id<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<String> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live client handle; `rd_kafka_memberid` returns a
    // NUL-terminated string allocated by librdkafka (or NULL), which we copy
    // and then free with `rd_kafka_mem_free` as its documentation requires.
    unsafe {
        let p = rdkafka::bindings::rd_kafka_memberid(rk);
        if p.is_null() {
            return None;
        }
        let id = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        rdkafka::bindings::rd_kafka_mem_free(rk, p.cast());
        Some(id)
    }
}

/// Where the rebalance callback runs, which decides how it may wait.
#[derive(PartialEq, Eq)]
enum Thread {
    /// A worker of a multi-thread runtime: wait inside `block_in_place`.
    MultiThreadWorker,
    /// The thread of a current-thread runtime: handlers cannot run while we
    /// wait, so waiting for them is pointless.
    CurrentThreadRuntime,
    /// Any other thread.
    Plain,
}

fn this_thread() -> Thread {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => Thread::MultiThreadWorker,
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::CurrentThread => Thread::CurrentThreadRuntime,
        _ => Thread::Plain,
    }
}

impl<H: Handler> Ctx<H> {
    fn on_revoke(&self, tpl: &TopicPartitionList, lost: bool) {
        let engine = &self.engine;
        engine.counters.rebalances.fetch_add(1, Ordering::Relaxed);
        let states: Vec<Arc<PartitionState>> = {
            let elements = tpl.elements();
            let revoked: std::collections::HashSet<(&str, i32)> = elements
                .iter()
                .map(|e| (e.topic(), e.partition()))
                .collect();
            let map = engine.assignment.partitions();
            map.iter()
                .filter(|((t, p), _)| revoked.contains(&(&**t, *p)))
                .map(|(_, s)| Arc::clone(s))
                .collect()
        };
        if engine.assignment.closing.load(Ordering::Acquire) {
            engine
                .assignment
                .remove(&states, engine.settings.revoke_timeout);
            return;
        }
        for s in &states {
            s.stop.cancel();
        }
        let thread = this_thread();
        let work = || {
            let started = Instant::now();
            let mut still_running = 0;
            if thread != Thread::CurrentThreadRuntime {
                let deadline = started + engine.settings.revoke_timeout;
                still_running = states
                    .iter()
                    .filter(|s| !s.wait_stopped_blocking(deadline))
                    .count();
            }
            let mut committed = RevokeCommit::Done(Ok(0));
            if !lost {
                let (reply, rx) = std::sync::mpsc::channel();
                let cmd = CommitCmd::Sync {
                    only: Some(states.clone()),
                    reply,
                };
                committed = match engine.committer.send(cmd) {
                    Ok(()) => match rx.recv_timeout(engine.settings.revoke_timeout) {
                        Ok(r) => RevokeCommit::Done(r),
                        // Sent (or queued behind another commit), not
                        // answered within the bound: it may still land.
                        Err(_) => RevokeCommit::InFlight,
                    },
                    Err(_) => RevokeCommit::Done(Err(KafkaError::Canceled)),
                };
            }
            engine
                .assignment
                .remove(&states, engine.settings.revoke_timeout);
            (still_running, committed, started.elapsed())
        };
        let (still_running, committed, took) = if thread == Thread::MultiThreadWorker {
            tokio::task::block_in_place(work)
        } else {
            work()
        };
        let partitions = describe(tpl);
        if lost {
            tracing::warn!(%partitions, still_running, ?took, "partitions lost (the member was removed from the group); nothing was committed for them");
        } else {
            match committed {
                RevokeCommit::Done(Ok(_)) => {
                    tracing::info!(%partitions, still_running, ?took, "partitions revoked; completed offsets committed")
                }
                RevokeCommit::Done(Err(e)) => {
                    tracing::warn!(%partitions, still_running, ?took, error = %e, "partitions revoked; committing their completed offsets failed, they will be redelivered")
                }
                RevokeCommit::InFlight => {
                    tracing::warn!(
                        %partitions,
                        still_running,
                        ?took,
                        revoke_timeout = ?engine.settings.revoke_timeout,
                        "partitions revoked; the commit of their completed offsets did not finish within revoke_timeout and is still in flight: the broker applies it if it arrives before the group's next generation (classic protocol) or member epoch (consumer protocol) and fences it after, so it cannot move the next owner's committed offset back; records it does not cover are redelivered"
                    )
                }
            }
        }
    }

    /// Decides where each newly assigned partition starts (blocking reads
    /// of committed offsets and watermarks, off the async runtime's worker
    /// where possible).
    fn plan(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) -> Option<Plan> {
        let cfg = self.engine.health.config()?;
        let work = || Plan::make(consumer, tpl, cfg.retention_policy, cfg.new_partitions);
        if this_thread() == Thread::MultiThreadWorker {
            tokio::task::block_in_place(work)
        } else {
            work()
        }
    }

    /// Splits each partition of a new assignment off the main queue, before
    /// librdkafka starts fetching it, so its records go to its own queue
    /// and its worker reads them there (no hand-over by the poll loop).
    /// librdkafka keeps the partition's queue un-forwarded across later
    /// fetch starts (the application-set forward, `RD_KAFKA_Q_F_FWD_APP`),
    /// so the library's own restarts of the partition keep it too. A
    /// partition whose queue cannot be split is handed over by the poll
    /// loop as before.
    fn split_queues(&self, tpl: &TopicPartitionList) {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut queues = Vec::with_capacity(tpl.count());
        for e in tpl.elements() {
            match consumer.split_partition_queue(e.topic(), e.partition()) {
                Some(q) => {
                    let handle = QueueHandle::new(consumer.client(), e.topic(), e.partition());
                    queues.push((
                        (e.topic().to_owned(), e.partition()),
                        SplitQueue { handle, queue: q },
                    ));
                }
                None => tracing::warn!(
                    topic = e.topic(),
                    partition = e.partition(),
                    "could not split the partition's queue; the poll loop hands its records over"
                ),
            }
        }
        *self.queues.lock().unwrap_or_else(|e| e.into_inner()) = queues;
    }

    /// Creates each newly assigned partition's state and starts its worker
    /// (on the queue `split_queues` split for it, if any), before the
    /// partitions are handed to librdkafka's assign.
    fn start_workers(&self, tpl: &TopicPartitionList, plan: Option<&Plan>) {
        let engine = &self.engine;
        let mut queues =
            std::mem::take(&mut *self.queues.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .peekable();
        if engine.assignment.closing.load(Ordering::Acquire) {
            return;
        }
        for (i, e) in tpl.elements().iter().enumerate() {
            // `split_queues` went through the same list in the same order:
            // the next queue is this partition's unless its split failed.
            let queue = match queues.peek() {
                Some(((t, p), _)) if t == e.topic() && *p == e.partition() => {
                    queues.next().map(|(_, q)| q)
                }
                _ => None,
            };
            let (state, worker) =
                worker::spawn(engine, &self.handler, e.topic(), e.partition(), queue);
            if let Some(entry) = plan.and_then(|p| p.entry(i, e.topic(), e.partition())) {
                state
                    .tracker
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .set_start_epoch(entry.start_epoch());
                state.health.planned(
                    plan.map_or_else(Instant::now, |p| p.at),
                    entry.assign_offset(),
                    entry.decision.estimate,
                    entry.committed,
                    entry.lo.zip(entry.hi),
                );
                if let Some(kind) = entry.decision.anomaly {
                    crate::engine::offset_reset::report(
                        &engine.health,
                        &state,
                        crate::health::partition::OffsetAnomaly {
                            kind,
                            policy: engine
                                .health
                                .config()
                                .map(|c| c.retention_policy)
                                .unwrap_or_default(),
                            resumed_at: match entry.decision.start {
                                Some(rdkafka::Offset::Offset(o)) => Some(o),
                                _ => None,
                            },
                            at: Instant::now(),
                        },
                        false,
                    );
                }
            }
            engine.assignment.insert(state);
            worker.start();
        }
    }
}

/// How a revoke's commit of its completed offsets ended.
enum RevokeCommit {
    /// Answered within `revoke_timeout` (or never sent).
    Done(Result<usize, KafkaError>),
    /// Not answered within `revoke_timeout`: still in flight.
    InFlight,
}

fn describe(tpl: &TopicPartitionList) -> String {
    tpl.elements()
        .iter()
        .map(|e| format!("{}:{}", e.topic(), e.partition()))
        .collect::<Vec<_>>()
        .join(",")
}
