//! A group scaled to zero, asked about the way KEDA asks (issue 45, item 1),
//! with `fresh-monitor --keda-grpc` as a process at its **default**
//! settings (no `--replicas`, the default interval and window), on a group
//! a real consumer joined, consumed and left (the brokers then describe it
//! as `Empty`, 0 members):
//! - KEDA builds the HPA (`GetMetricSpec`) and polls `IsActive`: an empty
//!   group with nothing to read stays inactive, and `GetMetrics` answers
//!   (it used to fail every call with FAILED_PRECONDITION);
//! - the producer starts again: `IsActive` turns true within one cycle and
//!   `GetMetrics` asks for one replica (activation from zero);
//! - the one-shot report at its defaults calls the same group `dead` from
//!   its first sample, naming the missing members.
//!
//! On Apache Kafka only: the embedded broker does not describe groups
//! (DescribeGroups), so a group's member count is unknown there.

mod support;

#[allow(clippy::all, clippy::pedantic, dead_code, missing_docs, unreachable_pub)]
#[rustfmt::skip]
#[path = "keda/externalscaler.rs"]
mod externalscaler;
#[path = "keda/process.rs"]
mod scaler;

use std::time::{Duration, Instant};

use fresh_consumer::Record;
use scaler::{Scaler, object};
use support::kafka::TestCluster;
use support::wait::{wait_until, within};

const WAIT: Duration = Duration::from_secs(60);
/// `fresh-monitor`'s default `--interval`.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_scaled_to_zero_activates_when_records_arrive() {
    support::logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("keda-zero", 3).await;
    if !cluster.is_real() {
        eprintln!(
            "skipped: needs a broker that describes groups (DescribeGroups); the embedded one does not"
        );
        return;
    }
    // A real member consumes everything and leaves: the group is `Empty`.
    cluster.produce_many(&topic, 3, 10).await;
    let handled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&handled);
    let consumer = cluster.consumer(&group, &topic, move |_r: Record| {
        let seen = std::sync::Arc::clone(&seen);
        async move {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<(), std::io::Error>(())
        }
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(consumer.run_until(stop.clone().cancelled_owned()));
    cluster.wait_committed(&group, &topic, &[10, 10, 10]).await;
    stop.cancel();
    run.await.unwrap().expect("the consumer ran");

    let mut monitor = Scaler::spawn(&cluster, &group, &topic, &[]);
    let o = object("orders-consumer", &group, &topic);
    // KEDA's order: the HPA is built from GetMetricSpec, then IsActive is
    // polled; GetMetrics only once active.
    let mut client = monitor.client(&o, WAIT).await;
    // Until the first cycle IsActive is UNAVAILABLE; then it answers.
    let first = within(WAIT, "IsActive answers after the first cycle", async {
        loop {
            match client.is_active(&o).await {
                Ok(active) => break Some(active),
                Err(e) => assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(
        first,
        Some(false),
        "an empty group with nothing to read is inactive"
    );
    assert_eq!(
        client.replicas(&o).await,
        1,
        "GetMetrics for an empty group"
    );

    // The producer starts again: active within one cycle.
    cluster.produce_many(&topic, 3, 5).await;
    let produced = Instant::now();
    wait_until(
        DEFAULT_INTERVAL * 2 + Duration::from_secs(5),
        "IsActive true after records arrived",
        || {
            let mut c = client.clone();
            let o = o.clone();
            async move { c.is_active(&o).await.expect("IsActive answers") }
        },
    )
    .await;
    let activated_after = produced.elapsed();
    assert_eq!(client.replicas(&o).await, 1, "one replica from zero");
    let spec = client
        .0
        .get_metric_spec(o.clone())
        .await
        .expect("GetMetricSpec");
    assert_eq!(spec.into_inner().metric_specs.len(), 1);

    // The one-shot report at its defaults: dead from its first sample.
    let out = tokio::process::Command::new(support::monitor_binary())
        .args(["--bootstrap", cluster.bootstrap(), "--group", &group])
        .args(["--topic", &topic, "--json"])
        .output()
        .await
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let g = &json["groups"][0];
    assert_eq!(g["diagnosis"], "dead", "{g:#}");
    assert_eq!(g["members"], 0, "{g:#}");
    assert!(
        g.to_string().contains("no members while records wait"),
        "{g:#}"
    );
    eprintln!(
        "empty group: inactive with nothing to read, active {activated_after:?} after 15 records \
         arrived (default interval {DEFAULT_INTERVAL:?}), 1 replica asked; one-shot: dead"
    );
    scaler::scenario_row(
        "empty group (its consumer left, 0 members), nothing to read",
        "0 (inactive)",
        "inactive; 1 when asked",
        "idle",
    );
    scaler::scenario_row(
        "the same empty group, 15 records arrive",
        &format!("{} (active)", scaler::kedas_rule(15, 3)),
        "active, 1",
        &format!("active {activated_after:.1?} after the records; one-shot: dead (no members)"),
    );
    let _ = monitor.child.start_kill();
}
