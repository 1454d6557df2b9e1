//! 1,000 assigned partitions (20 topics x 50) on one group member:
//! FreshConsumer against a raw rdkafka `StreamConsumer` holding the same
//! assignment, in the same run (issue 18, part 2).
//!
//!     cargo bench --bench scale                                   # ~4 min
//!     BENCH_SCALE_IDLE_SECS=10 BENCH_SCALE_ROUNDS=2 cargo bench --bench scale
//!     cargo bench --bench scale -- --test                          # smoke: 1 s window, 1 round
//!
//! Latest results, with the date, machine and commit: benches/README.md.
//!
//! Layout: this process owns the mock broker. It creates 20 *idle* topics
//! (50 partitions each, no records) and 20 *data* topics (50 partitions,
//! 100 records of 100 B per partition, produced once). Every measurement
//! runs in a **child process** (this binary again) that only consumes, so
//! neither the broker's CPU nor its memory is in a figure, and the two
//! sides' CPU time and RSS do not mix. Each round runs raw then fresh, for
//! each of the two child kinds:
//!
//! - **idle** (the idle topics, a fresh group): wait for the assignment of
//!   all 1,000 partitions, let it settle (`BENCH_SCALE_SETTLE_MS`, 3,000),
//!   note VmRSS (*RSS after assignment*), then the child's CPU time (user +
//!   system of all its threads, `/proc/self/stat`) over a window of
//!   `BENCH_SCALE_IDLE_SECS` (30) with no records arriving: *idle CPU*, as a
//!   share of one core.
//! - **burst** (the data topics, a fresh group, so it reads from the start):
//!   *subscribe -> assigned*, *assigned -> first record handled*, the burst
//!   throughput (first record to the 100,000th, and the child's CPU time per
//!   record over the same span), VmRSS a second after the last record
//!   (*RSS after 100 records per partition*), then a second group member
//!   (a `BaseConsumer` in the child) joins: the eager assignor (librdkafka's
//!   default `range,roundrobin`, which the library keeps) revokes all 1,000
//!   partitions from the first member, and *revoke -> commit* is how long
//!   that revoke took up to its commit: for FreshConsumer the `took` the
//!   library logs with "partitions revoked; completed offsets committed"
//!   (workers stopped and awaited, a synchronous commit of the completed
//!   offsets, the partitions forgotten), for raw the revoke callback's
//!   synchronous commit of the stored offsets (`commit_consumer_state`).
//!
//! RSS figures are growth over the child's VmRSS before its consumer was
//! created (runtime started). The per-partition figure is (fresh - raw) /
//! 1,000.
//!
//! Both sides use `support::CONSUMER_PROPS` (`fetch.wait.max.ms=10`: an
//! idle fetch returns every 10 ms, which both pay). FreshConsumer runs with
//! all metrics on (an SDK provider, exported every 60 s, so not inside the
//! window) and its defaults: `statistics.interval.ms=1000` (the health
//! view reads librdkafka's statistics), a worker task per partition. The
//! raw consumer has no statistics (rust-rdkafka's default) and commits its
//! stored offsets asynchronously every 100 ms; its `recv()` loop serves the
//! rebalance callbacks.
//!
//! Assignment points: FreshConsumer's is the library's "partitions
//! assigned" event, logged after it planned each partition's start (reads of
//! committed offsets and watermarks), started the workers and assigned (its
//! `took` is the library's part of the callback, reported too); raw's is the
//! end of its assign callback. *subscribe -> first record* covers both alike.
//!
//! Targets (issue 18): idle CPU <= 2 % of one core above raw's, RSS <= 64
//! KiB per partition above raw's, burst >= 0.9 x raw.

mod support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::{ClientContext, Message as _};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

use support::{Count, Progress, env_or, median, min_max, unique};

const CHILD_ENV: &str = "FRESH_BENCH_SCALE_CHILD";
const TOPICS: usize = 20;
const PARTITIONS_PER_TOPIC: i32 = 50;
const PARTITIONS: usize = TOPICS * PARTITIONS_PER_TOPIC as usize;

