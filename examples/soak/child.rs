//! One soak consumer (`soak --child`): a `FreshConsumer` in the soak's
//! group, with two delay tiers and a dead-letter topic, whose handler fails
//! the known poison records (1 % of them) twice and writes every success to
//! an append-only log before it returns.
//!
//! Log lines (one `write` each, so a SIGKILL cuts at most the line being
//! written, which the checker drops):
//!
//! - `ok <unix ms> <topic> <partition> <offset> <key> <seq>`: a success;
//! - `rss <unix ms> <kB>`: the process's VmRSS, every 5 s;
//! - `heap <unix ms> <in use kB> <free kB>`: the C heap (glibc's
//!   `mallinfo2`, every arena): the bytes allocated and not freed (Rust's
//!   and librdkafka's allocations alike; a leak grows them) and the freed
//!   bytes the allocator keeps instead of returning them to the system
//!   (RSS keeps them: after a burst, RSS stays at its high-water mark),
//!   every 5 s;
//! - `health <unix ms> <status> <rebalances>`: the in-process health and
//!   the rebalance events the member has seen, every second;
//! - `why <unix ms> <reasons>`: after a report other than `healthy`, its
//!   reasons (the consumer's and each partition's), for the reader;
//! - `note <unix ms> <reasons>`: a `healthy` report that still carries
//!   reasons (informational ones, such as an under-replicated partition
//!   while a node of a three-node cluster is down), for the checker's
//!   account of node restarts;
//! - `protocol <unix ms> <classic|consumer>`: the group protocol the
//!   incarnation runs (`group.protocol`), once at its start.
//!
//! With `--outputs TOPIC` (the soak's `--transactional`) the handler also
//! writes one output per success into TOPIC (key: the input's key;
//! payload: `<key> <seq> <input topic> <input partition> <input offset>`)
//! through `OutputConfig::transactional_id("<group>-tx-<slot>")`: one id
//! per consumer slot, the same in each of the slot's incarnations, so a
//! restarted slot fences its killed predecessor and aborts its open
//! transaction. Outputs are written at every stage (the source and both
//! tiers), after the poison check, so a failing call writes nothing and
//! dooms no transaction.
//!
//! Its health thresholds (`stall_after`, `no_success_after`,
//! `lag_growth_window`) are the soak's evaluation window (`--window-ms`),
//! so a fault of the soak's length shows within it.
//!
//! SIGUSR1 makes the handler slow (1 s per record) for `--slow-secs`;
//! SIGTERM stops the consumer gracefully. With `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (and the other `OTEL_*` variables) set by the parent, the consumer's
//! metrics are exported over OTLP to the soak's collector.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::otlp::OtlpConfig;
use fresh_consumer::{
    FreshConsumer, OnExhausted, Record,
    failure::{DeadLetter, RetryTopics},
    health::HealthThresholds,
    output::{Output, OutputConfig},
};

use super::{TIERS, is_poison, now_ms, parse_payload};

/// What the parent tells a child.
pub struct ChildArgs {
    pub bootstrap: String,
    pub group: String,
    pub topic: String,
    pub log: PathBuf,
    pub slow_secs: u64,
    pub session_ms: u64,
    /// `classic` or `consumer` (KIP-848).
    pub protocol: String,
    /// The health evaluation's window.
    pub window: Duration,
    /// The output topic of transactional outputs (`--transactional`).
    pub outputs: Option<String>,
    /// The consumer slot (0, 1, 2): its transactional id's suffix.
    pub slot: usize,
}

/// The transactional id of a consumer slot: the same for every incarnation
/// of the slot.
pub fn transactional_id(group: &str, slot: usize) -> String {
    format!("{group}-tx-{slot}")
}

