//! What happens to a record whose attempts ran out: the policy, and the
//! storm guard that turns dead-lettering into blocking while too many
//! records fail.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::failure::dead_letter::DeadLetterWriter;
use crate::failure::dead_letter::config::DeadLetter;
use crate::failure::retry_topics::{RetryTopics, TierOf, TierPlan};
use crate::metrics::instruments::Instruments;

/// What happens to a record whose attempts ran out. See the [module
/// docs](crate::failure).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum OnExhausted {
    /// Stop the partition at the record and keep retrying at the capped
    /// backoff; nothing after it is handled or committed until it succeeds.
    #[default]
    Block,
    /// Park the record in a dead-letter topic, then move on.
    DeadLetter(DeadLetter),
    /// Give the record up and commit past it. The record is **lost** to this
    /// consumer group; counted and logged at ERROR.
    SkipAndCommitPast,
    /// Move the record to delay tiers (retry topics) without holding its
    /// partition, then to the dead-letter topic. See [`RetryTopics`].
    RetryTopics(RetryTopics),
}

/// Defaults of [`StormGuard`].
pub const DEFAULT_STORM_MAX_FAILURE_RATIO: f64 = 0.5;
/// Default window of [`StormGuard`].
pub const DEFAULT_STORM_WINDOW: Duration = Duration::from_secs(60);
/// Default minimum sample of [`StormGuard`].
pub const DEFAULT_STORM_MIN_RECORDS: u64 = 20;

/// Stops dead-lettering when too many recent records fail: a bad deploy or a
/// dead dependency would otherwise shovel a whole topic into the dead-letter
/// topic. While tripped, records whose attempts run out are blocked instead
/// of dead-lettered ([`OnExhausted::Block`](crate::failure::OnExhausted::Block) behaviour) until the failure share
/// falls again.
///
/// The failure share is `failed / (failed + succeeded)` over the last
/// `window`, counting records (not attempts) of all partitions; a record
/// counts as failed when its first attempt failed. It is only judged once at
/// least `min_records` records finished in the window; until then the last
/// judgement stands, so a tripped guard clears only on evidence
/// (`min_records` records finished in a window with a failure share at or
/// below the threshold), never because the window emptied while it kept
/// every partition blocked.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct StormGuard {
    pub(crate) max_failure_ratio: f64,
    pub(crate) window: Duration,
    pub(crate) min_records: u64,
    pub(crate) enabled: bool,
}

impl Default for StormGuard {
    fn default() -> Self {
        StormGuard {
            max_failure_ratio: DEFAULT_STORM_MAX_FAILURE_RATIO,
            window: DEFAULT_STORM_WINDOW,
            min_records: DEFAULT_STORM_MIN_RECORDS,
            enabled: true,
        }
    }
}

impl StormGuard {
    /// The default guard: trips above 50 % failing records over 60 s, once
    /// at least 20 records finished.
    pub fn new() -> Self {
        Self::default()
    }

    /// No guard: dead-letter whatever the failure share.
    pub fn disabled() -> Self {
        StormGuard {
            enabled: false,
            ..Self::default()
        }
    }

    /// Trip when more than this share of recent records failed. In `(0, 1]`;
    /// defaults to 0.5.
    pub fn max_failure_ratio(mut self, ratio: f64) -> Self {
        self.max_failure_ratio = ratio;
        self
    }

    /// The window the share is measured over. Defaults to 60 s.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The least number of finished records in the window before the share
    /// is judged. Defaults to 20.
    pub fn min_records(mut self, records: u64) -> Self {
        self.min_records = records;
        self
    }
}

/// The exhausted-record decision of a run: the policy, the dead-letter
/// writer (with [`OnExhausted::DeadLetter`](crate::failure::OnExhausted::DeadLetter)) and the storm guard's state.
pub(crate) struct Exhausted {
    on_exhausted: OnExhausted,
    /// The dead-letter writer, with [`OnExhausted::DeadLetter`] and
    /// [`OnExhausted::RetryTopics`] (which writes the tiers with it too).
    dead_letter: Option<DeadLetterWriter>,
    /// The tier topics, with [`OnExhausted::RetryTopics`].
    tiers: TierPlan,
    guard: StormGuard,
    /// Samples of (time, records succeeded, records failed), oldest first;
    /// taken by the committer thread about once per commit interval.
    samples: Mutex<VecDeque<(Instant, u64, u64)>>,
    active: AtomicBool,
    instruments: Instruments,
}

/// The decision for a record whose attempts ran out.
pub(crate) enum Decision<'a> {
    Skip,
    DeadLetter(&'a DeadLetterWriter),
    /// Write the record to retry tier `tier` (from 1), due `delay` after
    /// the write.
    RetryTier {
        writer: &'a DeadLetterWriter,
        tier: usize,
        delay: Duration,
    },
    /// Block the partition; `storm` when the storm guard turned a
    /// dead-letter decision into this.
    Block {
        storm: bool,
    },
}

impl Exhausted {
    pub(crate) fn new(
        on_exhausted: OnExhausted,
        dead_letter: Option<DeadLetterWriter>,
        tiers: TierPlan,
        guard: StormGuard,
        instruments: Instruments,
    ) -> Self {
        Exhausted {
            on_exhausted,
            dead_letter,
            tiers,
            guard,
            samples: Mutex::new(VecDeque::from([(Instant::now(), 0, 0)])),
            active: AtomicBool::new(false),
            instruments,
        }
    }

