//! Reading the signals: the guide's six ways a lag graph lies, each staged
//! on a broker, with what offset lag shows beside what the library shows.
//!
//! ```text
//! cargo run --example signals                                # on the embedded mock broker
//! cargo run --example signals -- --bootstrap kafka:9092      # on your cluster
//! cargo run --example signals -- --bootstrap kafka:9092 -X security.protocol=SSL
//! cargo run --example signals -- --only hot-partition,stuck-partition
//! ```
//!
//! Each stage creates a topic of its own (`signals-<stage>-…`, deleted at
//! the end on a cluster) and a fresh consumer group, produces a workload,
//! runs a [`FreshConsumer`] on it, and waits (at most 30 s) for the signal
//! the guide (`docs/guide/signals.md`, which shows the output) names for that
//! failure. It then prints two lines: **offset lag**, read from outside the
//! way a lag exporter reads it (the log end offset minus the group's
//! committed offset, per partition, from a separate client), and
//! **library**, read from the consumer's [`HealthSnapshot`] and its metrics
//! (an in-memory reader on the consumer's meter provider: the numbers an
//! OTLP collector would receive). The stages:
//!
//! | stage | workload | the signal waited for |
//! |---|---|---|
//! | `count-without-age` | 30 records stamped 10 minutes ago, 100 ms of work each | head-of-line age above 5 min while the lag is at most 30 |
//! | `hot-partition` | 400 records on partition 0, 10 on each of partitions 1-3 | partition 0's head age above 1 s while 1-3 are at lag 0 |
//! | `slow-dependency` | 40 records/s; the handler goes from 1 ms to 60 ms per record | health reason `LagGrowing` (status `warn`) |
//! | `rebalance-loop` | a second member joins and leaves the group 3 times | the staying member counts the rebalances |
//! | `stuck-partition` | one record on partition 0 fails every attempt | reasons `BlockedByFailingRecord` and `Stalled` on partition 0 |
//! | `retention-overrun` | committed at offset 10, records below 40 deleted | reason `RetentionOverrun` with 30 records lost |
//!
//! The consumer every stage runs is [`Broker::consumer`] below: health
//! thresholds of seconds instead of minutes, so each stage takes seconds.
//! On the mock broker the retention stage relies on the mock's 5 MiB cap per
//! partition; on a cluster it deletes the records below offset 40 with
//! DeleteRecords, as `retention.ms` would. First the example prints how long
//! a new member of a new group took to get its partition (the group join
//! time on this broker).
//!
//! The stages are in `examples/support/signals/stages.rs`, the plumbing
//! (broker, workloads, the outside lag, the metric reader, the command line)
//! in `examples/support/signals/kit.rs`.
//!
//! Exit status: 0 when every stage showed its signal, 1 when one did not
//! (or the cluster failed), 2 for a bad command line.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/signals/kit.rs"]
mod kit;
#[path = "support/mock_broker.rs"]
mod mock_broker;
#[path = "support/names.rs"]
mod names;
#[path = "support/signals/stages.rs"]
mod stages;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use fresh_consumer::{BoxError, FreshConsumer, Handler, Record, health::HealthThresholds};
use kit::{Broker, Metrics, PROGRAM, Running, StageError, parse_args, secs, watch};
use stages::{DEADLINE, STAGES};

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit(PROGRAM, parse_args);
    let broker = match Broker::connect(args.bootstrap.as_deref(), &args.properties).await {
        Ok(b) => b,
        Err(e) => return cli::failed(PROGRAM, &*e),
    };
    println!("broker: {}", broker.describe());
    match join_time(&broker).await {
        Ok(took) => println!(
            "group join: a new member of a new group had its partition {} after it started\n",
            secs(took)
        ),
        Err(StageError::Missed(why)) => println!("group join: {why}\n"),
        Err(StageError::Failed(e)) => {
            broker.clean_up().await;
            return cli::failed(PROGRAM, &*e);
        }
    }
    let mut missed = 0;
    let mut ran = 0;
    for stage in STAGES {
        if !args.only.is_empty() && !args.only.iter().any(|s| s == stage) {
            continue;
        }
        ran += 1;
        let started = Instant::now();
        match stages::run(stage, &broker).await {
            Ok(o) => println!("{}\n", o.render(started.elapsed())),
            Err(StageError::Missed(why)) => {
                missed += 1;
                println!("{stage}: the signal did not show: {why}\n");
            }
            Err(StageError::Failed(e)) => {
                broker.clean_up().await;
                return cli::failed(PROGRAM, &*e);
            }
        }
    }
    broker.clean_up().await;
    println!("{} of {ran} stages showed their signal", ran - missed);
    if missed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

impl Broker {
    /// A consumer of `topic` in `group` with the demo's short thresholds,
    /// recording into `metrics`.
    pub fn consumer<H: Handler>(
        &self,
        topic: &str,
        group: &str,
        handler: H,
        metrics: &Metrics,
    ) -> FreshConsumer<H> {
        let mut c = FreshConsumer::new(handler)
            .bootstrap_servers(self.bootstrap())
            .group_id(group)
            .topics([topic])
            .statistics_interval(Duration::from_millis(200))
            .commit_interval(Duration::from_millis(200))
            .health_thresholds(
                HealthThresholds::default()
                    .with_stall_after(Duration::from_secs(3))
                    .with_no_success_after(Duration::from_secs(6))
                    .with_lag_growth_window(Duration::from_secs(3)),
            )
            .meter_provider(&metrics.provider)
            // The lowest session timeout a broker allows by default
            // (`group.min.session.timeout.ms`): a member that leaves is
            // noticed sooner.
            .set("session.timeout.ms", "6000");
        for (k, v) in self.properties() {
            c = c.set(k, v);
        }
        if self.is_mock() {
            // The mock holds an empty fetch for the full wait.
            c = c.set("fetch.wait.max.ms", "10");
        }
        c
    }
}

/// A handler that takes a fixed time per record (an async sleep: a call
/// to a dependency).
pub struct Working(pub Duration);

impl Handler for Working {
    type Error = BoxError;

    async fn handle(&self, _record: Record) -> Result<(), BoxError> {
        tokio::time::sleep(self.0).await;
        Ok(())
    }
}

/// How long a new member of a new group takes from `run_until` to its
/// first assignment (the join and sync round trips, plus the broker's
/// `group.initial.rebalance.delay.ms` for a new group: 3 s by default).
async fn join_time(broker: &Broker) -> Result<Duration, StageError> {
    let (topic, group) = broker.stage("join", 1).await?;
    let run =
        Running::start(broker.consumer(&topic, &group, Working(Duration::ZERO), &Metrics::new()));
    let (_, took) = watch(&run.health, DEADLINE, "the first assignment", |s| {
        s.partitions.len() == 1
    })
    .await?;
    run.stop().await?;
    Ok(took.unwrap_or_default())
}
