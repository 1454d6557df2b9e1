//! The health instruments: counters recorded by the library, gauges
//! observed from the hub at each collection.

use std::sync::Weak;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter, ObservableGauge};

use crate::health::judge::Evaluated;
use crate::health::report::PartitionStatus;
use crate::metrics::*;

/// Lag, head age, stalled duration, status, assignment size.
struct Gauges {
    _lag: ObservableGauge<i64>,
    _head_age: ObservableGauge<f64>,
    _stalled: ObservableGauge<f64>,
    _status: ObservableGauge<i64>,
    _size: ObservableGauge<i64>,
    _retention_margin: ObservableGauge<i64>,
    _retention_eta: ObservableGauge<f64>,
    _rebalance_in_progress: ObservableGauge<i64>,
}

/// What the gauges observe at each collection (the hub).
pub(crate) trait Observed: Send + Sync {
    /// Every assigned partition, evaluated now.
    fn evaluate(&self) -> Vec<Evaluated>;
    /// The number of assigned partitions, while the engine runs.
    fn assignment_size(&self) -> Option<usize>;
    /// Whether a rebalance is in progress for this member, while the
    /// engine runs.
    fn rebalance_in_progress(&self) -> Option<bool>;
}

/// The health instruments: counters recorded by the library, gauges
/// observed from the hub at each collection.
pub(crate) struct HealthInstruments {
    pub(crate) rebalances: Counter<u64>,
    pub(crate) rebalance_attrs: [Vec<KeyValue>; 3],
    pub(crate) overrun: Counter<u64>,
    pub(crate) resets: Counter<u64>,
    /// Kept so the observable gauges live as long as the instruments.
    _gauges: Gauges,
}

