//! Non-blocking retry topics: a failing record is republished to a delay
//! tier (`orders.retry.10s`, then `orders.retry.1m`), its source offset is
//! committed past once the broker acknowledged the write, and the record is
//! handled again from the tier no earlier than its due time; after the last
//! tier it goes to the dead-letter topic. See [`RetryTopics`].

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::RetryTopicsError;
use crate::failure::dead_letter::config::DeadLetter;

/// How the tier topics are named, from the source topic `orders` and the
/// suffix (default `.retry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TierNaming {
    /// `<source><suffix>.<delay>`: `orders.retry.10s`, `orders.retry.1m`.
    /// The delay is written in the largest unit that divides it exactly:
    /// `h`, `m`, `s`, else `ms` (`orders.retry.1500ms`). Two tiers with the
    /// same delay would share a topic: a
    /// [`RetryTopicsError::TopicCollision`].
    #[default]
    Delay,
    /// `<source><suffix>.<tier>`, tiers numbered from 1: `orders.retry.1`,
    /// `orders.retry.2` (Spring Kafka's index suffixing).
    Attempt,
}

/// Default suffix of the tier topic names ([`RetryTopics::suffix`]).
pub const DEFAULT_RETRY_TOPIC_SUFFIX: &str = ".retry";

/// The retry-topic policy: delay tiers, then the dead-letter topic.
///
/// A record whose handler fails on a source topic is retried in place
/// [`in_place_retries`](Self::in_place_retries) times (0 by default, with
/// the [`RetryPolicy`](crate::failure::RetryPolicy)'s backoff), then written to the
/// first tier topic with the headers of the
/// [`dead_letter`](crate::failure::dead_letter) contract (original topic, partition,
/// offset, timestamp, group, attempts, error) plus the tier, its due time
/// and the tier history. Only after the broker acknowledged that write does
/// the source offset become committable, so the source partition moves on
/// at once and nothing is lost on a crash (the record may be written twice).
///
/// The same consumer subscribes to the tier topics. A tier record is
/// handled no earlier than its due time (write time + the tier's delay):
/// its partition is paused while the record waits, without blocking the
/// poll loop or any other partition. It gets one attempt per tier; if it
/// fails it moves to the next tier, and after the last to the dead-letter
/// topic ([`dead_letter`](Self::dead_letter)). A
/// [`permanent`](crate::permanent) error skips the tiers and goes straight
/// to the dead-letter topic (unless
/// [`permanent_skips_tiers`](Self::permanent_skips_tiers) is `false`).
///
/// ```
/// use std::time::Duration;
/// use fresh_consumer::failure::{RetryTopics, TierNaming};
///
/// // orders -> orders.retry.10s -> orders.retry.1m -> orders.dlt
/// let policy = RetryTopics::new([Duration::from_secs(10), Duration::from_secs(60)]);
/// assert_eq!(policy.tier_topic("orders", 1), "orders.retry.10s");
/// assert_eq!(policy.tier_topic("orders", 2), "orders.retry.1m");
/// let by_attempt = policy.clone().naming(TierNaming::Attempt).suffix("-retry");
/// assert_eq!(by_attempt.tier_topic("orders", 2), "orders-retry.2");
/// ```
///
/// The library creates no topics: every tier topic and the dead-letter
/// topic must exist (or the brokers must auto-create them). A record that
/// cannot be written to a missing tier stays uncommitted and its partition
/// reports itself blocked while the write is retried (as for the
/// dead-letter topic).
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct RetryTopics {
    pub(crate) delays: Vec<Duration>,
    pub(crate) naming: TierNaming,
    pub(crate) suffix: String,
    pub(crate) in_place_retries: u32,
    pub(crate) permanent_skips_tiers: bool,
    pub(crate) dead_letter: DeadLetter,
}

