//! A three-hop pipeline (orders -> invoices -> payments -> booked) whose
//! last hop measures freshness from the first hop's event, not from the
//! last write.
//!
//! ```text
//! cargo run --example pipeline
//! ```
//!
//! The example starts librdkafka's mock broker, produces 10 orders, and
//! runs three consumers: `invoicing` (orders -> invoices, 400 ms of work
//! per record) and `paying` (invoices -> payments, 300 ms) send their
//! outputs through the library (`FreshConsumer::outputs`,
//! `fresh_consumer::output::outputs()`), so each output carries the origin time of
//! the order it came from; `booking` (payments, 200 ms) reads it with
//! `origin_time(true)`. A fourth consumer, `booking-plain`, reads the same
//! payments without it. It prints the event age each recorded
//! (`fresh_consumer.event.age`, read back from an in-memory exporter) and
//! exits non-zero unless every end-to-end age is at least the sum of the
//! three delays.
//!
//! The orders' producer and the in-memory metric reader are in
//! `examples/support/pipeline_kit.rs`.

#[path = "support/pipeline_kit.rs"]
mod kit;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fresh_consumer::{
    BoxError, FreshConsumer, Handler, Record,
    output::{Output, OutputConfig},
};
use tokio_util::sync::CancellationToken;

use mock_broker::MockBroker;

const ORDERS: usize = 10;
const DELAYS_MS: [u64; 3] = [400, 300, 200];

/// A hop that works `delay_ms` per record, then sends it on to `to` (or
/// nowhere), and counts the records it finished.
fn hop(
    to: Option<&'static str>,
    delay_ms: u64,
    done: Arc<AtomicU64>,
) -> impl Handler<Error = BoxError> {
    move |r: Record| {
        let done = Arc::clone(&done);
        async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            if let Some(to) = to {
                fresh_consumer::output::outputs()?
                    .send(
                        Output::to(to)
                            .key(r.key().unwrap_or_default())
                            .payload(r.payload().unwrap_or_default()),
                    )
                    .await?;
            }
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<(), BoxError>(())
        }
    }
}

fn consumer<H: Handler>(broker: &MockBroker, group: &str, topic: &str, h: H) -> FreshConsumer<H> {
    FreshConsumer::new(h)
        .bootstrap_servers(broker.bootstrap())
        .group_id(group)
        .topics([topic])
        .set("fetch.wait.max.ms", "10")
        .commit_interval(Duration::from_millis(100))
}

#[tokio::main]
async fn main() -> ExitCode {
    let broker = MockBroker::start().expect("mock broker");
    for topic in ["orders", "invoices", "payments"] {
        broker.create_topic(topic, 1).expect("topic");
    }
    kit::produce_orders(&broker, "orders", ORDERS).await;

    let stop = CancellationToken::new();
    let counts: Vec<Arc<AtomicU64>> = (0..4).map(|_| Arc::default()).collect();
    let (end_to_end, end_to_end_exporter) = kit::in_memory();
    let (plain, plain_exporter) = kit::in_memory();
    let runs = vec![
        tokio::spawn(
            consumer(
                &broker,
                "invoicing",
                "orders",
                hop(Some("invoices"), DELAYS_MS[0], Arc::clone(&counts[0])),
            )
            .outputs(OutputConfig::new())
            .run_until(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            consumer(
                &broker,
                "paying",
                "invoices",
                hop(Some("payments"), DELAYS_MS[1], Arc::clone(&counts[1])),
            )
            .outputs(OutputConfig::new())
            .run_until(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            consumer(
                &broker,
                "booking",
                "payments",
                hop(None, DELAYS_MS[2], Arc::clone(&counts[2])),
            )
            .origin_time(true)
            .meter_provider(&end_to_end)
            .run_until(stop.clone().cancelled_owned()),
        ),
        tokio::spawn(
            consumer(
                &broker,
                "booking-plain",
                "payments",
                hop(None, DELAYS_MS[2], Arc::clone(&counts[3])),
            )
            .meter_provider(&plain)
            .run_until(stop.clone().cancelled_owned()),
        ),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while counts[2..]
        .iter()
        .any(|c| c.load(Ordering::Relaxed) < ORDERS as u64)
    {
        if tokio::time::Instant::now() > deadline {
            eprintln!("pipeline: not every order was booked within 60 s");
            return ExitCode::FAILURE;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    for run in runs {
        if let Err(e) = run.await.expect("consumer task") {
            eprintln!("pipeline: a consumer failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    let sum = DELAYS_MS.iter().sum::<u64>() as f64 / 1000.0;
    let (min, max, n) = kit::ages(&end_to_end, &end_to_end_exporter).await;
    let (pmin, pmax, pn) = kit::ages(&plain, &plain_exporter).await;
    println!(
        "hops: orders -> invoices ({} ms) -> payments ({} ms) -> booked ({} ms); sum {sum:.1} s",
        DELAYS_MS[0], DELAYS_MS[1], DELAYS_MS[2]
    );
    println!(
        "booking, origin_time(true):   event age min {min:.2} s, max {max:.2} s ({n} records)"
    );
    println!(
        "booking-plain (this hop only): event age min {pmin:.2} s, max {pmax:.2} s ({pn} records)"
    );
    if n as usize == ORDERS && min >= sum {
        ExitCode::SUCCESS
    } else {
        eprintln!("pipeline: the end-to-end age was below the sum of the delays");
        ExitCode::FAILURE
    }
}
