//! Apache Kafka killed (`kill -9`) and started again on the same log
//! directory while records flow: nothing acknowledged to the producer is
//! lost to the group, the group's committed offsets never move backwards
//! (sampled every 100 ms from outside), the consumer's health snapshot and
//! the group monitor show the outage and recover by themselves. Twice: a
//! short outage (the broker is started again at once; its restart takes a
//! few seconds), and one longer than the group's `session.timeout.ms`.
//!
//! Needs a broker this test may kill: the one `.ci/kafka start` started,
//! named by `KAFKA_DIR` (with `FRESH_CONSUMER_TEST_BOOTSTRAP`); skipped
//! otherwise (on the mock broker, `tests/faults.rs` takes the broker down
//! and up instead).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::monitor::GroupMonitor;
use fresh_consumer::{
    Record,
    health::{HealthReason, HealthStatus},
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::run::{start, wait_snapshot};
use support::wait::wait_until;

const PARTITIONS: i32 = 3;
/// The group's session timeout (the test cluster's consumer setting).
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// The `.ci/kafka` broker's directory, when this test may kill it.
fn broker_dir(cluster: &TestCluster) -> Option<PathBuf> {
    let dir = std::env::var_os("KAFKA_DIR").map(PathBuf::from);
    match dir {
        Some(d) if cluster.is_real() && d.join("server.properties").exists() => Some(d),
        _ => {
            eprintln!(
                "skipped: needs a broker started by .ci/kafka (KAFKA_DIR) that the test may kill and restart"
            );
            None
        }
    }
}

fn ci_kafka(verb: &str, dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/kafka");
    let out = Command::new("bash")
        .arg(&script)
        .arg(verb)
        .arg(dir)
        .output()
        .expect("run .ci/kafka");
    assert!(
        out.status.success(),
        ".ci/kafka {verb} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
}

/// Starts the broker again if the test ends (or panics) while it is down,
/// so that the tests after this one find it running.
struct Revive(PathBuf);

impl Drop for Revive {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/kafka");
        let running = std::fs::read_to_string(self.0.join("pid"))
            .ok()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{}/cmdline", pid.trim())).ok())
            .is_some_and(|cmd| cmd.contains("server.properties"));
        if !running {
            eprintln!("starting the broker again after the test");
            let _ = Command::new("bash")
                .arg(&script)
                .arg("resume")
                .arg(&self.0)
                .status();
        }
    }
}

/// Produces keyed records at about 200 records/s until stopped, and keeps
/// the offset of every record the broker acknowledged. Records sent while
/// the broker is down wait in librdkafka (idempotent producer, two minutes
/// of `message.timeout.ms`) and are acknowledged after the restart.
struct Flow {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    acked: Arc<Mutex<BTreeMap<i32, Vec<i64>>>>,
}

impl Flow {
    fn start(bootstrap: &str, topic: &str) -> Flow {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "120000")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<BTreeMap<i32, Vec<i64>>>> = Arc::default();
        let task = tokio::spawn({
            let (stop, acked, topic) = (Arc::clone(&stop), Arc::clone(&acked), topic.to_owned());
            async move {
                let mut pending = tokio::task::JoinSet::new();
                let mut i = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    for _ in 0..2 {
                        let key = format!("k{}", i % 30);
                        let payload = format!("{i}");
                        let f = producer
                            .send_result(FutureRecord::to(&topic).key(&key).payload(&payload))
                            .map_err(|(e, _)| e)
                            .expect("enqueue");
                        let acked = Arc::clone(&acked);
                        pending.spawn(async move {
                            let d = f.await.expect("delivery").map_err(|(e, _)| e).expect("ack");
                            acked
                                .lock()
                                .unwrap()
                                .entry(d.partition)
                                .or_default()
                                .push(d.offset);
                        });
                        i += 1;
                    }
                }
                while let Some(r) = pending.join_next().await {
                    r.expect("delivery task");
                }
            }
        });
        Flow { stop, task, acked }
    }

    /// Stops producing and waits for every acknowledgement.
    async fn finish(self) -> BTreeMap<i32, Vec<i64>> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("producer task");
        let mut acked = self.acked.lock().unwrap().clone();
        for v in acked.values_mut() {
            v.sort_unstable();
        }
        acked
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// Samples the group's committed offsets every 100 ms from outside and
/// keeps every move backwards (reads that fail while the broker is down
/// are skipped).
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

