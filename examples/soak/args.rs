//! The soak's command line (the parent's; the consumer and watcher
//! processes it starts get theirs from `main.rs`).

use std::path::PathBuf;

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

pub fn usage() -> String {
    "usage: soak --bootstrap HOST:PORT [--kafka-dir DIR] [--secs 180] [--seed N] [--rate 500] \
     [--keys 50] [--partitions 6] [--kill-every MIN-MAX] [--slow-secs 30] [--out DIR] \
     [--rotel PATH] [--collector-down-secs 60] [--nodes 1|3] [--rolling-restarts N] \
     [--transactional]"
        .to_owned()
}

pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
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
