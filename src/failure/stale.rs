//! Records too old to be worth handling: the stale-record policy
//! ([`FreshConsumer::max_record_age`](crate::FreshConsumer::max_record_age)).

use std::time::Duration;

use crate::failure::dead_letter::DeadLetterWriter;
use crate::failure::exhausted::Exhausted;
use crate::record::EventTime;

/// What happens to a stale record: one whose event age is above
/// [`max_record_age`](crate::FreshConsumer::max_record_age) when it reaches
/// the handler. The handler is never called for it.
///
/// A record whose event age (now minus its event time: the Kafka
/// timestamp, or the [event-time header](crate::FreshConsumer::event_time_header))
/// is above the configured maximum **when it reaches the handler** is not
/// handed to the handler. `OnStale` says what happens to it instead:
/// committed past, or written to the dead-letter topic or a topic of its
/// own (and committed past once the broker acknowledged the write). Either
/// way it is counted in
/// [`STALE_MESSAGES`](crate::metrics::STALE_MESSAGES), in
/// [`RunSummary::records_stale`](crate::RunSummary::records_stale) and
/// against every freshness objective as
/// [`SloResult::Stale`](crate::slo::SloResult::Stale), and each run of
/// consecutive stale records of a partition is logged twice: once at its
/// first record (WARN) and once when the next fresh record ends it (INFO).
///
/// A record without a usable event time is never stale (its age is
/// unknown), nor is one stamped later than the consumer's clock. Records
/// read back from a retry tier ([`RetryTopics`](crate::failure::RetryTopics)) carry
/// their original record's event time and are not checked unless
/// [`stale_retry_tier_records`](crate::FreshConsumer::stale_retry_tier_records)
/// asks for it: a record the handler already took on is not dropped for
/// the time its retries took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnStale {
    /// Commit past the record without handling it. It is lost to the
    /// consumer group, counted and logged (once per run of stale records).
    #[default]
    Skip,
    /// Write the record to its dead-letter topic (the topic of
    /// [`OnExhausted::DeadLetter`](crate::OnExhausted::DeadLetter) or of
    /// [`RetryTopics`](crate::failure::RetryTopics) when one is configured, with its
    /// header style and producer properties; `<source topic>.dlt` with the
    /// library's headers otherwise), then commit past it once the broker
    /// acknowledged the write. Its dead-letter headers say why: error type
    /// `stale`, 0 attempts, the age in the error message.
    DeadLetter,
    /// Write the record to this topic (for example `orders.stale`), with the
    /// same headers and producer as [`OnStale::DeadLetter`], then commit
    /// past it once the broker acknowledged the write. The topic must exist
    /// (or the brokers must auto-create it) and must not be one the
    /// consumer reads.
    Topic(String),
}

impl OnStale {
    /// The value of the
    /// [`STALE_ACTION`](crate::metrics::STALE_ACTION) attribute: `skip`,
    /// `dead_letter` or `topic`.
    pub fn as_str(&self) -> &'static str {
        match self {
            OnStale::Skip => "skip",
            OnStale::DeadLetter => "dead_letter",
            OnStale::Topic(_) => "topic",
        }
    }

    /// Whether the record is written somewhere (needs a producer).
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, OnStale::Skip)
    }
}

/// The builder's stale-record settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StaleSettings {
    pub(crate) max_age: Duration,
    pub(crate) action: OnStale,
}

impl StaleSettings {
    /// Why the settings cannot run, against the subscribed `topics`.
    pub(crate) fn validate(&self, topics: &[String]) -> Result<(), &'static str> {
        if self.max_age < Duration::from_millis(1) {
            return Err("the maximum age must be at least 1 ms");
        }
        if let OnStale::Topic(t) = &self.action {
            if t.trim().is_empty() {
                return Err("the stale-record topic must not be empty");
            }
            if topics.iter().any(|s| s == t) {
                return Err("the stale-record topic must not be a subscribed topic");
            }
        }
        Ok(())
    }
}

/// The stale-record policy of a run.
pub(crate) struct Stale {
    pub(crate) max_age: Duration,
    max_age_ms: i64,
    pub(crate) action: OnStale,
    /// Check records read back from a retry tier too.
    pub(crate) retry_tiers: bool,
    /// The producer for [`OnStale::DeadLetter`] and [`OnStale::Topic`]
    /// when the exhausted-record policy has none to share.
    pub(crate) writer: Option<DeadLetterWriter>,
}

