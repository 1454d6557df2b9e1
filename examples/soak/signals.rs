//! Did the signals tell the truth? Each fault against what the in-process
//! health (every member's report, every second) and the group monitor
//! (from outside, every `watch::INTERVAL`) said about it: the time from the
//! fault to its first signal and from the fault's end back to quiet, and
//! the alarms raised while no fault was under way.
//!
//! The signal each fault must raise within two evaluation windows of its
//! start (the soak's `--window-ms`, which is the members' `stall_after`,
//! `no_success_after` and `lag_growth_window` and the monitor's
//! `stall_after` and lag threshold):
//!
//! | fault | in process | from outside |
//! |---|---|---|
//! | a member SIGKILLed (dead member) | a rebalance seen by a member, or a report other than `healthy` | a member count other than the group's, or a diagnosis other than `keeping_up`/`idle` |
//! | the broker killed | a report other than `healthy` | a failed cycle or such a diagnosis |
//! | a slow handler | a report other than `healthy` | such a diagnosis |
//!
//! A graceful restart, a switch of `group.protocol` and the collector
//! outage are reported, not required: a member leaving on purpose is no
//! alarm, and the health does not judge the telemetry pipeline. Nor is the
//! monitor's signal required for a member replaced before the group could
//! show it from outside: the brokers list a dead member until its
//! session times out, and a replacement that joins within a monitor cycle
//! of that keeps the member count, while the partitions catch up under the
//! lag threshold (`Rules::dead_visible_ms`).
//!
//! On three nodes a node killed (`kill -9` of a partition's leader) or
//! restarted in a rolling restart is reported, not required: two of three
//! nodes keep every partition writable (`min.insync.replicas=2`) and the
//! group's coordinator moves, so the truthful signal is none or a short
//! one. For each such node the report gives what the members' health
//! (reports other than `healthy`, and `healthy` ones noting an
//! under-replicated partition) and the monitor (readings other than
//! quiet) showed from the node's stop to one window after its partitions
//! were in sync again, and for how long. A rolling restart that the
//! monitor reads as an outage (a failed cycle or `dead`) or the members
//! as no broker reachable, while no other fault was under way, is a false
//! outage and fails the run; any other alarm is printed.
//!
//! A slow handler shows in process through the lag-growth rule, which
//! needs a whole `lag_growth_window` of samples of the same assignment: a
//! rebalance (another fault's member leaving or joining) gives the member
//! new partitions and starts their samples again. Its two windows count
//! from the last rebalance before its signal, and it is required only when
//! a whole window of slow handling fits after that rebalance.

use super::check::{Event, LogExtras};
use super::watch::Reading;

/// What kind of fault an event is, from its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    DeadMember,
    BrokerDown,
    SlowHandler,
    /// A SIGTERM restart or a `group.protocol` switch.
    GracefulLeave,
    Collector,
    /// Three nodes: one node killed (`kill -9`) and started again.
    NodeDown,
    /// Three nodes: one node's restart in a rolling restart.
    NodeRestart,
}

impl Kind {
    /// `None` for what is not a fault (a consumer started, the collector
    /// started again).
    pub fn of(what: &str) -> Option<Kind> {
        if what.ends_with("started") || what.ends_with("started again") {
            None
        } else if what.starts_with("node ") {
            Some(if what.contains("rolling") {
                Kind::NodeRestart
            } else {
                Kind::NodeDown
            })
        } else if what.contains("SIGKILL") {
            Some(Kind::DeadMember)
        } else if what.contains("broker") {
            Some(Kind::BrokerDown)
        } else if what.contains("slow") {
            Some(Kind::SlowHandler)
        } else if what.contains("SIGTERM") || what.contains("group.protocol") {
            Some(Kind::GracefulLeave)
        } else if what.contains("collector") {
            Some(Kind::Collector)
        } else {
            None
        }
    }

    /// Whether the fault must show within two windows.
    pub fn required(self) -> bool {
        matches!(
            self,
            Kind::DeadMember | Kind::BrokerDown | Kind::SlowHandler
        )
    }
}

/// One fault and what the two sides said about it (ms after its start;
/// `back` in ms after its end: the last loud report or reading before the
/// settle time ran out or the next fault began).
#[derive(Clone, Debug)]
pub struct FaultSignals {
    pub what: String,
    pub kind: Kind,
    pub in_process: Option<i64>,
    pub in_process_back: Option<i64>,
    pub monitor: Option<(i64, String)>,
    pub monitor_back: Option<i64>,
    /// Where the in-process clock started (ms after the fault's start):
    /// 0, or the last rebalance before a slow handler's signal.
    pub clock_from: i64,
    /// Whether the members had to see it.
    pub in_process_required: bool,
    /// A dead member's time down (to its replacement's start).
    pub down_ms: Option<i64>,
    /// Whether the monitor had to see it.
    pub monitor_required: bool,
}

