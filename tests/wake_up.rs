//! A partition handed back to the same member while its earlier worker is
//! still in a handler (issue 31, item 5): the earlier worker's split queue
//! is dropped late, and rust-rdkafka's drop turns off the wake-up of the
//! partition's librdkafka queue, which the new worker reads too. Before the
//! fix the new worker was woken only by its idle re-poll (every second):
//! produce-to-handled took 59-953 ms instead of 2-11 ms.
//!
//! Needs the mock broker's fault injection (a heartbeat error makes the
//! member lose its assignment and join again, and it gets the partition
//! back); skipped on a real cluster.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fresh_consumer::{BoxError, Record};
use rdkafka::types::RDKafkaApiKey;
use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID;
use support::kafka::TestCluster;
use support::logs;
use support::run::{start, wait_snapshot};
use support::wait::{WAIT, wait_until};
use tokio::sync::Notify;

/// Records produced (one at a time, each after the one before was
/// handled) once the earlier worker ended.
const PROBES: i64 = 12;

/// Probes allowed over [`WOKEN`]: one, for a loaded machine that
/// descheduled a worker or the poll loop once.
const SLOW_ALLOWED: usize = 1;

/// A bound far below the idle re-poll (1 s) and far above a woken worker's
/// latency (2-11 ms): with the wake-up off, a probe is under it with a
/// chance of about 0.4, so 11 or more of 12 with about 3e-4.
const WOKEN: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_handed_back_while_its_old_worker_runs_is_woken_by_records() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("wake-up", 1).await;
    let Some(mock) = cluster.mock_or_skip("the mock broker's fault injection") else {
        return;
    };
    // The first attempt of offset 0 waits for `release`; the record is
    // handled again (quickly) by the partition's next worker.
    let release = Arc::new(Notify::new());
    let first_returned = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let handled: Arc<Mutex<BTreeMap<i64, Vec<Instant>>>> = Arc::default();
    let handler = {
        let (release, first_returned, held, handled) = (
            release.clone(),
            first_returned.clone(),
            held.clone(),
            handled.clone(),
        );
        move |r: Record| {
            let (release, first_returned, held, handled) = (
                release.clone(),
                first_returned.clone(),
                held.clone(),
                handled.clone(),
            );
            async move {
                if r.offset() == 0 && !held.swap(true, Ordering::SeqCst) {
                    release.notified().await;
                    first_returned.store(true, Ordering::SeqCst);
                }
                handled
                    .lock()
                    .unwrap()
                    .entry(r.offset())
                    .or_default()
                    .push(Instant::now());
                Ok::<(), BoxError>(())
            }
        }
    };
    let run = start(
        cluster
            .consumer(&group, &topic, handler)
            // The mock waits for the old member's session to expire.
            .set("session.timeout.ms", "2000")
            .set("heartbeat.interval.ms", "200")
            .revoke_timeout(Duration::from_millis(100)),
    );
    let first = wait_snapshot(&run.health, WAIT, "assigned", |s| {
        s.member_id.is_some() && s.partitions.len() == 1
    })
    .await;
    let first_id = first.member_id.clone().unwrap();
    cluster.produce(&topic, 0, "held", "v", None).await;
    wait_until(WAIT, "the first attempt of offset 0 running", || async {
        held.load(Ordering::SeqCst)
    })
    .await;
    mock.request_errors(
        RDKafkaApiKey::Heartbeat,
        &[RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID],
    );
    wait_snapshot(
        &run.health,
        WAIT,
        "the partition back, a new member id",
        |s| s.member_id.as_deref().is_some_and(|id| id != first_id) && s.partitions.len() == 1,
    )
    .await;
    // The earlier worker's handler returns now; the worker ends and drops
    // its queue. The new worker has offset 0 to handle again.
    release.notify_one();
    wait_until(
        WAIT,
        "the earlier worker's handler returned, offset 0 handled again",
        || async {
            first_returned.load(Ordering::SeqCst)
                && handled
                    .lock()
                    .unwrap()
                    .get(&0)
                    .is_some_and(|v| !v.is_empty())
        },
    )
    .await;
    let mut latencies = Vec::new();
    for offset in 1..=PROBES {
        let sent = Instant::now();
        cluster.produce(&topic, 0, "probe", "v", None).await;
        wait_until(WAIT, "the probe handled", || async {
            handled.lock().unwrap().contains_key(&offset)
        })
        .await;
        let at = handled.lock().unwrap()[&offset][0];
        latencies.push(at.saturating_duration_since(sent));
    }
    run.stop().await;
    eprintln!("produce-to-handled: {latencies:?}");
    let slow = latencies.iter().filter(|l| **l > WOKEN).count();
    assert!(
        slow <= SLOW_ALLOWED,
        "records reached the handler only at the idle re-poll: {latencies:?}"
    );
}
