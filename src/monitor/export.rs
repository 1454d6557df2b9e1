//! The monitor's instruments: observable gauges and counters read from the
//! latest report at each collection (names in [`crate::metrics`]).

use std::sync::{Arc, Weak};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableCounter, ObservableGauge};

use crate::metrics::*;
use crate::monitor::report::{
    Diagnosis, GroupReport, HeadTimestamp, LagStatus, MonitorReport, PartitionLag, Scaling,
};
use crate::monitor::shared::Shared;

/// Kept so the callbacks live as long as the monitor.
pub(crate) struct Export {
    _gauges: Vec<ObservableGauge<f64>>,
    _int_gauges: Vec<ObservableGauge<i64>>,
    _counters: Vec<ObservableCounter<u64>>,
}

fn group_attrs(g: &GroupReport) -> Vec<KeyValue> {
    vec![
        KeyValue::new(MESSAGING_SYSTEM, "kafka"),
        KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, g.group.clone()),
    ]
}

fn partition_attrs(g: &GroupReport, p: &PartitionLag) -> Vec<KeyValue> {
    vec![
        KeyValue::new(MESSAGING_SYSTEM, "kafka"),
        KeyValue::new(MESSAGING_DESTINATION_NAME, p.topic.clone()),
        KeyValue::new(MESSAGING_DESTINATION_PARTITION_ID, p.partition.to_string()),
        KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, g.group.clone()),
    ]
}

fn with(mut base: Vec<KeyValue>, extra: KeyValue) -> Vec<KeyValue> {
    base.push(extra);
    base
}

/// Calls `f` with the latest report, if any.
fn latest(shared: &Weak<Shared>) -> Option<Arc<MonitorReport>> {
    shared.upgrade().and_then(|s| s.latest())
}

fn each_partition(shared: &Weak<Shared>, mut f: impl FnMut(&GroupReport, &PartitionLag)) {
    if let Some(r) = latest(shared) {
        for g in &r.groups {
            for p in &g.partitions {
                f(g, p);
            }
        }
    }
}

fn each_group(shared: &Weak<Shared>, mut f: impl FnMut(&GroupReport)) {
    if let Some(r) = latest(shared) {
        r.groups.iter().for_each(&mut f);
    }
}

