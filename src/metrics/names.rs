//! The metric and attribute names (re-exported by [`crate::metrics`]).

/// Event age: now minus the record's event time, recorded once per record
/// **after its handler succeeded**.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (f64) | `s` | partition attributes, [`TIMESTAMP_TYPE`] |
///
/// The event time is the Kafka record timestamp (`CreateTime` or
/// `LogAppendTime`), or the header named by
/// [`FreshConsumer::event_time_header`](crate::FreshConsumer::event_time_header),
/// or with [`FreshConsumer::origin_time`](crate::FreshConsumer::origin_time)
/// the origin time an upstream consumer's output carries
/// ([`ORIGIN_TIME_HEADER`](crate::output::ORIGIN_TIME_HEADER): the
/// end-to-end age, [`TIMESTAMP_TYPE`] = `origin`).
/// The clock is the consumer host's wall clock (`SystemTime::now`). Records
/// without a usable timestamp are counted in [`EVENT_TIMESTAMP_MISSING`]
/// instead; records stamped in the future record 0 and count in
/// [`EVENT_CLOCK_SKEW`]. Bucket boundaries: [`EVENT_AGE_BOUNDARIES`].
pub const EVENT_AGE: &str = "fresh_consumer.event.age";

/// Duration of one handler attempt (semantic convention
/// `messaging.process.duration`).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (f64) | `s` | partition attributes, [`MESSAGING_OPERATION_NAME`] = `process`, [`ERROR_TYPE`] on failure |
///
/// Recorded for every attempt, failed ones included. Boundaries: the
/// convention's advice, [`MESSAGING_DURATION_BOUNDARIES`]. No
/// [`MESSAGING_OPERATION_TYPE`]: the convention (v1.44) does not list it for
/// this metric, whose name already says the operation is processing.
pub const PROCESS_DURATION: &str = "messaging.process.duration";

/// Records received from Kafka (semantic convention
/// `messaging.client.consumed.messages`).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes, [`MESSAGING_OPERATION_NAME`] = `poll` |
///
/// Counted when the library takes a record from librdkafka (see
/// [`CLIENT_OPERATION_DURATION`] for what a poll is), before its handler
/// runs. A record redelivered after a rebalance counts again. No
/// [`MESSAGING_OPERATION_TYPE`]: the convention (v1.44) does not list it for
/// this metric.
pub const CONSUMED_MESSAGES: &str = "messaging.client.consumed.messages";

/// Duration of a batch: the run of one partition's records handled back to
/// back, from the first handler start to the last completion, ending when the
/// partition's buffer is empty. With
/// [`ProcessingOrder::Key`](crate::ProcessingOrder::Key), the partition's busy
/// period: it ends once the buffer is empty and no handler call runs.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (f64) | `s` | partition attributes |
pub const BATCH_DURATION: &str = "fresh_consumer.batch.duration";

/// Records per call of a batch handler
/// ([`FreshConsumer::batched`](crate::FreshConsumer::batched)): the size
/// of every batch handed to the handler, retried ones and batches of one
/// included (a record that failed in a batch is retried as a batch of
/// one). Not recorded for per-record handlers.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (u64) | `{message}` | partition attributes |
///
/// Boundaries: [`BATCH_MESSAGES_BOUNDARIES`]. The batch's
/// [`PROCESS_DURATION`] is recorded once per call, and its process span
/// carries the count as `messaging.batch.message_count`.
pub const BATCH_MESSAGES: &str = "fresh_consumer.handler.batch.messages";

/// Gap between two polls of librdkafka by the library's poll loop.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (f64) | `s` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// The loop polls at least once a second (a quarter of the warning threshold
/// when that is less) even
/// on an idle topic, so a long gap means the loop could not run: a handler
/// blocking the async runtime, a long revoke, CPU starvation. Gaps below 1 ms
/// (back-to-back polls while records flow) are not recorded.
pub const POLL_INTERVAL: &str = "fresh_consumer.poll.interval";