    /// The retry tier `topic` is, if it is one.
    pub(crate) fn tier_of(&self, topic: &str) -> Option<&TierOf> {
        self.tiers.tier_of(topic)
    }

    /// The source topic whose records `topic` holds (itself unless it is a
    /// retry tier).
    pub(crate) fn source_of<'a>(&'a self, topic: &'a str) -> &'a str {
        self.tiers.source_of(topic)
    }

    /// The dead-letter topic for records read from `topic`, if records are
    /// dead-lettered.
    pub(crate) fn dead_letter_topic_for(&self, topic: &str) -> Option<String> {
        self.dead_letter
            .as_ref()
            .map(|w| w.topic_for(self.source_of(topic)))
    }

    /// The dead-letter writer, with [`OnExhausted::DeadLetter`] and
    /// [`OnExhausted::RetryTopics`].
    pub(crate) fn writer(&self) -> Option<&DeadLetterWriter> {
        self.dead_letter.as_ref()
    }

    /// The retry-topic policy, if that is the policy.
    pub(crate) fn retry_topics(&self) -> Option<&RetryTopics> {
        match &self.on_exhausted {
            OnExhausted::RetryTopics(rt) => Some(rt),
            _ => None,
        }
    }

    /// Handler attempts in place for a record of `topic` under the
    /// retry-topic policy (one per tier; `1 + in_place_retries` on a
    /// source topic); `None` under the other policies (the retry policy's
    /// `max_attempts`).
    pub(crate) fn attempts_in_place(&self, topic: &str) -> Option<u32> {
        let rt = self.retry_topics()?;
        Some(match self.tier_of(topic) {
            Some(_) => 1,
            None => rt.in_place_retries.saturating_add(1),
        })
    }

    /// What to do with a record of `topic` whose attempts ran out
    /// (`permanent`: its last error was [`permanent`](crate::permanent)).
    /// `outcomes`: the run's records succeeded and records failed so far.
    pub(crate) fn decide(
        &self,
        outcomes: (u64, u64),
        topic: &str,
        permanent: bool,
    ) -> Decision<'_> {
        match (&self.on_exhausted, &self.dead_letter) {
            (OnExhausted::SkipAndCommitPast, _) => Decision::Skip,
            (OnExhausted::RetryTopics(rt), Some(writer)) => {
                let next = self.tier_of(topic).map_or(1, |t| t.tier + 1);
                let to_dead_letter = (permanent && rt.permanent_skips_tiers) || next > rt.tiers();
                match rt.delay(next) {
                    Some(delay) if !to_dead_letter => Decision::RetryTier {
                        writer,
                        tier: next,
                        delay,
                    },
                    // The storm guard holds only the dead-letter writes.
                    _ if self.storm_tripped(outcomes) => Decision::Block { storm: true },
                    _ => Decision::DeadLetter(writer),
                }
            }
            (OnExhausted::DeadLetter(_), Some(writer)) => {
                if self.storm_tripped(outcomes) {
                    Decision::Block { storm: true }
                } else {
                    Decision::DeadLetter(writer)
                }
            }
            _ => Decision::Block { storm: false },
        }
    }

    /// Takes a storm-guard sample of `outcomes` (records succeeded, records
    /// failed so far) and drops samples older than the window.
    pub(crate) fn sample(&self, outcomes: (u64, u64)) {
        if !self.guard.enabled {
            return;
        }
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back((now, outcomes.0, outcomes.1));
        // Keep one sample at or before the window's start as the baseline.
        while samples.len() > 2 && now.duration_since(samples[1].0) >= self.guard.window {
            samples.pop_front();
        }
    }

    /// `true` while more than the guard's share of the window's records
    /// failed. Logs and records the transitions.
    fn storm_tripped(&self, (succeeded, failed): (u64, u64)) -> bool {
        let g = &self.guard;
        if !g.enabled {
            return false;
        }
        let (base_ok, base_failed) = {
            let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            samples
                .iter()
                .rev()
                .find(|(t, _, _)| now.duration_since(*t) >= g.window)
                .or(samples.front())
                .map(|&(_, ok, f)| (ok, f))
                .unwrap_or((0, 0))
        };
        let ok = succeeded.saturating_sub(base_ok);
        let bad = failed.saturating_sub(base_failed);
        let total = ok + bad;
        let tripped = if total >= g.min_records {
            bad as f64 > g.max_failure_ratio * total as f64
        } else {
            // Too few records finished in the window to judge: the last
            // judgement stands. While the guard blocks every partition
            // nothing finishes, and an empty window is no evidence that
            // the storm is over.
            self.active.load(Ordering::Acquire)
        };
        let was = self.active.swap(tripped, Ordering::AcqRel);
        if tripped != was {
            self.instruments.storm_guard(tripped);
            if tripped {
                tracing::error!(
                    failed = bad,
                    finished = total,
                    window = ?g.window,
                    max_failure_ratio = g.max_failure_ratio,
                    "storm guard tripped: too many recent records fail; blocking instead of dead-lettering until the failure share falls"
                );
            } else {
                tracing::warn!(
                    failed = bad,
                    finished = total,
                    "storm guard cleared: dead-lettering resumes"
                );
            }
        }
        tripped
    }
}
