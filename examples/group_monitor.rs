//! Group monitor: offset lag, time lag, retention margin and a diagnosis for
//! named consumer groups, read from the brokers (no group membership, no
//! commits).
//!
//! ```text
//! cargo run --example group_monitor -- --bootstrap localhost:9092 --group billing --topic payments
//! cargo run --example group_monitor -- --bootstrap localhost:9092 --group billing --topic payments --json
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 cargo run --example group_monitor -- \
//!     --bootstrap localhost:9092 --group billing --topic payments --serve
//! cargo run --example group_monitor -- --demo     # self-contained, on the embedded broker
//! ```
//!
//! Options: `--group` and `--topic` repeat (every group is watched on every
//! topic); `--set key=value` passes a librdkafka property (security
//! settings); `--interval S` (seconds, default 5) between cycles;
//! `--samples N` (default 2) cycles before the report is printed, so the
//! "unchanged" column and the rates have something to compare; `--window S`
//! (default 60), `--stall-after S` (default 30), `--lag-threshold S`
//! (default 60), `--replicas N` (the group's consumer count, for the replica
//! suggestion when the brokers do not describe the group's members),
//! `--read-uncommitted`, `--request-timeout S` (default 10: how long
//! each request, and so the check that a broker answers, may take).
//!
//! `--serve` runs until Ctrl-C or SIGTERM, exporting the
//! `fresh_consumer.monitor.*` gauges over OTLP (configured by the standard
//! `OTEL_*` variables) and printing one line per group and cycle.
//!
//! Exit codes: 0 the report was printed (or `--serve` was stopped by a signal);
//! 1 bad arguments or configuration; 2 no broker answered; 3 a topic does
//! not exist; 4 a watched group has no committed offsets (unknown group);
//! 5 a cycle failed. `--demo` also watches a group that never committed
//! and shows it in a labelled section (what a real run would report, with
//! exit 4), then ends with 0.
//!
//! The demo's broker is `examples/support/mock_broker.rs`; error chains and
//! the Ctrl-C / SIGTERM signal come from `examples/support/cli.rs` (both
//! shared with the other examples). Bad arguments exit 1 here, not 2 as in
//! the other examples: 2 is this tool's "no broker answered".

#[path = "support/cli.rs"]
mod cli;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::process::ExitCode;
use std::time::Duration;

use fresh_consumer::monitor::{
    Diagnosis, GroupMonitor, GroupReport, HeadTimestamp, MonitorError, MonitorReport, Scaling,
};
use opentelemetry::metrics::MeterProvider;

#[derive(Debug)]
struct Args {
    demo: bool,
    bootstrap: Option<String>,
    groups: Vec<String>,
    topics: Vec<String>,
    set: Vec<(String, String)>,
    json: bool,
    serve: bool,
    interval: f64,
    samples: u32,
    window: f64,
    stall_after: f64,
    lag_threshold: f64,
    replicas: Option<u32>,
    read_uncommitted: bool,
    request_timeout: f64,
}

