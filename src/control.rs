//! The control handle: pausing and resuming a topic or a partition of a
//! running consumer from the application
//! ([`FreshConsumer::control_handle`](crate::FreshConsumer::control_handle)).
//!
//! A paused partition's worker hands no record to the handler until the
//! partition is resumed; it goes on where it stopped, at the next record in
//! offset order. The member stays in the group (the poll loop goes on
//! polling, so heartbeats and `max.poll.interval.ms` are not at stake),
//! librdkafka stops fetching the partition once its queue holds
//! `max_buffered_records` records, and health reports the partition `ok`
//! with [`HealthReason::PausedByApplication`](crate::health::HealthReason::PausedByApplication),
//! never stalled, however long the pause. A pause is kept by topic and
//! partition, not by assignment: a partition of a paused topic assigned
//! after a rebalance starts paused, and a paused partition handed back to
//! this member is still paused.
//!
//! A rate limit ([`RateLimit`], [`ControlHandle::set_rate_limit`]) caps the
//! records handed to the handler per second, for the whole consumer or for
//! each partition. Workers wait for their turn (a token bucket holding
//! 100 ms of records, at least one), never the poll loop, so a limit however
//! low never lets `max.poll.interval.ms` be exceeded; a changed or cleared
//! limit applies at once, also to records already waiting.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Pauses and resumes topics and partitions of a running consumer. Taken
/// from the builder with
/// [`FreshConsumer::control_handle`](crate::FreshConsumer::control_handle)
/// before `run_until`; cheap to clone, usable from any thread.
///
/// A partition is paused while its topic is paused **or** it is paused on
/// its own: [`resume_partition`](Self::resume_partition) does not resume a
/// partition of a paused topic, and [`resume_topic`](Self::resume_topic)
/// leaves partitions paused on their own paused.
///
/// ```no_run
/// use fresh_consumer::{FreshConsumer, Record};
/// # async fn handle(_r: Record) -> Result<(), std::io::Error> { Ok(()) }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let consumer = FreshConsumer::new(handle)
///     .bootstrap_servers("localhost:9092")
///     .group_id("mailer")
///     .topics(["emails"]);
/// let control = consumer.control_handle();
/// tokio::spawn(async move {
///     // The mail provider is down: stop sending until it is back.
///     control.pause_topic("emails").expect("subscribed and running");
///     // ...
///     control.resume_topic("emails").expect("subscribed and running");
/// });
/// consumer.run_until(fresh_consumer::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ControlHandle {
    controls: Arc<Controls>,
}

/// Why a [`ControlHandle`] call was refused. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// `run_until` has not started the consumer yet (the subscribed topics
    /// are known only then).
    #[error("the consumer has not started")]
    NotStarted,
    /// The consumer's run has ended.
    #[error("the consumer has stopped")]
    Stopped,
    /// The topic is not one the consumer subscribes to (nor a retry tier of
    /// one).
    #[error("topic `{topic}` is not subscribed")]
    NotSubscribed {
        /// The topic named.
        topic: String,
    },
    /// A rate limit of zero, below zero, or not a finite number of records
    /// per second.
    #[error("invalid rate limit: {rate} records per second (must be finite and above 0)")]
    InvalidRate {
        /// The rate given.
        rate: String,
    },
}

/// A cap on the records handed to the handler per second
/// ([`ControlHandle::set_rate_limit`]). A batch handler's call counts as
/// its records.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum RateLimit {
    /// At most this many records per second over all partitions of the
    /// consumer (this member; each member of a group has its own).
    PerConsumer(f64),
    /// At most this many records per second for each partition.
    PerPartition(f64),
}

impl RateLimit {
    /// [`RateLimit::PerConsumer`]: `records_per_second` over the consumer.
    pub fn per_consumer(records_per_second: f64) -> Self {
        RateLimit::PerConsumer(records_per_second)
    }

    /// [`RateLimit::PerPartition`]: `records_per_second` for each partition.
    pub fn per_partition(records_per_second: f64) -> Self {
        RateLimit::PerPartition(records_per_second)
    }

    fn rate(self) -> f64 {
        match self {
            RateLimit::PerConsumer(r) | RateLimit::PerPartition(r) => r,
        }
    }
}

