//! The connected group monitor: [`Monitor`] runs the cycles (the reads on
//! a blocking thread, then the judgement of every group over its window),
//! and [`MonitorHandle`] and the gauges read what it last reported.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;

use crate::monitor::export::Export;
use crate::monitor::judge::{GroupTracker, Rules};
use crate::monitor::reader::Reader;
use crate::monitor::{MonitorError, MonitorReport};
use crate::record::unix_ms;

/// What the handle and the gauges read: the latest report and the cycle
/// counts.
#[derive(Default)]
pub(crate) struct Shared {
    latest: Mutex<Option<Arc<MonitorReport>>>,
    cycles_ok: AtomicU64,
    cycles_failed: AtomicU64,
    failed_by_kind: Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn latest(&self) -> Option<Arc<MonitorReport>> {
        lock(&self.latest).clone()
    }

    pub(crate) fn cycles_ok(&self) -> u64 {
        self.cycles_ok.load(Ordering::Relaxed)
    }

    pub(crate) fn failed_by_kind(&self) -> Vec<(&'static str, u64)> {
        lock(&self.failed_by_kind)
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }
}

/// A connected monitor: runs cycles, keeps the samples of the window.
pub struct Monitor {
    reader: Arc<Mutex<Reader>>,
    /// Per watched group; a group no longer watched is dropped.
    trackers: HashMap<String, GroupTracker>,
    rules: Rules,
    interval: Duration,
    shared: Arc<Shared>,
    _export: Option<Export>,
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Monitor")
            .field("interval", &self.interval)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Monitor {
    /// A monitor over a checked `reader`; its gauges on `meter`, if any.
    pub(super) fn new(
        reader: Reader,
        rules: Rules,
        interval: Duration,
        meter: Option<&Meter>,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let export = meter.map(|m| Export::new(m, Arc::downgrade(&shared)));
        Monitor {
            reader: Arc::new(Mutex::new(reader)),
            trackers: HashMap::new(),
            rules,
            interval,
            shared,
            _export: export,
        }
    }

    /// Runs one cycle now: reads every watched partition and evaluates each
    /// group with the samples of earlier cycles. The report also becomes
    /// the one [`MonitorHandle::latest`] and the gauges show.
    ///
    /// # Errors
    /// [`MonitorError::Kafka`] when a read failed (the samples are kept;
    /// the next cycle may succeed), [`MonitorError::UnknownTopic`] when a
    /// topic disappeared, [`MonitorError::TooMany`] when discovery found
    /// more groups than [`GroupMonitor::max_groups`] or the topics grew past
    /// [`GroupMonitor::max_partitions`].
    ///
    /// [`GroupMonitor::max_groups`]: crate::monitor::GroupMonitor::max_groups
    /// [`GroupMonitor::max_partitions`]: crate::monitor::GroupMonitor::max_partitions
    pub async fn cycle(&mut self) -> Result<MonitorReport, MonitorError> {
        let started = Instant::now();
        let reader = Arc::clone(&self.reader);
        let reads = tokio::task::spawn_blocking(move || lock(&reader).read())
            .await
            .map_err(|_| MonitorError::ReaderPanicked)
            .and_then(|r| r);
        let reads = match reads {
            Ok(r) => r,
            Err(e) => {
                self.shared.cycles_failed.fetch_add(1, Ordering::Relaxed);
                *lock(&self.shared.failed_by_kind)
                    .entry(e.kind())
                    .or_default() += 1;
                return Err(e);
            }
        };
        // Rates and ages at the instant the offsets were read, not after
        // the record reads that followed them.
        let (now, taken_at) = reads.read_at;
        let now_ms = unix_ms(taken_at);
        self.trackers
            .retain(|name, _| reads.groups.iter().any(|g| &g.group == name));
        let groups = reads
            .groups
            .iter()
            .map(|g| {
                let tracker = self.trackers.entry(g.group.clone()).or_default();
                tracker.assignor.clone_from(&g.assignor);
                let mut report = tracker.evaluate(
                    &g.group,
                    &g.observations,
                    g.members,
                    &self.rules,
                    now,
                    now_ms,
                );
                report.state = g.state.clone();
                report
            })
            .collect();
        let report = MonitorReport {
            taken_at,
            cycle_duration: started.elapsed(),
            records_read: reads.records_read,
            groups,
        };
        *lock(&self.shared.latest) = Some(Arc::new(report.clone()));
        self.shared.cycles_ok.fetch_add(1, Ordering::Relaxed);
        Ok(report)
    }

    /// A handle to the latest report, for another task.
    pub fn handle(&self) -> MonitorHandle {
        MonitorHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs a cycle every [`interval`](crate::monitor::GroupMonitor::interval) until `stop`
    /// resolves. A failed cycle is logged (WARN), counted
    /// ([`MonitorHandle::cycles`], `fresh_consumer.monitor.cycles` with
    /// `error.type`), and the next one runs at its time; the latest report
    /// stays the last good one.
    pub async fn run_until(mut self, stop: impl Future<Output = ()>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                _ = &mut stop => return,
                r = self.cycle() => {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, source = ?std::error::Error::source(&e).map(|s| s.to_string()), "group monitor cycle failed");
                    }
                }
            }
        }
    }
}

/// Reads what a running [`Monitor`] last reported. Cheap to clone.
#[derive(Clone)]
pub struct MonitorHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for MonitorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonitorHandle").finish_non_exhaustive()
    }
}

impl MonitorHandle {
    /// The latest successful cycle's report; `None` before the first.
    pub fn latest(&self) -> Option<Arc<MonitorReport>> {
        self.shared.latest()
    }

    /// `(successful, failed)` cycles so far.
    pub fn cycles(&self) -> (u64, u64) {
        (
            self.shared.cycles_ok.load(Ordering::Relaxed),
            self.shared.cycles_failed.load(Ordering::Relaxed),
        )
    }
}