/// Everything but the handler: tiers, dead letters, thresholds, the group
/// protocol's settings and, with `--outputs`, transactional outputs. The
/// parent builds the same with a dummy handler to `validate()` the
/// settings before it starts a child.
pub fn configure<H>(consumer: FreshConsumer<H>, args: &ChildArgs) -> FreshConsumer<H> {
    let tiers = RetryTopics::new(TIERS.map(|(d, _)| d))
        .in_place_retries(0)
        .dead_letter(DeadLetter::new());
    let consumer = consumer
        .bootstrap_servers(args.bootstrap.as_str())
        .group_id(args.group.as_str())
        .topics([args.topic.as_str()])
        .on_exhausted(OnExhausted::RetryTopics(tiers))
        .health_thresholds(
            HealthThresholds::default()
                .with_stall_after(args.window)
                .with_no_success_after(args.window)
                .with_lag_growth_window(args.window),
        )
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("fetch.queue.backoff.ms", "10");
    // KIP-848 members take their session timeout and heartbeat interval
    // from the broker (librdkafka refuses the properties).
    let consumer = if args.protocol == "consumer" {
        consumer.set("group.protocol", "consumer")
    } else {
        consumer
            .set("session.timeout.ms", args.session_ms.to_string())
            .set("heartbeat.interval.ms", (args.session_ms / 10).to_string())
    };
    // `SOAK_LIBRDKAFKA_DEBUG=cgrp,eos` (for example) turns librdkafka's
    // debug log on in every consumer and its output producer; with
    // `RUST_LOG=warn,fresh_consumer=info,librdkafka=debug` it reaches the
    // consumer's stderr file: to see where a member that stops making
    // progress is (issue 46: one stopped for 7 minutes after its
    // partitions were lost during a rolling restart).
    let debug = std::env::var("SOAK_LIBRDKAFKA_DEBUG")
        .ok()
        .filter(|d| !d.is_empty());
    let consumer = match &debug {
        Some(debug) => consumer.set("debug", debug),
        None => consumer,
    };
    match &args.outputs {
        Some(_) => {
            let outputs =
                OutputConfig::new().transactional_id(transactional_id(&args.group, args.slot));
            consumer.outputs(match &debug {
                Some(debug) => outputs.producer_property("debug", debug),
                None => outputs,
            })
        }
        None => consumer,
    }
}

/// Why a handler call failed: a poison record, on purpose.
#[derive(Debug)]
struct Poison;

impl std::fmt::Display for Poison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("poison record (fails at the source and in the first tier)")
    }
}

impl std::error::Error for Poison {}

/// The append-only log, shared by the handler and the samplers.
struct Log(Mutex<std::fs::File>);

impl Log {
    fn line(&self, line: String) {
        let mut f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // One write per line: O_APPEND keeps lines whole between processes.
        f.write_all(line.as_bytes()).expect("write the soak log");
    }
}

/// Exits this process when its stdin closes: the parent holds the other
/// end, so a consumer never outlives a soak that was killed.
fn exit_with_parent() {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(3);
    });
}

/// Runs one consumer until SIGTERM. Exits the process with status 1 when
/// the consumer fails, 3 when the parent is gone.
pub fn run(args: ChildArgs) {
    exit_with_parent();
    // The library's log (`RUST_LOG`, else its info lines and every
    // crate's warnings) goes to stderr, which the parent writes to
    // `consumer-<slot>-<n>.stderr`.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,fresh_consumer=info,fresh_consumer::engine::worker::outcome=warn".into()
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run_async(args));
}

