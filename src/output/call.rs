//! The library's output producer, and one handler call's outputs: the
//! handle's task-local context, the queued outputs, and the wait for their
//! acknowledgements.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureRecord};

use super::config::OutputConfig;
use super::error::OutputError;
use super::message::{ORIGIN_TIME_HEADER, Output};
use crate::failure::producer::{LibProducer, ReplaceableProducer};
use crate::metrics::instruments::{Instruments, kafka_error_name_of};

tokio::task_local! {
    /// The output context of the handler call being polled.
    static CALL: Arc<Call>;
}

/// The output context of the handler call being polled, if any.
pub(super) fn current() -> Option<Arc<Call>> {
    CALL.try_with(Arc::clone).ok()
}

/// How long a send waits before it tries again while librdkafka's queue
/// is full (`queue.buffering.max.messages`/`.kbytes`).
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(10);

/// The library's one producer for handler outputs, replaced by a new one
/// after librdkafka raised a fatal error on it.
pub(crate) struct OutputProducer {
    producer: ReplaceableProducer,
    instruments: Instruments,
    /// A transactional producer (`OutputConfig::transactional_id`): never
    /// replaced (a fatal error on it is a fence, which ends the run), and
    /// its calls do not wait for acknowledgements (the transaction's
    /// commit does).
    transactional: bool,
}

impl OutputProducer {
    /// The producer's configuration: the consumer's connection and security
    /// properties, `message.timeout.ms` 30 s (at most a transactional
    /// producer's `transaction.timeout.ms`) and `linger.ms` 0 unless set, the user's
    /// properties (checked by [`OutputConfig::check`]), then `acks=all` and
    /// idempotence over any alias.
    pub(crate) fn producer_config(
        consumer_properties: &[(String, String)],
        config: &OutputConfig,
    ) -> ClientConfig {
        let mut cc = ClientConfig::new();
        for (k, v) in consumer_properties
            .iter()
            .filter(|(k, _)| crate::failure::inherited_by_producers(k))
        {
            cc.set(k, v);
        }
        // librdkafka refuses a transactional producer whose
        // `message.timeout.ms` exceeds its `transaction.timeout.ms`.
        let transaction_timeout = config
            .producer_properties
            .iter()
            .rev()
            .find(|(k, _)| k == "transaction.timeout.ms")
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .filter(|_| config.transactional_id.is_some());
        let message_timeout = transaction_timeout.map_or(30_000, |t| t.min(30_000));
        cc.set("message.timeout.ms", message_timeout.to_string());
        // The attempt waits for its outputs' acknowledgements, so the
        // partition's next record waits too: librdkafka's default linger
        // of 5 ms added to every record (benches/outputs.rs: about 700
        // records/s over 4 partitions, against 7,000-60,000 without it).
        // What is queued while a request is in flight still goes in one
        // batch.
        cc.set("linger.ms", "0");
        for (k, v) in &config.producer_properties {
            cc.set(k, v);
        }
        cc.set("acks", "all");
        cc.set("enable.idempotence", "true");
        if let Some(id) = &config.transactional_id {
            cc.set("transactional.id", id);
        }
        cc
    }

    /// The producer from `config`; its librdkafka log lines are redacted of
    /// `secrets`.
    pub(crate) fn new(
        config: ClientConfig,
        instruments: Instruments,
        secrets: Vec<String>,
    ) -> Result<Self, KafkaError> {
        let transactional = config.get("transactional.id").is_some();
        Ok(OutputProducer {
            producer: ReplaceableProducer::new(config, "output", secrets)?,
            instruments,
            transactional,
        })
    }

    /// The producer (a handle to it): what the transactions run on.
    pub(crate) fn handle(&self) -> LibProducer {
        self.producer.get()
    }

    /// Replaces a transactional producer that turned fatal with a new one
    /// (the caller initialises its transactions); returns the old one.
    pub(crate) fn replace(&self) -> Result<LibProducer, KafkaError> {
        self.producer.replace()
    }

