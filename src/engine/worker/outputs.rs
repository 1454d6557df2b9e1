//! A handler call with outputs on: the call's output handle
//! (`crate::output`), and the wait for its outputs' acknowledgements
//! before the call counts as a success. Without outputs, the plain call.

use crate::handler::{Batch, BatchError, BatchSettings, BoxError, Handler};
use crate::metrics::instruments::AttemptError;
use crate::output::Call;
use crate::record::Record;
use crate::trace::AttemptSpan;

use super::attempt::Attempt;
use super::task::Worker;

impl<H: Handler> Worker<H> {
    /// One attempt's handler call on `record` inside `span`: with outputs
    /// on, the handler gets the call's output handle (its outputs carry
    /// `origin_ms` and the span's context) and, once it returned `Ok`, the
    /// attempt waits for the broker's acknowledgement of each output; one
    /// that failed fails the attempt ([`AttemptError::Output`]). With
    /// transactional outputs there is no wait (the transaction's commit
    /// does it). Also returns how many outputs the call sent, and whether
    /// librdkafka refused one because the open transaction failed
    /// ([`crate::output::OutputError::TransactionFailed`]: the attempt's
    /// outcome then says nothing about the record).
    pub(super) async fn call_handler(
        &self,
        span: &AttemptSpan<'_>,
        record: &Record,
        origin_ms: Option<i64>,
    ) -> (Attempt, usize, bool) {
        let Some(producer) = &self.engine.outputs else {
            let result = self
                .guarded(span, || self.handler.handle(record.clone()))
                .await;
            let attempt = match result {
                Ok(Ok(())) => Attempt::Succeeded,
                Ok(Err(e)) => Attempt::Failed(AttemptError::Handler, e.into()),
                Err((kind, error)) => Attempt::Failed(kind, error),
            };
            return (attempt, 0, false);
        };
        let call = Call::new(producer, origin_ms, span.headers());
        let result = self
            .guarded(span, || {
                call.scope(async {
                    // Into a `BoxError` (which is `Send`) before the wait.
                    let handled: Result<(), BoxError> = self
                        .handler
                        .handle(record.clone())
                        .await
                        .map_err(Into::into);
                    match handled {
                        Ok(()) => Ok(call.acked().await),
                        Err(e) => Err(e),
                    }
                })
            })
            .await;
        // A call that failed, panicked or timed out: its handle is closed,
        // its outputs in flight are only counted.
        call.abandon();
        let attempt = match result {
            Ok(Ok(Ok(()))) => Attempt::Succeeded,
            Ok(Ok(Err(output))) => Attempt::Failed(AttemptError::Output, output.into()),
            Ok(Err(e)) => Attempt::Failed(AttemptError::Handler, e),
            Err((kind, error)) => Attempt::Failed(kind, error),
        };
        (attempt, call.sent(), call.refused())
    }

    /// One batch handler call on `records` inside `span`, as
    /// [`Self::call_handler`]: the outputs (carrying `origin_ms`, the
    /// oldest of the batch's origin times) are waited for after `Ok` and
    /// after an error that names a failed record (the records before it
    /// complete); one that failed fails the whole batch.
    pub(super) async fn call_batch(
        &self,
        span: &AttemptSpan<'_>,
        batch: &BatchSettings,
        records: &[Record],
        origin_ms: Option<i64>,
    ) -> Result<Result<(), BatchError>, (AttemptError, BoxError)> {
        let Some(producer) = &self.engine.outputs else {
            return self
                .guarded(span, || batch.call.call(Batch::new(records.to_vec())))
                .await;
        };
        let call = Call::new(producer, origin_ms, span.headers());
        let result = self
            .guarded(span, || {
                call.scope(async {
                    let result = batch.call.call(Batch::new(records.to_vec())).await;
                    let acked = match &result {
                        Ok(()) => call.acked().await,
                        Err(e) if e.failed_at().is_some() => call.acked().await,
                        Err(_) => Ok(()),
                    };
                    (result, acked)
                })
            })
            .await;
        call.abandon();
        match result {
            Ok((result, Ok(()))) => Ok(result),
            Ok((_, Err(output))) => Err((AttemptError::Output, output.into())),
            Err(failure) => Err(failure),
        }
    }
}
