//! The monitor's reads from Kafka, all blocking (run on a blocking thread):
//! topic metadata, watermarks, the watched groups' committed offsets, and
//! the timestamps of the records at those offsets.
//!
//! No client joins a group or commits: the offset readers carry the watched
//! group's `group.id` only to ask for its offsets (OffsetFetch), and the
//! probe that reads records assigns partitions under a group id of its own.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, Timestamp, TopicPartitionList};

use crate::config::redact_config_error;
use crate::error::ConfigError;
use crate::health::Replication;
use crate::monitor::discover::{PROBE_GROUP_ID, candidates};
use crate::monitor::error::MonitorError;
use crate::monitor::judge::{HeadRead, Observation};
use crate::record::RecordTimestamp;

/// The probe's own client properties (beside its group id and isolation
/// level), set after the user's.
pub(crate) const PROBE_PROPERTIES: &[(&str, &str)] = &[
    ("auto.offset.reset", "earliest"),
    // One bounded read: a small fetch, nothing queued ahead.
    ("max.partition.fetch.bytes", "65536"),
    ("fetch.max.bytes", "1048576"),
    ("queued.min.messages", "1"),
    ("queued.max.messages.kbytes", "1024"),
    ("fetch.wait.max.ms", "50"),
    // With `queued.min.messages=1` one record fills the fetch queue, and
    // librdkafka then postpones the partition's next fetch by this backoff
    // (1,000 ms by default, its CONFIGURATION.md warns of ~1 s delays for
    // the pair): a cycle that assigned a partition whose fetch was backed
    // off waited ~1 s for its record, read the time lag that much high and
    // overran its interval. 10 ms keeps a cycle's cost and schedule off
    // librdkafka's backoff.
    ("fetch.queue.backoff.ms", "10"),
    // Reaching the end without a record: nothing readable.
    ("enable.partition.eof", "true"),
];

mod members;
mod state;

use state::Probed;
pub(crate) use state::{CycleReads, GroupReads, Reader, ReaderSettings};

/// One partition's observation from its offsets, before the record at the
/// committed offset is read: the lag counts to the last stable offset under
/// `read_committed` (records of open transactions cannot be read, so they
/// do not wait), to the high watermark under `read_uncommitted`.
pub(crate) fn observation(
    topic: &str,
    partition: i32,
    (log_start, high_watermark, last_stable): (i64, i64, i64),
    committed: Option<i64>,
    read_committed: bool,
) -> Observation {
    Observation {
        topic: topic.to_owned(),
        partition,
        committed,
        log_start,
        high_watermark,
        last_stable,
        end: if read_committed {
            last_stable
        } else {
            high_watermark
        },
        head: HeadRead::NotNeeded,
        owner: None,
        replication: None,
    }
}

/// `observations` without the topics the group does not read: a watched
/// topic on which the group has no committed offset at all, when it has one
/// on another watched topic. A group is judged (and its replicas capped)
/// on what it consumes, not on everything the monitor watches.
fn read_topics_only(observations: Vec<Observation>) -> Vec<Observation> {
    let read: HashSet<String> = observations
        .iter()
        .filter(|o| o.committed.is_some())
        .map(|o| o.topic.clone())
        .collect();
    if read.is_empty() {
        return observations;
    }
    observations
        .into_iter()
        .filter(|o| read.contains(&o.topic))
        .collect()
}

fn client(settings: &ReaderSettings, extra: &[(&str, &str)]) -> Result<BaseConsumer, MonitorError> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &settings.bootstrap);
    for (k, v) in &settings.properties {
        cc.set(k, v);
    }
    cc.set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("allow.auto.create.topics", "false");
    for (k, v) in extra {
        cc.set(*k, *v);
    }
    cc.create()
        .map_err(|e| MonitorError::Config(redact_config_error(e)))
}

/// The client that reads one group's committed offsets. Under
/// `read_committed` (librdkafka's default) an offset fetch asks for stable
/// offsets only (KIP-447's `require_stable`): while a member's transaction
/// holds pending offsets for the group, the broker answers
/// `UNSTABLE_OFFSET_COMMIT` and librdkafka asks again until the request
/// times out. A transactional member killed with its transaction open
/// leaves it so until `transaction.timeout.ms` aborts it (a minute by
/// default), and the monitor would read nothing for that group meanwhile.
/// The monitor wants the offsets committed so far, pending ones aside:
/// `read_uncommitted` reads them at once. (The isolation of the records
/// the monitor reads and of the lag's end is the probe's, set apart.)
fn group_client(settings: &ReaderSettings, group: &str) -> Result<BaseConsumer, MonitorError> {
    client(
        settings,
        &[("group.id", group), ("isolation.level", "read_uncommitted")],
    )
}