/// Poll-interval warnings: a gap crossed
/// [`poll_warning_ratio`](crate::FreshConsumer::poll_warning_ratio) x
/// `max.poll.interval.ms`. Counted once per crossing, while the gap is still
/// open (a watchdog thread checks it), so it fires before librdkafka leaves
/// the group.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{warning}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
pub const POLL_INTERVAL_WARNINGS: &str = "fresh_consumer.poll.interval.warnings";

/// librdkafka reported `max.poll.interval.ms` exceeded
/// (`RD_KAFKA_RESP_ERR__MAX_POLL_EXCEEDED`): the member left the group and its
/// partitions were lost. Counted once per event (librdkafka reports it both as
/// an error event and as a consume error).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{event}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// Named in the plural of what it counts, as OpenTelemetry's naming guide
/// asks of counters with a `{...}` unit (was
/// `fresh_consumer.poll.interval.exceeded` before 0.2.0).
pub const POLL_INTERVAL_EXCEEDED: &str = "fresh_consumer.poll.interval.exceeded.events";

/// Duration of a client operation (semantic convention
/// `messaging.client.operation.duration`): every offset commit, and every
/// poll that returned records.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (f64) | `s` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`], [`MESSAGING_OPERATION_NAME`] = `commit`, [`MESSAGING_OPERATION_TYPE`] = `settle`, [`ERROR_TYPE`] on failure (the Kafka error code name, for example `NOT_COORDINATOR`); for polls [`MESSAGING_OPERATION_NAME`] = `poll`, [`MESSAGING_OPERATION_TYPE`] = `receive`, plus [`MESSAGING_DESTINATION_NAME`] and [`MESSAGING_DESTINATION_PARTITION_ID`] for a partition's own queue |
///
/// A poll is one read of a librdkafka queue that returned at least one
/// record: a partition worker reading its partition's own queue (the
/// default, see
/// [`split_partition_queues`](crate::FreshConsumer::split_partition_queues)),
/// or the poll loop reading the main queue (records of partitions whose
/// queue is not split; group attributes only, as one such poll can return
/// several partitions' records). Its duration runs from the start of the
/// read to the records in hand, waiting for records included, as
/// OpenTelemetry Java's Kafka instrumentation measures `poll()`. A reader
/// that finds nothing re-polls every second (an empty poll, not recorded),
/// so a poll lasts at most about a second: polls near 0 mean records were
/// waiting (a backlog), polls near 1 s mean the consumer waited for
/// records. Boundaries: [`MESSAGING_DURATION_BOUNDARIES`].
pub const CLIENT_OPERATION_DURATION: &str = "messaging.client.operation.duration";

/// Succeeded records with no usable event time (no timestamp, a negative
/// one, or a missing or unparsable event-time header). Not put in the
/// [`EVENT_AGE`] histogram.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
///
/// Was `fresh_consumer.event.timestamp.missing` before 0.2.0 (counters are
/// named in the plural of their unit).
pub const EVENT_TIMESTAMP_MISSING: &str = "fresh_consumer.event.timestamp.missing.messages";

/// Succeeded records whose event time is later than the consumer's clock.
/// Their age is recorded as 0 in [`EVENT_AGE`].
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
///
/// Was `fresh_consumer.event.clock_skew` before 0.2.0.
pub const EVENT_CLOCK_SKEW: &str = "fresh_consumer.event.clock_skew.messages";

/// Succeeded records whose origin-time header
/// ([`ORIGIN_TIME_HEADER`](crate::output::ORIGIN_TIME_HEADER)) is present
/// but unreadable (not decimal ASCII or 8-byte big-endian milliseconds, or
/// negative), counted where the library reads it: with
/// [`FreshConsumer::origin_time`](crate::FreshConsumer::origin_time) or
/// [`FreshConsumer::outputs`](crate::FreshConsumer::outputs). The record
/// is handled as usual; its age (and its outputs' origin time) come from
/// its own event time instead.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
pub const ORIGIN_TIME_MALFORMED: &str = "fresh_consumer.origin_time.malformed.messages";

