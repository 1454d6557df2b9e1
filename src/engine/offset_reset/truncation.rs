//! Finding where a truncated log diverges from what the group read.
//!
//! librdkafka validates a partition's start (and its position after a
//! leader change) against the leader when it knows the leader epoch of the
//! record before it (KIP-320: OffsetForLeaderEpoch). When the leader's log
//! ends below that position for that epoch, the log was truncated (an
//! unclean leader election, or a replica that lost data), and under the
//! library's `auto.offset.reset=error` librdkafka stops the partition's
//! fetcher and reports `__AUTO_OFFSET_RESET`, naming the divergence only
//! in its message text. The position itself may still be inside the new
//! log's offsets (new records reuse the lost records' offsets), so the
//! watermarks alone cannot tell.
//!
//! [`divergence`] asks librdkafka again, with a short-lived consumer of
//! its own (`auto.offset.reset=earliest`; the group's id, which librdkafka
//! needs to assign, but it never joins nor commits): assigned at the same
//! position and epoch, librdkafka validates, moves a truncated partition
//! to the end offset of the epoch, and fetches. The first record it
//! returns is the first record of the leader's log past what the group
//! read; before the position, the log was truncated there.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;

use crate::engine::leader_epoch;

/// A partition to check: where it was to continue, and the leader epoch of
/// the record before that offset.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) position: i64,
    pub(crate) epoch: i32,
}

/// The checking consumer's configuration: the consumer's own (connection,
/// security, `isolation.level`, and `group.id`, without which librdkafka
/// refuses to assign: it only assigns, so it never joins the group nor
/// commits), without statistics, moving to the epoch's end on truncation.
pub(crate) fn probe_config(consumer: &ClientConfig) -> ClientConfig {
    let mut cc = consumer.clone();
    cc.remove("group.instance.id");
    cc.set("auto.offset.reset", "earliest");
    cc.set("enable.auto.commit", "false");
    cc.set("enable.auto.offset.store", "false");
    cc.set("enable.partition.eof", "false");
    cc.set("statistics.interval.ms", "0");
    cc
}

/// For each check, the offset of the first record the leader's log holds at
/// or past the point where it diverges from the group's records, when that
/// is below the check's position: the log was truncated there. `None`: no
/// truncation seen within `timeout` (validated, or no record to show it).
pub(crate) fn divergence(
    config: &ClientConfig,
    checks: &[Check],
    timeout: Duration,
) -> Vec<Option<i64>> {
    let mut out = vec![None; checks.len()];
    if checks.is_empty() {
        return out;
    }
    let deadline = Instant::now() + timeout;
    let consumer: BaseConsumer = match config.create() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "creating the consumer that checks for a truncated log failed");
            return out;
        }
    };
    // librdkafka 2.12 validates a position on a seek with an epoch (and
    // after a leader change), not on assign: assigned at the position,
    // then sought to it with the epoch.
    let mut at = TopicPartitionList::with_capacity(checks.len());
    let mut with_epoch = TopicPartitionList::with_capacity(checks.len());
    let mut index: HashMap<(&str, i32), usize> = HashMap::with_capacity(checks.len());
    for (i, c) in checks.iter().enumerate() {
        let added =
            leader_epoch::add(&mut at, &c.topic, c.partition, c.position, None).and_then(|()| {
                leader_epoch::add(
                    &mut with_epoch,
                    &c.topic,
                    c.partition,
                    c.position,
                    Some(c.epoch),
                )
            });
        if let Err(e) = added {
            tracing::warn!(error = %e, "checking for a truncated log failed");
            return out;
        }
        index.insert((c.topic.as_str(), c.partition), i);
    }
    let sought = consumer.assign(&at).and_then(|()| {
        consumer.seek_partitions(
            with_epoch,
            deadline.saturating_duration_since(Instant::now()),
        )
    });
    if let Err(e) = sought {
        tracing::warn!(error = %e, "checking for a truncated log failed");
        return out;
    }
    let mut seen = vec![false; checks.len()];
    let mut left = checks.len();
    while left > 0 {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let wait = (deadline - now).min(Duration::from_millis(100));
        match consumer.poll(wait) {
            Some(Ok(m)) => {
                if let Some(&i) = index.get(&(m.topic(), m.partition()))
                    && !seen[i]
                {
                    seen[i] = true;
                    left -= 1;
                    if m.offset() < checks[i].position {
                        out[i] = Some(m.offset());
                    }
                }
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "checking for a truncated log");
            }
            None => {}
        }
    }
    out
}
