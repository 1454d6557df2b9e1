//! The machinery of `examples/peer_throughput.rs`: its command line, the
//! JSON line it prints, and the two peers that are not `FreshConsumer`
//! (`--raw`/`--raw-otel`, a rust-rdkafka `StreamConsumer` loop, and
//! `--c-api`, librdkafka's C API through `rdkafka-sys`; the example's module
//! documentation describes each mode).

use std::cell::Cell;
use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::support::{self, COMMIT_EVERY};

/// The hand-written wrapper's histogram (`--raw-otel`).
pub const WRAPPER_AGE: &str = "peer.event_age";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Fresh,
    /// `FreshConsumer::batched` with this `max_batch_records`.
    Batched(usize),
    Raw,
    RawOtel,
    CApi,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fresh => "fresh",
            Mode::Batched(1) => "fresh-batch-of-one",
            Mode::Batched(_) => "fresh-batched",
            Mode::Raw => "raw",
            Mode::RawOtel => "raw-otel",
            Mode::CApi => "c-api",
        }
    }

    pub fn client(self) -> &'static str {
        match self {
            Mode::Fresh | Mode::Batched(_) => "fresh-consumer",
            Mode::Raw | Mode::RawOtel => "rdkafka",
            Mode::CApi => "librdkafka",
        }
    }
}

#[derive(Debug)]
pub struct Args {
    pub bootstrap: String,
    pub topics: Vec<String>,
    pub group: String,
    pub records: u64,
    pub mode: Mode,
    pub timeout: Duration,
    /// `--no-headers`: `FreshConsumer::read_headers(false)` (fresh modes).
    pub no_headers: bool,
}

pub const USAGE: &str = "usage: peer_throughput --bootstrap HOST:PORT --topic T[,T...] --records N \
                     [--group G] [--raw | --raw-otel | --c-api | --batched MAX] [--no-headers] [--timeout-secs S]";

