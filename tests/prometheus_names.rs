//! The Prometheus names of the library's metrics, checked three ways so that
//! a rename in `src/metrics.rs` breaks a test instead of an alert:
//!
//! 1. `prometheus_name` below translates an OTLP metric the way Prometheus'
//!    OTLP receiver and the OpenTelemetry Collector's Prometheus exporters do
//!    by default (the `UnderscoreEscapingWithSuffixes` strategy): checked
//!    against known translations.
//! 2. The mapping tables in `docs/slo.md` must equal that translation of every
//!    metric and attribute in `src/metrics.rs` (parsed from its constants and
//!    their `| instrument | unit | attributes |` doc tables).
//! 3. Every `fresh_consumer_*` / `messaging_*` name in `deploy/prometheus/`
//!    (rules, tests) and in `docs/slo.md` must be one of those Prometheus
//!    names (a histogram's with `_bucket`, `_sum` or `_count`) or labels, and
//!    every `fresh_consumer:*` recording rule used must be recorded there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const METRICS_RS: &str = concat!(
    include_str!("../src/metrics/names.rs"),
    include_str!("../src/metrics/monitor_names.rs")
);

/// Series the rules read that the library does not export: signals a team
/// emits itself (documented where the rules use them).
const EMITTED_BY_TEAMS: &[&str] = &[
    // deploy/prometheus/fresh-consumer-quiet.rules.yml: a deploy
    // pipeline pushes the start of a deploy to a Pushgateway.
    "fresh_consumer_deploy_started_timestamp_seconds",
];
const SLO_MD: &str = include_str!("../docs/slo.md");

/// The SLO counter and its attributes as planned (issue 6), used only while
/// `src/metrics.rs` defines no `fresh_consumer.slo.*` name at all. Once it
/// does, its definitions are the ones checked, and they must include these.
const PLANNED_SLO_METRIC: (&str, &str, &str) =
    ("fresh_consumer.slo.messages", "counter (u64)", "{message}");
const PLANNED_SLO_ATTRIBUTES: &[&str] =
    &["fresh_consumer.slo.threshold", "fresh_consumer.slo.result"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    MonotonicCounter,
    NonMonotonicCounter,
    Gauge,
    Histogram,
}

impl Kind {
    /// From the instrument column of a doc table in `src/metrics.rs`.
    fn from_instrument(instrument: &str) -> Kind {
        let i = instrument.trim();
        if i.starts_with("up-down counter") {
            Kind::NonMonotonicCounter
        } else if i.starts_with("counter") {
            Kind::MonotonicCounter
        } else if i.starts_with("gauge") {
            Kind::Gauge
        } else if i.starts_with("histogram") {
            Kind::Histogram
        } else {
            panic!("unknown instrument {instrument:?} in src/metrics.rs")
        }
    }

