//! Partition leader epochs on librdkafka's partition lists (rust-rdkafka
//! has no accessor for them): committed with each offset, read back with
//! the committed offsets, and set on the offsets a partition is assigned
//! at, so librdkafka validates the start against the leader (KIP-320,
//! OffsetForLeaderEpoch) and a log truncated below it is detected instead
//! of skipped.

use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};

/// Appends `topic`/`partition` at `offset` to `tpl`, with `epoch` (the
/// leader epoch of the record before `offset`) when known.
pub(crate) fn add(
    tpl: &mut TopicPartitionList,
    topic: &str,
    partition: i32,
    offset: i64,
    epoch: Option<i32>,
) -> KafkaResult<()> {
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    if let Some(epoch) = epoch {
        set(tpl, tpl.count() - 1, epoch);
    }
    Ok(())
}

/// Sets the leader epoch of the `i`th element of `tpl` (in the order of
/// [`TopicPartitionList::elements`]).
pub(crate) fn set(tpl: &mut TopicPartitionList, i: usize, epoch: i32) {
    if i >= tpl.count() {
        return;
    }
    // SAFETY: `tpl` owns a live list with more than `i` elements; `&mut`
    // keeps any other access out while the element is written.
    unsafe {
        let list = &*tpl.ptr();
        rdkafka::bindings::rd_kafka_topic_partition_set_leader_epoch(list.elems.add(i), epoch);
    }
}

/// The leader epoch of the `i`th element of `tpl`, when set (librdkafka
/// fills it in from the broker's answer to `committed_offsets`).
pub(crate) fn get(tpl: &TopicPartitionList, i: usize) -> Option<i32> {
    if i >= tpl.count() {
        return None;
    }
    // SAFETY: `tpl` owns a live list with more than `i` elements.
    let epoch = unsafe {
        let list = &*tpl.ptr();
        rdkafka::bindings::rd_kafka_topic_partition_get_leader_epoch(list.elems.add(i))
    };
    (epoch >= 0).then_some(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_set_is_read_back_and_unknown_is_none() {
        let mut tpl = TopicPartitionList::new();
        add(&mut tpl, "a", 0, 10, Some(7)).unwrap();
        add(&mut tpl, "a", 1, 20, None).unwrap();
        add(&mut tpl, "b", 0, 30, Some(0)).unwrap();
        assert_eq!(get(&tpl, 0), Some(7));
        assert_eq!(get(&tpl, 1), None);
        assert_eq!(get(&tpl, 2), Some(0));
        assert_eq!(get(&tpl, 3), None, "past the end");
        set(&mut tpl, 1, 3);
        assert_eq!(get(&tpl, 1), Some(3));
        // The offsets are untouched.
        let offsets: Vec<_> = tpl.elements().iter().map(|e| e.offset()).collect();
        assert_eq!(
            offsets,
            [Offset::Offset(10), Offset::Offset(20), Offset::Offset(30)]
        );
    }
}
