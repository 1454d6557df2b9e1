//! The one set of waits with a deadline. Tests wait for a condition, never a
//! fixed time: each wait polls, and panics (or returns `None`) with what it
//! waited for when its deadline passes.
#![allow(dead_code)]

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// The usual deadline of a wait in the Kafka tests.
pub const WAIT: Duration = Duration::from_secs(15);

/// How often the waits look again.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Waits until `cond` holds, or panics at the deadline.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, what, cond, |done| *done).await;
}

/// Reads `probe` until `accept` takes its value, and returns that value; at
/// the deadline, panics with what it waited for and the last value read.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut probe: F,
    accept: impl Fn(&T) -> bool,
) -> T
where
    T: Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let value = probe().await;
        if accept(&value) {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}; last seen: {value:#?}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Polls `probe` until it returns `Some` or `timeout` has passed (it is
/// always tried at least once, and once more at the end); does not panic.
pub async fn poll_until<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
    }
}

/// Runs `future`, panicking if it takes longer than `timeout`: for steps that
/// must not hang.
pub async fn within<F: Future>(timeout: Duration, what: &str, future: F) -> F::Output {
    match tokio::time::timeout(timeout, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what} did not finish within {timeout:?}"),
    }
}