/// Records per partition in the burst (`BENCH_SCALE_RECORDS_PER_PARTITION`,
/// default 100, the figure).
fn records_per_partition() -> usize {
    env_or("BENCH_SCALE_RECORDS_PER_PARTITION", 100)
}
const PAYLOAD: usize = 100;
const DEADLINE: Duration = Duration::from_secs(120);

// ------------------------------------------------------------ child side --

struct ChildArgs {
    bootstrap: String,
    topics: Vec<String>,
    window: Duration,
    settle: Duration,
}

fn child(kind: &str) {
    let args = ChildArgs {
        bootstrap: std::env::var("BENCH_BOOTSTRAP").expect("bootstrap"),
        topics: std::env::var("BENCH_TOPICS")
            .expect("topics")
            .split(',')
            .map(str::to_owned)
            .collect(),
        window: Duration::from_secs_f64(env_or("BENCH_SCALE_IDLE_SECS", 30.0)),
        settle: Duration::from_millis(env_or("BENCH_SCALE_SETTLE_MS", 3_000)),
    };
    if kind.ends_with("fresh") {
        tracing_subscriber::registry()
            // A global filter: with the same `Targets` as a per-layer filter
            // (`Capture.with_filter(..)`) the "partitions assigned" event
            // reached the layer in 1 of 5 runs (tracing-subscriber 0.3's
            // per-layer filter state; every other event arrived).
            .with(
                tracing_subscriber::filter::Targets::new()
                    .with_target("fresh_consumer", tracing::Level::INFO),
            )
            .with(Capture)
            .init();
    }
    let rt = support::runtime();
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
    let before = support::proc_status_kb("VmRSS");
    let out = match kind {
        "idle_fresh" => rt.block_on(idle_fresh(&args)),
        "idle_raw" => rt.block_on(idle_raw(&args)),
        "burst_fresh" => rt.block_on(burst_fresh(&args)),
        "burst_raw" => rt.block_on(burst_raw(&args)),
        other => panic!("unknown child kind {other}"),
    };
    println!("RESULT before_kb={before} {out}");
    // No orderly shutdown: it is not measured, and the group is not reused.
    std::process::exit(0);
}

/// What the library's log events tell (FreshConsumer children only).
static ASSIGNED: OnceLock<Instant> = OnceLock::new();
/// The `took` of the library's "partitions assigned" event: its own part of
/// the rebalance callback (plan, assign, start 1,000 workers).
static ASSIGN_TOOK: OnceLock<Duration> = OnceLock::new();
static REVOKED_TOOK: OnceLock<Duration> = OnceLock::new();
/// The library's INFO and WARN messages, printed when a revoke is not seen.
static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

#[derive(Default)]
struct Fields {
    message: String,
    took: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "took" => self.took = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        if let Ok(mut m) = MESSAGES.lock()
            && m.len() < 200
        {
            m.push(format!(
                "{} {} took={}",
                event.metadata().level(),
                f.message,
                f.took
            ));
        }
        if f.message == "partitions assigned" {
            ASSIGNED.get_or_init(Instant::now);
            if let Some(took) = parse_debug_duration(&f.took) {
                let _ = ASSIGN_TOOK.set(took);
            }
        } else if f.message.starts_with("partitions revoked")
            && let Some(took) = parse_debug_duration(&f.took)
        {
            let _ = REVOKED_TOOK.set(took);
        }
    }
}

/// Parses `Duration`'s `Debug` output ("1.5s", "12.3ms", "850µs", "7ns").
fn parse_debug_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "ms" => n / 1e3,
        "µs" | "us" => n / 1e6,
        "ns" => n / 1e9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

/// How long a burst child waits for the revoke the second member causes
/// (the mock holds a join `session.timeout.ms - 1000` = 5 s).
const REVOKE_DEADLINE: Duration = Duration::from_secs(30);

/// How long a burst may take before the child fails (a burst takes well
/// under a second).
const BURST_DEADLINE: Duration = Duration::from_secs(60);

