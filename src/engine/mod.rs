//! The engine: the only code that runs things. Private; reached through
//! [`FreshConsumer::run_until`](crate::FreshConsumer::run_until).
//!
//! The crate, file by file (dependencies run one way, top to bottom;
//! `tests/architecture.rs` checks it):
//! - `consumer.rs`: [`FreshConsumer`](crate::FreshConsumer) and every setter; `run_until`
//!   validates (`config.rs`) and starts the engine.
//! - `engine/` (private, the only code that runs things): `mod.rs` wires a
//!   run; `poll.rs` the poll loop and the bounded shutdown; `context.rs`
//!   librdkafka's callbacks (rebalances through `offset_reset.rs` and
//!   `assignment.rs`); `worker/` the per-partition worker (handler,
//!   retries, event age) over `partition.rs`, the partition's shared
//!   state; `tracker.rs` completed offsets; `commit.rs` the
//!   committer; `counters.rs` the [`RunSummary`](crate::RunSummary); `watchdog.rs`
//!   poll-interval warnings; `stats.rs` librdkafka's statistics;
//!   `health_view.rs` what health reads, and the health thread.
//! - [`output`](crate::output): handler outputs: the task-local handle
//!   ([`outputs()`](crate::output::outputs)), the library's producer, the wait for acknowledgements
//!   and the origin-time header.
//! - [`failure`](crate::failure): retry policy and backoff, the exhausted-record decision
//!   with the storm guard, dead letters (config, writer, reader).
//! - [`health`](crate::health): thresholds, reports, the hub behind [`HealthHandle`](crate::health::HealthHandle), the
//!   status rules, the gauges; it reads the engine only through traits it
//!   defines.
//! - [`metrics`](crate::metrics): the metric and attribute names, the instruments, the
//!   shutdown flush; `otlp`: the opt-in exporter helper (feature `otlp`, on
//!   by default).
//! - [`monitor`](crate::monitor): the group monitor, which watches groups from outside
//!   (committed offsets, watermarks, the record at the committed offset):
//!   `reader.rs` the reads, `judge.rs` statuses and diagnosis, `report.rs`,
//!   `export.rs` the gauges. It depends on `config` and lower, never on
//!   the engine.
//! - Leaves: `record.rs` ([`Record`](crate::Record) and the one event-time rule),
//!   `clock.rs`, `handler.rs`, `ordering.rs`, [`slo`](crate::slo), `summary.rs`,
//!   `error.rs`, `control.rs` ([`ControlHandle`](crate::control::ControlHandle): pauses set by the
//!   application).
//!
//! The data path, file by file:
//! 1. `poll.rs`: the poll loop polls librdkafka's main queue (rebalances,
//!    errors, statistics, and the records of a partition whose queue could
//!    not be split) and hands records to the workers in batches.
//! 2. `context.rs`: librdkafka's callbacks; a rebalance goes through
//!    `offset_reset.rs` (where each new partition starts) and
//!    `assignment.rs` (the partition map and the commit gate), and splits
//!    each new partition's queue off the main queue.
//! 3. `worker/`: one worker task per partition reads its queue, runs the
//!    handler (retries, timeouts, the exhausted-record decision of
//!    [`crate::failure`]), records the event age, and completes the offset
//!    in the partition's state (`partition.rs`, with `tracker.rs`).
//! 4. `commit.rs`: the committer thread commits the next offset after each
//!    partition's contiguous run of completed records.
//! 5. Beside the path: `watchdog.rs` (poll-interval warnings), `stats.rs`
//!    (librdkafka's statistics), `health_view.rs` (what health reads, and
//!    the health thread), `counters.rs` (the run summary); `shared.rs`
//!    holds what the poll loop, the callbacks and the workers share.

