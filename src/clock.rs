//! Wall-clock time read off the monotonic clock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock time derived from the monotonic clock, so that one clock read
/// after a handler returns serves both the processing duration and the
/// event age (the success path reads the clock once per record instead of
/// three times).
///
/// The offset between the two clocks is re-read at most every
/// [`WallClock::REANCHOR`]: a step of the system clock (NTP, an operator)
/// shows in the event age within that time.
pub(crate) struct WallClock {
    origin: Instant,
    /// Nanoseconds since the Unix epoch at `origin`, per the last anchoring.
    epoch_ns_at_origin: AtomicI64,
    /// Nanoseconds since `origin` of the last anchoring.
    anchored_at: AtomicU64,
}

impl WallClock {
    /// How often the wall clock is read again.
    pub(crate) const REANCHOR: Duration = Duration::from_secs(1);

    pub(crate) fn new() -> Self {
        let clock = WallClock {
            origin: Instant::now(),
            epoch_ns_at_origin: AtomicI64::new(0),
            anchored_at: AtomicU64::new(0),
        };
        clock.anchor();
        clock
    }

    fn anchor(&self) {
        let at = Instant::now();
        let wall = SystemTime::now();
        let since = at.saturating_duration_since(self.origin).as_nanos() as i64;
        let epoch_ns = match wall.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i64,
            Err(e) => -(e.duration().as_nanos() as i64),
        };
        self.epoch_ns_at_origin
            .store(epoch_ns - since, Ordering::Relaxed);
        self.anchored_at.store(since as u64, Ordering::Relaxed);
    }

    /// The wall-clock time at `at`, an `Instant` the caller read, in
    /// nanoseconds since the Unix epoch.
    pub(crate) fn unix_nanos(&self, at: Instant) -> i64 {
        let since = at.saturating_duration_since(self.origin).as_nanos() as i64;
        let anchored = self.anchored_at.load(Ordering::Relaxed) as i64;
        if since.saturating_sub(anchored) > Self::REANCHOR.as_nanos() as i64 {
            // Racing re-anchorings are harmless: each stores a fresh reading.
            self.anchor();
        }
        self.epoch_ns_at_origin.load(Ordering::Relaxed) + since
    }
}

#[cfg(test)]
mod tests {
    use super::WallClock;
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    #[test]
    fn derived_wall_time_matches_the_system_clock() {
        let unix_ns = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
        let clock = WallClock::new();
        let at = Instant::now();
        let derived = clock.unix_nanos(at);
        let wall = unix_ns(SystemTime::now());
        assert!(
            (wall - derived).abs() < 50_000_000,
            "derived {derived} vs wall {wall}"
        );
        // An instant later than the last anchoring by more than REANCHOR
        // re-reads the wall clock and still lands on the same time line.
        let later = at + WallClock::REANCHOR * 2;
        let step = clock.unix_nanos(later) - derived;
        let reanchor = WallClock::REANCHOR.as_nanos() as i64;
        assert!(step > reanchor && step < 3 * reanchor, "{step}");
    }
}
