//! An idempotent PostgreSQL sink: exactly-once effects with at-least-once
//! delivery.
//!
//! ```text
//! eval "$(bash .ci/postgres start)"     # a throw-away PostgreSQL; sets DATABASE_URL
//! cargo run --release --example postgres_sink                  # one transaction per record
//! cargo run --release --example postgres_sink -- --batch 64    # one per up to 64 records of a partition
//! cargo run --release --example postgres_sink -- --bootstrap broker:9092 --topic orders --group orders-sink
//! bash .ci/postgres stop "$POSTGRES_DIR"
//! ```
//!
//! `fresh-consumer` commits an offset only after the handler succeeded for
//! every record before it, so no record is lost; but a consumer that dies (or
//! loses its partitions in a rebalance) after a handler succeeded and before
//! the commit landed hands those records to the next consumer again. The
//! offset commit lives in Kafka and the business change in the database: no
//! order of the two makes them one atomic step. So the handler makes its
//! effect idempotent itself: in **one transaction** it inserts the record's
//! key into `processed_events` and makes the business change. When the key
//! is already there, the record was done before and the handler returns
//! `Ok` without doing anything; when the transaction fails, neither the key
//! nor the change exists and the handler's error makes the consumer retry.
//!
//! The key here is the record's `(topic, partition, offset)`: what Kafka
//! redelivers after a crash or a rebalance is the same record at the same
//! offset. A producer that may send one event twice (a retry without an
//! idempotent producer, a re-publishing upstream) puts it at two offsets:
//! then key on an event id from the payload or a header instead (the same
//! table with an `event_id` primary key).
//!
//! The business change of the demo is an `orders` row built from the
//! payload `order_id,amount_cents`. `orders` deliberately has no unique
//! constraint on the order: `processed_events` is what makes the effect
//! happen once, and the same pattern works for changes no constraint can
//! guard (adding to a balance, calling `UPDATE ... SET n = n + 1`).
//!
//! Without `--bootstrap` the example starts librdkafka's mock broker inside
//! the process, produces `--records` records (default 20,000) into a new
//! topic, consumes them into PostgreSQL, prints records/s and checks that
//! every order row exists exactly once. With `--bootstrap` it consumes a real
//! cluster's topic until Ctrl-C / SIGTERM. `DATABASE_URL` (for example
//! `postgres://postgres@127.0.0.1:5432/postgres`) names the database; the
//! schema is created when missing.
//!
//! When PostgreSQL is unreachable the handler returns an error saying so
//! (`PostgreSQL at 127.0.0.1:5432/postgres is unreachable: ...`); the
//! consumer retries the record with backoff and commits nothing past it, so
//! nothing is lost while the database is away. A payload that can never be
//! written is marked [`permanent`], which skips the retries (and, with the
//! default `OnExhausted::Block`, holds the partition until someone looks).
//!
//! The demo's broker comes from `examples/support/mock_broker.rs` and the
//! command-line plumbing from `examples/support/cli.rs` (shared with the
//! other examples).

#[path = "support/cli.rs"]
mod cli;
#[path = "support/mock_broker.rs"]
mod mock_broker;

use std::collections::HashSet;
use std::error::Error;
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use deadpool_postgres::{Manager, Pool, PoolError, Runtime};
use fresh_consumer::{
    Batch, BatchError, BatchHandler, BoxError, FreshConsumer, Handler, Record, permanent,
};
use tokio_postgres::NoTls;

// ---------------------------------------------------------------------------
// The sink: the part to copy
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

/// The sink: a [`Handler`] that writes each record's order and its key in
/// one transaction. Cheap to clone (the clones share the pool).
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

/// The per-record handler: one transaction per record. `Ok` only once the
/// record's transaction committed (or its key was already there); an error
/// makes the consumer retry the record.
impl Handler for PostgresSink {
    type Error = BoxError;

    async fn handle(&self, record: Record) -> Result<(), BoxError> {
        // A payload that can never be written is not retried.
        let order = parse_order(record.payload()).map_err(permanent)?;
        self.write(
            record.topic(),
            record.partition(),
            &[(record.offset(), &order)],
        )
        .await
        .map(drop)
        .map_err(SinkError::into_retry)
    }
}

/// The batch handler: one transaction per batch of a partition's records
/// ([`FreshConsumer::batched`]). `Ok` only once the batch's transaction
/// committed. A payload that cannot be parsed fails at its record: the
/// records before it are written in the transaction, it goes to
/// `OnExhausted` as permanent, the rest come back as a new batch. A value
/// the tables refuse fails the whole transaction, permanently: the library
/// then writes the batch's records one at a time (each its own
/// transaction), so only that record takes the permanent error.
impl BatchHandler for PostgresSink {
    type Error = BatchError;