impl Sampler {
    fn start(cluster: &TestCluster, group: &str, topic: &str) -> Sampler {
        let reader = cluster.offset_reader(group, topic, PARTITIONS);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                let mut last = vec![-1001i64; PARTITIONS as usize];
                let (mut samples, mut backwards) = (0, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(now) = reader.committed(Duration::from_secs(2)) {
                        samples += 1;
                        for (p, (&was, &is)) in last.iter().zip(&now).enumerate() {
                            if is >= 0 && was >= 0 && is < was {
                                backwards.push(format!("partition {p}: {was} -> {is}"));
                            }
                        }
                        for (l, n) in last.iter_mut().zip(&now) {
                            *l = (*l).max(*n);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                (samples, backwards)
            }
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler")
    }
}

fn unreachable_for(s: &fresh_consumer::health::HealthSnapshot) -> Option<Duration> {
    s.reasons.iter().find_map(|r| match r {
        HealthReason::BrokersUnreachable { down_for } => Some(*down_for),
        _ => None,
    })
}

/// Cycles a group monitor every 250 ms until stopped; keeps when cycles
/// failed (and how) and when they succeeded again.
fn watch(cluster: &TestCluster, group: &str, topic: &str) -> MonitorLog {
    let monitor = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(group)
        .topics([topic])
        .interval(Duration::from_millis(250))
        .request_timeout(Duration::from_secs(2))
        .read_timeout(Duration::from_secs(2));
    let log: CycleLog = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn({
        let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
        async move {
            let mut m = monitor.connect().await.expect("monitor connect");
            while !stop.load(Ordering::Relaxed) {
                let r = m.cycle().await.map(|_| ()).map_err(|e| e.kind());
                log.lock().unwrap().push((Instant::now(), r));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    MonitorLog { log, stop, task }
}

/// Each monitor cycle: when it ended and, if it failed, the error's kind.
type CycleLog = Arc<Mutex<Vec<(Instant, Result<(), &'static str>)>>>;

struct MonitorLog {
    log: CycleLog,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl MonitorLog {
    fn failed_since(&self, t: Instant) -> Vec<&'static str> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(at, _)| *at >= t)
            .filter_map(|(_, r)| r.err())
            .collect()
    }

    fn succeeded_since(&self, t: Instant) -> bool {
        let log = self.log.lock().unwrap();
        log.iter().any(|(at, r)| *at >= t && r.is_ok())
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("monitor task");
    }
}

/// One outage: kills the broker, waits until the consumer's snapshot says
/// no broker is reachable (and for `hold` of it), starts the broker again,
/// and waits until the snapshot is healthy and the monitor cycles again.
/// Returns (time to answer after the restart, time until healthy).
async fn outage(
    dir: &Path,
    health: &fresh_consumer::health::HealthHandle,
    monitor: &MonitorLog,
    hold: Duration,
) -> (Duration, Duration) {
    let killed = Instant::now();
    ci_kafka("kill", dir);
    let s = wait_snapshot(
        health,
        Duration::from_secs(30),
        "the snapshot reports no broker reachable",
        |s| unreachable_for(s).is_some_and(|d| d >= hold),
    )
    .await;
    eprintln!("{:.1?} after the kill:\n{s}", killed.elapsed());
    assert!(s.status >= HealthStatus::Degraded, "{s}");
    wait_until(
        Duration::from_secs(30),
        "a monitor cycle failed",
        || async { !monitor.failed_since(killed).is_empty() },
    )
    .await;
    let restarted = Instant::now();
    ci_kafka("resume", dir);
    let answered = restarted.elapsed();
    let s = wait_snapshot(
        health,
        Duration::from_secs(60),
        "healthy again after the restart",
        |s| s.status == HealthStatus::Healthy && unreachable_for(s).is_none(),
    )
    .await;
    let healthy = restarted.elapsed();
    eprintln!("healthy {healthy:.1?} after the restart:\n{s}");
    wait_until(
        Duration::from_secs(30),
        "a monitor cycle succeeded after the restart",
        || async { monitor.succeeded_since(restarted + answered) },
    )
    .await;
    eprintln!(
        "monitor cycles failed during the outage: {:?}",
        monitor.failed_since(killed)
    );
    (answered, healthy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_mid_stream_loses_nothing_and_never_rewinds() {
    logs::init();
    let cluster = TestCluster::start();
    let Some(dir) = broker_dir(&cluster) else {
        return;
    };
    let _revive = Revive(dir.clone());
    let topic = cluster.topic("restart", PARTITIONS).await;
    let group = unique("g-restart");
    let handled: Arc<Mutex<BTreeMap<(i32, i64), u32>>> = Arc::default();
    let handler = {
        let handled = Arc::clone(&handled);
        move |r: Record| {
            let handled = Arc::clone(&handled);
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                *handled
                    .lock()
                    .unwrap()
                    .entry((r.partition(), r.offset()))
                    .or_default() += 1;
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            .statistics_interval(Duration::from_millis(200)),
    );
    let flow = Flow::start(cluster.bootstrap(), &topic);
    let sampler = Sampler::start(&cluster, &group, &topic);
    let monitor = watch(&cluster, &group, &topic);
    wait_until(
        Duration::from_secs(30),
        "records flowing and handled",
        || async { flow.count() > 300 && handled.lock().unwrap().len() > 300 },
    )
    .await;

    // 1. Killed and started again at once.
    let short = outage(&dir, &run.health, &monitor, Duration::ZERO).await;
    let before = handled.lock().unwrap().len();
    wait_until(Duration::from_secs(30), "records flowing again", || async {
        handled.lock().unwrap().len() > before + 300
    })
    .await;
    // 2. Down for longer than the session timeout: the coordinator's view
    // of the member expires while it is away.
    let long = outage(
        &dir,
        &run.health,
        &monitor,
        SESSION_TIMEOUT + Duration::from_secs(2),
    )
    .await;
    let before = handled.lock().unwrap().len();
    wait_until(Duration::from_secs(30), "records flowing again", || async {
        handled.lock().unwrap().len() > before + 300
    })
    .await;

    let acked = flow.finish().await;
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| acked.get(&p).and_then(|v| v.last()).map_or(0, |o| o + 1))
        .collect();
    let high = cluster.high_watermarks(&topic, PARTITIONS).await;
    assert_eq!(ends, high, "every record the broker kept was acknowledged");
    cluster
        .wait_committed_showing(&group, &topic, &high, Duration::from_secs(60), &())
        .await;
    let summary = run.stop().await;
    monitor.stop().await;
    let (samples, backwards) = sampler.finish();

    let handled = handled.lock().unwrap().clone();
    let lost: Vec<(i32, i64)> = acked
        .iter()
        .flat_map(|(p, offsets)| offsets.iter().map(|o| (*p, *o)))
        .filter(|k| !handled.contains_key(k))
        .collect();
    let duplicates: u32 = handled.values().map(|n| n - 1).sum();
    let total: usize = acked.values().map(Vec::len).sum();
    println!(
        "broker restart: {total} records acknowledged, {} lost, {duplicates} handled twice or more; \
         short outage: broker answered {:.1?} after the restart, consumer healthy after {:.1?}; \
         long outage: {:.1?}, {:.1?}; {samples} committed-offset samples, {} moves backwards; {summary:?}",
        lost.len(),
        short.0,
        short.1,
        long.0,
        long.1,
        backwards.len()
    );
    assert!(lost.is_empty(), "records never handled: {lost:?}");
    assert!(
        backwards.is_empty(),
        "committed offsets moved backwards: {backwards:?}"
    );
    // Reads fail while the broker is down (up to 2 s each) and are not
    // counted: one CI run read 47 times (2026-12-03) and failed a bound of
    // 50. The check is that sampling went on throughout, not a rate.
    assert!(
        samples >= 20,
        "the sampler read the offsets {samples} times"
    );
}
