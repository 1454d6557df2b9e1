//! Why an output failed ([`OutputError`]).

use rdkafka::error::KafkaError;

/// Why an output could not be sent or was not acknowledged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// [`outputs()`](super::outputs) was called outside a handler call, or the consumer has
    /// no outputs ([`FreshConsumer::outputs`](crate::FreshConsumer::outputs)
    /// was not called).
    #[error(
        "no output handle: not inside a handler call of a consumer with outputs enabled (`FreshConsumer::outputs`)"
    )]
    OutsideHandler,
    /// The handle was used after its handler call ended.
    #[error("the handler call of this output handle has ended")]
    CallEnded,
    /// The output's topic name is empty.
    #[error("empty output topic name")]
    EmptyTopic,
    /// librdkafka refused to queue the output.
    #[error("output to `{topic}` could not be queued")]
    Queue {
        /// The output's topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        error: KafkaError,
    },
    /// With transactional outputs: librdkafka refused the output because
    /// the open transaction failed (`_STATE` in its abortable state, after
    /// a write into it failed; `_FATAL` after a fatal error). The
    /// transaction cannot commit: the library aborts it and the partitions
    /// that wrote into it, this call's included, are handled again from
    /// their last committed offsets. Whatever the handler returns after
    /// it, the call is not an attempt of its record (it does not use up
    /// the retry policy's attempts, nor park or block the record); return
    /// it with `?`.
    #[error("output to `{topic}` refused: the open transaction failed and is aborted")]
    TransactionFailed {
        /// The output's topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        error: KafkaError,
    },
    /// The broker did not acknowledge the output (the attempt fails with
    /// `error.type` = `output_error`).
    #[error("output to `{topic}` was not acknowledged")]
    Delivery {
        /// The output's topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        error: KafkaError,
    },
}

impl OutputError {
    /// `true` for a failed delivery ([`OutputError::Delivery`]).
    pub fn is_delivery(&self) -> bool {
        matches!(self, OutputError::Delivery { .. })
    }
}
