//! The group monitor as a [KEDA external scaler](https://keda.sh/docs/latest/concepts/external-scalers/):
//! the gRPC service KEDA calls for a ScaledObject's `external` (or
//! `external-push`) trigger. Feature `keda` (part of `cli`;
//! `fresh-monitor --keda-grpc ADDR` serves it).
//!
//! The contract is KEDA's `externalscaler.proto` (`proto/` in this
//! repository); the code generated from it is committed
//! (`keda/externalscaler.rs`) and checked by `tests/keda_proto.rs`.
//!
//! The trigger's `metadata` (KEDA's `scalerMetadata`):
//!
//! | key | required | meaning |
//! |---|---|---|
//! | `group` | yes | the consumer group; one the monitor watches |
//! | `topics` | no | comma-separated topics the group must be watched on (a check) |
//! | `drainTargetSeconds` | no | seconds to drain the backlog in; default the monitor's `--drain-target` |
//!
//! The answers ([`Autoscaler::decide`] gives the rules):
//! - `GetMetricSpec`: one metric, [`METRIC_NAME`], target size 1.
//! - `GetMetrics`: the replica count the group should run. With the target
//!   of 1 per replica (the HPA's `AverageValue`, which KEDA uses for
//!   external triggers by default) the HPA asks for exactly that count
//!   (`ceil(value / 1)`), within its tolerance of 10 %.
//! - `IsActive` / `StreamIsActive`: whether records wait (activation from
//!   and to zero with `minReplicaCount: 0`). The stream sends the current
//!   answer at once and then each change, after each monitor cycle.
//! - `StreamMetricSpec`: `Unimplemented` (the spec never changes; KEDA then
//!   stays on `GetMetricSpec`).
//!
//! A group the monitor does not watch, a topic it does not watch, missing
//! or bad metadata, no cycle yet, or an unknown current replica count: a
//! gRPC error status ([`ScaleError`], `NOT_FOUND`, `INVALID_ARGUMENT`,
//! `UNAVAILABLE`, `FAILED_PRECONDITION`), never a made-up metric; the HPA
//! then keeps the current replica count.

#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
#[rustfmt::skip]
mod externalscaler;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::monitor::report::MonitorReport;
use crate::monitor::scale::{Autoscaler, ScaleError, ScaleRequest};
use externalscaler::external_scaler_server::{ExternalScaler, ExternalScalerServer};
use externalscaler::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};

/// The name of the one metric the scaler serves (KEDA prefixes it with the
/// trigger's index, `s0-`).
pub const METRIC_NAME: &str = "fresh-consumer-replicas";

/// Why the scaler's server stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KedaError {
    /// The gRPC server failed (accepting connections, HTTP/2).
    #[error("the KEDA scaler's gRPC server failed")]
    Serve(#[source] tonic::transport::Error),
}

/// The KEDA external scaler: an [`Autoscaler`] fed by the monitor's cycles
/// ([`observe`](Self::observe)) and served over gRPC ([`serve`](Self::serve)).
/// Cheap to clone (shared state).
#[derive(Clone)]
pub struct KedaScaler {
    autoscaler: Arc<Mutex<Autoscaler>>,
    cycles: Arc<watch::Sender<u64>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for KedaScaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KedaScaler").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl KedaScaler {
    /// A scaler answering from `autoscaler`.
    pub fn new(autoscaler: Autoscaler) -> Self {
        KedaScaler {
            autoscaler: Arc::new(Mutex::new(autoscaler)),
            cycles: Arc::new(watch::channel(0).0),
            stop: CancellationToken::new(),
        }
    }

    /// Takes a cycle's report (call it after each successful
    /// [`Monitor::cycle`](crate::monitor::Monitor::cycle)); open
    /// `StreamIsActive` streams re-check their answer.
    pub fn observe(&self, report: Arc<MonitorReport>) {
        lock(&self.autoscaler).observe(report);
        self.cycles.send_modify(|n| *n += 1);
    }