    /// The Prometheus metric type the metric arrives as.
    fn prometheus_type(self) -> &'static str {
        match self {
            Kind::MonotonicCounter => "counter",
            Kind::NonMonotonicCounter | Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// UCUM unit to Prometheus unit word; `1` has none. Only the units this
/// crate could plausibly use; an unknown unit without braces is kept as is,
/// as the translator does.
fn unit_word(unit: &str) -> String {
    let main = unit.split('/').next().unwrap_or("").trim();
    if main.is_empty() || main.contains('{') || main.contains('}') {
        return String::new();
    }
    match main {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "1" => "",
        "%" => "percent",
        other => other,
    }
    .to_string()
}

/// An OTLP metric name as Prometheus stores it: split into tokens at every
/// character outside `[A-Za-z0-9:]` (so `.` and `_` alike), the unit word
/// appended unless already a token, `total` last for monotonic counters,
/// `ratio` last for gauges of unit `1`, joined with `_`. (Units with a `/`
/// would also get `per_<unit>`; no metric here has one.)
fn prometheus_name(name: &str, unit: &str, kind: Kind) -> String {
    assert!(
        !unit.contains('/'),
        "per-units are not handled here: {unit}"
    );
    let mut tokens: Vec<String> = name
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let word = unit_word(unit);
    if !word.is_empty() && !tokens.contains(&word) {
        tokens.push(word);
    }
    if kind == Kind::MonotonicCounter {
        tokens.retain(|t| t != "total");
        tokens.push("total".into());
    }
    if kind == Kind::Gauge && unit == "1" {
        tokens.retain(|t| t != "ratio");
        tokens.push("ratio".into());
    }
    let joined = tokens.join("_");
    if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

/// An OTLP attribute name as a Prometheus label: every character outside
/// `[A-Za-z0-9_]` becomes `_`.
fn prometheus_label(attribute: &str) -> String {
    attribute
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[derive(Debug)]
struct Metric {
    otlp: String,
    instrument: String,
    unit: String,
    kind: Kind,
}

impl Metric {
    fn prometheus(&self) -> String {
        prometheus_name(&self.otlp, &self.unit, self.kind)
    }
}

/// The metrics (constants with a doc table) and attributes (the other string
/// constants) of `src/metrics.rs`, plus the planned SLO names while absent.
fn code_names() -> (Vec<Metric>, BTreeSet<String>) {
    let mut metrics = Vec::new();
    let mut attributes = BTreeSet::new();
    let mut doc: Vec<String> = Vec::new();
    // A constant whose line rustfmt broke after `=` is joined back first.
    let joined = METRICS_RS.replace(": &str =\n    \"", ": &str = \"");
    for line in joined.lines() {
        let line = line.trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim().to_string());
            continue;
        }
        if let Some((_, value)) = line
            .strip_prefix("pub const ")
            .and_then(|rest| rest.split_once(": &str = \""))
        {
            let value = value.trim_end_matches("\";").to_string();
            let header = doc.iter().position(|l| {
                l.replace(' ', "")
                    .starts_with("|instrument|unit|attributes|")
            });
            match header {
                Some(h) => {
                    let row: Vec<&str> = doc[h + 2]
                        .trim_matches('|')
                        .split('|')
                        .map(str::trim)
                        .collect();
                    let instrument = row[0].to_string();
                    metrics.push(Metric {
                        kind: Kind::from_instrument(&instrument),
                        unit: row[1].trim_matches('`').to_string(),
                        otlp: value,
                        instrument,
                    });
                }
                None => {
                    attributes.insert(value);
                }
            }
        }
        if !line.is_empty() && !line.starts_with("#[") {
            doc.clear();
        }
    }
    assert!(
        metrics.len() >= 10,
        "found only {} metrics in src/metrics.rs; did its doc format change?",
        metrics.len()
    );

    let has_slo = metrics
        .iter()
        .any(|m| m.otlp.starts_with("fresh_consumer.slo."))
        || attributes
            .iter()
            .any(|a| a.starts_with("fresh_consumer.slo."));
    if has_slo {
        // Implemented: the planned names must be what src/metrics.rs defines.
        let (name, instrument, unit) = PLANNED_SLO_METRIC;
        let m = metrics
            .iter()
            .find(|m| m.otlp == name)
            .unwrap_or_else(|| panic!("src/metrics.rs has fresh_consumer.slo.* names but not {name}: update deploy/prometheus and docs/slo.md"));
        assert_eq!(
            Kind::from_instrument(&m.instrument),
            Kind::from_instrument(instrument),
            "{name}"
        );
        assert_eq!(m.unit, unit, "unit of {name}");
        for a in PLANNED_SLO_ATTRIBUTES {
            assert!(
                attributes.contains(*a),
                "src/metrics.rs has no attribute {a}"
            );
        }
    } else {
        let (name, instrument, unit) = PLANNED_SLO_METRIC;
        metrics.push(Metric {
            otlp: name.into(),
            instrument: instrument.into(),
            unit: unit.into(),
            kind: Kind::from_instrument(instrument),
        });
        attributes.extend(PLANNED_SLO_ATTRIBUTES.iter().map(|a| a.to_string()));
    }
    (metrics, attributes)
}

/// The Prometheus series names a metric produces.
fn series_names(m: &Metric) -> Vec<String> {
    let base = m.prometheus();
    match m.kind {
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{base}{s}"))
            .collect(),
        _ => vec![base],
    }
}

/// The rows of the markdown table between `<!-- {marker}:start` and
/// `<!-- {marker}:end -->` in docs/slo.md, as cells, without header rows.
fn doc_table(marker: &str) -> Vec<Vec<String>> {
    let start = SLO_MD
        .find(&format!("<!-- {marker}:start"))
        .unwrap_or_else(|| panic!("docs/slo.md has no <!-- {marker}:start --> marker"));
    let end = SLO_MD[start..]
        .find(&format!("<!-- {marker}:end -->"))
        .unwrap_or_else(|| panic!("docs/slo.md has no <!-- {marker}:end --> marker"))
        + start;
    SLO_MD[start..end]
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The first `backticked` text of a table cell.
fn code(cell: &str) -> String {
    cell.split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no `code` in table cell {cell:?}"))
        .to_string()
}

/// The names `[A-Za-z0-9_:]+` of a text.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| !t.is_empty())
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// Every file under deploy/prometheus (rules, tests, generator).
fn deploy_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yml" | "yaml" | "json" | "py" | "md")
            ) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&deploy_dir(), &mut out);
    out.sort();
    out
}