    /// See [`ReplaceableProducer::init_waits`].
    pub(crate) fn init_waits(&self) -> u64 {
        self.producer.init_waits()
    }

    /// Whether the producer is transactional.
    pub(crate) fn is_transactional(&self) -> bool {
        self.transactional
    }

    /// After a failed write on `sender`: replaces a non-transactional
    /// producer that turned fatal (a transactional one's fatal error is
    /// the transactions' to handle: it ends the run).
    fn after_failure(&self, sender: LibProducer) {
        if !self.transactional {
            self.producer.replace_if_fatal(sender);
        }
    }

    /// Counts one output in `messaging.client.sent.messages`.
    fn sent(&self, topic: &str, error: Option<&KafkaError>) {
        self.instruments
            .output_sent(topic, error.map(kafka_error_name_of));
    }
}

/// One handler call's outputs: what they carry (origin time, trace
/// context) and the ones queued and not yet acknowledged.
pub(crate) struct Call {
    producer: Arc<OutputProducer>,
    /// The producer handle this call's outputs are queued on (replaced
    /// after its outputs' answers when it turned out fatal). `None` only
    /// while the call is dropped.
    sender: Option<LibProducer>,
    origin_ms: Option<i64>,
    trace: Vec<(String, String)>,
    state: Mutex<State>,
}

struct State {
    /// `false` once the call ended: sends fail with
    /// [`OutputError::CallEnded`].
    open: bool,
    pending: Vec<(String, DeliveryFuture)>,
    /// Outputs queued by the call so far.
    sent: usize,
    /// librdkafka refused an output because the open transaction failed
    /// ([`OutputError::TransactionFailed`]).
    refused: bool,
}

impl Call {
    /// A call whose outputs carry `origin_ms` and the `trace` headers
    /// (the propagator's fields of the process span; empty without
    /// tracing).
    pub(crate) fn new(
        producer: &Arc<OutputProducer>,
        origin_ms: Option<i64>,
        trace: Vec<(String, String)>,
    ) -> Arc<Self> {
        Arc::new(Call {
            producer: Arc::clone(producer),
            sender: Some(producer.producer.get()),
            origin_ms,
            trace,
            state: Mutex::new(State {
                open: true,
                pending: Vec::new(),
                sent: 0,
                refused: false,
            }),
        })
    }

    /// `fut` with this call as the handle [`super::outputs`] returns.
    pub(crate) fn scope<F: Future>(self: &Arc<Self>, fut: F) -> impl Future<Output = F::Output> {
        CALL.scope(Arc::clone(self), fut)
    }

    fn sender(&self) -> &LibProducer {
        self.sender.as_ref().expect("set until the call is dropped")
    }

    pub(super) fn origin_ms(&self) -> Option<i64> {
        self.origin_ms
    }

