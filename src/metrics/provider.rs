//! Flushing and shutting down a meter provider off the calling thread,
//! bounded by a timeout, from async or synchronous code: for any
//! [`SdkMeterProvider`], whatever its exporter (also re-exported by the
//! `otlp` module, which builds one with an OTLP exporter).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::SdkMeterProvider;

/// A flush or shutdown of a meter provider failed ([`flush`], [`shutdown`],
/// [`flush_blocking`], [`shutdown_blocking`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// Collecting or exporting during a flush failed (for example, the
    /// collector is unreachable).
    #[error("metrics flush failed")]
    Flush(#[source] OTelSdkError),
    /// Shutting the provider down failed (its final export, or it had already
    /// been shut down).
    #[error("metrics shutdown failed")]
    Shutdown(#[source] OTelSdkError),
    /// A flush or shutdown did not finish within its timeout. The export may
    /// still complete in the background, bounded by the exporter's own timeout.
    #[error("metrics {operation} timed out after {timeout:?}")]
    Timeout {
        /// `"flush"` or `"shutdown"`.
        operation: &'static str,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The helper thread for a flush or shutdown could not be started.
    #[error("cannot start the metrics {operation} thread")]
    Thread {
        /// `"flush"` or `"shutdown"`.
        operation: &'static str,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
    /// The flush or shutdown panicked inside the SDK.
    #[error("metrics {operation} panicked")]
    Panicked {
        /// `"flush"` or `"shutdown"`.
        operation: &'static str,
    },
}

/// Collects and exports everything recorded so far, waiting at most `timeout`.
///
/// Safe on any async runtime, including tokio's current-thread runtime: the
/// blocking [`SdkMeterProvider::force_flush`] runs on a separate thread while
/// this future waits without blocking the runtime (the gRPC exporter needs
/// the runtime to make progress). No tokio timer is needed either.
///
/// The provider keeps exporting periodically afterwards; use [`shutdown`] at
/// the very end instead of, or after, this.
///
/// ```no_run
/// # async fn example(provider: opentelemetry_sdk::metrics::SdkMeterProvider) {
/// use std::time::Duration;
///
/// if let Err(error) = fresh_consumer::metrics::flush(&provider, Duration::from_secs(5)).await {
///     eprintln!("last metrics were not exported: {error}");
/// }
/// # }
/// ```
///
/// # Errors
///
/// [`FlushError::Flush`] if the export failed (e.g. the collector is
/// unreachable) or the provider was shut down; [`FlushError::Timeout`] if it
/// did not finish in time (the export then goes on in the background, bounded
/// by the exporter's timeout).
pub async fn flush(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    off_thread(Operation::Flush, timeout, move || provider.force_flush())?
        .await
        .unwrap_or(Err(FlushError::Panicked {
            operation: Operation::Flush.name(),
        }))
}

/// Exports what is left and shuts the provider down (its reader thread ends),
/// waiting at most `timeout`. Safe on any async runtime, like [`flush`].
///
/// Afterwards, dropping the provider no longer blocks, and recording into it
/// is a no-op.
///
/// # Errors
///
/// [`FlushError::Shutdown`] if the final export failed or the provider had
/// already been shut down; [`FlushError::Timeout`] if it did not finish in time.
pub async fn shutdown(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    off_thread(Operation::Shutdown, timeout, move || {
        provider.shutdown_with_timeout(timeout)
    })?
    .await
    .unwrap_or(Err(FlushError::Panicked {
        operation: Operation::Shutdown.name(),
    }))
}

/// [`flush`] for synchronous code: blocks the calling thread for at most
/// `timeout`.
///
/// Do not call it on a thread that drives a tokio runtime (inside `async`
/// code); with the gRPC exporter that stalls the export until the timeout.
/// Use [`flush`] there.
///
/// # Errors
///
/// As [`flush`].
pub fn flush_blocking(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    run_with_timeout(Operation::Flush, timeout, move || provider.force_flush())
}

/// [`shutdown`] for synchronous code: blocks the calling thread for at most
/// `timeout`. The same caveat as for [`flush_blocking`] applies.
///
/// # Errors
///
/// As [`shutdown`].
pub fn shutdown_blocking(provider: &SdkMeterProvider, timeout: Duration) -> Result<(), FlushError> {
    let provider = provider.clone();
    run_with_timeout(Operation::Shutdown, timeout, move || {
        provider.shutdown_with_timeout(timeout)
    })
}

#[derive(Debug, Clone, Copy)]
enum Operation {
    Flush,
    Shutdown,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Flush => "flush",
            Operation::Shutdown => "shutdown",
        }
    }

    fn error(self, source: OTelSdkError) -> FlushError {
        match self {
            Operation::Flush => FlushError::Flush(source),
            Operation::Shutdown => FlushError::Shutdown(source),
        }
    }
}

/// Runs `work` on its own thread and waits for it for at most `timeout`,
/// blocking the calling thread.
fn run_with_timeout(
    operation: Operation,
    timeout: Duration,
    work: impl FnOnce() -> OTelSdkResult + Send + 'static,
) -> Result<(), FlushError> {
    let (done_tx, done_rx) = mpsc::channel();
    thread::Builder::new()
        .name(format!("otlp-{}", operation.name()))
        .spawn(move || {
            // The receiver is gone if the caller timed out: nothing to report.
            let _ = done_tx.send(work());
        })
        .map_err(|source| FlushError::Thread {
            operation: operation.name(),
            source,
        })?;
    match done_rx.recv_timeout(timeout) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(operation.error(source)),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(FlushError::Timeout {
            operation: operation.name(),
            timeout,
        }),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(FlushError::Panicked {
            operation: operation.name(),
        }),
    }
}

/// Runs [`run_with_timeout`] on a waiter thread and returns a receiver for its
/// result, so that async callers never block their runtime.
fn off_thread(
    operation: Operation,
    timeout: Duration,
    work: impl FnOnce() -> OTelSdkResult + Send + 'static,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), FlushError>>, FlushError> {
    let (result_tx, result_rx) = tokio::sync::oneshot::channel();
    thread::Builder::new()
        .name(format!("otlp-{}-wait", operation.name()))
        .spawn(move || {
            // The receiver is gone if the caller's future was dropped.
            let _ = result_tx.send(run_with_timeout(operation, timeout, work));
        })
        .map_err(|source| FlushError::Thread {
            operation: operation.name(),
            source,
        })?;
    Ok(result_rx)
}