impl ControlHandle {
    /// Pauses every partition of `topic`, assigned now or later. Pausing a
    /// paused topic does nothing.
    ///
    /// # Errors
    /// [`ControlError::NotSubscribed`], [`ControlError::NotStarted`],
    /// [`ControlError::Stopped`].
    pub fn pause_topic(&self, topic: &str) -> Result<(), ControlError> {
        self.controls
            .change(topic, |s| s.topics.insert(topic.to_owned()))
    }

    /// Resumes `topic` (its partitions paused on their own stay paused).
    /// Resuming a topic that is not paused does nothing.
    ///
    /// # Errors
    /// As [`pause_topic`](Self::pause_topic).
    pub fn resume_topic(&self, topic: &str) -> Result<(), ControlError> {
        self.controls.change(topic, |s| s.topics.remove(topic))
    }

    /// Pauses partition `partition` of `topic` (whether or not it is
    /// assigned to this member now).
    ///
    /// # Errors
    /// As [`pause_topic`](Self::pause_topic).
    pub fn pause_partition(&self, topic: &str, partition: i32) -> Result<(), ControlError> {
        self.controls.change(topic, |s| {
            s.partitions.insert((topic.to_owned(), partition))
        })
    }

    /// Resumes a partition paused with
    /// [`pause_partition`](Self::pause_partition) (it stays paused while its
    /// topic is).
    ///
    /// # Errors
    /// As [`pause_topic`](Self::pause_topic).
    pub fn resume_partition(&self, topic: &str, partition: i32) -> Result<(), ControlError> {
        self.controls.change(topic, |s| {
            s.partitions.remove(&(topic.to_owned(), partition))
        })
    }

    /// Whether partition `partition` of `topic` is paused now (by its topic
    /// or on its own).
    pub fn is_paused(&self, topic: &str, partition: i32) -> bool {
        self.controls.is_paused(topic, partition)
    }

    /// Caps the records handed to the handler per second from now on
    /// (replacing any earlier limit). None by default.
    ///
    /// # Errors
    /// [`ControlError::InvalidRate`] for a rate that is not finite and
    /// above 0; [`ControlError::NotStarted`], [`ControlError::Stopped`].
    pub fn set_rate_limit(&self, limit: RateLimit) -> Result<(), ControlError> {
        let rate = limit.rate();
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ControlError::InvalidRate {
                rate: rate.to_string(),
            });
        }
        self.controls.change_limit(Some(limit))
    }

    /// Removes the rate limit.
    ///
    /// # Errors
    /// [`ControlError::NotStarted`], [`ControlError::Stopped`].
    pub fn clear_rate_limit(&self) -> Result<(), ControlError> {
        self.controls.change_limit(None)
    }

    /// The rate limit in force, if any.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.controls.lock().limit
    }
}

/// The pauses, shared by the handles, the workers and health.
#[derive(Debug)]
pub(crate) struct Controls {
    state: Mutex<State>,
    /// Whether anything is paused, and whether a rate limit is set: read
    /// without the lock on every record (the hot path), written under it.
    any_paused: AtomicBool,
    limited: AtomicBool,
    /// Bumped at every change; workers waiting in a pause watch it.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    topics: BTreeSet<String>,
    partitions: BTreeSet<(String, i32)>,
    /// The subscribed topics while the consumer runs (`None` before).
    subscribed: Option<Vec<String>>,
    stopped: bool,
    limit: Option<RateLimit>,
    /// The token buckets: when the next record may go (a record may go
    /// early by up to the bucket's burst), for the consumer, and per
    /// partition.
    consumer_next: Option<Instant>,
    partition_next: BTreeMap<(String, i32), Option<Instant>>,
}

/// One token bucket's turn for `records` records at `rate` records per
/// second at `now`: `None` when they may go (the bucket's next turn moves
/// on by their cost), else how long to wait before asking again. `next` is
/// when the next record may go; the bucket holds 100 ms of records (at
/// least one), so a record may go up to that much before it.
fn take_turn(
    next: &mut Option<Instant>,
    rate: f64,
    records: usize,
    now: Instant,
) -> Option<Duration> {
    // The bucket's room beyond the record going now.
    let burst = Duration::from_secs_f64((0.1 - 1.0 / rate).max(0.0));
    let cost = Duration::from_secs_f64(records as f64 / rate);
    let at = match *next {
        Some(t) => t.saturating_duration_since(now).saturating_sub(burst),
        None => Duration::ZERO,
    };
    if !at.is_zero() {
        return Some(at);
    }
    // A bucket left idle fills up to its burst, no more.
    let from = next.map_or(now, |t| t.max(now));
    *next = Some(from + cost);
    None
}

