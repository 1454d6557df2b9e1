//! The sink of `examples/postgres_sink.rs` (its schema, the transaction
//! that claims a record's key and writes its order, the connection pool,
//! errors and counters) and the example's machinery: the command line, the
//! demo on the embedded broker (a new topic, its orders, the wait for the
//! last one, the check that every order was written once) and the report.
//! The handlers that make the sink a `FreshConsumer`'s are in the example.
//!
//! `tests/postgres_sink.rs` includes the example (and so this file) as a
//! module: what the example uses from here goes through `super::`, not
//! `crate::`.

use std::collections::HashSet;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use deadpool_postgres::{Manager, Pool, PoolError, Runtime};
use fresh_consumer::{BoxError, RunSummary, permanent};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;

use super::cli;
use super::mock_broker::MockBroker;

// ---------------------------------------------------------------------------
// The sink
// ---------------------------------------------------------------------------

/// The schema: the idempotency keys and the business table. Created by
/// [`PostgresSink::connect`] when missing.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS processed_events (
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    processed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition, kafka_offset)
);
CREATE TABLE IF NOT EXISTS orders (
    id              bigserial   PRIMARY KEY,
    order_id        text        NOT NULL,
    amount_cents    bigint      NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL
);
";

/// Claims the keys of a partition's records; returns the offsets that were
/// not claimed before. `ON CONFLICT DO NOTHING` waits for a concurrent
/// transaction holding the same key (a zombie consumer after a rebalance)
/// and then skips the key if that one committed. Offsets are claimed in
/// ascending order, so two batches never deadlock on each other.
const CLAIM: &str = "
INSERT INTO processed_events (topic, kafka_partition, kafka_offset)
SELECT $1, $2, o FROM unnest($3::bigint[]) AS o ORDER BY o
ON CONFLICT DO NOTHING
RETURNING kafka_offset";

/// The business change, for the records just claimed.
const INSERT_ORDERS: &str = "
INSERT INTO orders (order_id, amount_cents, topic, kafka_partition, kafka_offset)
SELECT id, amount, $1, $2, o FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS t(id, amount, o)";

/// How records are grouped into transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transactions {
    /// One transaction per record.
    PerRecord,
    /// One transaction per batch of a partition's records, up to `max`:
    /// the sink runs as a batch handler
    /// ([`FreshConsumer::batched`](fresh_consumer::FreshConsumer::batched)),
    /// in offset order.
    Batched {
        /// Most records in one transaction; at least 1.
        max: usize,
    },
}

impl Transactions {
    /// As the example's first line says it.
    pub fn describe(self) -> String {
        match self {
            Transactions::PerRecord => "one transaction per record".to_owned(),
            Transactions::Batched { max } => {
                format!("one transaction per up to {max} records of a partition")
            }
        }
    }
}

/// A parsed payload: `order_id,amount_cents`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// The order's id.
    pub order_id: String,
    /// Its amount, in cents.
    pub amount_cents: i64,
}

/// Parses `order_id,amount_cents`. Replace with your own format.
pub fn parse_order(payload: Option<&[u8]>) -> Result<Order, String> {
    let payload = payload.ok_or("no payload (a tombstone?)")?;
    let text = std::str::from_utf8(payload).map_err(|e| format!("payload is not UTF-8: {e}"))?;
    let (order_id, amount) = text
        .split_once(',')
        .ok_or_else(|| format!("payload {text:?} is not `order_id,amount_cents`"))?;
    let amount_cents = amount
        .trim()
        .parse()
        .map_err(|e| format!("amount {amount:?} in payload {text:?}: {e}"))?;
    Ok(Order {
        order_id: order_id.trim().to_owned(),
        amount_cents,
    })
}

/// Why a write failed. Its message names the database and the root cause
/// (the consumer logs it at each retry). A malformed payload is not a
/// `SinkError` but a [`permanent`] error.
#[derive(Clone, Debug)]
pub struct SinkError {
    kind: SinkErrorKind,
    /// `host:port/database`, never the password.
    target: Arc<str>,
    /// The innermost error's message: "Connection refused (os error 111)",
    /// "FATAL: terminating connection due to administrator command", ...
    cause: String,
    /// The SQLSTATE, when the server answered with an error.
    code: Option<String>,
}

