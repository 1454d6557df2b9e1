//! The assignment half of offset resets: before librdkafka fetches a newly
//! assigned partition, read the group's committed offsets (with their
//! leader epochs) and the partitions' watermarks, and decide each start
//! ([`classify`]).

use std::collections::HashMap;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use super::decision::{Decision, READ_TIMEOUT, classify};
use crate::engine::leader_epoch;
use crate::health::RetentionOverrunPolicy;
use crate::health::thresholds::NewPartitionStart;

/// The decision for one partition of a new assignment.
#[derive(Debug)]
pub(crate) struct PlanEntry {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) committed: Option<i64>,
    /// The leader epoch committed with `committed`, when the group's
    /// commit carried one.
    pub(crate) committed_epoch: Option<i32>,
    pub(crate) lo: Option<i64>,
    pub(crate) hi: Option<i64>,
    pub(crate) decision: Decision,
}

impl PlanEntry {
    /// The offset handed to librdkafka's assign: a partition that must not
    /// be consumed is assigned at its out-of-range offset (or with no
    /// offset), where librdkafka stops its fetcher under
    /// `auto.offset.reset=error`.
    pub(crate) fn assign_offset(&self) -> Offset {
        match (self.decision.start, self.committed) {
            (Some(o), _) => o,
            (None, Some(c)) => Offset::Offset(c),
            (None, None) => Offset::Invalid,
        }
    }

    /// The leader epoch to assign with: the committed one when the
    /// partition starts at the committed offset, so librdkafka validates
    /// it against the leader's log (KIP-320) before fetching.
    pub(crate) fn start_epoch(&self) -> Option<i32> {
        match (self.decision.start, self.committed) {
            (Some(Offset::Offset(s)), Some(c)) if s == c => self.committed_epoch,
            _ => None,
        }
    }
}

/// Decisions for a new assignment, made before librdkafka fetches.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) entries: Vec<PlanEntry>,
    pub(crate) at: Instant,
}

impl Plan {
    /// Reads the committed offsets and watermarks of `tpl` and decides.
    /// `None` when the committed offsets could not be read: the partitions
    /// are then assigned without an offset and librdkafka's error path
    /// (handled while running) takes over.
    pub(crate) fn make<C: ConsumerContext>(
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
        policy: RetentionOverrunPolicy,
        new: NewPartitionStart,
    ) -> Option<Plan> {
        if tpl.count() == 0 {
            return None;
        }
        let started = Instant::now();
        let committed = match consumer.committed_offsets(tpl.clone(), READ_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "reading the committed offsets of the new assignment failed; librdkafka resolves them");
                return None;
            }
        };
        let read = |logical: Offset| -> Option<TopicPartitionList> {
            let mut q = TopicPartitionList::with_capacity(tpl.count());
            for e in tpl.elements() {
                q.add_partition_offset(e.topic(), e.partition(), logical)
                    .ok()?;
            }
            let left = READ_TIMEOUT.saturating_sub(started.elapsed());
            match consumer.offsets_for_times(q, left) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the watermarks of the new assignment failed");
                    None
                }
            }
        };
        let lows = read(Offset::Beginning);
        let highs = read(Offset::End);
        // One pass over each answer: librdkafka's lookup in a list is a
        // linear search, quadratic over an assignment of 1,000 partitions.
        let (committed, lows, highs) = (
            Offsets::of(Some(&committed)),
            Offsets::of(lows.as_ref()),
            Offsets::of(highs.as_ref()),
        );
        let entries = tpl
            .elements()
            .iter()
            .map(|e| {
                let (t, p) = (e.topic(), e.partition());
                let c = committed.get(t, p);
                let (lo, hi) = (lows.get(t, p), highs.get(t, p));
                PlanEntry {
                    topic: t.to_owned(),
                    partition: p,
                    committed: c,
                    committed_epoch: committed.epoch(t, p),
                    lo,
                    hi,
                    decision: classify(c, lo, hi, policy, new),
                }
            })
            .collect();
        Some(Plan {
            entries,
            at: Instant::now(),
        })
    }

    /// Sets each partition's start in the list handed to librdkafka's assign.
    ///
    /// The entries were made from this list, in its order: each is set on
    /// the element at its index (a search of the list only if the list
    /// changed since).
    pub(crate) fn apply(&self, tpl: &mut TopicPartitionList) {
        let mut elements = tpl.elements();
        let mut searched = Vec::new();
        let mut epochs = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let offset = e.assign_offset();
            let set = match elements.get_mut(i) {
                Some(el) if el.partition() == e.partition && el.topic() == e.topic => {
                    el.set_offset(offset)
                }
                _ => {
                    searched.push((e, offset));
                    continue;
                }
            };
            if let Err(err) = set {
                tracing::warn!(topic = %e.topic, partition = e.partition, error = %err, "setting a partition's start offset failed");
            } else if let Some(epoch) = e.start_epoch() {
                epochs.push((i, epoch));
            }
        }
        drop(elements);
        for (i, epoch) in epochs {
            leader_epoch::set(tpl, i, epoch);
        }
        // Rare (the list changed since the plan): set without an epoch,
        // so not validated.
        for (e, offset) in searched {
            if let Err(err) = tpl.set_partition_offset(&e.topic, e.partition, offset) {
                tracing::warn!(topic = %e.topic, partition = e.partition, error = %err, "setting a partition's start offset failed");
            }
        }
    }

    /// The partitions that start at a committed offset with a leader
    /// epoch, at that offset and epoch: sought to right after the assign,
    /// since librdkafka validates a position against the leader's log
    /// (KIP-320) on a seek with an epoch, not on assign. `None` when there
    /// is none.
    pub(crate) fn validations(&self) -> Option<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        for e in &self.entries {
            if let (Some(epoch), Some(c)) = (e.start_epoch(), e.committed) {
                leader_epoch::add(&mut tpl, &e.topic, e.partition, c, Some(epoch)).ok()?;
            }
        }
        (tpl.count() > 0).then_some(tpl)
    }

    /// The entry of the `i`th partition of the list the plan was made
    /// from (searched for if that is not `topic`/`partition`).
    pub(crate) fn entry(&self, i: usize, topic: &str, partition: i32) -> Option<&PlanEntry> {
        match self.entries.get(i) {
            Some(e) if e.partition == partition && e.topic == topic => Some(e),
            _ => self
                .entries
                .iter()
                .find(|e| e.partition == partition && e.topic == topic),
        }
    }
}

/// The non-negative offsets of a list librdkafka answered, with their
/// leader epochs (when set), by topic and partition.
struct Offsets(HashMap<String, HashMap<i32, (i64, Option<i32>)>>);

impl Offsets {
    fn of(list: Option<&TopicPartitionList>) -> Self {
        let mut map: HashMap<String, HashMap<i32, (i64, Option<i32>)>> = HashMap::new();
        let Some(list) = list else {
            return Offsets(map);
        };
        for (i, e) in list.elements().iter().enumerate() {
            if let Offset::Offset(o) = e.offset()
                && o >= 0
            {
                let topic = match map.get_mut(e.topic()) {
                    Some(t) => t,
                    None => map.entry(e.topic().to_owned()).or_default(),
                };
                topic.insert(e.partition(), (o, leader_epoch::get(list, i)));
            }
        }
        Offsets(map)
    }

    fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        Some(self.0.get(topic)?.get(&partition)?.0)
    }

    fn epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.0.get(topic)?.get(&partition)?.1
    }
}
