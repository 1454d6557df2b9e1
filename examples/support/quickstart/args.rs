//! The quickstart's command line.

/// Records produced in demo mode unless `--records N` says otherwise.
const DEFAULT_RECORDS: u64 = 4_000;

#[derive(Debug)]
pub struct Args {
    pub serve: bool,
    pub exit_after: Option<u64>,
    records: Option<u64>,
    /// A cluster of the user's instead of the embedded broker.
    pub bootstrap: Option<String>,
    /// librdkafka properties (`-X key=value`) for every client.
    pub properties: Vec<(String, String)>,
    /// An existing topic to read (no demo records are produced).
    pub topic: Option<String>,
    pub group: Option<String>,
}

const USAGE: &str = "\
usage: quickstart [--records N]
       quickstart --serve [--exit-after-records N]
       quickstart --bootstrap HOST:PORT [-X KEY=VALUE]... [--records N] [--group NAME]
       quickstart --bootstrap HOST:PORT [-X KEY=VALUE]... --topic NAME [--exit-after-records N] [--group NAME]

Without --bootstrap: an embedded mock Kafka broker. Without --serve, produce N
(default 4000) demo records into it, consume them, print a freshness table.
With --serve: keep the broker up, print its bootstrap address, consume what
other clients (kcat) produce until Ctrl-C/SIGTERM or N records were handled.

--bootstrap HOST:PORT  use this cluster instead (bootstrap.servers; a
                       comma-separated list works too)
-X KEY=VALUE           a librdkafka property for every client (repeatable),
                       e.g. -X security.protocol=SASL_SSL
--topic NAME           read this existing topic from the start, produce
                       nothing; without it, the demo runs in a topic the
                       example creates (and deletes at the end)
--group NAME           the consumer group (default: a new quickstart-... one)

OTEL_EXPORTER_OTLP_ENDPOINT set: also export the metrics over OTLP.";

impl Args {
    /// Whether the demo workload runs (and must complete).
    pub fn demo(&self) -> bool {
        !self.serve && self.topic.is_none()
    }

    /// The demo's record count (`--records N`, default 4000).
    pub fn demo_records(&self) -> u64 {
        self.records.unwrap_or(DEFAULT_RECORDS)
    }

    /// The process's command line; `--help` prints the usage and exits.
    pub fn parse() -> Result<Args, String> {
        let mut args = Args {
            serve: false,
            exit_after: None,
            records: None,
            bootstrap: None,
            properties: Vec::new(),
            topic: None,
            group: None,
        };
        let text = |flag: &str, value: Option<String>| {
            value
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--serve" => args.serve = true,
                "--exit-after-records" => {
                    args.exit_after = Some(crate::cli::number(&arg, it.next())?)
                }
                "--records" => args.records = Some(crate::cli::number(&arg, it.next())?),
                "--bootstrap" => args.bootstrap = Some(text(&arg, it.next())?),
                "--topic" => args.topic = Some(text(&arg, it.next())?),
                "--group" => args.group = Some(text(&arg, it.next())?),
                "-X" => {
                    let kv = text(&arg, it.next())?;
                    let (key, value) = kv
                        .split_once('=')
                        .filter(|(k, _)| !k.trim().is_empty())
                        .ok_or_else(|| format!("-X needs KEY=VALUE, got {kv:?}"))?;
                    args.properties
                        .push((key.trim().to_owned(), value.to_owned()));
                }
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        if args.serve && args.bootstrap.is_some() {
            return Err(
                "--serve keeps the embedded broker up; it does not apply with --bootstrap".into(),
            );
        }
        if args.topic.is_some() && args.bootstrap.is_none() {
            return Err(
                "--topic reads an existing topic of the cluster given with --bootstrap".into(),
            );
        }
        if args.group.is_some() && args.bootstrap.is_none() {
            return Err("--group applies with --bootstrap".into());
        }
        if args.exit_after.is_some() && !args.serve && args.topic.is_none() {
            return Err("--exit-after-records only applies with --serve or --topic".into());
        }
        if args.records.is_some() && !args.demo() {
            return Err(
                "--records sets the demo workload; it does not apply with --serve or --topic"
                    .into(),
            );
        }
        Ok(args)
    }
}
