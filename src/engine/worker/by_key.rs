//! [`ProcessingOrder::Key`](crate::ProcessingOrder::Key): a partition's
//! records run concurrently across keys, up to `max_in_flight` handler
//! pipelines on the worker's task, each key in offset order.

use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rdkafka::consumer::ConsumerContext;

use crate::engine::tracker::OffsetTracker;
use crate::handler::Handler;
use crate::ordering::{KeyLanes, LaneId};
use crate::record::Record;

use super::source::Source;
use super::task::{Done, FLUSH_EVERY, Worker};

/// The worker's state under [`ProcessingOrder::Key`] (the running handler
/// pipelines are a local of [`Worker::run_by_key`]).
struct Keyed {
    /// Busy lanes and the records waiting behind them.
    lanes: KeyLanes<Record>,
    /// Records taken from the buffer that are not yet in the completed
    /// prefix: running, waiting, or completed after an unfinished earlier
    /// record. The look-ahead bound.
    window: OffsetTracker,
    /// At most this many records in `window` (`max_buffered_records`).
    window_limit: usize,
    max_in_flight: usize,
    batch_start: Option<Instant>,
    /// Stopped (revoke, shutdown): no record starts any more; the running
    /// ones finish.
    stopping: bool,
}

impl Keyed {
    /// `true` when the worker may take another record while `running`
    /// handler pipelines run.
    pub(super) fn has_room(&self, running: usize) -> bool {
        !self.stopping
            && running < self.max_in_flight
            && self.window.outstanding() < self.window_limit
    }
}

/// What a finished handler pipeline reports: its lane, its offset, and
/// whether the record completed (`false`: stopped with the record neither
/// handled nor parked).
type PipelineDone = (LaneId, i64, bool);

/// A record's handler pipeline in key order, boxed so it can be polled once
/// in place before it joins the running set (see `Worker::launch`).
type Pipeline<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = PipelineDone> + Send + 'a>>;

impl<H: Handler> Worker<H> {
    /// [`ProcessingOrder::Key`]: up to `max_in_flight` handler pipelines at
    /// once on this task, one per key lane, each lane in offset order.
    pub(super) async fn run_by_key<C: ConsumerContext>(
        &self,
        src: &mut Source<'_, C>,
        max_in_flight: usize,
    ) {
        let mut k = Keyed {
            lanes: KeyLanes::default(),
            window: OffsetTracker::default(),
            window_limit: self.engine.settings.max_buffered_records,
            max_in_flight,
            batch_start: None,
            stopping: false,
        };
        let mut running = FuturesUnordered::new();
        let cancelled = self.state.stop.clone().cancelled_owned();
        tokio::pin!(cancelled);
        loop {
            // Start what can start without waiting.
            while k.has_room(running.len()) {
                let Some(r) = self.try_next(src) else {
                    break;
                };
                let start = self.take(&mut k, r);
                self.launch(&mut k, &mut running, start);
            }
            if k.stopping {
                let dropped = k.lanes.drop_waiting();
                if dropped > 0 {
                    self.unhandled(dropped);
                }
                if running.is_empty() {
                    break;
                }
            }
            if running.is_empty() {
                // Idle: no record runs, so none waits (a waiting record
                // always has a running one ahead of it in its lane), and the
                // buffer is empty. The batch ends here.
                self.flush_counts();
                if let Some(start) = k.batch_start.take() {
                    self.state.metrics.batch(start.elapsed());
                }
                tokio::select! {
                    biased;
                    () = &mut cancelled => k.stopping = true,
                    r = self.next(src) => match r {
                        Some(r) => {
                            let start = self.take(&mut k, r);
                            self.launch(&mut k, &mut running, start);
                        }
                        None => k.stopping = true,
                    },
                }
                continue;
            }
            let can_take = k.has_room(running.len());
            let next = tokio::select! {
                biased;
                Some(done) = running.next() => self.finished(&mut k, done),
                () = &mut cancelled, if !k.stopping => {
                    k.stopping = true;
                    None
                }
                r = self.next(src), if can_take => match r {
                    Some(r) => self.take(&mut k, r),
                    None => {
                        k.stopping = true;
                        None
                    }
                },
            };
            self.launch(&mut k, &mut running, next);
        }
        if let Some(start) = k.batch_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
        // `running` is empty: every handler call this worker started ended
        // before `_done` drops with `self`.
    }

    /// Starts `next`'s handler pipeline. It is polled once in place: one
    /// that completes at once (a handler that does not wait) is finished
    /// here, and the next record of its lane started the same way, without
    /// the task bookkeeping of `running` (measured: 4-6 % of the CPU of
    /// key order with a no-op handler, `benches/throughput.rs`). One that
    /// waits joins `running`, which polls it again with its waker (a
    /// pushed future is polled on the next `poll_next`), so no wake-up is
    /// lost.
    fn launch<'a>(
        &'a self,
        k: &mut Keyed,
        running: &mut FuturesUnordered<Pipeline<'a>>,
        mut next: Option<(LaneId, Record)>,
    ) {
        while let Some((lane, r)) = next.take() {
            let mut pipeline: Pipeline<'a> = Box::pin(self.pipeline(lane, r));
            match (&mut pipeline).now_or_never() {
                Some(done) => next = self.finished(k, done),
                None => running.push(pipeline),
            }
        }
    }

    /// A record taken from the buffer in key order: returns it with its
    /// lane when it may start now; queues it behind its busy lane otherwise.
    fn take(&self, k: &mut Keyed, record: Record) -> Option<(LaneId, Record)> {
        if self.state.stop.is_cancelled() {
            k.stopping = true;
            // Taken, never handled: the next owner gets it.
            self.unhandled(1);
            return None;
        }
        k.batch_start.get_or_insert_with(Instant::now);
        k.window.delivered_at(record.offset(), 0, None);
        let lane = k.lanes.lane_of(&record);
        k.lanes.admit(lane, record).map(|r| (lane, r))
    }

    /// A handler pipeline ended: returns the next record of its lane to
    /// start, if any and not stopping.
    fn finished(
        &self,
        k: &mut Keyed,
        (lane, offset, completed): PipelineDone,
    ) -> Option<(LaneId, Record)> {
        // As in partition order: the shared counters every FLUSH_EVERY
        // records and when the worker goes idle (a failure flushes first
        // itself), not once per record.
        if self.unflushed.load(Ordering::Relaxed) >= FLUSH_EVERY {
            self.flush_counts();
        }
        if completed {
            k.window.completed(offset);
        } else {
            k.stopping = true;
        }
        let next = k.lanes.finish(lane)?;
        if k.stopping {
            // The waiting record is dropped, uncommitted.
            self.unhandled(1);
            return None;
        }
        Some((lane, next))
    }

    /// One record's handler pipeline in key order (its first attempt on
    /// the plain path when the partition allows it, as in partition order).
    async fn pipeline(&self, lane: LaneId, record: Record) -> PipelineDone {
        let offset = record.offset();
        let done = if self.plain {
            self.handle_plain(record, Instant::now()).await
        } else {
            self.handle_until_done(record, None).await
        };
        (lane, offset, matches!(done, Done::Completed { .. }))
    }
}
