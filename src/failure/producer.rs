//! A producer the library owns that replaces itself after a fatal error:
//! the idempotent producer raises one on a sequence desynchronisation
//! (OUT_OF_ORDER_SEQUENCE_NUMBER, ...) and then fails every later write,
//! so retrying on it would block a partition until the process restarts.
//! Shared by the dead-letter writer and the handler outputs.

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, Producer};

pub(crate) struct ReplaceableProducer {
    current: std::sync::Mutex<FutureProducer>,
    config: ClientConfig,
    /// Names the producer in logs (`dead-letter`, `output`).
    what: &'static str,
}

impl ReplaceableProducer {
    pub(crate) fn new(config: ClientConfig, what: &'static str) -> Result<Self, KafkaError> {
        Ok(ReplaceableProducer {
            current: std::sync::Mutex::new(config.create()?),
            config,
            what,
        })
    }

    /// The producer to write on now (a handle to it).
    pub(crate) fn get(&self) -> FutureProducer {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `producer` (a handle from [`Self::get`]) is the current
    /// producer, not one replaced since.
    pub(crate) fn is_current(&self, producer: &FutureProducer) -> bool {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.client().native_ptr() == producer.client().native_ptr()
    }

    /// Replaces the producer with a new one from the same configuration,
    /// whatever its state; returns the old one (the caller drops it, off
    /// any async worker thread: dropping the last handle purges, flushes
    /// and joins its threads).
    pub(crate) fn replace(&self) -> Result<FutureProducer, KafkaError> {
        let fresh = self.config.create::<FutureProducer>()?;
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        Ok(std::mem::replace(&mut *current, fresh))
    }

    /// After a failed write on `failed` (a handle from [`Self::get`]):
    /// when librdkafka raised a fatal error on it, replaces it with a new
    /// producer (unless another write did already), and drops `failed` off
    /// the async runtime (dropping a producer's last handle purges,
    /// flushes for up to 500 ms and joins its threads). Returns `true`
    /// when `failed` is fatal.
    pub(crate) fn replace_if_fatal(&self, failed: FutureProducer) -> bool {
        let Some((code, reason)) = failed.client().fatal_error() else {
            return false;
        };
        {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if current.client().native_ptr() == failed.client().native_ptr() {
                match self.config.create::<FutureProducer>() {
                    Ok(fresh) => {
                        tracing::warn!(
                            ?code,
                            %reason,
                            "the {} producer raised a fatal error; replaced it with a new one",
                            self.what
                        );
                        // Not the last handle: `failed` is one.
                        drop(std::mem::replace(&mut *current, fresh));
                    }
                    Err(e) => tracing::error!(
                        error = %e,
                        "the {} producer raised a fatal error and a new one could not be created",
                        self.what
                    ),
                }
            }
        }
        drop(tokio::task::spawn_blocking(move || drop(failed)));
        true
    }
}