impl HealthInstruments {
    pub(crate) fn new(meter: &Meter, group: &str, hub: Weak<dyn Observed>) -> Self {
        let group_attrs = [
            KeyValue::new(MESSAGING_SYSTEM, "kafka"),
            KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, group.to_owned()),
        ];
        let rebalance_attrs = ["assigned", "revoked", "lost"].map(|kind| {
            let mut v = group_attrs.to_vec();
            v.push(KeyValue::new(REBALANCE_TYPE, kind));
            v
        });
        // Each gauge evaluates the partitions itself: a collection reads a
        // handful of atomics and short locks per partition.
        fn each(hub: &Weak<dyn Observed>, mut f: impl FnMut(&Evaluated, &[KeyValue])) {
            if let Some(hub) = hub.upgrade() {
                for e in hub.evaluate() {
                    f(&e, e.view.attributes());
                }
            }
        }
        fn with(base: &[KeyValue], extra: KeyValue) -> Vec<KeyValue> {
            base.iter().cloned().chain(std::iter::once(extra)).collect()
        }
        let lag = {
            let hub = hub.clone();
            meter
                .i64_observable_gauge(PARTITION_LAG)
                .with_unit("{message}")
                .with_description(
                    "Records between the high watermark and the committed (or processed) offset.",
                )
                .with_callback(move |o| {
                    each(&hub, |e, base| {
                        if let Some(l) = e.judged.lag {
                            o.observe(
                                l as i64,
                                &with(base, KeyValue::new(LAG_POSITION, "committed")),
                            );
                        }
                        if let Some(l) = e.judged.processed_lag {
                            o.observe(
                                l as i64,
                                &with(base, KeyValue::new(LAG_POSITION, "processed")),
                            );
                        }
                    })
                })
                .build()
        };
        let head_age = {
            let hub = hub.clone();
            meter
                .f64_observable_gauge(PARTITION_HEAD_AGE)
                .with_unit("s")
                .with_description("Age of the oldest record of the partition not yet completed; 0 when caught up.")
                .with_callback(move |o| {
                    each(&hub, |e, base| o.observe(e.head_age.as_secs_f64(), base))
                })
                .build()
        };
        let stalled = {
            let hub = hub.clone();
            meter
                .f64_observable_gauge(PARTITION_STALL_AGE)
                .with_unit("s")
                .with_description("Time the partition has been held up while records wait: since the committed offset or the processed position last moved, or completed records began to wait for a commit; 0 otherwise.")
                .with_callback(move |o| {
                    each(
                        &hub,
                        |e, base| o.observe(e.judged.stalled_for.as_secs_f64(), base),
                    )
                })
                .build()
        };
        let status = {
            let hub = hub.clone();
            meter
                .i64_observable_gauge(PARTITION_STATUS)
                .with_unit("1")
                .with_description("1 for the partition's current status (ok, warn, stall, stop, rewind), 0 for the others.")
                .with_callback(move |o| {
                    each(
                        &hub,
                        |e, base| {
                            for s in PartitionStatus::ALL {
                                let v = i64::from(s == e.status);
                                o.observe(v, &with(base, KeyValue::new(STATUS, s.as_str())));
                            }
                        },
                    )
                })
                .build()
        };
        let size = {
            let hub = hub.clone();
            let attrs = group_attrs.to_vec();
            meter
                .i64_observable_gauge(ASSIGNMENT_SIZE)
                .with_unit("{partition}")
                .with_description("Partitions currently assigned to this member.")
                .with_callback(move |o| {
                    if let Some(size) = hub.upgrade().and_then(|h| h.assignment_size()) {
                        o.observe(size as i64, &attrs);
                    }
                })
                .build()
        };
        // The retention margin, with the estimator the group monitor uses
        // (crate::health::retention): same numbers, in-process names.
        let retention_margin = {
            let hub = hub.clone();
            meter
                .i64_observable_gauge(PARTITION_RETENTION_MARGIN)
                .with_unit("{message}")
                .with_description("Committed offset minus log start offset; negative when records were deleted unread.")
                .with_callback(move |o| {
                    each(&hub, |e, base| {
                        let h = e.view.health();
                        if let Some(m) = h.retention_margin(e.view.committed()) {
                            o.observe(m.records, base);
                        }
                    })
                })
                .build()
        };
        let retention_eta = {
            let hub = hub.clone();
            meter
                .f64_observable_gauge(PARTITION_RETENTION_ETA)
                .with_unit("s")
                .with_description("Estimated time until the log start passes the committed offset, from the log start's movement.")
                .with_callback(move |o| {
                    each(&hub, |e, base| {
                        let h = e.view.health();
                        if let Some(eta) = h.retention_margin(e.view.committed()).and_then(|m| m.eta) {
                            o.observe(eta.as_secs_f64(), base);
                        }
                    })
                })
                .build()
        };
        let rebalance_in_progress = {
            let hub = hub.clone();
            let attrs = group_attrs.to_vec();
            meter
                .i64_observable_gauge(REBALANCE_IN_PROGRESS)
                .with_unit("1")
                .with_description("1 while a rebalance is in progress for this member (from joining or a revoke until the next assignment), 0 otherwise.")
                .with_callback(move |o| {
                    if let Some(b) = hub.upgrade().and_then(|h| h.rebalance_in_progress()) {
                        o.observe(i64::from(b), &attrs);
                    }
                })
                .build()
        };
        HealthInstruments {
            rebalances: meter
                .u64_counter(REBALANCES)
                .with_unit("{event}")
                .with_description(
                    "Rebalance events seen by this member: assigned, revoked or lost.",
                )
                .build(),
            rebalance_attrs,
            overrun: meter
                .u64_counter(RETENTION_OVERRUN_MESSAGES)
                .with_unit("{message}")
                .with_description("Records deleted by retention before the group processed them.")
                .build(),
            resets: meter
                .u64_counter(OFFSET_RESETS)
                .with_unit("{event}")
                .with_description("Partitions whose offset was missing or out of range, by reason.")
                .build(),
            _gauges: Gauges {
                _lag: lag,
                _head_age: head_age,
                _stalled: stalled,
                _status: status,
                _size: size,
                _retention_margin: retention_margin,
                _retention_eta: retention_eta,
                _rebalance_in_progress: rebalance_in_progress,
            },
        }
    }
}
