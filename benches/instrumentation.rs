//! Cost per record of what the library records on the success path, in ns.
//!
//!     cargo bench --bench instrumentation --features __bench
//!
//! (The `__bench` feature exposes the hidden module this bench calls; it is
//! not part of the API. Without it, Cargo skips this bench.)
//!
//! What is timed is the library's own code, through the hidden
//! `fresh_consumer::__bench::SuccessPath` hook: what a partition worker runs
//! after a handler attempt succeeded (one `Instant::now()`, the
//! `messaging.process.duration` record, the wall-clock time derived from
//! that reading, and the `fresh_consumer.event.age` record, all through
//! OpenTelemetry bound instruments), plus the poll loop's
//! `messaging.client.consumed.messages` add, made once per batch of records
//! handed to a worker (amortised; shown per call and per record at a batch
//! of 21, what 256 records over 12 partitions give). The success path rotates
//! over 12 partitions, as 12 workers would. The SDK provider has a
//! `PeriodicReader` (60 s) with an exporter that discards, so the instruments
//! aggregate for real; `metrics off` is the same code on a no-op meter.
//! `2 threads` runs it on two threads at once (the two workers of a 2-core
//! runtime) and reports ns per record per thread.
//!
//! For reference, the same calls without bound instruments (an attribute
//! lookup per call, a *replica* built from the public metric names, units,
//! boundaries and attribute shapes) and the clock reads alone.
//!
//! Target (issue 7): <= 100 ns per record for everything on the success
//! path. Latest results in benches/README.md.

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::Criterion;
use fresh_consumer::__bench::SuccessPath;
use fresh_consumer::RecordTimestamp;
use fresh_consumer::metrics::*;
use opentelemetry::KeyValue;
use opentelemetry::metrics::noop::NoopMeterProvider;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};

use support::{env_or, median};

const PARTITIONS: usize = 12;

/// One partition's attribute sets, as `Instruments::partition` builds them.
struct PartitionAttrs {
    consumed: Box<[KeyValue]>,
    process_ok: Box<[KeyValue]>,
    age_create: Box<[KeyValue]>,
}

/// The instruments of the success path, as `Instruments::new` builds them.
struct Replica {
    consumed: Counter<u64>,
    process_duration: Histogram<f64>,
    event_age: Histogram<f64>,
    partitions: Vec<PartitionAttrs>,
}

impl Replica {
    fn new(meter: &Meter, group: &str, topic: &str) -> Self {
        let hist = |name: &'static str, bounds: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_boundaries(bounds.to_vec())
                .build()
        };
        let partitions = (0..PARTITIONS)
            .map(|p| {
                let base = [
                    KeyValue::new(MESSAGING_SYSTEM, "kafka"),
                    KeyValue::new(MESSAGING_DESTINATION_NAME, topic.to_owned()),
                    KeyValue::new(MESSAGING_DESTINATION_PARTITION_ID, p.to_string()),
                    KeyValue::new(MESSAGING_CONSUMER_GROUP_NAME, group.to_owned()),
                ];
                let with = |extra: &[KeyValue]| -> Box<[KeyValue]> {
                    base.iter().cloned().chain(extra.iter().cloned()).collect()
                };
                PartitionAttrs {
                    consumed: with(&[KeyValue::new(MESSAGING_OPERATION_NAME, "poll")]),
                    process_ok: with(&[KeyValue::new(MESSAGING_OPERATION_NAME, "process")]),
                    age_create: with(&[KeyValue::new(TIMESTAMP_TYPE, "create_time")]),
                }
            })
            .collect::<Vec<PartitionAttrs>>();
        let consumed = meter
            .u64_counter(CONSUMED_MESSAGES)
            .with_unit("{message}")
            .build();
        let process_duration = hist(PROCESS_DURATION, MESSAGING_DURATION_BOUNDARIES);
        let event_age = hist(EVENT_AGE, EVENT_AGE_BOUNDARIES);
        Replica {
            consumed,
            process_duration,
            event_age,
            partitions,
        }
    }

    /// Everything recorded for one succeeded record of partition `p`, with
    /// an attribute lookup per call and three clock reads (the library's
    /// success path before bound instruments and the derived wall clock).
    #[inline(never)]
    fn success_path(&self, p: usize, event_ms: i64) {
        let attrs = &self.partitions[p];
        // Poll loop, dispatch.
        self.consumed.add(1, &attrs.consumed);
        // Worker: the handler attempt is timed...
        let started = Instant::now();
        black_box(()); // (the no-op handler)
        let took = started.elapsed();
        self.process_duration
            .record(took.as_secs_f64(), &attrs.process_ok);
        // ... and the age recorded after success.
        let now = SystemTime::now();
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1_000.0);
        let age_ms = now_ms - event_ms as f64;
        self.event_age
            .record((age_ms / 1_000.0).max(0.0), &attrs.age_create);
    }
}