fn kafka(operation: &'static str) -> impl Fn(KafkaError) -> MonitorError {
    move |source| MonitorError::Kafka { operation, source }
}

impl Reader {
    /// Creates the clients (no network I/O yet).
    pub(crate) fn new(settings: ReaderSettings) -> Result<Self, MonitorError> {
        let isolation = if settings.read_committed {
            "read_committed"
        } else {
            "read_uncommitted"
        };
        let uncommitted = client(&settings, &[("isolation.level", "read_uncommitted")])?;
        let committed_view = client(&settings, &[("isolation.level", "read_committed")])?;
        let mut probe_properties =
            vec![("group.id", PROBE_GROUP_ID), ("isolation.level", isolation)];
        probe_properties.extend_from_slice(PROBE_PROPERTIES);
        let probe = client(&settings, &probe_properties)?;
        let groups = settings
            .groups
            .iter()
            .map(|g| Ok((g.clone(), group_client(&settings, g)?)))
            .collect::<Result<_, MonitorError>>()?;
        Ok(Reader {
            settings,
            uncommitted,
            committed_view,
            groups,
            discovered: BTreeMap::new(),
            describe_groups: true,
            brokers_seen: std::cell::Cell::new((0, u32::MAX)),
            probe,
            timestamps: HashMap::new(),
        })
    }

    /// Checks that a broker answers and every topic exists.
    pub(crate) fn check(&self) -> Result<(), MonitorError> {
        let mut count = 0;
        for topic in &self.settings.topics {
            count += self
                .partitions(topic)
                .map_err(|e| match e {
                    MonitorError::Kafka { source, .. } => MonitorError::Unreachable {
                        bootstrap: self.settings.bootstrap.clone(),
                        source,
                    },
                    other => other,
                })?
                .len();
        }
        self.partitions_within_cap(count)
    }

    fn partitions_within_cap(&self, count: usize) -> Result<(), MonitorError> {
        if count > self.settings.max_partitions {
            return Err(MonitorError::TooMany {
                what: "partitions",
                count,
                max: self.settings.max_partitions,
            });
        }
        Ok(())
    }

    /// Discovery: lists the cluster's groups, keeps an offset reader for
    /// every candidate (dropping those of groups no longer listed), and
    /// returns the listing for the member counts.
    fn discover(&mut self) -> Result<Option<rdkafka::groups::GroupList>, MonitorError> {
        let Some(discovery) = &self.settings.discovery else {
            return Ok(None);
        };
        let list = self
            .uncommitted
            .fetch_group_list(None, self.settings.request_timeout)
            .map_err(kafka("list groups"))?;
        let names: Vec<String> = self.groups.iter().map(|(g, _)| g.clone()).collect();
        let found = candidates(
            list.groups().iter().map(|g| g.name()),
            &names,
            discovery,
            self.settings.max_groups,
        )?;
        self.discovered
            .retain(|g, _| found.binary_search(g).is_ok());
        for g in found {
            if !self.discovered.contains_key(&g) {
                let reader = group_client(&self.settings, &g)?;
                self.discovered.insert(g, reader);
            }
        }
        Ok(Some(list))
    }

