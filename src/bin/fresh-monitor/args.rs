//! The command line: every flag, its default and its check. `--help` prints
//! them all (clap renders `[default: ...]` from the values here; flags
//! without one say what happens when they are left out).

use std::time::Duration;

use clap::Parser;

/// What `--help` ends with: the exit codes.
pub const EXIT_CODES: &str =
    "exit codes: 0 ok, 1 bad arguments or configuration, 2 broker unreachable, 3 unknown topic,
            4 a named group has no committed offsets, 5 a cycle failed";

/// Watches Kafka consumer groups from outside: offset lag, time lag (the age
/// of the oldest unprocessed record), retention margin and a diagnosis per
/// group, read from the brokers (no group membership, no commits).
///
/// Without --serve: runs --samples cycles --interval apart and prints the
/// last report (a table, or --json). With --serve: runs until Ctrl-C or
/// SIGTERM, exporting the fresh_consumer.monitor.* gauges over OTLP
/// (configured by the standard OTEL_* variables) and printing one line per
/// group and cycle.
#[derive(Debug, Parser)]
#[command(name = "fresh-monitor", version, after_help = EXIT_CODES)]
pub struct Args {
    /// Bootstrap servers, host:port[,host:port...]. Required unless --demo.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "demo")]
    pub bootstrap: Option<String>,

    /// A consumer group to watch, committed offsets or not; repeat for more.
    /// Every group is watched on every topic. Required unless --demo or
    /// discovery (--discover, --include, --exclude).
    #[arg(long = "group", value_name = "GROUP", required_unless_present_any = ["demo", "discover", "include", "exclude"])]
    pub groups: Vec<String>,

    /// Also watch every group the brokers list that has a committed offset
    /// on a watched topic, listed again every cycle (needs ListGroups and
    /// the DESCRIBE ACL on the groups). Default: off (only --group).
    #[arg(long)]
    pub discover: bool,

    /// Discover only groups whose name this regular expression matches
    /// (unanchored: use ^...$ for the whole name). Implies --discover.
    /// Default: every group.
    #[arg(long, value_name = "REGEX", value_parser = pattern)]
    pub include: Option<regex::Regex>,

    /// Do not discover groups whose name this regular expression matches.
    /// Implies --discover. Default: none excluded.
    #[arg(long, value_name = "REGEX", value_parser = pattern)]
    pub exclude: Option<regex::Regex>,

    /// The most groups one process watches (named plus discovered); above
    /// it a cycle fails with an error naming the count.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_groups: u64,

    /// The most partitions (of all watched topics) one process watches;
    /// above it the monitor does not start, or a cycle fails.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_partitions: u64,

    /// A topic to watch (exact name); repeat for more. Required unless
    /// --demo.
    #[arg(long = "topic", value_name = "TOPIC", required_unless_present = "demo")]
    pub topics: Vec<String>,

    /// A librdkafka client property for every client the monitor creates
    /// (security.protocol, sasl.*, ssl.*, client.id, ...); repeat for more.
    /// Default: none.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
    pub set: Vec<(String, String)>,

    /// Print the report as one JSON object instead of a table (durations in
    /// seconds, unknown values null). Default: a table.
    #[arg(long, conflicts_with = "serve")]
    pub json: bool,

    /// Run as a service until Ctrl-C or SIGTERM, exporting over OTLP
    /// (configured by the OTEL_* variables). Default: print one report and
    /// exit.
    #[arg(long)]
    pub serve: bool,

    /// Run as a service until Ctrl-C or SIGTERM, serving the gauges for
    /// Prometheus to scrape at http://ADDR/metrics (ADDR such as
    /// 0.0.0.0:9464), under the names the rules in deploy/prometheus use;
    /// with --serve, OTLP as well. Default: no scrape endpoint.
    #[arg(long, value_name = "ADDR", conflicts_with = "json")]
    pub prometheus: Option<std::net::SocketAddr>,

    /// Run as a service and serve the KEDA external scaler (gRPC, KEDA's
    /// externalscaler.proto) on ADDR (such as 0.0.0.0:9465), for a
    /// ScaledObject's `external` trigger with metadata `group` (and
    /// optionally `topics`, `drainTargetSeconds`). Its metric is the
    /// replica count the group should run, from time lag; it holds the
    /// count for a skewed, stuck or dead group and during a rebalance.
    /// Default: no scaler.
    #[arg(long, value_name = "ADDR", conflicts_with = "json")]
    pub keda_grpc: Option<std::net::SocketAddr>,

