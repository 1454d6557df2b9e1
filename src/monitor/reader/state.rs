//! The reader's state: its settings, its clients and what it remembers
//! between cycles, and what one cycle read; shared by the reads
//! (`reader.rs`) and the member descriptions (`members.rs`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;

use crate::monitor::discover::Discovery;
use crate::monitor::judge::Observation;
use crate::record::RecordTimestamp;

/// What the reader needs from the builder.
#[derive(Clone, Debug)]
pub(crate) struct ReaderSettings {
    pub(crate) bootstrap: String,
    pub(crate) properties: Vec<(String, String)>,
    pub(crate) groups: Vec<String>,
    pub(crate) topics: Vec<String>,
    pub(crate) read_committed: bool,
    pub(crate) request_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) discovery: Option<Discovery>,
    pub(crate) max_groups: usize,
    pub(crate) max_partitions: usize,
}

pub(crate) struct Reader {
    pub(super) settings: ReaderSettings,
    /// Metadata, log start and high watermark (`read_uncommitted`).
    pub(super) uncommitted: BaseConsumer,
    /// The last stable offset (`read_committed`).
    pub(super) committed_view: BaseConsumer,
    /// One offset reader per named group.
    pub(super) groups: Vec<(String, BaseConsumer)>,
    /// One offset reader per discovery candidate (listed, accepted by the
    /// filter), kept while the brokers list the group.
    pub(super) discovered: BTreeMap<String, BaseConsumer>,
    /// `false` once the brokers refused ListGroups/DescribeGroups for good:
    /// they do not support it (librdkafka's mock broker) or the client may
    /// not use it; the member count is then not asked for again.
    pub(super) describe_groups: bool,
    /// The most brokers a cycle's metadata listed, and how many the
    /// latest cycle's listed (the fewest over its topics): while a broker
    /// is missing, the DescribeConsumerGroups admin call is not made (see
    /// [`Reader::describe_members`]).
    pub(super) brokers_seen: std::cell::Cell<(u32, u32)>,
    /// Reads the records at committed offsets.
    pub(super) probe: BaseConsumer,
    /// What was read at (topic, partition, offset).
    pub(super) timestamps: HashMap<(String, i32, i64), Probed>,
}

/// What the probe found at or after an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probed {
    /// The first record's timestamp.
    Record(RecordTimestamp),
    /// The probe reached the end it reads to (`end`) without a record: only
    /// records a consumer never receives lie between (transaction markers,
    /// aborted transactions under `read_committed`). Valid while the end
    /// stays `end`.
    Nothing { end: i64 },
}

/// One group's reads in one cycle.
pub(crate) struct GroupReads {
    pub(crate) group: String,
    pub(crate) observations: Vec<Observation>,
    /// Members as the brokers describe the group, if they do.
    pub(crate) members: Option<u32>,
    /// The group's state as the brokers describe it (`Stable`,
    /// `PreparingRebalance`, ...), if they do.
    pub(crate) state: Option<String>,
    /// The group's partition assignor (`range`, `cooperative-sticky`, a
    /// KIP-848 server assignor such as `uniform`), if the brokers say.
    pub(crate) assignor: Option<String>,
    /// The brokers described the group with members, but none of their
    /// assignments could be read ([`unreadable`]).
    pub(crate) assignments_unreadable: bool,
}

/// One cycle's reads: per group, its observations.
pub(crate) struct CycleReads {
    pub(crate) groups: Vec<GroupReads>,
    pub(crate) records_read: u64,
    /// When the offsets were read (the midpoint of the watermark and
    /// committed-offset requests), on the monotonic and the wall clock:
    /// the instant the cycle's rates and time lags are measured at, not
    /// the end of the cycle's record reads.
    pub(crate) read_at: (std::time::Instant, std::time::SystemTime),
}
