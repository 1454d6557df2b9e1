//! Where the quickstart runs: librdkafka's mock cluster in this process, or
//! a cluster of the user's (`--bootstrap`), checked with a bounded metadata
//! request first; the demo's topic on it, and the log end offsets the
//! table shows.

use std::error::Error;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::args::Args;
use crate::mock_broker::MockBroker;
use crate::names;

/// The topic on the embedded broker; on a cluster, the prefix of the topic
/// the demo creates.
const TOPIC: &str = "quickstart";
/// Partitions of the topic the demo creates.
const PARTITIONS: i32 = 3;
/// How long the first metadata request to a cluster given with
/// `--bootstrap` may take before the run ends with "cannot reach".
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// What the example consumes: the cluster's address, the client properties,
/// the topic and its partition count.
pub struct Target {
    pub bootstrap: String,
    pub properties: Vec<(String, String)>,
    pub topic: String,
    pub partitions: i32,
    /// The topic was created by this run (on a user's cluster: delete it at
    /// the end).
    pub created: bool,
}

impl Target {
    /// The broker: librdkafka's mock cluster, in this process (it speaks
    /// the Kafka protocol on a loopback port, so any Kafka client can
    /// connect to it; it runs until the returned [`MockBroker`] is dropped),
    /// or the user's cluster, checked with a bounded metadata request first
    /// (and the demo's topic created on it). Prints which.
    pub async fn open(args: &Args) -> Result<(Option<MockBroker>, Target), Box<dyn Error>> {
        match &args.bootstrap {
            None => {
                let broker = MockBroker::start()?;
                broker.create_topic(TOPIC, PARTITIONS)?;
                let target = Target {
                    bootstrap: broker.bootstrap().to_owned(),
                    properties: args.properties.clone(),
                    topic: TOPIC.to_owned(),
                    partitions: PARTITIONS,
                    created: false,
                };
                println!(
                    "mock Kafka broker: {}, topic {TOPIC:?} with {PARTITIONS} partitions",
                    target.bootstrap
                );
                Ok((Some(broker), target))
            }
            Some(bootstrap) => {
                let (brokers, partitions) =
                    probe(bootstrap, &args.properties, args.topic.as_deref()).await?;
                let (topic, partitions, created) = match (&args.topic, partitions) {
                    (Some(topic), Some(partitions)) => (topic.clone(), partitions, false),
                    _ => (
                        create_demo_topic(bootstrap, &args.properties, brokers).await?,
                        PARTITIONS,
                        true,
                    ),
                };
                println!(
                    "Kafka cluster: {bootstrap} ({brokers} broker(s)), topic {topic:?} with \
                     {partitions} partitions{}",
                    if created {
                        " (created for this run)"
                    } else {
                        ""
                    }
                );
                let target = Target {
                    bootstrap: bootstrap.clone(),
                    properties: args.properties.clone(),
                    topic,
                    partitions,
                    created,
                };
                Ok((None, target))
            }
        }
    }

    /// A client configuration for this cluster: `bootstrap.servers` and
    /// every `-X` property.
    pub fn config(&self) -> ClientConfig {
        client_config(&self.bootstrap, &self.properties)
    }

    /// Deletes the topic the demo created on the user's cluster (best effort).
    pub async fn delete(&self) {
        let admin: Result<AdminClient<DefaultClientContext>, _> = self.config().create();
        let Ok(admin) = admin else {
            return;
        };
        let options = AdminOptions::new()
            .operation_timeout(Some(METADATA_TIMEOUT))
            .request_timeout(Some(METADATA_TIMEOUT));
        let deleted = tokio::time::timeout(
            METADATA_TIMEOUT * 2,
            admin.delete_topics(&[self.topic.as_str()], &options),
        )
        .await;
        match deleted {
            Ok(Ok(results)) if results.iter().all(Result::is_ok) => {
                println!("deleted topic {:?}", self.topic);
            }
            Ok(Ok(results)) => eprintln!(
                "could not delete topic {:?}: {:?}",
                self.topic,
                results
                    .into_iter()
                    .filter_map(Result::err)
                    .collect::<Vec<_>>()
            ),
            Ok(Err(e)) => eprintln!("could not delete topic {:?}: {e}", self.topic),
            Err(_) => eprintln!("could not delete topic {:?}: no answer in time", self.topic),
        }
    }

