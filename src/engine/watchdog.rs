//! The poll-interval watchdog: a thread that watches the gap since the poll
//! loop last polled librdkafka, and warns while the gap is still open.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::instruments::Instruments;

/// The longest the poll loop waits in one poll on an idle topic before it
/// polls again. Polling on a tick keeps the poll-interval signal honest: a
/// long gap means the loop could not run, not that the topic was quiet. The
/// tick is shortened to a quarter of the warning threshold when that is less.
pub(crate) const IDLE_POLL_TICK: Duration = Duration::from_secs(1);

/// When the poll loop last polled librdkafka.
pub(crate) struct PollClock {
    origin: Instant,
    /// Nanoseconds since `origin` of the last poll: the start of the current
    /// gap, which identifies it.
    last_poll: AtomicU64,
    /// The start (`last_poll`) of the last gap a warning was counted for,
    /// [`NO_GAP`] before the first. Keyed by the gap rather than a flag the
    /// poll loop resets, so a poll racing the watchdog's check can neither
    /// lose the next gap's warning nor count one gap twice.
    warned_gap: AtomicU64,
    /// The loop stopped polling on purpose (shutdown): no warnings.
    suspended: AtomicBool,
}

/// [`PollClock::warned_gap`] before any warning.
const NO_GAP: u64 = u64::MAX;

/// Gaps below this are not recorded in the poll-interval histogram.
const MIN_RECORDED_GAP: Duration = Duration::from_millis(1);

impl PollClock {
    pub(crate) fn new() -> Self {
        PollClock {
            origin: Instant::now(),
            last_poll: AtomicU64::new(0),
            warned_gap: AtomicU64::new(NO_GAP),
            suspended: AtomicBool::new(false),
        }
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Called by the poll loop right before each poll. Returns the gap since
    /// the previous poll.
    pub(crate) fn polled(&self, instruments: &Instruments) -> Duration {
        let now = self.now_ns();
        let prev = self.last_poll.swap(now, Ordering::AcqRel);
        let gap = Duration::from_nanos(now.saturating_sub(prev));
        if gap >= MIN_RECORDED_GAP {
            instruments.poll_interval(gap);
        }
        gap
    }

    /// The current gap: its start (see [`PollClock::warned_gap`]) and length.
    pub(crate) fn gap(&self) -> (u64, Duration) {
        let start = self.last_poll.load(Ordering::Acquire);
        (
            start,
            Duration::from_nanos(self.now_ns().saturating_sub(start)),
        )
    }

    /// `true` the first time it is called for the gap starting at `start`.
    fn first_warning_for(&self, start: u64) -> bool {
        self.warned_gap.swap(start, Ordering::AcqRel) != start
    }

    pub(crate) fn suspend(&self) {
        self.suspended.store(true, Ordering::Release);
    }

    /// `true` once the loop stopped polling on purpose (shutdown).
    pub(crate) fn is_suspended(&self) -> bool {
        self.suspended.load(Ordering::Acquire)
    }
}

/// Starts the watchdog thread. It stops when `stop` is set.
pub(crate) fn spawn(
    clock: Arc<PollClock>,
    instruments: Instruments,
    threshold: Duration,
    max_poll_interval: Duration,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let check = (threshold / 20).clamp(Duration::from_millis(5), Duration::from_millis(250));
    std::thread::Builder::new()
        .name("fresh-watchdog".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                std::thread::park_timeout(check);
                let c = &*clock;
                if c.suspended.load(Ordering::Acquire) {
                    continue;
                }
                let (start, gap) = c.gap();
                if gap >= threshold && c.first_warning_for(start) {
                    instruments.poll_warning();
                    tracing::warn!(
                        gap = ?gap,
                        max_poll_interval_ms = max_poll_interval.as_millis() as u64,
                        "the poll loop has not polled librdkafka for {:.1} s ({:.0} % of max.poll.interval.ms): is a handler blocking the async runtime? past 100 % the member leaves the group",
                        gap.as_secs_f64(),
                        100.0 * gap.as_secs_f64() / max_poll_interval.as_secs_f64(),
                    );
                }
            }
        })
}
