//! The group monitor watching the soak's group from outside: one cycle
//! every `INTERVAL`, its diagnosis (or the kind of error of a failed cycle)
//! with a timestamp, for the report's timeline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::monitor::GroupMonitor;

use super::check::Event;
use super::now_ms;

/// How often the monitor reads the group.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// One cycle: (unix ms, `dead`, `keeping_up`, ... or `error:<kind>`).
pub type Reading = (i64, String);

/// Watches `group` on `topic` until `stop` resolves; returns every cycle's
/// reading. `stall_after` and `window` are short (10 s and 20 s), so a
/// fault of the soak's length can show.
pub async fn watch(
    bootstrap: String,
    group: String,
    topic: String,
    stop: impl std::future::Future<Output = ()>,
) -> Vec<Reading> {
    let readings = Arc::new(Mutex::new(Vec::new()));
    let monitor = GroupMonitor::new()
        .bootstrap_servers(bootstrap)
        .group(group)
        .topics([topic])
        .interval(INTERVAL)
        .stall_after(Duration::from_secs(10))
        .window(Duration::from_secs(20));
    let mut monitor = loop {
        match monitor.clone().connect().await {
            Ok(m) => break m,
            Err(e) => {
                readings
                    .lock()
                    .unwrap()
                    .push((now_ms(), format!("error:{}", e.kind())));
                tokio::time::sleep(INTERVAL).await;
            }
        }
    };
    let cycles = {
        let readings = Arc::clone(&readings);
        async move {
            let mut tick = tokio::time::interval(INTERVAL);
            loop {
                tick.tick().await;
                let reading = match monitor.cycle().await {
                    Ok(report) => report
                        .groups
                        .first()
                        .map_or("none".to_owned(), |g| g.diagnosis.as_str().to_owned()),
                    Err(e) => format!("error:{}", e.kind()),
                };
                readings.lock().unwrap().push((now_ms(), reading));
            }
        }
    };
    tokio::select! {
        _ = cycles => {}
        _ = stop => {}
    }
    readings.lock().unwrap().clone()
}

/// Each fault's first reading other than `keeping_up`/`idle` at or after
/// it, and the readings other than those outside every fault (from its
/// start to `settle_ms` after its end).
pub fn timeline(readings: &[Reading], events: &[Event], settle_ms: i64) -> (Vec<String>, usize) {
    let quiet = |r: &str| r == "keeping_up" || r == "idle";
    let mut lines = Vec::new();
    for e in events.iter().filter(|e| !e.what.ends_with("started")) {
        let first = readings.iter().find(|(t, r)| *t >= e.t_ms && !quiet(r));
        lines.push(match first {
            Some((t, r)) => format!(
                "{}: monitor read {r} {:.1} s later",
                e.what,
                (t - e.t_ms) as f64 / 1000.0
            ),
            None => format!("{}: the monitor saw nothing after it", e.what),
        });
    }
    let alarms = readings
        .iter()
        .filter(|(t, r)| {
            !quiet(r)
                && !events
                    .iter()
                    .any(|e| *t >= e.t_ms && *t <= e.until_ms + settle_ms)
        })
        .count();
    (lines, alarms)
}
