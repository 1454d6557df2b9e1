//! The embedded broker with a topic and one group: partition 0 caught
//! up, partition 1 behind by records stamped 10 minutes ago, partition 2
//! with a record without a timestamp at the committed offset.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// librdkafka's mock cluster (one broker on a loopback port, in this
/// process), alive as long as the value.
pub type Broker = MockCluster<'static, DefaultProducerContext>;

/// The running broker (alive as long as the value) and the topic.
pub async fn setup() -> Result<(Broker, String), Box<dyn std::error::Error>> {
    let broker = MockCluster::new(1)?;
    let bootstrap = broker.bootstrap_servers();
    let topic = "demo-orders".to_owned();
    broker.create_topic(&topic, 3, 1)?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    for (p, n, ts) in [
        (0, 50, Some(now)),
        (1, 200, Some(now - 600_000)),
        (2, 20, Some(-1)),
    ] {
        for i in 0..n {
            let key = format!("k{i}");
            let mut r = FutureRecord::to(&topic).partition(p).key(&key).payload("v");
            if let Some(ts) = ts {
                r = r.timestamp(ts);
            }
            producer
                .send(r, Duration::from_secs(10))
                .await
                .map_err(|(e, _)| e)?;
        }
    }
    let (b, t) = (bootstrap.clone(), topic.clone());
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &b)
            .set("group.id", "demo-billing")
            .create()
            .map_err(|e| e.to_string())?;
        let mut tpl = TopicPartitionList::new();
        for (p, o) in [(0, 50), (1, 20), (2, 5)] {
            tpl.add_partition_offset(&t, p, Offset::Offset(o))
                .map_err(|e| e.to_string())?;
        }
        c.commit(&tpl, CommitMode::Sync).map_err(|e| e.to_string())
    })
    .await??;
    Ok((broker, topic))
}