/// The defaults of the options (see the module documentation).
impl Default for Args {
    fn default() -> Self {
        Args {
            demo: false,
            bootstrap: None,
            groups: Vec::new(),
            topics: Vec::new(),
            set: Vec::new(),
            json: false,
            serve: false,
            interval: 5.0,
            samples: 2,
            window: 60.0,
            stall_after: 30.0,
            lag_threshold: 60.0,
            replicas: None,
            read_uncommitted: false,
            request_timeout: 10.0,
        }
    }
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = args.into_iter();
    fn value(it: &mut impl Iterator<Item = String>, flag: &str) -> Result<String, String> {
        it.next().ok_or_else(|| format!("{flag} needs a value"))
    }
    fn secs(s: String, flag: &str) -> Result<f64, String> {
        match s.parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
            _ => Err(format!("{flag}: expected seconds above zero, got {s:?}")),
        }
    }
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--demo" => a.demo = true,
            "--json" => a.json = true,
            "--serve" => a.serve = true,
            "--read-uncommitted" => a.read_uncommitted = true,
            "--bootstrap" => a.bootstrap = Some(value(&mut it, &arg)?),
            "--group" => a.groups.push(value(&mut it, &arg)?),
            "--topic" => a.topics.push(value(&mut it, &arg)?),
            "--set" => {
                let kv = value(&mut it, &arg)?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--set: expected key=value, got {kv:?}"))?;
                a.set.push((k.to_owned(), v.to_owned()));
            }
            "--interval" => a.interval = secs(value(&mut it, &arg)?, &arg)?,
            "--window" => a.window = secs(value(&mut it, &arg)?, &arg)?,
            "--stall-after" => a.stall_after = secs(value(&mut it, &arg)?, &arg)?,
            "--lag-threshold" => a.lag_threshold = secs(value(&mut it, &arg)?, &arg)?,
            "--request-timeout" => a.request_timeout = secs(value(&mut it, &arg)?, &arg)?,
            "--samples" => {
                let v = value(&mut it, &arg)?;
                a.samples = v.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("--samples: expected a count of at least 1, got {v:?}")
                })?;
            }
            "--replicas" => {
                let v = value(&mut it, &arg)?;
                a.replicas = Some(
                    v.parse()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| format!("--replicas: expected at least 1, got {v:?}"))?,
                );
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !a.demo && (a.bootstrap.is_none() || a.groups.is_empty() || a.topics.is_empty()) {
        return Err("--bootstrap, --group and --topic are required (or --demo)".into());
    }
    Ok(a)
}

const USAGE: &str = "usage: group_monitor --bootstrap HOST:PORT --group G [--group G2 ...] --topic T [--topic T2 ...]
       [--set key=value ...] [--json | --serve] [--interval S] [--samples N] [--window S]
       [--stall-after S] [--lag-threshold S] [--replicas N] [--read-uncommitted]
       [--request-timeout S]
       group_monitor --demo [--json]
exit codes: 0 ok, 1 bad arguments or configuration, 2 broker unreachable, 3 unknown topic,
            4 a group has no committed offsets, 5 a cycle failed";

fn exit_code(e: &MonitorError) -> u8 {
    match e {
        MonitorError::Config(_) => 1,
        MonitorError::Unreachable { .. } => 2,
        MonitorError::UnknownTopic { .. } => 3,
        _ => 5,
    }
}

fn main() -> ExitCode {
    ExitCode::from(cli(std::env::args().skip(1)))
}

/// The whole tool, from its arguments (without the program name) to its
/// exit code; `tests/group_monitor_cli.rs` runs it in a child process.
pub fn cli(args: impl IntoIterator<Item = String>) -> u8 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() { 0 } else { 1 };
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run(args))
}