/// The kind of a [`SinkError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkErrorKind {
    /// No connection could be made, or the connection broke (the server went
    /// away, restarted, or ended the session). Retried.
    Unreachable,
    /// The database answered with an error: a deadlock, a serialization
    /// failure, a full disk (retried), or a value the tables refuse (see
    /// [`SinkError::is_permanent`]).
    Database,
}

impl SinkError {
    /// Unreachable or a database error.
    pub fn kind(&self) -> SinkErrorKind {
        self.kind
    }

    /// The SQLSTATE, when the server answered with an error.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// `true` for errors that fail the same way however often the record is
    /// retried: SQLSTATE class 22 (data exception: a value out of range) and
    /// 23 (integrity constraint violation: a NOT NULL or CHECK the record
    /// breaks).
    pub fn is_permanent(&self) -> bool {
        self.code
            .as_deref()
            .is_some_and(|c| c.starts_with("22") || c.starts_with("23"))
    }

    /// The error as the handler returns it: marked [`permanent`] when it
    /// fails the same way at every retry (see [`Self::is_permanent`]).
    pub fn into_retry(self) -> BoxError {
        if self.is_permanent() {
            permanent(self)
        } else {
            self.into()
        }
    }

    fn unreachable(target: &Arc<str>, cause: &dyn Error) -> Self {
        SinkError {
            kind: SinkErrorKind::Unreachable,
            target: Arc::clone(target),
            cause: root_cause(cause),
            code: None,
        }
    }

    fn from_pool(target: &Arc<str>, e: PoolError) -> Self {
        // Every way of not getting a connection (refused, timed out, refused
        // by the server) means the database cannot be used now.
        let mut error = Self::unreachable(target, &e);
        if let PoolError::Backend(e) = &e {
            error.code = e.code().map(|c| c.code().to_owned());
        }
        error
    }

    fn from_query(target: &Arc<str>, e: tokio_postgres::Error) -> Self {
        let code = e.code().map(|c| c.code().to_owned());
        // Class 08 is "connection exception"; 57P01-57P03 are the server
        // shutting down, crashing or refusing connections for now.
        let lost = e.is_closed()
            || code
                .as_deref()
                .is_some_and(|c| c.starts_with("08") || c.starts_with("57P"))
            || (e.as_db_error().is_none() && e.source().is_some_and(|s| s.is::<std::io::Error>()));
        SinkError {
            kind: if lost {
                SinkErrorKind::Unreachable
            } else {
                SinkErrorKind::Database
            },
            target: Arc::clone(target),
            cause: root_cause(&e),
            code,
        }
    }
}

/// The innermost source's message (the outer ones only say "error
/// connecting to server" or "db error").
fn root_cause(e: &dyn Error) -> String {
    let mut inner = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            SinkErrorKind::Unreachable => {
                write!(f, "PostgreSQL at {} is unreachable: ", self.target)?
            }
            SinkErrorKind::Database => {
                write!(f, "PostgreSQL at {} refused the write: ", self.target)?
            }
        }
        f.write_str(&self.cause)?;
        if let Some(code) = &self.code {
            write!(f, " (SQLSTATE {code})")?;
        }
        Ok(())
    }
}

impl Error for SinkError {}

/// Counters of a sink, shared with whoever wants to watch it.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Records whose key and business row were written.
    pub written: AtomicU64,
    /// Records whose key was already there: delivered again, done before.
    pub duplicates: AtomicU64,
    /// Transactions committed.
    pub transactions: AtomicU64,
    /// Writes that failed because the database was unreachable.
    pub unreachable: AtomicU64,
    /// Writes that failed with a database error.
    pub database_errors: AtomicU64,
}

/// What happened to one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Key and business row written now.
    Written,
    /// The key was there: the record had been written before.
    AlreadyDone,
}

/// The sink: writes each record's order and its key in one transaction
/// ([`PostgresSink::write`]; the example makes it a `Handler` and a
/// `BatchHandler`). Cheap to clone (the clones share the pool).
#[derive(Clone)]
pub struct PostgresSink(Arc<Shared>);

struct Shared {
    pool: Pool,
    target: Arc<str>,
    stats: Arc<SinkStats>,
}

