//! How a failing record is retried in place: the backoff, and the errors
//! that are never retried ([`permanent`]).

use std::error::Error;
use std::fmt;
use std::time::Duration;

use crate::handler::BoxError;

/// Default initial backoff of [`RetryPolicy::backoff`] and [`FreshConsumer::retry_backoff`](crate::FreshConsumer::retry_backoff).
pub const DEFAULT_RETRY_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Default maximum backoff of [`RetryPolicy::backoff`] and [`FreshConsumer::retry_backoff`](crate::FreshConsumer::retry_backoff).
pub const DEFAULT_RETRY_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Default for [`RetryPolicy::max_attempts`].
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default for [`RetryPolicy::jitter`].
pub const DEFAULT_JITTER: f64 = 0.2;

/// How a failing record is retried.
///
/// The delay before attempt `n + 1` is `initial * 2^(n-1)`, capped at `max`,
/// then reduced by a random share of up to `jitter` (so retries of many
/// records do not hit a recovering dependency in lockstep).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct RetryPolicy {
    pub(crate) max_attempts: u32,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff: DEFAULT_RETRY_INITIAL_BACKOFF,
            max_backoff: DEFAULT_RETRY_MAX_BACKOFF,
            jitter: DEFAULT_JITTER,
        }
    }
}

impl RetryPolicy {
    /// The default policy: 5 attempts, backoff from 100 ms doubling to 30 s,
    /// jitter 0.2.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handler attempts per record before [`OnExhausted`](crate::failure::OnExhausted) decides, the first
    /// attempt included. Defaults to 5. Must be at least 1.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Backoff between attempts: starts at `initial`, doubles, capped at
    /// `max`. Defaults to 100 ms and 30 s. `initial` must be more than zero
    /// and at most `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// The share of each delay that is randomised away, in `[0, 1]`: a delay
    /// `d` becomes a value in `[d * (1 - jitter), d]`. Defaults to 0.2.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay after failed attempt `attempt` (1-based), before jitter.
    pub(crate) fn base_delay(&self, attempt: u32) -> Duration {
        backoff(self.initial_backoff, self.max_backoff, attempt)
    }

    /// The delay after failed attempt `attempt`, with jitter applied.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let d = self.base_delay(attempt);
        if self.jitter <= 0.0 {
            return d;
        }
        d.mul_f64(1.0 - self.jitter * fastrand::f64())
    }

    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if self.max_attempts == 0 {
            return Err("max_attempts must be at least 1");
        }
        if self.initial_backoff.is_zero() || self.initial_backoff > self.max_backoff {
            return Err("initial backoff must be more than zero and at most max");
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err("jitter must be in [0, 1]");
        }
        Ok(())
    }
}

/// A handler error that must not be retried (a malformed payload, a record
/// that can never succeed): the record goes straight to [`OnExhausted`](crate::failure::OnExhausted).
///
/// Build one with [`permanent`]; any other error is transient and retried.
#[derive(Debug)]
pub struct Permanent(BoxError);

impl Permanent {
    /// The wrapped error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl fmt::Display for Permanent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for Permanent {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

/// Marks `error` permanent: the record is not retried.
///
/// ```
/// use fresh_consumer::{BoxError, Record, permanent};
///
/// async fn handle(record: Record) -> Result<(), BoxError> {
///     let Some(payload) = record.payload() else {
///         return Err(permanent("tombstone where an order was expected"));
///     };
///     let _order = std::str::from_utf8(payload).map_err(permanent)?;
///     Ok(())
/// }
/// # fn assert_handler<H: fresh_consumer::Handler>(_: H) {}
/// # assert_handler(handle);
/// ```
pub fn permanent(error: impl Into<BoxError>) -> BoxError {
    Box::new(Permanent(error.into()))
}

/// `true` when `error` was marked with [`permanent`].
pub(crate) fn is_permanent(error: &BoxError) -> bool {
    error.downcast_ref::<Permanent>().is_some()
}

/// Exponential backoff: `initial * 2^(attempt-1)`, capped at `max`.
pub(crate) fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_errors_are_recognised_and_keep_their_message() {
        let e = permanent(std::io::Error::other("bad json"));
        assert!(is_permanent(&e));
        assert_eq!(e.to_string(), "bad json");
        let t: BoxError = "timeout".into();
        assert!(!is_permanent(&t));
    }

    #[test]
    fn jittered_delays_stay_in_range() {
        let p = RetryPolicy::new()
            .backoff(Duration::from_millis(100), Duration::from_secs(1))
            .jitter(0.5);
        for attempt in 1..10 {
            let base = p.base_delay(attempt);
            for _ in 0..100 {
                let d = p.delay(attempt);
                assert!(d <= base && d >= base / 2, "{d:?} vs {base:?}");
            }
        }
        assert_eq!(p.base_delay(20), Duration::from_secs(1));
    }

    #[test]
    fn invalid_policies_are_rejected() {
        assert!(RetryPolicy::new().max_attempts(0).validate().is_err());
        assert!(RetryPolicy::new().jitter(1.5).validate().is_err());
        assert!(
            RetryPolicy::new()
                .backoff(Duration::from_secs(2), Duration::from_secs(1))
                .validate()
                .is_err()
        );
        RetryPolicy::new().validate().unwrap();
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        assert_eq!(backoff(i, m, 1), Duration::from_millis(100));
        assert_eq!(backoff(i, m, 2), Duration::from_millis(200));
        assert_eq!(backoff(i, m, 4), Duration::from_millis(800));
        assert_eq!(backoff(i, m, 5), m);
        assert_eq!(backoff(i, m, 200), m);
    }
}