    /// The topic's partitions and their replication (replicas, in-sync
    /// replicas, the cluster's brokers), from one Metadata request.
    fn partitions(&self, topic: &str) -> Result<Vec<(i32, Replication)>, MonitorError> {
        let md = self
            .uncommitted
            .fetch_metadata(Some(topic), self.settings.request_timeout)
            .map_err(kafka("metadata"))?;
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
            return Err(MonitorError::UnknownTopic {
                topic: topic.to_owned(),
            });
        };
        match t.error() {
            None => {}
            Some(e)
                if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition
                    || RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopic =>
            {
                return Err(MonitorError::UnknownTopic {
                    topic: topic.to_owned(),
                });
            }
            Some(e) => {
                return Err(MonitorError::Kafka {
                    operation: "metadata",
                    source: KafkaError::MetadataFetch(e.into()),
                });
            }
        }
        if t.partitions().is_empty() {
            return Err(MonitorError::UnknownTopic {
                topic: topic.to_owned(),
            });
        }
        let brokers = md.brokers().len() as u32;
        let (most, now) = self.brokers_seen.get();
        self.brokers_seen.set((most.max(brokers), now.min(brokers)));
        let mut ids: Vec<(i32, Replication)> = t
            .partitions()
            .iter()
            .map(|p| {
                let r = Replication {
                    replicas: p.replicas().len() as u32,
                    in_sync: p.isr().len() as u32,
                    brokers,
                };
                (p.id(), r)
            })
            .collect();
        ids.sort_unstable_by_key(|(id, _)| *id);
        Ok(ids)
    }

    /// One cycle's reads.
    pub(crate) fn read(&mut self) -> Result<CycleReads, MonitorError> {
        let timeout = self.settings.request_timeout;
        let started = (Instant::now(), std::time::SystemTime::now());
        let (most, _) = self.brokers_seen.get();
        self.brokers_seen.set((most, u32::MAX));
        // (topic, partition, log start, high watermark, last stable offset,
        // replication)
        let mut marks: Vec<(String, i32, i64, i64, i64, Replication)> = Vec::new();
        for topic in &self.settings.topics {
            for (p, replication) in self.partitions(topic)? {
                let (start, high) = self
                    .uncommitted
                    .fetch_watermarks(topic, p, timeout)
                    .map_err(kafka("list offsets"))?;
                let (_, stable) = self
                    .committed_view
                    .fetch_watermarks(topic, p, timeout)
                    .map_err(kafka("list offsets"))?;
                marks.push((topic.clone(), p, start, high, stable, replication));
            }
        }
        self.partitions_within_cap(marks.len())?;
        let listing = self.discover()?;
        let mut tpl = TopicPartitionList::new();
        for (topic, p, ..) in &marks {
            tpl.add_partition(topic, *p);
        }
        let mut groups = Vec::with_capacity(self.groups.len() + self.discovered.len());
        let named = self.groups.iter().map(|(g, r)| (g, r, true));
        let discovered = self.discovered.iter().map(|(g, r)| (g, r, false));
        for (group, reader, is_named) in named.chain(discovered) {
            let got = reader
                .committed_offsets(tpl.clone(), timeout)
                .map_err(kafka("offset fetch"))?;
            let observations: Vec<Observation> = marks
                .iter()
                .map(|(topic, p, start, high, stable, replication)| {
                    let committed = match got.find_partition(topic, *p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) if o >= 0 => Some(o),
                        _ => None,
                    };
                    let mut o = observation(
                        topic,
                        *p,
                        (*start, *high, *stable),
                        committed,
                        self.settings.read_committed,
                    );
                    o.replication = Some(*replication);
                    o
                })
                .collect();
            // A discovered group is watched while it has a committed offset
            // on a watched partition.
            if !is_named && observations.iter().all(|o| o.committed.is_none()) {
                continue;
            }
            let observations = read_topics_only(observations);
            // Members, state and owners: `describe_members` below.
            groups.push(GroupReads {
                group: group.clone(),
                observations,
                members: None,
                state: None,
                assignor: None,
                assignments_unreadable: false,
            });
        }
        let read = Instant::now();
        let half = read.saturating_duration_since(started.0) / 2;
        let read_at = (started.0 + half, started.1 + half);
        self.describe_members(&mut groups, listing.as_ref());

        // The records to read: the first at or after max(committed, log start).
        let mut wanted: BTreeMap<(String, i32), Vec<i64>> = BTreeMap::new();
        let mut ends: HashMap<(String, i32), i64> = HashMap::new();
        for g in &groups {
            for o in &g.observations {
                ends.insert((o.topic.clone(), o.partition), o.end);
                if let Some(c) = o.committed
                    && o.end > c
                {
                    let at = c.max(o.log_start);
                    let offsets = wanted.entry((o.topic.clone(), o.partition)).or_default();
                    if !offsets.contains(&at) {
                        offsets.push(at);
                    }
                }
            }
        }
        let keep: HashSet<(String, i32, i64)> = wanted
            .iter()
            .flat_map(|((t, p), offs)| offs.iter().map(move |o| (t.clone(), *p, *o)))
            .collect();
        // A "nothing readable" holds while the end it was read to holds.
        self.timestamps.retain(|k, probed| {
            keep.contains(k)
                && match probed {
                    Probed::Nothing { end } => ends.get(&(k.0.clone(), k.1)) == Some(end),
                    Probed::Record(_) => true,
                }
        });
        let records_read = self.read_records(&wanted, &ends)?;

        for g in &mut groups {
            for o in &mut g.observations {
                if let Some(c) = o.committed
                    && o.end > c
                {
                    let at = c.max(o.log_start);
                    o.head = match self.timestamps.get(&(o.topic.clone(), o.partition, at)) {
                        Some(Probed::Record(ts)) => HeadRead::Read {
                            offset: at,
                            timestamp: *ts,
                        },
                        Some(Probed::Nothing { .. }) => HeadRead::NothingReadable,
                        None => HeadRead::Unread,
                    };
                }
            }
        }
        Ok(CycleReads {
            groups,
            records_read,
            read_at,
        })
    }

    /// Reads the timestamps not cached yet, in rounds (a partition can be
    /// assigned at one offset at a time), all within the read timeout.
    fn read_records(
        &mut self,
        wanted: &BTreeMap<(String, i32), Vec<i64>>,
        ends: &HashMap<(String, i32), i64>,
    ) -> Result<u64, MonitorError> {
        let deadline = Instant::now() + self.settings.read_timeout;
        let mut read = 0;
        loop {
            let mut pending: HashMap<(String, i32), i64> = HashMap::new();
            for ((topic, p), offsets) in wanted {
                let mut todo = offsets
                    .iter()
                    .filter(|o| !self.timestamps.contains_key(&(topic.clone(), *p, **o)));
                if let Some(o) = todo.next() {
                    pending.insert((topic.clone(), *p), *o);
                }
            }
            if pending.is_empty() {
                break;
            }
            let mut tpl = TopicPartitionList::new();
            for ((topic, p), o) in &pending {
                tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
                    .map_err(kafka("assign"))?;
            }
            self.probe.assign(&tpl).map_err(kafka("assign"))?;
            while !pending.is_empty() {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                let wait = (deadline - now).min(Duration::from_millis(100));
                match self.probe.poll(wait) {
                    Some(Ok(m)) => {
                        let key = (m.topic().to_owned(), m.partition());
                        if let Some(&want) = pending.get(&key)
                            && m.offset() >= want
                        {
                            let ts = match m.timestamp() {
                                Timestamp::NotAvailable => RecordTimestamp::NotAvailable,
                                Timestamp::CreateTime(ms) => RecordTimestamp::CreateTime(ms),
                                Timestamp::LogAppendTime(ms) => RecordTimestamp::LogAppendTime(ms),
                            };
                            self.timestamps
                                .insert((key.0.clone(), key.1, want), Probed::Record(ts));
                            pending.remove(&key);
                            read += 1;
                        }
                    }
                    Some(Err(KafkaError::PartitionEOF(partition))) => {
                        // The event names the partition, not the topic: ask
                        // the probe where each pending one of that number is.
                        let positions = self.probe.position().ok();
                        let done: Vec<(String, i32)> = pending
                            .iter()
                            .filter(|((topic, p), _)| {
                                *p == partition
                                    && positions
                                        .as_ref()
                                        .and_then(|tpl| tpl.find_partition(topic, *p))
                                        .and_then(|e| match e.offset() {
                                            Offset::Offset(o) => Some(o),
                                            _ => None,
                                        })
                                        .zip(ends.get(&(topic.clone(), *p)))
                                        .is_some_and(|(pos, end)| pos >= *end)
                            })
                            .map(|(k, _)| k.clone())
                            .collect();
                        for key in done {
                            if let (Some(want), Some(&end)) = (pending.remove(&key), ends.get(&key))
                            {
                                self.timestamps
                                    .insert((key.0, key.1, want), Probed::Nothing { end });
                            }
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "monitor probe read");
                    }
                    None => {}
                }
            }
            let _ = self.probe.unassign();
            if Instant::now() >= deadline {
                break;
            }
        }
        Ok(read)
    }
}