/// Waits for `cond` up to `limit`; whether it held.
async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "deadline: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// CPU time (ms) per thread name (`/proc/self/task/*/comm`; librdkafka
/// names its threads `rdk:main`, `rdk:broker<N>`, ...; tokio's are
/// `tokio-runtime-w`), summed over threads of the same name.
fn thread_cpu_ms() -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let path = t.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let ticks: u64 = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|x| x.parse::<u64>().ok())
            .sum();
        // Group librdkafka's per-broker threads under one name.
        let mut name = comm.trim().to_owned();
        if let Some(i) = name.find(|c: char| c.is_ascii_digit()) {
            name.truncate(i);
        }
        *out.entry(name).or_default() += ticks * 10;
    }
    out
}

/// Prints a `THREADS` line: CPU time per thread name since `before`.
fn print_threads(before: &std::collections::BTreeMap<String, u64>) {
    let threads: Vec<String> = thread_cpu_ms()
        .into_iter()
        .map(|(k, v)| {
            let d = v.saturating_sub(before.get(&k).copied().unwrap_or(0));
            format!("{k}={d}ms")
        })
        .collect();
    println!("THREADS {}", threads.join(" "));
}

/// CPU share of one core over `window`, and the VmRSS (kB) before it.
/// Prints a `THREADS` line: the window's CPU time per thread name.
async fn idle_window(args: &ChildArgs) -> String {
    tokio::time::sleep(args.settle).await;
    let rss = support::proc_status_kb("VmRSS");
    let threads0 = thread_cpu_ms();
    let cpu0 = support::process_cpu();
    let t0 = Instant::now();
    tokio::time::sleep(args.window).await;
    let cpu = support::process_cpu().saturating_sub(cpu0);
    let wall = t0.elapsed();
    print_threads(&threads0);
    format!(
        "rss_kb={rss} idle_cpu={:.5} window_s={:.1}",
        cpu.as_secs_f64() / wall.as_secs_f64(),
        wall.as_secs_f64()
    )
}

fn fresh(
    args: &ChildArgs,
    progress: &Arc<Progress>,
    prefix: &str,
) -> fresh_consumer::FreshConsumer<Count> {
    support::fresh_consumer(
        Count(Arc::clone(progress)),
        &args.bootstrap,
        args.topics.iter().map(String::as_str),
        unique(prefix),
    )
}

async fn idle_fresh(args: &ChildArgs) -> String {
    let progress = Progress::new(1);
    let (provider, _exporter) = support::sdk_provider();
    let mut c = fresh(args, &progress, "scale-idle").meter_provider(&provider);
    // Diagnostic: another statistics interval (librdkafka's
    // `statistics.interval.ms`; the library's default is 1000).
    if let Ok(ms) = std::env::var("BENCH_SCALE_FRESH_STATS_MS") {
        c = c.set("statistics.interval.ms", ms);
    }
    let health = c.health_handle();
    tokio::spawn(c.run());
    wait_until("assignment", || {
        health.snapshot().partitions.len() == PARTITIONS
    })
    .await;
    let out = idle_window(args).await;
    assert_eq!(progress.count(), 0, "records on the idle topics");
    out
}

/// The raw side's context: notes the assignment, and commits the stored
/// offsets synchronously when partitions are revoked (timed).
#[derive(Default)]
struct RawCtx {
    assigned: OnceLock<(Instant, usize)>,
    revoked: OnceLock<(Duration, usize)>,
}

impl ClientContext for RawCtx {}

impl ConsumerContext for RawCtx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance
            && tpl.count() > 0
        {
            let t = Instant::now();
            // Err(NoOffset) when the async commits already covered it all.
            let _ = consumer.commit_consumer_state(CommitMode::Sync);
            let _ = self.revoked.set((t.elapsed(), tpl.count()));
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance
            && tpl.count() > 0
        {
            let _ = self.assigned.set((Instant::now(), tpl.count()));
        }
    }
}

fn raw_consumer(args: &ChildArgs, prefix: &str) -> Arc<StreamConsumer<RawCtx>> {
    let c: StreamConsumer<RawCtx> = support::raw_config(&args.bootstrap, &unique(prefix))
        .create_with_context(RawCtx::default())
        .expect("raw consumer");
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    c.subscribe(&topics).expect("subscribe");
    Arc::new(c)
}