/// Handler attempts that retried a failed attempt.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{attempt}` | partition attributes |
///
/// Also counts the capped-backoff retries of a blocked partition.
pub const HANDLER_RETRIES: &str = "fresh_consumer.handler.retries";

/// Records parked in a dead-letter topic after their attempts ran out (or a
/// permanent error), counted once the broker acknowledged the write.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes (of the source), [`DEAD_LETTER_TOPIC`] |
pub const DEAD_LETTER_MESSAGES: &str = "fresh_consumer.dead_letter.messages";

/// Records given up and committed past ([`OnExhausted::SkipAndCommitPast`](crate::OnExhausted::SkipAndCommitPast)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
pub const SKIPPED_MESSAGES: &str = "fresh_consumer.skipped.messages";

/// Stale records: records whose event age was above
/// [`max_record_age`](crate::FreshConsumer::max_record_age) when they
/// reached the handler, and that were not handed to it (see
/// [`OnStale`](crate::failure::OnStale)). A skipped record is counted
/// when it is committable; a written one once the broker acknowledged the
/// write (its sends are in [`SENT_MESSAGES`] too).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes, [`STALE_ACTION`] |
///
/// Each is also counted against every freshness objective of its topic as
/// `stale` ([`SLO_MESSAGES`]), and in
/// [`RunSummary::records_stale`](crate::RunSummary::records_stale).
pub const STALE_MESSAGES: &str = "fresh_consumer.stale.messages";

/// Records whose trace-context headers (the propagator's fields:
/// `traceparent`, `tracestate` for W3C) are present but yield no valid
/// context: an unparsable `traceparent`, a value that is not UTF-8. The
/// record is handled without the producer's context. Recorded only with
/// tracing on ([`FreshConsumer::tracer_provider`](crate::FreshConsumer::tracer_provider)),
/// once per record (not per attempt).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
pub const TRACE_CONTEXT_MALFORMED: &str = "fresh_consumer.trace_context.malformed.messages";

/// Records that stopped their partition: their attempts ran out (or the
/// handler returned a [`permanent`](crate::permanent) error) under
/// [`OnExhausted::Block`](crate::OnExhausted::Block) (the default) or the
/// storm guard, or their dead-letter or retry-tier write failed. Counted
/// once per record, when its partition stops at it; nothing after it is
/// committed until it moves on ([`PARTITION_BLOCKED`] is 1 meanwhile). Alert
/// on any increase: each is a partition that no longer advances by itself.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
///
/// Also in [`RunSummary::records_blocked`](crate::RunSummary::records_blocked),
/// and the record itself in [`RunSummary::blocked`](crate::RunSummary::blocked)
/// and the health report.
pub const BLOCKED_MESSAGES: &str = "fresh_consumer.blocked.messages";

/// 1 while the partition is blocked by a record whose attempts ran out and
/// that is neither handled nor parked (block policy, storm guard, or a
/// failing dead-letter write); 0 once it moves on.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (u64) | `1` | partition attributes |
pub const PARTITION_BLOCKED: &str = "fresh_consumer.partition.blocked";

/// Records sent by the library (semantic convention
/// `messaging.client.sent.messages`): handler outputs
/// ([`FreshConsumer::outputs`](crate::FreshConsumer::outputs)), counted
/// when the broker answered (or librdkafka refused to queue one), and the
/// dead-letter, retry-tier and stale-record writes.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | [`MESSAGING_SYSTEM`], [`MESSAGING_DESTINATION_NAME`] = the output, dead-letter or tier topic, [`MESSAGING_OPERATION_NAME`] = `send`, [`ERROR_TYPE`] (Kafka error name) when the write failed |
///
/// No [`MESSAGING_OPERATION_TYPE`]: the convention (v1.44) does not list it
/// for this metric.
pub const SENT_MESSAGES: &str = "messaging.client.sent.messages";

