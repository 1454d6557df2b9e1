//! The one child-process runner: a test binary re-executes itself to run a
//! consumer in a process of its own, which the test can SIGKILL.
//!
//! The parent spawns [`ChildProcess::spawn`] with [`command`] (this binary,
//! running one test, given the cluster, group and topic in the environment,
//! plus whatever variables the child needs). The child is that test: it
//! reads them with [`target`] (`None` when the test runs as itself: then it
//! is a no-op and passes), builds its consumer with [`consumer`], and runs
//! it until [`stdin_closed`]: closing the child's stdin stops it
//! gracefully.
#![allow(dead_code)]

use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use fresh_consumer::{FreshConsumer, Handler, Record};

use super::kafka::{TestCluster, fast};
use super::wait::wait_until;

/// The cluster's bootstrap servers, the group and the topic, for the child.
const BOOTSTRAP: &str = "FRESH_CHILD_BOOTSTRAP";
const GROUP: &str = "FRESH_CHILD_GROUP";
const TOPIC: &str = "FRESH_CHILD_TOPIC";
/// The child's `session.timeout.ms`.
const SESSION_MS: &str = "FRESH_CHILD_SESSION_MS";

/// This test binary, running only test `test` (single-threaded, output
/// shown), with `cluster`'s bootstrap servers, `group`, `topic` and a
/// session timeout in its environment. Add the child's own variables with
/// `.env(..)`.
pub fn command(test: &str, cluster: &TestCluster, group: &str, topic: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(BOOTSTRAP, cluster.bootstrap())
        .env(GROUP, group)
        .env(TOPIC, topic)
        // Short, so a killed member leaves the group soon; a real broker
        // refuses less than group.min.session.timeout.ms (6 s by default).
        .env(SESSION_MS, if cluster.is_real() { "6000" } else { "2000" });
    command
}

/// What a child consumes: the parent's cluster, group and topic.
pub struct Target {
    pub bootstrap: String,
    pub group: String,
    pub topic: String,
}

/// In the child: what to consume; `None` when this process was not started
/// by [`command`].
pub fn target() -> Option<Target> {
    let bootstrap = std::env::var(BOOTSTRAP).ok()?;
    Some(Target {
        bootstrap,
        group: var(GROUP),
        topic: var(TOPIC),
    })
}

/// In the child: environment variable `name`, which the parent set.
pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

/// In the child: the test cluster's fast settings, with the short session
/// the parent chose, so a killed member leaves the group quickly (the mock
/// broker waits `session.timeout.ms - 1 s` for members at each membership
/// change).
pub fn consumer<H: Handler>(handler: H, target: &Target) -> FreshConsumer<H> {
    configure(FreshConsumer::new(handler), target)
}

/// [`consumer`]'s settings on any consumer (a batched one too).
pub fn configure<H>(consumer: FreshConsumer<H>, target: &Target) -> FreshConsumer<H> {
    let session_ms: u64 = var(SESSION_MS).parse().expect("session timeout in ms");
    fast(consumer, &target.bootstrap, &target.group, &target.topic)
        .set("session.timeout.ms", session_ms.to_string())
        .set("heartbeat.interval.ms", (session_ms / 10).to_string())
        .revoke_timeout(Duration::from_secs(1))
}

/// The librdkafka properties [`plain_consumer`] sets on top of its own:
/// `key=value` pairs separated by `;`.
const PLAIN_SET: &str = "FRESH_CHILD_PLAIN_SET";

/// In the parent: `props` for a [`plain_consumer`] child (an assignor, a
/// group protocol).
pub fn plain_props(command: &mut Command, props: &[(&str, &str)]) {
    let joined: Vec<String> = props.iter().map(|(k, v)| format!("{k}={v}")).collect();
    command.env(PLAIN_SET, joined.join(";"));
}

