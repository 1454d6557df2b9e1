//! What the engine shows the health evaluation: the [`EngineView`] and
//! [`PartitionView`] implementations, and the health thread, which
//! evaluates every 100 ms (so stall clocks and lag samples are exact to
//! that) and restarts partitions whose fetcher librdkafka stopped on an
//! out-of-range offset.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use rdkafka::consumer::{Consumer, ConsumerContext};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::engine::assignment::Assignment;
use crate::engine::offset_reset::{self, Resets};
use crate::engine::partition::PartitionState;
use crate::health::EVAL_TICK;
use crate::health::hub::HealthHub;
use crate::health::partition::PartitionHealth;
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

    fn blocked_since_ms(&self) -> Option<i64> {
        match self.blocked_since.load(Ordering::Acquire) {
            0 => None,
            ms => Some(ms as i64),
        }
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
        .name("fresh-consumer-health".into())
        .spawn(move || {
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
                let _ = health.evaluate();
            }
        })
        .map(|_| ())
}