    async fn handle(&self, batch: Batch) -> Result<(), BatchError> {
        let mut orders = Vec::with_capacity(batch.len());
        let mut unparsable = None;
        for (i, record) in batch.iter().enumerate() {
            match parse_order(record.payload()) {
                Ok(order) => orders.push((record.offset(), order)),
                Err(e) => {
                    unparsable = Some((i, e));
                    break;
                }
            }
        }
        if !orders.is_empty() {
            let records: Vec<(i64, &Order)> = orders.iter().map(|(o, r)| (*o, r)).collect();
            self.write(batch.topic(), batch.partition(), &records)
                .await
                .map_err(|e| BatchError::new(e.into_retry()))?;
        }
        match unparsable {
            Some((i, e)) => Err(BatchError::at(i, permanent(e))),
            None => Ok(()),
        }
    }
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
// The demo
// ---------------------------------------------------------------------------

const DEFAULT_RECORDS: u64 = 20_000;
const DEFAULT_PARTITIONS: i32 = 4;

#[derive(Debug)]
struct Args {
    records: u64,
    partitions: i32,
    transactions: Transactions,
    /// A real cluster: bootstrap servers, topic, group.
    cluster: Option<(String, String, String)>,
}

fn parse_args() -> Result<Args, String> {
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

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::args_or_exit("postgres_sink", parse_args);
    cli::exit_status("postgres_sink", run(args).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let url = std::env::var("DATABASE_URL").map_err(|_| {
        "DATABASE_URL is not set; start a throw-away PostgreSQL with \
         `eval \"$(bash .ci/postgres start)\"` or point it at yours"
    })?;
    let pool_size = match args.transactions {
        Transactions::PerRecord => args.partitions as usize,
        // One transaction at a time per partition, plus one spare.
        Transactions::Batched { .. } => args.partitions as usize + 1,
    };
    let sink = PostgresSink::connect(&url, pool_size)
        .await
        .map_err(|e| format!("{} (is DATABASE_URL right?)", cli::chain(e.as_ref())))?;
    println!(
        "PostgreSQL at {}: schema ready; {}",
        sink.target(),
        match args.transactions {
            Transactions::PerRecord => "one transaction per record".to_owned(),
            Transactions::Batched { max } =>
                format!("one transaction per up to {max} records of a partition"),
        }
    );
    match &args.cluster {
        Some((bootstrap, topic, group)) => {
            let summary = match args.transactions {
                Transactions::PerRecord => {
                    configure(FreshConsumer::new(sink.clone()), bootstrap, topic, group)
                        .run_until(cli::shutdown_signal())
                        .await?
                }
                Transactions::Batched { max } => {
                    let batched = FreshConsumer::batched(sink.clone()).max_batch_records(max);
                    configure(batched, bootstrap, topic, group)
                        .run_until(cli::shutdown_signal())
                        .await?
                }
            };
            report(&sink.stats(), None);
            print_committed(&summary);
            Ok(())
        }
        None => demo(&args, sink).await,
    }
}

async fn demo(args: &Args, sink: PostgresSink) -> Result<(), BoxError> {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

    let broker = mock_broker::MockBroker::start()?;
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

    let stats = sink.stats();
    let target = args.records;
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
    let started = Instant::now();
    let first = Arc::new(Mutex::new(None::<Instant>));
    let group = format!("{topic}-sink");
    // The clock starts at the first write, not at the group join.
    let watch_first = {
        let stats = Arc::clone(&stats);
        let first = Arc::clone(&first);
        tokio::spawn(async move {
            while stats.transactions.load(Ordering::Relaxed) == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            *first.lock().unwrap() = Some(Instant::now());
        })
    };
    let until = async {
        tokio::select! {
            () = done => {}
            () = cli::shutdown_signal() => println!("signal received; stopping"),
        }
    };
    let summary = match args.transactions {
        Transactions::PerRecord => {
            demo_settings(configure(
                FreshConsumer::new(sink.clone()),
                &bootstrap,
                &topic,
                &group,
            ))
            .run_until(until)
            .await?
        }
        Transactions::Batched { max } => {
            let batched = FreshConsumer::batched(sink.clone()).max_batch_records(max);
            demo_settings(configure(batched, &bootstrap, &topic, &group))
                .run_until(until)
                .await?
        }
    };
    let finished = Instant::now();
    watch_first.abort();
    let first = first.lock().unwrap().unwrap_or(started);
    report(&stats, Some(finished.duration_since(first)));
    print_committed(&summary);

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
    if rows != args.records as i64 || distinct != rows {
        return Err(format!(
            "expected {} orders exactly once, found {rows} rows of {distinct} orders",
            args.records
        )
        .into());
    }
    // The clients first: they would log the broker's disappearance.
    drop(producer);
    drop(broker);
    Ok(())
}

/// The settings both handler modes share: where to read from, and a
/// backoff that reaches a database back within 5 s of its return.
fn configure<H>(
    consumer: FreshConsumer<H>,
    bootstrap: &str,
    topic: &str,
    group: &str,
) -> FreshConsumer<H> {
    consumer
        .bootstrap_servers(bootstrap)
        .group_id(group)
        .topics([topic])
        .retry_backoff(Duration::from_millis(100), Duration::from_secs(5))
}

/// The demo's settings on the embedded broker.
fn demo_settings<H>(consumer: FreshConsumer<H>) -> FreshConsumer<H> {
    consumer
        .set("fetch.wait.max.ms", "20")
        .commit_interval(Duration::from_millis(200))
        .shutdown_timeout(Duration::from_secs(10))
}

fn print_committed(summary: &fresh_consumer::RunSummary) {
    let mut committed: Vec<String> = summary
        .committed
        .iter()
        .map(|(tp, offset)| format!("{}:{}={offset}", tp.topic, tp.partition))
        .collect();
    committed.sort();
    println!("committed offsets: {}", committed.join(" "));
}

fn report(stats: &SinkStats, elapsed: Option<Duration>) {
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
