//! A producer the library owns that replaces itself after a fatal error:
//! the idempotent producer raises one on a sequence desynchronisation
//! (OUT_OF_ORDER_SEQUENCE_NUMBER, ...) and then fails every later write,
//! so retrying on it would block a partition until the process restarts.
//! Shared by the dead-letter writer and the handler outputs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};

/// One of the library's producers.
pub(crate) type LibProducer = FutureProducer<ProducerLog>;

/// The library's producers' context: librdkafka's log lines and errors go
/// to `tracing` (target `librdkafka`, secrets redacted), as the
/// consumer's do; and the transactional producer's
/// `InitProducerId` answers `CONCURRENT_TRANSACTIONS` are counted (see
/// [`ReplaceableProducer::init_waits`]).
pub(crate) struct ProducerLog {
    secrets: Arc<[String]>,
    init_waits: Arc<AtomicU64>,
}

impl ClientContext for ProducerLog {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // librdkafka logs (at warning) each InitProducerId the coordinator
        // answered CONCURRENT_TRANSACTIONS, and retries it.
        if fac == "GETPID" && message.contains(concurrent_transactions()) {
            self.init_waits.fetch_add(1, Ordering::Relaxed);
        }
        crate::librdkafka_log::log(&self.secrets, level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let reason = crate::librdkafka_log::redact(&self.secrets, reason);
        tracing::warn!(error = %error, %reason, "librdkafka error (producer)");
    }
}

/// librdkafka's text for CONCURRENT_TRANSACTIONS (what its log lines
/// carry): rdkafka shows an error code as `Name (librdkafka's text)`.
fn concurrent_transactions() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let shown = RDKafkaErrorCode::ConcurrentTransactions.to_string();
        match shown.split_once(" (") {
            Some((_, text)) => text.strip_suffix(')').unwrap_or(text).to_owned(),
            None => shown,
        }
    })
}

pub(crate) struct ReplaceableProducer {
    current: std::sync::Mutex<LibProducer>,
    config: ClientConfig,
    /// Names the producer in logs (`dead-letter`, `output`).
    what: &'static str,
    secrets: Arc<[String]>,
    init_waits: Arc<AtomicU64>,
}

impl ReplaceableProducer {
    /// A producer from `config`, whose log lines are redacted of
    /// `secrets` (secret property values and their parts, longest first).
    pub(crate) fn new(
        config: ClientConfig,
        what: &'static str,
        secrets: Vec<String>,
    ) -> Result<Self, KafkaError> {
        let secrets: Arc<[String]> = secrets.into();
        let init_waits = Arc::new(AtomicU64::new(0));
        let current = create(&config, &secrets, &init_waits)?;
        Ok(ReplaceableProducer {
            current: std::sync::Mutex::new(current),
            config,
            what,
            secrets,
            init_waits,
        })
    }

    fn create(&self) -> Result<LibProducer, KafkaError> {
        create(&self.config, &self.secrets, &self.init_waits)
    }

    /// How many times, so far, the transaction coordinator answered one of
    /// these producers' `InitProducerId` (in `init_transactions`) with
    /// `CONCURRENT_TRANSACTIONS`: it was ending the transaction an earlier
    /// producer with the same `transactional.id` left (aborting it when it
    /// was open), and librdkafka retried.
    pub(crate) fn init_waits(&self) -> u64 {
        self.init_waits.load(Ordering::Relaxed)
    }

    /// The producer to write on now (a handle to it).
    pub(crate) fn get(&self) -> LibProducer {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `producer` (a handle from [`Self::get`]) is the current
    /// producer, not one replaced since.
    pub(crate) fn is_current(&self, producer: &LibProducer) -> bool {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current.client().native_ptr() == producer.client().native_ptr()
    }

    /// Replaces the producer with a new one from the same configuration,
    /// whatever its state; returns the old one (the caller drops it, off
    /// any async worker thread: dropping the last handle purges, flushes
    /// and joins its threads).
    pub(crate) fn replace(&self) -> Result<LibProducer, KafkaError> {
        let fresh = self.create()?;
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        Ok(std::mem::replace(&mut *current, fresh))
    }

    /// After a failed write on `failed` (a handle from [`Self::get`]):
    /// when librdkafka raised a fatal error on it, replaces it with a new
    /// producer (unless another write did already), and drops `failed` off
    /// the async runtime (dropping a producer's last handle purges,
    /// flushes for up to 500 ms and joins its threads). Returns `true`
    /// when `failed` is fatal.
    pub(crate) fn replace_if_fatal(&self, failed: LibProducer) -> bool {
        let Some((code, reason)) = failed.client().fatal_error() else {
            return false;
        };
        {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if current.client().native_ptr() == failed.client().native_ptr() {
                match self.create() {
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

fn create(
    config: &ClientConfig,
    secrets: &Arc<[String]>,
    init_waits: &Arc<AtomicU64>,
) -> Result<LibProducer, KafkaError> {
    config.create_with_context(ProducerLog {
        secrets: Arc::clone(secrets),
        init_waits: Arc::clone(init_waits),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn concurrent_transactions_is_librdkafkas_text() {
        assert_eq!(
            super::concurrent_transactions(),
            "Broker: Producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing"
        );
    }
}
