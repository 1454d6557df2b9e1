//! Names unique to a process and a call, for the topics and groups of
//! benches and tests on a broker that other runs may share (a real cluster
//! outlives them).
//!
//! Shared with `#[path]`: the benches include it through
//! `benches/support/mod.rs`, the tests through `tests/support/kafka.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique to this process and call.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("{prefix}-{}-{t}-{n}", std::process::id())
}
