//! The KEDA external scaler (`fresh_consumer::monitor::keda`, served by
//! `fresh-monitor --keda-grpc`) asked over gRPC by a client generated from
//! the same proto (proto/externalscaler.proto; tests/keda/externalscaler.rs,
//! checked by tests/keda_proto.rs), as KEDA asks it:
//! - the seeds' five scenarios (the reports the monitor chapter's comparison table
//!   comes from): only the consumer-bound group scales, in one step; the
//!   skewed, stuck and dead ones hold with the reason in
//!   `fresh_consumer.monitor.scale.held`;
//! - errors, never a made-up metric: an unwatched group, a bad trigger, no
//!   cycle yet, an unknown replica count; `StreamMetricSpec` unimplemented;
//! - a live monitor on the embedded broker and on a real cluster
//!   (`FRESH_CONSUMER_TEST_BOOTSTRAP`): `StreamIsActive` sends the current
//!   answer at once and each change after a cycle, and a group whose
//!   commits froze under traffic is held as dead;
//! - on a real cluster only (DescribeGroups): a member joining holds the
//!   count as `rebalancing` until the member count is stable;
//! - the `fresh-monitor` binary with `--keda-grpc`.

mod support;

#[allow(clippy::all, clippy::pedantic, dead_code, missing_docs, unreachable_pub)]
#[rustfmt::skip]
#[path = "keda/externalscaler.rs"]
mod externalscaler;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use externalscaler::external_scaler_client::ExternalScalerClient;
use externalscaler::{GetMetricsRequest, ScaledObjectRef};
use fresh_consumer::metrics::{
    MESSAGING_CONSUMER_GROUP_NAME, MONITOR_SCALE_HELD, MONITOR_SCALE_REPLICAS, SCALE_HOLD_REASON,
};
use fresh_consumer::monitor::keda::{KedaScaler, METRIC_NAME};
use fresh_consumer::monitor::scale::{Autoscaler, ScalePolicy};
use fresh_consumer::monitor::{Diagnosis, GroupMonitor, Monitor, Scaling};
use fresh_consumer::testing::{TestMetrics, monitor_scenarios};
use support::kafka::TestCluster;
use support::wait::within;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(30);

/// Serves `scaler` on a loopback port; the client, and the token that
/// stops the server.
async fn serve(scaler: KedaScaler) -> (ExternalScalerClient<Channel>, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(scaler.serve(listener, stop.clone().cancelled_owned()));
    let client = ExternalScalerClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the scaler");
    (client, stop)
}

/// A ScaledObject's reference with trigger metadata `meta`.
fn object(name: &str, meta: &[(&str, &str)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.into(),
        namespace: "orders".into(),
        scaler_metadata: meta
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>(),
    }
}