/// The judgement over the run.
#[derive(Clone, Debug, Default)]
pub struct Judgement {
    pub faults: Vec<FaultSignals>,
    /// Non-healthy in-process reports outside every fault, of all reports.
    pub in_process_alarms: (usize, usize),
    /// Monitor readings that were not quiet outside every fault, of all.
    pub monitor_alarms: (usize, usize),
    /// What the signals showed during each node fault on three nodes.
    pub nodes: Vec<NodeSignals>,
}

/// Signals of one kind within a node fault's time: how many, the first
/// and the last (ms after the fault's start), and what they said.
#[derive(Clone, Debug, Default)]
pub struct Span {
    pub count: usize,
    pub first: i64,
    pub last: i64,
    pub said: Vec<String>,
}

impl Span {
    fn of(t0: i64, items: impl Iterator<Item = (i64, String)>) -> Option<Span> {
        let mut span: Option<Span> = None;
        for (t, said) in items {
            let s = span.get_or_insert(Span {
                first: t - t0,
                last: t - t0,
                ..Span::default()
            });
            s.count += 1;
            s.first = s.first.min(t - t0);
            s.last = s.last.max(t - t0);
            if !s.said.contains(&said) {
                s.said.push(said);
            }
        }
        span
    }
}

/// What the signals showed while a node of three was down or restarting,
/// and one window after every partition was in sync again.
#[derive(Clone, Debug)]
pub struct NodeSignals {
    pub what: String,
    pub t_ms: i64,
    pub until_ms: i64,
    pub kind: Kind,
    /// From its stop (or kill) to every partition in sync again.
    pub lasted_ms: i64,
    /// Member reports other than `healthy` (statuses).
    pub in_process: Option<Span>,
    /// `healthy` reports noting an under-replicated partition.
    pub under_replicated: Option<Span>,
    /// Member reports saying no broker is reachable.
    pub unreachable: Option<Span>,
    /// Monitor readings other than quiet.
    pub monitor: Option<Span>,
    /// Monitor readings naming under-replicated partitions (the most in
    /// one reading is in `said`).
    pub monitor_under_replicated: Option<Span>,
    /// Other faults under way meanwhile.
    pub overlaps: Vec<String>,
}

impl NodeSignals {
    /// A graceful node restart read as an outage while nothing else was
    /// under way: failed monitor cycles, a `dead` group, or members that
    /// reached no broker, with two nodes of three up.
    pub fn false_outage(&self) -> Option<String> {
        if self.kind != Kind::NodeRestart || !self.overlaps.is_empty() {
            return None;
        }
        let outage: Vec<&String> = self
            .monitor
            .iter()
            .flat_map(|m| m.said.iter())
            .filter(|r| r.starts_with("error:") || r.as_str() == "dead")
            .collect();
        match (&self.unreachable, outage.is_empty()) {
            (None, true) => None,
            (u, _) => Some(format!(
                "{}: read as an outage with two nodes of three up (monitor {outage:?}, {} member reports of no broker reachable)",
                self.what,
                u.as_ref().map_or(0, |u| u.count)
            )),
        }
    }
}

/// The options of [`judge`].
pub struct Rules {
    /// How long after a fault's end its effects may last.
    pub settle_ms: i64,
    /// The group's member count when every consumer runs.
    pub members: u32,
    /// Readings after this (the drain, the consumers' stop) are not
    /// judged.
    pub end_ms: i64,
    /// A dead member down at least this long must show from outside: the
    /// session timeout plus two monitor cycles.
    pub dead_visible_ms: i64,
    /// The evaluation window (`lag_growth_window` and the rest).
    pub window_ms: i64,
}

/// The consumer slot an event names (`consumer 2 SIGKILLed`).
fn slot_of(what: &str) -> Option<&str> {
    what.strip_prefix("consumer ")?.split(' ').next()
}

fn quiet_reading(r: &Reading, members: u32) -> bool {
    (r.1 == "keeping_up" || r.1 == "idle") && r.2.is_none_or(|m| m == members)
}

fn in_window(t: i64, faults: &[Event], settle_ms: i64) -> bool {
    faults
        .iter()
        .any(|e| t >= e.t_ms && t <= e.until_ms + settle_ms)
}

