//! The plumbing of `examples/health_probe.rs`: its command line, its log
//! lines, the mock broker with a producer feeding it, and what stops the
//! run.
//!
//! The example includes it with `#[path = "support/health_probe_kit.rs"] mod kit;`
//! (see `mock_broker.rs` next to it for why this folder is not an example);
//! it uses the example's `cli` and `mock_broker` modules.

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio_util::sync::CancellationToken;

use crate::mock_broker::MockBroker;

#[derive(Debug)]
pub struct Args {
    pub addr: SocketAddr,
    pub bootstrap: Option<String>,
    pub topic: String,
    pub group: String,
    pub poison: bool,
    pub stall_after: Duration,
    pub exit_after: Option<Duration>,
}

impl Args {
    /// The process's command line (`--help`: the usage, as a bad-usage
    /// message).
    pub fn parse() -> Result<Args, String> {
        let mut args = Args {
            addr: "127.0.0.1:8080".parse().unwrap(),
            bootstrap: None,
            topic: "health-probe".into(),
            group: "health-probe".into(),
            poison: false,
            stall_after: Duration::from_secs(10),
            exit_after: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
            match a.as_str() {
                "--addr" => {
                    args.addr = value("--addr")?
                        .parse()
                        .map_err(|e| format!("--addr: {e}"))?
                }
                "--bootstrap" => args.bootstrap = Some(value("--bootstrap")?),
                "--topic" => args.topic = value("--topic")?,
                "--group" => args.group = value("--group")?,
                "--poison" => args.poison = true,
                "--stall-after" => {
                    args.stall_after = Duration::from_secs(
                        value("--stall-after")?
                            .parse()
                            .map_err(|e| format!("--stall-after: {e}"))?,
                    )
                }
                "--exit-after" => {
                    args.exit_after = Some(Duration::from_secs(
                        value("--exit-after")?
                            .parse()
                            .map_err(|e| format!("--exit-after: {e}"))?,
                    ))
                }
                "-h" | "--help" => {
                    return Err("usage: health_probe [--addr HOST:PORT] [--bootstrap SERVERS --topic T --group G] \
                         [--poison] [--stall-after SECS] [--exit-after SECS]"
                        .into());
                }
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        Ok(args)
    }
}

/// Log lines on stderr: `RUST_LOG`, or warnings and the library's info
/// lines (joins, assignments).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,fresh_consumer=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The broker's bootstrap servers: the ones given with `--bootstrap`, or a
/// mock cluster started in this process (it runs as long as the returned
/// [`MockBroker`] lives) with a producer feeding `args.topic` until `stop`.
pub fn broker(
    args: &Args,
    stop: &CancellationToken,
) -> Result<(Option<MockBroker>, String), Box<dyn Error>> {
    match &args.bootstrap {
        Some(b) => Ok((None, b.clone())),
        None => {
            let broker = MockBroker::start()?;
            broker.create_topic(&args.topic, 3)?;
            let bootstrap = broker.bootstrap().to_owned();
            tokio::spawn(feed(bootstrap.clone(), args.topic.clone(), stop.clone()));
            println!("mock Kafka broker: {bootstrap}, topic {:?}", args.topic);
            Ok((Some(broker), bootstrap))
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C, or after `exit_after`, and cancels `stop`.
pub async fn stop_signal(exit_after: Option<Duration>, stop: CancellationToken) {
    let timer = async {
        match exit_after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = crate::cli::shutdown_signal() => println!("signal received; stopping"),
        () = timer => println!("--exit-after reached; stopping"),
    }
    stop.cancel();
}

/// Produces a keyed record every 100 ms into the mock broker until stopped.
async fn feed(bootstrap: String, topic: String, stop: CancellationToken) {
    let producer: FutureProducer = match ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .create()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("health_probe: producer: {e}");
            return;
        }
    };
    let mut i = 0u64;
    while !stop.is_cancelled() {
        let key = format!("key-{}", i % 7);
        let payload = format!("record {i}");
        let r = FutureRecord::to(&topic).key(&key).payload(&payload);
        if let Err((e, _)) = producer.send(r, Duration::from_secs(5)).await {
            eprintln!("health_probe: produce: {e}");
        }
        i += 1;
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    let _ = producer.flush(Duration::from_secs(1));
}
