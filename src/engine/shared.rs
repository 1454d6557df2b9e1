//! What the poll loop, the rebalance callbacks and the partition workers
//! share: the engine's parts and settings, and the workers' messages to the
//! poll loop.

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::WallClock;
use crate::engine::assignment::Assignment;
use crate::engine::commit::Committer;
use crate::engine::counters::Counters;
use crate::engine::offset_reset::Resets;
use crate::engine::partition::PartitionState;
use crate::engine::watchdog::PollClock;
use crate::failure::{Exhausted, Stale};
use crate::health::hub::HealthHub;
use crate::metrics::instruments::Instruments;

/// Messages from workers to the poll loop.
pub(crate) enum Ctrl {
    /// A paused partition's buffer drained to half: refill it and resume.
    Drained(Arc<PartitionState>),
    /// A retry-tier partition's next record is not due yet (`true`): pause
    /// it so nothing more is fetched meanwhile; or it is due now (`false`):
    /// resume it (unless its buffer still holds it paused).
    Hold(Arc<PartitionState>, bool),
}

/// What the poll loop, the rebalance callbacks and the partition workers
/// share. The committer, the watchdog, the statistics ingest and the health
/// thread get only the parts they use (each part is its own `Arc`); health
/// reads the engine through [`EngineView`], weakly.
pub(crate) struct Engine {
    /// The run's validated settings, read where each one acts (no copies
    /// handed down: see `config.rs`).
    pub(crate) settings: Arc<crate::config::Settings>,
    pub(crate) assignment: Arc<Assignment>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) committer: Arc<Committer>,
    pub(crate) exhausted: Arc<Exhausted>,
    /// The stale-record policy (`None`: every record is handled).
    pub(crate) stale: Option<Stale>,
    pub(crate) instruments: Instruments,
    pub(crate) poll_clock: Arc<PollClock>,
    /// Wall-clock time for event ages, derived from `Instant` reads.
    pub(crate) wall_clock: WallClock,
    pub(crate) health: Arc<HealthHub>,
    pub(crate) resets: Arc<Resets>,
    pub(crate) runtime: Handle,
    /// Cancelled when the consumer shuts down; every partition's stop token
    /// is a child of it.
    pub(crate) shutdown: CancellationToken,
    pub(crate) ctrl_tx: mpsc::UnboundedSender<Ctrl>,
    /// Traces (`None`: off, the default).
    pub(crate) trace: Option<Arc<crate::trace::Tracing>>,
    /// The producer of handler outputs (`None`: outputs off, the default).
    pub(crate) outputs: Option<Arc<crate::output::OutputProducer>>,
    /// Transactional outputs (`None`: off, the default).
    pub(crate) transactions: Option<Arc<crate::engine::transaction::Transactions>>,
    /// The pauses set by the application (`ControlHandle`).
    pub(crate) controls: Arc<crate::control::Controls>,
}
