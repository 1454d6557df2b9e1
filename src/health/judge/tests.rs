use super::*;

const NOISE: Duration = Duration::from_millis(2_500);

fn t() -> HealthThresholds {
    HealthThresholds::default()
        .with_stall_after(Duration::from_secs(10))
        .with_lag_growth_window(Duration::from_secs(8))
}

fn inputs(committed: i64, processed: i64, hi: i64) -> Inputs {
    Inputs {
        committed: Some(committed),
        base: Some(committed),
        processed: Some(processed),
        end: Some(hi),
        failed: false,
        due_wait: false,
        paused: false,
    }
}

#[test]
fn caught_up_is_ok_and_never_stalls() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    for s in 0..100 {
        let j = judge(
            &mut tr,
            inputs(50, 50, 50),
            t0 + Duration::from_secs(s),
            &t(),
            NOISE,
        );
        assert_eq!(j.status, PartitionStatus::Ok);
        assert_eq!(j.lag, Some(0));
        assert_eq!(j.stalled_for, Duration::ZERO);
    }
}

#[test]
fn a_frozen_commit_with_lag_stalls_after_the_window() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let at = |s| t0 + Duration::from_secs(s);
    assert_eq!(
        judge(&mut tr, inputs(10, 10, 10), at(0), &t(), NOISE).status,
        PartitionStatus::Ok
    );
    // Records arrive at t=5; the head fails and nothing completes.
    let j = judge(&mut tr, inputs(10, 10, 20), at(5), &t(), NOISE);
    assert_eq!(
        (j.status, j.lag, j.stalled_for),
        (PartitionStatus::Ok, Some(10), Duration::ZERO)
    );
    let j = judge(&mut tr, inputs(10, 10, 20), at(14), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Ok);
    assert_eq!(j.stalled_for, Duration::from_secs(9));
    let j = judge(&mut tr, inputs(10, 10, 20), at(15), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Stall);
    // It recovers as soon as the commit advances.
    let j = judge(&mut tr, inputs(15, 15, 20), at(16), &t(), NOISE);
    assert_eq!(
        (j.status, j.stalled_for),
        (PartitionStatus::Ok, Duration::ZERO)
    );
}

#[test]
fn processed_but_not_committed_is_stop() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let at = |s| t0 + Duration::from_secs(s);
    judge(&mut tr, inputs(10, 10, 30), at(0), &t(), NOISE);
    // Records complete at t=1 and are never committed.
    let j = judge(&mut tr, inputs(10, 25, 30), at(1), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Ok);
    let j = judge(&mut tr, inputs(10, 25, 30), at(10), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Ok, "9 s of 10");
    let j = judge(&mut tr, inputs(10, 25, 30), at(11), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Stop);
    assert_eq!(j.stalled_for, Duration::from_secs(10));
    assert_eq!(j.processed_lag, Some(5));
    assert_eq!(j.lag, Some(20));
}

#[test]
fn a_stuck_handler_that_returns_is_not_reported_until_its_commit() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let at = |s| t0 + Duration::from_secs(s);
    judge(&mut tr, inputs(10, 10, 30), at(0), &t(), NOISE);
    // The handler of offset 10 hangs for 75 s: stall.
    let j = judge(&mut tr, inputs(10, 10, 40), at(75), &t(), NOISE);
    assert_eq!(
        (j.status, j.stalled_for),
        (PartitionStatus::Stall, Duration::from_secs(75))
    );
    // It returns; the records behind it complete before the next commit.
    let j = judge(
        &mut tr,
        inputs(10, 40, 40),
        at(75) + Duration::from_millis(300),
        &t(),
        NOISE,
    );
    assert_eq!(
        (j.status, j.stalled_for),
        (PartitionStatus::Ok, Duration::ZERO),
        "progress, not a partition that stopped committing"
    );
    let j = judge(&mut tr, inputs(40, 40, 40), at(76), &t(), NOISE);
    assert_eq!((j.status, j.lag), (PartitionStatus::Ok, Some(0)));
}

#[test]
fn a_retry_tier_record_waiting_for_its_due_time_is_not_a_stall() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let at = |s| t0 + Duration::from_secs(s);
    let mut waiting = inputs(10, 10, 11);
    waiting.due_wait = true;
    // A 5-minute tier: the record waits, the partition is paused.
    for s in 0..=300 {
        let j = judge(&mut tr, waiting, at(s), &t(), NOISE);
        assert_eq!(j.status, PartitionStatus::Ok, "at {s} s");
    }
    // Due, and its handler hangs: the stall clock starts at the due time.
    let j = judge(&mut tr, inputs(10, 10, 11), at(309), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Ok);
    let j = judge(&mut tr, inputs(10, 10, 11), at(311), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Stall);
}

