//! Failing records: how often a record is retried, and what happens when its
//! attempts run out.
//!
//! A record whose handler fails is retried **in place**: its partition does not
//! move past it, and no offset after it is committed, until the record has
//! either succeeded or been durably parked. Retries back off without blocking
//! other partitions or the poll loop.
//!
//! When the attempts run out (or the handler returned a [`permanent`](crate::permanent) error),
//! [`OnExhausted`] decides:
//! - [`OnExhausted::Block`] (the default): the partition stops at the record,
//!   keeps retrying at the capped backoff, stays a group member, and reports
//!   itself blocked ([`PARTITION_BLOCKED`](crate::metrics::PARTITION_BLOCKED)).
//! - [`OnExhausted::DeadLetter`]: the record is written to a dead-letter topic
//!   with headers that describe where it came from and why it failed
//!   ([`DeadLetter`]); only after the broker acknowledged the write does the
//!   source offset become committable.
//! - [`OnExhausted::SkipAndCommitPast`]: the record is given up and committed
//!   past. Opt-in; counted in
//!   [`SKIPPED_MESSAGES`](crate::metrics::SKIPPED_MESSAGES) and logged at
//!   ERROR.
//! - [`OnExhausted::RetryTopics`]: the record is republished to a delay tier
//!   (a retry topic) and its partition moves on once the broker
//!   acknowledged the write; the same consumer handles it again from the
//!   tier no earlier than its due time, and after the last tier it is
//!   dead-lettered ([`RetryTopics`]).
//!
//! A record that is too old to be worth handling never reaches the handler
//! with a stale-record policy ([`OnStale`], set with
//! [`FreshConsumer::max_record_age`](crate::FreshConsumer::max_record_age)):
//! see [`OnStale`].

pub mod dead_letter;
pub(crate) mod exhausted;
pub(crate) mod producer;
pub(crate) mod retry;
mod retry_topics;
pub(crate) mod stale;

pub use crate::error::RetryTopicsError;
pub use dead_letter::config::{DEFAULT_MAX_ERROR_MESSAGE_BYTES, DeadLetter};
pub use dead_letter::headers::DeadLetterHeaders;
pub(crate) use dead_letter::{inherited as inherited_by_producers, weakens_delivery};
pub use exhausted::{
    DEFAULT_STORM_MAX_FAILURE_RATIO, DEFAULT_STORM_MIN_RECORDS, DEFAULT_STORM_WINDOW, StormGuard,
};
pub(crate) use exhausted::{Decision, Exhausted, OnExhausted};
pub(crate) use retry::is_permanent;
pub use retry::{
    DEFAULT_JITTER, DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_INITIAL_BACKOFF, DEFAULT_RETRY_MAX_BACKOFF,
    Permanent, RetryPolicy,
};
pub(crate) use retry_topics::TierPlan;
pub use retry_topics::{DEFAULT_RETRY_TOPIC_SUFFIX, RetryTopics, TierNaming};
pub use stale::OnStale;
pub(crate) use stale::{Stale, StaleSettings};
