//! The batch handler: the user's code run once per batch of one
//! partition's records, and what it returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::per_record::{BoxError, Handler};
use crate::record::Record;

/// The most records in one batch unless
/// [`max_batch_records`](crate::FreshConsumer::max_batch_records) says
/// otherwise: 500, Kafka's `max.poll.records` default.
pub const DEFAULT_MAX_BATCH_RECORDS: usize = 500;

/// How long a batch waits for more records after its first one unless
/// [`max_batch_wait`](crate::FreshConsumer::max_batch_wait) says
/// otherwise: 20 ms. A batch waits only when fewer than
/// `max_batch_records` records are ready; under load the partition's queue
/// already holds a full batch and nothing waits.
pub const DEFAULT_MAX_BATCH_WAIT: Duration = Duration::from_millis(20);

/// Records of **one partition, in offset order** (consecutive records as
/// the partition's queue delivered them: offsets increase, with gaps where
/// the log has none, such as transaction markers or compacted records),
/// handed to a [`BatchHandler`] in one call. Never empty; at most
/// [`max_batch_records`](crate::FreshConsumer::max_batch_records) long.
///
/// Derefs to `[Record]`: `batch.len()`, `batch.iter()`, `batch[i]`.
#[derive(Clone)]
pub struct Batch {
    records: Vec<Record>,
}

impl Batch {
    /// A batch of `records`, which must be one partition's, in offset
    /// order, and not empty.
    pub(crate) fn new(records: Vec<Record>) -> Self {
        debug_assert!(!records.is_empty(), "a batch is never empty");
        debug_assert!(
            records
                .windows(2)
                .all(|w| w[0].partition() == w[1].partition()
                    && w[0].topic() == w[1].topic()
                    && w[0].offset() < w[1].offset()),
            "a batch holds one partition's records in offset order"
        );
        Batch { records }
    }

    /// Builds a batch by hand, for unit tests of batch handlers (batches
    /// consumed by [`FreshConsumer`](crate::FreshConsumer) are built by
    /// the library). `None` when `records` is empty, holds more than one
    /// topic or partition, or is not in increasing offset order.
    ///
    /// ```
    /// use fresh_consumer::{Batch, Record};
    ///
    /// let batch = Batch::from_records(vec![Record::new("orders", 0, 7), Record::new("orders", 0, 8)])
    ///     .expect("one partition, in offset order");
    /// assert_eq!((batch.first_offset(), batch.last_offset(), batch.len()), (7, 8, 2));
    /// assert!(Batch::from_records(vec![Record::new("orders", 0, 8), Record::new("orders", 0, 7)]).is_none());
    /// ```
    pub fn from_records(records: Vec<Record>) -> Option<Self> {
        let ordered = records.windows(2).all(|w| {
            w[0].partition() == w[1].partition()
                && w[0].topic() == w[1].topic()
                && w[0].offset() < w[1].offset()
        });
        (!records.is_empty() && ordered).then_some(Batch { records })
    }

    /// The records, in offset order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The topic of every record in the batch.
    pub fn topic(&self) -> &str {
        self.records[0].topic()
    }

    /// The partition of every record in the batch.
    pub fn partition(&self) -> i32 {
        self.records[0].partition()
    }

    /// The offset of the batch's first record.
    pub fn first_offset(&self) -> i64 {
        self.records[0].offset()
    }

    /// The offset of the batch's last record.
    pub fn last_offset(&self) -> i64 {
        self.records[self.records.len() - 1].offset()
    }

    /// The records, owned, in offset order.
    pub fn into_records(self) -> Vec<Record> {
        self.records
    }
}

impl std::ops::Deref for Batch {
    type Target = [Record];

    fn deref(&self) -> &[Record] {
        &self.records
    }
}

impl IntoIterator for Batch {
    type Item = Record;
    type IntoIter = std::vec::IntoIter<Record>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Record;
    type IntoIter = std::slice::Iter<'a, Record>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("topic", &self.topic())
            .field("partition", &self.partition())
            .field("first_offset", &self.first_offset())
            .field("last_offset", &self.last_offset())
            .field("len", &self.len())
            .finish()
    }
}

