//! The group monitor watching the soak's group from outside: one cycle
//! every `INTERVAL`, its diagnosis (or the kind of error of a failed cycle)
//! and the group's member count with a timestamp, for `signals.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::monitor::GroupMonitor;

use super::now_ms;

/// How often the monitor reads the group.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// One cycle: (unix ms, `dead`, `keeping_up`, ... or `error:<kind>`, the
/// group's member count as the brokers described it).
pub type Reading = (i64, String, Option<u32>);

/// Watches `group` on `topic` until `stop` resolves; returns every cycle's
/// reading. `stall_after` and the lag threshold are the soak's evaluation
/// window (`window`), the monitor's own window twice that, so a fault of
/// the soak's length can show.
pub async fn watch(
    bootstrap: String,
    group: String,
    topic: String,
    window: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Vec<Reading> {
    let readings = Arc::new(Mutex::new(Vec::new()));
    let monitor = GroupMonitor::new()
        .bootstrap_servers(bootstrap)
        .group(group)
        .topics([topic])
        .interval(INTERVAL)
        .stall_after(window)
        .lag_threshold(window)
        .window(window * 2);
    let mut monitor = loop {
        match monitor.clone().connect().await {
            Ok(m) => break m,
            Err(e) => {
                readings
                    .lock()
                    .unwrap()
                    .push((now_ms(), format!("error:{}", e.kind()), None));
                tokio::time::sleep(INTERVAL).await;
            }
        }
    };
    let cycles = {
        let readings = Arc::clone(&readings);
        async move {
            let mut tick = tokio::time::interval(INTERVAL);
            // A cycle slowed by a broker outage delays the next one; no
            // burst of catch-up cycles.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let reading = match monitor.cycle().await {
                    Ok(report) => report
                        .groups
                        .first()
                        .map_or((now_ms(), "none".to_owned(), None), |g| {
                            (now_ms(), g.diagnosis.as_str().to_owned(), g.members)
                        }),
                    Err(e) => (now_ms(), format!("error:{}", e.kind()), None),
                };
                readings.lock().unwrap().push(reading);
            }
        }
    };
    tokio::select! {
        _ = cycles => {}
        _ = stop => {}
    }
    readings.lock().unwrap().clone()
}
