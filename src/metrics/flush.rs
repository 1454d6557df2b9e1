//! Flushing the user's meter provider at shutdown, safely on any runtime.

use std::time::Duration;

use opentelemetry_sdk::metrics::SdkMeterProvider;

/// Flushes `provider` on a thread of its own (a direct `force_flush` from a
/// current-thread runtime waits forever for an exporter that needs that very
/// runtime), waiting at most `budget`. Returns `false` when the flush did not
/// finish in time; an export error is logged and counts as finished.
pub(crate) async fn flush(provider: &SdkMeterProvider, budget: Duration) -> bool {
    let provider = provider.clone();
    off_thread("metrics", budget, move || provider.force_flush()).await
}

/// Runs `work` (a provider's blocking `force_flush`) on a thread of its own,
/// waiting at most `budget`: see [`flush`]. `what` names the signal in the
/// warnings (`metrics`, `traces`).
pub(crate) async fn off_thread(
    what: &'static str,
    budget: Duration,
    work: impl FnOnce() -> opentelemetry_sdk::error::OTelSdkResult + Send + 'static,
) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("fresh-flush".into())
        .spawn(move || {
            let _ = tx.send(work());
        });
    if spawned.is_err() {
        return false;
    }
    match tokio::time::timeout(budget, rx).await {
        Ok(Ok(Ok(()))) => true,
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "flushing {what} at shutdown failed");
            true
        }
        _ => {
            tracing::warn!(
                ?budget,
                "flushing {what} at shutdown did not finish in time"
            );
            false
        }
    }
}