impl PostgresSink {
    /// Connects to `database_url` (`postgres://user[:password]@host:port/db`)
    /// with a pool of up to `pool_size` connections, and creates the schema
    /// when missing. Fails with an [`SinkErrorKind::Unreachable`] error when
    /// the database cannot be reached.
    pub async fn connect(database_url: &str, pool_size: usize) -> Result<Self, BoxError> {
        let mut config: tokio_postgres::Config = database_url
            .parse()
            .map_err(|e| format!("DATABASE_URL is not a PostgreSQL URL: {e}"))?;
        // A server that does not answer at all fails the attempt in time.
        config.connect_timeout(Duration::from_secs(5));
        let target: Arc<str> = describe(&config).into();
        let pool = Pool::builder(Manager::new(config, NoTls))
            .max_size(pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(5)))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()?;
        let client = pool
            .get()
            .await
            .map_err(|e| SinkError::from_pool(&target, e))?;
        client
            .batch_execute(SCHEMA)
            .await
            .map_err(|e| SinkError::from_query(&target, e))?;
        drop(client);
        Ok(PostgresSink(Arc::new(Shared {
            pool,
            target,
            stats: Arc::default(),
        })))
    }

    /// The sink's counters.
    pub fn stats(&self) -> Arc<SinkStats> {
        Arc::clone(&self.0.stats)
    }

    /// `host:port/database` (no password).
    pub fn target(&self) -> &str {
        &self.0.target
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.0.pool
    }

    /// Writes one partition's records (offset, order) in one transaction:
    /// claims their keys, then inserts the orders of the records claimed now.
    /// Returns each record's outcome, in the order given.
    pub async fn write(
        &self,
        topic: &str,
        partition: i32,
        records: &[(i64, &Order)],
    ) -> Result<Vec<Outcome>, SinkError> {
        self.0.write(topic, partition, records).await
    }
}