fn event_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 250
}

/// Runs `f` `n` times on each of `threads` threads at once; returns the wall
/// time.
fn on_threads(threads: usize, n: u64, f: &(dyn Fn(usize, u64) + Sync)) -> Duration {
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                f(t, n);
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    })
}

/// The library's success path for `n` records, rotating over the
/// partitions from `first`, `step` apart; records run back to back.
fn library_path(path: &SuccessPath, n: u64, first: usize, step: usize, ts: RecordTimestamp) {
    let mut t = Instant::now();
    let mut p = first;
    for _ in 0..n {
        t = path.succeeded(p, t, ts);
        p = (p + step) % PARTITIONS;
    }
    black_box(t);
}

fn main() {
    let (provider, _exporter) = support::sdk_provider();
    let sdk_meter = provider.meter("fresh-consumer-bench");
    let noop_meter = NoopMeterProvider::new().meter("fresh-consumer-bench");
    let parts = PARTITIONS as i32;
    let lib_on = SuccessPath::new(&sdk_meter, "bench-group", "bench-topic", parts);
    let lib_off = SuccessPath::new(&noop_meter, "bench-group", "bench-topic", parts);
    let sdk = Replica::new(&sdk_meter, "bench-group", "bench-topic");
    let noop = Replica::new(&noop_meter, "bench-group", "bench-topic");
    let plain_age = sdk_meter
        .f64_histogram("bench.age.no_attributes")
        .with_unit("s")
        .with_boundaries(EVENT_AGE_BOUNDARIES.to_vec())
        .build();
    let ev = event_ms();
    let ts = RecordTimestamp::CreateTime(ev);
    println!(
        "instrumentation (the library's success path through fresh_consumer::__bench); {}",
        support::machine()
    );

    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("instrumentation");
        let mut p = 0;
        let mut t = Instant::now();
        g.bench_function("library/success path, metrics on", |b| {
            b.iter(|| {
                p = (p + 1) % PARTITIONS;
                t = lib_on.succeeded(p, t, ts);
            })
        });
        g.bench_function("library/success path, metrics off", |b| {
            b.iter(|| {
                p = (p + 1) % PARTITIONS;
                t = lib_off.succeeded(p, t, ts);
            })
        });
        g.bench_function(
            "library/success path, metrics on, 2 threads (per thread)",
            |b| {
                b.iter_custom(|iters| {
                    on_threads(2, iters, &|th, n| library_path(&lib_on, n, th, 2, ts))
                })
            },
        );
        g.bench_function("library/consumed add, per batch", |b| {
            b.iter(|| {
                p = (p + 1) % PARTITIONS;
                lib_on.consumed(p, black_box(21));
            })
        });
        g.bench_function("clock/SystemTime::now", |b| b.iter(SystemTime::now));
        g.bench_function("clock/Instant::now", |b| b.iter(Instant::now));
        let a = &sdk.partitions[3];
        g.bench_function("reference/counter.add consumed, 6 attrs", |b| {
            b.iter(|| sdk.consumed.add(black_box(1), &a.consumed))
        });
        g.bench_function("reference/histogram.record process, 6 attrs", |b| {
            b.iter(|| {
                sdk.process_duration
                    .record(black_box(0.000_003), &a.process_ok)
            })
        });
        g.bench_function("reference/histogram.record age, 5 attrs", |b| {
            b.iter(|| sdk.event_age.record(black_box(0.25), &a.age_create))
        });
        g.bench_function("reference/histogram.record age, no attrs", |b| {
            b.iter(|| plain_age.record(black_box(0.25), &[]))
        });
        g.bench_function("reference/success path with attribute lookup", |b| {
            b.iter(|| {
                p = (p + 1) % PARTITIONS;
                sdk.success_path(p, ev)
            })
        });
        g.finish();
    }
    c.final_summary();

    // A compact summary for the README: medians of `rounds` timed loops.
    let rounds: usize = env_or("BENCH_ROUNDS", 7);
    let n: u64 = env_or("BENCH_CALLS", 400_000);
    let time = |f: &dyn Fn(u64)| -> f64 {
        let v: Vec<f64> = (0..rounds)
            .map(|_| {
                let start = Instant::now();
                f(n);
                start.elapsed().as_nanos() as f64 / n as f64
            })
            .collect();
        median(&v)
    };
    let a = &sdk.partitions[3];
    let on = time(&|n| library_path(&lib_on, n, 0, 1, ts));
    let two = time(&|n| {
        black_box(on_threads(2, n, &|th, n| {
            library_path(&lib_on, n, th, 2, ts)
        }));
    });
    let off = time(&|n| library_path(&lib_off, n, 0, 1, ts));
    let consumed = time(&|n| {
        for i in 0..n {
            lib_on.consumed(i as usize % PARTITIONS, black_box(21));
        }
    });
    let rows: Vec<(&str, f64)> = vec![
        ("library: success path, metrics on", on),
        (
            "library: success path, metrics on, 2 threads (per thread)",
            two,
        ),
        ("library: success path, metrics off (no-op meter)", off),
        ("library: consumed add, per batch", consumed),
        (
            "library: consumed add, per record at 21 per batch",
            consumed / 21.0,
        ),
        (
            "clock: SystemTime::now()",
            time(&|n| {
                for _ in 0..n {
                    black_box(SystemTime::now());
                }
            }),
        ),
        (
            "clock: Instant::now()",
            time(&|n| {
                for _ in 0..n {
                    black_box(Instant::now());
                }
            }),
        ),
        (
            "reference: counter.add consumed (6 attrs)",
            time(&|n| {
                for _ in 0..n {
                    sdk.consumed.add(black_box(1), &a.consumed);
                }
            }),
        ),
        (
            "reference: histogram.record process duration (6 attrs)",
            time(&|n| {
                for _ in 0..n {
                    sdk.process_duration
                        .record(black_box(0.000_003), &a.process_ok);
                }
            }),
        ),
        (
            "reference: histogram.record event age (5 attrs)",
            time(&|n| {
                for _ in 0..n {
                    sdk.event_age.record(black_box(0.25), &a.age_create);
                }
            }),
        ),
        (
            "reference: histogram.record, no attrs",
            time(&|n| {
                for _ in 0..n {
                    plain_age.record(black_box(0.25), &[]);
                }
            }),
        ),
        (
            "reference: success path with attribute lookup",
            time(&|n| {
                for i in 0..n {
                    sdk.success_path(i as usize % PARTITIONS, ev);
                }
            }),
        ),
        (
            "reference: the same, no-op meter (3 clock reads)",
            time(&|n| {
                for i in 0..n {
                    noop.success_path(i as usize % PARTITIONS, ev);
                }
            }),
        ),
    ];
    println!("\ninstrumentation summary (median of {rounds} loops of {n} calls, ns per call):");
    for (name, ns) in &rows {
        println!("  {name:<60} {ns:>8.1}");
    }
    let per_record = on + consumed / 21.0;
    let per_record_two = two + consumed / 21.0;
    println!(
        "  target <= 100 ns/record (success path + consumed share): single thread {per_record:.0} ns ({}), 2 threads {per_record_two:.0} ns per thread ({})",
        if per_record <= 100.0 { "met" } else { "MISSED" },
        if per_record_two <= 100.0 {
            "met"
        } else {
            "MISSED"
        },
    );
    let _ = provider.shutdown();
}
