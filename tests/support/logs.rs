//! The one log capture of the test binaries.
//!
//! [`init`] (or [`init_everything`]) installs, once per binary, a global
//! subscriber that keeps every event it lets through in memory, with its
//! level, target, message and fields, and prints the usual lines to the test
//! output. It is global, not thread-local, because librdkafka logs from its
//! own threads and the engine from its committer and close threads; and it
//! has one filter for the whole subscriber, not per-layer filters: with
//! per-layer filters, events of concurrently running tests were sometimes
//! lost. It also bridges the `log` crate (rdkafka's `ClientConfig::new()`
//! picks librdkafka's log level from it).
//!
//! Tests of one binary run concurrently: filter what you read on something
//! unique to the test (its topic, group or a setting of its own).
#![allow(dead_code)]

use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// The directives of [`init`]: the library at INFO, everything else at WARN.
const LIBRARY: &str = "warn,fresh_consumer=info";

/// One captured event.
#[derive(Debug, Clone)]
pub struct Event {
    pub level: Level,
    pub target: String,
    pub message: String,
    /// The other fields, as `name=value ` (values as `Debug`).
    pub fields: String,
}

impl Event {
    /// Whether a library module logged it.
    pub fn is_library(&self) -> bool {
        self.target.starts_with("fresh_consumer")
    }

    /// Whether the library module named `module` logged it, wherever the
    /// module sits in the crate (`fresh_consumer::watchdog` and
    /// `fresh_consumer::engine::watchdog` are both `watchdog`).
    pub fn is_from(&self, module: &str) -> bool {
        self.is_library() && self.target.ends_with(&format!("::{module}"))
    }

    /// Whether `needle` is in its message or its fields.
    pub fn mentions(&self, needle: &str) -> bool {
        self.message.contains(needle) || self.fields.contains(needle)
    }

    /// The event as one line: `LEVEL target: message fields`.
    pub fn line(&self) -> String {
        format!(
            "{} {}: {} {}",
            self.level, self.target, self.message, self.fields
        )
    }
}

fn store() -> MutexGuard<'static, Vec<Event>> {
    static EVENTS: OnceLock<Mutex<Vec<Event>>> = OnceLock::new();
    EVENTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Captures `warn,fresh_consumer=info` plus RUST_LOG's directives.
pub fn init() {
    install(LIBRARY);
}

/// Captures every event of every target at TRACE (librdkafka's log lines
/// included), for tests that must find something in everything logged; the
/// test output still shows only `warn,fresh_consumer=info` (or everything
/// when RUST_LOG is set).
pub fn init_everything() {
    install("trace");
}

fn install(directives: &str) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let extra = std::env::var("RUST_LOG").ok();
        let filter = match &extra {
            Some(extra) => format!("{directives},{extra}"),
            None => directives.to_owned(),
        };
        let _ = tracing_subscriber::registry()
            .with(EnvFilter::new(filter))
            .with(Capture {
                print_all: extra.is_some() || directives == LIBRARY,
            })
            .try_init();
    });
}

/// Keeps every event it sees and prints it to the test output (`print!`,
/// captured by the test harness like `with_test_writer`).
struct Capture {
    /// Print every event; otherwise only those [`LIBRARY`] lets through.
    print_all: bool,
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let event = Event {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: fields.message,
            fields: fields.rest,
        };
        let library_level = if event.is_library() {
            Level::INFO
        } else {
            Level::WARN
        };
        if self.print_all || event.level <= library_level {
            println!("{}", event.line());
        }
        store().push(event);
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, "{}={value:?} ", field.name());
        }
    }
}

/// Every event captured so far that satisfies `select`.
pub fn events(select: impl Fn(&Event) -> bool) -> Vec<Event> {
    store().iter().filter(|e| select(e)).cloned().collect()
}

/// How many events captured so far satisfy `select`.
pub fn count(select: impl Fn(&Event) -> bool) -> usize {
    store().iter().filter(|e| select(e)).count()
}

/// The lines (see [`Event::line`]) of the captured events that contain
/// `needle`.
pub fn lines_with(needle: &str) -> Vec<String> {
    store()
        .iter()
        .map(Event::line)
        .filter(|l| l.contains(needle))
        .collect()
}

/// A position in the capture, for [`text_since`].
pub fn mark() -> usize {
    store().len()
}

/// Everything captured since `mark`, one [`Event::line`] a line.
pub fn text_since(mark: usize) -> String {
    store()[mark..].iter().map(|e| e.line() + "\n").collect()
}