async fn run_async(args: ChildArgs) {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)
        .expect("open the soak log");
    let log = Arc::new(Log(Mutex::new(file)));
    let slow_until = Arc::new(AtomicI64::new(0));

    let source = args.topic.clone();
    let out_topic = args.outputs.clone();
    let handler = {
        let log = Arc::clone(&log);
        let slow_until = Arc::clone(&slow_until);
        move |record: Record| {
            let log = Arc::clone(&log);
            let slow_until = Arc::clone(&slow_until);
            let source = source.clone();
            let out_topic = out_topic.clone();
            async move {
                if now_ms() < slow_until.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let (key, seq) = parse_payload(record.payload()).ok_or(Poison)?;
                // Fails at the source and in the first tier; the second
                // tier succeeds (deterministic, so any process agrees).
                let tier = record.topic().strip_prefix(source.as_str()).unwrap_or("");
                if is_poison(&key, seq) && (tier.is_empty() || tier == TIERS[0].1) {
                    return Err(Poison.into());
                }
                if let Some(out) = &out_topic {
                    fresh_consumer::output::outputs()?
                        .send(Output::to(out.as_str()).key(key.as_str()).payload(format!(
                            "{key} {seq} {} {} {}",
                            record.topic(),
                            record.partition(),
                            record.offset()
                        )))
                        .await?;
                }
                log.line(format!(
                    "ok {} {} {} {} {key} {seq}\n",
                    now_ms(),
                    record.topic(),
                    record.partition(),
                    record.offset()
                ));
                Ok::<(), fresh_consumer::BoxError>(())
            }
        }
    };

    let consumer = configure(FreshConsumer::new(handler), &args);
    log.line(format!("protocol {} {}\n", now_ms(), args.protocol));
    // With a collector (OTEL_EXPORTER_OTLP_ENDPOINT from the parent), the
    // consumer's metrics go to it over OTLP; the parent stops it for a while.
    let provider = match std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT") {
        Some(_) => {
            let config = OtlpConfig::from_env().expect("the OTEL_* variables");
            Some(config.build().expect("an OTLP meter provider"))
        }
        None => None,
    };
    let consumer = match &provider {
        Some(p) => consumer.meter_provider(p),
        None => consumer,
    };
    let health = consumer.health_handle();

    // Samplers: RSS every 5 s, health every second.
    {
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut n = 0u64;
            loop {
                tick.tick().await;
                let snapshot = health.snapshot();
                log.line(format!(
                    "health {} {} {}\n",
                    now_ms(),
                    snapshot.status.as_str(),
                    snapshot.rebalances
                ));
                let healthy = snapshot.is_healthy();
                if !healthy
                    || !snapshot.reasons.is_empty()
                    || snapshot.partitions.iter().any(|p| !p.reasons.is_empty())
                {
                    let why: Vec<String> = snapshot
                        .reasons
                        .iter()
                        .map(|r| r.to_string())
                        .chain(snapshot.partitions.iter().flat_map(|p| {
                            p.reasons
                                .iter()
                                .map(move |r| format!("{}/{}: {r}", p.topic, p.partition))
                        }))
                        .collect();
                    let kind = if healthy { "note" } else { "why" };
                    log.line(format!("{kind} {} {}\n", now_ms(), why.join("; ")));
                }
                if n.is_multiple_of(5) {
                    log.line(format!("rss {} {}\n", now_ms(), rss_kb()));
                    if let Some((in_use, free)) = heap_kb() {
                        log.line(format!("heap {} {in_use} {free}\n", now_ms()));
                    }
                }
                n += 1;
            }
        });
    }
    // SIGUSR1: slow for a while.
    {
        let slow_until = Arc::clone(&slow_until);
        let slow_ms = (args.slow_secs * 1000) as i64;
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let mut usr1 = signal(SignalKind::user_defined1()).expect("SIGUSR1 handler");
            while usr1.recv().await.is_some() {
                slow_until.store(now_ms() + slow_ms, Ordering::Relaxed);
            }
        });
    }
    let stop = async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        term.recv().await;
    };
    let result = consumer.run_until(stop).await;
    if let Some(p) = &provider {
        let _ = fresh_consumer::metrics::flush(p, Duration::from_secs(5)).await;
        let _ = fresh_consumer::metrics::shutdown(p, Duration::from_secs(5)).await;
    }
    match result {
        Ok(summary) => {
            log.line(format!(
                "stopped {} {} {}\n",
                now_ms(),
                summary.records_succeeded,
                summary.failed_attempts
            ));
        }
        Err(e) => {
            eprintln!("soak child: {e}");
            std::process::exit(1);
        }
    }
}

/// The C heap in kB: (allocated and not freed, freed and kept by the
/// allocator), from glibc's `mallinfo2` over every arena; `None` on other
/// C libraries.
fn heap_kb() -> Option<(u64, u64)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` takes no arguments and returns a plain struct
        // by value; glibc locks each arena while it sums it.
        let m = unsafe { libc::mallinfo2() };
        // `uordblks`: allocated from arenas; `hblkhd`: mmapped blocks
        // (large allocations, always in use); `fordblks`: free in arenas.
        Some((
            ((m.uordblks + m.hblkhd) / 1024) as u64,
            (m.fordblks / 1024) as u64,
        ))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// This process's VmRSS in kB (0 when /proc cannot tell).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