/// The raw consumer's loop: `recv()` (which also serves the rebalance
/// callbacks), counting into `progress`, an async commit of the stored
/// offsets every 100 ms.
fn spawn_raw_loop(c: &Arc<StreamConsumer<RawCtx>>, progress: &Arc<Progress>) {
    let c = Arc::clone(c);
    let progress = Arc::clone(progress);
    tokio::spawn(async move {
        let mut last_commit = Instant::now();
        loop {
            let m = c.recv().await.expect("recv");
            std::hint::black_box(m.offset());
            drop(m);
            progress.hit();
            if last_commit.elapsed() >= support::COMMIT_EVERY {
                let _ = c.commit_consumer_state(CommitMode::Async);
                last_commit = Instant::now();
            }
        }
    });
}

async fn idle_raw(args: &ChildArgs) -> String {
    let progress = Progress::new(1);
    let c = raw_consumer(args, "scale-idle-raw");
    spawn_raw_loop(&c, &progress);
    wait_until("assignment", || {
        c.context()
            .assigned
            .get()
            .is_some_and(|&(_, n)| n == PARTITIONS)
    })
    .await;
    let out = idle_window(args).await;
    assert_eq!(progress.count(), 0, "records on the idle topics");
    out
}

/// A second member of `group` on the same topics, polled on a thread of its
/// own until `stop`: its join revokes everything from the first member.
fn second_member(args: &ChildArgs, group: &str, stop: Arc<AtomicBool>) {
    let c: BaseConsumer = support::raw_config(&args.bootstrap, group)
        .create()
        .expect("second member");
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    c.subscribe(&topics).expect("subscribe");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let _ = c.poll(Duration::from_millis(10));
        }
    });
}

fn burst_line(
    subscribed: Instant,
    assigned: Option<Instant>,
    progress: &Progress,
    before_revoke_rss: u64,
) -> String {
    let total = (PARTITIONS * records_per_partition()) as f64;
    let (took, cpu) = progress.elapsed_and_cpu();
    let first = progress.first_at().expect("a record");
    format!(
        "sub_to_assigned_ms={:.1} sub_to_first_ms={:.1} rate={:.0} cpu_us_per_rec={:.3} rss_kb={before_revoke_rss}",
        assigned.map_or(f64::NAN, |a| a.duration_since(subscribed).as_secs_f64()
            * 1e3),
        first.duration_since(subscribed).as_secs_f64() * 1e3,
        total / took.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / total,
    )
}

