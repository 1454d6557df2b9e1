//! A Kubernetes liveness and readiness probe for a `FreshConsumer`, served
//! over HTTP with axum from its `HealthHandle`.
//!
//! ```text
//! cargo run --example health_probe                      # mock broker, probe on 127.0.0.1:8080
//! cargo run --example health_probe -- --poison          # one record always fails: /livez turns 503
//! cargo run --example health_probe -- --addr 0.0.0.0:9000 --exit-after 30
//! cargo run --example health_probe -- --bootstrap broker:9092 --topic orders --group billing
//! ```
//!
//! Without `--bootstrap` the example starts librdkafka's mock broker in this
//! process and produces a record every 100 ms. With `--poison`, offset 20 of
//! partition 0 fails on every attempt; its retries run out and the block
//! policy holds the partition, which turns STALL after `--stall-after`
//! seconds (default 10) and makes the consumer unhealthy.
//!
//! Endpoints (all `GET`, plain text bodies with the snapshot):
//!
//! - `/livez`: 200 unless the consumer is **unhealthy** (a stalled or
//!   stopped partition, a partition stopped by the retention-overrun fail
//!   policy, no success while records wait, a poll loop stuck past
//!   `max.poll.interval.ms`, a stopped consumer): 503. Degraded is alive.
//! - `/readyz`: 200 once the consumer runs as a member of its group
//!   (`ConsumerState::Running`: its first assignment arrived) and is not
//!   unhealthy; 503 before it started, while it joins the group
//!   (`ConsumerState::Joining`), after it stopped, or when unhealthy.
//! - `/health`: always 200, the snapshot as text, for people.
//!
//! A matching pod spec:
//!
//! ```yaml
//! livenessProbe:
//!   httpGet: { path: /livez, port: 8080 }
//!   periodSeconds: 10
//!   failureThreshold: 3     # 30 s unhealthy before a restart
//! readinessProbe:
//!   httpGet: { path: /readyz, port: 8080 }
//!   periodSeconds: 5
//! ```
//!
//! Whether a restart helps depends on the reason: a consumer stuck behind a
//! poison record is stuck again after a restart. The snapshot names the
//! partition and the reason, so the probe's body is worth logging.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::error::Error;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use fresh_consumer::{
    FreshConsumer, OnExhausted, Record,
    failure::RetryPolicy,
    health::{ConsumerState, HealthHandle, HealthStatus, HealthThresholds},
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio_util::sync::CancellationToken;

use mock_broker::MockBroker;

#[derive(Debug)]
struct Args {
    addr: SocketAddr,
    bootstrap: Option<String>,
    topic: String,
    group: String,
    poison: bool,
    stall_after: Duration,
    exit_after: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
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

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("health_probe", parse_args);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,fresh_consumer=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    cli::exit_status("health_probe", run(args).await)
}

async fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let stop = CancellationToken::new();
    // The broker: the one named, or a mock cluster in this process (kept
    // running until `run` returns) with a producer feeding it.
    let mut _mock: Option<MockBroker> = None;
    let bootstrap = match &args.bootstrap {
        Some(b) => b.clone(),
        None => {
            let broker = MockBroker::start()?;
            broker.create_topic(&args.topic, 3)?;
            let bootstrap = broker.bootstrap().to_owned();
            _mock = Some(broker);
            tokio::spawn(feed(bootstrap.clone(), args.topic.clone(), stop.clone()));
            println!("mock Kafka broker: {bootstrap}, topic {:?}", args.topic);
            bootstrap
        }
    };

    let poison = args.poison;
    let handler = move |r: Record| async move {
        if poison && r.partition() == 0 && r.offset() == 20 {
            return Err(std::io::Error::other("poison record"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(())
    };
    let consumer = FreshConsumer::new(handler)
        .bootstrap_servers(bootstrap)
        .group_id(&args.group)
        .topics([args.topic.as_str()])
        .set("session.timeout.ms", "6000")
        .retry(
            RetryPolicy::new()
                .max_attempts(3)
                .backoff(Duration::from_millis(100), Duration::from_secs(1)),
        )
        .on_exhausted(OnExhausted::Block)
        .health_thresholds(
            HealthThresholds::default()
                .with_stall_after(args.stall_after)
                .with_no_success_after(args.stall_after),
        );
    // The handle exists before the consumer runs.
    let health = consumer.health_handle();

    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/health", get(report))
        .with_state(health.clone());
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    println!(
        "probe on http://{}/livez, /readyz, /health",
        listener.local_addr()?
    );
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    });

    let signal = {
        let stop = stop.clone();
        let exit_after = args.exit_after;
        async move {
            let timer = async {
                match exit_after {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = cli::shutdown_signal() => println!("signal received; stopping"),
                () = timer => println!("--exit-after reached; stopping"),
            }
            stop.cancel();
        }
    };
    let summary = consumer.run_until(signal).await?;
    stop.cancel();
    server.await??;
    println!(
        "stopped: {} records handled; final health:\n{}",
        summary.records_succeeded,
        health.snapshot()
    );
    Ok(())
}

/// Liveness: fails only when the consumer is unhealthy.
async fn livez(State(health): State<HealthHandle>) -> (StatusCode, String) {
    let s = health.snapshot();
    let code = if s.status == HealthStatus::Unhealthy {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, s.to_string())
}

/// Readiness: running and not unhealthy.
async fn readyz(State(health): State<HealthHandle>) -> (StatusCode, String) {
    let s = health.snapshot();
    let ready = s.state == ConsumerState::Running && s.status != HealthStatus::Unhealthy;
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, s.to_string())
}

/// The snapshot as text, always 200.
async fn report(State(health): State<HealthHandle>) -> String {
    health.snapshot().to_string()
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