mod assignment;
mod commit;
mod context;
mod counters;
mod health_view;
mod leader_epoch;
mod offset_reset;
mod partition;
mod poll;
mod queue;
mod shared;
mod stats;
mod tracker;
mod transaction;
mod watchdog;
mod worker;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::metrics::MeterProvider;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::WallClock;
use crate::config::Settings;
use crate::error::RunError;
use crate::failure::dead_letter::DeadLetterWriter;
use crate::failure::{Exhausted, OnExhausted};
use crate::handler::Handler;
use crate::health::hub::RunGuard;
use crate::health::view::EngineView;
use crate::metrics::instruments::Instruments;
use crate::metrics::scope;
use crate::output::OutputProducer;
use crate::summary::RunSummary;
use assignment::Assignment;
use commit::Committer;
use context::{Ctx, Kafka};
use counters::Counters;
use offset_reset::Resets;
use poll::{PollLoop, Stop};
use shared::Engine;
use watchdog::{IDLE_POLL_TICK, PollClock};

/// Ends the control handles' run when the run ends, however it ends.
struct ControlsGuard(Arc<crate::control::Controls>);

impl Drop for ControlsGuard {
    fn drop(&mut self) {
        self.0.stopped();
    }
}

/// A thread of the engine could not be started.
fn thread_error(e: std::io::Error) -> RunError {
    RunError::Thread(e)
}

