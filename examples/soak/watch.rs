//! The group monitor watching the soak's group from outside: one cycle
//! every `INTERVAL`, its diagnosis (or the kind of error of a failed cycle)
//! and the group's member count with a timestamp, for `signals.rs`.
//!
//! It runs in a process of its own (`soak --watch`), which appends each
//! reading to its log as it is taken (`<unix ms> <reading> <members|->
//! <under-replicated partitions>`, the last from each partition's
//! `replication` in the cycle's metadata):
//! on three nodes a graceful stop of a node aborted the soak's process
//! once, in librdkafka's admin coordinator request
//! (`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'
//! failed`, 2026-12-07; twice in three runs with a rolling restart), which
//! only the monitor's DescribeConsumerGroups uses in that process:
//! librdkafka's use-after-free of a coordinator request's `eonce` when the
//! connection drops (confluentinc/librdkafka#4605, fix proposed in
//! confluentinc/librdkafka#5397). The parent restarts a monitor
//! that exited by itself (`Watcher::tend`) and fails the run with what it
//! printed: a monitor process that dies is a finding, not a reason to lose
//! the soak's other checks.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::monitor::GroupMonitor;

use super::now_ms;

/// How often the monitor reads the group.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// One cycle: (unix ms, `dead`, `keeping_up`, ... or `error:<kind>`, the
/// group's member count as the brokers described it).
pub type Reading = (i64, String, Option<u32>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Watches `group` on `topic` until `stop` resolves, handing each reading
/// to `sink` as it is taken. `stall_after` and the lag threshold are the
/// soak's evaluation window (`window`), the monitor's own window twice
/// that, so a fault of the soak's length can show.
pub async fn watch(
    bootstrap: String,
    group: String,
    topic: String,
    window: Duration,
    stop: impl std::future::Future<Output = ()>,
    sink: impl FnMut(Reading, usize) + Send + 'static,
) {
    let sink = Arc::new(Mutex::new(sink));
    let monitor = GroupMonitor::new()
        .bootstrap_servers(bootstrap)
        .group(group)
        .topics([topic])
        .interval(INTERVAL)
        .stall_after(window)
        .lag_threshold(window)
        .window(window * 2);
    let cycles = {
        let sink = Arc::clone(&sink);
        async move {
            let mut monitor = loop {
                match monitor.clone().connect().await {
                    Ok(m) => break m,
                    Err(e) => {
                        (sink.lock().unwrap())((now_ms(), format!("error:{}", e.kind()), None), 0);
                        tokio::time::sleep(INTERVAL).await;
                    }
                }
            };
            let mut tick = tokio::time::interval(INTERVAL);
            // A cycle slowed by a broker outage delays the next one; no
            // burst of catch-up cycles.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let (reading, under) = match monitor.cycle().await {
                    Ok(report) => report.groups.first().map_or(
                        ((now_ms(), "none".to_owned(), None), 0),
                        |g| {
                            let under = g
                                .partitions
                                .iter()
                                .filter(|p| p.replication.is_some_and(|r| r.is_under_replicated()))
                                .count();
                            (
                                (now_ms(), g.diagnosis.as_str().to_owned(), g.members),
                                under,
                            )
                        },
                    ),
                    Err(e) => ((now_ms(), format!("error:{}", e.kind()), None), 0),
                };
                (sink.lock().unwrap())(reading, under);
            }
        }
    };
    tokio::select! {
        _ = cycles => {}
        _ = stop => {}
    }
}

/// `soak --watch`: watches until SIGTERM or until its stdin closes (the
/// parent is gone), appending each reading to `log`.
pub fn run_process(
    bootstrap: String,
    group: String,
    topic: String,
    window: Duration,
    log: PathBuf,
) {
    // The monitor's log goes to stderr (`monitor-<n>.stderr`).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,fresh_consumer=info,fresh_consumer::engine::worker::outcome=warn".into()
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("open the monitor log");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let stop = async {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let stdin_closed = tokio::task::spawn_blocking(|| {
                let mut sink = Vec::new();
                let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            });
            tokio::select! {
                _ = term.recv() => {}
                _ = stdin_closed => {}
            }
        };
        watch(
            bootstrap,
            group,
            topic,
            window,
            stop,
            move |(t, r, m), under| {
                let members = m.map_or("-".to_owned(), |m| m.to_string());
                // One write per line.
                file.write_all(format!("{t} {r} {members} {under}\n").as_bytes())
                    .expect("write the monitor log");
            },
        )
        .await;
    });
    // The stdin reader may still block: leave without waiting for it.
    std::process::exit(0);
}

