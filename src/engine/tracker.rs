//! Completion tracking: which offset of a partition may be committed.
//!
//! Kafka's committed offset means "every record before this offset is done". A
//! record may complete out of order (a later record of the same partition may
//! finish before an earlier one under key-ordered concurrency, or an earlier
//! one may be retrying), so the committable offset is the one after the
//! highest *contiguous* run of completed records, counted over the records
//! that were actually delivered (offsets may have gaps: compaction and
//! transaction markers leave holes that are never delivered).
//!
//! Each delivered record also keeps its event time, so the partition-health
//! signals can tell how old the head of the line is (the oldest delivered
//! record that has not completed).

use std::collections::VecDeque;

/// One delivered record not yet part of the completed prefix.
#[derive(Debug, Clone, Copy)]
struct Pending {
    offset: i64,
    done: bool,
    /// Event time in milliseconds since the Unix epoch (see
    /// [`OffsetTracker::delivered_at`]).
    event_ms: i64,
    /// The record's partition leader epoch, -1 when unknown.
    epoch: i32,
}

/// Tracks delivered and completed offsets of one partition.
///
/// Offsets must be delivered in increasing order ([`OffsetTracker::delivered`]);
/// completions may arrive in any order. [`OffsetTracker::committable`] is the
/// next offset to read after the contiguous completed prefix, or `None` before
/// any record completed.
#[derive(Debug, Default)]
pub(crate) struct OffsetTracker {
    /// Delivered records not yet part of the completed prefix, in offset
    /// order.
    pending: VecDeque<Pending>,
    /// Next offset to read after the completed prefix.
    committable: Option<i64>,
    /// The leader epoch of the last record of the completed prefix (`None`:
    /// unknown), committed with `committable` (KIP-320: a consumer starting
    /// from the commit asks the leader where that epoch ends, and so sees a
    /// log truncated below the commit).
    committable_epoch: Option<i32>,
    /// The first offset delivered since tracking (re)started: where an
    /// aborted transaction rewinds to before this member committed.
    first_delivered: Option<i64>,
    /// The leader epoch committed with the offset the partition was
    /// assigned at, if any: the position's epoch before a record arrives.
    start_epoch: Option<i32>,
}

impl OffsetTracker {
    /// Registers a record delivered to a handler, without an event time (its
    /// head-of-line age is unknown and counts as 0).
    #[cfg(test)]
    pub(crate) fn delivered(&mut self, offset: i64) -> bool {
        self.delivered_at(offset, i64::MAX, None)
    }

    /// Registers a record delivered to a handler, with its event time in
    /// milliseconds since the Unix epoch, and its partition leader epoch
    /// when known. Offsets at or below the last delivered one are ignored (a
    /// redelivery after a seek is tracked once). Returns `false` for such an
    /// ignored offset.
    pub(crate) fn delivered_at(&mut self, offset: i64, event_ms: i64, epoch: Option<i32>) -> bool {
        if self.last_delivered().is_some_and(|last| offset <= last) {
            return false;
        }
        self.first_delivered.get_or_insert(offset);
        self.pending.push_back(Pending {
            offset,
            done: false,
            event_ms,
            epoch: epoch.unwrap_or(-1),
        });
        true
    }

    /// Marks a delivered record completed (succeeded, or durably parked).
    /// Returns `true` when the committable offset advanced.
    pub(crate) fn completed(&mut self, offset: i64) -> bool {
        // In partition order the completed record is the head: no search.
        let i = match self.pending.front() {
            Some(p) if p.offset == offset => 0,
            _ => match self.pending.binary_search_by_key(&offset, |p| p.offset) {
                Ok(i) => i,
                Err(_) => return false,
            },
        };
        self.pending[i].done = true;
        let mut advanced = false;
        while let Some(&Pending {
            offset: o,
            done: true,
            epoch,
            ..
        }) = self.pending.front()
        {
            self.pending.pop_front();
            self.committable = Some(o + 1);
            self.committable_epoch = (epoch >= 0).then_some(epoch);
            advanced = true;
        }
        advanced
    }

    /// The next offset to read after the contiguous run of completed records:
    /// the offset to commit. `None` until the first delivered record completes.
    pub(crate) fn committable(&self) -> Option<i64> {
        self.committable
    }

