//! The order in which a partition's records go through the handler, and the
//! per-key lanes of [`ProcessingOrder::Key`].

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use crate::record::Record;

/// The order in which the records of one partition are handed to the
/// handler. Set with
/// [`FreshConsumer::processing_order`](crate::FreshConsumer::processing_order);
/// defaults to [`ProcessingOrder::Partition`].
///
/// In every mode partitions run concurrently, each record keeps its retry,
/// timeout, dead-letter, skip and block semantics, and the committed offset
/// only ever covers the contiguous run of completed records (a record that
/// finished early is committed once every record before it in its partition
/// has completed too).
///
/// ```
/// use fresh_consumer::{FreshConsumer, ProcessingOrder, Record};
///
/// async fn handle(_record: Record) -> Result<(), std::io::Error> {
///     Ok(())
/// }
///
/// let consumer = FreshConsumer::new(handle)
///     .bootstrap_servers("localhost:9092")
///     .group_id("orders-projector")
///     .topics(["orders"])
///     // Up to 64 records of each partition at once, one per key at a time.
///     .processing_order(ProcessingOrder::Key { max_in_flight: 64 });
/// # let _ = consumer;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProcessingOrder {
    /// One record of a partition at a time, in offset order (the default).
    /// A failing record holds its whole partition while it is retried.
    #[default]
    Partition,
    /// Key-ordered concurrency within a partition (what Confluent's
    /// parallel-consumer calls `KEY` ordering): records with the same key are
    /// handled one at a time, in offset order; records with different keys
    /// of the same partition run concurrently, up to `max_in_flight` handler
    /// calls per partition. This is the lever for a hot partition, which a
    /// bigger consumer group cannot split.
    ///
    /// - **Keys**: compared by their bytes. All records with a null key form
    ///   one lane of their own (they run one at a time, in offset order,
    ///   concurrently with keyed records); give records keys to spread them.
    ///   Keys are told apart by a 64-bit hash (random per partition worker),
    ///   so two different keys may, with negligible probability, share a
    ///   lane: that only runs them one after the other.
    /// - **Dispatch**: the partition's worker takes records from its buffer
    ///   in offset order. A record whose key is idle starts at once; one
    ///   whose key is busy waits behind it, and starts when the records
    ///   before it with that key finished. While `max_in_flight` handler
    ///   calls run, the worker takes no more records.
    /// - **Commit**: completions arrive in any order; the committed offset
    ///   stays at the lowest record that has not completed (succeeded,
    ///   dead-lettered or skipped), however far other keys got.
    /// - **Bounded look-ahead**: the worker takes a record only while fewer
    ///   than [`max_buffered_records`](crate::FreshConsumer::max_buffered_records)
    ///   records it took are outside the contiguous completed prefix
    ///   (running, waiting behind a busy key, or completed after an
    ///   unfinished earlier record). Behind one slow or failing record the other keys move on
    ///   at most that far; then the worker waits, its buffer fills and the
    ///   partition is paused, as in partition order. This bounds memory (a
    ///   partition holds at most its buffer plus this many records) and what
    ///   a crash or rebalance can redeliver.
    /// - **Failures**: a failing record is retried in place and holds only
    ///   its key's lane: other keys keep running (up to the look-ahead
    ///   bound), but the commit cannot pass it. With
    ///   [`OnExhausted::Block`](crate::OnExhausted::Block) the record stays
    ///   blocked in its lane and
    ///   [`PARTITION_BLOCKED`](crate::metrics::PARTITION_BLOCKED) reads 1
    ///   while any record of the partition is blocked.
    /// - **Stop** (revoke, shutdown): handler calls that are running finish
    ///   (their completions are committed, as in partition order); records
    ///   waiting behind a busy key are dropped uncommitted and redelivered to
    ///   the partition's next owner.
    /// - **Batch duration**: [`BATCH_DURATION`](crate::metrics::BATCH_DURATION)
    ///   is the partition's busy period: from the first record taken while
    ///   the worker was idle until no handler runs, no record waits and the
    ///   buffer is empty.
    ///
    /// `max_in_flight` must be at least 1 (1 handles one record at a time,
    /// exactly like [`Partition`](Self::Partition)); no more than
    /// `max_buffered_records` run at once whatever it says (the look-ahead
    /// bound). The handler must tolerate that many concurrent calls per
    /// assigned partition.
    Key {
        /// The most handler calls running at once for one partition.
        max_in_flight: usize,
    },
}

impl ProcessingOrder {
    /// Why the order is invalid, if it is.
    pub(crate) fn validate(self) -> Result<(), &'static str> {
        match self {
            ProcessingOrder::Key { max_in_flight: 0 } => Err("max_in_flight must be at least 1"),
            _ => Ok(()),
        }
    }
}

/// The lane a record belongs to: a hash of its key (`None` included, so all
/// null-key records share one lane).
pub(crate) type LaneId = u64;

/// The busy lanes of one partition under [`ProcessingOrder::Key`]: a lane is
/// present while one of its records runs, with the records of the same lane
/// that wait behind it in offset order. Owned by the partition's worker task.
pub(crate) struct KeyLanes<T> {
    lanes: HashMap<LaneId, VecDeque<T>, BuildHasherDefault<LaneHasher>>,
    keys: RandomState,
    waiting: usize,
}