/// Kafka transactions of transactional outputs
/// ([`OutputConfig::transactional_id`](crate::output::OutputConfig::transactional_id)),
/// counted when each ended: one per commit cycle that had outputs or input
/// offsets to commit.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{transaction}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`], [`TRANSACTION_OUTCOME`], [`ERROR_TYPE`] (why it aborted) when aborted |
///
/// [`ERROR_TYPE`] of an aborted transaction: `handler_failed` (a handler
/// call that wrote into it failed, timed out or panicked: its outputs must
/// not be committed), `partition_revoked` (a partition that wrote into it
/// was revoked or lost before its offsets could go with its outputs),
/// `transaction_timeout` (it outlived the producer's
/// `transaction.timeout.ms` and the broker aborted it; the library starts
/// a new producer with the same id), `transaction_failed` (librdkafka
/// refused a handler call's output because a write into the transaction
/// had failed: [`OutputError::TransactionFailed`](crate::output::OutputError::TransactionFailed)),
/// `send_offsets_timed_out` (`send_offsets_to_transaction` did not return
/// within its timeout and a second: librdkafka waits for a group
/// coordinator that went away; the library starts a new producer with the
/// same id),
/// `predecessor_open` (counted once at start-up, without a duration: the
/// consumer's `init_transactions` waited while the transaction
/// coordinator ended the transaction an earlier producer with the same id
/// left open, a killed member's: the coordinator aborts an open one; it
/// answers the same while it still completes a commit, which is not told
/// apart), or the Kafka error name of the failed
/// `send_offsets_to_transaction`, `commit_transaction` or
/// `abort_transaction` (`_TIMED_OUT`, `OUT_OF_ORDER_SEQUENCE_NUMBER`, ...;
/// after a fatal one that is not a fence, such as `INVALID_TXN_STATE`, the
/// library starts a new producer with the same id). A producer fenced by
/// another with the same id ends the run
/// ([`RunError::Fatal`](crate::RunError::Fatal)) without counting.
pub const TRANSACTIONS: &str = "fresh_consumer.transactions";

/// Duration of a Kafka transaction of transactional outputs: from its
/// first output (or, without outputs, from the start of its commit) to the
/// end of its commit or abort.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | histogram (f64) | `s` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`], [`TRANSACTION_OUTCOME`] |
///
/// Buckets: [`DURATION_BOUNDARIES`] (a transaction spans a commit
/// interval, 5 s by default).
pub const TRANSACTION_DURATION: &str = "fresh_consumer.transaction.duration";

