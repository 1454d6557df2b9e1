//! Record batches that fail librdkafka's CRC check (`check.crcs`; a
//! damaged log segment): each is counted once in
//! `RunSummary::records_unreadable`, logged once at ERROR with its offset,
//! and the partition moves past it to the good records behind it, whatever
//! the batch's size, wherever the worker meets it, and with the partition's
//! queue split or not (issue 19, window 4; issue 31, items 2-4).
//!
//! Needs the mock broker: a real broker checks the CRC of what it is sent
//! and refuses a corrupt batch, so these skip on a real cluster.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::{BoxError, Record};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::wait::wait_until;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// Handler attempts per offset.
#[derive(Clone, Default)]
struct Attempts(Arc<Mutex<BTreeMap<i64, u32>>>);

impl Attempts {
    fn note(&self, offset: i64) {
        *self.0.lock().unwrap().entry(offset).or_default() += 1;
    }

    fn of(&self, offset: i64) -> u32 {
        self.0.lock().unwrap().get(&offset).copied().unwrap_or(0)
    }
}

/// Window 4. A record batch that fails librdkafka's CRC check
/// (`check.crcs`) at the end of what the worker read: librdkafka reports it
/// as an error event at the batch's offset and, while nothing after it can
/// be fetched with it, fetches it again and again (the mock broker serves
/// one record batch per fetch, so there it never gets past it). Before the
/// fix the worker sought back to it after each batch that held the event,
/// warned on every report, counted nothing, and the partition never got
/// past the record (stuck at offset 20, with a report every fetch
/// backoff). Now the record is counted once in
/// `RunSummary::records_unreadable`, logged once at ERROR with its offset,
/// and the worker seeks past it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_costs_one_reposition_and_is_counted() {
    logs::init();
    let cluster = TestCluster::start();
    // A real broker checks the CRC of what it is sent.
    if cluster
        .mock_or_skip("a broker that stores a corrupt record batch")
        .is_none()
    {
        return;
    }
    let topic = cluster.topic("corrupt-record", 1).await;
    let group = unique("g-corrupt-record");
    for i in 0..20 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "v", None)
            .await;
    }
    assert_eq!(
        produce_corrupt(cluster.bootstrap(), &topic, 0, b"damaged"),
        0
    );
    let attempts = Attempts::default();
    // 20 ms a record: librdkafka fetches the whole partition, the corrupt
    // batch included, while the worker is busy with the first records, so
    // the worker reads the report in a batch behind offset 19 (the path that
    // sought back to it; an idle worker reads it on its own, which ends the
    // same way).
    let handler = {
        let attempts = attempts.clone();
        move |r: Record| {
            let attempts = attempts.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                attempts.note(r.offset());
                Ok::<(), BoxError>(())
            }
        }
    };
    // What the worker logs about the corrupt batch: a consume error for each
    // report before the fix, the unreadable record once now.
    let reports = || {
        logs::count(|e| {
            e.is_library()
                && e.mentions(&topic)
                && (e.mentions("consume error") || e.mentions("record cannot be read"))
        })
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .set("check.crcs", "true")
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_until(WAIT, "offsets 0 to 19 committed", || async {
        cluster.committed(&group, &topic, 1).await[0] >= 20
    })
    .await;
    for i in 21..26 {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "v", None)
            .await;
    }
    wait_until(
        WAIT,
        "the records after the corrupt one handled and committed",
        || async { cluster.committed(&group, &topic, 1).await == vec![26] },
    )
    .await;
    stop.cancel();
    let summary = run.await.unwrap().unwrap();
    for offset in (0..20).chain(21..26) {
        assert_eq!(attempts.of(offset), 1, "offset {offset} handled once");
    }
    assert_eq!(attempts.of(20), 0);
    assert_eq!(summary.records_unreadable, 1, "{summary:?}");
    assert_eq!(summary.records_received, 25, "{summary:?}");
    let logged = logs::count(|e| {
        e.is_library() && e.mentions(&topic) && e.mentions("record cannot be read")
    });
    assert_eq!(logged, 1, "the unreadable record is logged once");
    assert_eq!(reports(), 1, "nothing else logged about it");
}
/// Appends one record with a broken CRC to `topic`'s `partition` on the
/// mock broker (which stores record batches as sent, without checking
/// their CRC, as a broker with a damaged log segment would serve them):
/// a hand-written Produce v3 request over the broker's loopback listener.
/// Returns the broker's error code for the partition (0 on success).
fn produce_corrupt(bootstrap: &str, topic: &str, partition: i32, value: &[u8]) -> i16 {
    produce_corrupt_batch(bootstrap, topic, partition, value, 1)
}

