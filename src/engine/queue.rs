//! A second handle on a partition's own librdkafka queue, beside
//! rust-rdkafka's: reads in batches, the queue's length, librdkafka's
//! position and cached watermarks, seeks, and the queue's wake-up. The
//! unsafe FFI of the partition worker, in one place.

use std::sync::Arc;
use std::time::Duration;

/// How long a worker's seek waits for librdkafka to serve it. librdkafka's
/// broker thread serves a partition's operations between its network
/// reads, normally within a millisecond; a seek not served in time is
/// logged and left to librdkafka (it is still served, later).
const SEEK_TIMEOUT: Duration = Duration::from_secs(2);

/// At most this many records (and never more than `max_buffered_records`)
/// are read from a partition's own queue at once: one lock of the queue and
/// of the partition's offset tracker for all of them. They wait in the
/// worker, already tracked as delivered.
pub(crate) const READ_BATCH: usize = 64;

/// librdkafka's queue event callback for [`QueueHandle::wake_on_records`]:
/// `opaque` is the worker's `Notify` (it keeps a permit when no one waits,
/// so no wake-up is lost).
unsafe extern "C" fn notify_records(
    _rk: *mut rdkafka::bindings::rd_kafka_t,
    opaque: *mut std::ffi::c_void,
) {
    // SAFETY: registered with a `Notify` that outlives the registration.
    let wake = unsafe { &*(opaque as *const tokio::sync::Notify) };
    wake.notify_one();
}

/// A second handle on a partition's own librdkafka queue (rust-rdkafka does
/// not expose the split queue's handle), for the worker to read records in
/// batches (`rd_kafka_consume_batch_queue`) and to read how many wait
/// (`rd_kafka_queue_length`). Owned by the partition's worker, so it is gone
/// before the consumer is destroyed (the worker's split queue keeps the
/// consumer alive until then).
pub(crate) struct QueueHandle {
    queue: std::ptr::NonNull<rdkafka::bindings::rd_kafka_queue_t>,
    /// The client the queue belongs to, for seeks (it outlives the handle).
    client: std::ptr::NonNull<rdkafka::bindings::rd_kafka_t>,
    topic: String,
    partition: i32,
}

// SAFETY: librdkafka queues and clients are thread-safe; the handle is used
// with `rd_kafka_queue_length`, `rd_kafka_consume_batch_queue` and
// `rd_kafka_seek_partitions`, and the queue is destroyed once, in `drop`.
unsafe impl Send for QueueHandle {}
unsafe impl Sync for QueueHandle {}

impl QueueHandle {
    pub(crate) fn new<C: rdkafka::consumer::ConsumerContext>(
        client: &rdkafka::client::Client<C>,
        topic: &str,
        partition: i32,
    ) -> Option<Self> {
        let topic = std::ffi::CString::new(topic).ok()?;
        // SAFETY: the client handle is live; `rd_kafka_queue_get_partition`
        // returns a new reference to the partition's queue, or NULL.
        let q = unsafe {
            rdkafka::bindings::rd_kafka_queue_get_partition(
                client.native_ptr(),
                topic.as_ptr(),
                partition,
            )
        };
        Some(QueueHandle {
            queue: std::ptr::NonNull::new(q)?,
            client: std::ptr::NonNull::new(client.native_ptr())?,
            topic: topic.to_str().ok()?.to_owned(),
            partition,
        })
    }

