//! `fresh-monitor --keda-grpc` as a process, asked as KEDA asks it: what
//! the KEDA tests that run the binary share. Included with
//! `#[path = "keda/process.rs"] mod scaler;` next to the generated client
//! (`mod externalscaler`), so the other test binaries do not compile it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use super::externalscaler::external_scaler_client::ExternalScalerClient;
use super::externalscaler::{GetMetricsRequest, ScaledObjectRef};
use super::support::kafka::TestCluster;
use super::support::wait::within;
use tonic::transport::Channel;

/// The metric name KEDA asks for (the trigger's index, `s0-`, before the
/// scaler's own name).
const METRIC: &str = "s0-fresh-consumer-replicas";

/// A running `fresh-monitor --keda-grpc` (killed when dropped).
pub struct Scaler {
    pub child: tokio::process::Child,
    pub port: u16,
    /// Its standard output, line by line: one summary line per group and
    /// cycle (`group G: diagnosis | members M | lag N | ...`).
    pub lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// One cycle's summary line of a group, as `fresh-monitor` prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub diagnosis: String,
    pub members: String,
    /// Offset lag, summed over the group's partitions.
    pub lag: u64,
    pub max_time_lag: String,
    pub line: String,
}

impl Summary {
    /// The max time lag in seconds, when printed in seconds (under a
    /// minute: `12.3s`).
    pub fn time_lag_secs(&self) -> Option<f64> {
        self.max_time_lag.strip_suffix('s')?.parse().ok()
    }

    /// Parses `group G: diagnosis (named) | members M | lag N | max time lag T | ...`.
    pub fn parse(line: &str, group: &str) -> Option<Summary> {
        let rest = line.strip_prefix(&format!("group {group}: "))?;
        let mut fields = rest.split(" | ");
        let diagnosis = fields.next()?.split(' ').next()?.to_owned();
        let members = fields.next()?.strip_prefix("members ")?.to_owned();
        let lag = fields.next()?.strip_prefix("lag ")?.parse().ok()?;
        let max_time_lag = fields.next()?.strip_prefix("max time lag ")?.to_owned();
        Some(Summary {
            diagnosis,
            members,
            lag,
            max_time_lag,
            line: line.to_owned(),
        })
    }
}

impl Scaler {
    /// Starts the binary at its defaults for `group` on `topic`, on a free
    /// loopback port, with `extra` arguments.
    pub fn spawn(cluster: &TestCluster, group: &str, topic: &str, extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let child = tokio::process::Command::new(super::support::monitor_binary())
            .args(["--bootstrap", cluster.bootstrap(), "--group", group])
            .args([
                "--topic",
                topic,
                "--keda-grpc",
                &format!("127.0.0.1:{port}"),
            ])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start fresh-monitor");
        let mut child = child;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("piped stdout");
        let sink = std::sync::Arc::clone(&lines);
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut reader = tokio::io::BufReader::new(out).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        Scaler { child, port, lines }
    }

    /// The summary lines of `group` printed so far, oldest first.
    pub fn summaries(&self, group: &str) -> Vec<Summary> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| Summary::parse(l, group))
            .collect()
    }

    /// A client, once the server takes connections and `GetMetricSpec`
    /// (the call KEDA makes first, to build the HPA) answers for `o`.
    pub async fn client(&mut self, o: &ScaledObjectRef, wait: Duration) -> Client {
        let port = self.port;
        let child = &mut self.child;
        within(wait, "the scaler answers GetMetricSpec", async {
            loop {
                assert!(child.try_wait().unwrap().is_none(), "fresh-monitor exited");
                if let Ok(mut c) =
                    ExternalScalerClient::connect(format!("http://127.0.0.1:{port}")).await
                    && c.get_metric_spec(o.clone()).await.is_ok()
                {
                    break Client(c);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
    }
}

/// A gRPC client of the scaler.
#[derive(Clone)]
pub struct Client(pub ExternalScalerClient<Channel>);

impl Client {
    /// `IsActive` for `o`, or its error status.
    pub async fn is_active(&mut self, o: &ScaledObjectRef) -> Result<bool, tonic::Status> {
        Ok(self.0.is_active(o.clone()).await?.into_inner().result)
    }

    /// `GetMetrics` for `o`: the replica count asked for.
    pub async fn replicas(&mut self, o: &ScaledObjectRef) -> i64 {
        let r = self
            .0
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(o.clone()),
                metric_name: METRIC.into(),
            })
            .await
            .expect("GetMetrics answers")
            .into_inner();
        r.metric_values[0].metric_value
    }
}

/// What KEDA's own Kafka scaler would ask on `lag` (its default
/// `lagThreshold` 10, `allowIdleConsumers` false): `ceil(lag / 10)`
/// replicas, at most `partitions`; 0 (inactive) without lag.
pub fn kedas_rule(lag: u64, partitions: u64) -> u64 {
    lag.div_ceil(10).min(partitions)
}

/// Prints one row of the README's table of scenarios (issue 45), in the
/// form `SCENARIO | name | KEDA's rule | fresh-monitor | notes |`, for a
/// run's output to be read back.
pub fn scenario_row(name: &str, kedas: &str, ours: &str, notes: &str) {
    println!("SCENARIO | {name} | {kedas} | {ours} | {notes} |");
}

/// A ScaledObject named `name` whose trigger names `group` and `topic`.
pub fn object(name: &str, group: &str, topic: &str) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.into(),
        namespace: "orders".into(),
        scaler_metadata: HashMap::from([
            ("group".to_owned(), group.to_owned()),
            ("topics".to_owned(), topic.to_owned()),
        ]),
    }
}
