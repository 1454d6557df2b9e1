//! [`shutdown_signal`]: the process being asked to stop (SIGTERM or SIGINT),
//! and the two-signal rule [`FreshConsumer::run`](crate::FreshConsumer::run)
//! follows.

use tokio_util::sync::CancellationToken;

/// Resolves when the process is asked to stop: SIGTERM (what Kubernetes,
/// systemd and `docker stop` send) or SIGINT (Ctrl-C) on Unix; Ctrl-C
/// elsewhere. Pass it to
/// [`run_until`](crate::FreshConsumer::run_until) when you need the run's
/// future for something else (a `select!`, a health server beside it);
/// [`run`](crate::FreshConsumer::run) uses it already.
///
/// The handlers are installed when the future is first polled; from then
/// on the signals no longer end the process by themselves (their default
/// action), for the rest of its life: await it early, before the work it
/// guards.
///
/// Must be polled inside a tokio runtime. When the signal handlers cannot
/// be installed (no signal driver: a runtime built without `enable_io`),
/// it waits for Ctrl-C only, as [`tokio::signal::ctrl_c`] does.
///
/// ```no_run
/// # async fn run() -> Result<(), fresh_consumer::RunError> {
/// use fresh_consumer::{FreshConsumer, Record, shutdown_signal};
///
/// async fn handle(_record: Record) -> Result<(), std::io::Error> { Ok(()) }
///
/// let summary = FreshConsumer::new(handle)
///     .bootstrap_servers("localhost:9092")
///     .group_id("billing")
///     .topics(["payments"])
///     .run_until(shutdown_signal())
///     .await?;
/// # let _ = summary; Ok(()) }
/// ```
pub async fn shutdown_signal() {
    Signals::new().recv().await;
}

/// The stop signals, installed at creation; each [`recv`](Signals::recv)
/// waits for the next one.
pub(crate) struct Signals {
    #[cfg(unix)]
    unix: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Installs the handlers for SIGTERM and SIGINT (Unix). Needs a tokio
    /// runtime with its I/O driver; without one, [`recv`](Self::recv) falls
    /// back to [`tokio::signal::ctrl_c`].
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let unix = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            Signals { unix }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The next SIGTERM or SIGINT.
    pub(crate) async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some((term, int)) = &mut self.unix {
            tokio::select! {
                _ = term.recv() => tracing::warn!("SIGTERM received"),
                _ = int.recv() => tracing::warn!("SIGINT received"),
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
        tracing::warn!("Ctrl-C received");
    }

    /// Watches the signals on a task of its own: the first cancels the
    /// first token (shut down gracefully), the second cancels the second
    /// (stop at once). The task ends with the returned guard.
    pub(crate) fn watch(mut self) -> (CancellationToken, CancellationToken, WatchGuard) {
        let graceful = CancellationToken::new();
        let interrupt = CancellationToken::new();
        let (g, i) = (graceful.clone(), interrupt.clone());
        let task = tokio::spawn(async move {
            self.recv().await;
            g.cancel();
            self.recv().await;
            i.cancel();
        });
        (graceful, interrupt, WatchGuard(task))
    }
}

/// Ends the signal watch when dropped (the handlers stay installed: the
/// process does not go back to the signals' default action).
pub(crate) struct WatchGuard(tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