    /// The leader epoch to commit with [`committable`](Self::committable):
    /// the epoch of the last completed record before it, when known.
    pub(crate) fn committable_epoch(&self) -> Option<i32> {
        self.committable_epoch
    }

    /// The leader epoch of the last delivered record (the one before
    /// [`position`](Self::position)), when known.
    pub(crate) fn position_epoch(&self) -> Option<i32> {
        match self.pending.back() {
            Some(p) => (p.epoch >= 0).then_some(p.epoch),
            None if self.committable.is_some() => self.committable_epoch,
            None => self.start_epoch,
        }
    }

    /// The leader epoch that came with the offset the partition starts at
    /// (the group's commit), for [`position_epoch`](Self::position_epoch)
    /// until a record arrives.
    pub(crate) fn set_start_epoch(&mut self, epoch: Option<i32>) {
        self.start_epoch = epoch;
    }

    /// The lowest delivered offset that has not completed yet (the head of
    /// the line), if any.
    #[cfg(test)]
    pub(crate) fn head(&self) -> Option<i64> {
        self.head_entry().map(|(o, _)| o)
    }

    /// The head of the line: the lowest delivered offset that has not
    /// completed yet, and its event time (milliseconds since the Unix epoch).
    pub(crate) fn head_entry(&self) -> Option<(i64, i64)> {
        self.pending
            .iter()
            .find(|p| !p.done)
            .map(|p| (p.offset, p.event_ms))
    }

    /// The highest offset delivered so far, if any (after the completed
    /// prefix: `committable - 1` once everything delivered completed).
    pub(crate) fn last_delivered(&self) -> Option<i64> {
        self.pending
            .back()
            .map(|p| p.offset)
            .or(self.committable.map(|c| c - 1))
    }

    /// The next offset the partition's records continue at: one past the
    /// last delivered record (librdkafka's application position), if any was
    /// delivered.
    pub(crate) fn position(&self) -> Option<i64> {
        self.last_delivered().map(|o| o + 1)
    }

    /// Whether the partition can start again at `offset` now: always when
    /// `offset` is not below the next offset to take; below it (the log was
    /// truncated, or the topic deleted and created again) only once every
    /// delivered record completed, so no late completion of an old record
    /// can be taken for the new record at the same offset.
    pub(crate) fn can_restart_at(&self, offset: i64) -> bool {
        self.pending.is_empty() || self.position().is_none_or(|p| offset >= p)
    }

    /// Starts the partition again at `offset`. Below the next offset to
    /// take, the records delivered so far are forgotten (the committable
    /// offset too): the records now at those offsets are new and are
    /// tracked, handled and committed as such, not ignored as
    /// redeliveries. Returns `true` when it forgot them. Call after
    /// [`can_restart_at`](Self::can_restart_at).
    pub(crate) fn restart_at(&mut self, offset: i64) -> bool {
        if self.position().is_none_or(|p| offset >= p) {
            return false;
        }
        debug_assert!(
            self.pending.is_empty(),
            "restart below with records pending"
        );
        self.pending.clear();
        self.committable = None;
        self.committable_epoch = None;
        self.first_delivered = None;
        self.start_epoch = None;
        true
    }

    /// The offset an aborted transaction rewinds the partition to: the
    /// member's last commit (`committed`, the next offset to read), else
    /// the first offset delivered since tracking started. `None` before
    /// anything was delivered or committed.
    pub(crate) fn rewind_target(&self, committed: Option<i64>) -> Option<i64> {
        committed.or(self.first_delivered)
    }

    /// Forgets every record delivered at or after `offset` (an aborted
    /// transaction's): they are fetched, delivered and handled again. The
    /// committable offset becomes `offset` (nothing new to commit), so the
    /// records before it stay done and the ones from it are taken as new.
    pub(crate) fn rewind_to(&mut self, offset: i64) {
        self.pending.clear();
        self.committable = Some(offset);
        self.committable_epoch = None;
        self.first_delivered.get_or_insert(offset);
    }

