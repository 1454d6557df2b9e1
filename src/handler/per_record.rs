//! A handler run once per record, and the error type handlers return.

use std::error::Error;
use std::future::Future;

use crate::record::Record;

/// The error type handlers may return: any error that is `Send + Sync`.
/// A handler's own error type converts into it through `Into<BoxError>`.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// Processes one record. The record counts as processed, and its offset as
/// committable, only when the returned future resolves to `Ok(())`.
///
/// Implemented for async functions and closures `Fn(Record) -> impl Future<Output = Result<(), E>>`
/// where `E: Into<BoxError>`, and for your own types (for example one that
/// holds a database pool):
///
/// ```
/// use fresh_consumer::{Handler, Record};
///
/// struct Store {
///     table: String,
/// }
///
/// impl Handler for Store {
///     type Error = std::io::Error;
///
///     async fn handle(&self, record: Record) -> Result<(), Self::Error> {
///         let _ = (&self.table, record.payload());
///         Ok(())
///     }
/// }
///
/// // An async function works too:
/// async fn print(record: Record) -> Result<(), std::io::Error> {
///     println!("{}:{}@{}", record.topic(), record.partition(), record.offset());
///     Ok(())
/// }
/// # fn assert_handler<H: Handler>(_: H) {}
/// # assert_handler(Store { table: "t".into() });
/// # assert_handler(print);
/// ```
///
/// Records of one partition are handed to `handle` one at a time, in offset
/// order; records of different partitions concurrently. With
/// [`ProcessingOrder::Key`](crate::ProcessingOrder::Key), records of one
/// partition with different keys run concurrently too (up to its
/// `max_in_flight`), and each key's records one at a time, in offset order.
/// A handler that fails
/// (returns `Err` or panics) is retried in place with exponential backoff, and
/// no later offset of its partition is committed until it succeeds.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fresh-consumer handler",
    label = "not a handler",
    note = "expected an `async fn(Record) -> Result<(), E>` or a closure `|record: Record| async move {{ ... }}` returning `Result<(), E>`, where `E: Into<BoxError>` (any `std::error::Error + Send + Sync + 'static`, `String` or `&str`), or a type implementing `Handler`",
    note = "the future it returns must be `Send`: it may not hold an `Rc`, a `RefCell` borrow or a `std::sync::MutexGuard` across an `.await`"
)]
pub trait Handler: Send + Sync + 'static {
    /// The handler's error type.
    type Error: Into<BoxError>;

    /// Handles one record. `Ok(())` means the record is processed and its
    /// offset may be committed.
    fn handle(&self, record: Record) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

// `do_not_recommend`: when a function or closure does not fit, rustc
// reports `F: Handler` with the message above, at the argument of
// `FreshConsumer::new`, instead of the first unmet bound of this impl
// (`Result<..>` is not a future, `Box<dyn Error>: Into<BoxError>`, ...). A
// future that is not `Send` is reported the same way, without the value
// held across the `.await` (the second note says what to look for; the
// error at a later `.run()` names the bound, `Rc<String>: Send`). An
// argument of the wrong type is reported by rustc itself (E0631, "type
// mismatch in function arguments"), which names `Handler` and suggests the
// fix. tests/compile_fail.rs pins these errors.
#[diagnostic::do_not_recommend]
impl<F, Fut, E> Handler for F
where
    F: Fn(Record) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<BoxError>,
{
    type Error = E;

    fn handle(&self, record: Record) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self(record)
    }
}
