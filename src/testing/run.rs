//! A consumer run in a task of its own, and waits with a deadline.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::TestingError;
use crate::consumer::FreshConsumer;
use crate::handler::Handler;
use crate::health::HealthHandle;
use crate::summary::RunSummary;

/// How often the waits look again.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// A consumer running in a task of its own until [`stop`](Self::stop),
/// started by [`spawn`].
#[derive(Debug)]
pub struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<RunSummary, crate::error::RunError>>,
    health: HealthHandle,
}

/// Spawns `consumer.run_until(..)` on the current tokio runtime with a
/// shutdown signal of its own, which [`Running::stop`] fires.
///
/// # Panics
/// Outside a tokio runtime (as `tokio::spawn` does).
pub fn spawn<H: Handler>(consumer: FreshConsumer<H>) -> Running {
    let health = consumer.health_handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
    Running { stop, task, health }
}

impl Running {
    /// The consumer's health, readable while it runs (partitions assigned,
    /// lag, objectives).
    pub fn health(&self) -> &HealthHandle {
        &self.health
    }

    /// Whether the run ended by itself (it does only on an error, which
    /// [`stop`](Self::stop) returns).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Signals shutdown and returns the run's summary (the consumer commits
    /// what it completed and leaves the group first).
    ///
    /// # Errors
    /// [`TestingError::Run`] when the run failed (a configuration error, a
    /// fatal Kafka error), [`TestingError::Task`] when its task panicked.
    pub async fn stop(self) -> Result<RunSummary, TestingError> {
        self.stop.cancel();
        self.task
            .await
            .map_err(TestingError::Task)?
            .map_err(TestingError::Run)
    }
}

/// Waits until `cond` returns `true`, looking every 10 ms.
///
/// # Errors
/// [`TestingError::Timeout`] naming `what` when it has not within
/// `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, cond: F) -> Result<(), TestingError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, what, cond, |done| *done)
        .await
        .map(|_| ())
}

/// Reads `probe` every 10 ms until `accept` takes its value, and returns
/// that value.
///
/// # Errors
/// [`TestingError::Timeout`] naming `what`, with the last value read, when
/// `accept` took none within `timeout`.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut probe: F,
    accept: impl Fn(&T) -> bool,
) -> Result<T, TestingError>
where
    T: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let value = probe().await;
        if accept(&value) {
            return Ok(value);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(TestingError::Timeout {
                what: what.to_owned(),
                timeout,
                last: format!("{value:?}"),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