impl Export {
    pub(crate) fn new(meter: &Meter, shared: Weak<Shared>) -> Self {
        let s = || shared.clone();
        let mut gauges = Vec::new();
        let mut int_gauges = Vec::new();
        let mut counters = Vec::new();

        let sh = s();
        int_gauges.push(
            meter
                .i64_observable_gauge(MONITOR_LAG)
                .with_unit("{message}")
                .with_description("Records between the end the group reads to and its committed offset, read from the brokers.")
                .with_callback(move |o| {
                    each_partition(&sh, |g, p| {
                        if let Some(l) = p.offset_lag {
                            o.observe(l as i64, &partition_attrs(g, p));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        gauges.push(
            meter
                .f64_observable_gauge(MONITOR_TIME_LAG)
                .with_unit("s")
                .with_description("Now minus the timestamp of the record at the group's committed offset; 0 when caught up.")
                .with_callback(move |o| {
                    each_partition(&sh, |g, p| {
                        if let Some(t) = p.time_lag {
                            let kind = match p.timestamp {
                                HeadTimestamp::CreateTime(_) | HeadTimestamp::Future(_) => "create_time",
                                HeadTimestamp::LogAppendTime(_) => "log_append_time",
                                _ => "none",
                            };
                            o.observe(
                                t.as_secs_f64(),
                                &with(partition_attrs(g, p), KeyValue::new(TIMESTAMP_TYPE, kind)),
                            );
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        gauges.push(
            meter
                .f64_observable_gauge(MONITOR_COMMIT_AGE)
                .with_unit("s")
                .with_description(
                    "Time since the group's committed offset last changed, as seen by the monitor.",
                )
                .with_callback(move |o| {
                    each_partition(&sh, |g, p| {
                        if let Some(d) = p.commit_unchanged_for {
                            o.observe(d.as_secs_f64(), &partition_attrs(g, p));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        int_gauges.push(
            meter
                .i64_observable_gauge(MONITOR_RETENTION_MARGIN)
                .with_unit("{message}")
                .with_description("Committed offset minus log start offset; negative when records were deleted unread.")
                .with_callback(move |o| {
                    each_partition(&sh, |g, p| {
                        if let Some(m) = p.retention_margin {
                            o.observe(m, &partition_attrs(g, p));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        gauges.push(
            meter
                .f64_observable_gauge(MONITOR_RETENTION_ETA)
                .with_unit("s")
                .with_description("Estimated time until the log start passes the committed offset.")
                .with_callback(move |o| {
                    each_partition(&sh, |g, p| {
                        if let Some(d) = p.retention_eta {
                            o.observe(d.as_secs_f64(), &partition_attrs(g, p));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        int_gauges.push(
            meter
                .i64_observable_gauge(MONITOR_PARTITION_STATUS)
                .with_unit("1")
                .with_description("1 for the partition's current status as seen by the monitor, 0 for the others.")
                .with_callback(move |o| {
                    each_partition(&sh, |g, p| {
                        let base = partition_attrs(g, p);
                        for name in LagStatus::NAMES {
                            let v = i64::from(name == p.status.as_str());
                            o.observe(v, &with(base.clone(), KeyValue::new(STATUS, name)));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        int_gauges.push(
            meter
                .i64_observable_gauge(MONITOR_GROUP_DIAGNOSIS)
                .with_unit("1")
                .with_description("1 for the group's current diagnosis, 0 for the others.")
                .with_callback(move |o| {
                    each_group(&sh, |g| {
                        for name in Diagnosis::NAMES {
                            let v = i64::from(name == g.diagnosis.as_str());
                            o.observe(v, &with(group_attrs(g), KeyValue::new(DIAGNOSIS, name)));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        gauges.push(
            meter
                .f64_observable_gauge(MONITOR_DRAIN_TIME)
                .with_unit("s")
                .with_description(
                    "Estimated time to drain the group's backlog at the recent commit rate.",
                )
                .with_callback(move |o| {
                    each_group(&sh, |g| {
                        if let Some(d) = g.drain_time {
                            o.observe(d.as_secs_f64(), &group_attrs(g));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        int_gauges.push(
            meter
                .i64_observable_gauge(MONITOR_REPLICAS_SUGGESTED)
                .with_unit("{replica}")
                .with_description("Replicas suggested for a consumer-bound group, never above the partition count.")
                .with_callback(move |o| {
                    each_group(&sh, |g| {
                        if let Scaling::Suggest { replicas: Some(n), .. } = g.scaling {
                            o.observe(i64::from(n), &group_attrs(g));
                        }
                    })
                })
                .build(),
        );
        let sh = s();
        counters.push(
            meter
                .u64_observable_counter(MONITOR_TIMESTAMP_MISSING)
                .with_unit("{message}")
                .with_description("Records read at committed offsets without a usable timestamp.")
                .with_callback(move |o| {
                    each_group(&sh, |g| o.observe(g.timestamps_missing, &group_attrs(g)))
                })
                .build(),
        );
        let sh = s();
        counters.push(
            meter
                .u64_observable_counter(MONITOR_TIMESTAMP_FUTURE)
                .with_unit("{message}")
                .with_description(
                    "Records read at committed offsets with a timestamp in the future.",
                )
                .with_callback(move |o| {
                    each_group(&sh, |g| o.observe(g.timestamps_future, &group_attrs(g)))
                })
                .build(),
        );
        let sh = s();
        counters.push(
            meter
                .u64_observable_counter(MONITOR_CYCLES)
                .with_unit("{cycle}")
                .with_description("Monitor cycles run; failed ones carry error.type.")
                .with_callback(move |o| {
                    if let Some(sh) = sh.upgrade() {
                        let system = KeyValue::new(MESSAGING_SYSTEM, "kafka");
                        o.observe(sh.cycles_ok(), std::slice::from_ref(&system));
                        for (kind, n) in sh.failed_by_kind() {
                            o.observe(n, &[system.clone(), KeyValue::new(ERROR_TYPE, kind)]);
                        }
                    }
                })
                .build(),
        );
        Export {
            _gauges: gauges,
            _int_gauges: int_gauges,
            _counters: counters,
        }
    }
}
