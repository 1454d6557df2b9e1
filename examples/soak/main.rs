//! A chaos soak on a real broker (issue 29): a steady producer, three
//! consumer processes in one group with retry tiers and a dead-letter
//! topic, and faults on a seeded schedule; a checker over the logs and the
//! broker afterwards.
//!
//! ```sh
//! eval "$(bash .ci/kafka start)"
//! cargo run --release --example soak -- --bootstrap "$FRESH_CONSUMER_TEST_BOOTSTRAP" \
//!     --kafka-dir "$KAFKA_DIR" --secs 1800
//! ```
//!
//! What runs:
//! - a producer (in this process) at `--rate` records/s (500), keys `k-0`
//!   .. `k-<keys>` (50), a sequence number per key in the payload
//!   (`<key> <seq>`), CreateTime now, idempotent, `acks=all`;
//! - three consumer processes (this program with `--child`, see
//!   `child.rs`): a `FreshConsumer` with tiers of 1 s and 3 s and a
//!   dead-letter topic; its handler fails a known 1 % of the records (the
//!   poison ones) at the source and in the first tier, so they succeed in
//!   the second, and logs every success before it returns;
//! - a sampler reading the group's committed offsets from outside every
//!   100 ms: a committed offset that moves backwards is a failure.
//!
//! Faults (times drawn from `--seed`, printed, so a run can be repeated):
//! a SIGKILL of a random consumer every `--kill-every` (60-180 s; 20-40 s
//! for runs under 10 minutes), restarted after 5-20 s; a graceful restart
//! (SIGTERM, started again at once) of another at 45 % of the run; the
//! broker killed (`kill -9`, `.ci/kafka kill`) and restarted
//! (`.ci/kafka resume`) at 30 % and 65 % of the run (with `--kafka-dir`);
//! one consumer's handler slowed to 1 s per record for `--slow-secs` (30)
//! at 80 %; one member restarted as a KIP-848 member
//! (`group.protocol=consumer`) at 38 %, so Kafka upgrades the classic group
//! online, and back to `classic` at 52 % (the group downgrades); with `--rotel PATH` (the rotel collector's `rotel-agent`) the
//! consumers export their metrics over OTLP to a collector the soak starts,
//! which is stopped at 55 % for `--collector-down-secs` (60) and started
//! again: it must receive metrics after it came back.
//!
//! After `--secs` the producer stops, the group drains (committed offsets
//! reach the log ends of the source and tier topics), the consumers stop
//! gracefully, and the checker reports: records produced, lost (must be 0),
//! duplicates and the fault that explains each (a fault at most the commit
//! interval plus one second after the first handling, or a broker outage
//! under way), keys handled out of order (must be 0), committed offsets
//! that moved backwards (must be 0), poison records that did not succeed in
//! the second tier, dead-lettered records (must be 0), the RSS of each
//! consumer that lived 240 s, after 120 s and at its end (net of the freed
//! memory glibc keeps, which a burst leaves behind: must be within 10 %;
//! RSS and the C heap in use are reported beside it), and whether the signals told the truth (`signals.rs`):
//! each dead member, broker outage and slow handler shown by the members'
//! health and by the group monitor (it watches the group from outside every
//! 2 s) within two evaluation windows (10 s each), the time back to quiet,
//! and no alarm outside the faults. Exit status 1 when a check fails, 2 for
//! a bad command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

mod check;
mod child;
mod procs;
mod run;
mod signals;
mod watch;

/// The delay tiers: (delay, topic suffix under the default naming).
pub const TIERS: [(Duration, &str); 2] = [
    (Duration::from_secs(1), ".retry.1s"),
    (Duration::from_secs(3), ".retry.3s"),
];

/// One record in a hundred is poison: it fails at the source and in the
/// first tier (a hash of key and sequence number, so every process and the
/// checker agree).
pub fn is_poison(key: &str, seq: u64) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(seq.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(100)
}

