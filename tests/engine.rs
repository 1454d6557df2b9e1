//! The engine on a Kafka broker (the mock cluster, or a real one through
//! `FRESH_CONSUMER_TEST_BOOTSTRAP`): commits only past success, ordering,
//! restarts.

mod support;

use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fresh_consumer::{Record, TopicPartition};
use support::kafka::{TestCluster, unique};
use support::logs;
use support::run::start;
use support::wait::wait_until;

type Seen = Arc<Mutex<Vec<(i32, i64)>>>;

fn recorder(
    seen: &Seen,
) -> impl Fn(Record) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |r: Record| {
        seen.lock().unwrap().push((r.partition(), r.offset()));
        std::future::ready(Ok(()))
    }
}

/// The log capture, a cluster, a one-partition topic `{prefix}-…` holding
/// `n` records (key `k`, payload `v{i}`), and a group `g-{prefix}-…`.
async fn setup(prefix: &str, n: usize) -> (TestCluster, String, String) {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic(prefix, 1).await;
    let group = unique(&format!("g-{prefix}"));
    for i in 0..n {
        cluster
            .produce(&topic, 0, "k", &format!("v{i}"), None)
            .await;
    }
    (cluster, topic, group)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_from_the_committed_offset() {
    let (cluster, topic, group) = setup("restart", 3).await;

    let seen: Seen = Arc::default();
    let run = start(cluster.consumer(&group, &topic, recorder(&seen)));
    wait_until(Duration::from_secs(20), "3 records handled", || async {
        seen.lock().unwrap().len() == 3
    })
    .await;
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 3);
    assert_eq!(
        summary.committed.get(&TopicPartition {
            topic: topic.clone(),
            partition: 0
        }),
        Some(&3)
    );
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![3]);

    // A new consumer in the same group starts at offset 3: it sees the fourth
    // record and none of the first three.
    let seen2: Seen = Arc::default();
    let run2 = start(cluster.consumer(&group, &topic, recorder(&seen2)));
    cluster.produce(&topic, 0, "k", "v3", None).await;
    wait_until(Duration::from_secs(20), "the fourth record", || async {
        !seen2.lock().unwrap().is_empty()
    })
    .await;
    let summary2 = run2.stop().await;
    assert_eq!(*seen2.lock().unwrap(), vec![(0, 3)]);
    assert_eq!(summary2.records_succeeded, 1);
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_record_holds_the_commit_until_it_succeeds() {
    let (cluster, topic, group) = setup("fail2", 5).await;
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let attempts: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let succeeded: Seen = Arc::default();
    let handler = {
        let (failing, attempts, succeeded) = (
            Arc::clone(&failing),
            Arc::clone(&attempts),
            Arc::clone(&succeeded),
        );
        move |r: Record| {
            let (failing, attempts, succeeded) = (
                Arc::clone(&failing),
                Arc::clone(&attempts),
                Arc::clone(&succeeded),
            );
            async move {
                *attempts.lock().unwrap().entry(r.offset()).or_default() += 1;
                if r.offset() == 2 && failing.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(std::io::Error::other("downstream unavailable"));
                }
                succeeded.lock().unwrap().push((r.partition(), r.offset()));
                Ok(())
            }
        }
    };
    let run = start(cluster.consumer(&group, &topic, handler));
    wait_until(
        Duration::from_secs(20),
        "offset 2 failing repeatedly",
        || async { attempts.lock().unwrap().get(&2).copied().unwrap_or(0) >= 5 },
    )
    .await;
    wait_until(
        Duration::from_secs(10),
        "offsets 0 and 1 committed",
        || async { cluster.committed(&group, &topic, 1).await == vec![2] },
    )
    .await;
    // Several commit intervals later, still nothing past the failing record.
    let before = attempts.lock().unwrap().get(&2).copied().unwrap();
    wait_until(Duration::from_secs(10), "more failed attempts", || async {
        attempts.lock().unwrap().get(&2).copied().unwrap() >= before + 2
    })
    .await;
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![2]);
    assert!(
        !attempts.lock().unwrap().contains_key(&3),
        "offset 3 ran before 2 succeeded"
    );

    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_until(
        Duration::from_secs(20),
        "committed offset reaches 5",
        || async { cluster.committed(&group, &topic, 1).await == vec![5] },
    )
    .await;
    let summary = run.stop().await;
    assert_eq!(
        *succeeded.lock().unwrap(),
        (0..5).map(|o| (0, o)).collect::<Vec<_>>(),
        "every offset succeeded exactly once, in order"
    );
    assert_eq!(summary.records_received, 5, "all five were fetched");
    assert!(summary.failed_attempts >= 7);
}

