//! The report as people and programs read it: a line per group, a table
//! per group's partitions, and one JSON object.

use std::time::Duration;

use fresh_consumer::monitor::{GroupReport, HeadTimestamp, LagStatus, MonitorReport, Scaling};

/// The line `--serve` prints when the watched groups change: how many, and
/// which appeared (`+`) and disappeared (`-`).
pub fn watching(before: &[String], now: &[String]) -> String {
    let added: Vec<String> = now
        .iter()
        .filter(|g| !before.contains(g))
        .map(|g| format!("+{g}"))
        .collect();
    let dropped: Vec<String> = before
        .iter()
        .filter(|g| !now.contains(g))
        .map(|g| format!("-{g}"))
        .collect();
    format!(
        "watching {} group(s): {}",
        now.len(),
        added
            .iter()
            .chain(&dropped)
            .cloned()
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn dur(d: Option<Duration>) -> String {
    let Some(d) = d else { return "-".into() };
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

pub fn scaling(s: &Scaling) -> String {
    match s {
        Scaling::NotNeeded => "no scaling needed".into(),
        Scaling::Suggest {
            throughput_factor,
            current,
            replicas,
            capped,
            ..
        } => match (current, replicas) {
            (Some(now), Some(n)) => format!(
                "suggest {n} replicas, now {now} (x{throughput_factor:.2} throughput{})",
                if *capped {
                    ", capped at the partition count"
                } else {
                    ""
                }
            ),
            _ => format!(
                "needs x{throughput_factor:.2} throughput (the brokers do not describe the group's members: give --replicas for a replica count)"
            ),
        },
        Scaling::Withheld { reason } => format!("no replica suggestion: {reason}"),
    }
}

/// One line per group: diagnosis, members, lag, time lag, drain time and
/// the replica suggestion.
pub fn summary_line(g: &GroupReport) -> String {
    let named: Vec<String> = g
        .named
        .iter()
        .map(|tp| format!("{}-{}", tp.topic, tp.partition))
        .collect();
    format!(
        "group {}: {}{} | members {} | lag {} | max time lag {} | drain {} | {}",
        g.group,
        g.diagnosis.as_str(),
        if named.is_empty() {
            String::new()
        } else {
            format!(" ({})", named.join(", "))
        },
        opt(g.members),
        g.total_lag,
        dur(g.max_time_lag),
        dur(g.drain_time),
        scaling(&g.scaling)
    )
}

/// Every group's line and its partitions' table.
pub fn table(r: &MonitorReport) -> String {
    let mut out = String::new();
    for g in &r.groups {
        out.push_str(&summary_line(g));
        out.push('\n');
        if g.timestamps_missing + g.timestamps_future > 0 {
            out.push_str(&format!(
                "  records at committed offsets without a timestamp: {}, with a future timestamp: {}\n",
                g.timestamps_missing, g.timestamps_future
            ));
        }
        for p in &g.partitions {
            if let Some(r) = p.replication.filter(|r| r.is_under_replicated()) {
                out.push_str(&format!(
                    "  under-replicated: {}-{}: {}\n",
                    p.topic,
                    p.partition,
                    if r.in_sync < r.replicas {
                        format!("{} of {} replicas in sync", r.in_sync, r.replicas)
                    } else {
                        format!("a single replica on a cluster of {} brokers", r.brokers)
                    }
                ));
            }
        }
        out.push_str(&format!(
            "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:<15} {:>9} {:>8} {:>10}  {}\n",
            "partition",
            "committed",
            "log start",
            "high wm",
            "LSO",
            "lag",
            "time lag",
            "ts",
            "unchanged",
            "margin",
            "margin eta",
            "status"
        ));
        for p in &g.partitions {
            let status = match p.status {
                LagStatus::OutOfRange { deleted } => {
                    format!("OUT OF RANGE: {deleted} records deleted unread")
                }
                s => s.as_str().to_owned(),
            };
            out.push_str(&format!(
                "  {:<28} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9} {:<15} {:>9} {:>8} {:>10}  {}\n",
                format!("{}-{}", p.topic, p.partition),
                opt(p.committed),
                p.log_start,
                p.high_watermark,
                p.last_stable,
                opt(p.offset_lag),
                dur(p.time_lag),
                p.timestamp.as_str(),
                dur(p.commit_unchanged_for),
                opt(p.retention_margin),
                dur(p.retention_eta),
                status
            ));
        }
    }
    out.push_str(&format!(
        "cycle took {:?}, {} records read\n",
        r.cycle_duration, r.records_read
    ));
    out
}

fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jn<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

fn jd(d: Option<Duration>) -> String {
    d.map_or_else(|| "null".into(), |d| format!("{:.3}", d.as_secs_f64()))
}

/// The report as one JSON object; durations in seconds, offsets as numbers,
/// unknown values `null`.
pub fn json(r: &MonitorReport) -> String {
    let taken = r
        .taken_at
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let groups: Vec<String> = r
        .groups
        .iter()
        .map(|g| {
            let parts: Vec<String> = g
                .partitions
                .iter()
                .map(|p| {
                    let (ts_ms, deleted) = (
                        match p.timestamp {
                            HeadTimestamp::CreateTime(ms)
                            | HeadTimestamp::LogAppendTime(ms)
                            | HeadTimestamp::Future(ms) => Some(ms),
                            _ => None,
                        },
                        match p.status {
                            LagStatus::OutOfRange { deleted } => {
                                Some(deleted)
                            }
                            _ => None,
                        },
                    );
                    format!(
                        "{{\"topic\":{},\"partition\":{},\"committed\":{},\"log_start\":{},\"high_watermark\":{},\"last_stable\":{},\"offset_lag\":{},\"time_lag_s\":{},\"timestamp_type\":{},\"timestamp_ms\":{},\"commit_unchanged_s\":{},\"waiting_s\":{},\"log_end_moved\":{},\"transaction_open_s\":{},\"retention_margin\":{},\"retention_eta_s\":{},\"status\":{},\"deleted_unread\":{},\"owner\":{},\"replicas\":{},\"in_sync_replicas\":{},\"brokers\":{},\"under_replicated\":{}}}",
                        js(&p.topic),
                        p.partition,
                        jn(p.committed),
                        p.log_start,
                        p.high_watermark,
                        p.last_stable,
                        jn(p.offset_lag),
                        jd(p.time_lag),
                        js(p.timestamp.as_str()),
                        jn(ts_ms),
                        jd(p.commit_unchanged_for),
                        jd(p.waiting_for),
                        p.log_end_moved,
                        jd(p.transaction_open_for),
                        jn(p.retention_margin),
                        jd(p.retention_eta),
                        js(p.status.as_str()),
                        jn(deleted),
                        p.owner.as_ref().map_or_else(
                            || "null".to_owned(),
                            |o| format!(
                                "{{\"member_id\":{},\"client_id\":{},\"host\":{}}}",
                                js(&o.member_id),
                                js(&o.client_id),
                                js(&o.host)
                            )
                        ),
                        jn(p.replication.map(|r| r.replicas)),
                        jn(p.replication.map(|r| r.in_sync)),
                        jn(p.replication.map(|r| r.brokers)),
                        jn(p.replication.map(|r| r.is_under_replicated()))
                    )
                })
                .collect();
            let named: Vec<String> = g
                .named
                .iter()
                .map(|tp| format!("{{\"topic\":{},\"partition\":{}}}", js(&tp.topic), tp.partition))
                .collect();
            let (current, replicas, factor, withheld) = match &g.scaling {
                Scaling::Suggest {
                    current,
                    replicas,
                    throughput_factor,
                    ..
                } => (
                    jn(*current),
                    jn(*replicas),
                    format!("{throughput_factor:.3}"),
                    "null".into(),
                ),
                Scaling::Withheld { reason } => {
                    ("null".into(), "null".into(), "null".into(), js(reason))
                }
                Scaling::NotNeeded => ("null".into(), "null".into(), "null".into(), "null".into()),
            };
            format!(
                "{{\"group\":{},\"diagnosis\":{},\"named\":[{}],\"members\":{},\"total_lag\":{},\"max_time_lag_s\":{},\"commit_rate\":{:.3},\"produce_rate\":{:.3},\"drain_time_s\":{},\"current_replicas\":{},\"replicas_suggested\":{},\"throughput_factor\":{},\"suggestion_withheld\":{},\"timestamps_missing\":{},\"timestamps_future\":{},\"assignments_unreadable\":{},\"partitions\":[{}]}}",
                js(&g.group),
                js(g.diagnosis.as_str()),
                named.join(","),
                jn(g.members),
                g.total_lag,
                jd(g.max_time_lag),
                g.commit_rate,
                g.produce_rate,
                jd(g.drain_time),
                current,
                replicas,
                factor,
                withheld,
                g.timestamps_missing,
                g.timestamps_future,
                g.assignments_unreadable,
                parts.join(",")
            )
        })
        .collect();
    format!(
        "{{\"taken_at_ms\":{},\"cycle_duration_s\":{:.6},\"records_read\":{},\"groups\":[{}]}}",
        taken,
        r.cycle_duration.as_secs_f64(),
        r.records_read,
        groups.join(",")
    )
}