/// `<key> <seq>`.
pub fn parse_payload(payload: Option<&[u8]>) -> Option<(String, u64)> {
    let text = std::str::from_utf8(payload?).ok()?;
    let (key, seq) = text.split_once(' ')?;
    Some((key.to_owned(), seq.parse().ok()?))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The command line.
pub struct Args {
    pub bootstrap: String,
    pub kafka_dir: Option<PathBuf>,
    pub secs: u64,
    pub seed: u64,
    pub rate: u64,
    pub keys: u64,
    pub partitions: i32,
    pub kill_every: (u64, u64),
    pub slow_secs: u64,
    /// Where the logs go: a new or empty folder (a soak refuses one that
    /// holds files).
    pub out: Option<PathBuf>,
    /// The rotel collector's binary (`rotel-agent`), for the collector
    /// outage.
    pub rotel: Option<PathBuf>,
    pub collector_down_secs: u64,
    /// 1 (a single broker) or 3 (`.ci/kafka start --nodes 3`: topics get
    /// replication factor 3, the broker fault kills one node).
    pub nodes: u32,
    /// Rolling restarts of all three nodes, spread over the run.
    pub rolling_restarts: u32,
    /// The consumers write one output per success into `<topic>.out` in
    /// Kafka transactions; the checker reads it `read_committed`.
    pub transactional: bool,
}

fn usage() -> String {
    "usage: soak --bootstrap HOST:PORT [--kafka-dir DIR] [--secs 180] [--seed N] [--rate 500] \
     [--keys 50] [--partitions 6] [--kill-every MIN-MAX] [--slow-secs 30] [--out DIR] \
     [--rotel PATH] [--collector-down-secs 60] [--nodes 1|3] [--rolling-restarts N] \
     [--transactional]"
        .to_owned()
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        bootstrap: String::new(),
        kafka_dir: None,
        secs: 180,
        seed: fastrand::u64(..),
        rate: 500,
        keys: 50,
        partitions: 6,
        kill_every: (0, 0),
        slow_secs: 30,
        out: None,
        rotel: None,
        collector_down_secs: 60,
        nodes: 1,
        rolling_restarts: 0,
        transactional: false,
    };
    let num = |flag: &str, v: Option<String>| -> Result<u64, String> {
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a number\n{}", usage()))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--bootstrap" => a.bootstrap = it.next().ok_or_else(usage)?,
            "--kafka-dir" => a.kafka_dir = Some(it.next().ok_or_else(usage)?.into()),
            "--secs" => a.secs = num("--secs", it.next())?,
            "--seed" => a.seed = num("--seed", it.next())?,
            "--rate" => a.rate = num("--rate", it.next())?,
            "--keys" => a.keys = num("--keys", it.next())?,
            "--partitions" => a.partitions = num("--partitions", it.next())? as i32,
            "--slow-secs" => a.slow_secs = num("--slow-secs", it.next())?,
            "--out" => a.out = Some(it.next().ok_or_else(usage)?.into()),
            "--rotel" => a.rotel = Some(it.next().ok_or_else(usage)?.into()),
            "--collector-down-secs" => {
                a.collector_down_secs = num("--collector-down-secs", it.next())?
            }
            "--nodes" => a.nodes = num("--nodes", it.next())? as u32,
            "--rolling-restarts" => {
                a.rolling_restarts = num("--rolling-restarts", it.next())? as u32
            }
            "--transactional" => a.transactional = true,
            "--kill-every" => {
                let v = it.next().unwrap_or_default();
                let (lo, hi) = v
                    .split_once('-')
                    .and_then(|(l, h)| Some((l.parse().ok()?, h.parse().ok()?)))
                    .filter(|(l, h): &(u64, u64)| *l > 0 && l <= h)
                    .ok_or_else(|| format!("--kill-every needs MIN-MAX seconds\n{}", usage()))?;
                a.kill_every = (lo, hi);
            }
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    if a.bootstrap.is_empty() {
        return Err(format!("--bootstrap is required\n{}", usage()));
    }
    if a.secs < 60 || a.rate == 0 || a.keys == 0 || a.partitions < 1 {
        return Err(format!(
            "--secs must be at least 60, --rate, --keys and --partitions at least 1\n{}",
            usage()
        ));
    }
    if a.nodes != 1 && a.nodes != 3 {
        return Err(format!("--nodes must be 1 or 3\n{}", usage()));
    }
    if a.nodes == 3 && a.kafka_dir.is_none() {
        return Err(format!(
            "--nodes 3 needs --kafka-dir (the cluster's dir, from .ci/kafka start --nodes 3)\n{}",
            usage()
        ));
    }
    if a.rolling_restarts > 0 && a.nodes != 3 {
        return Err(format!("--rolling-restarts needs --nodes 3\n{}", usage()));
    }
    if a.kill_every == (0, 0) {
        a.kill_every = if a.secs < 600 { (20, 40) } else { (60, 180) };
    }
    Ok(a)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    let mode = args.peek().cloned().unwrap_or_default();
    if mode == "--child" || mode == "--watch" {
        args.next();
        let flags: std::collections::HashMap<String, String> = {
            let rest: Vec<String> = args.collect();
            rest.chunks(2)
                .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone())))
                .collect()
        };
        let get = |flag: &str| -> String {
            flags
                .get(flag)
                .cloned()
                .unwrap_or_else(|| panic!("soak {mode}: {flag} missing"))
        };
        if mode == "--watch" {
            watch::run_process(
                get("--bootstrap"),
                get("--group"),
                get("--topic"),
                Duration::from_millis(get("--window-ms").parse().expect("--window-ms")),
                get("--log").into(),
            );
            return ExitCode::SUCCESS;
        }
        child::run(child::ChildArgs {
            bootstrap: get("--bootstrap"),
            group: get("--group"),
            topic: get("--topic"),
            log: get("--log").into(),
            slow_secs: get("--slow-secs").parse().expect("--slow-secs"),
            session_ms: get("--session-ms").parse().expect("--session-ms"),
            protocol: get("--protocol"),
            window: Duration::from_millis(get("--window-ms").parse().expect("--window-ms")),
            outputs: flags.get("--outputs").cloned(),
            slot: get("--slot").parse().expect("--slot"),
        });
        return ExitCode::SUCCESS;
    }
    let args = match parse(args) {
        Ok(a) => a,
        Err(message) => {
            eprintln!("soak: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match runtime.block_on(run::soak(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}