/// Why a [`BatchHandler`] call failed: the error, and the index in the
/// batch of the first record that failed, when the handler knows it.
///
/// - [`BatchError::at(i, e)`](BatchError::at): the records before index
///   `i` are processed (their offsets become committable and their event
///   ages are recorded); record `i` failed with `e` and goes through the
///   retry policy and [`OnExhausted`](crate::OnExhausted) on its own (its
///   further attempts are batches of one); the records after it are
///   handled again as a new batch once it completed.
/// - Any other error (`?` on an error converts into a whole-batch
///   failure, as does [`BatchError::new`]), a panic, a handler timeout, or
///   an index outside the batch (logged): the whole batch failed and is
///   retried as a whole under the retry policy; when its attempts run out
///   (or the error is [`permanent`](crate::permanent)) its records are
///   handled one at a time, each with the retry policy and `OnExhausted`
///   of its own, so that only the records that fail alone are
///   dead-lettered, moved to a retry tier, skipped or block.
///
/// Not an [`Error`](std::error::Error) itself, so that every error
/// converts into it.
pub struct BatchError {
    failed_at: Option<usize>,
    error: BoxError,
}

impl BatchError {
    /// The record at `index` in the batch (0-based) failed with `error`,
    /// and the records before it succeeded.
    pub fn at(index: usize, error: impl Into<BoxError>) -> Self {
        BatchError {
            failed_at: Some(index),
            error: error.into(),
        }
    }

    /// The whole batch failed with `error` (the same as `error.into()`).
    pub fn new(error: impl Into<BoxError>) -> Self {
        BatchError {
            failed_at: None,
            error: error.into(),
        }
    }

    /// The index of the first record that failed, if the handler named it.
    pub fn failed_at(&self) -> Option<usize> {
        self.failed_at
    }

    /// The error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The error, owned.
    pub fn into_error(self) -> BoxError {
        self.error
    }
}

impl<E: Into<BoxError>> From<E> for BatchError {
    fn from(error: E) -> Self {
        BatchError::new(error)
    }
}

impl fmt::Debug for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchError")
            .field("failed_at", &self.failed_at)
            .field("error", &self.error)
            .finish()
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.failed_at {
            Some(i) => write!(f, "record {i} of the batch failed: {}", self.error),
            None => write!(f, "the batch failed: {}", self.error),
        }
    }
}

/// Processes one partition's records in one call (see [`Batch`]). The
/// batch counts as processed, and its offsets as committable, only when the
/// returned future resolves to `Ok(())`; an error may name the first record
/// that failed (see [`BatchError`] for what happens to the others).
///
/// Implemented for async functions and closures
/// `Fn(Batch) -> impl Future<Output = Result<(), E>>` where
/// `E: Into<BatchError>` (every error type does), and for your own types;
/// run it with [`FreshConsumer::batched`](crate::FreshConsumer::batched):
///
/// ```
/// use fresh_consumer::{Batch, BatchError, BatchHandler};
///
/// struct Bulk;
///
/// impl BatchHandler for Bulk {
///     type Error = BatchError;
///
///     async fn handle(&self, batch: Batch) -> Result<(), BatchError> {
///         for (i, record) in batch.iter().enumerate() {
///             if record.payload().is_none() {
///                 // Records 0..i are done; record i goes through the retry
///                 // policy on its own, the rest come again in a new batch.
///                 return Err(BatchError::at(i, "a record without a payload"));
///             }
///         }
///         Ok(())
///     }
/// }
///
/// // An async function works too; `?` fails the whole batch.
/// async fn write_all(batch: Batch) -> Result<(), std::io::Error> {
///     println!("{} records of {}:{}", batch.len(), batch.topic(), batch.partition());
///     Ok(())
/// }
/// # fn assert_batch_handler<B: BatchHandler>(_: B) {}
/// # assert_batch_handler(Bulk);
/// # assert_batch_handler(write_all);
/// ```
///
/// Batches of one partition are handed to `handle` one at a time, in
/// offset order; batches of different partitions concurrently. A handler
/// timeout ([`handler_timeout`](crate::FreshConsumer::handler_timeout))
/// applies to each call.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fresh-consumer batch handler",
    label = "not a batch handler",
    note = "expected an `async fn(Batch) -> Result<(), E>` or a closure `|batch: Batch| async move {{ ... }}` returning `Result<(), E>`, where `E: Into<BatchError>` (`BatchError`, or any error a per-record handler may return), or a type implementing `BatchHandler`",
    note = "the future it returns must be `Send`: it may not hold an `Rc`, a `RefCell` borrow or a `std::sync::MutexGuard` across an `.await`"
)]
pub trait BatchHandler: Send + Sync + 'static {
    /// The handler's error type.
    type Error: Into<BatchError>;

    /// Handles one batch. `Ok(())` means every record of it is processed
    /// and its offsets may be committed.
    fn handle(&self, batch: Batch) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