#[test]
fn a_partition_paused_by_the_application_is_ok_while_its_lag_grows() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let at = |s| t0 + Duration::from_secs(s);
    // Paused for 5 minutes while records arrive: never stall, never warn.
    for s in 0..=300 {
        let mut paused = inputs(10, 10, 11 + s as i64 * 10);
        paused.paused = true;
        let j = judge(&mut tr, paused, at(s), &t(), NOISE);
        assert_eq!(j.status, PartitionStatus::Ok, "at {s} s");
        assert_eq!(j.stalled_for, Duration::ZERO, "at {s} s");
    }
    // Resumed, and nothing moves: the stall clock starts at the resume.
    let j = judge(&mut tr, inputs(10, 10, 3_011), at(309), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Ok);
    let j = judge(&mut tr, inputs(10, 10, 3_011), at(311), &t(), NOISE);
    assert_eq!(j.status, PartitionStatus::Stall);
}

#[test]
fn records_completing_without_a_commit_still_stop() {
    // Progress that is never committed (a broken commit path) is stop
    // even though the processed position keeps moving.
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let mut last = PartitionStatus::Ok;
    for s in 0..=12i64 {
        last = judge(
            &mut tr,
            inputs(10, 11 + s, 30 + s),
            t0 + Duration::from_secs(s as u64),
            &t(),
            NOISE,
        )
        .status;
    }
    assert_eq!(last, PartitionStatus::Stop);
}

#[test]
fn a_committed_offset_going_back_is_rewind_for_the_window() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    judge(&mut tr, inputs(900, 900, 900), t0, &t(), NOISE);
    let j = judge(
        &mut tr,
        inputs(5, 5, 40),
        t0 + Duration::from_secs(1),
        &t(),
        NOISE,
    );
    assert_eq!(j.status, PartitionStatus::Rewind);
    assert_eq!(j.rewind.map(|r| (r.from, r.to)), Some((900, 5)));
    let j = judge(
        &mut tr,
        inputs(40, 40, 40),
        t0 + Duration::from_secs(9),
        &t(),
        NOISE,
    );
    assert_eq!(
        j.status,
        PartitionStatus::Ok,
        "reported for the window only"
    );
}

#[test]
fn growing_lag_with_advancing_commits_is_warn() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let mut last = PartitionStatus::Ok;
    // Commits advance by 10 per second, the high watermark by 20.
    for s in 0..=10i64 {
        let j = judge(
            &mut tr,
            inputs(10 * s, 10 * s, 100 + 20 * s),
            t0 + Duration::from_secs(s as u64),
            &t(),
            NOISE,
        );
        last = j.status;
        if s < 8 {
            assert_eq!(
                j.status,
                PartitionStatus::Ok,
                "not a full window yet at {s}"
            );
        }
    }
    assert_eq!(last, PartitionStatus::Warn);
    // The lag shrinking once ends it.
    let j = judge(
        &mut tr,
        inputs(300, 300, 310),
        t0 + Duration::from_secs(12),
        &t(),
        NOISE,
    );
    assert_eq!(j.status, PartitionStatus::Ok);
}

#[test]
fn lag_growth_within_the_noise_of_commits_and_statistics_is_not_warn() {
    // The steady-state sawtooth of a consumer keeping up at 50
    // records/s, sampled so that every sample is higher than the one
    // before (3 -> 30 records over the window).
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    for s in 0..=10i64 {
        let end = 1000 + 50 * s;
        let lag = 3 + 3 * s;
        let j = judge(
            &mut tr,
            inputs(end - lag, end - lag, end),
            t0 + Duration::from_secs(s as u64),
            &t(),
            NOISE,
        );
        assert_eq!(j.status, PartitionStatus::Ok, "at {s} s");
    }
    // The same growth with 3 s of traffic being fewer records than it
    // (a consumer that truly falls behind at 10 records/s) warns.
    let mut tr = Track::new(t0, 1);
    let mut last = PartitionStatus::Ok;
    for s in 0..=10i64 {
        let end = 1000 + 10 * s;
        let lag = 3 + 4 * s;
        last = judge(
            &mut tr,
            inputs(end - lag, end - lag, end),
            t0 + Duration::from_secs(s as u64),
            &t(),
            NOISE,
        )
        .status;
    }
    assert_eq!(last, PartitionStatus::Warn);
}

#[test]
fn noise_allowance_adds_the_intervals() {
    assert_eq!(
        noise_allowance(Duration::from_secs(1), Some(Duration::from_secs(1))),
        Duration::from_millis(2_500)
    );
    assert_eq!(
        noise_allowance(Duration::from_millis(500), None),
        Duration::from_secs(1)
    );
}

#[test]
fn failed_partitions_are_stop() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    let mut i = inputs(3, 3, 710);
    i.failed = true;
    assert_eq!(
        judge(&mut tr, i, t0, &t(), NOISE).status,
        PartitionStatus::Stop
    );
}