    /// With --keda-grpc: the largest time lag, in seconds, at which a
    /// group counts as quiet (the scale-down point; keep it well below
    /// --lag-threshold, the scale-up point).
    #[arg(long, value_name = "S", default_value_t = 15.0, value_parser = seconds)]
    pub scale_down_lag: f64,

    /// With --keda-grpc: seconds a group must stay quiet, and the answer
    /// unchanged, before each step down by one replica (scaling up acts at
    /// once; a second step up waits --window after the first, so the
    /// commit rate reflects the new count).
    #[arg(long, value_name = "S", default_value_t = 600.0, value_parser = seconds)]
    pub scale_down_after: f64,

    /// With --keda-grpc: the fewest replicas a step down goes to.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub min_replicas: u32,

    /// Seconds between the starts of two cycles, on average: as a service,
    /// 0.618 or 1.618 times this apart (the golden-ratio sequence), so the
    /// cycles do not sample a group at one phase of its commit interval.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = seconds)]
    pub interval: f64,

    /// Cycles before the report is printed (without --serve), so the
    /// "unchanged" column and the rates have something to compare.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub samples: u32,

    /// Seconds the rates and the diagnosis look back over (raised to the
    /// interval when shorter).
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = seconds)]
    pub window: f64,

    /// Seconds a committed offset must stay unchanged while records wait
    /// before the partition is stalled (and, with every waiting partition
    /// frozen and no commit moving, the group dead).
    #[arg(long, value_name = "S", default_value_t = 30.0, value_parser = seconds)]
    pub stall_after: f64,

    /// Seconds of time lag at and above which a partition is lagging.
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = seconds)]
    pub lag_threshold: f64,

    /// Seconds within which the backlog should drain, for the replica
    /// suggestion of a consumer-bound group.
    #[arg(long, value_name = "S", default_value_t = 600.0, value_parser = seconds)]
    pub drain_target: f64,

    /// Share of the summed time lag that at most a quarter of the partitions
    /// must carry for the diagnosis skewed, in (0, 1].
    #[arg(long, value_name = "SHARE", default_value_t = 0.75)]
    pub skew_share: f64,

    /// The group's consumer count, for the replica suggestion when the
    /// brokers do not describe the group's members. Default: none (the
    /// members the brokers describe).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: Option<u32>,

    /// Count the offset lag to the high watermark (consumers with
    /// isolation.level=read_uncommitted). Default: to the last stable
    /// offset (read_committed).
    #[arg(long)]
    pub read_uncommitted: bool,

    /// Seconds each metadata, list-offsets and offset-fetch request may
    /// take (and so the check that a broker answers).
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = seconds)]
    pub request_timeout: f64,

    /// Seconds the reads of the records at committed offsets may take in
    /// one cycle.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = seconds)]
    pub read_timeout: f64,

    /// Self-contained demo on an embedded broker (no Kafka needed).
    #[arg(long, conflicts_with_all = ["bootstrap", "groups", "topics", "serve", "prometheus", "keda_grpc", "discover", "include", "exclude"])]
    pub demo: bool,
}

impl Args {
    /// Whether the tool runs as a service (OTLP, a scrape endpoint, the
    /// KEDA scaler, or several).
    pub fn service(&self) -> bool {
        self.serve || self.prometheus.is_some() || self.keda_grpc.is_some()
    }

    /// Whether groups are discovered.
    pub fn discovers(&self) -> bool {
        self.discover || self.include.is_some() || self.exclude.is_some()
    }
}

/// `key=value`.
fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// A regular expression.
fn pattern(s: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(s).map_err(|e| e.to_string())
}

/// Seconds, finite and above zero.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("expected seconds above zero, got {s:?}")),
    }
}

/// Seconds as a `Duration`.
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Parses the arguments (without the program name). `Err((text, code))`:
/// the help or version text with 0, or the error with 1, to print and exit
/// with (clap's own code for bad usage is 2, which is this tool's "no
/// broker answered").
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, (String, u8)> {
    let argv = std::iter::once("fresh-monitor".to_owned()).chain(args);
    Args::try_parse_from(argv).map_err(|e| {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => (e.to_string(), 0),
            _ => (format!("{e}\n{EXIT_CODES}"), 1),
        }
    })
}