/// Judges `faults` (every event the soak noted, starts included, which
/// count as fault windows for the alarms) against the members' logs and
/// the monitor's readings.
pub fn judge(
    faults: &[Event],
    extras: &[LogExtras],
    readings: &[Reading],
    rules: &Rules,
) -> Judgement {
    let health: Vec<(i64, &str)> = extras
        .iter()
        .flat_map(|e| e.health.iter().map(|(t, s)| (*t, s.as_str())))
        .filter(|(t, _)| *t <= rules.end_ms)
        .collect();
    let rebalances: Vec<i64> = extras
        .iter()
        .flat_map(|e| e.rebalances.iter().map(|r| r.until_ms))
        .collect();
    let readings: Vec<&Reading> = readings.iter().filter(|r| r.0 <= rules.end_ms).collect();
    let mut out = Judgement::default();
    let mut sorted: Vec<(&Event, Kind)> = faults
        .iter()
        .filter_map(|e| Some((e, Kind::of(&e.what)?)))
        .collect();
    sorted.sort_by_key(|(e, _)| e.t_ms);
    for (i, &(e, kind)) in sorted.iter().enumerate() {
        let unhealthy = health
            .iter()
            .filter(|(t, s)| *t >= e.t_ms && *s != "healthy")
            .map(|(t, _)| *t);
        let first = match kind {
            Kind::DeadMember | Kind::GracefulLeave => unhealthy
                .chain(rebalances.iter().copied().filter(|t| *t >= e.t_ms))
                .min(),
            _ => unhealthy.min(),
        };
        // A slow handler's clock starts again at each rebalance before its
        // signal (or before the clock's deadline, when there is none).
        let mut start = e.t_ms;
        if kind == Kind::SlowHandler {
            loop {
                let cutoff = first.unwrap_or(i64::MAX).min(start + 2 * rules.window_ms);
                match rebalances
                    .iter()
                    .copied()
                    .filter(|r| *r > start && *r < cutoff)
                    .max()
                {
                    Some(r) => start = r,
                    None => break,
                }
            }
        }
        let in_process_required =
            kind.required() && (kind != Kind::SlowHandler || e.until_ms - start >= rules.window_ms);
        let loud = |r: &&&Reading| match kind {
            Kind::BrokerDown => !quiet_reading(r, rules.members),
            Kind::DeadMember | Kind::GracefulLeave => !quiet_reading(r, rules.members),
            // A slow handler shows in the diagnosis, not the membership.
            _ => !(r.1 == "keeping_up" || r.1 == "idle"),
        };
        let monitor = readings
            .iter()
            .find(|r| r.0 >= e.t_ms && loud(r))
            .map(|r| (r.0 - e.t_ms, r.1.clone()));
        // Back to quiet: the last loud report before the settle time ran
        // out or the next fault began, whichever came first.
        let next = sorted.get(i + 1).map_or(i64::MAX, |(n, _)| n.t_ms);
        let end = (e.until_ms + rules.settle_ms).min(next.max(e.until_ms));
        let in_process_back = health
            .iter()
            .filter(|(t, s)| *t >= e.t_ms && *t <= end && *s != "healthy")
            .map(|(t, _)| (*t - e.until_ms).max(0))
            .max();
        let monitor_back = readings
            .iter()
            .filter(|r| r.0 >= e.t_ms && r.0 <= end && loud(r))
            .map(|r| (r.0 - e.until_ms).max(0))
            .max();
        let down_ms = (kind == Kind::DeadMember)
            .then(|| {
                let slot = slot_of(&e.what)?;
                let restarted = format!("consumer {slot} started");
                faults
                    .iter()
                    .filter(|r| r.t_ms >= e.t_ms && r.what == restarted)
                    .map(|r| r.t_ms - e.t_ms)
                    .min()
            })
            .flatten();
        let monitor_required = kind.required()
            && (kind != Kind::DeadMember || down_ms.is_none_or(|d| d >= rules.dead_visible_ms));
        out.faults.push(FaultSignals {
            what: e.what.clone(),
            kind,
            down_ms,
            monitor_required,
            clock_from: start - e.t_ms,
            in_process_required,
            in_process: first.map(|t| t - e.t_ms),
            in_process_back,
            monitor,
            monitor_back,
        });
    }
    for &(e, kind) in sorted
        .iter()
        .filter(|(_, k)| matches!(k, Kind::NodeDown | Kind::NodeRestart))
    {
        let (from, to) = (e.t_ms, e.until_ms + rules.window_ms);
        let within = |t: i64| t >= from && t <= to;
        let reasons = || {
            extras
                .iter()
                .flat_map(|x| x.reasons.iter())
                .filter(|(t, _, _)| within(*t))
        };
        let overlaps = sorted
            .iter()
            .filter(|(o, _)| !std::ptr::eq(*o, e))
            .filter(|(o, _)| o.t_ms <= to && o.until_ms + rules.settle_ms >= from)
            .map(|(o, _)| o.what.clone())
            .collect();
        out.nodes.push(NodeSignals {
            what: e.what.clone(),
            kind,
            lasted_ms: e.until_ms - e.t_ms,
            in_process: Span::of(
                e.t_ms,
                health
                    .iter()
                    .filter(|(t, s)| within(*t) && *s != "healthy")
                    .map(|(t, s)| (*t, (*s).to_owned())),
            ),
            under_replicated: Span::of(
                e.t_ms,
                reasons()
                    .filter(|(_, _, r)| r.contains("under-replicated"))
                    .map(|(t, _, _)| (*t, "under-replicated".to_owned())),
            ),
            unreachable: Span::of(
                e.t_ms,
                reasons()
                    .filter(|(_, _, r)| r.contains("no broker reachable"))
                    .map(|(t, _, _)| (*t, "no broker reachable".to_owned())),
            ),
            monitor: Span::of(
                e.t_ms,
                readings
                    .iter()
                    .filter(|r| within(r.0) && !quiet_reading(r, rules.members))
                    .map(|r| match r.2 {
                        Some(m) if m != rules.members => (r.0, format!("{} ({m} members)", r.1)),
                        _ => (r.0, r.1.clone()),
                    }),
            ),
            overlaps,
            monitor_under_replicated: None,
            t_ms: e.t_ms,
            until_ms: e.until_ms,
        });
    }
    out.in_process_alarms = (
        health
            .iter()
            .filter(|(t, s)| *s != "healthy" && !in_window(*t, faults, rules.settle_ms))
            .count(),
        health.len(),
    );
    out.monitor_alarms = (
        readings
            .iter()
            .filter(|r| {
                !quiet_reading(r, rules.members) && !in_window(r.0, faults, rules.settle_ms)
            })
            .count(),
        readings.len(),
    );
    out
}

