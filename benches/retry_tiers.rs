//! Retry topics (issue 14): what a poison record costs the records behind
//! it on its partition, with a delay tier against the block policy.
//!
//!     cargo bench --bench retry_tiers
//!     BENCH_TIERS_RECORDS=5000 BENCH_TIERS_HOLD_MS=3000 BENCH_TIERS_ROUNDS=3 cargo bench --bench retry_tiers
//!     cargo bench --bench retry_tiers -- --test     # one round, as a smoke test
//!
//! Latest results, with the date, machine and commit: benches/README.md
//! (from the summary this bench prints at the end).
//!
//! Each run produces N records (100 B, `BENCH_TIERS_RECORDS`, default
//! 5,000) to a new one-partition topic on the in-process mock broker. The
//! handler is a no-op except for the first record (offset 0, the poison
//! record), which fails until `BENCH_TIERS_HOLD_MS` (default 3,000 ms) have
//! passed since its first attempt. Two policies, each run in every round
//! (`BENCH_TIERS_ROUNDS`, default 3; the order alternates per round):
//! - `tiers`: `OnExhausted::RetryTopics` with one tier of the hold's length;
//!   the poison record is written to the tier on its first failure, the
//!   partition goes on, and the record succeeds from the tier at its due
//!   time;
//! - `block`: `OnExhausted::Block` (one attempt, then retried at a backoff
//!   of 10 ms doubling to 100 ms): the partition waits until the poison
//!   record succeeds;
//! - `clean`: no poison record (the first record succeeds at once), the
//!   floor: what the same N records take without one.
//!
//! Times count from the poison record's first attempt (group join is not
//! in them):
//! - `behind`: until the N - 1 records behind the poison record were all
//!   handled;
//! - `committed`: until the source partition's committed offset (read by a
//!   separate client every 5 ms) reached N (the consumer commits every
//!   100 ms).
//!
//! The ratio block / tiers of each is taken per round, and tiers / clean
//! for `committed` (what the tier write costs the partition); the summary
//! gives the medians. Due-time precision: the tier attempt's wall-clock start
//! minus the due time the library wrote in the tier record's
//! `fresh_consumer.retry.due` header (write time + delay); it is never
//! negative (a negative value is reported as a violation).
//!
//! Every consumer sets `fetch.queue.backoff.ms=10`, `fetch.wait.max.ms=10`
//! and `session.timeout.ms=6000` (see `support::CONSUMER_PROPS`).

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fresh_consumer::failure::dead_letter::RETRY_DUE;
use fresh_consumer::{
    BoxError, OnExhausted, Record,
    failure::{RetryPolicy, RetryTopics},
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Notify;

use support::{MockBroker, env_or, median, min_max, unique};

const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Tiers,
    Block,
    /// No poison record: the floor both are compared with.
    Clean,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Tiers => "tiers",
            Policy::Block => "block",
            Policy::Clean => "clean",
        }
    }
}

/// What one run measured.
#[derive(Debug)]
struct Measured {
    behind: Duration,
    committed: Duration,
    /// Tiers only: the tier attempt's start minus its due time, ms.
    lateness_ms: Option<i64>,
}

/// What the handler notes during a run.
struct State {
    source: String,
    records: u64,
    hold: Duration,
    first_attempt: OnceLock<Instant>,
    behind_handled: AtomicU64,
    behind_done: OnceLock<Instant>,
    poison_done: OnceLock<Instant>,
    lateness_ms: Mutex<Option<i64>>,
    changed: Notify,
}

