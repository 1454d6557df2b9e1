//! Not part of the API: hooks for the benches, with no semver promise.
//!
//! `benches/instrumentation.rs` measures what the library records per record
//! on the success path through these, so it times the library's own code
//! (`PartitionInstruments`, the derived wall clock) rather than a copy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;

use crate::clock::WallClock;
use crate::metrics::instruments::Instruments;
use crate::metrics::partition::PartitionInstruments;
use crate::record::EventTime;
use crate::record::RecordTimestamp;
use crate::slo::SloRegistry;

/// The instruments of `partitions` partitions of one topic, as a consumer
/// builds them on assignment.
pub struct SuccessPath {
    partitions: Vec<PartitionInstruments>,
    wall: WallClock,
}

impl SuccessPath {
    /// Instruments on `meter` for `group` and `partitions` partitions of
    /// `topic`, with no freshness objectives and no dead-letter topic.
    pub fn new(meter: &Meter, group: &str, topic: &str, partitions: i32) -> Self {
        let slo = Arc::new(SloRegistry::new(
            &[],
            Duration::from_secs(300),
            Duration::from_secs(3600),
        ));
        let instruments = Instruments::new(meter, group, slo);
        SuccessPath {
            partitions: (0..partitions)
                .map(|p| instruments.partition(topic, p, None, None, None))
                .collect(),
            wall: WallClock::new(),
        }
    }

    /// What a partition worker records when a handler attempt for a record
    /// of partition `p` with `timestamp` succeeded, after a handler that
    /// started at `started`: one clock read, the attempt's duration and the
    /// event age. Returns the clock reading, which starts the next record
    /// when records run back to back (as the worker does).
    pub fn succeeded(&self, p: usize, started: Instant, timestamp: RecordTimestamp) -> Instant {
        let ended = Instant::now();
        self.partitions[p].handler_succeeded(
            &self.wall,
            EventTime::Record(timestamp),
            ended.saturating_duration_since(started),
            ended,
        );
        ended
    }

    /// What the poll loop records per batch of `n` records of partition `p`
    /// handed to the worker.
    pub fn consumed(&self, p: usize, n: u64) {
        self.partitions[p].consumed(n);
    }
}
