use super::plan::PlanEntry;
use super::*;
use crate::health::thresholds::NewPartitionStart;
use RetentionOverrunPolicy::*;

const E: NewPartitionStart = NewPartitionStart::Earliest;

#[test]
fn an_offset_in_range_is_kept() {
    let d = classify(Some(5), Some(0), Some(10), Earliest, E);
    assert_eq!(d.start, Some(Offset::Offset(5)));
    assert_eq!(d.anomaly, None);
    // Caught up exactly at the high watermark, or at the log start.
    assert_eq!(
        classify(Some(10), Some(0), Some(10), Fail, E).start,
        Some(Offset::Offset(10))
    );
    assert_eq!(
        classify(Some(3), Some(3), Some(10), Fail, E).start,
        Some(Offset::Offset(3))
    );
}

#[test]
fn a_retention_overrun_counts_the_lost_records_and_follows_the_policy() {
    let kind = AnomalyKind::RetentionOverrun {
        offset: 100,
        log_start: 208,
        high_watermark: 710,
        lost: 108,
    };
    let d = classify(Some(100), Some(208), Some(710), Earliest, E);
    assert_eq!(d.anomaly, Some(kind));
    assert_eq!(d.start, Some(Offset::Offset(208)));
    let d = classify(Some(100), Some(208), Some(710), Latest, E);
    assert_eq!(d.start, Some(Offset::Offset(710)));
    let d = classify(Some(100), Some(208), Some(710), Fail, E);
    assert_eq!(d.start, None, "fail stops the partition");
    assert_eq!(d.anomaly, Some(kind));
}

#[test]
fn an_offset_above_the_high_watermark_is_an_anomaly_too() {
    let d = classify(Some(900), Some(0), Some(50), Earliest, E);
    assert_eq!(
        d.anomaly,
        Some(AnomalyKind::AboveHighWatermark {
            offset: 900,
            log_start: 0,
            high_watermark: 50
        })
    );
    assert_eq!(d.start, Some(Offset::Offset(0)));
    assert_eq!(classify(Some(900), Some(0), Some(50), Fail, E).start, None);
}

#[test]
fn a_new_partition_starts_where_auto_offset_reset_says() {
    let d = classify(None, Some(4), Some(9), Fail, NewPartitionStart::Earliest);
    assert_eq!(
        (d.start, d.estimate, d.anomaly),
        (Some(Offset::Beginning), Some(4), None)
    );
    let d = classify(None, Some(4), Some(9), Fail, NewPartitionStart::Latest);
    assert_eq!((d.start, d.estimate), (Some(Offset::End), Some(9)));
    let d = classify(None, Some(4), Some(9), Earliest, NewPartitionStart::Error);
    assert_eq!(d.start, None);
    assert_eq!(d.anomaly, Some(AnomalyKind::NoCommittedOffset));
}

#[test]
fn a_partition_that_took_nothing_is_not_restarted_at_todays_end() {
    // Statistics off, auto.offset.reset=latest: another partition's
    // offset-reset error makes every partition checked.
    let fresh = classify(None, Some(0), Some(40), Earliest, NewPartitionStart::Latest);
    assert_eq!(fresh.start, Some(Offset::End));
    assert!(
        !needs_restart(false, &fresh, None),
        "would skip what arrived since the assignment"
    );
    // With its fetcher shown stopped, it is restarted.
    assert!(needs_restart(true, &fresh, None));
    // In range with a position: kept; an anomaly: restarted.
    let kept = classify(Some(5), Some(0), Some(40), Earliest, E);
    assert!(!needs_restart(false, &kept, Some(5)));
    let above = classify(Some(90), Some(0), Some(40), Earliest, E);
    assert!(needs_restart(false, &above, Some(90)));
    // A new partition from the log start is restarted (harmless: it
    // took nothing, and it may be stopped unseen).
    let earliest = classify(None, Some(0), Some(40), Earliest, E);
    assert!(needs_restart(false, &earliest, None));
}

#[test]
fn unknown_watermarks_keep_the_offset() {
    let d = classify(Some(7), None, Some(9), Fail, E);
    assert_eq!((d.start, d.anomaly), (Some(Offset::Offset(7)), None));
}

#[test]
fn auto_offset_reset_values() {
    for (v, want) in [
        ("earliest", Some(NewPartitionStart::Earliest)),
        ("smallest", Some(NewPartitionStart::Earliest)),
        (" Beginning ", Some(NewPartitionStart::Earliest)),
        ("latest", Some(NewPartitionStart::Latest)),
        ("largest", Some(NewPartitionStart::Latest)),
        ("end", Some(NewPartitionStart::Latest)),
        ("error", Some(NewPartitionStart::Error)),
        ("soon", None),
    ] {
        assert_eq!(NewPartitionStart::parse(v), want, "{v}");
    }
}

#[test]
fn a_truncated_log_resumes_where_it_diverges_by_policy() {
    let kind = AnomalyKind::LogTruncation {
        offset: 150,
        truncated_to: 100,
        high_watermark: 200,
    };
    let d = truncated(150, 100, 200, Earliest);
    assert_eq!(d.anomaly, Some(kind));
    assert_eq!(
        d.start,
        Some(Offset::Offset(100)),
        "every new record handled"
    );
    assert_eq!(d.estimate, Some(100));
    let d = truncated(150, 100, 200, Latest);
    assert_eq!(d.start, Some(Offset::Offset(200)));
    let d = truncated(150, 100, 200, Fail);
    assert_eq!(d.start, None, "fail stops the partition");
    assert_eq!(d.anomaly, Some(kind));
    assert_eq!(kind.reason(), "log_truncation");
}

#[test]
fn a_plan_entry_assigns_the_committed_epoch_only_at_the_committed_offset() {
    let entry = |committed: Option<i64>, start: Option<Offset>| PlanEntry {
        topic: "t".into(),
        partition: 0,
        committed,
        committed_epoch: Some(7),
        lo: Some(0),
        hi: Some(10),
        decision: Decision {
            start,
            estimate: None,
            anomaly: None,
        },
    };
    assert_eq!(
        entry(Some(5), Some(Offset::Offset(5))).start_epoch(),
        Some(7)
    );
    assert_eq!(
        entry(Some(5), Some(Offset::Offset(0))).start_epoch(),
        None,
        "restarted elsewhere (an overrun): no epoch to validate"
    );
    assert_eq!(entry(None, Some(Offset::Beginning)).start_epoch(), None);
    assert_eq!(entry(Some(5), None).start_epoch(), None);
}