/// In the child: a plain librdkafka consumer, not this library's, as the
/// groups the monitor watches are run: auto commit every 5 s, the default
/// assignors (`range,roundrobin`: range), `read_committed`, `handler` of
/// work per record, plus the parent's [`plain_props`]; until stdin closes.
/// The session timeout is the parent's, except under KIP-848
/// (`group.protocol=consumer`), where the brokers own it.
pub fn plain_consumer(target: &Target, handler: Duration) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};

    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &target.bootstrap)
        .set("group.id", &target.group)
        .set("auto.offset.reset", "earliest");
    let props = std::env::var(PLAIN_SET).unwrap_or_default();
    for pair in props.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').expect("key=value");
        config.set(k, v);
    }
    if config.get("group.protocol") != Some("consumer") {
        config.set("session.timeout.ms", var(SESSION_MS));
    }
    let consumer: BaseConsumer = config.create().expect("consumer");
    consumer.subscribe(&[&target.topic]).expect("subscribe");
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        flag.store(true, Ordering::Release);
    });
    println!("plain consumer running ({props})");
    while !stop.load(Ordering::Acquire) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100))
            && !handler.is_zero()
        {
            std::thread::sleep(handler);
        }
    }
    consumer.unsubscribe();
}

/// In the child: runs `future` to completion on a runtime of its own (the
/// child's test is a plain `#[test]`).
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// In the child: resolves when the parent closes our stdin (or dies).
pub async fn stdin_closed() {
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        std::io::stdin().read_to_end(&mut sink)
    })
    .await;
}

/// In the child: a handler that waits `delay`, then appends a
/// `partition offset` line to the file `out` and succeeds (one write per
/// line: a kill never leaves half a line behind a record that was not
/// reported done). Read the lines back with [`handled_lines`].
pub fn line_writer(
    out: &str,
    delay: Duration,
) -> impl Fn(Record) -> std::pin::Pin<Box<dyn Future<Output = Result<(), std::io::Error>> + Send>>
+ Send
+ Sync
+ 'static {
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .expect("output file");
    let file = Arc::new(Mutex::new(file));
    move |r: Record| {
        let file = Arc::clone(&file);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let line = format!("{} {}\n", r.partition(), r.offset());
            let mut f = file.lock().unwrap();
            f.write_all(line.as_bytes())?;
            f.flush()?;
            Ok(())
        })
    }
}

/// Every complete `partition offset` line of the file `out` (written by
/// [`line_writer`]), in file order; empty when there is no file yet.
pub fn handled_lines(out: &Path) -> Vec<(i32, i64)> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .map(|l| {
            let mut it = l.split(' ');
            let p = it.next().and_then(|s| s.parse().ok());
            let o = it.next().and_then(|s| s.parse().ok());
            match (p, o) {
                (Some(p), Some(o)) => (p, o),
                _ => panic!("{}: malformed line {l:?}", out.display()),
            }
        })
        .collect()
}

/// A child process, killed when dropped; the tail of its log is printed
/// when the test fails.
pub struct ChildProcess {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl ChildProcess {
    /// Spawns `command` with a stdin to close, its stdout and stderr in
    /// `{dir}/{name}.log`.
    pub fn spawn(name: impl Into<String>, dir: &Path, mut command: Command) -> Self {
        let name = name.into();
        let log = dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log).expect("child log");
        let child = command
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone().expect("log handle"))
            .stderr(log_file)
            .spawn()
            .expect("spawn the child consumer");
        ChildProcess { name, child, log }
    }

    /// Panics with the child's log when it has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!(
                "{} exited early ({status}):\n{}",
                self.name,
                self.log_text()
            );
        }
    }

    /// SIGKILLs the child and asserts that it died of it.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("reap the child");
        assert!(!status.success(), "{} was not killed: {status}", self.name);
    }

    /// Closes the child's stdin, so it shuts down gracefully, and waits
    /// (up to 20 s) for its exit status.
    pub async fn stop(&mut self) -> ExitStatus {
        drop(self.child.stdin.take());
        wait_until(
            Duration::from_secs(20),
            &format!("{} exited", self.name),
            || {
                let exited = self.child.try_wait().expect("try_wait").is_some();
                async move { exited }
            },
        )
        .await;
        self.child.wait().expect("child status")
    }

    /// Sends the child SIGTERM (what Kubernetes sends a pod to stop it).
    pub fn terminate(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) with a live child's pid (not yet reaped: `Drop`
        // and `wait_exit` reap it) and a valid signal number.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(
            rc,
            0,
            "SIGTERM {}: {}",
            self.name,
            std::io::Error::last_os_error()
        );
    }

    /// Waits up to `timeout` for the child to exit; its status, or `None`
    /// while it still runs at the deadline.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the child still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Everything the child wrote to stdout and stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "--- {}: last log lines:\n{}",
                self.name,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}
