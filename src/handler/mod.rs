//! The handler: the user's code run once per record ([`Handler`], in
//! `per_record.rs`), or once per batch of one partition's records
//! ([`BatchHandler`], in `batch.rs`).

mod batch;
mod per_record;

pub(crate) use batch::BatchSettings;
pub use batch::{
    Batch, BatchError, BatchHandler, Batched, DEFAULT_MAX_BATCH_RECORDS, DEFAULT_MAX_BATCH_WAIT,
};
pub use per_record::{BoxError, Handler};
