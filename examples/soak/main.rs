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

use std::process::ExitCode;
use std::time::Duration;

mod args;
mod check;
mod child;
mod procs;
mod run;
mod signals;
mod watch;

pub use args::Args;

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
    let args = match args::parse(args) {
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