    /// Serves the gRPC service on `listener` until `shutdown` resolves:
    /// then open streams end, in-flight calls finish, and it returns.
    ///
    /// # Errors
    /// [`KedaError::Serve`] when the server fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), KedaError> {
        let stop = self.stop.clone();
        let signal = async move {
            shutdown.await;
            // Streams end first, so the graceful shutdown does not wait
            // for them.
            stop.cancel();
        };
        tonic::transport::Server::builder()
            .add_service(ExternalScalerServer::new(self))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                signal,
            )
            .await
            .map_err(KedaError::Serve)
    }

    fn decide(
        &self,
        object: &ScaledObjectRef,
    ) -> Result<crate::monitor::scale::ScaleDecision, Status> {
        let request = parse(&object.scaler_metadata)?;
        let key = format!("{}/{}", object.namespace, object.name);
        lock(&self.autoscaler)
            .decide(&key, &request)
            .map_err(status)
    }
}

/// The trigger metadata as a [`ScaleRequest`].
fn parse(metadata: &HashMap<String, String>) -> Result<ScaleRequest, Status> {
    let group = metadata
        .get("group")
        .map(|g| g.trim())
        .filter(|g| !g.is_empty())
        .ok_or_else(|| {
            Status::invalid_argument("trigger metadata needs `group`: the consumer group to scale")
        })?;
    let topics = metadata
        .get("topics")
        .map(|t| {
            t.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let drain_target = match metadata.get("drainTargetSeconds") {
        None => None,
        Some(s) => match s.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Some(Duration::from_secs_f64(v)),
            _ => {
                return Err(Status::invalid_argument(format!(
                    "trigger metadata `drainTargetSeconds` must be seconds above zero, got {s:?}"
                )));
            }
        },
    };
    Ok(ScaleRequest {
        group: group.to_owned(),
        topics,
        drain_target,
    })
}

/// The gRPC status of a scaler error.
fn status(e: ScaleError) -> Status {
    let text = e.to_string();
    match e {
        ScaleError::NotWatched { .. }
        | ScaleError::TopicNotWatched { .. }
        | ScaleError::TopicNotRead { .. } => Status::not_found(text),
        ScaleError::NoReport => Status::unavailable(text),
        ScaleError::CurrentUnknown { .. } => Status::failed_precondition(format!(
            "{text}: the brokers did not describe the group (DescribeGroups failed or was refused: check the monitor's DESCRIBE ACL on the group); start fresh-monitor with --replicas to answer anyway"
        )),
    }
}

#[tonic::async_trait]
impl ExternalScaler for KedaScaler {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        let d = self.decide(request.get_ref())?;
        Ok(Response::new(IsActiveResponse { result: d.active }))
    }

    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<BoxStream<IsActiveResponse>>, Status> {
        let object = request.into_inner();
        // A bad request fails the call, not the stream's first message.
        self.decide(&object)?;
        let state = (self.clone(), object, self.cycles.subscribe(), None::<bool>);
        let stream = futures_util::stream::unfold(Some(state), |state| async move {
            let (scaler, object, mut cycles, mut last) = state?;
            loop {
                if last.is_some() {
                    tokio::select! {
                        changed = cycles.changed() => if changed.is_err() { return None },
                        () = scaler.stop.cancelled() => return None,
                    }
                }
                match scaler.decide(&object) {
                    Ok(d) if last == Some(d.active) => continue,
                    Ok(d) => {
                        last = Some(d.active);
                        let msg = IsActiveResponse { result: d.active };
                        return Some((Ok(msg), Some((scaler, object, cycles, last))));
                    }
                    // The error ends the stream; KEDA opens it again.
                    Err(s) => return Some((Err(s), None)),
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        // A misconfigured trigger fails here, when KEDA builds the HPA;
        // before the first cycle the group cannot be checked yet.
        match self.decide(request.get_ref()) {
            Ok(_) => {}
            Err(s) if s.code() == tonic::Code::Unavailable => {}
            Err(s) => return Err(s),
        }
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: vec![MetricSpec {
                metric_name: METRIC_NAME.to_owned(),
                target_size: 1,
                target_size_float: 1.0,
            }],
        }))
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let request = request.into_inner();
        let object = request.scaled_object_ref.unwrap_or_default();
        let d = self.decide(&object)?;
        let metric_name = if request.metric_name.is_empty() {
            METRIC_NAME.to_owned()
        } else {
            request.metric_name
        };
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name,
                metric_value: i64::from(d.replicas),
                metric_value_float: f64::from(d.replicas),
            }],
        }))
    }
}