/// Runs a consumer built from `settings` until `signal` resolves, then shuts
/// it down (see [`FreshConsumer::run_until`](crate::FreshConsumer::run_until));
/// `interrupt` resolving during that shutdown ends the run at once
/// ([`RunError::Interrupted`]).
pub(crate) async fn run<H, S, I>(
    handler: H,
    settings: Settings,
    signal: S,
    interrupt: I,
) -> Result<RunSummary, RunError>
where
    H: Handler,
    S: Future<Output = ()>,
    I: Future<Output = ()>,
{
    let validated = settings.validate()?;
    // One validated value for the whole run: the code that acts on a
    // setting reads it here (`engine.settings`), no copy is handed down.
    let settings = Arc::new(settings);
    let runtime = Handle::try_current().map_err(|_| RunError::NoRuntime)?;
    let meter = match (&settings.meter, &settings.meter_provider) {
        (Some(m), _) => m.clone(),
        (None, Some(p)) => p.meter_with_scope(scope()),
        (None, None) => opentelemetry::global::meter_with_scope(scope()),
    };
    let slo = Arc::new(crate::slo::SloRegistry::new(
        &settings.objectives,
        settings.slo_windows.0,
        settings.slo_windows.1,
    ));
    let _ = settings.health.hub.slo.set(Arc::clone(&slo));
    let instruments = Instruments::new(&meter, &validated.group_id, slo);
    let trace = settings.trace.build(scope(), &meter, &validated.group_id);
    // Partition health: its hub exists since the builder (for handles
    // taken before the run); it reports `Stopped` once this returns.
    let health = Arc::clone(&settings.health.hub);
    let _health_run = RunGuard::new(&health);
    health.register_instruments(&meter, &validated.group_id);
    let dead_letter_config = match &settings.on_exhausted {
        OnExhausted::DeadLetter(config) => Some(config),
        // The tier writes and the final dead-letter writes share one
        // producer, with the dead-letter configuration.
        OnExhausted::RetryTopics(rt) => Some(&rt.dead_letter),
        _ => None,
    };
    // The consumer's properties, which the library's producers inherit
    // their connection and security settings from.
    let properties: Vec<(String, String)> = validated
        .client_config
        .config_map()
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let new_writer = |config: &crate::failure::DeadLetter| {
        let producer_config = DeadLetterWriter::producer_config(&properties, config);
        DeadLetterWriter::new(
            producer_config,
            config.clone(),
            validated.group_id.clone(),
            validated.secrets.clone(),
        )
        .map_err(RunError::Client)
    };
    let dead_letter = match dead_letter_config {
        Some(config) => Some(new_writer(config)?),
        _ => None,
    };
    // Stale records written elsewhere share the dead-letter producer; with
    // no dead-letter policy they get one of their own, with the default
    // dead-letter configuration (`<topic>.dlt`, the library's headers).
    let stale = match &settings.stale {
        Some(s) => {
            let writer = if s.action.writes() && dead_letter.is_none() {
                let config = crate::failure::DeadLetter::default();
                Some(new_writer(&config)?)
            } else {
                None
            };
            Some(crate::failure::Stale::new(
                s,
                settings.stale_retry_tiers,
                writer,
            ))
        }
        None => None,
    };
    let outputs = match &settings.outputs {
        Some(config) => {
            let producer_config = OutputProducer::producer_config(&properties, config);
            Some(Arc::new(
                OutputProducer::new(
                    producer_config,
                    instruments.clone(),
                    validated.secrets.clone(),
                )
                .map_err(RunError::Client)?,
            ))
        }
        None => None,
    };
    let shutdown = CancellationToken::new();
    // Transactional outputs: the producer's transactions begin before
    // anything is consumed (which fences an earlier producer with the
    // same transactional id and aborts its open transaction).
    let transactions = match (&outputs, &settings.outputs) {
        (Some(producer), Some(config)) if producer.is_transactional() => {
            let tx = Arc::new(transaction::Transactions::new(
                Arc::clone(producer),
                config.transaction_timeout(),
                settings.revoke_timeout,
                shutdown.clone(),
                instruments.clone(),
            ));
            let init = Arc::clone(&tx);
            tokio::task::spawn_blocking(move || init.init())
                .await
                .map_err(|e| RunError::Fatal(KafkaError::Canceled).with_join(e))?
                .map_err(RunError::Client)?;
            Some(tx)
        }
        _ => None,
    };
    let (commit_tx, commit_rx) = std::sync::mpsc::channel();
    let (ctrl_tx, ctrl_rx) = mpsc::unbounded_channel();
    let assignment = Arc::new(Assignment::new());
    let counters = Arc::new(Counters::default());
    let engine = Arc::new(Engine {
        settings: Arc::clone(&settings),
        committer: Arc::new(Committer::new(
            Arc::clone(&assignment),
            Arc::clone(&counters),
            instruments.clone(),
            commit_tx,
            settings.commit_batch_records,
            transactions.clone(),
        )),
        exhausted: Arc::new(Exhausted::new(
            settings.on_exhausted.clone(),
            dead_letter,
            validated.tiers.clone(),
            settings.storm_guard.clone(),
            instruments.clone(),
        )),
        stale,
        assignment,
        counters,
        instruments,
        poll_clock: Arc::new(PollClock::new()),
        wall_clock: WallClock::new(),
        health: Arc::clone(&health),
        resets: Arc::new(Resets::new(
            validated.health.statistics_interval,
            offset_reset::truncation::probe_config(&validated.client_config),
        )),
        runtime,
        shutdown,
        ctrl_tx,
        trace: trace.clone(),
        outputs,
        transactions: transactions.clone(),
        controls: Arc::clone(&settings.controls),
    });
    let ctx = Ctx {
        engine: Arc::clone(&engine),
        handler: Arc::new(handler),
        secrets: validated.secrets.clone(),
        consumer: std::sync::OnceLock::new(),
        queues: std::sync::Mutex::new(Vec::new()),
    };
    let consumer: Arc<Kafka<H>> = Arc::new(
        validated
            .client_config
            .create_with_context(ctx)
            .map_err(RunError::Client)?,
    );
    let _ = consumer.context().consumer.set(Arc::downgrade(&consumer));
    // With retry topics, the same consumer (and group) reads the tiers: a
    // tier record is handled by the same handler, no earlier than its due
    // time (see `worker/attempt.rs`).
    let topics: Vec<&str> = validated
        .topics
        .iter()
        .map(String::as_str)
        .chain(validated.tiers.topics())
        .collect();
    consumer.subscribe(&topics).map_err(RunError::Client)?;
    // The control handles work from here on, and refuse once the run ends.
    settings
        .controls
        .started(topics.iter().map(|t| (*t).to_owned()).collect());
    let _controls_run = ControlsGuard(Arc::clone(&settings.controls));

    let committer = {
        let consumer = Arc::clone(&consumer);
        let committer = Arc::clone(&engine.committer);
        let exhausted = Arc::clone(&engine.exhausted);
        let interval = settings.commit_interval;
        std::thread::Builder::new()
            .name("fresh-commit".into())
            .spawn(move || commit::run(consumer, committer, exhausted, commit_rx, interval))
            .map_err(thread_error)?
    };
    let warn_after = validated
        .max_poll_interval
        .mul_f64(settings.poll_warning_ratio);
    let watchdog_stop = Arc::new(AtomicBool::new(false));
    let watchdog = watchdog::spawn(
        Arc::clone(&engine.poll_clock),
        engine.instruments.clone(),
        warn_after,
        validated.max_poll_interval,
        Arc::clone(&watchdog_stop),
    )
    .map_err(thread_error)?;
    let view: Arc<dyn EngineView> = engine.clone();
    health.start(
        Arc::downgrade(&view),
        validated.health.clone(),
        warn_after,
        validated.max_poll_interval,
    );
    drop(view);
    health_view::spawn(
        Arc::downgrade(&consumer),
        Arc::clone(&engine.assignment),
        Arc::clone(&health),
        Arc::clone(&engine.resets),
        engine.shutdown.clone(),
    )
    .map_err(thread_error)?;

    let mut poll_loop = PollLoop::new(
        consumer,
        Arc::clone(&engine),
        ctrl_rx,
        IDLE_POLL_TICK.min(warn_after / 4),
    );
    let shutdown_timeout = settings.shutdown_timeout;
    let provider = settings.meter_provider.clone();
    let task = tokio::spawn(async move {
        let stopped_by = poll_loop.poll_loop().await;
        let shutdown_started = std::time::Instant::now();
        let mut summary = poll_loop
            .shutdown(shutdown_timeout, committer, provider.as_ref())
            .await;
        // Spans end with their handler attempts, all finished by now.
        if let Some(trace) = trace {
            let budget = shutdown_timeout.saturating_sub(shutdown_started.elapsed());
            if !trace.flush(budget).await {
                summary.shutdown_timed_out = true;
            }
        }
        (stopped_by, summary)
    });
    // Cancelling `run_until` (dropping its future) shuts the engine down too.
    let _guard = engine.shutdown.clone().drop_guard();
    tokio::pin!(signal);
    tokio::pin!(task);
    let (stopped_by, summary) = tokio::select! {
        r = &mut task => r,
        () = &mut signal => {
            tracing::warn!(
                timeout = ?shutdown_timeout,
                "shutting down: running handlers finish, completed work is committed"
            );
            engine.shutdown.cancel();
            tokio::select! {
                r = &mut task => r,
                () = interrupt => {
                    tracing::error!(
                        "interrupted during shutdown: the run ends without waiting for \
                         handlers or the final commit; uncommitted records are redelivered"
                    );
                    return Err(RunError::Interrupted);
                }
            }
        }
    }
    .map_err(|e| RunError::Fatal(KafkaError::Canceled).with_join(e))?;
    watchdog_stop.store(true, Ordering::Release);
    watchdog.thread().unpark();
    let _ = watchdog.join();
    if let Some(e) = transactions.as_ref().and_then(|tx| tx.fatal()) {
        return Err(RunError::Fatal(e));
    }
    match stopped_by {
        Stop::Signal => Ok(summary),
        Stop::Fatal(e) => Err(RunError::Fatal(e)),
    }
}

impl RunError {
    fn with_join(self, e: tokio::task::JoinError) -> Self {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        self
    }
}