/// Metric data points whose OTLP export finished, exported or failed
/// (OpenTelemetry's SDK metric `otel.sdk.exporter.metric_data_point.exported`),
/// counted by the exporter that `otlp::OtlpConfig::build` (feature `otlp`)
/// makes: a collector outage shows, once the collector is back, as data
/// points with [`ERROR_TYPE`].
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{data_point}` | [`OTEL_COMPONENT_TYPE`], [`OTEL_COMPONENT_NAME`], [`ERROR_TYPE`] (`timeout`, `internal_failure` (the collector unreachable or refusing), `already_shutdown`) when the export failed |
///
/// The SDK does not retry a failed export; with cumulative temporality
/// (the default) the next export carries the totals again.
pub const OTEL_SDK_EXPORTER_METRIC_DATA_POINT_EXPORTED: &str =
    "otel.sdk.exporter.metric_data_point.exported";

/// Records moved to a retry tier
/// ([`OnExhausted::RetryTopics`](crate::OnExhausted::RetryTopics)),
/// counted once the broker acknowledged the write, per tier written to.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes (of the partition the record failed on), [`RETRY_TIER`] = the tier written to |
///
/// [`RETRY_TIER`] here is the tier written to, also on a tier partition's
/// count (where it replaces the partition's own tier): a point with
/// [`MESSAGING_DESTINATION_NAME`] = `orders.retry.10s` and
/// `fresh_consumer.retry.tier` = `2` counts records moved from tier 1 to 2.
pub const RETRY_MESSAGES: &str = "fresh_consumer.retry.messages";

/// 1 while the storm guard holds records back from the dead-letter topic
/// because too many recent records failed; 0 otherwise.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | up-down counter (i64) | `1` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
pub const STORM_GUARD_ACTIVE: &str = "fresh_consumer.storm_guard.active";

// Partition health (see `crate::health` for sources and staleness). The
// gauges are observed at each collection, and only for partitions assigned
// to this member at that moment.

/// Offset lag of an assigned partition, in records: the end the consumer
/// reads to (see below) minus the committed offset ([`LAG_POSITION`] = `committed`, what Kafka's
/// tools show), and minus the library's processed offset, the next offset
/// after the contiguous run of completed records ([`LAG_POSITION`] =
/// `processed`, what the next commit will carry). Never summed by the
/// library: alert on the maximum per partition.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{message}` | partition attributes, [`LAG_POSITION`] |
///
/// The end counted to is the last stable offset under
/// `isolation.level=read_committed` (librdkafka's default: records of open
/// transactions cannot be read, so they are not lag) and the high watermark
/// under `read_uncommitted`. Both come from librdkafka's statistics
/// (`ls_offset`, `hi_offset`; as old as
/// [`statistics_interval`](crate::FreshConsumer::statistics_interval) plus a
/// poll tick, and older while the partition is paused by backpressure), or
/// from the consumer's own position when that is ahead.
/// Before this member's first commit the committed offset is the one read
/// at assignment; for a partition the group has no offset for, the lag is
/// counted from where consumption started.
pub const PARTITION_LAG: &str = "fresh_consumer.partition.lag";

/// Head-of-line age: now minus the event time of the oldest record of the
/// partition that was fetched and has not completed (the head of the line);
/// when none waits but statistics show records beyond the consumer's
/// position, the time since a statistics report first showed them (a lower
/// bound: their timestamps are not known before they are fetched). 0 when
/// caught up.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | partition attributes |
///
/// The event time is the one [`EVENT_AGE`] uses (record timestamp or the
/// event-time header; the fetch time for records without one).
pub const PARTITION_HEAD_AGE: &str = "fresh_consumer.partition.head.age";

/// Time the partition has been held up while records wait: since the
/// committed offset or the processed position last moved, or since
/// completed records began to wait for a commit, whichever is longer; 0
/// while the lag is zero. Evaluated every 100 ms (a partition that was
/// caught up at its last evaluation: every second, see the `health`
/// module).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | partition attributes |
///
/// Was `fresh_consumer.partition.stalled.duration` before 0.2.0:
/// OpenTelemetry's naming guide keeps `.duration` for histograms of
/// operations, and this is a gauge of time since, named like the library's
/// other time-since gauges ([`PARTITION_HEAD_AGE`], [`MONITOR_COMMIT_AGE`](super::MONITOR_COMMIT_AGE)).
pub const PARTITION_STALL_AGE: &str = "fresh_consumer.partition.stall.age";

/// The partition's status as a state set: one point per status value of
/// [`STATUS`] (`ok`, `warn`, `stall`, `stop`, `rewind`), 1 for the current
/// one and 0 for the others (see
/// [`PartitionStatus`](crate::health::PartitionStatus)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `1` | partition attributes, [`STATUS`] |
pub const PARTITION_STATUS: &str = "fresh_consumer.partition.status";

/// Records deleted by retention before the group processed them: the log
/// start offset minus the offset the partition was to continue at, counted
/// once per detection (see
/// [`RetentionOverrunPolicy`](crate::health::RetentionOverrunPolicy)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes |
pub const RETENTION_OVERRUN_MESSAGES: &str = "fresh_consumer.retention.overrun.messages";