/// The monitor processes of a soak: one at a time, started again when one
/// exits by itself.
pub struct Watcher {
    args: Vec<String>,
    out: PathBuf,
    child: Option<Child>,
    pub logs: Vec<PathBuf>,
    /// What each monitor process that exited by itself left: its status
    /// and the last lines of its stderr.
    pub crashes: Vec<String>,
    restart_at: Option<Instant>,
}

impl Watcher {
    pub fn start(
        bootstrap: &str,
        group: &str,
        topic: &str,
        window: Duration,
        out: &Path,
    ) -> Result<Watcher, BoxError> {
        let mut w = Watcher {
            args: [
                "--bootstrap",
                bootstrap,
                "--group",
                group,
                "--topic",
                topic,
                "--window-ms",
                &window.as_millis().to_string(),
            ]
            .map(str::to_owned)
            .to_vec(),
            out: out.to_owned(),
            child: None,
            logs: Vec::new(),
            crashes: Vec::new(),
            restart_at: None,
        };
        w.spawn()?;
        Ok(w)
    }

    fn stderr_path(&self, n: usize) -> PathBuf {
        self.out.join(format!("monitor-{n}.stderr"))
    }

    fn spawn(&mut self) -> Result<(), BoxError> {
        let n = self.logs.len();
        let log = self.out.join(format!("monitor-{n}.log"));
        let stderr = std::fs::File::create(self.stderr_path(n))?;
        let child = Command::new(std::env::current_exe()?)
            .arg("--watch")
            .args(&self.args)
            .args(["--log".as_ref(), log.as_os_str()])
            // Held open while it runs: it exits when the soak is gone.
            .stdin(Stdio::piped())
            .stdout(stderr.try_clone()?)
            .stderr(stderr)
            .spawn()?;
        self.logs.push(log);
        self.child = Some(child);
        Ok(())
    }

    /// Notes a monitor process that exited by itself and starts another
    /// a second later.
    pub fn tend(&mut self) -> Result<(), BoxError> {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            let n = self.logs.len() - 1;
            let text = std::fs::read_to_string(self.stderr_path(n)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            let what = format!(
                "the group monitor process exited by itself ({status}): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
            println!("[{}] {what}", now_ms());
            self.crashes.push(what);
            self.restart_at = Some(Instant::now() + Duration::from_secs(1));
        }
        if self.restart_at.is_some_and(|t| t <= Instant::now()) {
            self.restart_at = None;
            self.spawn()?;
        }
        Ok(())
    }

    /// Stops the monitor (SIGTERM, up to 10 s) and returns every reading
    /// its processes logged, in time order, and with each reading's time
    /// the count of under-replicated partitions it saw.
    pub async fn stop(mut self) -> (Vec<Reading>, Vec<(i64, usize)>) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !matches!(child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut readings: Vec<(Reading, usize)> = self
            .logs
            .iter()
            .flat_map(|l| {
                let text = std::fs::read_to_string(l).unwrap_or_default();
                // A line cut by an abort (without its newline) is dropped.
                let complete = match text.rfind('\n') {
                    Some(i) => text[..=i].to_owned(),
                    None => String::new(),
                };
                complete
                    .lines()
                    .filter_map(|line| {
                        let mut f = line.split(' ');
                        let t = f.next()?.parse().ok()?;
                        let r = f.next()?.to_owned();
                        let m = f.next()?.parse().ok();
                        let under = f.next().and_then(|u| u.parse().ok()).unwrap_or(0);
                        Some(((t, r, m), under))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        readings.sort_by_key(|r| r.0.0);
        let under = readings.iter().map(|(r, u)| (r.0, *u)).collect();
        (readings.into_iter().map(|(r, _)| r).collect(), under)
    }
}
