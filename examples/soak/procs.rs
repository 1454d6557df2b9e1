//! The soak's processes: the three consumers (started, killed, stopped
//! gracefully, signalled, restarted) and the OTLP collector.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::check::Event;
use super::now_ms;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The consumer processes, by slot.
pub struct Consumers {
    pub args: Vec<String>,
    /// Each slot's `group.protocol` (`classic` or `consumer`), passed to
    /// its next start.
    pub protocol: Vec<&'static str>,
    /// The `OTEL_*` variables that point the consumers at the collector.
    pub env: Vec<(String, String)>,
    pub out: PathBuf,
    pub slots: Vec<Option<Child>>,
    pub logs: Vec<PathBuf>,
    /// When each slot that is down starts again.
    pub restart_at: Vec<Option<Instant>>,
    pub events: Arc<Mutex<Vec<Event>>>,
    pub failures: Vec<String>,
}

impl Consumers {
    pub fn start(&mut self, slot: usize) -> Result<(), BoxError> {
        let n = self.logs.len();
        let log = self.out.join(format!("consumer-{slot}-{n}.log"));
        let stderr = std::fs::File::create(self.out.join(format!("consumer-{slot}-{n}.stderr")))?;
        let child = Command::new(std::env::current_exe()?)
            .arg("--child")
            .args(&self.args)
            .args(["--protocol", self.protocol[slot]])
            .args(["--slot", &slot.to_string()])
            .args(["--log".as_ref(), log.as_os_str()])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // Held open while the child runs: it exits when this process
            // is gone (see `child::exit_with_parent`).
            .stdin(Stdio::piped())
            .stdout(stderr.try_clone()?)
            .stderr(stderr)
            .spawn()?;
        self.logs.push(log);
        self.slots[slot] = Some(child);
        self.restart_at[slot] = None;
        self.event(format!("consumer {slot} started"), 0);
        Ok(())
    }

    pub fn event(&self, what: String, lasted_ms: i64) {
        let t = now_ms();
        println!("[{t}] {what}");
        self.events.lock().unwrap().push(Event {
            t_ms: t,
            until_ms: t + lasted_ms,
            what,
        });
    }

    pub fn running(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&s| self.slots[s].is_some())
            .collect()
    }

    /// Notes and restarts a consumer that exited without being told to;
    /// starts the slots whose restart time came.
    pub fn tend(&mut self) -> Result<(), BoxError> {
        for slot in 0..self.slots.len() {
            if let Some(child) = &mut self.slots[slot]
                && let Some(status) = child.try_wait()?
            {
                self.failures
                    .push(format!("consumer {slot} exited by itself: {status}"));
                self.slots[slot] = None;
                self.restart_at[slot] = Some(Instant::now() + Duration::from_secs(1));
            }
            if self.restart_at[slot].is_some_and(|t| t <= Instant::now()) {
                self.start(slot)?;
            }
        }
        Ok(())
    }

    pub fn kill(&mut self, slot: usize, restart_after: Duration) {
        if let Some(mut child) = self.slots[slot].take() {
            let _ = child.kill();
            let _ = child.wait();
            self.event(format!("consumer {slot} SIGKILLed"), 0);
            self.restart_at[slot] = Some(Instant::now() + restart_after);
        }
    }

    /// SIGTERM and wait up to 30 s; `false` when it had to be killed.
    pub async fn term(&mut self, slot: usize) -> bool {
        let Some(mut child) = self.slots[slot].take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        self.failures
                            .push(format!("consumer {slot} stopped with {status}"));
                    }
                    return true;
                }
                _ if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    self.failures.push(format!(
                        "consumer {slot} did not stop within 30 s of SIGTERM"
                    ));
                    return false;
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub fn signal(&self, slot: usize, signal: &str) {
        if let Some(child) = &self.slots[slot] {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }
}

/// The OTLP collector the consumers export to (rotel), stopped for a while
/// mid-run.
pub struct Collector {
    pub rotel: PathBuf,
    pub out: PathBuf,
    pub grpc_port: u16,
    pub http_port: u16,
    pub child: Option<Child>,
    /// One log per start; the last one is the collector's after the outage.
    pub logs: Vec<PathBuf>,
}

impl Collector {
    pub async fn start(&mut self) -> Result<(), BoxError> {
        let log = self.out.join(format!("rotel-{}.log", self.logs.len()));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(&self.rotel)
            .arg("start")
            .args([
                "--otlp-grpc-endpoint",
                &format!("127.0.0.1:{}", self.grpc_port),
            ])
            .args([
                "--otlp-http-endpoint",
                &format!("127.0.0.1:{}", self.http_port),
            ])
            .args(["--exporter", "blackhole", "--debug-log", "metrics"])
            // After the outage every data point is logged, so the
            // exporters' count of what they dropped can be read back.
            .args([
                "--debug-log-verbosity",
                if self.logs.is_empty() {
                    "basic"
                } else {
                    "detailed"
                },
            ])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        self.child = Some(child);
        self.logs.push(log);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.grpc_port)).is_err() {
            if Instant::now() >= deadline {
                return Err("the collector did not listen within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !matches!(child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The exports each of its runs received: "Received metrics" lines
    /// (basic verbosity) or "ResourceMetrics #0" blocks (detailed).
    pub fn exports(&self) -> Vec<usize> {
        self.logs
            .iter()
            .map(|l| {
                let text = std::fs::read_to_string(l).unwrap_or_default();
                text.matches("Received metrics").count()
                    + text.matches("ResourceMetrics #0").count()
            })
            .collect()
    }

    /// The highest count of data points one exporter reported as failed
    /// (`otel.sdk.exporter.metric_data_point.exported` with `error.type`)
    /// in the collector's last run, read from rotel's detailed log
    /// (`-> Name: <metric>`, then per data point `-> <key>: Str(<value>)`
    /// attribute lines and `Value: <n>`).
    pub fn dropped_points_reported(&self) -> u64 {
        let Some(log) = self.logs.last() else {
            return 0;
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let (mut in_metric, mut failed, mut most) = (false, false, 0u64);
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("-> Name: ") {
                in_metric = name == "otel.sdk.exporter.metric_data_point.exported";
            } else if line.starts_with("NumberDataPoints #") {
                failed = false;
            } else if in_metric && line.starts_with("-> error.type: ") {
                failed = true;
            } else if let Some(v) = line.strip_prefix("Value: ")
                && in_metric
                && failed
            {
                most = most.max(v.trim().parse::<f64>().unwrap_or(0.0) as u64);
            }
        }
        most
    }
}

/// A free loopback TCP port (the kernel picks it).
pub fn free_port() -> Result<u16, BoxError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
