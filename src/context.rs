//! librdkafka's callbacks: rebalances, errors and logs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::TopicPartitionList;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::commit::CommitCmd;
use crate::handler::Handler;
use crate::partition::PartitionState;
use crate::shared::Shared;

/// The consumer context: owns nothing but handles to the shared state.
pub(crate) struct Ctx<H> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) handler: Arc<H>,
    /// Secret property values (and parts of them) that librdkafka's log
    /// lines and errors must not carry into ours; longest first.
    pub(crate) secrets: Vec<String>,
}

/// `text` with every occurrence of a secret replaced by `[redacted]`.
fn redact<'a>(secrets: &[String], text: &'a str) -> std::borrow::Cow<'a, str> {
    let mut out = std::borrow::Cow::Borrowed(text);
    for s in secrets {
        if out.contains(s.as_str()) {
            out = std::borrow::Cow::Owned(out.replace(s.as_str(), "[redacted]"));
        }
    }
    out
}

impl<H: Handler> ClientContext for Ctx<H> {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let message = redact(&self.secrets, message);
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", facility = fac, "{message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let reason = redact(&self.secrets, reason);
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PollExceeded) {
            // Also returned by the consumer's poll, where it is counted once.
            tracing::debug!(%reason, "librdkafka: max.poll.interval.ms exceeded");
            return;
        }
        tracing::warn!(error = %error, %reason, "librdkafka error");
    }
}

impl<H: Handler> ConsumerContext for Ctx<H> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => self.on_revoke(tpl, consumer.assignment_lost()),
            Rebalance::Assign(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.on_assign(consumer, tpl);
        }
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
        let shared = &self.shared;
        shared.counters.rebalances.fetch_add(1, Ordering::Relaxed);
        let states: Vec<Arc<PartitionState>> = {
            let map = shared.partitions();
            tpl.elements()
                .iter()
                .filter_map(|e| {
                    map.iter()
                        .find(|((t, p), _)| &**t == e.topic() && *p == e.partition())
                        .map(|(_, s)| Arc::clone(s))
                })
                .collect()
        };
        if shared.closing.load(Ordering::Acquire) {
            shared.remove(&states, shared.revoke_timeout);
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
                let deadline = started + shared.revoke_timeout;
                still_running = states
                    .iter()
                    .filter(|s| !s.wait_stopped_blocking(deadline))
                    .count();
            }
            let mut committed = Ok(0);
            if !lost {
                let (reply, rx) = std::sync::mpsc::channel();
                let cmd = CommitCmd::Sync {
                    only: Some(states.clone()),
                    reply,
                };
                committed = match shared.commit_tx.send(cmd) {
                    Ok(()) => match rx.recv_timeout(shared.revoke_timeout) {
                        Ok(r) => r,
                        Err(_) => Err(KafkaError::Canceled),
                    },
                    Err(_) => Err(KafkaError::Canceled),
                };
            }
            shared.remove(&states, shared.revoke_timeout);
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
                Ok(_) => {
                    tracing::info!(%partitions, still_running, ?took, "partitions revoked; completed offsets committed")
                }
                Err(e) => {
                    tracing::warn!(%partitions, still_running, ?took, error = %e, "partitions revoked; committing their completed offsets failed, they will be redelivered")
                }
            }
        }
    }

    fn on_assign(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let shared = &self.shared;
        shared.counters.rebalances.fetch_add(1, Ordering::Relaxed);
        if shared.closing.load(Ordering::Acquire) {
            return;
        }
        for e in tpl.elements() {
            let state = PartitionState::spawn(shared, &self.handler, e.topic(), e.partition());
            shared.insert(state);
        }
        // A partition paused before a revoke must not stay paused now.
        if let Err(e) = consumer.resume(tpl) {
            tracing::debug!(error = %e, "resume after assignment");
        }
        tracing::info!(partitions = %describe(tpl), "partitions assigned");
    }
}

fn describe(tpl: &TopicPartitionList) -> String {
    tpl.elements()
        .iter()
        .map(|e| format!("{}:{}", e.topic(), e.partition()))
        .collect::<Vec<_>>()
        .join(",")
}
