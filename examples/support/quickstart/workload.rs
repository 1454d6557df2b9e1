//! What the quickstart consumes and when it stops: the demo producer (a
//! skewed, keyed workload with a few late events), the serve mode's
//! progress lines, the handler's counts, and the condition that ends the
//! run.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fresh_consumer::Record;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::args::Args;
use super::cluster::Target;

/// The hot key's share of the demo records, in percent.
const HOT_KEY_PERCENT: u64 = 60;
pub(super) const HOT_KEY: &str = "customer-0042";
/// Share of demo records stamped minutes in the past (late events), in percent.
const LATE_PERCENT: u64 = 2;
/// Demo mode gives up after this long, whatever happened.
const DEMO_DEADLINE: Duration = Duration::from_secs(45);

/// What the handler counted, and the conditions that end the run.
pub struct Tally {
    pub(super) handled: Vec<AtomicU64>,
    /// The partition the hot key was seen on (-1 until then).
    pub(super) hot_partition: AtomicI32,
    total: AtomicU64,
    target: Option<u64>,
    /// Notified when `target` records were handled.
    done: Notify,
    /// Notified when the run cannot complete (the demo producer failed).
    abort: Notify,
}

impl Tally {
    /// Counts for `partitions` partitions; the run ends after `target`
    /// records, if given.
    pub fn new(partitions: i32, target: Option<u64>) -> Self {
        Tally {
            handled: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            hot_partition: AtomicI32::new(-1),
            total: AtomicU64::new(0),
            target,
            done: Notify::new(),
            abort: Notify::new(),
        }
    }

    /// Counts a record the handler finished.
    pub fn handled(&self, record: &Record) {
        if record.key() == Some(HOT_KEY.as_bytes()) {
            self.hot_partition
                .store(record.partition(), Ordering::Relaxed);
        }
        if let Some(n) = self.handled.get(record.partition() as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        if self.target == Some(total) {
            self.done.notify_one();
        }
    }

    /// Records handled so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// Resolves on Ctrl-C, on SIGTERM, when the target count was handled, when
/// the run was aborted, or (in demo mode) at the safety deadline.
pub async fn stop_signal(tally: Arc<Tally>, demo: bool) {
    let deadline = async {
        if demo {
            tokio::time::sleep(DEMO_DEADLINE).await;
            eprintln!("demo deadline of {DEMO_DEADLINE:?} reached; stopping");
        } else {
            std::future::pending::<()>().await;
        }
    };
    let done = async {
        if tally.target == Some(0) {
            return;
        }
        tally.done.notified().await;
    };
    tokio::select! {
        () = done => println!("all {} records handled; stopping", tally.target.unwrap_or(0)),
        () = crate::cli::shutdown_signal() => println!("signal received; stopping"),
        () = tally.abort.notified() => eprintln!("aborted; stopping"),
        () = deadline => {}
    }
}

/// What runs beside the consumer: the demo producer, or (serving, or
/// reading a topic of the user's) a progress line per second.
pub struct Workload {
    producer: Option<JoinHandle<Result<u64, String>>>,
    progress: Option<JoinHandle<()>>,
}

impl Workload {
    /// Says what the run does and starts it: the demo producer (`records`
    /// records into `target`), or the progress lines.
    pub fn start(
        args: &Args,
        target: &Target,
        group: &str,
        records: u64,
        tally: &Arc<Tally>,
    ) -> Result<Workload, Box<dyn Error>> {
        let bootstrap = &target.bootstrap;
        let topic = &target.topic;
        if !args.demo() {
            if args.serve {
                // Lines for scripts (see .ci/run) and a command for people.
                println!("bootstrap={bootstrap}");
                println!("topic={topic}");
                println!(
                    "serving: produce with `kcat -P -b {bootstrap} -t {topic} -K:` (lines \
                     key:value); Ctrl-C to stop{}",
                    args.exit_after
                        .map(|n| format!(", or stops after {n} records"))
                        .unwrap_or_default()
                );
            } else {
                println!(
                    "reading topic {topic:?} from the start as group {group:?}; nothing is \
                     produced; Ctrl-C to stop{}",
                    args.exit_after
                        .map(|n| format!(", or stops after {n} records"))
                        .unwrap_or_default()
                );
            }
            let progress = tokio::spawn(progress(Arc::clone(tally)));
            return Ok(Workload {
                producer: None,
                progress: Some(progress),
            });
        }
        println!(
            "producing {records} records: key {HOT_KEY:?} carries {HOT_KEY_PERCENT}%, \
             {LATE_PERCENT}% are stamped minutes old"
        );
        let producer: FutureProducer = target.config().set("linger.ms", "5").create()?;
        let tally = Arc::clone(tally);
        let topic = topic.clone();
        let task = tokio::spawn(async move {
            let produced = produce_demo(producer, &topic, records).await;
            if produced.is_err() {
                // Nothing more will arrive: do not wait for the deadline.
                tally.abort.notify_one();
            }
            produced
        });
        Ok(Workload {
            producer: Some(task),
            progress: None,
        })
    }

    /// Stops the progress lines, or waits (up to 5 s) for the demo producer
    /// and says how it ended.
    pub async fn finish(self) {
        if let Some(task) = self.progress {
            task.abort();
        }
        if let Some(task) = self.producer {
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(Ok(produced))) => println!("produced {produced} records"),
                Ok(Ok(Err(e))) => eprintln!("producer: {e}"),
                Ok(Err(e)) => eprintln!("producer task: {e}"),
                Err(_) => eprintln!("producer still running at exit"),
            }
        }
    }
}