impl Judgement {
    /// Adds to each node fault the monitor's readings that named
    /// under-replicated partitions ((unix ms, count) per reading).
    pub fn add_monitor_under_replicated(&mut self, under: &[(i64, usize)], window_ms: i64) {
        for n in &mut self.nodes {
            let seen: Vec<(i64, usize)> = under
                .iter()
                .copied()
                .filter(|(t, u)| *u > 0 && *t >= n.t_ms && *t <= n.until_ms + window_ms)
                .collect();
            let most = seen.iter().map(|(_, u)| *u).max().unwrap_or(0);
            n.monitor_under_replicated = Span::of(
                n.t_ms,
                seen.iter()
                    .map(|(t, _)| (*t, format!("up to {most} partitions"))),
            );
        }
    }

    /// What failed: a required fault without its signal within two
    /// windows, and any alarm outside the faults.
    pub fn failures(&self, window_ms: i64) -> Vec<String> {
        let mut f = Vec::new();
        let limit = 2 * window_ms;
        for s in self.faults.iter().filter(|s| s.kind.required()) {
            if s.in_process_required && s.in_process.is_none_or(|t| t - s.clock_from > limit) {
                let after = match s.clock_from {
                    0 => String::new(),
                    c => format!(" of the rebalance {:.1} s in", c as f64 / 1000.0),
                };
                f.push(format!(
                    "{}: no in-process signal within {} s{after}",
                    s.what,
                    limit / 1000
                ));
            }
            if s.monitor_required && s.monitor.as_ref().is_none_or(|(t, _)| *t > limit) {
                f.push(format!(
                    "{}: the monitor saw nothing within {} s",
                    s.what,
                    limit / 1000
                ));
            }
        }
        f.extend(self.nodes.iter().filter_map(NodeSignals::false_outage));
        if self.in_process_alarms.0 > 0 {
            f.push(format!(
                "{} in-process health reports other than healthy outside the faults",
                self.in_process_alarms.0
            ));
        }
        if self.monitor_alarms.0 > 0 {
            f.push(format!(
                "{} monitor readings other than quiet outside the faults",
                self.monitor_alarms.0
            ));
        }
        f
    }

