//! Flushing the user's meter provider at shutdown, safely on any runtime.

use std::time::Duration;

use opentelemetry_sdk::metrics::SdkMeterProvider;

/// Flushes `provider` on a thread of its own (a direct `force_flush` from a
/// current-thread runtime waits forever for an exporter that needs that very
/// runtime), waiting at most `budget`. Returns `false` when the flush did not
/// finish in time; an export error is logged and counts as finished.
pub(crate) async fn flush(provider: &SdkMeterProvider, budget: Duration) -> bool {
    let provider = provider.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("fresh-consumer-flush".into())
        .spawn(move || {
            let _ = tx.send(provider.force_flush());
        });
    if spawned.is_err() {
        return false;
    }
    match tokio::time::timeout(budget, rx).await {
        Ok(Ok(Ok(()))) => true,
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "flushing metrics at shutdown failed");
            true
        }
        _ => {
            tracing::warn!(
                ?budget,
                "flushing metrics at shutdown did not finish in time"
            );
            false
        }
    }
}