impl Shared {
    async fn write(
        &self,
        topic: &str,
        partition: i32,
        records: &[(i64, &Order)],
    ) -> Result<Vec<Outcome>, SinkError> {
        let result = write_transaction(&self.pool, &self.target, topic, partition, records).await;
        let s = &self.stats;
        match &result {
            Ok(outcomes) => {
                let written = outcomes.iter().filter(|o| **o == Outcome::Written).count();
                s.written.fetch_add(written as u64, Ordering::Relaxed);
                s.duplicates
                    .fetch_add((outcomes.len() - written) as u64, Ordering::Relaxed);
                s.transactions.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.kind == SinkErrorKind::Unreachable => {
                s.unreachable.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                s.database_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

/// One transaction: claim the keys, write the orders of the claimed ones,
/// commit. A duplicate key is "already done". Any error rolls back both.
async fn write_transaction(
    pool: &Pool,
    target: &Arc<str>,
    topic: &str,
    partition: i32,
    records: &[(i64, &Order)],
) -> Result<Vec<Outcome>, SinkError> {
    let query = |e| SinkError::from_query(target, e);
    let mut client = pool
        .get()
        .await
        .map_err(|e| SinkError::from_pool(target, e))?;
    let tx = client.transaction().await.map_err(query)?;
    let offsets: Vec<i64> = records.iter().map(|(o, _)| *o).collect();
    let claim = tx.prepare_cached(CLAIM).await.map_err(query)?;
    let claimed: HashSet<i64> = tx
        .query(&claim, &[&topic, &partition, &offsets])
        .await
        .map_err(query)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let fresh: Vec<&(i64, &Order)> = records
        .iter()
        .filter(|(o, _)| claimed.contains(o))
        .collect();
    if !fresh.is_empty() {
        let ids: Vec<&str> = fresh.iter().map(|(_, r)| r.order_id.as_str()).collect();
        let amounts: Vec<i64> = fresh.iter().map(|(_, r)| r.amount_cents).collect();
        let offsets: Vec<i64> = fresh.iter().map(|(o, _)| *o).collect();
        let insert = tx.prepare_cached(INSERT_ORDERS).await.map_err(query)?;
        tx.execute(&insert, &[&topic, &partition, &ids, &amounts, &offsets])
            .await
            .map_err(query)?;
    }
    // Nothing claimed: the commit changes nothing, but ends the transaction
    // cleanly.
    tx.commit().await.map_err(query)?;
    Ok(records
        .iter()
        .map(|(o, _)| {
            if claimed.contains(o) {
                Outcome::Written
            } else {
                Outcome::AlreadyDone
            }
        })
        .collect())
}

/// `host:port/database` of a connection config, for messages.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

// ---------------------------------------------------------------------------
// The command line, the demo and the report
// ---------------------------------------------------------------------------

pub const DEFAULT_RECORDS: u64 = 20_000;
pub const DEFAULT_PARTITIONS: i32 = 4;

/// The command line.
#[derive(Debug)]
pub struct Args {
    pub records: u64,
    pub partitions: i32,
    pub transactions: Transactions,
    /// A real cluster: bootstrap servers, topic, group.
    pub cluster: Option<(String, String, String)>,
}

pub fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        records: DEFAULT_RECORDS,
        partitions: DEFAULT_PARTITIONS,
        transactions: Transactions::PerRecord,
        cluster: None,
    };
    let (mut bootstrap, mut topic, mut group) = (None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--records" => args.records = cli::number(&arg, it.next())?,
            "--partitions" => {
                args.partitions = cli::number(&arg, it.next())?
                    .clamp(1, 64)
                    .try_into()
                    .unwrap_or(1)
            }
            "--batch" => {
                let max = cli::number(&arg, it.next())? as usize;
                args.transactions = if max <= 1 {
                    Transactions::PerRecord
                } else {
                    Transactions::Batched { max }
                };
            }
            "--bootstrap" => bootstrap = it.next(),
            "--topic" => topic = it.next(),
            "--group" => group = it.next(),
            "-h" | "--help" => {
                println!(
                    "usage: postgres_sink [--records N] [--partitions P] [--batch N]\n\
                     \x20      postgres_sink --bootstrap HOST:PORT --topic T --group G [--batch N]\n\
                     \n\
                     Writes each record (payload `order_id,amount_cents`) as an `orders` row and\n\
                     its (topic, partition, offset) into `processed_events`, in one transaction,\n\
                     in the database DATABASE_URL names. --batch N: one transaction per up to N\n\
                     records of a partition. Without --bootstrap: a demo on an embedded mock\n\
                     broker with N records (default {DEFAULT_RECORDS}) over P partitions\n\
                     (default {DEFAULT_PARTITIONS}); prints records/s and checks every order\n\
                     was written exactly once."
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    match (bootstrap, topic, group) {
        (None, None, None) => {}
        (Some(b), Some(t), Some(g)) => args.cluster = Some((b, t, g)),
        _ => return Err("--bootstrap, --topic and --group go together".into()),
    }
    Ok(args)
}

/// Logs to stderr: the library's warnings, or what `RUST_LOG` asks for.
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The demo on the embedded broker: a new topic holding `--records`
/// orders, the group that reads it, and the clock of the run.
pub struct Demo {
    /// The embedded broker's address.
    pub bootstrap: String,
    /// `orders-demo-<ms>`: a new topic per run (the keys in
    /// `processed_events` include the topic, and a rerun of the demo is new
    /// data).
    pub topic: String,
    /// `<topic>-sink`.
    pub group: String,
    records: u64,
    // Dropped in this order (the producer would log the broker's
    // disappearance).
    producer: FutureProducer,
    broker: MockBroker,
    started: Instant,
    first: Arc<Mutex<Option<Instant>>>,
    watch_first: Option<JoinHandle<()>>,
}

impl Demo {
    /// Starts the embedded broker, creates the topic and produces every
    /// order first: the run measures the sink alone.
    pub async fn start(args: &Args) -> Result<Demo, BoxError> {
        let broker = MockBroker::start()?;
        let bootstrap = broker.bootstrap().to_owned();
        // A new topic per run: the keys in `processed_events` include the topic,
        // and a rerun of the demo is new data.
        let millis = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
        let topic = format!("orders-demo-{millis}");
        broker.create_topic(&topic, args.partitions)?;

        // Produce everything first: the run below measures the sink alone.
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("linger.ms", "5")
            .create()?;
        let mut pending = Vec::with_capacity(args.records as usize);
        for i in 0..args.records {
            let order_id = format!("{topic}-{i}");
            let payload = format!("{order_id},{}", 100 + (i * 7_919) % 9_900);
            pending.push(
                producer
                    .send_result(FutureRecord::to(&topic).key(&order_id).payload(&payload))
                    .map_err(|(e, _)| e)?,
            );
        }
        for delivery in pending {
            delivery.await?.map_err(|(e, _)| e)?;
        }
        producer.flush(Duration::from_secs(10))?;
        println!(
            "produced {} records into {topic} ({} partitions)",
            args.records, args.partitions
        );
        Ok(Demo {
            group: format!("{topic}-sink"),
            bootstrap,
            topic,
            records: args.records,
            producer,
            broker,
            started: Instant::now(),
            first: Arc::new(Mutex::new(None)),
            watch_first: None,
        })
    }

    /// Resolves once the sink has seen every order (written, or a
    /// duplicate), or at SIGTERM/Ctrl-C. Starts the clock: the records/s run
    /// from the first write, not from the group join.
    pub fn until_done(&mut self, stats: Arc<SinkStats>) -> impl Future<Output = ()> + use<> {
        let target = self.records;
        let done = {
            let stats = Arc::clone(&stats);
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(5));
                loop {
                    tick.tick().await;
                    let n = stats.written.load(Ordering::Relaxed)
                        + stats.duplicates.load(Ordering::Relaxed);
                    if n >= target {
                        return;
                    }
                }
            }
        };
        self.started = Instant::now();
        // The clock starts at the first write, not at the group join.
        self.watch_first = Some({
            let stats = Arc::clone(&stats);
            let first = Arc::clone(&self.first);
            tokio::spawn(async move {
                while stats.transactions.load(Ordering::Relaxed) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                *first.lock().unwrap() = Some(Instant::now());
            })
        });
        async move {
            tokio::select! {
                () = done => {}
                () = cli::shutdown_signal() => println!("signal received; stopping"),
            }
        }
    }

    /// The report of the run (`summary`) and the check: every order
    /// exactly once in `orders`.
    pub async fn finish(self, sink: &PostgresSink, summary: &RunSummary) -> Result<(), BoxError> {
        let finished = Instant::now();
        let Demo {
            topic,
            records,
            broker,
            producer,
            started,
            first,
            watch_first,
            ..
        } = self;
        if let Some(watch_first) = watch_first {
            watch_first.abort();
        }
        let first = first.lock().unwrap().unwrap_or(started);
        report(&sink.stats(), Some(finished.duration_since(first)));
        print_committed(summary);

        // Every order exactly once.
        let client = sink.pool().get().await?;
        let row = client
            .query_one(
                "SELECT count(*), count(DISTINCT order_id) FROM orders WHERE topic = $1",
                &[&topic],
            )
            .await?;
        let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
        println!("orders rows for {topic}: {rows}, distinct orders: {distinct}");
        if rows != records as i64 || distinct != rows {
            return Err(format!(
                "expected {} orders exactly once, found {rows} rows of {distinct} orders",
                records
            )
            .into());
        }
        // The clients first: they would log the broker's disappearance.
        drop(producer);
        drop(broker);
        Ok(())
    }
}

/// The offsets the run committed, sorted: `topic:partition=offset ...`.
pub fn print_committed(summary: &RunSummary) {
    let mut committed: Vec<String> = summary
        .committed
        .iter()
        .map(|(tp, offset)| format!("{}:{}={offset}", tp.topic, tp.partition))
        .collect();
    committed.sort();
    println!("committed offsets: {}", committed.join(" "));
}

/// The sink's counters; with `elapsed` (the demo), the records/s.
pub fn report(stats: &SinkStats, elapsed: Option<Duration>) {
    let written = stats.written.load(Ordering::Relaxed);
    let duplicates = stats.duplicates.load(Ordering::Relaxed);
    let transactions = stats.transactions.load(Ordering::Relaxed);
    print!(
        "written {written}, duplicates absorbed {duplicates}, {transactions} transactions \
         ({:.1} records each)",
        (written + duplicates) as f64 / transactions.max(1) as f64
    );
    if let Some(elapsed) = elapsed {
        print!(
            ", {:.2} s from the first write: {:.0} records/s",
            elapsed.as_secs_f64(),
            written as f64 / elapsed.as_secs_f64()
        );
    }
    println!();
    let unreachable = stats.unreachable.load(Ordering::Relaxed);
    let failed = stats.database_errors.load(Ordering::Relaxed);
    if unreachable + failed > 0 {
        println!("failed writes (retried): {unreachable} unreachable, {failed} database errors");
    }
}
