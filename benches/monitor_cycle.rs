//! The cost of one group-monitor cycle for 50 groups on 1,000 partitions
//! (issue 27): one topic of 1,000 partitions, one record in each, and 50
//! groups that each committed offset 0 everywhere (so every partition has
//! lag 1 for every group, and the record at the committed offset is read
//! once per partition, shared by the 50 groups).
//!
//!     cargo bench --bench monitor_cycle                     # the embedded mock broker
//!     BENCH_MONITOR_BOOTSTRAP=host:port cargo bench --bench monitor_cycle   # a real cluster
//!     cargo bench --bench monitor_cycle -- --test           # smoke: 5 groups, 100 partitions
//!
//! Prints the first cycle (1,000 records read) and the next ones (the
//! timestamps remembered: two ListOffsets per partition and one OffsetFetch
//! per group). Latest results: benches/README.md.

mod support;

use std::time::{Duration, Instant};

use fresh_consumer::monitor::GroupMonitor;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let (groups, partitions) = if smoke { (5, 100) } else { (50, 1000) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let real = std::env::var("BENCH_MONITOR_BOOTSTRAP").ok();
    let mock = real.is_none().then(support::mock_broker);
    let bootstrap = match (&real, &mock) {
        (Some(b), _) => b.clone(),
        (None, Some(m)) => m.bootstrap().to_owned(),
        (None, None) => unreachable!(),
    };
    let topic = match &mock {
        // The mock broker creates topics through its own API.
        Some(m) => support::topic(m, "monitor-cycle", partitions),
        None => support::unique("monitor-cycle"),
    };
    runtime.block_on(async {
        if real.is_some() {
            let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .create()
                .unwrap();
            let created = admin
                .create_topics(
                    &[NewTopic::new(
                        &topic,
                        partitions,
                        TopicReplication::Fixed(1),
                    )],
                    &AdminOptions::new(),
                )
                .await
                .unwrap();
            assert!(created.iter().all(|r| r.is_ok()), "{created:?}");
        }
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("linger.ms", "5")
            .create()
            .unwrap();
        let sends: Vec<_> = (0..partitions)
            .map(|p| {
                producer
                    .send_result(FutureRecord::to(&topic).partition(p).key("k").payload("v"))
                    .unwrap()
            })
            .collect();
        for s in sends {
            s.await.unwrap().unwrap();
        }
    });
    let names: Vec<String> = (0..groups).map(|g| format!("{topic}-g{g}")).collect();
    for g in &names {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", g)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(&topic, p, Offset::Offset(0))
                .unwrap();
        }
        c.commit(&tpl, CommitMode::Sync).unwrap();
    }
    runtime.block_on(async {
        let started = Instant::now();
        let mut m = GroupMonitor::new()
            .bootstrap_servers(&bootstrap)
            .groups(names.clone())
            .topics([topic.as_str()])
            .request_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(30))
            .connect()
            .await
            .expect("connect");
        let connect = started.elapsed();
        let mut costs = Vec::new();
        let mut read = Vec::new();
        for _ in 0..5 {
            let r = m.cycle().await.expect("cycle");
            assert_eq!(r.groups.len(), groups);
            costs.push(r.cycle_duration);
            read.push(r.records_read);
        }
        println!(
            "monitor cycle, {groups} groups x {partitions} partitions ({}): connect {connect:?}; first cycle {:?} ({} records read); next {:?}",
            if real.is_some() { "real cluster" } else { "mock broker" },
            costs[0],
            read[0],
            &costs[1..]
        );
    });
}
