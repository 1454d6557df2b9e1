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
//!
//! The command line, the mock broker and the producer feeding it are in
//! `examples/support/health_probe_kit.rs`.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/health_probe_kit.rs"]
mod kit;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::error::Error;
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
use kit::Args;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("health_probe", Args::parse);
    kit::init_logging();
    cli::exit_status("health_probe", run(args).await)
}

async fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let stop = CancellationToken::new();
    // The broker: the one named, or a mock cluster in this process (kept
    // running until `run` returns) with a producer feeding it a record
    // every 100 ms.
    let (_mock, bootstrap) = kit::broker(&args, &stop)?;

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

    // Until SIGTERM / Ctrl-C or `--exit-after`, which also stops the server.
    let signal = kit::stop_signal(args.exit_after, stop.clone());
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
