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
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start fresh-monitor");
        Scaler { child, port }
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
