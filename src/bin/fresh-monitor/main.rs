//! `fresh-monitor`: the group monitor (`fresh_consumer::monitor`) as a
//! command and a service. `cargo install fresh-consumer --features cli`.
//!
//! ```text
//! fresh-monitor --bootstrap broker:9092 --group billing --topic payments
//! fresh-monitor --bootstrap broker:9092 --group billing --topic payments --json
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317 fresh-monitor \
//!     --bootstrap broker:9092 --group billing --topic payments --serve
//! fresh-monitor --demo     # self-contained, on an embedded broker
//! ```
//!
//! `--help` lists every flag with its default; the exit codes are in
//! [`args::EXIT_CODES`]. Inside: `args.rs` the command line, `output.rs`
//! the table and the JSON, `demo.rs` the demo's broker and group.
//! `tests/group_monitor_cli.rs` runs this binary as a process for each exit
//! code.

mod args;
mod demo;
mod output;
mod prometheus;

// Process plumbing (error chains, the stop signal), shared with the
// examples.
#[path = "../../../examples/support/cli.rs"]
mod process;

use std::process::ExitCode;
use std::time::Duration;

use fresh_consumer::monitor::keda::KedaScaler;
use fresh_consumer::monitor::scale::{Autoscaler, ScalePolicy};
use fresh_consumer::monitor::{Diagnosis, GroupMonitor, MonitorError};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::args::{Args, secs};

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err((text, 0)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err((text, code)) => {
            eprint!("{text}");
            eprintln!();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(run(args)))
}

/// The exit code of a monitor error (see [`args::EXIT_CODES`]); above a cap
/// is a configuration error (narrow the patterns or raise the cap).
fn exit_code(e: &MonitorError) -> u8 {
    match e {
        MonitorError::Config(_) | MonitorError::TooMany { .. } => 1,
        MonitorError::Unreachable { .. } => 2,
        MonitorError::UnknownTopic { .. } => 3,
        _ => 5,
    }
}

/// The monitor the arguments describe.
fn builder_of(args: &Args) -> GroupMonitor {
    let mut monitor = GroupMonitor::new()
        .bootstrap_servers(args.bootstrap.clone().unwrap_or_default())
        .groups(args.groups.clone())
        .topics(args.topics.clone())
        .interval(secs(args.interval))
        .window(secs(args.window.max(args.interval)))
        .stall_after(secs(args.stall_after))
        .lag_threshold(secs(args.lag_threshold))
        .drain_target(secs(args.drain_target))
        .skew_share(args.skew_share)
        .request_timeout(secs(args.request_timeout))
        .read_timeout(secs(args.read_timeout))
        .read_committed(!args.read_uncommitted);
    for (k, v) in &args.set {
        monitor = monitor.set(k, v);
    }
    if let Some(n) = args.replicas {
        monitor = monitor.current_replicas(n);
    }
    if args.discovers() {
        let (include, exclude) = (args.include.clone(), args.exclude.clone());
        monitor = monitor.discover_groups(move |g| {
            include.as_ref().is_none_or(|r| r.is_match(g))
                && !exclude.as_ref().is_some_and(|r| r.is_match(g))
        });
    }
    monitor
        .max_groups(usize::try_from(args.max_groups).unwrap_or(usize::MAX))
        .max_partitions(usize::try_from(args.max_partitions).unwrap_or(usize::MAX))
}