    pub(super) async fn send(&self, output: Output) -> Result<(), OutputError> {
        if output.topic.trim().is_empty() {
            return Err(OutputError::EmptyTopic);
        }
        let has = |name: &str| output.headers.iter().any(|(k, _)| k == name);
        let mut headers =
            OwnedHeaders::new_with_capacity(output.headers.len() + 1 + self.trace.len());
        for (key, value) in &output.headers {
            headers = headers.insert(KafkaHeader {
                key,
                value: value.as_deref(),
            });
        }
        let origin = self.origin_ms.map(|ms| ms.to_string());
        if let Some(origin) = &origin
            && !has(ORIGIN_TIME_HEADER)
        {
            headers = headers.insert(KafkaHeader {
                key: ORIGIN_TIME_HEADER,
                value: Some(origin.as_bytes()),
            });
        }
        for (key, value) in &self.trace {
            if !has(key) {
                headers = headers.insert(KafkaHeader {
                    key,
                    value: Some(value.as_bytes()),
                });
            }
        }
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&output.topic).headers(headers);
        if let Some(k) = &output.key {
            record = record.key(k);
        }
        if let Some(p) = &output.payload {
            record = record.payload(p);
        }
        if let Some(p) = output.partition {
            record = record.partition(p);
        }
        if let Some(ts) = output.timestamp_ms {
            record = record.timestamp(ts);
        }
        loop {
            // Checked and queued under one lock: an output queued before
            // the call ended is one the end waits for.
            record = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if !state.open {
                    return Err(OutputError::CallEnded);
                }
                match self.sender().send_result(record) {
                    Ok(delivery) => {
                        state.sent += 1;
                        state.pending.push((output.topic.clone(), delivery));
                        return Ok(());
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => r,
                    Err((error, _)) => {
                        self.producer.sent(&output.topic, Some(&error));
                        if self.producer.transactional && refused_by_transaction(&error) {
                            state.refused = true;
                            return Err(OutputError::TransactionFailed {
                                topic: output.topic.clone(),
                                error,
                            });
                        }
                        self.producer.after_failure(self.sender().clone());
                        return Err(OutputError::Queue {
                            topic: output.topic.clone(),
                            error,
                        });
                    }
                }
            };
            tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
        }
    }

    /// How many outputs the call queued (in transactional mode: wrote into
    /// the open transaction).
    pub(crate) fn sent(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).sent
    }

    /// Whether librdkafka refused one of the call's outputs because the
    /// open transaction failed: the call's result says nothing about its
    /// record (the transaction must be aborted, its partitions rewound).
    pub(crate) fn refused(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).refused
    }

    /// Ends the call and takes its outputs not yet settled.
    fn close(&self) -> Vec<(String, DeliveryFuture)> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.open = false;
        std::mem::take(&mut state.pending)
    }

    /// Ends the call and waits for the broker's answer on each of its
    /// outputs (each counted in `messaging.client.sent.messages`): the
    /// first failure, if any.
    /// With a transactional producer it does not wait: the transaction's
    /// commit flushes the outputs and fails (and aborts) when one failed;
    /// they are counted as they settle, as [`Self::abandon`] does.
    pub(crate) async fn acked(&self) -> Result<(), OutputError> {
        if self.producer.transactional {
            self.abandon();
            return Ok(());
        }
        let mut first = None;
        for (topic, delivery) in self.close() {
            let result = settle(delivery).await;
            self.producer.sent(&topic, result.as_ref().err());
            if let Err(error) = result
                && first.is_none()
            {
                first = Some(OutputError::Delivery { topic, error });
            }
        }
        if first.is_some() {
            self.producer.after_failure(self.sender().clone());
        }
        first.map_or(Ok(()), Err)
    }

    /// Ends the call without waiting (its attempt failed): the outputs
    /// still in flight are counted when they settle, in a task of their
    /// own. Nothing happens when [`Self::acked`] ended it already.
    pub(crate) fn abandon(&self) {
        let pending = self.close();
        if pending.is_empty() {
            return;
        }
        let (producer, sender) = (Arc::clone(&self.producer), self.sender().clone());
        tokio::spawn(async move {
            let mut failed = false;
            for (topic, delivery) in pending {
                let result = settle(delivery).await;
                producer.sent(&topic, result.as_ref().err());
                failed |= result.is_err();
            }
            if failed {
                producer.after_failure(sender);
            }
        });
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // After a fatal error replaced the producer, this may be the last
        // handle of the old one: dropping it purges, flushes (up to
        // 500 ms) and joins its threads, so not on an async worker thread.
        if let Some(sender) = self.sender.take()
            && !self.producer.producer.is_current(&sender)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            drop(runtime.spawn_blocking(move || drop(sender)));
        }
    }
}

/// Whether a transactional producer refused an output because of its
/// transaction's state: `_STATE` while the transaction is in librdkafka's
/// abortable state (a write into it failed), `_FATAL` after a fatal error.
fn refused_by_transaction(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::State | RDKafkaErrorCode::Fatal)
    )
}

async fn settle(delivery: DeliveryFuture) -> Result<(), KafkaError> {
    match delivery.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(e),
        // The producer dropped the delivery report: never acknowledged.
        Err(_) => Err(KafkaError::Canceled),
    }
}