impl State {
    fn handle(&self, r: &Record) -> Result<(), BoxError> {
        let now = Instant::now();
        if r.topic() != self.source {
            // The poison record, from its tier.
            let due: i64 = r
                .header(RETRY_DUE)
                .flatten()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok())
                .ok_or("tier record without a due time")?;
            *self.lateness_ms.lock().unwrap() = Some(now_ms() - due);
            self.finish(&self.poison_done, now);
            return Ok(());
        }
        if r.offset() == 0 {
            let first = *self.first_attempt.get_or_init(|| now);
            if now.duration_since(first) < self.hold {
                return Err("poison record: not yet".into());
            }
            self.finish(&self.poison_done, now);
            return Ok(());
        }
        if self.behind_handled.fetch_add(1, Ordering::Relaxed) + 1 == self.records - 1 {
            self.finish(&self.behind_done, now);
        }
        Ok(())
    }

    fn finish(&self, at: &OnceLock<Instant>, now: Instant) {
        let _ = at.set(now);
        self.changed.notify_waiters();
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Polls the group's committed offset of `topic`'s partition 0 every 5 ms
/// until it reaches `target`; returns when it was seen there.
fn wait_committed(bootstrap: &str, group: &str, topic: &str, target: i64) -> Instant {
    let reader: BaseConsumer = support::raw_config(bootstrap, group)
        .create()
        .expect("offset reader");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Ok(c) = reader.committed_offsets(tpl.clone(), Duration::from_secs(5))
            && let Some(Offset::Offset(o)) = c.find_partition(topic, 0).map(|p| p.offset())
            && o >= target
        {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: committed offset did not reach {target} within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

async fn run_once(broker: &MockBroker, policy: Policy, records: u64, hold: Duration) -> Measured {
    let bootstrap = broker.bootstrap().to_owned();
    let topic = support::topic(broker, &format!("tiers-{}", policy.name()), 1);
    support::produce(&bootstrap, &topic, 1, records as usize, 100);
    let tiers = RetryTopics::new([hold]);
    if policy == Policy::Tiers {
        broker
            .create_topic(&tiers.tier_topic(&topic, 1), 1)
            .expect("tier topic");
        broker
            .create_topic(&format!("{topic}.dlt"), 1)
            .expect("dead-letter topic");
    }
    let state = Arc::new(State {
        source: topic.clone(),
        records,
        hold: if policy == Policy::Clean {
            Duration::ZERO
        } else {
            hold
        },
        first_attempt: OnceLock::new(),
        behind_handled: AtomicU64::new(0),
        behind_done: OnceLock::new(),
        poison_done: OnceLock::new(),
        lateness_ms: Mutex::new(None),
        changed: Notify::new(),
    });
    let handler = {
        let state = Arc::clone(&state);
        move |r: Record| std::future::ready(state.handle(&r))
    };
    let group = unique("tiers-bench");
    let consumer = support::fresh_consumer(handler, &bootstrap, [topic.clone()], group.clone())
        .retry(
            RetryPolicy::new()
                .max_attempts(1)
                .backoff(Duration::from_millis(10), Duration::from_millis(100)),
        );
    let consumer = match policy {
        Policy::Tiers => consumer.on_exhausted(OnExhausted::RetryTopics(tiers)),
        Policy::Block | Policy::Clean => consumer.on_exhausted(OnExhausted::Block),
    };
    let committed = {
        let (b, g, t) = (bootstrap.clone(), group.clone(), topic.clone());
        tokio::task::spawn_blocking(move || wait_committed(&b, &g, &t, records as i64))
    };
    let committed_at: Arc<OnceLock<Instant>> = Arc::default();
    let stop = {
        let state = Arc::clone(&state);
        let committed_at = Arc::clone(&committed_at);
        async move {
            loop {
                let changed = state.changed.notified();
                if state.behind_done.get().is_some() && state.poison_done.get().is_some() {
                    break;
                }
                changed.await;
            }
            // Keep consuming (and committing) until the commit was seen.
            let _ = committed_at.set(committed.await.expect("offset reader"));
        }
    };
    tokio::time::timeout(DEADLINE, consumer.run_until(stop))
        .await
        .unwrap_or_else(|_| panic!("{}: run did not finish within {DEADLINE:?}", policy.name()))
        .unwrap_or_else(|e| panic!("{}: run: {e}", policy.name()));
    let first = *state.first_attempt.get().expect("poison record attempted");
    let behind = state
        .behind_done
        .get()
        .expect("records behind handled")
        .duration_since(first);
    let committed = committed_at
        .get()
        .expect("commit seen")
        .duration_since(first);
    let lateness_ms = *state.lateness_ms.lock().unwrap();
    Measured {
        behind,
        committed,
        lateness_ms,
    }
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let records: u64 = env_or("BENCH_TIERS_RECORDS", 5_000).max(2);
    let hold = Duration::from_millis(env_or("BENCH_TIERS_HOLD_MS", 3_000));
    let rounds: usize = if smoke {
        1
    } else {
        env_or("BENCH_TIERS_ROUNDS", 3).max(1)
    };
    let broker = support::mock_broker();
    let rt = support::runtime();
    let mut results: Vec<(Measured, Measured, Measured)> = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Policy::Clean, Policy::Tiers, Policy::Block]
        } else {
            [Policy::Block, Policy::Tiers, Policy::Clean]
        };
        let mut tiers = None;
        let mut block = None;
        let mut clean = None;
        for policy in order {
            let m = rt.block_on(run_once(&broker, policy, records, hold));
            println!(
                "round {}: {:5}  behind {:>8.1} ms  committed {:>8.1} ms{}",
                round + 1,
                policy.name(),
                ms(m.behind),
                ms(m.committed),
                m.lateness_ms
                    .map(|l| format!("  tier attempt {l} ms after its due time"))
                    .unwrap_or_default()
            );
            match policy {
                Policy::Tiers => tiers = Some(m),
                Policy::Block => block = Some(m),
                Policy::Clean => clean = Some(m),
            }
        }
        results.push((
            tiers.expect("tiers run"),
            block.expect("block run"),
            clean.expect("clean run"),
        ));
    }

    type Round = (Measured, Measured, Measured);
    let col = |f: &dyn Fn(&Round) -> f64| -> Vec<f64> { results.iter().map(f).collect() };
    let clean_behind = col(&|r| ms(r.2.behind));
    let clean_committed = col(&|r| ms(r.2.committed));
    let ratio_tiers_clean = col(&|r| r.0.committed.as_secs_f64() / r.2.committed.as_secs_f64());
    let tiers_behind = col(&|r| ms(r.0.behind));
    let block_behind = col(&|r| ms(r.1.behind));
    let tiers_committed = col(&|r| ms(r.0.committed));
    let block_committed = col(&|r| ms(r.1.committed));
    let ratio_behind = col(&|r| r.1.behind.as_secs_f64() / r.0.behind.as_secs_f64());
    let ratio_committed = col(&|r| r.1.committed.as_secs_f64() / r.0.committed.as_secs_f64());
    let lateness: Vec<f64> = results
        .iter()
        .filter_map(|r| r.0.lateness_ms.map(|l| l as f64))
        .collect();
    let show = |v: &[f64]| {
        let (lo, hi) = min_max(v);
        format!("{:.1} (min {lo:.1}, max {hi:.1})", median(v))
    };
    println!();
    println!(
        "summary (retry_tiers): {records} records behind a poison record held {} ms, {rounds} round(s); {}",
        hold.as_millis(),
        support::machine()
    );
    println!(
        "  behind, ms:    tiers {}; block {}; clean (no poison) {}",
        show(&tiers_behind),
        show(&block_behind),
        show(&clean_behind)
    );
    println!(
        "  committed, ms: tiers {}; block {}; clean (no poison) {}",
        show(&tiers_committed),
        show(&block_committed),
        show(&clean_committed)
    );
    println!(
        "  ratio tiers / clean (per round), committed: {}",
        show_ratio(&ratio_tiers_clean)
    );
    println!(
        "  ratio block / tiers (per round): behind {}; committed {}",
        show_ratio(&ratio_behind),
        show_ratio(&ratio_committed)
    );
    println!(
        "  due-time precision: tier attempt after its due time, ms: {}",
        show(&lateness)
    );
    let early = lateness.iter().filter(|&&l| l < 0.0).count();
    if early > 0 {
        println!("  VIOLATION: {early} tier attempt(s) before the due time");
        std::process::exit(1);
    }
    drop(broker);
}

fn show_ratio(v: &[f64]) -> String {
    let (lo, hi) = min_max(v);
    format!("{:.2} (min {lo:.2}, max {hi:.2})", median(v))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
