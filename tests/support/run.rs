//! The one set of runner helpers: a consumer run spawned with a shutdown
//! signal, stopped and awaited for its summary.
#![allow(dead_code)]

use std::fmt;
use std::time::{Duration, Instant};

use fresh_consumer::{
    FreshConsumer, Handler, RunError, RunSummary,
    health::{HealthHandle, HealthSnapshot},
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::wait::wait_for;

/// A consumer running in a task of its own until [`Running::stop`].
pub struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<RunSummary, RunError>>,
    /// The consumer's health, readable while it runs.
    pub health: HealthHandle,
}

/// Spawns `consumer.run_until(..)` with a shutdown signal of its own.
pub fn start<H: Handler>(consumer: FreshConsumer<H>) -> Running {
    let health = consumer.health_handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
    Running { stop, task, health }
}

impl Running {
    /// Signals shutdown and returns what `run_until` returned.
    pub async fn finish(self) -> Result<RunSummary, RunError> {
        self.stop.cancel();
        self.task.await.expect("run_until task")
    }

    /// Signals shutdown and returns the summary; panics if `run_until`
    /// failed.
    pub async fn stop(self) -> RunSummary {
        self.finish().await.expect("run_until")
    }

    /// Signals shutdown, and asserts that `run_until` returned its summary
    /// within `limit`; returns the summary and how long shutdown took.
    /// `what` names the situation in the output.
    pub async fn stop_within(self, limit: Duration, what: &str) -> (RunSummary, Duration) {
        let started = Instant::now();
        let summary = self.stop().await;
        let took = started.elapsed();
        eprintln!("{what}: shutdown took {took:?}: {summary:?}");
        assert!(
            took <= limit,
            "{what}: shutdown took {took:?}, more than {limit:?}"
        );
        (summary, took)
    }

    /// Whether `run_until` has returned (without being told to stop, it
    /// returns only on an error).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// Waits until the health snapshot satisfies `cond`, and returns it; at the
/// deadline, panics with the last snapshot's report.
pub async fn wait_snapshot(
    health: &HealthHandle,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&HealthSnapshot) -> bool,
) -> HealthSnapshot {
    /// Shows a snapshot's text report where a wait shows `Debug`.
    struct Report(HealthSnapshot);
    impl fmt::Debug for Report {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "\n{}", self.0)
        }
    }
    let probe = || std::future::ready(Report(health.snapshot()));
    wait_for(timeout, what, probe, |r| cond(&r.0)).await.0
}

/// Asserts that partition 0 of `topic` stays `ok` with lag 0 and the member
/// healthy (no reason on the partition) for `period`, checking every 100 ms.
#[allow(dead_code)]
pub async fn assert_caught_up_for(health: &HealthHandle, topic: &str, period: Duration) {
    let until = Instant::now() + period;
    while Instant::now() < until {
        let s = health.snapshot();
        let p = s.partition(topic, 0).expect("partition 0");
        assert_eq!(
            (p.status, p.lag, s.status),
            (
                fresh_consumer::health::PartitionStatus::Ok,
                Some(0),
                fresh_consumer::health::HealthStatus::Healthy
            ),
            "{s}"
        );
        assert!(p.reasons.is_empty(), "{s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