/// `GetMetrics` as KEDA asks it: the replica count, or the error status.
async fn replicas(
    client: &mut ExternalScalerClient<Channel>,
    o: &ScaledObjectRef,
) -> Result<i64, tonic::Status> {
    let r = client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(o.clone()),
            metric_name: METRIC_NAME.into(),
        })
        .await?
        .into_inner();
    assert_eq!(r.metric_values.len(), 1, "{r:?}");
    let v = &r.metric_values[0];
    assert_eq!(v.metric_name, METRIC_NAME);
    assert_eq!(v.metric_value_float, v.metric_value as f64, "{v:?}");
    Ok(v.metric_value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_five_scenarios_scale_only_the_consumer_bound_group_in_one_step() {
    let metrics = TestMetrics::new();
    let meter = opentelemetry::metrics::MeterProvider::meter(metrics.provider(), "test");
    let scaler = KedaScaler::new(
        Autoscaler::new(ScalePolicy::new().current_replicas(2), Some(&meter)).unwrap(),
    );
    let report = monitor_scenarios();
    // Two cycles: a scale-up needs the backlog to persist past one.
    scaler.observe(Arc::new(report.clone()));
    scaler.observe(Arc::new(report.clone()));
    let (mut client, stop) = serve(scaler).await;

    let mut table = String::from(
        "| group | diagnosis | replicas asked (2 now, 8 partitions) |\n|---|---|---|\n",
    );
    for g in &report.groups {
        let o = object(&g.group, &[("group", &g.group), ("topics", "orders")]);
        let spec = client
            .get_metric_spec(o.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(spec.metric_specs.len(), 1);
        assert_eq!(spec.metric_specs[0].metric_name, METRIC_NAME);
        assert_eq!(
            (
                spec.metric_specs[0].target_size,
                spec.metric_specs[0].target_size_float
            ),
            (1, 1.0)
        );
        assert!(
            client
                .is_active(o.clone())
                .await
                .unwrap()
                .into_inner()
                .result
        );
        let n = replicas(&mut client, &o).await.unwrap();
        table.push_str(&format!(
            "| {} | {} | {n} |\n",
            g.group,
            g.diagnosis.as_str()
        ));
        let held = |reason: &str| {
            metrics.gauge(
                MONITOR_SCALE_HELD,
                [
                    (MESSAGING_CONSUMER_GROUP_NAME, g.group.as_str()),
                    (SCALE_HOLD_REASON, reason),
                ],
            )
        };
        metrics.flush().await.unwrap();
        match g.diagnosis {
            Diagnosis::ConsumerBound => {
                let Scaling::Suggest {
                    replicas: Some(want),
                    ..
                } = g.scaling
                else {
                    panic!("{:?}", g.scaling)
                };
                assert_eq!(n, i64::from(want), "one step, to the monitor's suggestion");
                assert!(n > 2 && n <= 8, "{n}");
                for r in ["rebalancing", "skewed", "stuck", "dead"] {
                    assert_eq!(held(r), vec![0.0], "{r}");
                }
            }
            Diagnosis::KeepingUp => assert_eq!(n, 2, "the burst is seconds old"),
            d => {
                assert_eq!(n, 2, "{}: holds", g.group);
                assert_eq!(held(d.as_str()), vec![1.0], "{}", g.group);
                assert_eq!(held("rebalancing"), vec![0.0]);
            }
        }
        assert_eq!(
            metrics.gauge(
                MONITOR_SCALE_REPLICAS,
                [(MESSAGING_CONSUMER_GROUP_NAME, g.group.as_str())]
            ),
            vec![n as f64]
        );
    }
    println!("{table}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwatched_group_a_bad_trigger_no_cycle_and_no_count_are_errors() {
    // No fallback replica count: the scenarios' groups have no described
    // members.
    let scaler = KedaScaler::new(Autoscaler::new(ScalePolicy::new(), None).unwrap());
    let (mut client, stop) = serve(scaler.clone()).await;
    let slow = object("slow", &[("group", "evenly-loaded")]);
    // Before the first cycle: unavailable, but the spec can be built.
    assert_eq!(
        replicas(&mut client, &slow).await.unwrap_err().code(),
        Code::Unavailable
    );
    assert_eq!(
        client.is_active(slow.clone()).await.unwrap_err().code(),
        Code::Unavailable
    );
    assert!(client.get_metric_spec(slow.clone()).await.is_ok());

    scaler.observe(Arc::new(monitor_scenarios()));
    let unwatched = object("x", &[("group", "not-watched")]);
    for e in [
        replicas(&mut client, &unwatched).await.unwrap_err(),
        client.is_active(unwatched.clone()).await.unwrap_err(),
        client.get_metric_spec(unwatched.clone()).await.unwrap_err(),
    ] {
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert!(e.message().contains("not-watched"), "{e:?}");
    }
    let topic = object(
        "x",
        &[("group", "evenly-loaded"), ("topics", "orders,payments")],
    );
    assert_eq!(
        replicas(&mut client, &topic).await.unwrap_err().code(),
        Code::NotFound
    );
    for bad in [
        object("x", &[]),
        object("x", &[("group", " ")]),
        object(
            "x",
            &[("group", "evenly-loaded"), ("drainTargetSeconds", "0")],
        ),
        object(
            "x",
            &[("group", "evenly-loaded"), ("drainTargetSeconds", "soon")],
        ),
    ] {
        let e = replicas(&mut client, &bad).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {e:?}");
    }
    // Consumer-bound, but neither the brokers nor the flags give the count.
    let e = replicas(&mut client, &slow).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("--replicas"), "{e:?}");
    // KEDA's optional RPC: unimplemented, so KEDA stays on GetMetricSpec.
    let e = client.stream_metric_spec(slow.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    stop.cancel();
}

/// A live monitor feeding the scaler every 250 ms, as `fresh-monitor
/// --keda-grpc` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_monitor_streams_is_active_and_holds_a_dead_group() {
    support::logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("keda-live", 2).await;
    cluster.produce_many(&topic, 2, 10).await;
    for p in 0..2 {
        cluster.commit_offset(&group, &topic, p, 10).await;
    }
    let mut monitor = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(&group)
        .topics([topic.as_str()])
        .interval(Duration::from_millis(250))
        .window(Duration::from_secs(2))
        .stall_after(Duration::from_millis(750))
        .lag_threshold(Duration::from_secs(1))
        .request_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect");
    let reports = monitor.handle();
    let metrics = TestMetrics::new();
    let meter = opentelemetry::metrics::MeterProvider::meter(metrics.provider(), "test");
    let scaler = KedaScaler::new(
        Autoscaler::new(ScalePolicy::new().current_replicas(2), Some(&meter)).unwrap(),
    );
    let feeding = {
        let scaler = scaler.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                if let Ok(r) = monitor.cycle().await {
                    scaler.observe(Arc::new(r));
                }
            }
        })
    };
    let (mut client, stop) = serve(scaler).await;
    let o = object(
        "live",
        &[("group", group.as_str()), ("topics", topic.as_str())],
    );
    within(WAIT, "a first cycle", async {
        while replicas(&mut client, &o).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // Caught up: not active, the current count.
    assert!(
        !client
            .is_active(o.clone())
            .await
            .unwrap()
            .into_inner()
            .result
    );
    assert_eq!(replicas(&mut client, &o).await.unwrap(), 2);
    let mut stream = client
        .stream_is_active(o.clone())
        .await
        .unwrap()
        .into_inner();
    let first = within(WAIT, "the stream's first message", stream.message()).await;
    assert!(
        !first.unwrap().unwrap().result,
        "sent at once: nothing waits"
    );

    // Records arrive and nobody commits: active at the next cycle ...
    cluster.produce_many(&topic, 2, 5).await;
    let next = within(WAIT, "the stream's next message", stream.message()).await;
    assert!(next.unwrap().unwrap().result, "records wait");
    // ... and, with records still arriving on frozen commits, dead: held.
    let producing = {
        let cluster_bootstrap = cluster.bootstrap().to_owned();
        let topic = topic.clone();
        tokio::spawn(async move {
            let kafka = fresh_consumer::testing::TestKafka::connect(cluster_bootstrap).unwrap();
            loop {
                let _ = kafka
                    .produce(&topic, fresh_consumer::testing::TestRecord::new("v"))
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // The group has committed offsets but no member. A real broker
    // describes it so (`Empty`, 0 members): dead to the monitor, but the
    // scaler does not hold it, since starting consumers is the fix; it
    // stays active at the count served. The embedded broker does not
    // describe groups: the frozen commits make it dead, and held.
    let empty = cluster.is_real();
    within(WAIT, "the dead group answered at 2", async {
        loop {
            let n = replicas(&mut client, &o).await.unwrap();
            metrics.flush().await.unwrap();
            let dead = metrics.gauge(
                MONITOR_SCALE_HELD,
                [
                    (MESSAGING_CONSUMER_GROUP_NAME, group.as_str()),
                    (SCALE_HOLD_REASON, "dead"),
                ],
            );
            let diagnosis = reports
                .latest()
                .and_then(|r| r.groups.first().map(|g| (g.diagnosis, g.members)));
            let done = if empty {
                diagnosis == Some((Diagnosis::Dead, Some(0))) && dead == vec![0.0]
            } else {
                dead == vec![1.0]
            };
            if done {
                assert_eq!(n, 2, "answered at the current count");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        client
            .is_active(o.clone())
            .await
            .unwrap()
            .into_inner()
            .result
    );
    producing.abort();
    feeding.abort();
    stop.cancel();
}

/// `fresh-monitor --keda-grpc ADDR` as a process: it answers KEDA's calls
/// for the watched group, an error for another, and on SIGTERM it ends the
/// open `StreamIsActive` stream and exits 0. A scale-down point at or above
/// the lag threshold is refused with exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_the_scaler_and_stops_on_sigterm() {
    support::logs::init();
    let bin = support::monitor_binary();
    let (cluster, topic, group) = TestCluster::with_topic("keda-bin", 2).await;
    cluster.produce_many(&topic, 2, 10).await;
    for p in 0..2 {
        cluster.commit_offset(&group, &topic, p, 10).await;
    }
    let bad = tokio::process::Command::new(&bin)
        .args([
            "--bootstrap",
            cluster.bootstrap(),
            "--group",
            &group,
            "--topic",
            &topic,
        ])
        .args([
            "--keda-grpc",
            "127.0.0.1:0",
            "--lag-threshold",
            "10",
            "--scale-down-lag",
            "10",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--scale-down-lag"));

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(&bin)
        .args([
            "--bootstrap",
            cluster.bootstrap(),
            "--group",
            &group,
            "--topic",
            &topic,
        ])
        .args([
            "--keda-grpc",
            &format!("127.0.0.1:{port}"),
            "--interval",
            "0.3",
        ])
        .args(["--window", "3", "--replicas", "2"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start fresh-monitor");
    let o = object("bin", &[("group", group.as_str())]);
    let mut client = within(WAIT, "the scaler answers", async {
        loop {
            assert!(child.try_wait().unwrap().is_none(), "fresh-monitor exited");
            if let Ok(mut c) =
                ExternalScalerClient::connect(format!("http://127.0.0.1:{port}")).await
                && replicas(&mut c, &o).await.is_ok()
            {
                break c;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(replicas(&mut client, &o).await.unwrap(), 2);
    let e = replicas(&mut client, &object("x", &[("group", "another")]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let mut stream = client
        .stream_is_active(o.clone())
        .await
        .unwrap()
        .into_inner();
    let first = within(WAIT, "the stream's first message", stream.message()).await;
    assert!(!first.unwrap().unwrap().result);

    let pid = child.id().expect("pid").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = within(WAIT, "exit after SIGTERM", child.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    // The stream ended with the server.
    let end = within(WAIT, "the stream's end", stream.message()).await;
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
}

/// On Apache Kafka (the embedded broker does not describe groups): a second
/// consumer joining a running group is a rebalance, and the scaler holds
/// with reason `rebalancing` (the member count changed between two cycles,
/// or DescribeGroups said PreparingRebalance/CompletingRebalance), then
/// lets go once the count is stable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joining_holds_the_count_as_rebalancing_on_a_real_cluster() {
    support::logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("keda-rebalance", 4).await;
    if !cluster.is_real() {
        eprintln!("skipped: needs a real cluster (DescribeGroups)");
        return;
    }
    cluster.produce_many(&topic, 4, 5).await;
    let ok = |_r: fresh_consumer::Record| async { Ok::<(), std::io::Error>(()) };
    let stop = CancellationToken::new();
    let first = tokio::spawn(
        cluster
            .consumer(&group, &topic, ok)
            .run_until(stop.clone().cancelled_owned()),
    );
    let mut monitor = GroupMonitor::new()
        .bootstrap_servers(cluster.bootstrap())
        .group(&group)
        .topics([topic.as_str()])
        .interval(Duration::from_millis(250))
        .window(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let metrics = TestMetrics::new();
    let meter = opentelemetry::metrics::MeterProvider::meter(metrics.provider(), "test");
    let scaler = KedaScaler::new(Autoscaler::new(ScalePolicy::new(), Some(&meter)).unwrap());
    // The test runs the monitor's cycles itself, one per look: every
    // report is decided on before the next one replaces it (a feeder task
    // could observe the report whose member count changed and the next
    // stable one back to back, and the hold would never be asked for).
    let mut members = None::<u32>;
    let (mut client, server) = serve(scaler.clone()).await;
    let o = object("rebalance", &[("group", group.as_str())]);
    let rebalancing = |m: &TestMetrics| {
        m.gauge(
            MONITOR_SCALE_HELD,
            [
                (MESSAGING_CONSUMER_GROUP_NAME, group.as_str()),
                (SCALE_HOLD_REASON, "rebalancing"),
            ],
        )
    };
    // One member, stable: its count, not held.
    within(WAIT, "one stable member, answered 1", async {
        loop {
            feed(&mut monitor, &scaler, &mut members).await;
            if members == Some(1) && replicas(&mut client, &o).await.is_ok_and(|n| n == 1) {
                metrics.flush().await.unwrap();
                if rebalancing(&metrics) == vec![0.0] {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let second = tokio::spawn(
        cluster
            .consumer(&group, &topic, ok)
            .run_until(stop.clone().cancelled_owned()),
    );
    // The report in which the count changed (or a group state of
    // PreparingRebalance / CompletingRebalance) is held: each is asked for.
    within(WAIT, "held as rebalancing", async {
        loop {
            feed(&mut monitor, &scaler, &mut members).await;
            let n = replicas(&mut client, &o).await.unwrap();
            metrics.flush().await.unwrap();
            if rebalancing(&metrics) == vec![1.0] {
                assert_eq!(n, 1, "held at the last answer");
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    within(WAIT, "two stable members, no longer held", async {
        loop {
            feed(&mut monitor, &scaler, &mut members).await;
            let _ = replicas(&mut client, &o).await;
            metrics.flush().await.unwrap();
            if members == Some(2) && rebalancing(&metrics) == vec![0.0] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    stop.cancel();
    let _ = first.await;
    let _ = second.await;
    server.cancel();
}

/// One monitor cycle handed to the scaler; `members` takes the group's
/// member count when the cycle read it (a failed cycle changes nothing).
async fn feed(monitor: &mut Monitor, scaler: &KedaScaler, members: &mut Option<u32>) {
    if let Ok(r) = monitor.cycle().await {
        *members = r.groups[0].members;
        scaler.observe(Arc::new(r));
    }
}
