//! The soak's parent: topics, the producer, the consumer processes, the
//! fault schedule, the committed-offset sampler, the drain and the report.

use std::collections::HashMap;
use std::error::Error;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use super::check::{self, Event, Produced};
use super::procs::{Collector, Consumers, free_port};
use super::signals::{self, Rules};
use super::watch;
use super::{Args, TIERS, now_ms};

const CONSUMERS: usize = 3;
/// The consumers' `session.timeout.ms`: the broker's minimum, so a killed
/// member leaves the group soon.
const SESSION_MS: u64 = 6_000;
/// The library's default `commit_interval`, which bounds the work a killed
/// consumer did not commit.
const COMMIT_INTERVAL_MS: i64 = 1_000;
/// The evaluation window of the signals: the members' `stall_after`,
/// `no_success_after` and `lag_growth_window`, the monitor's `stall_after`
/// and lag threshold. A fault must show within two of them.
const WINDOW_MS: i64 = 10_000;
/// How long after a fault's end its effects may last (a rebalance, the
/// catch-up).
const SETTLE_MS: i64 = 30_000;
/// A consumer's RSS at its end, net of the freed memory the allocator
/// keeps (`check::net_rss_after_warmup`), must be within
/// `RSS_GROWTH_PERCENT` of the same figure this long after its start
/// (judged for incarnations that lived twice as long).
const RSS_WARMUP_MS: i64 = 120_000;
const RSS_GROWTH_PERCENT: f64 = 10.0;
/// How long after the last record the group may take to drain.
const DRAIN: Duration = Duration::from_secs(240);

type BoxError = Box<dyn Error + Send + Sync>;

/// What the schedule does.
#[derive(Clone, Copy, Debug)]
enum Action {
    /// SIGKILL a random running consumer; start it again after the delay.
    Kill { restart_after: Duration },
    /// SIGTERM a random running consumer and start it again at once.
    Restart,
    /// `kill -9` the broker and start it again.
    Broker,
    /// Make a random running consumer's handler slow.
    Slow,
    /// Stop the collector; start it again after `--collector-down-secs`.
    Collector,
    /// Restart a consumer gracefully with this `group.protocol`: the first
    /// switch picks a random member and makes it a KIP-848 member of the
    /// classic group (Kafka upgrades the group online); the second puts
    /// the same member back (the group downgrades).
    Protocol(&'static str),
}

/// The faults and their times, drawn from the seed.
fn schedule(args: &Args) -> Vec<(Duration, Action)> {
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let secs = args.secs as f64;
    let at = |f: f64| Duration::from_secs_f64(secs * f);
    let mut plan = vec![
        (at(0.38), Action::Protocol("consumer")),
        (at(0.45), Action::Restart),
        (at(0.52), Action::Protocol("classic")),
        (at(0.80), Action::Slow),
    ];
    if args.rotel.is_some() {
        plan.push((at(0.55), Action::Collector));
    }
    if args.kafka_dir.is_some() {
        plan.push((at(0.30), Action::Broker));
        plan.push((at(0.65), Action::Broker));
    }
    let (lo, hi) = args.kill_every;
    let mut t = rng.u64(lo..=hi);
    while (t as f64) < secs * 0.9 {
        let restart_after = Duration::from_secs(rng.u64(5..=20));
        plan.push((Duration::from_secs(t), Action::Kill { restart_after }));
        t += rng.u64(lo..=hi);
    }
    plan.sort_by_key(|(t, _)| *t);
    plan
}

/// Every partition the group reads: the source's and its tiers'.
fn group_partitions(topic: &str, partitions: i32) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for t in
        std::iter::once(topic.to_owned()).chain(TIERS.iter().map(|(_, s)| format!("{topic}{s}")))
    {
        for p in 0..partitions {
            tpl.add_partition(&t, p);
        }
    }
    tpl
}

