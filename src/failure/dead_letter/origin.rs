//! Where a failed record came from ([`Origin`]: itself, or for a record
//! read from a retry tier what its headers say) and where its write goes
//! ([`Destination`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::record::{Header, Record, RecordTimestamp};

use super::record::DeadLetterRecord;

use super::headers::*;

/// Where a record came from originally: the record itself, or (for a
/// record read from a retry tier) what its headers say.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) timestamp: RecordTimestamp,
    /// Handler attempts made before this record's.
    pub(crate) attempts_before: u32,
    pub(crate) first_failure: Option<SystemTime>,
    /// The failed stops so far ([`RETRY_HISTORY`]), empty for a fresh record.
    pub(crate) history: String,
    /// The user's headers, without the library's.
    pub(crate) headers: Vec<Header>,
}

impl Origin {
    /// A record read from a source topic: it is its own origin.
    pub(crate) fn of(record: &Record) -> Self {
        Origin {
            topic: record.topic().to_owned(),
            partition: record.partition(),
            offset: record.offset(),
            timestamp: record.timestamp(),
            attempts_before: 0,
            first_failure: None,
            history: String::new(),
            headers: record.headers().to_vec(),
        }
    }

    /// A record read from a retry tier: its origin from the headers the
    /// library wrote on it, in the style it wrote them in
    /// ([`DeadLetterRecord::from_record`]: the other style's headers, which
    /// the original record carried, do not count). A record without them
    /// (written there by someone else) is its own origin, and so is one
    /// whose headers are malformed (logged).
    pub(crate) fn of_tier_record(record: &Record) -> Self {
        let d = match DeadLetterRecord::from_record(record) {
            Ok(d) => d,
            Err(e) => {
                if record.header(TOPIC).is_some() || record.header(SPRING_TOPIC).is_some() {
                    tracing::warn!(
                        topic = record.topic(),
                        partition = record.partition(),
                        offset = record.offset(),
                        error = %e,
                        "a retry-tier record's origin headers are malformed; it counts as its own origin"
                    );
                }
                return Self::of(record);
            }
        };
        let text = |name: &str| {
            record
                .header(name)
                .flatten()
                .and_then(|v| std::str::from_utf8(v).ok())
        };
        Origin {
            topic: d.topic,
            partition: d.partition,
            offset: d.offset,
            timestamp: d.timestamp,
            attempts_before: d.attempts.unwrap_or(0),
            first_failure: text(FIRST_FAILURE)
                .and_then(|v| v.parse::<u64>().ok())
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            history: text(RETRY_HISTORY).unwrap_or_default().to_owned(),
            headers: d.headers,
        }
    }
}

/// Where a write goes besides its topic: a retry tier (with the tier, the
/// write's timestamp and its due time, ms since the Unix epoch), or the
/// dead-letter topic.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Destination {
    Tier {
        tier: usize,
        written_ms: i64,
        due_ms: i64,
    },
    DeadLetter,
}
