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

use fresh_consumer::{FreshConsumer, Record};

use super::check::{self, Event, Produced};
use super::child::{self, ChildArgs};
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
    /// `kill -9` the broker and start it again; on three nodes, the node
    /// that leads this partition of the source topic.
    Broker { partition: i32 },
    /// Restart the three nodes one after the other: SIGTERM (a controlled
    /// shutdown), start again on the same log dir, wait until every
    /// partition has its three replicas in sync, the next node.
    Rolling,
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
        // A generator of its own: the schedules of seeds from before
        // three nodes stay the same.
        let mut nodes = fastrand::Rng::with_seed(args.seed ^ 0x0de5);
        for f in [0.30, 0.65] {
            let partition = nodes.i32(0..args.partitions);
            plan.push((at(f), Action::Broker { partition }));
        }
        // Spread over the run: the first at 10 %.
        let n = args.rolling_restarts;
        for i in 0..n {
            plan.push((
                at(0.10 + 0.80 * f64::from(i) / f64::from(n)),
                Action::Rolling,
            ));
        }
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
/// offsets that moved backwards. Returns (samples, backwards moves, the
/// history: each partition's committed offset from the sample that first
/// read it).
fn sample_commits(
    bootstrap: String,
    group: String,
    tpl: TopicPartitionList,
    stop: Arc<AtomicBool>,
    latest: Arc<Mutex<HashMap<(String, i32), i64>>>,
) -> (usize, usize, check::Commits) {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("offset reader");
    let (mut samples, mut backwards) = (0, 0);
    let mut history = check::Commits::default();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(read) = reader.committed_offsets(tpl.clone(), Duration::from_secs(2)) {
            samples += 1;
            let at = now_ms();
            let mut latest = latest.lock().unwrap();
            for e in read.elements() {
                if let Offset::Offset(o) = e.offset() {
                    history.note(e.topic(), e.partition(), at, o);
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
    (samples, backwards, history)
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

async fn create_topics(
    bootstrap: &str,
    names: &[String],
    partitions: i32,
    replicas: i32,
) -> Result<(), BoxError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(replicas)))
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
    let out_topic = args.transactional.then(|| format!("{topic}.out"));
    names.extend(out_topic.clone());
    // Three nodes: three replicas (the cluster's min.insync.replicas is 2).
    let replicas = if args.nodes == 3 { 3 } else { 1 };
    create_topics(&args.bootstrap, &names, args.partitions, replicas).await?;
    let plan = schedule(&args);
    println!(
        "soak: seed {} ({} s, {} records/s, {} keys, {} partitions, {} node{}{}), topic {topic}, logs in {}",
        args.seed,
        args.secs,
        args.rate,
        args.keys,
        args.partitions,
        args.nodes,
        if args.nodes == 1 { "" } else { "s" },
        if args.transactional {
            ", transactional outputs"
        } else {
            ""
        },
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

    // The group monitor, from outside (a process of its own).
    let mut watcher = watch::Watcher::start(
        &args.bootstrap,
        &group,
        &topic,
        Duration::from_millis(WINDOW_MS as u64),
        &out,
    )?;

    // The consumers.
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut child_args = [
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
    .to_vec();
    if let Some(out) = &out_topic {
        child_args.extend(["--outputs".to_owned(), out.clone()]);
        // The settings transactional outputs refuse (a batch handler, key
        // order with more than one record in flight, unsplit partition
        // queues) fail here, before any child starts.
        validate_child_settings(&args.bootstrap, &group, &topic, out)?;
    }
    let mut consumers = Consumers {
        args: child_args,
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
    // The brokers' faults run one after the other on a thread of their
    // own (see `NodeFaults`).
    let restarts = Arc::new(Mutex::new(Vec::new()));
    if args.kafka_dir.is_some() {
        copy_ci_kafka(&out)?;
    }
    let mut node_faults = args.kafka_dir.clone().map(|dir| {
        NodeFaults::start(
            dir,
            args.nodes,
            topic.clone(),
            Arc::clone(&events),
            Arc::clone(&restarts),
        )
    });
    let mut switched: Option<usize> = None;
    // The consumer whose handler is slow, until when: no other fault picks
    // it meanwhile, or a kill a few seconds in would end the slow window
    // before any signal could show it (seed 1306793086305802401: killed 5 s
    // into its 30 s).
    let mut slow: Option<(usize, Instant)> = None;
    // Producing goes on until `--secs` passed and no broker fault is
    // queued or under way: every fault happens under traffic.
    let mut extended = false;
    while started.elapsed() < Duration::from_secs(args.secs)
        || node_faults.as_ref().is_some_and(NodeFaults::busy)
    {
        if !extended && started.elapsed() >= Duration::from_secs(args.secs) {
            extended = true;
            println!(
                "[{}] {} s passed; producing on until the broker faults under way end",
                now_ms(),
                args.secs
            );
        }
        consumers.tend()?;
        watcher.tend()?;
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
                Action::Broker { .. } | Action::Rolling => {
                    if let Some(n) = node_faults.as_mut() {
                        n.queue(action);
                    }
                }
            }
            let _ = at;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    producing.store(false, Ordering::Relaxed);
    let (produced, unacked) = producer.await?;
    if let Some(n) = node_faults.take() {
        let failures = tokio::task::spawn_blocking(move || n.finish()).await?;
        consumers.failures.extend(failures);
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
        watcher.tend()?;
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
    watcher.tend()?;
    let monitor_crashes = watcher.crashes.clone();
    let (readings, monitor_under_replicated) = watcher.stop().await;
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
    let (samples, backwards, commits) = sampler.join().map_err(|_| "the sampler panicked")?;
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
    let report = check::check(
        &produced,
        &successes,
        &events,
        &topic,
        window,
        args.transactional.then_some(&commits),
    );
    let outputs = match &out_topic {
        Some(t) => {
            let (b, t, n) = (args.bootstrap.clone(), t.clone(), args.partitions);
            match tokio::task::spawn_blocking(move || read_committed(&b, &t, n)).await? {
                Ok(read) => Some(check::check_outputs(&produced, &successes, &read)),
                Err(e) => {
                    consumers
                        .failures
                        .push(format!("transactional outputs: {e}"));
                    None
                }
            }
        }
        None => None,
    };
    let mut judgement = signals::judge(
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
    judgement.add_monitor_under_replicated(&monitor_under_replicated, WINDOW_MS);
    let mut failures = consumers.failures.clone();
    failures.extend(monitor_crashes);
    failures.extend(report.failures(backwards, dead_lettered));
    failures.extend(judgement.failures(WINDOW_MS));
    if let Some(o) = &outputs {
        failures.extend(o.failures());
    }
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
    if let Some(o) = &outputs {
        println!(
            "  transactional outputs (read_committed): {} outputs of {} inputs; handled inputs {}, without an output (lost) {}, with more than one output (duplicates) {}, outputs of inputs never handled {}, records with no output {}; {} poison records with outputs of two tier copies (tier writes are at-least-once)",
            o.outputs,
            o.inputs,
            o.handled_inputs,
            o.lost.len(),
            o.duplicates.len(),
            o.unknown.len(),
            o.records_without_output.len(),
            o.tier_copies
        );
    }
    for r in restarts.lock().unwrap().iter() {
        let secs = |ms: i64| ms as f64 / 1000.0;
        println!(
            "  {}: exited after {:.1} s, listed again {:.1} s later, every partition in sync {:.1} s after that ({:.1} s in all)",
            r.what,
            secs(r.exited_ms - r.t_ms),
            secs(r.listed_ms - r.exited_ms),
            secs(r.in_sync_ms - r.listed_ms),
            secs(r.in_sync_ms - r.t_ms)
        );
    }
    judgement.print(SETTLE_MS);
    judgement.print_nodes(WINDOW_MS);
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

/// Builds the children's consumer (`child::configure`) with a handler
/// that does nothing and `validate()`s it: transactional outputs refuse
/// some settings (a batch handler, key order with more than one record in
/// flight, `split_partition_queues(false)`).
fn validate_child_settings(
    bootstrap: &str,
    group: &str,
    topic: &str,
    out: &str,
) -> Result<(), BoxError> {
    let child = ChildArgs {
        bootstrap: bootstrap.to_owned(),
        group: group.to_owned(),
        topic: topic.to_owned(),
        log: std::path::PathBuf::new(),
        slow_secs: 0,
        session_ms: SESSION_MS,
        protocol: "classic".to_owned(),
        window: Duration::from_millis(WINDOW_MS as u64),
        outputs: Some(out.to_owned()),
        slot: 0,
    };
    let handler = |_: Record| async { Ok::<(), fresh_consumer::BoxError>(()) };
    child::configure(FreshConsumer::new(handler), &child)
        .validate()
        .map_err(|e| format!("the consumers' settings with transactional outputs: {e}").into())
}

/// Every output of `topic` a `read_committed` reader sees (up to the last
/// stable offset: once the consumers stopped, every transaction ended), as
/// its payload's text; read with partition EOF events, so that transaction
/// markers and aborted records (they take offsets but are not delivered)
/// do not make the read wait.
fn read_committed(bootstrap: &str, topic: &str, partitions: i32) -> Result<Vec<String>, BoxError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()?;
    // A consumer killed with a transaction open (one that did not stop
    // within 30 s of SIGTERM) leaves it open until the broker aborts it
    // (`transaction.timeout.ms`, 60 s): the last stable offset stays below
    // the high watermark meanwhile, and the reader's end would be short
    // of later committed outputs. Wait until the two meet.
    let uncommitted: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("isolation.level", "read_uncommitted")
        .create()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    for p in 0..partitions {
        loop {
            let stable = c.fetch_watermarks(topic, p, Duration::from_secs(5))?.1;
            let high = uncommitted
                .fetch_watermarks(topic, p, Duration::from_secs(5))?
                .1;
            if stable >= high {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "reading {topic}/{p}: the last stable offset {stable} stayed below the high watermark {high} for 120 s (a transaction left open)"
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    let mut at_end = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while at_end.len() < partitions as usize {
        if Instant::now() >= deadline {
            return Err(format!(
                "reading {topic}: {} of {partitions} partitions at their end within 120 s",
                at_end.len()
            )
            .into());
        }
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                use rdkafka::Message;
                out.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => return Err(format!("reading {topic}: {e}").into()),
            None => {}
        }
    }
    Ok(out)
}

/// `.ci/kafka`, and its Maven file.
const CI_KAFKA: [&str; 2] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/kafka"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/kafka.pom.xml"),
];

/// The copy of `.ci/kafka` the soak runs, taken at its start into the
/// logs' folder: bash reads a script as it runs it, so an edit of the
/// checkout's script while a node restart waits in it would make the rest
/// of that call run garbled (seen: `line 779: n: command not found`).
static SCRIPT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn copy_ci_kafka(out: &Path) -> Result<(), BoxError> {
    let dir = out.join("ci");
    std::fs::create_dir_all(&dir)?;
    for f in CI_KAFKA {
        let name = Path::new(f).file_name().ok_or("a file name")?;
        std::fs::copy(f, dir.join(name))?;
    }
    let _ = SCRIPT.set(dir.join("kafka"));
    Ok(())
}

/// Runs `.ci/kafka ARGS` (its messages go to this process's stderr);
/// returns what it printed on stdout.
fn ci_kafka(args: &[&str]) -> Result<String, BoxError> {
    let script = SCRIPT.get().ok_or(".ci/kafka not copied")?;
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!(".ci/kafka {}: {}", args.join(" "), out.status).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// One node restart of a broker fault, for the report: when it began (the
/// kill or the SIGTERM), when the node had exited, when the cluster listed
/// it again, and when every partition had its replicas in sync again (the
/// event's end).
#[derive(Clone, Debug)]
pub struct NodeRestart {
    pub what: String,
    pub t_ms: i64,
    pub exited_ms: i64,
    pub listed_ms: i64,
    pub in_sync_ms: i64,
}

/// The brokers' faults, one after the other on a thread of their own: two
/// at once on three nodes would take two nodes down, which loses the
/// KRaft quorum and `min.insync.replicas` (an outage, not the fault that
/// was meant). A fault due while another runs waits for it.
struct NodeFaults {
    tx: std::sync::mpsc::Sender<Action>,
    pending: Arc<AtomicUsize>,
    worker: std::thread::JoinHandle<Vec<String>>,
}

impl NodeFaults {
    fn start(
        dir: std::path::PathBuf,
        nodes: u32,
        topic: String,
        events: Arc<Mutex<Vec<Event>>>,
        restarts: Arc<Mutex<Vec<NodeRestart>>>,
    ) -> NodeFaults {
        let (tx, rx) = std::sync::mpsc::channel::<Action>();
        let pending = Arc::new(AtomicUsize::new(0));
        let left = Arc::clone(&pending);
        let worker = std::thread::spawn(move || {
            let mut failures = Vec::new();
            for action in rx {
                // After a failed fault the cluster may be short of a node:
                // a further fault could be an outage; skip them.
                if failures.is_empty() {
                    let done = match (action, nodes) {
                        (Action::Broker { .. }, 1) => broker_fault(&dir, &events),
                        (Action::Broker { partition }, _) => {
                            node_kill(&dir, &topic, partition, &events, &restarts)
                        }
                        (_, _) => rolling_restart(&dir, &events, &restarts),
                    };
                    if let Err(e) = done {
                        println!("[{}] broker fault {action:?} failed: {e}", now_ms());
                        failures.push(format!("broker fault {action:?}: {e}"));
                    }
                } else {
                    failures.push(format!(
                        "broker fault {action:?} skipped after a failed one"
                    ));
                }
                left.fetch_sub(1, Ordering::Relaxed);
            }
            failures
        });
        NodeFaults {
            tx,
            pending,
            worker,
        }
    }

    fn queue(&mut self, action: Action) {
        if self.busy() {
            println!(
                "[{}] {action:?} waits for the broker fault under way",
                now_ms()
            );
        }
        self.pending.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(action);
    }

    /// A fault queued or under way.
    fn busy(&self) -> bool {
        self.pending.load(Ordering::Relaxed) > 0
    }

    /// Waits for the faults queued; their failures.
    fn finish(self) -> Vec<String> {
        drop(self.tx);
        self.worker
            .join()
            .unwrap_or_else(|_| vec!["the broker fault thread panicked".to_owned()])
    }
}

/// Kills the broker, starts it again, and notes the outage.
fn broker_fault(dir: &Path, events: &Mutex<Vec<Event>>) -> Result<(), BoxError> {
    let dir = dir.to_str().ok_or("the kafka dir is not UTF-8")?;
    let t = now_ms();
    println!("[{t}] broker kill -9");
    ci_kafka(&["kill", dir])?;
    // The outage's length (a fault, not a wait for a condition).
    std::thread::sleep(Duration::from_secs(3));
    ci_kafka(&["resume", dir])?;
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

/// Three nodes: kills the node that leads `partition` of the source topic,
/// starts it again after 3 s (the brokers' session timeout: it is fenced
/// and its leaderships moved by then), waits until every partition has
/// its three replicas in sync again.
fn node_kill(
    dir: &Path,
    topic: &str,
    partition: i32,
    events: &Mutex<Vec<Event>>,
    restarts: &Mutex<Vec<NodeRestart>>,
) -> Result<(), BoxError> {
    let dir = dir.to_str().ok_or("the kafka dir is not UTF-8")?;
    let node = ci_kafka(&["leader", dir, topic, &partition.to_string()])?;
    let t = now_ms();
    println!("[{t}] node {node} (the leader of {topic}/{partition}) kill -9");
    ci_kafka(&["kill", dir, &node])?;
    let exited = now_ms();
    // The crash's length (a fault, not a wait for a condition).
    std::thread::sleep(Duration::from_secs(3));
    ci_kafka(&["resume", dir, &node])?;
    let listed = now_ms();
    ci_kafka(&["wait-isr", dir])?;
    let in_sync = now_ms();
    let what = format!("node {node} kill -9 and restart");
    println!(
        "[{in_sync}] node {node} listed again {:.1} s after the kill, every partition in sync {:.1} s after it",
        (listed - t) as f64 / 1000.0,
        (in_sync - t) as f64 / 1000.0
    );
    restarts.lock().unwrap().push(NodeRestart {
        what: what.clone(),
        t_ms: t,
        exited_ms: exited,
        listed_ms: listed,
        in_sync_ms: in_sync,
    });
    events.lock().unwrap().push(Event {
        t_ms: t,
        until_ms: in_sync,
        what,
    });
    Ok(())
}

/// Three nodes, one after the other, as an upgrade or a config change
/// does: SIGTERM (a controlled shutdown: its leaderships move first),
/// wait until it exited, start it again on its log dir, wait until the
/// cluster lists it and every partition has its three replicas in sync.
/// Each node's restart is one event (`node N rolling restart`).
fn rolling_restart(
    dir: &Path,
    events: &Mutex<Vec<Event>>,
    restarts: &Mutex<Vec<NodeRestart>>,
) -> Result<(), BoxError> {
    let dir = dir.to_str().ok_or("the kafka dir is not UTF-8")?;
    let begun = now_ms();
    println!("[{begun}] rolling restart of nodes 1, 2, 3");
    for node in ["1", "2", "3"] {
        let t = now_ms();
        println!("[{t}] node {node} SIGTERM (rolling restart)");
        ci_kafka(&["stop-node", dir, node])?;
        let exited = now_ms();
        ci_kafka(&["resume", dir, node])?;
        let listed = now_ms();
        ci_kafka(&["wait-isr", dir])?;
        let in_sync = now_ms();
        println!(
            "[{in_sync}] node {node} restarted: exited {:.1} s after SIGTERM, listed {:.1} s after its start, every partition in sync {:.1} s later ({:.1} s in all)",
            (exited - t) as f64 / 1000.0,
            (listed - exited) as f64 / 1000.0,
            (in_sync - listed) as f64 / 1000.0,
            (in_sync - t) as f64 / 1000.0
        );
        let what = format!("node {node} rolling restart");
        restarts.lock().unwrap().push(NodeRestart {
            what: what.clone(),
            t_ms: t,
            exited_ms: exited,
            listed_ms: listed,
            in_sync_ms: in_sync,
        });
        events.lock().unwrap().push(Event {
            t_ms: t,
            until_ms: in_sync,
            what,
        });
    }
    println!(
        "[{}] rolling restart done in {:.1} s",
        now_ms(),
        (now_ms() - begun) as f64 / 1000.0
    );
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
        "  faults: {} SIGKILL, {} SIGTERM restarts, {} group.protocol switches, {} broker restarts, {} node kills, {} node restarts in rolling restarts, {} slow handlers, {} collector outages",
        count("SIGKILL"),
        count("SIGTERM"),
        count("group.protocol"),
        count("broker"),
        count("kill -9 and restart") - count("broker"),
        count("rolling restart"),
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