#[test]
fn translation_matches_known_examples() {
    use Kind::*;
    // Examples from the OTLP-to-Prometheus translation (Prometheus'
    // otlptranslator and the OpenTelemetry compatibility spec).
    let cases = [
        (
            "http.server.request.duration",
            "s",
            Histogram,
            "http_server_request_duration_seconds",
        ),
        (
            "requests.count",
            "1",
            MonotonicCounter,
            "requests_count_total",
        ),
        ("memory.usage", "By", Gauge, "memory_usage_bytes"),
        (
            "system.cpu.utilization",
            "1",
            Gauge,
            "system_cpu_utilization_ratio",
        ),
        (
            "active.requests",
            "{request}",
            NonMonotonicCounter,
            "active_requests",
        ),
        (
            "messaging.client.consumed.messages",
            "{message}",
            MonotonicCounter,
            "messaging_client_consumed_messages_total",
        ),
        // A token already present is not repeated; underscores split tokens too.
        ("queue.wait.seconds", "s", Histogram, "queue_wait_seconds"),
        ("jobs.total", "{job}", MonotonicCounter, "jobs_total"),
        ("cache.hit_ratio", "1", Gauge, "cache_hit_ratio"),
        (
            "3xx.responses",
            "{response}",
            MonotonicCounter,
            "_3xx_responses_total",
        ),
    ];
    for (name, unit, kind, want) in cases {
        assert_eq!(
            prometheus_name(name, unit, kind),
            want,
            "{name} ({unit}, {kind:?})"
        );
    }
    assert_eq!(
        prometheus_label("messaging.destination.partition.id"),
        "messaging_destination_partition_id"
    );
    assert_eq!(
        prometheus_label("fresh_consumer.slo.result"),
        "fresh_consumer_slo_result"
    );
}

#[test]
fn every_metric_of_the_code_has_its_row_in_the_docs_table() {
    let (metrics, _) = code_names();
    let rows = doc_table("prometheus-names");
    let mut doc: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in rows {
        assert!(
            row.len() >= 5,
            "docs/slo.md prometheus-names row has {} cells: {row:?}",
            row.len()
        );
        let otlp = code(&row[0]);
        assert!(
            doc.insert(otlp.clone(), row).is_none(),
            "docs/slo.md lists {otlp} twice"
        );
    }
    let mut errors = Vec::new();
    for m in &metrics {
        let Some(row) = doc.remove(&m.otlp) else {
            let series = match m.kind {
                Kind::Histogram => "histogram: `_bucket` (with `le`), `_sum`, `_count`",
                kind => kind.prometheus_type(),
            };
            errors.push(format!(
                "{}: no row; add | `{}` | {} | `{}` | `{}` | {} |",
                m.otlp,
                m.otlp,
                m.instrument,
                m.unit,
                m.prometheus(),
                series
            ));
            continue;
        };
        let kind = Kind::from_instrument(&row[1]);
        if kind != m.kind {
            errors.push(format!(
                "{}: instrument {:?} in docs, {:?} in code",
                m.otlp, row[1], m.instrument
            ));
        }
        if code(&row[2]) != m.unit {
            errors.push(format!(
                "{}: unit {} in docs, {} in code",
                m.otlp, row[2], m.unit
            ));
        }
        if code(&row[3]) != m.prometheus() {
            errors.push(format!(
                "{}: Prometheus name {} in docs, want `{}`",
                m.otlp,
                row[3],
                m.prometheus()
            ));
        }
        if !row[4].starts_with(m.kind.prometheus_type()) {
            errors.push(format!(
                "{}: Prometheus type {:?} in docs, want {}",
                m.otlp,
                row[4],
                m.kind.prometheus_type()
            ));
        }
        if m.kind == Kind::Histogram
            && !["_bucket", "_sum", "_count"]
                .iter()
                .all(|s| row[4].contains(s))
        {
            errors.push(format!(
                "{}: histogram row must name _bucket, _sum and _count",
                m.otlp
            ));
        }
    }
    for extra in doc.keys() {
        errors.push(format!("{extra}: in docs/slo.md but not in src/metrics.rs"));
    }
    assert!(
        errors.is_empty(),
        "docs/slo.md name table is out of date:\n{}",
        errors.join("\n")
    );
}

