//! librdkafka's statistics (`statistics.interval.ms`), as the health signals
//! use them: per assigned partition the log start offset (`lo_offset`), the
//! high watermark (`hi_offset`), the last stable offset (`ls_offset`, the
//! end lag counts to under `read_committed`), librdkafka's committed offset
//! and fetch state; per group the state and rebalance count; whether any
//! broker connection is up.
//!
//! Freshness: librdkafka emits a report every `statistics.interval.ms`, and
//! rdkafka hands it over only from inside a poll of the consumer; the poll
//! loop polls at least every `IDLE_POLL_TICK` (1 s). The
//! high watermark in a report is the one the last Fetch response carried: a
//! partition that does not fetch (paused, or its fetch queue full) would
//! keep the watermarks of its last fetch; the health thread refreshes them
//! (`health_view::refresh_watermarks`) and the reports do not move them back.

use std::time::{Duration, Instant};

use rdkafka::Statistics;

use crate::engine::assignment::Assignment;
use crate::engine::offset_reset::Resets;
use crate::health::hub::HealthHub;

/// Takes a statistics report: per assigned partition, then the group.
pub(crate) fn ingest(
    assignment: &Assignment,
    health: &HealthHub,
    resets: &Resets,
    statistics: &Statistics,
) {
    let now = Instant::now();
    let mut stopped = Vec::new();
    // Under read_committed the consumer reads to the last stable offset.
    let read_committed = health.config().is_none_or(|c| c.read_committed);
    for state in assignment.assigned() {
        let Some(p) = statistics
            .topics
            .get(&*state.topic)
            .and_then(|t| t.partitions.get(&state.partition))
        else {
            continue;
        };
        let is_stopped = p.fetch_state == "none";
        let end = if read_committed {
            p.ls_offset
        } else {
            p.hi_offset
        };
        let mut s = state.health.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.update(
            now,
            p.lo_offset,
            p.hi_offset,
            end,
            p.committed_offset,
            is_stopped,
        );
        let runs = s.fetch_stopped;
        drop(s);
        if is_stopped {
            stopped.push((state, runs));
        }
    }
    // A connection up to any broker: learned from metadata, configured
    // (bootstrap), or the group coordinator's (librdkafka's `logical`
    // entry, a connection of its own); not the internal pseudo-broker.
    // librdkafka connects to a learned broker only while it has requests
    // for it: a member without partitions (or whose fetch leaders moved)
    // may have none of those up while its coordinator connection is
    // (issue 46: "no broker reachable" for minutes in a soak, while the
    // member handled records).
    let up = statistics
        .brokers
        .values()
        .filter(|b| b.source != "internal")
        .any(|b| b.state == "UP");
    health.connection.brokers_reachable(up);
    if let Some(group) = &statistics.cgrp {
        let state_age = Duration::from_millis(group.stateage.max(0) as u64);
        health.group_statistics(&group.state, &group.join_state, state_age);
    }
    resets.statistics_received(now, stopped);
}