impl Default for Controls {
    fn default() -> Self {
        Controls {
            state: Mutex::default(),
            any_paused: AtomicBool::new(false),
            limited: AtomicBool::new(false),
            changed: watch::Sender::new(0),
        }
    }
}

impl Controls {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle on these controls.
    pub(crate) fn handle(self: &Arc<Self>) -> ControlHandle {
        ControlHandle {
            controls: Arc::clone(self),
        }
    }

    /// The run started, subscribed to `topics` (a `^` pattern admits any
    /// topic).
    pub(crate) fn started(&self, topics: Vec<String>) {
        self.lock().subscribed = Some(topics);
    }

    /// The run ended: the handles refuse from now on, and the pauses wake.
    pub(crate) fn stopped(&self) {
        self.lock().stopped = true;
        self.changed.send_modify(|g| *g += 1);
    }

    fn change_limit(&self, limit: Option<RateLimit>) -> Result<(), ControlError> {
        {
            let mut s = self.lock();
            if s.stopped {
                return Err(ControlError::Stopped);
            }
            if s.subscribed.is_none() {
                return Err(ControlError::NotStarted);
            }
            s.limit = limit;
            s.consumer_next = None;
            s.partition_next.clear();
            self.limited.store(limit.is_some(), Ordering::Release);
        }
        self.changed.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Whether a rate limit is set: without one, [`acquire`](Self::acquire)
    /// returns at once (callers skip timing it).
    pub(crate) fn is_limited(&self) -> bool {
        self.limited.load(Ordering::Acquire)
    }

    /// Takes `records` records' turn under the rate limit for partition
    /// `partition` of `topic`, waiting for it (a changed limit applies to a
    /// wait under way), unless `stop` is cancelled first. Returns `false`
    /// when stopped; at once `true` without a limit.
    pub(crate) async fn acquire(
        &self,
        topic: &str,
        partition: i32,
        records: usize,
        stop: &CancellationToken,
    ) -> bool {
        if !self.limited.load(Ordering::Acquire) {
            return true;
        }
        let mut rx = self.changed.subscribe();
        loop {
            rx.borrow_and_update();
            let wait = {
                let mut s = self.lock();
                let Some(limit) = s.limit else {
                    return true;
                };
                let next = match limit {
                    RateLimit::PerConsumer(_) => &mut s.consumer_next,
                    RateLimit::PerPartition(_) => s
                        .partition_next
                        .entry((topic.to_owned(), partition))
                        .or_insert(None),
                };
                match take_turn(next, limit.rate(), records, Instant::now()) {
                    None => return true,
                    Some(wait) => wait,
                }
            };
            tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                _ = rx.changed() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn change(&self, topic: &str, f: impl FnOnce(&mut State) -> bool) -> Result<(), ControlError> {
        let changed = {
            let mut s = self.lock();
            if s.stopped {
                return Err(ControlError::Stopped);
            }
            let Some(subscribed) = &s.subscribed else {
                return Err(ControlError::NotStarted);
            };
            if !subscribed.iter().any(|t| t == topic || t.starts_with('^')) {
                return Err(ControlError::NotSubscribed {
                    topic: topic.to_owned(),
                });
            }
            let changed = f(&mut s);
            self.any_paused.store(
                !(s.topics.is_empty() && s.partitions.is_empty()),
                Ordering::Release,
            );
            changed
        };
        if changed {
            self.changed.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// Whether partition `partition` of `topic` is paused now.
    pub(crate) fn is_paused(&self, topic: &str, partition: i32) -> bool {
        if !self.any_paused.load(Ordering::Acquire) {
            return false;
        }
        let s = self.lock();
        s.topics.contains(topic) || s.partitions.contains(&(topic.to_owned(), partition))
    }

    /// Waits while partition `partition` of `topic` is paused, unless `stop`
    /// is cancelled first. Returns `false` when stopped; at once `true`
    /// when not paused.
    pub(crate) async fn wait_while_paused(
        &self,
        topic: &str,
        partition: i32,
        stop: &CancellationToken,
    ) -> bool {
        let mut rx = self.changed.subscribe();
        loop {
            rx.borrow_and_update();
            if !self.is_paused(topic, partition) {
                return true;
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                r = rx.changed() => {
                    if r.is_err() {
                        return true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_paused_by_its_topic_or_on_its_own() {
        let c = Arc::new(Controls::default());
        let h = c.handle();
        assert_eq!(h.pause_topic("a"), Err(ControlError::NotStarted));
        c.started(vec!["a".into(), "b".into()]);
        assert_eq!(
            h.pause_topic("c"),
            Err(ControlError::NotSubscribed { topic: "c".into() })
        );
        h.pause_topic("a").unwrap();
        h.pause_partition("b", 1).unwrap();
        assert!(h.is_paused("a", 7) && h.is_paused("b", 1) && !h.is_paused("b", 0));
        h.pause_partition("a", 2).unwrap();
        h.resume_partition("a", 2).unwrap();
        assert!(h.is_paused("a", 2), "its topic still pauses it");
        h.pause_partition("a", 3).unwrap();
        h.resume_topic("a").unwrap();
        assert!(!h.is_paused("a", 2) && h.is_paused("a", 3));
        c.stopped();
        assert_eq!(h.resume_topic("a"), Err(ControlError::Stopped));
    }

    #[test]
    fn a_token_bucket_lets_its_rate_through_after_a_burst_of_100_ms() {
        let t0 = Instant::now();
        let mut next = None;
        let ms = |n| Duration::from_millis(n);
        // 100 records/s: a burst of 10 (100 ms) at once.
        let mut went = 0;
        while take_turn(&mut next, 100.0, 1, t0).is_none() {
            went += 1;
        }
        assert_eq!(went, 10);
        // Then one every 10 ms.
        assert_eq!(take_turn(&mut next, 100.0, 1, t0), Some(ms(10)));
        assert_eq!(take_turn(&mut next, 100.0, 1, t0 + ms(10)), None);
        assert!(take_turn(&mut next, 100.0, 1, t0 + ms(10)).is_some());
        // Idle for a minute: it saves up no more than the burst.
        let later = t0 + Duration::from_secs(60);
        let mut went = 0;
        while take_turn(&mut next, 100.0, 1, later).is_none() {
            went += 1;
        }
        assert_eq!(went, 10);
        // A batch of 50 goes when its turn comes and costs 500 ms (less
        // the 90 ms of burst beyond one record).
        let mut next = None;
        assert_eq!(take_turn(&mut next, 100.0, 50, t0), None);
        assert_eq!(take_turn(&mut next, 100.0, 1, t0), Some(ms(410)));
    }

    #[tokio::test]
    async fn rates_are_checked_and_a_changed_limit_applies_to_a_waiting_record() {
        let c = Arc::new(Controls::default());
        let h = c.handle();
        assert_eq!(
            h.set_rate_limit(RateLimit::per_consumer(10.0)),
            Err(ControlError::NotStarted)
        );
        c.started(vec!["a".into()]);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                h.set_rate_limit(RateLimit::per_partition(bad)),
                Err(ControlError::InvalidRate { .. })
            ));
        }
        assert_eq!(h.rate_limit(), None);
        // One record an hour: the second waits, until the limit goes.
        h.set_rate_limit(RateLimit::per_consumer(1.0 / 3600.0))
            .unwrap();
        let stop = CancellationToken::new();
        assert!(c.acquire("a", 0, 1, &stop).await);
        let waiter = {
            let (c, stop) = (Arc::clone(&c), stop.clone());
            tokio::spawn(async move { c.acquire("a", 0, 1, &stop).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        h.clear_rate_limit().unwrap();
        assert!(waiter.await.unwrap());
        assert!(c.acquire("a", 1, 1_000_000, &stop).await, "no limit");
    }

    #[tokio::test]
    async fn a_paused_wait_ends_at_the_resume_or_the_stop() {
        let c = Arc::new(Controls::default());
        c.started(vec!["a".into()]);
        let h = c.handle();
        let stop = CancellationToken::new();
        assert!(c.wait_while_paused("a", 0, &stop).await);
        h.pause_partition("a", 0).unwrap();
        let waiter = {
            let (c, stop) = (Arc::clone(&c), stop.clone());
            tokio::spawn(async move { c.wait_while_paused("a", 0, &stop).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        h.resume_partition("a", 0).unwrap();
        assert!(waiter.await.unwrap());
        h.pause_topic("a").unwrap();
        let waiter = {
            let (c, stop) = (Arc::clone(&c), stop.clone());
            tokio::spawn(async move { c.wait_while_paused("a", 0, &stop).await })
        };
        stop.cancel();
        assert!(!waiter.await.unwrap());
    }
}
