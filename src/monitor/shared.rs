//! What a running monitor shares with its handle and its gauges: the
//! latest report and the cycle counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::monitor::report::MonitorReport;

/// What the handle and the gauges read: the latest report and the cycle
/// counts.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) latest: Mutex<Option<Arc<MonitorReport>>>,
    pub(crate) cycles_ok: AtomicU64,
    pub(crate) cycles_failed: AtomicU64,
    pub(crate) failed_by_kind: Mutex<std::collections::BTreeMap<&'static str, u64>>,
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