async fn burst_fresh(args: &ChildArgs) -> String {
    let progress = Progress::with_cpu((PARTITIONS * records_per_partition()) as u64);
    let (provider, _exporter) = support::sdk_provider();
    let group = unique("scale-burst");
    let mut c = support::fresh_consumer(
        Count(Arc::clone(&progress)),
        &args.bootstrap,
        args.topics.iter().map(String::as_str),
        group.clone(),
    );
    // Diagnostic: `BENCH_SCALE_FRESH_METRICS=0` leaves the global (no-op)
    // meter provider, to tell the instruments' share of the burst.
    if env_or("BENCH_SCALE_FRESH_METRICS", 1u32) != 0 {
        c = c.meter_provider(&provider);
    }
    if let Ok(ms) = std::env::var("BENCH_SCALE_FRESH_STATS_MS") {
        c = c.set("statistics.interval.ms", ms);
    }
    let health = c.health_handle();
    let threads0 = thread_cpu_ms();
    let subscribed = Instant::now();
    tokio::spawn(c.run());
    if tokio::time::timeout(BURST_DEADLINE, progress.all_done())
        .await
        .is_err()
    {
        let snap = health.snapshot();
        let behind: Vec<String> = snap
            .partitions
            .iter()
            .filter(|p| p.processed_offset != Some(records_per_partition() as i64))
            .map(|p| {
                format!(
                    "{}[{}] processed {:?} hw {:?} {:?} {:?}",
                    p.topic, p.partition, p.processed_offset, p.high_watermark, p.status, p.reasons
                )
            })
            .collect();
        panic!(
            "deadline: burst, {} of {} records handled; {} partitions assigned, {} not at their end: {:#?}\nthe library said: {:#?}",
            progress.count(),
            PARTITIONS * records_per_partition(),
            snap.partitions.len(),
            behind.len(),
            &behind[..behind.len().min(20)],
            MESSAGES.lock().unwrap()
        );
    }
    print_threads(&threads0);
    // The library logs the assignment after it started every worker: with
    // 1,000 partitions the burst can be over before that.
    if !wait_for(Duration::from_secs(10), || ASSIGNED.get().is_some()).await {
        let snap = health.snapshot();
        eprintln!(
            "no assigned event seen within 10 s after the burst: {} partitions assigned, {} rebalances, state {:?}; the library said: {:#?}",
            snap.partitions.len(),
            snap.rebalances,
            snap.state,
            MESSAGES.lock().unwrap()
        );
    }
    let assigned = ASSIGNED.get().copied();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = support::proc_status_kb("VmRSS");
    let line = format!(
        "{} assign_took_ms={:.1}",
        burst_line(subscribed, assigned, &progress, rss),
        ASSIGN_TOOK
            .get()
            .map_or(f64::NAN, |t| t.as_secs_f64() * 1e3)
    );
    let stop = Arc::new(AtomicBool::new(false));
    second_member(args, &group, Arc::clone(&stop));
    let seen = wait_for(REVOKE_DEADLINE, || REVOKED_TOOK.get().is_some()).await;
    stop.store(true, Ordering::Relaxed);
    let Some(took) = REVOKED_TOOK.get().filter(|_| seen) else {
        eprintln!(
            "no revoke seen within {REVOKE_DEADLINE:?}; the library said: {:#?}",
            MESSAGES.lock().unwrap()
        );
        return format!("{line} revoke_ms=NaN revoked=0");
    };
    format!(
        "{line} revoke_ms={:.2} revoked={PARTITIONS}",
        took.as_secs_f64() * 1e3
    )
}

async fn burst_raw(args: &ChildArgs) -> String {
    let progress = Progress::with_cpu((PARTITIONS * records_per_partition()) as u64);
    let group = unique("scale-burst-raw");
    let threads0 = thread_cpu_ms();
    let subscribed = Instant::now();
    let c: StreamConsumer<RawCtx> = support::raw_config(&args.bootstrap, &group)
        .create_with_context(RawCtx::default())
        .expect("raw consumer");
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    c.subscribe(&topics).expect("subscribe");
    let c = Arc::new(c);
    spawn_raw_loop(&c, &progress);
    tokio::time::timeout(DEADLINE, progress.all_done())
        .await
        .expect("deadline: burst");
    print_threads(&threads0);
    let (assigned, n) = *c.context().assigned.get().expect("assigned");
    assert_eq!(n, PARTITIONS, "raw: partitions assigned");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = support::proc_status_kb("VmRSS");
    let line = burst_line(subscribed, Some(assigned), &progress, rss);
    let stop = Arc::new(AtomicBool::new(false));
    second_member(args, &group, Arc::clone(&stop));
    wait_for(REVOKE_DEADLINE, || c.context().revoked.get().is_some()).await;
    stop.store(true, Ordering::Relaxed);
    let Some(&(took, revoked)) = c.context().revoked.get() else {
        eprintln!("raw: no revoke seen within {REVOKE_DEADLINE:?}");
        return format!("{line} revoke_ms=NaN revoked=0");
    };
    format!(
        "{line} revoke_ms={:.2} revoked={revoked}",
        took.as_secs_f64() * 1e3
    )
}

// ----------------------------------------------------------- parent side --

type Fields2 = Vec<(String, f64)>;