impl RetryTopics {
    /// Tiers with these delays, in order (each at least 1 ms, none shorter
    /// than the one before); topic names by [`TierNaming::Delay`] with
    /// suffix `.retry`; no in-place retries; permanent errors skip the
    /// tiers; then the dead-letter topic `<source>.dlt`.
    pub fn new(delays: impl IntoIterator<Item = Duration>) -> Self {
        RetryTopics {
            delays: delays.into_iter().collect(),
            naming: TierNaming::Delay,
            suffix: DEFAULT_RETRY_TOPIC_SUFFIX.to_owned(),
            in_place_retries: 0,
            permanent_skips_tiers: true,
            dead_letter: DeadLetter::new(),
        }
    }

    /// How tier topics are named. Defaults to [`TierNaming::Delay`].
    pub fn naming(mut self, naming: TierNaming) -> Self {
        self.naming = naming;
        self
    }

    /// What follows the source topic's name in a tier topic's name, before
    /// `.<delay>` or `.<tier>`. Defaults to `.retry`. Must not be empty.
    pub fn suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = suffix.into();
        self
    }

    /// Retries in place on the source topic after the first failed attempt,
    /// before the record goes to the first tier; 0 (the default) sends it
    /// on its first failure. Replaces [`RetryPolicy::max_attempts`](crate::failure::RetryPolicy::max_attempts)
    /// for source records (which get `1 + retries` attempts); the
    /// policy's backoff and jitter still apply between them. A tier record
    /// gets one attempt per tier.
    pub fn in_place_retries(mut self, retries: u32) -> Self {
        self.in_place_retries = retries;
        self
    }

    /// Whether a [`permanent`](crate::permanent) error skips the tiers and
    /// goes straight to the dead-letter topic. Defaults to `true` (Spring
    /// Kafka's non-retryable exceptions do the same).
    pub fn permanent_skips_tiers(mut self, skip: bool) -> Self {
        self.permanent_skips_tiers = skip;
        self
    }

    /// Where records go after the last tier (and permanent errors): the
    /// dead-letter topic, its header style, the error-message cap and
    /// producer properties, which the tier writes share. Defaults to
    /// [`DeadLetter::new`] (`<source>.dlt`, native headers).
    pub fn dead_letter(mut self, dead_letter: DeadLetter) -> Self {
        self.dead_letter = dead_letter;
        self
    }

    /// The number of tiers.
    pub fn tiers(&self) -> usize {
        self.delays.len()
    }

    /// The delay of tier `tier` (1-based), if there is such a tier.
    pub fn delay(&self, tier: usize) -> Option<Duration> {
        tier.checked_sub(1)
            .and_then(|i| self.delays.get(i))
            .copied()
    }

    /// The topic of tier `tier` (1-based) for records of `source`.
    ///
    /// # Panics
    /// When there is no tier `tier`.
    pub fn tier_topic(&self, source: &str, tier: usize) -> String {
        let label = match self.naming {
            TierNaming::Delay => delay_label(self.delay(tier).expect("no such tier")),
            TierNaming::Attempt => {
                assert!(tier >= 1 && tier <= self.delays.len(), "no such tier");
                tier.to_string()
            }
        };
        format!("{source}{}.{label}", self.suffix)
    }

    /// Checks the policy against the subscribed `topics`: at least one
    /// tier, delays at least 1 ms and never decreasing, a suffix, literal
    /// topic names (no `^` patterns: the tier topics of a pattern are not
    /// known), and no two of the source, tier and dead-letter topics
    /// sharing a name.
    pub(crate) fn plan(&self, topics: &[String]) -> Result<TierPlan, RetryTopicsError> {
        if self.delays.is_empty() {
            return Err(RetryTopicsError::NoTiers);
        }
        for (i, d) in self.delays.iter().enumerate() {
            if *d < Duration::from_millis(1) {
                return Err(RetryTopicsError::ZeroDelay { tier: i + 1 });
            }
            if i > 0 && *d < self.delays[i - 1] {
                return Err(RetryTopicsError::UnsortedDelays { tier: i + 1 });
            }
        }
        if self.suffix.trim().is_empty() {
            return Err(RetryTopicsError::EmptySuffix);
        }
        if let Some(t) = &self.dead_letter.topic
            && t.trim().is_empty()
        {
            return Err(RetryTopicsError::EmptyDeadLetterTopic);
        }
        let mut plan = TierPlan::default();
        // Every name the policy reads or writes, and what it is.
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        let mut claim = |name: String, what: String| -> Result<(), RetryTopicsError> {
            match names.get(&name) {
                Some(prev) if *prev == what => Ok(()),
                Some(prev) => Err(RetryTopicsError::TopicCollision {
                    topic: name,
                    first: prev.clone(),
                    second: what,
                }),
                None => {
                    names.insert(name, what);
                    Ok(())
                }
            }
        };
        for t in topics {
            if t.starts_with('^') {
                return Err(RetryTopicsError::PatternSubscription { pattern: t.clone() });
            }
            claim(t.clone(), format!("source topic {t}"))?;
        }
        for t in topics {
            for tier in 1..=self.delays.len() {
                let name = self.tier_topic(t, tier);
                claim(name.clone(), format!("tier {tier} of {t}"))?;
                plan.tiers.insert(
                    name,
                    TierOf {
                        source: t.clone(),
                        tier,
                    },
                );
            }
        }
        for t in topics {
            // A shared dead-letter topic (`DeadLetter::topic`) is one name
            // for every source: the same use, no collision.
            let dlt = self.dead_letter.topic_for(t);
            let what = match &self.dead_letter.topic {
                Some(_) => "the dead-letter topic".to_owned(),
                None => format!("the dead-letter topic of {t}"),
            };
            claim(dlt, what)?;
        }
        Ok(plan)
    }
}