    /// The high watermark (log end offset) of each partition, read from the broker.
    pub async fn log_end_offsets(&self) -> Vec<Option<i64>> {
        let config = self.config();
        let topic = self.topic.clone();
        let partitions = self.partitions;
        // `fetch_watermarks` blocks: keep it off the async worker threads.
        tokio::task::spawn_blocking(move || {
            let client: Result<BaseConsumer, _> = config.create();
            let Ok(client) = client else {
                return vec![None; partitions as usize];
            };
            (0..partitions)
                .map(|p| {
                    client
                        .fetch_watermarks(&topic, p, Duration::from_secs(5))
                        .ok()
                        .map(|(_, high)| high)
                })
                .collect()
        })
        .await
        .unwrap_or_else(|_| vec![None; partitions as usize])
    }
}

fn client_config(bootstrap: &str, properties: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    for (key, value) in properties {
        config.set(key, value);
    }
    config
}

/// An error of the user's cluster (unreachable, missing topic), with what to
/// do about it.
#[derive(Debug)]
struct ClusterError(String);

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for ClusterError {}

/// Asks the user's cluster for its metadata (the topic's, with `--topic`),
/// waiting at most [`METADATA_TIMEOUT`]. Returns the broker count and, with
/// `--topic`, the topic's partition count.
async fn probe(
    bootstrap: &str,
    properties: &[(String, String)],
    topic: Option<&str>,
) -> Result<(usize, Option<i32>), Box<dyn Error>> {
    let client: BaseConsumer = client_config(bootstrap, properties).create()?;
    let topic_name = topic.map(str::to_owned);
    // `fetch_metadata` blocks: keep it off the async worker threads.
    let metadata = tokio::task::spawn_blocking(move || {
        client.fetch_metadata(topic_name.as_deref(), METADATA_TIMEOUT)
    })
    .await?
    .map_err(|e| {
        ClusterError(format!(
            "cannot reach the Kafka cluster at {bootstrap} within {}s: {e} (check the address, \
             and the -X security properties the cluster needs)",
            METADATA_TIMEOUT.as_secs()
        ))
    })?;
    let brokers = metadata.brokers().len();
    let Some(name) = topic else {
        return Ok((brokers, None));
    };
    let found = metadata.topics().iter().find(|t| t.name() == name);
    match found {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok((brokers, Some(t.partitions().len() as i32)))
        }
        Some(t) => {
            let why = t
                .error()
                .map(|e| rdkafka::error::RDKafkaErrorCode::from(e).to_string())
                .unwrap_or_else(|| "no partitions".to_owned());
            Err(ClusterError(format!(
                "topic {name:?} does not exist on {bootstrap} or is not readable ({why}); \
                 --topic reads an existing topic (leave it out to run the demo in a topic \
                 of its own)"
            ))
            .into())
        }
        None => Err(ClusterError(format!("topic {name:?} does not exist on {bootstrap}")).into()),
    }
}

/// Creates the demo's topic on the user's cluster: a name of its own,
/// [`PARTITIONS`] partitions, up to 3 replicas.
async fn create_demo_topic(
    bootstrap: &str,
    properties: &[(String, String)],
    brokers: usize,
) -> Result<String, Box<dyn Error>> {
    let name = names::unique(TOPIC);
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap, properties).create()?;
    let replicas = brokers.clamp(1, 3) as i32;
    let topic = NewTopic::new(&name, PARTITIONS, TopicReplication::Fixed(replicas));
    // librdkafka gives up by itself after the request timeout (a broker
    // without CreateTopics, such as librdkafka's mock, never answers).
    let options = AdminOptions::new()
        .operation_timeout(Some(METADATA_TIMEOUT))
        .request_timeout(Some(METADATA_TIMEOUT));
    let refused = |e: &dyn std::fmt::Display| {
        ClusterError(format!(
            "could not create topic {name:?} on {bootstrap}: {e} (pass --topic NAME to read \
             an existing topic instead)"
        ))
    };
    let results = tokio::time::timeout(
        METADATA_TIMEOUT * 2,
        admin.create_topics([&topic], &options),
    )
    .await
    .map_err(|_| refused(&"no answer in time"))?
    .map_err(|e| refused(&e))?;
    for r in results {
        r.map_err(|(_, code)| refused(&code))?;
    }
    Ok(name)
}