/// Retention margin of an assigned partition, in records: the committed
/// offset minus the log start offset, the records retention may still
/// delete before it reaches one the group has not processed; negative once
/// it deleted unread records (then [`RETENTION_OVERRUN_MESSAGES`] counts
/// them when the consumer reaches them). The same number as the group
/// monitor's [`MONITOR_RETENTION_MARGIN`](super::MONITOR_RETENTION_MARGIN), from inside the consumer.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{message}` | partition attributes |
///
/// The committed offset is this member's last commit (before its first,
/// the one read at assignment, or librdkafka's); the log start comes from
/// librdkafka's statistics (`lo_offset`, as old as
/// [`statistics_interval`](crate::FreshConsumer::statistics_interval) plus a
/// poll tick, older while the partition is paused). Absent while either is
/// unknown.
pub const PARTITION_RETENTION_MARGIN: &str = "fresh_consumer.partition.retention.margin";

/// Estimated time until the log start offset passes the committed offset
/// of an assigned partition: [`PARTITION_RETENTION_MARGIN`] divided by how
/// many records per second the log start gained on the committed offset
/// over the last 5 minutes of statistics reports (the estimator of the
/// group monitor's [`MONITOR_RETENTION_ETA`](super::MONITOR_RETENTION_ETA)).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (f64) | `s` | partition attributes |
///
/// **Absent** (no point) while the log start does not gain on the
/// committed offset: it did not move over those 5 minutes (retention has
/// not deleted a segment in that time, as on a young or quiet topic), or the
/// commits move at least as fast; and once the margin is not positive.
/// Alert on it being low (`< 1 day`), not on it being present. Retention
/// deletes whole segments, so the log start moves in steps: the estimate is
/// the rate over the window, not the time of the next deletion.
pub const PARTITION_RETENTION_ETA: &str = "fresh_consumer.partition.retention.eta";

/// Partitions whose offset was missing or out of range when assigned or
/// while consumed: [`OFFSET_RESET_REASON`] = `retention_overrun` (below the
/// log start offset), `above_high_watermark` (the topic was recreated, or
/// its log truncated below the position), `log_truncation` (the leader's
/// log diverges below the offset from the records the group read, found
/// with the leader epoch committed with the offset: an unclean leader
/// election) or `no_committed_offset` (with `auto.offset.reset=error`). A partition
/// starting without a committed offset under `earliest` or `latest` is not
/// counted.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{event}` | partition attributes, [`OFFSET_RESET_REASON`] |
pub const OFFSET_RESETS: &str = "fresh_consumer.offset.resets";

/// Rebalance events seen by this member, counted once per callback:
/// [`REBALANCE_TYPE`] = `assigned`, `revoked` or `lost` (revoked because
/// the member was no longer in the group). A steadily rising count with
/// changing member ids (logged) is a rebalance loop.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{event}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`], [`REBALANCE_TYPE`] |
pub const REBALANCES: &str = "fresh_consumer.rebalances";

/// 1 while a rebalance is in progress for this member: from the start of
/// the run until its first assignment, and from each revoke (or loss) of
/// partitions until the next assignment (even an empty one); 0 otherwise.
/// Observed while the consumer runs. The shipped Prometheus rules silence
/// the lag alerts while it is 1, for a bounded time (deploy/prometheus).
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `1` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
///
/// Under the cooperative protocol a member whose partitions all stay is not
/// told of the rebalance and reads 0 throughout.
pub const REBALANCE_IN_PROGRESS: &str = "fresh_consumer.rebalance.in_progress";

/// Partitions currently assigned to this member.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | gauge (i64) | `{partition}` | [`MESSAGING_SYSTEM`], [`MESSAGING_CONSUMER_GROUP_NAME`] |
pub const ASSIGNMENT_SIZE: &str = "fresh_consumer.assignment.size";