async fn run(mut args: Args) -> u8 {
    // Keeps the demo's broker alive for the whole run.
    let _demo = if args.demo {
        match demo::setup().await {
            Ok((broker, topic)) => {
                args.bootstrap = Some(broker.bootstrap_servers());
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
    if args.service() {
        serve(&args).await
    } else {
        report(&args).await
    }
}

/// Runs `--samples` cycles and prints the last report.
async fn report(args: &Args) -> u8 {
    let mut monitor = match builder_of(args).connect().await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {}", process::chain(&e));
            return exit_code(&e);
        }
    };
    let mut last = None;
    for i in 0..args.samples {
        if i > 0 {
            tokio::time::sleep(secs(args.interval)).await;
        }
        match monitor.cycle().await {
            Ok(r) => last = Some(r),
            Err(e) => {
                eprintln!("error: {}", process::chain(&e));
                return exit_code(&e);
            }
        }
    }
    let Some(report) = last else { return 5 };
    if args.json {
        println!("{}", output::json(&report));
    } else {
        print!("{}", output::table(&report));
    }
    let unknown: Vec<&str> = report
        .groups
        .iter()
        .filter(|g| g.diagnosis == Diagnosis::NoOffsets)
        .map(|g| g.group.as_str())
        .collect();
    if args.demo {
        for g in &unknown {
            println!(
                "\ndemo, the unknown group: group {g:?} has no committed offset on the watched topics (unknown group, or it never committed); outside --demo the tool reports it on stderr and exits 4"
            );
        }
        println!("demo done");
        return 0;
    }
    for g in &unknown {
        eprintln!(
            "error: group {g:?} has no committed offset on the watched topics (unknown group, or it never committed)"
        );
    }
    if report.groups.is_empty() {
        eprintln!(
            "error: no listed group that the patterns accept has a committed offset on the watched topics"
        );
        return 4;
    }
    if unknown.is_empty() { 0 } else { 4 }
}

/// Runs until Ctrl-C or SIGTERM, exporting over OTLP (`--serve`) and/or
/// serving a scrape endpoint (`--prometheus`), printing one line per group
/// and cycle.
async fn serve(args: &Args) -> u8 {
    let mut builder = if args.serve {
        let built = fresh_consumer::otlp::OtlpConfig::from_env()
            .map_err(|e| format!("OTLP configuration: {}", process::chain(&e)))
            .and_then(|c| {
                c.meter_provider_builder()
                    .map_err(|e| format!("OTLP exporter: {}", process::chain(&e)))
            });
        match built {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        }
    } else {
        SdkMeterProvider::builder()
    };
    // The scrape endpoint: bound before the monitor connects, so a port in
    // use fails at once.
    let scrape = match args.prometheus {
        Some(addr) => match prometheus::bind(addr).await {
            Ok(listener) => {
                let reader = prometheus::SharedReader::new();
                builder = builder.with_reader(reader.clone());
                Some((listener, prometheus::registry(reader)))
            }
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        },
        None => None,
    };
    // The KEDA scaler: bound before the monitor connects too.
    if args.keda_grpc.is_some() && args.scale_down_lag >= args.lag_threshold {
        eprintln!(
            "error: --scale-down-lag ({} s) must be below --lag-threshold ({} s), the scale-up point",
            args.scale_down_lag, args.lag_threshold
        );
        return 1;
    }
    let keda = match args.keda_grpc {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                eprintln!("error: KEDA scaler address {addr}: {e}");
                return 1;
            }
        },
        None => None,
    };
    let provider = builder.build();
    let scaler = match keda {
        Some(listener) => {
            let mut policy = ScalePolicy::new()
                .drain_target(secs(args.drain_target))
                .scale_down_lag(secs(args.scale_down_lag))
                .scale_down_after(secs(args.scale_down_after))
                // The commit rate a step is computed from looks back over
                // the window.
                .settle_after(secs(args.window.max(args.interval)))
                .min_replicas(args.min_replicas);
            if let Some(n) = args.replicas {
                policy = policy.current_replicas(n);
            }
            match Autoscaler::new(policy, Some(&provider.meter("fresh-consumer"))) {
                Ok(a) => Some((KedaScaler::new(a), listener)),
                Err(e) => {
                    eprintln!("error: {}", process::chain(&e));
                    return 1;
                }
            }
        }
        None => None,
    };
    let monitor = builder_of(args).meter(provider.meter("fresh-consumer"));
    let mut monitor = match monitor.connect().await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {}", process::chain(&e));
            return exit_code(&e);
        }
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let server = scrape.map(|(listener, registry)| {
        if let Ok(addr) = listener.local_addr() {
            println!("serving http://{addr}/metrics");
        }
        tokio::spawn(prometheus::serve(
            listener,
            registry,
            stop.clone().cancelled_owned(),
        ))
    });
    let keda_server = scaler.as_ref().map(|(scaler, _)| scaler.clone());
    let keda_task = scaler.map(|(scaler, listener)| {
        if let Ok(addr) = listener.local_addr() {
            println!("serving the KEDA external scaler (gRPC) on {addr}");
        }
        tokio::spawn(scaler.serve(listener, stop.clone().cancelled_owned()))
    });
    // Cycles `--interval` ± 20 % apart (see `Monitor::until_next_cycle`).
    let mut watched: Vec<String> = Vec::new();
    let signal = process::shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => break,
            () = monitor.until_next_cycle() => {}
        }
        match monitor.cycle().await {
            Ok(r) => {
                let now: Vec<String> = r.groups.iter().map(|g| g.group.clone()).collect();
                if now != watched {
                    println!("{}", output::watching(&watched, &now));
                    watched = now;
                }
                for g in &r.groups {
                    println!("{}", output::summary_line(g));
                }
                if let Some(k) = &keda_server {
                    k.observe(std::sync::Arc::new(r));
                }
            }
            Err(e) => eprintln!("cycle failed: {}", process::chain(&e)),
        }
    }
    stop.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    if let Some(task) = keda_task
        && let Ok(Err(e)) = task.await
    {
        eprintln!("error: {}", process::chain(&e));
    }
    let _ = fresh_consumer::metrics::shutdown(&provider, Duration::from_secs(5)).await;
    0
}