/// `10s`, `1m`, `2h`, `1500ms`: the largest unit that divides `d` exactly
/// (milliseconds at least; a sub-millisecond remainder is dropped).
pub(crate) fn delay_label(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0ms".to_owned();
    }
    for (unit, name) in [(3_600_000, "h"), (60_000, "m"), (1_000, "s")] {
        if ms.is_multiple_of(unit) {
            return format!("{}{name}", ms / unit);
        }
    }
    format!("{ms}ms")
}

/// Where a tier topic belongs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TierOf {
    /// The subscribed source topic whose records it holds.
    pub(crate) source: String,
    /// Its tier, from 1.
    pub(crate) tier: usize,
}

/// The tier topics of a run, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TierPlan {
    pub(crate) tiers: BTreeMap<String, TierOf>,
}

impl TierPlan {
    /// The tier topics to subscribe to, besides the source topics.
    pub(crate) fn topics(&self) -> impl Iterator<Item = &str> {
        self.tiers.keys().map(String::as_str)
    }

    /// The tier `topic` is, if it is one.
    pub(crate) fn tier_of(&self, topic: &str) -> Option<&TierOf> {
        self.tiers.get(topic)
    }

    /// The source topic whose records `topic` holds: itself unless it is a
    /// tier topic.
    pub(crate) fn source_of<'a>(&'a self, topic: &'a str) -> &'a str {
        self.tier_of(topic).map_or(topic, |t| t.source.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn topics(t: &[&str]) -> Vec<String> {
        t.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn names_follow_the_delay_or_the_tier_number() {
        let p = RetryTopics::new([s(10), s(60), s(7200), Duration::from_millis(90_500)]);
        assert_eq!(p.tier_topic("orders", 1), "orders.retry.10s");
        assert_eq!(p.tier_topic("orders", 2), "orders.retry.1m");
        assert_eq!(p.tier_topic("orders", 3), "orders.retry.2h");
        assert_eq!(p.tier_topic("orders", 4), "orders.retry.90500ms");
        let p = p.naming(TierNaming::Attempt).suffix("-retry");
        assert_eq!(p.tier_topic("orders", 1), "orders-retry.1");
        assert_eq!(p.tier_topic("orders", 4), "orders-retry.4");
        assert_eq!(p.delay(1), Some(s(10)));
        assert_eq!(p.delay(0), None);
        assert_eq!(p.delay(5), None);
    }

    #[test]
    fn the_plan_maps_every_tier_topic_to_its_source() {
        let p = RetryTopics::new([s(1), s(2)]);
        let plan = p.plan(&topics(&["a", "b"])).unwrap();
        assert_eq!(
            plan.topics().collect::<Vec<_>>(),
            ["a.retry.1s", "a.retry.2s", "b.retry.1s", "b.retry.2s"]
        );
        assert_eq!(
            plan.tier_of("b.retry.2s"),
            Some(&TierOf {
                source: "b".into(),
                tier: 2
            })
        );
        assert_eq!(plan.source_of("a.retry.1s"), "a");
        assert_eq!(plan.source_of("a"), "a");
        // A shared dead-letter topic is no collision.
        RetryTopics::new([s(1)])
            .dead_letter(DeadLetter::new().topic("all.dlt"))
            .plan(&topics(&["a", "b"]))
            .unwrap();
    }

    #[test]
    fn bad_policies_are_typed_errors() {
        let t = topics(&["orders"]);
        assert_eq!(
            RetryTopics::new([]).plan(&t),
            Err(RetryTopicsError::NoTiers)
        );
        assert_eq!(
            RetryTopics::new([s(1), Duration::ZERO]).plan(&t),
            Err(RetryTopicsError::ZeroDelay { tier: 2 })
        );
        assert_eq!(
            RetryTopics::new([Duration::from_micros(500)]).plan(&t),
            Err(RetryTopicsError::ZeroDelay { tier: 1 })
        );
        assert_eq!(
            RetryTopics::new([s(10), s(5)]).plan(&t),
            Err(RetryTopicsError::UnsortedDelays { tier: 2 })
        );
        assert_eq!(
            RetryTopics::new([s(1)]).suffix("").plan(&t),
            Err(RetryTopicsError::EmptySuffix)
        );
        // Equal delays share a name by delay, not by tier number.
        assert!(matches!(
            RetryTopics::new([s(5), s(5)]).plan(&t),
            Err(RetryTopicsError::TopicCollision { topic, .. }) if topic == "orders.retry.5s"
        ));
        RetryTopics::new([s(5), s(5)])
            .naming(TierNaming::Attempt)
            .plan(&t)
            .unwrap();
        // A subscribed topic that is another one's tier.
        assert!(matches!(
            RetryTopics::new([s(1)]).plan(&topics(&["orders", "orders.retry.1s"])),
            Err(RetryTopicsError::TopicCollision { topic, .. }) if topic == "orders.retry.1s"
        ));
        // The dead-letter topic named like a source or a tier.
        assert!(matches!(
            RetryTopics::new([s(1)])
                .dead_letter(DeadLetter::new().topic("orders"))
                .plan(&t),
            Err(RetryTopicsError::TopicCollision { topic, .. }) if topic == "orders"
        ));
        assert!(matches!(
            RetryTopics::new([s(1)])
                .dead_letter(DeadLetter::new().topic("orders.retry.1s"))
                .plan(&t),
            Err(RetryTopicsError::TopicCollision { .. })
        ));
        assert_eq!(
            RetryTopics::new([s(1)]).plan(&topics(&["^orders.*"])),
            Err(RetryTopicsError::PatternSubscription {
                pattern: "^orders.*".into()
            })
        );
        assert_eq!(
            RetryTopics::new([s(1)])
                .dead_letter(DeadLetter::new().topic(" "))
                .plan(&t),
            Err(RetryTopicsError::EmptyDeadLetterTopic)
        );
    }
}