/// Attribute `fresh_consumer.lag.position`: what [`PARTITION_LAG`] counts
/// from: `committed` or `processed`.
pub const LAG_POSITION: &str = "fresh_consumer.lag.position";
/// Attribute `fresh_consumer.status`: a partition status, `ok`, `warn`,
/// `stall`, `stop` or `rewind` (in-process, [`PARTITION_STATUS`]); `ok`,
/// `lagging`, `stalled`, `out_of_range`, `no_committed_offset` or
/// `time_lag_unknown` (the monitor, [`MONITOR_PARTITION_STATUS`](super::MONITOR_PARTITION_STATUS)).
pub const STATUS: &str = "fresh_consumer.status";
/// Attribute `fresh_consumer.offset.reset.reason`: `retention_overrun`,
/// `above_high_watermark`, `log_truncation` or `no_committed_offset`.
pub const OFFSET_RESET_REASON: &str = "fresh_consumer.offset.reset.reason";
/// Attribute `fresh_consumer.rebalance.type`: `assigned`, `revoked` or
/// `lost`.
pub const REBALANCE_TYPE: &str = "fresh_consumer.rebalance.type";
/// Attribute `fresh_consumer.scale.hold.reason`: why the KEDA scaler holds
/// a group's replica count, `rebalancing`, `skewed`, `stuck`, `dead` or
/// `open_transaction` ([`HoldReason`](crate::monitor::scale::HoldReason)).
pub const SCALE_HOLD_REASON: &str = "fresh_consumer.scale.hold.reason";

/// Attribute `fresh_consumer.retry.tier`: a retry tier, from `1` (see
/// [`RetryTopics`](crate::failure::RetryTopics)). Part of the partition attributes
/// of a tier topic's partitions (so the event age, SLO counts and every
/// other per-partition metric of records handled from a tier say which
/// tier; absent on source topics), and the tier written to in
/// [`RETRY_MESSAGES`]. At most as many values as tiers.
pub const RETRY_TIER: &str = "fresh_consumer.retry.tier";

/// Attribute `fresh_consumer.stale.action`: what happened to a stale record,
/// `skip`, `dead_letter` or `topic` ([`OnStale`](crate::failure::OnStale)).
pub const STALE_ACTION: &str = "fresh_consumer.stale.action";

/// Attribute `fresh_consumer.dead_letter.topic`: the dead-letter topic.
pub const DEAD_LETTER_TOPIC: &str = "fresh_consumer.dead_letter.topic";

/// Finished records counted against each freshness objective
/// ([`FreshConsumer::freshness_objective`](crate::FreshConsumer::freshness_objective)):
/// the exact SLI.
///
/// | instrument | unit | attributes |
/// |---|---|---|
/// | counter (u64) | `{message}` | partition attributes, [`SLO_THRESHOLD`], [`SLO_RESULT`] |
///
/// Every record whose handler succeeded counts once per objective that
/// applies to its topic: `good` when its event age was at most the threshold
/// (inclusive), `late` otherwise, `no_timestamp` without a usable event
/// time. Dead-lettered and skipped records count as `dead_lettered` and
/// `skipped`, records shed by the stale-record policy as `stale`. A record redelivered after a rebalance counts again. Every
/// result is exported at 0 from the partition's assignment on, so a ratio
/// such as `good / (good + late)` reads 0, not empty, before the first good
/// record.
pub const SLO_MESSAGES: &str = "fresh_consumer.slo.messages";

/// Attribute `fresh_consumer.slo.threshold`: the objective's threshold in
/// seconds, shortest decimal form (`30`, `0.25`).
pub const SLO_THRESHOLD: &str = "fresh_consumer.slo.threshold";
/// Attribute `fresh_consumer.slo.result`: `good`, `late`, `dead_lettered`,
/// `skipped`, `stale` or `no_timestamp` (see [`SloResult`](crate::slo::SloResult)).
pub const SLO_RESULT: &str = "fresh_consumer.slo.result";