/// The child's `RESULT` fields, and its `THREADS` line if any.
fn run_child(
    kind: &str,
    bootstrap: &str,
    topics: &[String],
    env: &[(&str, String)],
) -> (Fields2, Option<String>) {
    let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
    cmd.env(CHILD_ENV, kind)
        .env("BENCH_BOOTSTRAP", bootstrap)
        .env("BENCH_TOPICS", topics.join(","));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {kind} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("no revoke seen") || stderr.contains("no assigned event") {
        println!("  child {kind}: {stderr}");
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT from child {kind}: {stdout}"));
    let threads = stdout
        .lines()
        .find_map(|l| l.strip_prefix("THREADS "))
        .map(str::to_owned);
    let fields = line
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect();
    (fields, threads)
}

fn field(f: &Fields2, name: &str) -> f64 {
    f.iter()
        .find(|(k, _)| k == name)
        .map(|&(_, v)| v)
        .unwrap_or_else(|| panic!("{name} missing in {f:?}"))
}

static SAMPLES: Mutex<Vec<(&'static str, Fields2)>> = Mutex::new(Vec::new());

fn main() {
    if let Ok(kind) = std::env::var(CHILD_ENV) {
        child(&kind);
        return;
    }
    // `cargo bench --bench scale -- --test`: a smoke run.
    let smoke = std::env::args().any(|a| a == "--test");
    let rounds: usize = if smoke {
        1
    } else {
        env_or("BENCH_SCALE_ROUNDS", 3)
    };
    let window: f64 = if smoke {
        1.0
    } else {
        env_or("BENCH_SCALE_IDLE_SECS", 30.0)
    };
    let settle: u64 = env_or("BENCH_SCALE_SETTLE_MS", if smoke { 500 } else { 3_000 });
    // Diagnostic (profiling one side): a subset of the child kinds.
    let kinds = std::env::var("BENCH_SCALE_KINDS")
        .unwrap_or_else(|_| "idle_raw idle_fresh burst_raw burst_fresh".into());
    let env = [
        ("BENCH_SCALE_IDLE_SECS", window.to_string()),
        ("BENCH_SCALE_SETTLE_MS", settle.to_string()),
    ];

    let broker = support::mock_broker();
    let bootstrap = broker.bootstrap().to_owned();
    let idle_topics: Vec<String> = (0..TOPICS)
        .map(|_| support::topic(&broker, "scale-idle", PARTITIONS_PER_TOPIC))
        .collect();
    let data_topics: Vec<String> = (0..TOPICS)
        .map(|_| support::topic(&broker, "scale-data", PARTITIONS_PER_TOPIC))
        .collect();
    let started = Instant::now();
    for t in &data_topics {
        support::produce(
            &bootstrap,
            t,
            PARTITIONS_PER_TOPIC,
            records_per_partition(),
            PAYLOAD,
        );
    }
    println!(
        "scale: {TOPICS} topics x {PARTITIONS_PER_TOPIC} partitions = {PARTITIONS} partitions; burst {} records of {PAYLOAD} B per partition (produced in {:.1?}); idle window {window} s after {settle} ms; {rounds} rounds; {}; load average {}",
        records_per_partition(),
        started.elapsed(),
        support::machine(),
        loadavg()
    );

    for round in 0..rounds {
        for kind in ["idle_raw", "idle_fresh", "burst_raw", "burst_fresh"] {
            if !kinds.split_whitespace().any(|k| k == kind) {
                continue;
            }
            let topics = if kind.starts_with("idle") {
                &idle_topics
            } else {
                &data_topics
            };
            let (f, threads) = run_child(kind, &bootstrap, topics, &env);
            println!("  round {round} {kind:<12} {f:?}");
            if let Some(t) = threads {
                println!(
                    "  round {round} {kind:<12} CPU per thread (idle: the window; burst: subscribe -> last record): {t}"
                );
            }
            SAMPLES.lock().unwrap().push((kind, f));
        }
    }
    summarize();
    println!("  load average at the end: {}", loadavg());
    drop(broker);
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn summarize() {
    let samples = SAMPLES.lock().unwrap();
    let col = |kind: &str, name: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, f)| field(f, name))
            .filter(|v| !v.is_nan())
            .collect()
    };
    // Growth over the child's RSS before its consumer, in kB.
    let growth = |kind: &str| -> Vec<f64> {
        samples
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, f)| field(f, "rss_kb") - field(f, "before_kb"))
            .collect()
    };
    let show = |v: &[f64], scale: f64, digits: usize| -> String {
        if v.is_empty() {
            return "-".into();
        }
        let (lo, hi) = min_max(v);
        format!(
            "{:.d$} ({:.d$}-{:.d$})",
            median(v) * scale,
            lo * scale,
            hi * scale,
            d = digits
        )
    };
    // Per-round pairs (raw, fresh), in run order.
    let pairs = |raw: &[f64], fresh: &[f64], f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
        raw.iter().zip(fresh).map(|(&r, &x)| f(r, x)).collect()
    };
    println!(
        "\nscale summary ({PARTITIONS} partitions; medians, (min-max) over rounds; child processes)"
    );

    let idle_raw = col("idle_raw", "idle_cpu");
    let idle_fresh = col("idle_fresh", "idle_cpu");
    let above = pairs(&idle_raw, &idle_fresh, &|r, x| (x - r) * 100.0);
    println!(
        "  idle CPU, % of one core: raw {}, fresh {}; fresh above raw {} points (target <= 2): {}",
        show(&idle_raw, 100.0, 2),
        show(&idle_fresh, 100.0, 2),
        show(&above, 1.0, 2),
        verdict(median(&above) <= 2.0)
    );

    for (what, raw_kind, fresh_kind) in [
        ("after assignment", "idle_raw", "idle_fresh"),
        ("after the burst", "burst_raw", "burst_fresh"),
    ] {
        let r = growth(raw_kind);
        let f = growth(fresh_kind);
        let per = pairs(&r, &f, &|r, x| (x - r) / PARTITIONS as f64);
        println!(
            "  RSS growth {what}, MB: raw {}, fresh {}; fresh above raw per partition {} KiB (target <= 64): {}",
            show(&r, 1.024e-3, 1),
            show(&f, 1.024e-3, 1),
            show(&per, 1.024, 1),
            verdict(median(&per) * 1.024 <= 64.0)
        );
    }

    let rate_raw = col("burst_raw", "rate");
    let rate_fresh = col("burst_fresh", "rate");
    let ratio = pairs(&rate_raw, &rate_fresh, &|r, x| x / r);
    println!(
        "  burst, records/s: raw {}, fresh {}; per-round ratio {} (target >= 0.9): {}",
        show(&rate_raw, 1.0, 0),
        show(&rate_fresh, 1.0, 0),
        show(&ratio, 1.0, 2),
        verdict(median(&ratio) >= 0.9)
    );
    println!(
        "  burst, child CPU us per record: raw {}, fresh {}",
        show(&col("burst_raw", "cpu_us_per_rec"), 1.0, 2),
        show(&col("burst_fresh", "cpu_us_per_rec"), 1.0, 2)
    );
    let join = col("burst_raw", "sub_to_assigned_ms");
    let raw_first: Vec<f64> = pairs(&join, &col("burst_raw", "sub_to_first_ms"), &|j, f| f - j);
    let fresh_first: Vec<f64> = col("burst_fresh", "sub_to_first_ms")
        .iter()
        .map(|f| f - median(&join))
        .collect();
    println!(
        "  assignment -> first record handled, ms: raw {}, fresh {} (fresh: subscribe -> first record minus raw's median join, which the two share; see below)",
        show(&raw_first, 1.0, 1),
        show(&fresh_first, 1.0, 1)
    );
    for (name, label) in [
        (
            "sub_to_assigned_ms",
            "subscribe -> assigned, ms (raw: end of its assign callback, the join; fresh: the library's \"partitions assigned\" event, after it planned, started 1,000 workers and assigned)",
        ),
        ("sub_to_first_ms", "subscribe -> first record handled, ms"),
        ("revoke_ms", "revoke of all 1,000 -> its commit, ms"),
    ] {
        println!(
            "  {label}: raw {}, fresh {}",
            show(&col("burst_raw", name), 1.0, 1),
            show(&col("burst_fresh", name), 1.0, 1)
        );
    }
    println!(
        "  fresh: the library's part of the assign callback (the event's `took`: plan, assign, start 1,000 workers), ms: {}",
        show(&col("burst_fresh", "assign_took_ms"), 1.0, 1)
    );
    let revoked = col("burst_raw", "revoked");
    println!("  partitions in raw's revoke: {revoked:?}");
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}
