//! [`ProcessingOrder::Partition`](crate::ProcessingOrder::Partition): a
//! partition's records one at a time, in offset order.

use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::consumer::ConsumerContext;

use crate::handler::Handler;

use super::source::Source;
use super::task::{Done, FLUSH_EVERY, Worker};

impl<H: Handler> Worker<H> {
    /// [`ProcessingOrder::Partition`]: one record at a time, in offset order.
    pub(super) async fn run_in_order<C: ConsumerContext>(&self, src: &mut Source<'_, C>) {
        let mut batch_start: Option<Instant> = None;
        // When the previous record succeeded and the next one is taken
        // without waiting, the clock read that ended the one starts the
        // other: one clock read per record on the success path.
        let mut last_end: Option<Instant> = None;
        loop {
            // Transactional outputs: after an aborted transaction.
            self.rewind(src);
            let record = if let Some(r) = self.try_next(src) {
                r
            } else {
                // The buffer is empty: the batch ends here.
                last_end = None;
                match self.next_after_idle(src, &mut batch_start).await {
                    Some(r) => r,
                    None => break,
                }
            };
            if self.state.stop.is_cancelled() {
                // Taken, never handled: the next owner gets it.
                self.unhandled(1);
                break;
            }
            let start = last_end.take().unwrap_or_else(Instant::now);
            batch_start.get_or_insert(start);
            let done = if self.plain {
                self.handle_plain(record, start).await
            } else {
                self.handle_until_done(record, Some(start)).await
            };
            match done {
                Done::Completed { succeeded_at } => last_end = succeeded_at,
                Done::Stopped | Done::Late => break,
                // Read again after the rewind at the loop's top.
                Done::Rewind => last_end = None,
            }
            if self.unflushed.load(Ordering::Relaxed) >= FLUSH_EVERY {
                self.flush_counts();
            }
        }
        if let Some(start) = batch_start.take() {
            self.state.metrics.batch(start.elapsed());
        }
    }
}