    /// The node faults' lines (three nodes).
    pub fn print_nodes(&self, window_ms: i64) {
        if self.nodes.is_empty() {
            return;
        }
        let secs = |ms: i64| ms as f64 / 1000.0;
        let span = |s: &Option<Span>, quiet: &str| match s {
            None => quiet.to_owned(),
            Some(s) => format!(
                "{} {} from {:.1} s to {:.1} s",
                s.said.join("/"),
                s.count,
                secs(s.first),
                secs(s.last)
            ),
        };
        println!(
            "  node faults (signals from the node's stop to {} s after every partition was in sync again; times after the stop):",
            window_ms / 1000
        );
        for n in &self.nodes {
            let overlaps = if n.overlaps.is_empty() {
                String::new()
            } else {
                format!(" [meanwhile: {}]", n.overlaps.join(", "))
            };
            let alarm = match (&n.in_process, &n.monitor) {
                (None, None) => "no alarm".to_owned(),
                _ => "ALARM".to_owned(),
            };
            println!(
                "    {} ({:.1} s to full ISR): {alarm}; in process {} (healthy reports noting under-replication: {}; no broker reachable: {}); monitor {} (under-replicated: {}){overlaps}",
                n.what,
                secs(n.lasted_ms),
                span(&n.in_process, "healthy throughout"),
                span(&n.under_replicated, "none"),
                span(&n.unreachable, "none"),
                span(&n.monitor, "quiet throughout"),
                span(&n.monitor_under_replicated, "none"),
            );
        }
    }