#[test]
fn history_survives_a_quick_reassignment_only() {
    let t0 = Instant::now();
    let mut tr = Track::new(t0, 1);
    judge(&mut tr, inputs(10, 10, 20), t0, &t(), NOISE);
    tr.seen(t0 + Duration::from_secs(3), 2, Duration::from_secs(10));
    let j = judge(
        &mut tr,
        inputs(10, 10, 20),
        t0 + Duration::from_secs(11),
        &t(),
        NOISE,
    );
    assert_eq!(
        j.status,
        PartitionStatus::Stall,
        "a rebalance loop does not reset the clock"
    );
    tr.seen(t0 + Duration::from_secs(40), 3, Duration::from_secs(10));
    let j = judge(
        &mut tr,
        inputs(10, 10, 20),
        t0 + Duration::from_secs(41),
        &t(),
        NOISE,
    );
    assert_eq!(
        j.status,
        PartitionStatus::Ok,
        "forgotten after a long absence"
    );
}

#[test]
fn the_status_agrees_with_the_reasons() {
    let overrun = HealthReason::RetentionOverrun {
        offset: 1,
        log_start_offset: 5,
        lost: 4,
        policy: crate::health::RetentionOverrunPolicy::Earliest,
        resumed_at: Some(5),
        ago: Duration::ZERO,
    };
    let no_success = HealthReason::NoSuccess {
        duration: Duration::from_secs(90),
    };
    assert_eq!(status_with(PartitionStatus::Ok, &[]), PartitionStatus::Ok);
    assert_eq!(
        status_with(PartitionStatus::Ok, std::slice::from_ref(&overrun)),
        PartitionStatus::Warn
    );
    assert_eq!(
        status_with(PartitionStatus::Ok, &[overrun.clone(), no_success]),
        PartitionStatus::Stall
    );
    // A rule's own status stands.
    assert_eq!(
        status_with(PartitionStatus::Rewind, &[overrun]),
        PartitionStatus::Rewind
    );
}

/// A partition whose committed offset and readable end the test moves, of
/// a retry tier with `due_delay` (zero: an ordinary partition).
struct TierView {
    topic: Arc<str>,
    health: crate::health::partition::PartitionHealth,
    committed: std::sync::atomic::AtomicI64,
    due_delay: Duration,
}

impl crate::health::view::PartitionView for TierView {
    fn topic(&self) -> &Arc<str> {
        &self.topic
    }
    fn partition(&self) -> i32 {
        0
    }
    fn health(&self) -> &crate::health::partition::PartitionHealth {
        &self.health
    }
    fn attributes(&self) -> &[opentelemetry::KeyValue] {
        &[]
    }
    fn progress(&self) -> crate::health::view::Progress {
        let c = self.committed.load(std::sync::atomic::Ordering::Relaxed);
        crate::health::view::Progress {
            position: Some(c),
            head: None,
            completed: Some(c),
        }
    }
    fn committed(&self) -> Option<i64> {
        Some(self.committed.load(std::sync::atomic::Ordering::Relaxed))
    }
    fn blocked(&self) -> Option<crate::summary::BlockedRecord> {
        None
    }
    fn is_assigned(&self) -> bool {
        true
    }
    fn due_delay(&self) -> Duration {
        self.due_delay
    }
}

/// The soak's false alarm: a 3 s retry tier receiving 0.5 records/s
/// holds about 1.5 of them waiting by design; its lag drifting from 1 to 3
/// over a short window, commits advancing, is no consumer falling behind.
/// The same drift on an ordinary partition with that little traffic is.
#[test]
fn a_retry_tier_lag_within_its_delay_is_not_warn() {
    let run = |due_delay: Duration| {
        let view = Arc::new(TierView {
            topic: Arc::from("orders.retry.3s"),
            health: crate::health::partition::PartitionHealth::new(Instant::now()),
            committed: std::sync::atomic::AtomicI64::new(100),
            due_delay,
        });
        let mut tracks = HashMap::new();
        let t0 = Instant::now();
        let mut last = PartitionStatus::Ok;
        // 11 s at 0.5 records/s; the lag steps 1 (5 s), 2 (5 s), 3.
        for s in 0..=11i64 {
            let end = 100 + s / 2 + 1 + s / 5;
            let committed = end - 1 - s / 5;
            view.committed
                .store(committed, std::sync::atomic::Ordering::Relaxed);
            crate::health::partition::lock(&view.health.stats).update(
                Instant::now(),
                0,
                end,
                end,
                committed,
                false,
            );
            let e = evaluate_one(
                &mut tracks,
                Arc::clone(&view) as Arc<dyn crate::health::view::PartitionView>,
                t0 + Duration::from_secs(s as u64),
                SystemTime::now(),
                &t(),
                NOISE,
            );
            last = e.status;
        }
        last
    };
    assert_eq!(run(Duration::ZERO), PartitionStatus::Warn);
    assert_eq!(run(Duration::from_secs(3)), PartitionStatus::Ok);
}