#[test]
fn every_attribute_of_the_code_has_its_row_in_the_labels_table() {
    let (_, attributes) = code_names();
    let mut doc = BTreeMap::new();
    for row in doc_table("prometheus-labels") {
        assert!(row.len() >= 2, "docs/slo.md prometheus-labels row: {row:?}");
        doc.insert(code(&row[0]), code(&row[1]));
    }
    let mut errors = Vec::new();
    for a in &attributes {
        match doc.remove(a) {
            Some(label) if label == prometheus_label(a) => {}
            Some(label) => errors.push(format!(
                "{a}: label `{label}` in docs, want `{}`",
                prometheus_label(a)
            )),
            None => errors.push(format!(
                "{a}: no row; add | `{a}` | `{}` |",
                prometheus_label(a)
            )),
        }
    }
    for extra in doc.keys() {
        errors.push(format!(
            "{extra}: in docs/slo.md but not an attribute in src/metrics.rs"
        ));
    }
    assert!(
        errors.is_empty(),
        "docs/slo.md label table is out of date:\n{}",
        errors.join("\n")
    );
}

#[test]
fn rules_and_docs_use_only_names_the_library_exports() {
    let (metrics, attributes) = code_names();
    let mut known: BTreeSet<String> = metrics.iter().flat_map(series_names).collect();
    known.extend(attributes.iter().map(|a| prometheus_label(a)));

    // Recording rules defined by the shipped rule files and the test copies.
    let files = deploy_files();
    assert!(
        files.len() >= 5,
        "deploy/prometheus has only {} files",
        files.len()
    );
    let mut recorded = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines() {
            if let Some(name) = line.trim().strip_prefix("- record:") {
                recorded.insert(name.trim().to_string());
            }
        }
    }
    assert!(
        recorded.contains("fresh_consumer:slo_burn_rate:rate1h"),
        "recorded: {recorded:?}"
    );

    // The guide may also name a histogram by its base name (as the name
    // table does); rules must use its `_bucket`, `_sum` or `_count` series.
    let histograms: BTreeSet<String> = metrics
        .iter()
        .filter(|m| m.kind == Kind::Histogram)
        .map(Metric::prometheus)
        .collect();

    let mut errors = Vec::new();
    let mut used_metrics = BTreeSet::new();
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.display().to_string(), std::fs::read_to_string(f).unwrap()))
        .chain([("docs/slo.md".to_string(), SLO_MD.to_string())])
        .collect();
    for (file, text) in &sources {
        let is_doc = file.ends_with(".md");
        for id in identifiers(text) {
            // A YAML key (`label: value`) ends with the colon.
            let id = id.trim_end_matches(':');
            if id.starts_with("fresh_consumer:") {
                // Whole names, or a prefix completed by a window or a regex
                // (`...:rate` in generate.py, `...:slo_(sli|...)` in a test).
                if !recorded.iter().any(|r| r.starts_with(id)) {
                    errors.push(format!(
                        "{file}: {id} is not a recording rule of deploy/prometheus"
                    ));
                }
            } else if id == "fresh_consumer_" || id == "messaging_" {
                // The prefixes themselves, in prose.
            } else if id.starts_with("fresh_consumer_") || id.starts_with("messaging_") {
                let ok = known.contains(id)
                    || (is_doc && histograms.contains(id))
                    || EMITTED_BY_TEAMS.contains(&id);
                if !ok {
                    errors.push(format!(
                        "{file}: {id} is neither a Prometheus metric nor a label of src/metrics.rs"
                    ));
                }
                used_metrics.insert(id.to_string());
            }
        }
    }
    // The metrics the alerts are built on are really used.
    for m in [
        "fresh_consumer.slo.messages",
        "fresh_consumer.partition.head.age",
        "fresh_consumer.partition.stall.age",
        "fresh_consumer.retention.overrun.messages",
        "fresh_consumer.poll.interval.warnings",
        "fresh_consumer.poll.interval.exceeded.events",
        "fresh_consumer.rebalance.in_progress",
    ] {
        let metric = metrics
            .iter()
            .find(|x| x.otlp == m)
            .unwrap_or_else(|| panic!("src/metrics.rs has no {m}"));
        if !used_metrics.contains(&metric.prometheus()) {
            errors.push(format!("no rule uses {} ({m})", metric.prometheus()));
        }
    }
    errors.sort();
    errors.dedup();
    assert!(
        errors.is_empty(),
        "unknown Prometheus names:\n{}",
        errors.join("\n")
    );
}