/// Attribute `messaging.system`: always `kafka`.
pub const MESSAGING_SYSTEM: &str = "messaging.system";
/// Attribute `messaging.destination.name`: the topic.
pub const MESSAGING_DESTINATION_NAME: &str = "messaging.destination.name";
/// Attribute `messaging.destination.partition.id`: the partition number, as a string.
pub const MESSAGING_DESTINATION_PARTITION_ID: &str = "messaging.destination.partition.id";
/// Attribute `messaging.consumer.group.name`: the consumer group (`group.id`).
pub const MESSAGING_CONSUMER_GROUP_NAME: &str = "messaging.consumer.group.name";
/// Attribute `messaging.operation.name`: `process`, `poll`, `commit` or
/// `send`.
pub const MESSAGING_OPERATION_NAME: &str = "messaging.operation.name";
/// Attribute `messaging.operation.type`: `receive` (polls) or `settle`
/// (commits), on [`CLIENT_OPERATION_DURATION`] only, the one messaging
/// metric whose convention lists it.
pub const MESSAGING_OPERATION_TYPE: &str = "messaging.operation.type";
/// Attribute `error.type`: a low-cardinality failure class. For handler
/// attempts `handler_error`, `panic`, `timeout` (see
/// [`handler_timeout`](crate::FreshConsumer::handler_timeout)),
/// `output_error` (an output was not acknowledged); for commits, outputs
/// and dead-letter sends the Kafka error code name.
pub const ERROR_TYPE: &str = "error.type";
/// Attribute `otel.component.type`: the kind of SDK component,
/// `otlp_grpc_metric_exporter` or `otlp_http_metric_exporter`.
pub const OTEL_COMPONENT_TYPE: &str = "otel.component.type";
/// Attribute `otel.component.name`: the component's type and its instance
/// in the process, `otlp_grpc_metric_exporter/0`.
pub const OTEL_COMPONENT_NAME: &str = "otel.component.name";
/// Attribute `fresh_consumer.timestamp.type`: where the event time came from:
/// `create_time`, `log_append_time`, `header` or `origin` (the upstream
/// origin time, [`FreshConsumer::origin_time`](crate::FreshConsumer::origin_time)) (the monitor's
/// [`MONITOR_TIME_LAG`](super::MONITOR_TIME_LAG): `create_time`, `log_append_time` or `none`).
pub const TIMESTAMP_TYPE: &str = "fresh_consumer.timestamp.type";

/// How a transaction ended ([`TRANSACTIONS`], [`TRANSACTION_DURATION`]):
/// `committed` or `aborted`.
pub const TRANSACTION_OUTCOME: &str = "fresh_consumer.transaction.outcome";

/// Explicit bucket boundaries of [`EVENT_AGE`], in seconds: from 1 ms to
/// 14 days, so week-old ages from replays and long outages still resolve.
pub const EVENT_AGE_BOUNDARIES: &[f64] = &[
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1_800.0,
    3_600.0,
    7_200.0,
    21_600.0,
    43_200.0,
    86_400.0,
    172_800.0,
    604_800.0,
    1_209_600.0,
];

/// Explicit bucket boundaries of the `messaging.*` duration histograms
/// ([`PROCESS_DURATION`], [`CLIENT_OPERATION_DURATION`]), in seconds: the
/// `ExplicitBucketBoundaries` advice of the messaging semantic conventions
/// (v1.44), as OpenTelemetry Java's instrumentations use it. The same
/// boundaries as other services' instrumentation keep `sum by (le)` across
/// them meaningful; longer durations land in the overflow bucket (their sum
/// and count stay exact).
pub const MESSAGING_DURATION_BOUNDARIES: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Explicit bucket boundaries of [`BATCH_MESSAGES`], in records: 1 to
/// 10,000 in 1-2-5 steps (a full batch of the default 500 records lands in
/// its own bucket).
pub const BATCH_MESSAGES_BOUNDARIES: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0,
];

/// Explicit bucket boundaries of the library's own duration histograms
/// ([`BATCH_DURATION`], [`POLL_INTERVAL`]), in seconds: 1 ms to 10 min.
/// Every boundary of [`MESSAGING_DURATION_BOUNDARIES`], plus 1 and 2.5 ms
/// below and 30 s to 10 min above, where a poll gap reaches
/// `max.poll.interval.ms` (5 min by default).
pub const DURATION_BOUNDARIES: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0,
];