/// Reads the group's committed offsets every 100 ms until `stop`; counts
/// offsets that moved backwards. Returns (samples, backwards moves).
fn sample_commits(
    bootstrap: String,
    group: String,
    tpl: TopicPartitionList,
    stop: Arc<AtomicBool>,
    latest: Arc<Mutex<HashMap<(String, i32), i64>>>,
) -> (usize, usize) {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("offset reader");
    let (mut samples, mut backwards) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        if let Ok(read) = reader.committed_offsets(tpl.clone(), Duration::from_secs(2)) {
            samples += 1;
            let mut latest = latest.lock().unwrap();
            for e in read.elements() {
                if let Offset::Offset(o) = e.offset() {
                    let last = latest
                        .entry((e.topic().to_owned(), e.partition()))
                        .or_insert(o);
                    if o < *last {
                        println!(
                            "[{}] committed offset of {}/{} moved back from {last} to {o}",
                            now_ms(),
                            e.topic(),
                            e.partition()
                        );
                        backwards += 1;
                    }
                    *last = (*last).max(o);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (samples, backwards)
}

/// The log-end offsets of every partition in `tpl`.
fn log_ends(bootstrap: &str, tpl: &TopicPartitionList) -> Option<HashMap<(String, i32), i64>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .ok()?;
    tpl.elements()
        .iter()
        .map(|e| {
            let (_, high) = c
                .fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(5))
                .ok()?;
            Some(((e.topic().to_owned(), e.partition()), high))
        })
        .collect()
}

async fn create_topics(bootstrap: &str, names: &[String], partitions: i32) -> Result<(), BoxError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1)))
        .collect();
    for r in admin.create_topics(&topics, &AdminOptions::new()).await? {
        r.map_err(|(t, e)| format!("creating {t}: {e}"))?;
    }
    Ok(())
}