impl Stale {
    pub(crate) fn new(
        settings: &StaleSettings,
        retry_tiers: bool,
        writer: Option<DeadLetterWriter>,
    ) -> Self {
        Stale {
            max_age: settings.max_age,
            max_age_ms: i64::try_from(settings.max_age.as_millis()).unwrap_or(i64::MAX),
            action: settings.action.clone(),
            retry_tiers,
            writer,
        }
    }

    /// Whether records of `topic` are checked: every record of a source
    /// topic, a retry tier's only when asked.
    pub(crate) fn applies_to(&self, exhausted: &Exhausted, topic: &str) -> bool {
        self.retry_tiers || exhausted.tier_of(topic).is_none()
    }

    /// The producer that writes stale records: the exhausted-record
    /// policy's, else the policy's own; `None` for [`OnStale::Skip`].
    pub(crate) fn writer<'a>(&'a self, exhausted: &'a Exhausted) -> Option<&'a DeadLetterWriter> {
        if !self.action.writes() {
            return None;
        }
        exhausted.writer().or(self.writer.as_ref())
    }

    /// Where stale records of `topic` are written (`None` for
    /// [`OnStale::Skip`]): the dead-letter topic of the record's source
    /// topic, or the stale-record topic.
    pub(crate) fn topic_for(&self, exhausted: &Exhausted, topic: &str) -> Option<String> {
        match &self.action {
            OnStale::Skip => None,
            OnStale::Topic(t) => Some(t.clone()),
            OnStale::DeadLetter => self
                .writer(exhausted)
                .map(|w| w.topic_for(exhausted.source_of(topic))),
        }
    }

    /// The age of a record with `event_time` at `now_ms` (ms since the Unix
    /// epoch) when it is above the maximum; `None` when it is not, or when
    /// the event time is unknown.
    pub(crate) fn age_above(&self, event_time: EventTime, now_ms: i64) -> Option<Duration> {
        let event_ms = event_time.millis()?;
        let age_ms = now_ms.saturating_sub(event_ms);
        (age_ms > self.max_age_ms).then(|| Duration::from_millis(age_ms as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordTimestamp;

    fn stale(max: Duration) -> Stale {
        Stale::new(
            &StaleSettings {
                max_age: max,
                action: OnStale::Skip,
            },
            false,
            None,
        )
    }

    #[test]
    fn only_an_age_above_the_maximum_is_stale() {
        let s = stale(Duration::from_secs(10));
        let now = 1_000_000;
        let at = |ms| EventTime::Record(RecordTimestamp::CreateTime(ms));
        assert_eq!(
            s.age_above(at(now - 10_000), now),
            None,
            "the boundary is fresh"
        );
        assert_eq!(
            s.age_above(at(now - 10_001), now),
            Some(Duration::from_millis(10_001))
        );
        assert_eq!(s.age_above(at(now + 5_000), now), None, "clock skew");
        assert_eq!(s.age_above(EventTime::Missing, now), None);
        assert_eq!(
            s.age_above(EventTime::Record(RecordTimestamp::NotAvailable), now),
            None
        );
        assert_eq!(
            s.age_above(EventTime::Header(now - 60_000), now),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn settings_are_validated() {
        let topics = vec!["orders".to_owned()];
        let with = |max_age, action| StaleSettings { max_age, action }.validate(&topics);
        assert!(with(Duration::ZERO, OnStale::Skip).is_err());
        assert!(with(Duration::from_micros(999), OnStale::Skip).is_err());
        assert!(with(Duration::from_millis(1), OnStale::Skip).is_ok());
        assert!(with(Duration::from_secs(1), OnStale::Topic(" ".into())).is_err());
        assert!(with(Duration::from_secs(1), OnStale::Topic("orders".into())).is_err());
        assert!(
            with(
                Duration::from_secs(1),
                OnStale::Topic("orders.stale".into())
            )
            .is_ok()
        );
        assert_eq!(OnStale::Topic("x".into()).as_str(), "topic");
        assert_eq!(OnStale::default(), OnStale::Skip);
    }
}