    /// Moves the committable offset to `offset`, librdkafka's position,
    /// when every delivered record completed and the position is past them:
    /// the offsets in between hold no record this consumer receives
    /// (transaction commit and abort markers, and under `read_committed`
    /// the records of aborted transactions). Returns `true` when the
    /// committable offset advanced; `false` while a delivered record is not
    /// done, before any record was delivered, or when `offset` is not
    /// ahead.
    pub(crate) fn pass_to(&mut self, offset: i64) -> bool {
        if !self.pending.is_empty() || self.committable.is_none_or(|c| offset <= c) {
            return false;
        }
        self.committable = Some(offset);
        true
    }

    /// Number of delivered records not yet in the completed prefix.
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::OffsetTracker;

    #[test]
    fn a_rewind_forgets_the_records_from_its_offset_on() {
        let mut t = OffsetTracker::default();
        assert_eq!(t.rewind_target(None), None);
        for o in 5..10 {
            assert!(t.delivered(o));
        }
        t.completed(5);
        t.completed(6);
        assert_eq!(
            t.rewind_target(None),
            Some(5),
            "nothing committed: the first delivered"
        );
        assert_eq!(t.rewind_target(Some(7)), Some(7));
        t.rewind_to(5);
        assert_eq!(
            (t.committable(), t.position(), t.outstanding()),
            (Some(5), Some(5), 0)
        );
        assert!(t.delivered(5), "record 5 is taken again");
        assert!(!t.delivered(5));
        assert!(t.completed(5));
        assert_eq!(t.committable(), Some(6));
    }

    #[test]
    fn a_restart_below_the_position_tracks_the_lower_offsets_as_new() {
        let mut t = OffsetTracker::default();
        for o in 0..20 {
            assert!(t.delivered(o));
        }
        for o in 0..19 {
            t.completed(o);
        }
        assert!(!t.can_restart_at(0), "record 19 is still pending");
        assert!(t.can_restart_at(20), "at the position: nothing to forget");
        t.completed(19);
        assert!(t.can_restart_at(0));
        assert!(t.restart_at(0));
        assert_eq!((t.committable(), t.position()), (None, None));
        assert!(t.delivered(0), "the new log's record 0 is new");
        assert!(t.completed(0));
        assert_eq!(t.committable(), Some(1));
        assert!(!t.restart_at(1), "at the position: kept");
        assert_eq!(t.committable(), Some(1));
    }