/// Like [`produce_corrupt`], with `records` records in the one batch.
fn produce_corrupt_batch(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    value: &[u8],
    records: i32,
) -> i16 {
    use std::io::{Read, Write};
    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    // Each record: length, attributes, timestamp delta, offset delta, null
    // key, value, no headers.
    let mut record = Vec::new();
    for delta in 0..records {
        let mut body = vec![0u8];
        varint(&mut body, 0);
        varint(&mut body, delta as i64);
        varint(&mut body, -1);
        varint(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        varint(&mut body, 0);
        varint(&mut record, body.len() as i64);
        record.extend_from_slice(&body);
    }
    // Record batch v2; the CRC covers attributes to the end and is wrong.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut after_crc = Vec::new();
    after_crc.extend_from_slice(&0i16.to_be_bytes()); // attributes
    after_crc.extend_from_slice(&(records - 1).to_be_bytes()); // last offset delta
    after_crc.extend_from_slice(&now.to_be_bytes()); // first timestamp
    after_crc.extend_from_slice(&now.to_be_bytes()); // max timestamp
    after_crc.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    after_crc.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    after_crc.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    after_crc.extend_from_slice(&records.to_be_bytes()); // records
    after_crc.extend_from_slice(&record);
    let mut batch = Vec::new();
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
    batch.extend_from_slice(&((4 + 1 + 4 + after_crc.len()) as i32).to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&0xdead_beef_u32.to_be_bytes()); // CRC32C: wrong
    batch.extend_from_slice(&after_crc);
    // Produce v3: header (api key 0, version 3, correlation id, client id),
    // then transactional id (null), acks, timeout, one topic, one partition.
    let mut req = Vec::new();
    req.extend_from_slice(&0i16.to_be_bytes());
    req.extend_from_slice(&3i16.to_be_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(b"test");
    req.extend_from_slice(&(-1i16).to_be_bytes());
    req.extend_from_slice(&(-1i16).to_be_bytes());
    req.extend_from_slice(&5000i32.to_be_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    req.extend_from_slice(topic.as_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&partition.to_be_bytes());
    req.extend_from_slice(&(batch.len() as i32).to_be_bytes());
    req.extend_from_slice(&batch);
    let addr = bootstrap.split(',').next().unwrap();
    let mut conn = std::net::TcpStream::connect(addr).expect("connect to the mock broker");
    conn.write_all(&(req.len() as i32).to_be_bytes()).unwrap();
    conn.write_all(&req).unwrap();
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).unwrap();
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    conn.read_exact(&mut resp).unwrap();
    // Correlation id, topics (1), name, partitions (1), partition, error code.
    let at = 4 + 4 + 2 + topic.len() + 4 + 4;
    i16::from_be_bytes([resp[at], resp[at + 1]])
}

/// `before` good records, one corrupt batch of `batch` records, then
/// `after` good records, read by a new group: every good record is handled
/// once and committed, the batch counted once.
async fn past_a_corrupt_batch(before: i64, batch: i32, after: i64, split_queues: bool) {
    logs::init();
    let cluster = TestCluster::start();
    if cluster
        .mock_or_skip("a broker that stores a corrupt record batch")
        .is_none()
    {
        return;
    }
    let topic = cluster.topic("corrupt-batch", 1).await;
    let group = unique("g-corrupt-batch");
    for i in 0..before {
        cluster
            .produce(&topic, 0, &format!("k{i}"), "v", None)
            .await;
    }
    assert_eq!(
        produce_corrupt_batch(cluster.bootstrap(), &topic, 0, b"damaged", batch),
        0
    );
    let first_good = before + batch as i64;
    for i in 0..after {
        cluster
            .produce(&topic, 0, &format!("k{}", first_good + i), "v", None)
            .await;
    }
    let end = first_good + after;
    assert_eq!(cluster.high_watermarks(&topic, 1).await, vec![end]);
    let attempts = Attempts::default();
    let handler = {
        let attempts = attempts.clone();
        move |r: Record| {
            attempts.note(r.offset());
            std::future::ready(Ok::<(), BoxError>(()))
        }
    };
    let stop = CancellationToken::new();
    let run = tokio::spawn(
        cluster
            .consumer(&group, &topic, handler)
            .set("check.crcs", "true")
            .split_partition_queues(split_queues)
            .run_until(stop.clone().cancelled_owned()),
    );
    wait_until(WAIT, "every good record committed", || async {
        cluster.committed(&group, &topic, 1).await == vec![end]
    })
    .await;
    stop.cancel();
    let summary = run.await.unwrap().unwrap();
    for offset in (0..before).chain(first_good..end) {
        assert_eq!(attempts.of(offset), 1, "offset {offset} handled once");
    }
    for offset in before..first_good {
        assert_eq!(attempts.of(offset), 0, "offset {offset} is unreadable");
    }
    assert_eq!(summary.records_unreadable, 1, "{summary:?}");
    assert_eq!(
        summary.records_received,
        (before + after) as u64,
        "{summary:?}"
    );
    let logged = logs::count(|e| {
        e.is_library() && e.mentions(&topic) && e.mentions("record cannot be read")
    });
    assert_eq!(logged, 1, "the unreadable batch is logged once");
}

/// Issue 31, item 2: the corrupt batch is the first thing the worker reads
/// (a new group, or the next member after one that committed at it).
/// Before the fix: nothing handled, nothing counted, nothing committed, a
/// WARN "consume error" on every fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_batch_read_first_is_counted_and_passed() {
    past_a_corrupt_batch(0, 1, 5, true).await;
}

/// Issue 31, item 4: a corrupt batch of several records. librdkafka 2.12.1
/// does not skip a v2 batch that fails the CRC check (it refetches it at
/// the same offset); the library steps past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_batch_of_several_records_is_passed() {
    past_a_corrupt_batch(20, 5, 5, true).await;
}

/// Items 2 and 4 together: several corrupt records, read first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_batch_of_several_records_read_first_is_passed() {
    past_a_corrupt_batch(0, 3, 5, true).await;
}