/// `commit_batch_records`: a count of completed records commits before the
/// commit interval comes round (here an hour away), while the consumer runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_of_completed_records_commits_before_the_interval() {
    logs::init();
    let (cluster, topic, group) = TestCluster::with_topic("commit-count", 1).await;
    cluster.produce_many(&topic, 1, 120).await;
    let seen: Seen = Arc::default();
    let run = start(
        cluster
            .consumer(&group, &topic, recorder(&seen))
            .commit_interval(Duration::from_secs(3600))
            .commit_batch_records(50),
    );
    wait_until(Duration::from_secs(20), "120 records handled", || async {
        seen.lock().unwrap().len() == 120
    })
    .await;
    wait_until(
        Duration::from_secs(10),
        "a commit by count while running",
        || async { cluster.committed(&group, &topic, 1).await[0] >= 50 },
    )
    .await;
    let summary = run.stop().await;
    assert_eq!(summary.records_succeeded, 120);
    // The final commit at shutdown covers the rest.
    assert_eq!(cluster.committed(&group, &topic, 1).await, vec![120]);
}

/// Headers reach the handler as the producer wrote them (order, a null value,
/// an empty one), on both read paths: the partition's own queue (read in
/// batches) and the poll loop's hand-over. With `read_headers(false)` they do
/// not, and everything else about the record is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_reach_the_handler_unless_turned_off() {
    logs::init();
    let cluster = TestCluster::start();
    let topic = cluster.topic("headers", 1).await;
    let headers: [(&str, Option<&[u8]>); 3] = [
        ("trace", Some(b"abc")),
        ("null", None),
        ("empty", Some(b"")),
    ];
    cluster
        .produce_with_headers(&topic, 0, "k0", "v0", Some(1_700_000_000_000), &headers)
        .await;
    cluster.produce(&topic, 0, "k1", "v1", None).await;
    // The cases the library's header shortcut (`record.rs`,
    // `may_have_headers`: the byte after the value is the header count)
    // must get right: an empty value with headers (the count is the byte
    // right after it), a null value with headers (no value to read past),
    // and records with and without headers in one compressed batch (values
    // inside the decompressed buffer).
    cluster
        .produce_with_headers(&topic, 0, "k2", "", None, &headers[..1])
        .await;
    {
        use rdkafka::message::{Header, OwnedHeaders};
        let r = FutureRecord::<str, [u8]>::to(&topic)
            .partition(0)
            .key("k3")
            .headers(OwnedHeaders::new().insert(Header {
                key: "tomb",
                value: Some(b"stone".as_slice()),
            }));
        cluster
            .producer()
            .send(r, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .expect("produce a null value");
    }
    {
        use rdkafka::message::{Header, OwnedHeaders};
        let gzip: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap())
            .set("compression.type", "gzip")
            .set("linger.ms", "100")
            .create()
            .expect("gzip producer");
        let with = FutureRecord::to(&topic)
            .partition(0)
            .key("k4")
            .payload("v4")
            .headers(OwnedHeaders::new().insert(Header {
                key: "z",
                value: Some(b"1".as_slice()),
            }));
        let without = FutureRecord::to(&topic)
            .partition(0)
            .key("k5")
            .payload("v5");
        let (a, b) = tokio::join!(
            gzip.send(with, Duration::from_secs(10)),
            gzip.send(without, Duration::from_secs(10))
        );
        a.map_err(|(e, _)| e).expect("produce k4");
        b.map_err(|(e, _)| e).expect("produce k5");
    }
    const RECORDS: usize = 6;
    type Got = Arc<Mutex<Vec<(i64, String, Vec<(String, Option<Vec<u8>>)>)>>>;
    for (split, read) in [(true, true), (false, true), (true, false)] {
        let got: Got = Arc::default();
        let handler = {
            let got = Arc::clone(&got);
            move |r: Record| {
                let h = r
                    .headers()
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect();
                let payload = String::from_utf8_lossy(r.payload().unwrap_or_default()).into_owned();
                got.lock().unwrap().push((r.offset(), payload, h));
                std::future::ready(Ok::<(), std::io::Error>(()))
            }
        };
        let run = start(
            cluster
                .consumer(&unique("g-headers"), &topic, handler)
                .split_partition_queues(split)
                .read_headers(read),
        );
        wait_until(Duration::from_secs(20), "6 records handled", || async {
            got.lock().unwrap().len() == RECORDS
        })
        .await;
        run.stop().await;
        let owned = |h: &[(&str, Option<&[u8]>)]| -> Vec<(String, Option<Vec<u8>>)> {
            if read {
                h.iter()
                    .map(|(n, v)| (n.to_string(), v.map(<[u8]>::to_vec)))
                    .collect()
            } else {
                Vec::new()
            }
        };
        assert_eq!(
            *got.lock().unwrap(),
            vec![
                (0, "v0".to_owned(), owned(&headers)),
                (1, "v1".to_owned(), Vec::new()),
                (2, String::new(), owned(&headers[..1])),
                (3, String::new(), owned(&[("tomb", Some(b"stone"))])),
                (4, "v4".to_owned(), owned(&[("z", Some(b"1"))])),
                (5, "v5".to_owned(), Vec::new()),
            ],
            "split_partition_queues({split}), read_headers({read})"
        );
    }
}