    #[test]
    fn out_of_order_completion_is_never_committed_past() {
        let mut t = OffsetTracker::default();
        for o in 0..4 {
            t.delivered(o);
        }
        assert!(!t.completed(1));
        assert!(!t.completed(2));
        assert!(!t.completed(3));
        assert_eq!(t.committable(), None, "nothing may be committed past 0");
        assert_eq!(t.head(), Some(0));
        assert!(t.completed(0));
        assert_eq!(t.committable(), Some(4));
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.head(), None);
    }

    #[test]
    fn in_order_completion_advances_one_by_one() {
        let mut t = OffsetTracker::default();
        for o in 10..13 {
            t.delivered(o);
            assert!(t.completed(o));
            assert_eq!(t.committable(), Some(o + 1));
        }
    }

    #[test]
    fn gaps_in_offsets_are_contiguous_over_delivered_records() {
        // Compaction or transaction markers: offsets 5 and 6 are never delivered.
        let mut t = OffsetTracker::default();
        t.delivered(4);
        t.delivered(7);
        t.delivered(8);
        t.completed(7);
        assert_eq!(t.committable(), None);
        t.completed(4);
        assert_eq!(t.committable(), Some(8));
        t.completed(8);
        assert_eq!(t.committable(), Some(9));
    }

    #[test]
    fn a_failed_record_holds_the_commit_until_it_succeeds() {
        let mut t = OffsetTracker::default();
        for o in 0..5 {
            t.delivered(o);
        }
        t.completed(0);
        t.completed(1);
        // Offset 2 fails; 3 and 4 would only complete after it in partition order,
        // but even if they completed, the commit must stay at 2.
        t.completed(3);
        t.completed(4);
        assert_eq!(t.committable(), Some(2));
        t.completed(2);
        assert_eq!(t.committable(), Some(5));
    }

    #[test]
    fn unknown_or_repeated_completions_are_ignored() {
        let mut t = OffsetTracker::default();
        t.delivered(0);
        assert!(!t.completed(7));
        assert!(t.completed(0));
        assert!(!t.completed(0));
        assert_eq!(t.committable(), Some(1));
    }

    #[test]
    fn redelivery_of_an_older_offset_is_tracked_once() {
        let mut t = OffsetTracker::default();
        t.delivered(0);
        t.delivered(1);
        t.delivered(1);
        t.delivered(0);
        assert_eq!(t.outstanding(), 2);
        t.completed(0);
        t.completed(1);
        t.delivered(1);
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.committable(), Some(2));
    }

    #[test]
    fn a_position_past_markers_is_passed_only_when_everything_completed() {
        let mut t = OffsetTracker::default();
        assert!(!t.pass_to(5), "nothing delivered yet");
        t.delivered(0);
        t.delivered(1);
        t.completed(1);
        assert!(!t.pass_to(5), "record 0 is not done");
        t.completed(0);
        assert_eq!(t.committable(), Some(2));
        assert!(!t.pass_to(2), "not ahead");
        assert!(t.pass_to(3), "a commit marker at offset 2");
        assert_eq!(t.committable(), Some(3));
        assert_eq!(t.position(), Some(3));
        // The next record after the marker continues the run.
        assert!(t.delivered(3));
        assert!(!t.delivered(2), "at or below the position passed");
        t.completed(3);
        assert_eq!(t.committable(), Some(4));
    }

    #[test]
    fn the_head_of_the_line_carries_its_event_time() {
        let mut t = OffsetTracker::default();
        assert_eq!(t.head_entry(), None);
        assert_eq!(t.position(), None);
        assert!(t.delivered_at(10, 1_000, None));
        assert!(t.delivered_at(11, 2_000, None));
        assert!(t.delivered_at(12, 3_000, None));
        assert!(!t.delivered_at(11, 9_000, None), "redelivery ignored");
        assert_eq!(t.head_entry(), Some((10, 1_000)));
        assert_eq!(t.position(), Some(13));
        // A later record completing first does not move the head.
        t.completed(11);
        assert_eq!(t.head_entry(), Some((10, 1_000)));
        t.completed(10);
        assert_eq!(t.head_entry(), Some((12, 3_000)));
        t.completed(12);
        assert_eq!(t.head_entry(), None);
        assert_eq!(t.last_delivered(), Some(12));
        assert_eq!(t.position(), Some(13));
        assert!(!t.delivered_at(12, 0, None));
        assert!(
            t.delivered_at(20, 4_000, None),
            "a gap (compaction, retention) is fine"
        );
        assert_eq!(t.head_entry(), Some((20, 4_000)));
    }

    #[test]
    fn the_commit_carries_the_leader_epoch_of_the_record_before_it() {
        let mut t = OffsetTracker::default();
        assert_eq!(t.position_epoch(), None);
        t.set_start_epoch(Some(3));
        assert_eq!(
            t.position_epoch(),
            Some(3),
            "the committed epoch at the start"
        );
        t.delivered_at(10, 0, Some(3));
        t.delivered_at(11, 0, Some(4));
        t.delivered_at(12, 0, None);
        assert_eq!(t.position_epoch(), None, "the last record's, unknown");
        // Out of order: 11 done first moves nothing.
        t.completed(11);
        assert_eq!(t.committable_epoch(), None);
        t.completed(10);
        assert_eq!(t.committable(), Some(12));
        assert_eq!(t.committable_epoch(), Some(4), "record 11's epoch");
        t.completed(12);
        assert_eq!(t.committable(), Some(13));
        assert_eq!(t.committable_epoch(), None, "record 12 had none");
        t.delivered_at(13, 0, Some(5));
        t.completed(13);
        assert_eq!(t.position_epoch(), Some(5));
        // Markers passed keep the last record's epoch.
        assert!(t.pass_to(16));
        assert_eq!(
            (t.committable(), t.committable_epoch()),
            (Some(16), Some(5))
        );
        // An aborted transaction's rewind: unknown until a record completes.
        t.rewind_to(14);
        assert_eq!(t.committable_epoch(), None);
        // A restart below forgets the start epoch too.
        t.delivered_at(14, 0, Some(5));
        t.completed(14);
        assert!(t.restart_at(2));
        assert_eq!(t.position_epoch(), None);
        assert_eq!(t.committable_epoch(), None);
    }
}
