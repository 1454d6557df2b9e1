//! Where a partition (re)starts, from its position and the log's range:
//! the pure decision, shared by the assignment's plan (`plan.rs`) and the
//! running check (`offset_reset.rs`).

use std::time::Duration;

use rdkafka::Offset;

use crate::health::RetentionOverrunPolicy;
use crate::health::partition::AnomalyKind;
use crate::health::thresholds::NewPartitionStart;

/// Bound on the broker reads made while a partition is assigned or
/// restarted.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a partition (re)starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    /// The offset to fetch from; `None`: do not consume the partition.
    pub(crate) start: Option<Offset>,
    /// The start as a number, when known (for the lag before the first
    /// record arrives).
    pub(crate) estimate: Option<i64>,
    pub(crate) anomaly: Option<AnomalyKind>,
}

/// Decides where a partition continues. `position` is the group's committed
/// offset (at assignment) or the offset after the last fetched record
/// (while running); `lo` and `hi` the log start offset and high watermark,
/// when they could be read.
pub(crate) fn classify(
    position: Option<i64>,
    lo: Option<i64>,
    hi: Option<i64>,
    policy: RetentionOverrunPolicy,
    new: NewPartitionStart,
) -> Decision {
    let Some(position) = position else {
        return match new {
            NewPartitionStart::Earliest => Decision {
                start: Some(Offset::Beginning),
                estimate: lo,
                anomaly: None,
            },
            NewPartitionStart::Latest => Decision {
                start: Some(Offset::End),
                estimate: hi,
                anomaly: None,
            },
            NewPartitionStart::Error => Decision {
                start: None,
                estimate: None,
                anomaly: Some(AnomalyKind::NoCommittedOffset),
            },
        };
    };
    let (Some(lo), Some(hi)) = (lo, hi) else {
        // Unknown range: start where we are; librdkafka reports an
        // out-of-range offset and the running check handles it.
        return Decision {
            start: Some(Offset::Offset(position)),
            estimate: Some(position),
            anomaly: None,
        };
    };
    let anomaly = if position < lo {
        AnomalyKind::RetentionOverrun {
            offset: position,
            log_start: lo,
            high_watermark: hi,
            lost: (lo - position) as u64,
        }
    } else if position > hi {
        AnomalyKind::AboveHighWatermark {
            offset: position,
            log_start: lo,
            high_watermark: hi,
        }
    } else {
        return Decision {
            start: Some(Offset::Offset(position)),
            estimate: Some(position),
            anomaly: None,
        };
    };
    let resume = match policy {
        RetentionOverrunPolicy::Earliest => Some(lo),
        RetentionOverrunPolicy::Latest => Some(hi),
        RetentionOverrunPolicy::Fail => None,
    };
    Decision {
        start: resume.map(Offset::Offset),
        estimate: Some(resume.unwrap_or(position)),
        anomaly: Some(anomaly),
    }
}