/// `ConfigError` for a property the monitor sets itself.
pub(crate) fn reserved(property: &str) -> Option<ConfigError> {
    const OWN: &[&str] = &[
        "group.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "isolation.level",
        "bootstrap.servers",
    ];
    OWN.contains(&property).then(|| ConfigError::InvalidOption {
        option: "set",
        reason: format!(
            "`{property}` is set by the monitor itself (use the builder's method for it, if any)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::PROBE_PROPERTIES;
    use super::members::{owners, unreadable};
    use super::{Observation, observation, read_topics_only};

    fn o(topic: &str, partition: i32, committed: Option<i64>) -> Observation {
        observation(topic, partition, (0, 10, 10), committed, true)
    }

    /// Owners come from the described members' assignments; a `Stable`
    /// group with members and offsets but no readable assignment is
    /// flagged, a rebalancing, empty or offset-less one is not.
    #[test]
    fn a_stable_group_whose_assignments_cannot_be_read_is_flagged_and_owners_set() {
        use crate::monitor::describe::{Described, Member};
        let member = |id: &str, partitions: Vec<(String, i32)>| Member {
            member_id: id.into(),
            client_id: "c".into(),
            host: "/10.0.0.1".into(),
            partitions,
        };
        let described = |state: &str, members: Vec<Member>| Described {
            members: members.len() as u32,
            state: state.into(),
            assignor: None,
            assignments: members,
        };
        let mut obs = vec![o("orders", 0, Some(5)), o("orders", 1, Some(7))];
        let read = described(
            "Stable",
            vec![
                member("a", vec![("orders".into(), 1)]),
                member("b", vec![("orders".into(), 0)]),
            ],
        );
        owners(&mut obs, &read.assignments);
        assert_eq!(
            obs[0].owner.as_ref().map(|o| o.member_id.as_str()),
            Some("b")
        );
        assert_eq!(
            obs[1].owner.as_ref().map(|o| o.member_id.as_str()),
            Some("a")
        );
        assert!(!unreadable(&read, &obs));

        let blank = described("Stable", vec![member("a", vec![]), member("b", vec![])]);
        assert!(unreadable(&blank, &obs), "members, offsets, no assignment");
        let rebalancing = described("PreparingRebalance", vec![member("a", vec![])]);
        assert!(!unreadable(&rebalancing, &obs), "between rebalances");
        let empty = described("Empty", vec![]);
        assert!(!unreadable(&empty, &obs));
        let fresh = vec![o("orders", 0, None)];
        assert!(!unreadable(&blank, &fresh), "no offsets yet");
    }

    /// A group with committed offsets on `orders` only is judged on
    /// `orders`; a group with none anywhere keeps every watched topic (it
    /// reads `no_offsets`).
    #[test]
    fn a_group_is_judged_on_the_topics_it_reads() {
        let kept = read_topics_only(vec![
            o("orders", 0, Some(3)),
            o("orders", 1, None),
            o("payments", 0, None),
            o("payments", 1, None),
        ]);
        let topics: Vec<(&str, i32)> = kept
            .iter()
            .map(|o| (o.topic.as_str(), o.partition))
            .collect();
        assert_eq!(topics, [("orders", 0), ("orders", 1)]);
        let kept = read_topics_only(vec![o("orders", 0, None), o("payments", 0, None)]);
        assert_eq!(kept.len(), 2);
    }

    fn value(key: &str) -> Option<&'static str> {
        PROBE_PROPERTIES
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// `queued.min.messages=1` fills the probe's fetch queue with one record;
    /// librdkafka's default `fetch.queue.backoff.ms` (1,000 ms) would then
    /// postpone the next fetch by a second. The backoff must stay within the
    /// probe's own fetch wait, so a cycle never waits on it.
    #[test]
    fn the_probe_never_waits_on_librdkafkas_fetch_queue_backoff() {
        assert_eq!(value("queued.min.messages"), Some("1"));
        let backoff: u64 = value("fetch.queue.backoff.ms")
            .expect("fetch.queue.backoff.ms is set")
            .parse()
            .unwrap();
        let wait: u64 = value("fetch.wait.max.ms").unwrap().parse().unwrap();
        assert!(
            backoff <= wait,
            "backoff {backoff} ms > fetch wait {wait} ms"
        );
        let mut cc = rdkafka::ClientConfig::new();
        for (k, v) in PROBE_PROPERTIES {
            cc.set(*k, *v);
        }
        cc.create_native_config()
            .expect("librdkafka knows every probe property");
    }
}