    /// The report's lines.
    pub fn print(&self, settle_ms: i64) {
        let secs = |ms: i64| ms as f64 / 1000.0;
        println!(
            "  in-process health: {} reports, {} not healthy outside the faults (a fault's start to {} s after its end)",
            self.in_process_alarms.1,
            self.in_process_alarms.0,
            settle_ms / 1000
        );
        println!(
            "  group monitor: {} cycles, {} not quiet outside the faults",
            self.monitor_alarms.1, self.monitor_alarms.0
        );
        println!(
            "  signals (time from the fault to its first signal; from its end back to quiet):"
        );
        for s in &self.faults {
            let inp = match (s.in_process, s.in_process_back) {
                (Some(t), Some(b)) => format!("{:.1} s, back {:.1} s", secs(t), secs(b)),
                (Some(t), None) => format!(
                    "{:.1} s (a rebalance, or in the next fault's time)",
                    secs(t)
                ),
                _ => "none".to_owned(),
            };
            let mon = match (&s.monitor, s.monitor_back) {
                (Some((t, r)), Some(b)) => format!("{r} {:.1} s, back {:.1} s", secs(*t), secs(b)),
                (Some((t, r)), None) => format!("{r} {:.1} s (in the next fault's time)", secs(*t)),
                _ => "none".to_owned(),
            };
            let down = s
                .down_ms
                .map(|d| format!(" (down {:.1} s)", secs(d)))
                .unwrap_or_default();
            let required = match (s.kind.required(), s.in_process_required, s.monitor_required) {
                (false, _, _) => " (not required)",
                (true, false, _) => " (in process not required: rebalanced too late to show)",
                (true, true, false) => " (monitor not required: replaced too soon to show)",
                (true, true, true) => "",
            };
            let required = match s.clock_from {
                0 => required.to_owned(),
                c => format!(
                    "{required} (in-process clock from the rebalance {:.1} s in)",
                    secs(c)
                ),
            };
            println!(
                "    {}{down}{required}: in process {inp}; monitor {mon}",
                s.what
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: i64, until: i64, what: &str) -> Event {
        Event {
            t_ms: t,
            until_ms: until,
            what: what.into(),
        }
    }

    fn member(health: &[(i64, &str)], rebalanced_at: &[i64]) -> LogExtras {
        LogExtras {
            health: health.iter().map(|(t, s)| (*t, (*s).to_owned())).collect(),
            rebalances: rebalanced_at
                .iter()
                .map(|t| ev(t - 1_000, *t, "rebalance"))
                .collect(),
            ..LogExtras::default()
        }
    }

    fn rules() -> Rules {
        Rules {
            settle_ms: 30_000,
            members: 3,
            end_ms: 1_000_000,
            dead_visible_ms: 10_000,
            window_ms: 10_000,
        }
    }

    #[test]
    fn a_kill_seen_on_both_sides_in_time_passes() {
        let faults = [ev(100_000, 100_000, "consumer 1 SIGKILLed")];
        let extras = [member(
            &[(99_000, "healthy"), (108_000, "healthy")],
            &[108_000],
        )];
        let readings = [
            (98_000, "keeping_up".to_owned(), Some(3)),
            (106_000, "keeping_up".to_owned(), Some(3)),
            (108_000, "keeping_up".to_owned(), Some(2)),
            (150_000, "keeping_up".to_owned(), Some(3)),
        ];
        let j = judge(&faults, &extras, &readings, &rules());
        assert_eq!(j.faults[0].in_process, Some(8_000));
        assert_eq!(j.faults[0].monitor, Some((8_000, "keeping_up".into())));
        assert!(j.failures(10_000).is_empty(), "{:?}", j.failures(10_000));
    }

    #[test]
    fn a_slow_handler_nobody_saw_fails_and_alarms_outside_count() {
        let faults = [ev(100_000, 130_000, "consumer 2 slow (1 s per record)")];
        // The member reports it only 37 s in; the monitor never; a
        // degraded report long after the fault is a false alarm.
        let extras = [member(&[(137_000, "degraded"), (300_000, "degraded")], &[])];
        let readings = [
            (110_000, "keeping_up".to_owned(), Some(3)),
            (400_000, "skewed".to_owned(), Some(3)),
        ];
        let j = judge(&faults, &extras, &readings, &rules());
        let f = j.failures(10_000);
        assert_eq!(f.len(), 4, "{f:?}");
        assert_eq!(j.in_process_alarms, (1, 2));
        assert_eq!(j.monitor_alarms, (1, 2));
    }

    #[test]
    fn a_rebalance_starts_a_slow_handlers_clock_again() {
        let faults = [ev(100_000, 130_000, "consumer 1 slow (1 s per record)")];
        let readings = [(110_000, "consumer_bound".to_owned(), Some(3))];
        // Degraded 22 s in, after a rebalance 8 s in: within 20 s of it.
        let rebalanced = [member(&[(122_000, "degraded")], &[108_000])];
        let j = judge(&faults, &rebalanced, &readings, &rules());
        assert_eq!(j.faults[0].clock_from, 8_000);
        assert!(j.failures(10_000).is_empty(), "{:?}", j.failures(10_000));
        // Without the rebalance, 22 s is too late.
        let late = [member(&[(122_000, "degraded")], &[])];
        let j = judge(&faults, &late, &readings, &rules());
        assert_eq!(
            j.failures(10_000),
            vec!["consumer 1 slow (1 s per record): no in-process signal within 20 s".to_owned()]
        );
        // Rebalances 15 s and 25 s in leave less than a window of the
        // fault: not required, and no failure without a signal.
        let too_late = [member(&[], &[115_000, 125_000])];
        let j = judge(&faults, &too_late, &readings, &rules());
        assert!(!j.faults[0].in_process_required);
        assert!(j.failures(10_000).is_empty(), "{:?}", j.failures(10_000));
    }

    #[test]
    fn a_member_replaced_within_its_session_need_not_show_outside() {
        let faults = [
            ev(100_000, 100_000, "consumer 1 SIGKILLed"),
            ev(106_000, 106_000, "consumer 1 started"),
            ev(200_000, 200_000, "consumer 2 SIGKILLed"),
            ev(215_000, 215_000, "consumer 2 started"),
        ];
        let extras = [member(&[], &[107_000, 207_000])];
        let readings = [
            (104_000, "keeping_up".to_owned(), Some(3)),
            (108_000, "keeping_up".to_owned(), Some(3)),
            (208_000, "keeping_up".to_owned(), Some(3)),
        ];
        let j = judge(&faults, &extras, &readings, &rules());
        assert_eq!(j.faults[0].down_ms, Some(6_000));
        assert!(!j.faults[0].monitor_required);
        assert!(j.faults[1].monitor_required);
        assert_eq!(
            j.failures(10_000),
            vec!["consumer 2 SIGKILLed: the monitor saw nothing within 20 s".to_owned()]
        );
    }

    #[test]
    fn graceful_leaves_and_the_collector_are_not_required() {
        let faults = [
            ev(0, 0, "consumer 0 SIGTERM (graceful restart)"),
            ev(1, 60_001, "collector stopped for 60s"),
            ev(70_000, 70_000, "consumer 0 started"),
        ];
        let j = judge(&faults, &[], &[], &rules());
        assert_eq!(j.faults.len(), 2);
        assert!(j.failures(10_000).is_empty());
    }
}