/// The whole soak; `Ok(true)` when every check passed.
pub async fn soak(args: Args) -> Result<bool, BoxError> {
    let stamp = now_ms();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("fresh-consumer-soak-{stamp}")));
    std::fs::create_dir_all(&out)?;
    // Two soaks writing into one folder mix their logs (the same file
    // names per consumer slot and incarnation), and the checker would judge
    // the mixture: refuse a folder that already holds files.
    if std::fs::read_dir(&out)?.next().is_some() {
        return Err(format!(
            "--out {}: the folder is not empty (another run's logs would mix with this one's)",
            out.display()
        )
        .into());
    }
    let topic = format!("soak-{stamp}");
    let group = format!("soak-{stamp}");
    let dlt = format!("{topic}.dlt");
    let mut names = vec![topic.clone(), dlt.clone()];
    names.extend(TIERS.iter().map(|(_, s)| format!("{topic}{s}")));
    create_topics(&args.bootstrap, &names, args.partitions).await?;
    let plan = schedule(&args);
    println!(
        "soak: seed {} ({} s, {} records/s, {} keys, {} partitions), topic {topic}, logs in {}",
        args.seed,
        args.secs,
        args.rate,
        args.keys,
        args.partitions,
        out.display()
    );
    for (t, a) in &plan {
        println!("  at {:>5.1} s: {a:?}", t.as_secs_f64());
    }

    // The sampler of committed offsets.
    let tpl = group_partitions(&topic, args.partitions);
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let latest = Arc::new(Mutex::new(HashMap::new()));
    let sampler = {
        let (b, g, t, s, l) = (
            args.bootstrap.clone(),
            group.clone(),
            tpl.clone(),
            Arc::clone(&stop_sampler),
            Arc::clone(&latest),
        );
        std::thread::spawn(move || sample_commits(b, g, t, s, l))
    };

    // The collector.
    let mut collector = match &args.rotel {
        Some(rotel) => {
            let mut c = Collector {
                rotel: rotel.clone(),
                out: out.clone(),
                grpc_port: free_port()?,
                http_port: free_port()?,
                child: None,
                logs: Vec::new(),
            };
            c.start().await?;
            Some(c)
        }
        None => None,
    };
    let mut collector_back_at: Option<Instant> = None;
    let env = match &collector {
        Some(c) => vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                format!("http://127.0.0.1:{}", c.grpc_port),
            ),
            ("OTEL_METRIC_EXPORT_INTERVAL".to_owned(), "2000".to_owned()),
            ("OTEL_SERVICE_NAME".to_owned(), "soak-consumer".to_owned()),
        ],
        None => Vec::new(),
    };

    // The group monitor, from outside.
    let (stop_watch, watch_stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn(watch::watch(
        args.bootstrap.clone(),
        group.clone(),
        topic.clone(),
        Duration::from_millis(WINDOW_MS as u64),
        async {
            let _ = watch_stopped.await;
        },
    ));

    // The consumers.
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut consumers = Consumers {
        args: [
            "--bootstrap",
            &args.bootstrap,
            "--group",
            &group,
            "--topic",
            &topic,
            "--slow-secs",
            &args.slow_secs.to_string(),
            "--session-ms",
            &SESSION_MS.to_string(),
            "--window-ms",
            &WINDOW_MS.to_string(),
        ]
        .map(str::to_owned)
        .to_vec(),
        protocol: vec!["classic"; CONSUMERS],
        env,
        out: out.clone(),
        slots: (0..CONSUMERS).map(|_| None).collect(),
        logs: Vec::new(),
        restart_at: vec![None; CONSUMERS],
        events: Arc::clone(&events),
        failures: Vec::new(),
    };
    for slot in 0..CONSUMERS {
        consumers.start(slot)?;
    }

    // The producer.
    let producing = Arc::new(AtomicBool::new(true));
    let refused = Arc::new(AtomicUsize::new(0));
    let producer = tokio::spawn(produce(
        args.bootstrap.clone(),
        topic.clone(),
        args.rate,
        args.keys,
        Arc::clone(&producing),
        Arc::clone(&refused),
    ));

    // The faults.
    let started = Instant::now();
    let mut rng = fastrand::Rng::with_seed(args.seed ^ 0x5eed);
    let mut plan = plan.into_iter().peekable();
    let mut broker_faults = Vec::new();
    let mut switched: Option<usize> = None;
    // The consumer whose handler is slow, until when: no other fault picks
    // it meanwhile, or a kill a few seconds in would end the slow window
    // before any signal could show it (seed 1306793086305802401: killed 5 s
    // into its 30 s).
    let mut slow: Option<(usize, Instant)> = None;
    while started.elapsed() < Duration::from_secs(args.secs) {
        consumers.tend()?;
        if let Some(c) = collector.as_mut()
            && collector_back_at.is_some_and(|t| t <= Instant::now())
        {
            collector_back_at = None;
            c.start().await?;
            consumers.event("collector started again".into(), 0);
        }
        while let Some((at, action)) = plan.next_if(|(at, _)| *at <= started.elapsed()) {
            let busy = slow
                .filter(|(_, until)| *until > Instant::now())
                .map(|(s, _)| s);
            let running: Vec<usize> = consumers
                .running()
                .into_iter()
                .filter(|s| Some(*s) != busy)
                .collect();
            let pick = |rng: &mut fastrand::Rng| {
                (!running.is_empty()).then(|| running[rng.usize(..running.len())])
            };
            match action {
                Action::Kill { restart_after } => {
                    if let Some(s) = pick(&mut rng) {
                        consumers.kill(s, restart_after);
                    }
                }
                Action::Restart => {
                    if let Some(s) = pick(&mut rng) {
                        consumers.event(format!("consumer {s} SIGTERM (graceful restart)"), 0);
                        consumers.term(s).await;
                        consumers.start(s)?;
                    }
                }
                Action::Slow => {
                    if let Some(s) = pick(&mut rng) {
                        slow = Some((s, Instant::now() + Duration::from_secs(args.slow_secs)));
                        consumers.signal(s, "-USR1");
                        consumers.event(
                            format!("consumer {s} slow (1 s per record)"),
                            args.slow_secs as i64 * 1000,
                        );
                    }
                }
                Action::Collector => {
                    if let Some(c) = collector.as_mut() {
                        c.stop();
                        let down = Duration::from_secs(args.collector_down_secs);
                        consumers.event(
                            format!("collector stopped for {down:?}"),
                            down.as_millis() as i64,
                        );
                        collector_back_at = Some(Instant::now() + down);
                    }
                }
                Action::Protocol(to) => {
                    let slot = match (to, switched) {
                        ("consumer", _) => pick(&mut rng),
                        (_, s) => s,
                    };
                    if let Some(s) = slot {
                        switched = Some(s);
                        consumers.protocol[s] = to;
                        consumers.event(
                            format!("consumer {s} to group.protocol={to} (graceful restart)"),
                            0,
                        );
                        // A member killed meanwhile comes back with it.
                        if consumers.slots[s].is_some() {
                            consumers.term(s).await;
                            consumers.start(s)?;
                        }
                    }
                }
                Action::Broker => {
                    let dir = args.kafka_dir.clone().expect("scheduled with a kafka dir");
                    let events = Arc::clone(&events);
                    broker_faults.push(tokio::task::spawn_blocking(move || {
                        broker_fault(&dir, &events)
                    }));
                }
            }
            let _ = at;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    producing.store(false, Ordering::Relaxed);
    let (produced, unacked) = producer.await?;
    for f in broker_faults {
        if let Err(e) = f.await? {
            consumers.failures.push(format!("broker restart: {e}"));
        }
    }
    println!(
        "[{}] producer stopped: {} acknowledged, {} not acknowledged, {} refused",
        now_ms(),
        produced.len(),
        unacked,
        refused.load(Ordering::Relaxed)
    );

    // Drain: every slot up, until the committed offsets reach the log ends.
    let drain_started = Instant::now();
    let drained = loop {
        for slot in 0..CONSUMERS {
            if consumers.slots[slot].is_none() {
                consumers.restart_at[slot] = Some(Instant::now());
            }
        }
        consumers.tend()?;
        if let Some(ends) = log_ends(&args.bootstrap, &tpl) {
            let committed = latest.lock().unwrap().clone();
            let behind: i64 = ends
                .iter()
                .map(|(tp, end)| end - committed.get(tp).copied().unwrap_or(0))
                .filter(|d| *d > 0)
                .sum();
            if behind == 0 {
                break true;
            }
            if drain_started.elapsed() > DRAIN {
                consumers.failures.push(format!(
                    "the group did not drain within {DRAIN:?}: {behind} records behind"
                ));
                break false;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let drained_at = now_ms();
    println!(
        "[{}] drained: {drained} after {:.1?}",
        now_ms(),
        drain_started.elapsed()
    );
    for slot in 0..CONSUMERS {
        consumers.term(slot).await;
    }
    if let Some(c) = collector.as_mut() {
        if collector_back_at.is_some() {
            c.start().await?;
        }
        // The consumers flushed their last interval as they stopped.
        c.stop();
        let exports = c.exports();
        println!(
            "[{}] collector: exports received per run {exports:?}",
            now_ms()
        );
        if exports.len() > 1 && exports.last() == Some(&0) {
            consumers
                .failures
                .push("no metrics reached the collector after it came back".into());
        }
        if exports.len() > 1 {
            let dropped = c.dropped_points_reported();
            println!(
                "[{}] collector: after the outage an exporter reported up to {dropped} data points it could not export",
                now_ms()
            );
            if dropped == 0 {
                consumers.failures.push(
                    "the exporters' count of data points dropped during the outage did not reach the collector"
                        .into(),
                );
            }
        }
    }
    let _ = stop_watch.send(());
    let readings = watcher.await?;
    std::fs::write(
        out.join("monitor.log"),
        readings
            .iter()
            .map(|(t, r, m)| match m {
                Some(m) => format!("{t} {r} {m}\n"),
                None => format!("{t} {r} -\n"),
            })
            .collect::<String>(),
    )?;
    stop_sampler.store(true, Ordering::Relaxed);
    let (samples, backwards) = sampler.join().map_err(|_| "the sampler panicked")?;
    let dead_lettered: i64 = log_ends(&args.bootstrap, &{
        let mut t = TopicPartitionList::new();
        for p in 0..args.partitions {
            t.add_partition(&dlt, p);
        }
        t
    })
    .map(|m| m.values().sum())
    .unwrap_or(-1);

    // The checker.
    let mut successes = Vec::new();
    let mut extras = Vec::new();
    for (i, log) in consumers.logs.iter().enumerate() {
        let (ok, ex) = check::read_log(log, i);
        successes.extend(ok);
        extras.push(ex);
    }
    let mut events = events.lock().unwrap().clone();
    let faults = events.clone();
    events.extend(extras.iter().flat_map(|e| e.rebalances.iter().cloned()));
    let window = COMMIT_INTERVAL_MS + 2_000;
    let report = check::check(&produced, &successes, &events, &topic, window);
    let judgement = signals::judge(
        &faults,
        &extras,
        &readings,
        &Rules {
            settle_ms: SETTLE_MS,
            members: CONSUMERS as u32,
            end_ms: drained_at,
            dead_visible_ms: SESSION_MS as i64 + 2 * watch::INTERVAL.as_millis() as i64,
            window_ms: WINDOW_MS,
        },
    );
    let mut failures = consumers.failures.clone();
    failures.extend(report.failures(backwards, dead_lettered));
    failures.extend(judgement.failures(WINDOW_MS));
    for (i, warm, end, _) in check::net_rss_after_warmup(&extras, RSS_WARMUP_MS) {
        if rss_growth(warm, end) > RSS_GROWTH_PERCENT {
            failures.push(format!(
                "consumer incarnation {i}: RSS net of the allocator's free lists grew {:.1} % after warm-up ({warm} kB to {end} kB)",
                rss_growth(warm, end)
            ));
        }
    }
    print_report(
        &args,
        &report,
        &faults,
        &extras,
        samples,
        backwards,
        dead_lettered,
        &out,
    );
    println!(
        "  rebalances seen by the members: {}",
        extras.iter().map(|e| e.rebalances.len()).sum::<usize>()
    );
    judgement.print(SETTLE_MS);
    for f in &failures {
        println!("FAILED: {f}");
    }
    println!(
        "soak: {} ({} checks failed); seed {}",
        if failures.is_empty() {
            "passed"
        } else {
            "FAILED"
        },
        failures.len(),
        args.seed
    );
    Ok(failures.is_empty())
}

/// Kills the broker, starts it again, and notes the outage.
fn broker_fault(dir: &Path, events: &Mutex<Vec<Event>>) -> Result<(), BoxError> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/kafka");
    let t = now_ms();
    println!("[{t}] broker kill -9");
    let status = Command::new("bash")
        .arg(script)
        .arg("kill")
        .arg(dir)
        .status()?;
    if !status.success() {
        return Err(format!(".ci/kafka kill: {status}").into());
    }
    std::thread::sleep(Duration::from_secs(3));
    let status = Command::new("bash")
        .arg(script)
        .arg("resume")
        .arg(dir)
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!(".ci/kafka resume: {status}").into());
    }
    let until = now_ms();
    println!(
        "[{until}] broker answers again ({:.1} s down)",
        (until - t) as f64 / 1000.0
    );
    events.lock().unwrap().push(Event {
        t_ms: t,
        until_ms: until,
        what: "broker kill -9 and restart".into(),
    });
    Ok(())
}

/// Sends `rate` records/s until `producing` is cleared; returns the
/// acknowledged records and the count of records whose delivery failed.
async fn produce(
    bootstrap: String,
    topic: String,
    rate: u64,
    keys: u64,
    producing: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
) -> (Vec<Produced>, usize) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "300000")
        .create()
        .expect("producer");
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<(String, u64, rdkafka::producer::DeliveryFuture)>();
    let acks = tokio::spawn(async move {
        let (mut produced, mut failed) = (Vec::new(), 0);
        while let Some((key, seq, delivery)) = rx.recv().await {
            match delivery.await {
                Ok(Ok(d)) => produced.push(Produced {
                    key,
                    seq,
                    partition: d.partition,
                    offset: d.offset,
                }),
                _ => failed += 1,
            }
        }
        (produced, failed)
    });
    let mut seqs = vec![0u64; keys as usize];
    let mut next = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let started = Instant::now();
    let mut sent = 0u64;
    while producing.load(Ordering::Relaxed) {
        tick.tick().await;
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due {
            let k = (next % keys) as usize;
            next += 1;
            sent += 1;
            let key = format!("k-{k}");
            let seq = seqs[k];
            let payload = format!("{key} {seq}");
            let record = FutureRecord::to(&topic)
                .key(&key)
                .payload(&payload)
                .timestamp(now_ms());
            match producer.send_result(record) {
                Ok(delivery) => {
                    seqs[k] += 1;
                    let _ = tx.send((key, seq, delivery));
                }
                Err(_) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    drop(tx);
    acks.await.expect("acks task")
}

#[allow(clippy::too_many_arguments)]
fn print_report(
    args: &Args,
    r: &check::Report,
    events: &[Event],
    extras: &[check::LogExtras],
    samples: usize,
    backwards: usize,
    dead_lettered: i64,
    out: &Path,
) {
    println!(
        "\nsoak report (seed {}, {} s, logs in {})",
        args.seed,
        args.secs,
        out.display()
    );
    println!(
        "  records produced (acknowledged): {} ({} poison)",
        r.produced, r.poison
    );
    println!("  successes logged: {}", r.handled);
    println!("  lost: {}", r.lost.len());
    println!(
        "  duplicates: {} ({} explained by a fault, {} not)",
        r.duplicates,
        r.duplicates_explained,
        r.unexplained.len()
    );
    for (cause, n) in &r.explained_by {
        println!("    {n} after: {cause}");
    }
    println!("  keys out of order: {}", r.order_violations.len());
    println!(
        "  poison records not succeeding in the second tier: {}",
        r.poison_not_from_tier_2
    );
    println!("  dead-lettered: {dead_lettered}");
    println!("  committed offsets sampled {samples} times; moved backwards: {backwards}");
    let count = |w: &str| events.iter().filter(|e| e.what.contains(w)).count();
    println!(
        "  faults: {} SIGKILL, {} SIGTERM restarts, {} group.protocol switches, {} broker restarts, {} slow handlers, {} collector outages",
        count("SIGKILL"),
        count("SIGTERM"),
        count("group.protocol"),
        count("broker"),
        count("slow"),
        count("collector stopped")
    );
    let rss = check::rss_after_warmup(extras, RSS_WARMUP_MS);
    if rss.is_empty() {
        println!(
            "  RSS: not judged (no consumer lived {} s)",
            2 * RSS_WARMUP_MS / 1000
        );
    }
    let heap = check::heap_after_warmup(extras, RSS_WARMUP_MS);
    let net = check::net_rss_after_warmup(extras, RSS_WARMUP_MS);
    for (i, warm, end, age) in rss {
        let heap = heap
            .iter()
            .find(|h| h.0 == i)
            .map(|&(_, hw, he, _)| {
                let free = extras[i].heap_free.last().map_or(0, |f| f.1);
                format!(
                    "; C heap in use {hw} kB to {he} kB ({:+.1} %), {free} kB freed and kept by the allocator at the end",
                    rss_growth(hw, he)
                )
            })
            .unwrap_or_default();
        let net = net
            .iter()
            .find(|n| n.0 == i)
            .map(|&(_, nw, ne, _)| {
                format!(
                    "; net of the free lists {nw} kB to {ne} kB ({:+.1} %, judged)",
                    rss_growth(nw, ne)
                )
            })
            .unwrap_or_default();
        println!(
            "  RSS of consumer incarnation {i} ({:.0} s): {warm} kB after {} s, {end} kB at its end ({:+.1} %){net}{heap}",
            age as f64 / 1000.0,
            RSS_WARMUP_MS / 1000,
            rss_growth(warm, end)
        );
    }
}

/// Percent growth from `warm` to `end`.
fn rss_growth(warm: u64, end: u64) -> f64 {
    (end as f64 - warm as f64) * 100.0 / warm.max(1) as f64
}
