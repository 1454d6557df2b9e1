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
//! with [`HealthReason::PausedByApplication`](crate::HealthReason::PausedByApplication),
//! never stalled, however long the pause. A pause is kept by topic and
//! partition, not by assignment: a partition of a paused topic assigned
//! after a rebalance starts paused, and a paused partition handed back to
//! this member is still paused.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

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
/// consumer.run_until(async { tokio::signal::ctrl_c().await.ok(); }).await?;
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
}

/// The pauses, shared by the handles, the workers and health.
#[derive(Debug)]
pub(crate) struct Controls {
    state: Mutex<State>,
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
}

impl Default for Controls {
    fn default() -> Self {
        Controls {
            state: Mutex::default(),
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
            f(&mut s)
        };
        if changed {
            self.changed.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// Whether partition `partition` of `topic` is paused now.
    pub(crate) fn is_paused(&self, topic: &str, partition: i32) -> bool {
        let s = self.lock();
        if s.topics.is_empty() && s.partitions.is_empty() {
            return false;
        }
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