/// Serve mode: one line per second while records arrive.
async fn progress(tally: Arc<Tally>) {
    let mut last = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let total = tally.total.load(Ordering::Relaxed);
        if total != last {
            last = total;
            let per: Vec<String> = tally
                .handled
                .iter()
                .enumerate()
                .map(|(p, n)| format!("p{p}={}", n.load(Ordering::Relaxed)))
                .collect();
            println!("handled {total} records ({})", per.join(" "));
        }
    }
}

/// Demo workload: `n` keyed records, produced at a steady pace over about two
/// seconds while the consumer runs. Returns how many were acknowledged.
async fn produce_demo(producer: FutureProducer, topic: &str, n: u64) -> Result<u64, String> {
    let now_ms = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64
    };
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let batches = 20;
    let per_batch = n.div_ceil(batches).max(1);
    let mut pending = Vec::with_capacity(n as usize);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for i in 0..n {
        if i % per_batch == 0 {
            tick.tick().await;
        }
        let key = if rng.below(100) < HOT_KEY_PERCENT {
            HOT_KEY.to_owned()
        } else {
            format!("customer-{:04}", rng.below(500))
        };
        let payload = format!(
            r#"{{"order":{i},"customer":"{key}","amount_cents":{}}}"#,
            100 + rng.below(9_900)
        );
        let mut record = FutureRecord::to(topic).key(&key).payload(&payload);
        if rng.below(100) < LATE_PERCENT {
            // A late event: it happened 1 to 10 minutes ago.
            let age_ms = 60_000 + rng.below(540_000) as i64;
            record = record.timestamp(now_ms() - age_ms);
        }
        let delivery = producer
            .send_result(record)
            .map_err(|(e, _)| format!("enqueue: {e}"))?;
        pending.push(delivery);
    }
    let mut acked = 0;
    for delivery in pending {
        match delivery.await {
            Ok(Ok(_)) => acked += 1,
            Ok(Err((e, _))) => return Err(format!("delivery: {e}")),
            Err(_) => return Err("delivery canceled".into()),
        }
    }
    producer
        .flush(Duration::from_secs(5))
        .map_err(|e| format!("flush: {e}"))?;
    Ok(acked)
}

/// A tiny deterministic PRNG (xorshift64), so the demo needs no extra crate.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