async fn run(mut args: Args) -> u8 {
    // Keeps the demo's broker alive for the whole run.
    let _demo = if args.demo {
        match demo::setup().await {
            Ok((broker, topic)) => {
                args.bootstrap = Some(broker.bootstrap().to_owned());
                args.topics = vec![topic];
                args.groups = vec!["demo-billing".into(), "demo-unknown".into()];
                args.interval = 0.5;
                args.samples = 3;
                args.window = 1.0;
                args.stall_after = 0.5;
                args.lag_threshold = 5.0;
                Some(broker)
            }
            Err(e) => {
                eprintln!("error: demo setup: {e}");
                return 1;
            }
        }
    } else {
        None
    };
    let mut monitor = GroupMonitor::new()
        .bootstrap_servers(args.bootstrap.clone().unwrap_or_default())
        .groups(args.groups.clone())
        .topics(args.topics.clone())
        .interval(Duration::from_secs_f64(args.interval))
        .window(Duration::from_secs_f64(args.window.max(args.interval)))
        .stall_after(Duration::from_secs_f64(args.stall_after))
        .lag_threshold(Duration::from_secs_f64(args.lag_threshold))
        .request_timeout(Duration::from_secs_f64(args.request_timeout))
        .read_committed(!args.read_uncommitted);
    for (k, v) in &args.set {
        monitor = monitor.set(k, v);
    }
    if let Some(n) = args.replicas {
        monitor = monitor.current_replicas(n);
    }

    if args.serve {
        let provider = match fresh_consumer::otlp::OtlpConfig::from_env() {
            Ok(c) => match c.build() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: OTLP exporter: {}", cli::chain(&e));
                    return 1;
                }
            },
            Err(e) => {
                eprintln!("error: OTLP configuration: {}", cli::chain(&e));
                return 1;
            }
        };
        let monitor = monitor.meter(provider.meter("fresh-consumer"));
        let mut monitor = match monitor.connect().await {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: {}", cli::chain(&e));
                return exit_code(&e);
            }
        };
        // A cycle that overran its interval is followed by the next one an
        // interval later, not at once.
        let mut tick = tokio::time::interval(Duration::from_secs_f64(args.interval));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cli::shutdown_signal() => break,
                _ = tick.tick() => {}
            }
            match monitor.cycle().await {
                Ok(r) => {
                    for g in &r.groups {
                        println!("{}", summary_line(g));
                    }
                }
                Err(e) => eprintln!("cycle failed: {}", cli::chain(&e)),
            }
        }
        let _ = fresh_consumer::otlp::shutdown(&provider, Duration::from_secs(5)).await;
        return 0;
    }

    let mut monitor = match monitor.connect().await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {}", cli::chain(&e));
            return exit_code(&e);
        }
    };
    let mut report = None;
    for i in 0..args.samples {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs_f64(args.interval)).await;
        }
        match monitor.cycle().await {
            Ok(r) => report = Some(r),
            Err(e) => {
                eprintln!("error: {}", cli::chain(&e));
                return exit_code(&e);
            }
        }
    }
    let report = report.expect("at least one sample");
    if args.json {
        println!("{}", json(&report));
    } else {
        print!("{}", table(&report));
    }
    if args.demo {
        for g in report
            .groups
            .iter()
            .filter(|g| g.diagnosis == Diagnosis::NoOffsets)
        {
            println!(
                "\ndemo, the unknown group: group {:?} has no committed offset on the watched topics (unknown group, or it never committed); outside --demo the tool reports it on stderr and exits 4",
                g.group
            );
        }
        println!("demo done");
        return 0;
    }
    if report
        .groups
        .iter()
        .any(|g| g.diagnosis == Diagnosis::NoOffsets)
    {
        for g in report
            .groups
            .iter()
            .filter(|g| g.diagnosis == Diagnosis::NoOffsets)
        {
            eprintln!(
                "error: group {:?} has no committed offset on the watched topics (unknown group, or it never committed)",
                g.group
            );
        }
        return 4;
    }
    0
}

