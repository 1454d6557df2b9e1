//! The steps of a redrive: read a dead-letter topic from a group's position
//! to its end, and republish the original records to their source topics.
//!
//! Shared: `examples/redrive.rs` includes it with
//! `#[path = "support/dead_letters.rs"] mod dead_letters;`, and
//! `tests/failures.rs` redrives through it too.

// Each includer uses part of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use fresh_consumer::failure::dead_letter::DeadLetterRecord;
use fresh_consumer::{BoxError, Record, RecordTimestamp};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::{BorrowedMessage, Header as KafkaHeader, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Each blocking Kafka call gives up after this long.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The producer to republish with: `acks=all` and idempotence, so that an
/// acknowledged write is there to stay.
pub fn producer(bootstrap: &str) -> KafkaResult<FutureProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
}

/// Produces the original record of `d` to its source topic and partition
/// and waits for the acknowledgement. Returns (partition, offset) of the copy.
pub async fn republish(
    producer: &FutureProducer,
    d: &DeadLetterRecord,
) -> Result<(i32, i64), BoxError> {
    let mut headers = OwnedHeaders::new_with_capacity(d.headers.len());
    for h in &d.headers {
        headers = headers.insert(KafkaHeader {
            key: &h.name,
            value: h.value.as_deref(),
        });
    }
    let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&d.topic)
        .partition(d.partition)
        .headers(headers);
    if let Some(k) = &d.key {
        out = out.key(k);
    }
    if let Some(p) = &d.payload {
        out = out.payload(p);
    }
    // The original event time, so the event age after the fix tells the
    // truth about how late the record is.
    if let Some(ms) = d.timestamp.millis() {
        out = out.timestamp(ms);
    }
    let delivery = producer.send(out, TIMEOUT).await.map_err(|(e, _)| e)?;
    Ok((delivery.partition, delivery.offset))
}

/// Reads every record of `dlq` from `group`'s committed position (or the
/// start) up to the end as it is now. Returns the consumer (to commit with),
/// the records, and the offsets to commit once they are dealt with.
pub fn read_dead_letters(
    bootstrap: &str,
    dlq: &str,
    group: &str,
    from_beginning: bool,
) -> Result<(BaseConsumer, Vec<Record>, TopicPartitionList), BoxError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(dlq), TIMEOUT)?;
    let topic = metadata
        .topics()
        .first()
        .ok_or_else(|| format!("no metadata for {dlq}"))?;
    if let Some(e) = topic.error() {
        return Err(format!("topic {dlq}: {}", RDKafkaErrorCode::from(e)).into());
    }
    let partitions: Vec<i32> = topic.partitions().iter().map(|p| p.id()).collect();
    let mut wanted = TopicPartitionList::new();
    for &p in &partitions {
        wanted.add_partition(dlq, p);
    }
    let committed = consumer.committed_offsets(wanted, TIMEOUT)?;

    let mut start = TopicPartitionList::new();
    let mut end = TopicPartitionList::new();
    // (partition, next offset to read, end offset)
    let mut open: Vec<(i32, i64, i64)> = Vec::new();
    for &p in &partitions {
        let (lo, hi) = consumer.fetch_watermarks(dlq, p, TIMEOUT)?;
        let from = match committed.find_partition(dlq, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) if !from_beginning => o.max(lo),
            _ => lo,
        };
        if hi > from {
            start.add_partition_offset(dlq, p, Offset::Offset(from))?;
            end.add_partition_offset(dlq, p, Offset::Offset(hi))?;
            open.push((p, from, hi));
        }
    }
    let mut records = Vec::new();
    if open.is_empty() {
        return Ok((consumer, records, end));
    }
    consumer.assign(&start)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !open.is_empty() {
        if Instant::now() > deadline {
            return Err(format!("reading {dlq} took longer than 60 s").into());
        }
        match consumer.poll(Duration::from_millis(200)) {
            // Nothing came: a partition whose position reached its end is
            // done even when its last offsets hold no record (transaction
            // markers, compaction).
            None => {
                let position = consumer.position()?;
                open.retain(|&(p, _, end)| {
                    !matches!(
                        position.find_partition(dlq, p).map(|e| e.offset()),
                        Some(Offset::Offset(o)) if o >= end
                    )
                });
            }
            Some(Ok(m)) => {
                let (p, o) = (m.partition(), m.offset());
                if let Some(e) = open.iter_mut().find(|e| e.0 == p) {
                    if o < e.2 {
                        records.push(to_record(&m));
                    }
                    e.1 = o + 1;
                }
                open.retain(|e| e.1 < e.2);
            }
            Some(Err(e)) => return Err(e.into()),
        }
    }
    Ok((consumer, records, end))
}

/// A consumed message as a library [`Record`], for
/// [`DeadLetterRecord::from_record`].
pub fn to_record(m: &BorrowedMessage<'_>) -> Record {
    let timestamp = match m.timestamp() {
        rdkafka::Timestamp::NotAvailable => RecordTimestamp::NotAvailable,
        rdkafka::Timestamp::CreateTime(ms) => RecordTimestamp::CreateTime(ms),
        rdkafka::Timestamp::LogAppendTime(ms) => RecordTimestamp::LogAppendTime(ms),
    };
    let mut r = Record::new(m.topic(), m.partition(), m.offset()).with_timestamp(timestamp);
    if let Some(k) = m.key() {
        r = r.with_key(k.to_vec());
    }
    if let Some(p) = m.payload() {
        r = r.with_payload(p.to_vec());
    }
    if let Some(headers) = m.headers() {
        for h in headers.iter() {
            r = r.with_header(h.key, h.value.map(<[u8]>::to_vec));
        }
    }
    r
}