    /// Seeks the partition to `offset` and waits, up to [`SEEK_TIMEOUT`],
    /// for librdkafka's broker thread to serve the seek
    /// (`rd_kafka_seek_partitions` with a reply queue). librdkafka raises
    /// the partition's version when the call starts, so nothing fetched
    /// before is read from the queue after it; it fetches again from
    /// `offset`. Blocking: the caller keeps it off the async runtime.
    ///
    /// `Err` carries librdkafka's error code and reason: for this
    /// partition (`__OUTDATED` when an operation with a newer version, such
    /// as a rebalance's pause or resume, was served first and the seek was
    /// dropped; `__STATE` or `__PREV_IN_PROGRESS` when the partition is not
    /// fetching or stopping), or for the call (`__TIMED_OUT`).
    pub(crate) fn seek(&self, offset: i64) -> Result<(), (rdkafka::types::RDKafkaRespErr, String)> {
        use rdkafka::types::RDKafkaRespErr;
        let mut tpl = rdkafka::TopicPartitionList::with_capacity(1);
        tpl.add_partition_offset(&self.topic, self.partition, rdkafka::Offset::Offset(offset))
            .map_err(|e| {
                (
                    RDKafkaRespErr::RD_KAFKA_RESP_ERR__INVALID_ARG,
                    e.to_string(),
                )
            })?;
        let timeout_ms = SEEK_TIMEOUT.as_millis() as i32;
        // SAFETY: the client outlives this handle (see the type's doc);
        // the list is live for the call, which writes only its elements'
        // error codes.
        let err = unsafe {
            rdkafka::bindings::rd_kafka_seek_partitions(self.client.as_ptr(), tpl.ptr(), timeout_ms)
        };
        if !err.is_null() {
            // SAFETY: an error object returned to us, destroyed once.
            return Err(unsafe {
                let code = rdkafka::bindings::rd_kafka_error_code(err);
                let reason =
                    std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_error_string(err))
                        .to_string_lossy()
                        .into_owned();
                rdkafka::bindings::rd_kafka_error_destroy(err);
                (code, reason)
            });
        }
        // SAFETY: the list holds the one element added above.
        let code = unsafe { (*(*tpl.ptr()).elems).err };
        if code == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            Ok(())
        } else {
            let reason = rdkafka::error::RDKafkaErrorCode::from(code).to_string();
            Err((code, reason))
        }
    }

    /// librdkafka's position for the partition: the offset after the last
    /// message the application took from its queue, moved past transaction
    /// markers (and records of aborted transactions under `read_committed`)
    /// it read and dropped (`rd_kafka_position`; local state, no request).
    /// `None` while librdkafka has none.
    pub(crate) fn position(&self) -> Option<i64> {
        let mut tpl = rdkafka::TopicPartitionList::with_capacity(1);
        tpl.add_partition(&self.topic, self.partition);
        // SAFETY: the client outlives this handle (see the type's doc); the
        // call writes the offsets of the list's elements.
        let err = unsafe { rdkafka::bindings::rd_kafka_position(self.client.as_ptr(), tpl.ptr()) };
        if err != rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        match tpl.find_partition(&self.topic, self.partition)?.offset() {
            rdkafka::Offset::Offset(o) if o >= 0 => Some(o),
            _ => None,
        }
    }

    /// The log start offset and high watermark librdkafka last saw for the
    /// partition (`rd_kafka_get_watermark_offsets`: cached from fetch
    /// responses and statistics, no request), if known.
    pub(crate) fn cached_watermarks(&self) -> Option<(i64, i64)> {
        let topic = std::ffi::CString::new(&*self.topic).ok()?;
        let (mut lo, mut hi) = (-1i64, -1i64);
        // SAFETY: the client outlives this handle (see the type's doc); the
        // call only reads the client's cached partition state.
        let err = unsafe {
            rdkafka::bindings::rd_kafka_get_watermark_offsets(
                self.client.as_ptr(),
                topic.as_ptr(),
                self.partition,
                &mut lo,
                &mut hi,
            )
        };
        (err == rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && lo >= 0 && hi >= 0)
            .then_some((lo, hi))
    }

    /// Turns the queue's wake-up back on, for `wake`: librdkafka calls
    /// [`notify_records`] when the queue goes from empty to non-empty.
    /// Replaces rust-rdkafka's callback, which an earlier
    /// `StreamPartitionQueue` of the same partition turned off when it was
    /// dropped (its `Drop` clears the queue's callback, and librdkafka has
    /// one queue per partition). `wake` must outlive the registration: the
    /// worker's own `StreamPartitionQueue`, dropped before its
    /// [`PartitionState`] (which owns `wake`), clears it.
    pub(crate) fn wake_on_records(&self, wake: &Arc<tokio::sync::Notify>) {
        // SAFETY: a live queue handle; the opaque pointer stays valid while
        // registered (see above).
        unsafe {
            rdkafka::bindings::rd_kafka_queue_cb_event_enable(
                self.queue.as_ptr(),
                Some(notify_records),
                Arc::as_ptr(wake) as *mut std::ffi::c_void,
            );
        }
    }

    /// Records (and other events) waiting in the queue.
    pub(crate) fn len(&self) -> u64 {
        // SAFETY: a live queue handle (destroyed only in `drop`).
        unsafe { rdkafka::bindings::rd_kafka_queue_length(self.queue.as_ptr()) as u64 }
    }

    /// Takes up to `max` (at most [`READ_BATCH`]) messages that are ready,
    /// without waiting, and gives each to `each` (then destroys it).
    ///
    /// librdkafka serves them as one poll of the queue
    /// (`rd_kafka_consume_batch_queue`): one lock, outdated ops (from before
    /// a seek or restart of the partition) and transaction markers dropped,
    /// errors turned into messages with `err` set, and the partition's
    /// position moved past each message. For an error message that is one
    /// too far: its offset is the fetch position, the next record not
    /// fetched yet, and librdkafka fetches from the position after a pause
    /// and resume (it pauses kept partitions in every incremental
    /// rebalance). The worker seeks the partition back after such a batch
    /// ([`seek`](Self::seek)), and reads one message at a time until it has
    /// taken its partition's first record (an error event before it may
    /// carry a logical offset, which would move the position to the end).
    /// `rd_kafka_consume_callback_queue` prepares positions as a single poll
    /// does, but it is deprecated and lets an outdated transaction marker
    /// move the position forward.
    pub(crate) fn read_batch(
        &self,
        max: usize,
        mut each: impl FnMut(*mut rdkafka::bindings::rd_kafka_message_t),
    ) {
        /// Messages read and not destroyed yet: `msgs[next..len]`. Dropping
        /// destroys them, also when `each` panics.
        struct Batch {
            msgs: [*mut rdkafka::bindings::rd_kafka_message_t; READ_BATCH],
            next: usize,
            len: usize,
        }
        impl Drop for Batch {
            fn drop(&mut self) {
                for &m in &self.msgs[self.next..self.len] {
                    // SAFETY: a message from `rd_kafka_consume_batch_queue`,
                    // destroyed once (`next` moves past it before `each`).
                    unsafe { rdkafka::bindings::rd_kafka_message_destroy(m) }
                }
            }
        }
        let mut b = Batch {
            msgs: [std::ptr::null_mut(); READ_BATCH],
            next: 0,
            len: 0,
        };
        let max = max.clamp(1, READ_BATCH);
        // SAFETY: a live queue handle; `msgs` has room for `max <=
        // READ_BATCH` pointers; a timeout of 0 does not block.
        let n = unsafe {
            rdkafka::bindings::rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                0,
                b.msgs.as_mut_ptr(),
                max,
            )
        };
        b.len = usize::try_from(n).unwrap_or(0).min(max);
        while b.next < b.len {
            let m = b.msgs[b.next];
            b.next += 1;
            /// Destroys one message once `each` is done with it.
            struct Destroy(*mut rdkafka::bindings::rd_kafka_message_t);
            impl Drop for Destroy {
                fn drop(&mut self) {
                    // SAFETY: a message from `rd_kafka_consume_batch_queue`,
                    // no longer in `Batch`'s range, destroyed once.
                    unsafe { rdkafka::bindings::rd_kafka_message_destroy(self.0) }
                }
            }
            let m = Destroy(m);
            each(m.0);
        }
    }
}

impl Drop for QueueHandle {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_queue_get_partition` and is
        // destroyed once.
        unsafe { rdkafka::bindings::rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}