fn dur(d: Option<Duration>) -> String {
    let Some(d) = d else { return "-".into() };
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn scaling(s: &Scaling) -> String {
    match s {
        Scaling::NotNeeded => "no scaling needed".into(),
        Scaling::Suggest {
            throughput_factor,
            current,
            replicas,
            capped,
            ..
        } => match (current, replicas) {
            (Some(now), Some(n)) => format!(
                "suggest {n} replicas, now {now} (x{throughput_factor:.2} throughput{})",
                if *capped {
                    ", capped at the partition count"
                } else {
                    ""
                }
            ),
            _ => format!(
                "needs x{throughput_factor:.2} throughput (the brokers do not describe the group's members: give --replicas for a replica count)"
            ),
        },
        Scaling::Withheld { reason } => format!("no replica suggestion: {reason}"),
    }
}

fn summary_line(g: &GroupReport) -> String {
    let named: Vec<String> = g
        .named
        .iter()
        .map(|tp| format!("{}-{}", tp.topic, tp.partition))
        .collect();
    format!(
        "group {}: {}{} | members {} | lag {} | max time lag {} | drain {} | {}",
        g.group,
        g.diagnosis.as_str(),
        if named.is_empty() {
            String::new()
        } else {
            format!(" ({})", named.join(", "))
        },
        opt(g.members),
        g.total_lag,
        dur(g.max_time_lag),
        dur(g.drain_time),
        scaling(&g.scaling)
    )
}

fn table(r: &MonitorReport) -> String {
    let mut out = String::new();
    for g in &r.groups {
        out.push_str(&summary_line(g));
        out.push('\n');
        if g.timestamps_missing + g.timestamps_future > 0 {
            out.push_str(&format!(
                "  records at committed offsets without a timestamp: {}, with a future timestamp: {}\n",
                g.timestamps_missing, g.timestamps_future
            ));
        }
        out.push_str(&format!(
            "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:<15} {:>9} {:>8} {:>10}  {}\n",
            "partition",
            "committed",
            "log start",
            "high wm",
            "LSO",
            "lag",
            "time lag",
            "ts",
            "unchanged",
            "margin",
            "margin eta",
            "status"
        ));
        for p in &g.partitions {
            let status = match p.status {
                fresh_consumer::monitor::LagStatus::OutOfRange { deleted } => {
                    format!("OUT OF RANGE: {deleted} records deleted unread")
                }
                s => s.as_str().to_owned(),
            };
            out.push_str(&format!(
                "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:<15} {:>9} {:>8} {:>10}  {}\n",
                format!("{}-{}", p.topic, p.partition),
                opt(p.committed),
                p.log_start,
                p.high_watermark,
                p.last_stable,
                opt(p.offset_lag),
                dur(p.time_lag),
                p.timestamp.as_str(),
                dur(p.commit_unchanged_for),
                opt(p.retention_margin),
                dur(p.retention_eta),
                status
            ));
        }
    }
    out.push_str(&format!(
        "cycle took {:?}, {} records read\n",
        r.cycle_duration, r.records_read
    ));
    out
}

fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jn<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

fn jd(d: Option<Duration>) -> String {
    d.map_or_else(|| "null".into(), |d| format!("{:.3}", d.as_secs_f64()))
}

/// The report as one JSON object; durations in seconds, offsets as numbers,
/// unknown values `null`.
fn json(r: &MonitorReport) -> String {
    let taken = r
        .taken_at
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let groups: Vec<String> = r
        .groups
        .iter()
        .map(|g| {
            let parts: Vec<String> = g
                .partitions
                .iter()
                .map(|p| {
                    let (ts_ms, deleted) = (
                        match p.timestamp {
                            HeadTimestamp::CreateTime(ms)
                            | HeadTimestamp::LogAppendTime(ms)
                            | HeadTimestamp::Future(ms) => Some(ms),
                            _ => None,
                        },
                        match p.status {
                            fresh_consumer::monitor::LagStatus::OutOfRange { deleted } => {
                                Some(deleted)
                            }
                            _ => None,
                        },
                    );
                    format!(
                        "{{\"topic\":{},\"partition\":{},\"committed\":{},\"log_start\":{},\"high_watermark\":{},\"last_stable\":{},\"offset_lag\":{},\"time_lag_s\":{},\"timestamp_type\":{},\"timestamp_ms\":{},\"commit_unchanged_s\":{},\"waiting_s\":{},\"log_end_moved\":{},\"retention_margin\":{},\"retention_eta_s\":{},\"status\":{},\"deleted_unread\":{}}}",
                        js(&p.topic),
                        p.partition,
                        jn(p.committed),
                        p.log_start,
                        p.high_watermark,
                        p.last_stable,
                        jn(p.offset_lag),
                        jd(p.time_lag),
                        js(p.timestamp.as_str()),
                        jn(ts_ms),
                        jd(p.commit_unchanged_for),
                        jd(p.waiting_for),
                        p.log_end_moved,
                        jn(p.retention_margin),
                        jd(p.retention_eta),
                        js(p.status.as_str()),
                        jn(deleted)
                    )
                })
                .collect();
            let named: Vec<String> = g
                .named
                .iter()
                .map(|tp| format!("{{\"topic\":{},\"partition\":{}}}", js(&tp.topic), tp.partition))
                .collect();
            let (current, replicas, factor, withheld) = match &g.scaling {
                Scaling::Suggest {
                    current,
                    replicas,
                    throughput_factor,
                    ..
                } => (
                    jn(*current),
                    jn(*replicas),
                    format!("{throughput_factor:.3}"),
                    "null".into(),
                ),
                Scaling::Withheld { reason } => {
                    ("null".into(), "null".into(), "null".into(), js(reason))
                }
                Scaling::NotNeeded => ("null".into(), "null".into(), "null".into(), "null".into()),
            };
            format!(
                "{{\"group\":{},\"diagnosis\":{},\"named\":[{}],\"members\":{},\"total_lag\":{},\"max_time_lag_s\":{},\"commit_rate\":{:.3},\"produce_rate\":{:.3},\"drain_time_s\":{},\"current_replicas\":{},\"replicas_suggested\":{},\"throughput_factor\":{},\"suggestion_withheld\":{},\"timestamps_missing\":{},\"timestamps_future\":{},\"partitions\":[{}]}}",
                js(&g.group),
                js(g.diagnosis.as_str()),
                named.join(","),
                jn(g.members),
                g.total_lag,
                jd(g.max_time_lag),
                g.commit_rate,
                g.produce_rate,
                jd(g.drain_time),
                current,
                replicas,
                factor,
                withheld,
                g.timestamps_missing,
                g.timestamps_future,
                parts.join(",")
            )
        })
        .collect();
    format!(
        "{{\"taken_at_ms\":{},\"cycle_duration_s\":{:.6},\"records_read\":{},\"groups\":[{}]}}",
        taken,
        r.cycle_duration.as_secs_f64(),
        r.records_read,
        groups.join(",")
    )
}

mod demo {
    //! The embedded broker with a topic and one group: partition 0 caught
    //! up, partition 1 behind by records stamped 10 minutes ago, partition 2
    //! with a record without a timestamp at the committed offset.
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};

    use super::mock_broker::MockBroker;

    /// The running broker (alive as long as the value) and the topic.
    pub(super) async fn setup() -> Result<(MockBroker, String), Box<dyn std::error::Error>> {
        let broker = MockBroker::start()?;
        let bootstrap = broker.bootstrap().to_owned();
        let topic = "demo-orders".to_owned();
        broker.create_topic(&topic, 3)?;
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
        for (p, n, ts) in [
            (0, 50, Some(now)),
            (1, 200, Some(now - 600_000)),
            (2, 20, Some(-1)),
        ] {
            for i in 0..n {
                let key = format!("k{i}");
                let mut r = FutureRecord::to(&topic).partition(p).key(&key).payload("v");
                if let Some(ts) = ts {
                    r = r.timestamp(ts);
                }
                producer
                    .send(r, Duration::from_secs(10))
                    .await
                    .map_err(|(e, _)| e)?;
            }
        }
        let (b, t) = (bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || -> Result<(), String> {
            let c: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("group.id", "demo-billing")
                .create()
                .map_err(|e| e.to_string())?;
            let mut tpl = TopicPartitionList::new();
            for (p, o) in [(0, 50), (1, 20), (2, 5)] {
                tpl.add_partition_offset(&t, p, Offset::Offset(o))
                    .map_err(|e| e.to_string())?;
            }
            c.commit(&tpl, CommitMode::Sync).map_err(|e| e.to_string())
        })
        .await??;
        Ok((broker, topic))
    }
}
