//! The connected group monitor: [`Monitor`] runs the cycles (the reads on
//! a blocking thread, then the judgement of every group over its window),
//! and [`MonitorHandle`] and the gauges read what it last reported.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;

use crate::monitor::error::MonitorError;
use crate::monitor::export::Export;
use crate::monitor::judge::{GroupTracker, Rules};
use crate::monitor::reader::Reader;
use crate::monitor::report::MonitorReport;
use crate::monitor::shared::Shared;
use crate::record::unix_ms;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connected monitor: runs cycles, keeps the samples of the window.
pub struct Monitor {
    reader: Arc<Mutex<Reader>>,
    /// Per watched group; a group no longer watched is dropped.
    trackers: HashMap<String, GroupTracker>,
    rules: Rules,
    interval: Duration,
    /// When the first cycle started and which cycle is due next
    /// ([`Monitor::until_next_cycle`]).
    pace: Pace,
    shared: Arc<Shared>,
    _export: Option<Export>,
    /// The watched partitions under-replicated at the last cycle (each
    /// logged when it turns so, and when it is fully replicated again).
    under_replicated: std::collections::BTreeSet<(String, i32)>,
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
            pace: Pace::default(),
            shared,
            _export: export,
            under_replicated: std::collections::BTreeSet::new(),
        }
    }

    /// Logs each watched partition that turned under-replicated since the
    /// last cycle (WARN) or fully replicated again (INFO).
    fn log_replication(&mut self, report: &MonitorReport) {
        let mut now = std::collections::BTreeSet::new();
        for p in report.groups.iter().flat_map(|g| &g.partitions) {
            let Some(r) = p.replication.filter(|r| r.is_under_replicated()) else {
                continue;
            };
            let key = (p.topic.clone(), p.partition);
            if !self.under_replicated.contains(&key) && !now.contains(&key) {
                tracing::warn!(topic = %p.topic, partition = p.partition, replicas = r.replicas, in_sync = r.in_sync, brokers = r.brokers, "partition under-replicated: its consumers read from the leader as before, but one more broker loss can stop it");
            }
            now.insert(key);
        }
        for (topic, partition) in self.under_replicated.difference(&now) {
            tracing::info!(%topic, partition, "partition fully replicated again");
        }
        self.under_replicated = now;
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
        self.pace.anchor.get_or_insert(started);
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
                if g.assignments_unreadable {
                    if tracker.assignments_unreadable == 0 {
                        tracing::info!(group = %g.group, "the brokers describe the group's members, but none of their assignments can be read (not Kafka's consumer protocol?): it is judged without the partitions' owners");
                    }
                    tracker.assignments_unreadable += 1;
                }
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
        self.log_replication(&report);
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
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = self.until_next_cycle() => {}
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

    /// Waits until the next cycle is due: at once before the first cycle;
    /// then cycle `k` is due `interval x (k + frac(k x 0.618...))` after
    /// the first one started (the golden-ratio sequence), so cycles are
    /// 0.618 or 1.618 intervals apart, one interval on average; a cycle
    /// that is already late when asked for is skipped, not run at once.
    ///
    /// The offsets keep the cycles from sampling a group at one phase of
    /// its own commit cycle: with a fixed interval equal to the consumers'
    /// commit interval (librdkafka's auto commit every 5 s, `fresh-monitor`'s
    /// default `--interval` 5 s), every cycle read the time lag at the same
    /// point between two commits, so one run of the same steady group read
    /// 0.8 s and another 4.95 s. With them, any 12 consecutive cycles (a
    /// minute at 5 s) read a 5 s commit cycle at phases no more than 15 %
    /// of it apart, and their mean phase is within 8 % of its middle.
    pub async fn until_next_cycle(&mut self) {
        let Some(anchor) = self.pace.anchor else {
            return;
        };
        let now = Instant::now();
        let due = loop {
            self.pace.k += 1;
            let due = anchor + self.interval.mul_f64(offset(self.pace.k));
            if due >= now {
                break due;
            }
        };
        tokio::time::sleep_until(due.into()).await;
    }
}

/// When the first cycle started, and the number of the last one due.
#[derive(Debug, Default)]
struct Pace {
    anchor: Option<Instant>,
    k: u64,
}

/// The golden ratio's fractional part, 0.618...
const GOLDEN: f64 = 0.618_033_988_749_894_9;

/// When cycle `k` is due, in intervals after the first: `k + frac(k x
/// GOLDEN)`. The fractional parts of `k x GOLDEN` spread evenly over
/// 0..1 for any run of consecutive `k` (a low-discrepancy sequence).
fn offset(k: u64) -> f64 {
    k as f64 + (k as f64 * GOLDEN).fract()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_one_interval_apart_on_average() {
        let gaps: Vec<f64> = (0..1000).map(|k| offset(k + 1) - offset(k)).collect();
        for g in &gaps {
            let short = (g - GOLDEN).abs() < 1e-9;
            let long = (g - (1.0 + GOLDEN)).abs() < 1e-9;
            assert!(short || long, "{g}");
        }
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((mean - 1.0).abs() < 1e-3, "{mean}");
    }

    /// Cycles at the default 5 s against a group committing every 5 s:
    /// any 12 consecutive cycles (a minute) read the commit cycle at phases
    /// at most 15 % of it apart, their mean phase within 8 % of the middle
    /// (a sawtooth time lag read so averages within 0.4 s of its mean),
    /// where a fixed 5 s interval reads one phase forever.
    #[test]
    fn any_minute_of_cycles_samples_the_whole_commit_cycle() {
        let (interval, period) = (5.0, 5.0);
        for start in 0..2_000u64 {
            let mut phases: Vec<f64> = (start..start + 12)
                .map(|k| (offset(k) * interval % period) / period)
                .collect();
            phases.sort_by(f64::total_cmp);
            let widest = phases
                .windows(2)
                .map(|w| w[1] - w[0])
                .chain(std::iter::once(1.0 - phases[11] + phases[0]))
                .fold(0.0, f64::max);
            assert!(widest <= 0.15, "cycles {start}..: gap {widest}");
            let mean = phases.iter().sum::<f64>() / 12.0;
            assert!((mean - 0.5).abs() <= 0.08, "cycles {start}..: mean {mean}");
        }
        let fixed: std::collections::BTreeSet<u64> = (0..12u64)
            .map(|k| ((k as f64 * interval % period) * 1000.0) as u64)
            .collect();
        assert_eq!(fixed.len(), 1, "a fixed interval: one phase");
    }
}