pub fn parse_args() -> Result<Args, String> {
    let mut bootstrap = None;
    let mut topics = None;
    let mut group = None;
    let mut records = None;
    let mut mode = Mode::Fresh;
    let mut timeout = Duration::from_secs(300);
    let mut no_headers = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--bootstrap" => bootstrap = Some(value()?),
            "--topic" => {
                topics = Some(
                    value()?
                        .split(',')
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect::<Vec<_>>(),
                )
            }
            "--group" => group = Some(value()?),
            "--records" => {
                records = Some(
                    value()?
                        .parse::<u64>()
                        .map_err(|e| format!("--records: {e}"))?,
                )
            }
            "--timeout-secs" => {
                timeout = Duration::from_secs(
                    value()?
                        .parse()
                        .map_err(|e| format!("--timeout-secs: {e}"))?,
                )
            }
            "--raw" => mode = Mode::Raw,
            "--raw-otel" => mode = Mode::RawOtel,
            "--c-api" => mode = Mode::CApi,
            "--no-headers" => no_headers = true,
            "--batched" => {
                mode = Mode::Batched(value()?.parse().map_err(|e| format!("--batched: {e}"))?)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let topics = topics
        .filter(|t| !t.is_empty())
        .ok_or("--topic is required")?;
    let records = records
        .filter(|&n| n > 0)
        .ok_or("--records N (N > 0) is required")?;
    Ok(Args {
        bootstrap: bootstrap.ok_or("--bootstrap is required")?,
        topics,
        group: group.unwrap_or_else(|| format!("peer-rust-{}-{}", std::process::id(), now_ms())),
        records,
        mode,
        timeout,
        no_headers,
    })
}

/// The run's one JSON line (stdout), as the other peers print it.
pub fn print_line(args: &Args, measured: &Measured) {
    let Measured {
        took,
        ages,
        commits,
    } = measured;
    let secs = took.as_secs_f64();
    let ages = ages.map_or_else(|| "null".to_owned(), |n| n.to_string());
    let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
    println!(
        "{{\"client\":\"{}\",\"mode\":\"{}\",\"records\":{},\"seconds\":{:.4},\
         \"records_per_s\":{:.0},\"ages_recorded\":{},\"commits\":{},\"group\":\"{}\",\"librdkafka\":\"{}\"}}",
        args.mode.client(),
        args.mode.name(),
        args.records,
        secs,
        args.records as f64 / secs,
        ages,
        commits,
        args.group,
        librdkafka,
    );
}

/// Milliseconds since the Unix epoch (the default group name, the ages).
pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

/// What a run measured.
pub struct Measured {
    /// From the first record received to the N-th handled.
    pub took: Duration,
    /// How many event ages the histogram held at the end (`None` without one).
    pub ages: Option<u64>,
    /// Offset commits sent (the library's: successful ones).
    pub commits: u64,
}

/// A raw `StreamConsumer` loop, with or without a hand-written age histogram.
pub async fn raw(args: &Args) -> Result<Measured, Box<dyn Error>> {
    let consumer: StreamConsumer = support::raw_config(&args.bootstrap, &args.group)
        .set("enable.auto.offset.store", "false")
        .create()?;
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;

    let provider =
        (args.mode == Mode::RawOtel).then(|| support::sdk_provider_counting(WRAPPER_AGE));
    let age = provider.as_ref().map(|(p, _)| {
        p.meter("peer-wrapper")
            .f64_histogram(WRAPPER_AGE)
            .with_unit("ms")
            .with_description("Event age (now - record timestamp) after the handler succeeded")
            .build()
    });

    // The next offset to read, per (topic index, partition).
    let mut next: HashMap<(usize, i32), i64> = HashMap::new();
    let commits = Cell::new(0u64);
    let commit = |next: &HashMap<(usize, i32), i64>| -> Result<(), Box<dyn Error>> {
        let mut tpl = TopicPartitionList::with_capacity(next.len());
        for (&(t, p), &o) in next {
            tpl.add_partition_offset(&args.topics[t], p, Offset::Offset(o))?;
        }
        if tpl.count() > 0 {
            consumer.commit(&tpl, CommitMode::Async)?;
            commits.set(commits.get() + 1);
        }
        Ok(())
    };
    let mut n = 0u64;
    let mut first: Option<Instant> = None;
    let mut last_commit = Instant::now();
    let consume = async {
        while n < args.records {
            let m = consumer.recv().await?;
            let now = Instant::now();
            first.get_or_insert(now);
            let t = args
                .topics
                .iter()
                .position(|t| t == m.topic())
                .ok_or("a record of a topic not subscribed")?;
            if let Some(age) = &age {
                noop_handler().await;
                if let Some(ts) = m.timestamp().to_millis() {
                    let age_ms = now_ms() as f64 - ts as f64;
                    age.record(
                        age_ms,
                        &[
                            KeyValue::new("topic", m.topic().to_owned()),
                            KeyValue::new("partition", m.partition().to_string()),
                        ],
                    );
                }
            }
            next.insert((t, m.partition()), m.offset() + 1);
            n += 1;
            drop(m);
            if now.duration_since(last_commit) >= COMMIT_EVERY {
                commit(&next)?;
                last_commit = now;
            }
        }
        Ok::<(), Box<dyn Error>>(())
    };
    tokio::time::timeout(args.timeout, consume)
        .await
        .map_err(|_| format!("deadline: {n} of {} records", args.records))??;
    let took = first.ok_or("no records")?.elapsed();
    commit(&next)?;
    // Shutting the provider down exports the final histogram once.
    let ages = provider.map(|(p, exporter)| {
        let _ = p.shutdown();
        exporter.values.load(Ordering::Relaxed)
    });
    support::close(consumer).await;
    Ok(Measured {
        took,
        ages,
        commits: commits.get(),
    })
}

/// The handler a wrapper wraps: does nothing, asynchronously.
async fn noop_handler() {}

/// The plain librdkafka C consumer (`--c-api`): no handler, no metrics, no
/// Rust wrapper; see the module docs.
pub fn c_api(args: &Args) -> Result<Measured, Box<dyn Error>> {
    use std::ffi::{CStr, CString, c_char};
    use std::ptr;

    use rdkafka_sys as sys;

    let mut errstr = [0 as c_char; 512];
    let err_text = |e: &[c_char]| {
        unsafe { CStr::from_ptr(e.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: plain librdkafka C API use; every handle is created here,
    // used on this thread only and destroyed before returning.
    unsafe {
        let conf = sys::rd_kafka_conf_new();
        let mut props: Vec<(&str, &str)> = vec![
            ("bootstrap.servers", &args.bootstrap),
            ("group.id", &args.group),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
        ];
        props.extend_from_slice(support::CONSUMER_PROPS);
        for (k, v) in props {
            let (k, v) = (CString::new(k)?, CString::new(v)?);
            let r = sys::rd_kafka_conf_set(
                conf,
                k.as_ptr(),
                v.as_ptr(),
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            if r != sys::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
                sys::rd_kafka_conf_destroy(conf);
                return Err(err_text(&errstr).into());
            }
        }
        let rk = sys::rd_kafka_new(
            sys::rd_kafka_type_t::RD_KAFKA_CONSUMER,
            conf,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        if rk.is_null() {
            return Err(err_text(&errstr).into());
        }
        sys::rd_kafka_poll_set_consumer(rk);
        let list = sys::rd_kafka_topic_partition_list_new(args.topics.len() as i32);
        let names: Vec<CString> = args
            .topics
            .iter()
            .map(|t| CString::new(t.as_str()))
            .collect::<Result<_, _>>()?;
        for t in &names {
            // RD_KAFKA_PARTITION_UA (-1): any partition (a subscription).
            sys::rd_kafka_topic_partition_list_add(list, t.as_ptr(), -1);
        }
        let e = sys::rd_kafka_subscribe(rk, list);
        sys::rd_kafka_topic_partition_list_destroy(list);
        if e != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            sys::rd_kafka_destroy(rk);
            return Err(format!("subscribe: {e:?}").into());
        }
        let deadline = Instant::now() + args.timeout;
        let mut n = 0u64;
        let mut commits = 0u64;
        let mut first: Option<Instant> = None;
        let mut last_commit = Instant::now();
        while n < args.records && Instant::now() < deadline {
            let m = sys::rd_kafka_consumer_poll(rk, 100);
            if m.is_null() {
                continue;
            }
            if (*m).err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                let now = Instant::now();
                first.get_or_insert(now);
                n += 1;
                if now.duration_since(last_commit) >= COMMIT_EVERY {
                    sys::rd_kafka_commit(rk, ptr::null(), 1);
                    commits += 1;
                    last_commit = now;
                }
            }
            sys::rd_kafka_message_destroy(m);
        }
        let took = first.map(|f| f.elapsed());
        sys::rd_kafka_commit(rk, ptr::null(), 0);
        sys::rd_kafka_consumer_close(rk);
        sys::rd_kafka_destroy(rk);
        if n < args.records {
            return Err(format!("deadline: {n} of {} records", args.records).into());
        }
        Ok(Measured {
            took: took.ok_or("no records")?,
            ages: None,
            commits,
        })
    }
}