// `do_not_recommend`: a function or closure that does not fit is reported
// as `F: BatchHandler` with the message above, at the argument of
// `FreshConsumer::batched` (as for `Handler`'s blanket impl).
#[diagnostic::do_not_recommend]
impl<F, Fut, E> BatchHandler for F
where
    F: Fn(Batch) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<BatchError>,
{
    type Error = E;

    fn handle(&self, batch: Batch) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self(batch)
    }
}

/// A [`BatchHandler`] as [`FreshConsumer::batched`](crate::FreshConsumer::batched)
/// runs it: the type parameter of `FreshConsumer<Batched<B>>`. As a
/// [`Handler`] it handles a record as a batch of one (what a record that
/// failed in a batch is retried as).
pub struct Batched<B> {
    inner: Arc<B>,
}

impl<B: BatchHandler> Batched<B> {
    pub(crate) fn new(handler: B) -> Self {
        Batched {
            inner: Arc::new(handler),
        }
    }

    /// The handler as the engine calls it for whole batches.
    pub(crate) fn call(&self) -> Arc<dyn BatchCall> {
        Arc::clone(&self.inner) as Arc<dyn BatchCall>
    }
}

impl<B> fmt::Debug for Batched<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Batched")
    }
}

// `do_not_recommend`: rustc would otherwise offer this impl ("the trait
// `Handler` is implemented for `Batched<B>`") under every handler that does
// not fit `FreshConsumer::new`, where it is no help.
#[diagnostic::do_not_recommend]
impl<B: BatchHandler> Handler for Batched<B> {
    type Error = BoxError;

    async fn handle(&self, record: Record) -> Result<(), BoxError> {
        self.inner
            .handle(Batch::new(vec![record]))
            .await
            .map_err(|e| e.into().into_error())
    }
}

/// A batch handler's future, boxed: one allocation per batch.
pub(crate) type BatchFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BatchError>> + Send + 'a>>;

/// A [`BatchHandler`] with its type erased, for the engine (which is
/// generic over the per-record [`Handler`] only).
pub(crate) trait BatchCall: Send + Sync + 'static {
    /// Calls the handler on `batch`.
    fn call(&self, batch: Batch) -> BatchFuture<'_>;
}

impl<B: BatchHandler> BatchCall for B {
    fn call(&self, batch: Batch) -> BatchFuture<'_> {
        Box::pin(async move { self.handle(batch).await.map_err(Into::into) })
    }
}

/// How batches are formed and whom they are handed to (set by
/// [`FreshConsumer::batched`](crate::FreshConsumer::batched)).
#[derive(Clone)]
pub(crate) struct BatchSettings {
    pub(crate) call: Arc<dyn BatchCall>,
    pub(crate) max_records: usize,
    pub(crate) max_wait: Duration,
}

impl fmt::Debug for BatchSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchSettings")
            .field("max_records", &self.max_records)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}