impl<T> Default for KeyLanes<T> {
    fn default() -> Self {
        KeyLanes {
            lanes: HashMap::default(),
            keys: RandomState::new(),
            waiting: 0,
        }
    }
}

impl<T> KeyLanes<T> {
    /// The lane of `record`.
    pub(crate) fn lane_of(&self, record: &Record) -> LaneId {
        self.keys.hash_one(record.key())
    }

    /// Admits an item of `lane`: returns it when the lane was idle (the lane
    /// is now busy and the caller runs the item), or queues it behind the
    /// lane's running item and returns `None`.
    pub(crate) fn admit(&mut self, lane: LaneId, item: T) -> Option<T> {
        match self.lanes.get_mut(&lane) {
            Some(queue) => {
                queue.push_back(item);
                self.waiting += 1;
                None
            }
            None => {
                self.lanes.insert(lane, VecDeque::new());
                Some(item)
            }
        }
    }

    /// The running item of `lane` finished: returns the lane's next waiting
    /// item (the lane stays busy and the caller runs it), or marks the lane
    /// idle.
    pub(crate) fn finish(&mut self, lane: LaneId) -> Option<T> {
        let queue = self.lanes.get_mut(&lane)?;
        match queue.pop_front() {
            Some(next) => {
                self.waiting -= 1;
                Some(next)
            }
            None => {
                self.lanes.remove(&lane);
                None
            }
        }
    }

    /// Drops every waiting item (the lanes' running items are unaffected and
    /// still [`finish`](Self::finish) their lanes). Returns how many.
    pub(crate) fn drop_waiting(&mut self) -> usize {
        let dropped = self.waiting;
        for queue in self.lanes.values_mut() {
            *queue = VecDeque::new();
        }
        self.waiting = 0;
        dropped
    }

    /// Items waiting behind a busy lane.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// Lanes with a running item.
    #[cfg(test)]
    pub(crate) fn busy(&self) -> usize {
        self.lanes.len()
    }
}

/// Lane ids are hashes already: used as they are.
#[derive(Default)]
pub(crate) struct LaneHasher(u64);

impl Hasher for LaneHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_lane_waits_in_order_and_other_lanes_start() {
        let mut l: KeyLanes<i64> = KeyLanes::default();
        assert_eq!(l.admit(1, 0), Some(0));
        assert_eq!(l.admit(2, 1), Some(1));
        assert_eq!(l.admit(1, 2), None);
        assert_eq!(l.admit(1, 3), None);
        assert_eq!(l.admit(3, 4), Some(4));
        assert_eq!((l.busy(), l.waiting()), (3, 2));
        // Lane 1's running item finished: its next one, in order.
        assert_eq!(l.finish(1), Some(2));
        assert_eq!(l.admit(1, 5), None);
        assert_eq!(l.finish(1), Some(3));
        assert_eq!(l.finish(1), Some(5));
        assert_eq!(l.finish(1), None, "lane 1 is idle now");
        assert_eq!(l.admit(1, 6), Some(6), "an idle lane starts at once");
        assert_eq!(l.finish(2), None);
        assert_eq!(l.finish(2), None, "finishing an idle lane is a no-op");
        assert_eq!((l.busy(), l.waiting()), (2, 0));
    }

    #[test]
    fn dropping_waiting_items_keeps_running_lanes_busy() {
        let mut l: KeyLanes<i64> = KeyLanes::default();
        l.admit(1, 0);
        l.admit(1, 1);
        l.admit(1, 2);
        l.admit(2, 3);
        assert_eq!(l.drop_waiting(), 2);
        assert_eq!(l.admit(1, 4), None, "lane 1 still runs item 0");
        assert_eq!(l.finish(1), Some(4));
        assert_eq!(l.finish(1), None);
        assert_eq!(l.finish(2), None);
        assert_eq!((l.busy(), l.waiting()), (0, 0));
    }

    #[test]
    fn lanes_follow_keys_and_null_keys_share_one() {
        let l: KeyLanes<()> = KeyLanes::default();
        let r = |key: Option<&str>| {
            let r = Record::new("t", 0, 0);
            match key {
                Some(k) => r.with_key(k),
                None => r,
            }
        };
        assert_eq!(l.lane_of(&r(Some("a"))), l.lane_of(&r(Some("a"))));
        assert_ne!(l.lane_of(&r(Some("a"))), l.lane_of(&r(Some("b"))));
        assert_eq!(l.lane_of(&r(None)), l.lane_of(&r(None)));
        assert_ne!(
            l.lane_of(&r(None)),
            l.lane_of(&r(Some(""))),
            "a null key is not the empty key"
        );
    }

    #[test]
    fn zero_in_flight_is_invalid() {
        assert!(
            ProcessingOrder::Key { max_in_flight: 0 }
                .validate()
                .is_err()
        );
        assert!(ProcessingOrder::Key { max_in_flight: 1 }.validate().is_ok());
        assert!(ProcessingOrder::Partition.validate().is_ok());
        assert_eq!(ProcessingOrder::default(), ProcessingOrder::Partition);
    }
}
