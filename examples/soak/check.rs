//! The soak's checker: reads what was produced and what each consumer
//! process logged, and says what was lost, what was handled twice and why,
//! whether each key's records were handled in order, and how the
//! processes' memory moved.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use super::is_poison;

/// One acknowledged record: its identity (key, sequence number) and where
/// the broker put it.
#[derive(Clone, Debug)]
pub struct Produced {
    pub key: String,
    pub seq: u64,
    pub partition: i32,
    pub offset: i64,
}

/// One success line of a consumer's log.
#[derive(Clone, Debug)]
pub struct Success {
    pub t_ms: i64,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub seq: u64,
    /// Which log (consumer incarnation) it came from.
    pub log: usize,
}

/// How long before its first success a poison record's tier copy may have
/// been written again by a replay: its tier delays, the wait of a lagging
/// partition and a rejoin.
const TIER_REPLAY_MS: i64 = 30_000;

/// A fault the soak injected, or a consumer (re)start: the events after
/// which records may be handled again.
#[derive(Clone, Debug)]
pub struct Event {
    pub t_ms: i64,
    /// How long the fault lasted (a broker outage until it answered again).
    pub until_ms: i64,
    pub what: String,
}

/// What one consumer incarnation's log holds besides its successes.
#[derive(Default, Debug)]
pub struct LogExtras {
    /// (unix ms, kB)
    pub rss: Vec<(i64, u64)>,
    /// The C heap: (unix ms, kB allocated and not freed), see `child.rs`.
    pub heap: Vec<(i64, u64)>,
    /// (unix ms, kB freed and kept by the allocator)
    pub heap_free: Vec<(i64, u64)>,
    /// (unix ms, status)
    pub health: Vec<(i64, String)>,
    /// The rebalances the member saw, as events: from the health report
    /// before its rebalance count rose to the one that shows it.
    pub rebalances: Vec<Event>,
    /// The reasons of its reports: (unix ms, whether the report was
    /// `healthy`, the reasons' text). A healthy report with reasons
    /// carries informational ones (an under-replicated partition).
    pub reasons: Vec<(i64, bool, String)>,
}

/// Reads one consumer log: its successes and extras. A line cut by a
/// SIGKILL (the last one, without its newline) is dropped.
pub fn read_log(path: &Path, index: usize) -> (Vec<Success>, LogExtras) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut ok = Vec::new();
    let mut extras = LogExtras::default();
    let mut last_rebalances: Option<(i64, u64)> = None;
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    for line in complete.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["ok", t, topic, partition, offset, key, seq] => {
                if let (Ok(t_ms), Ok(seq), Ok(partition), Ok(offset)) =
                    (t.parse(), seq.parse(), partition.parse(), offset.parse())
                {
                    ok.push(Success {
                        t_ms,
                        topic: (*topic).to_owned(),
                        partition,
                        offset,
                        key: (*key).to_owned(),
                        seq,
                        log: index,
                    });
                }
            }
            ["rss", t, kb] => {
                if let (Ok(t), Ok(kb)) = (t.parse(), kb.parse()) {
                    extras.rss.push((t, kb));
                }
            }
            ["heap", t, in_use, free] => {
                if let (Ok(t), Ok(in_use), Ok(free)) = (t.parse(), in_use.parse(), free.parse()) {
                    extras.heap.push((t, in_use));
                    extras.heap_free.push((t, free));
                }
            }
            ["health", t, status, rebalances] => {
                if let (Ok(t), Ok(n)) = (t.parse::<i64>(), rebalances.parse::<u64>()) {
                    if let Some(&(t0, n0)) = last_rebalances.as_ref()
                        && n > n0
                    {
                        extras.rebalances.push(Event {
                            t_ms: t0,
                            until_ms: t,
                            what: "rebalance".into(),
                        });
                    }
                    last_rebalances = Some((t, n));
                    extras.health.push((t, (*status).to_owned()));
                }
            }
            [kind @ ("why" | "note"), t, ..] => {
                if let Ok(t) = t.parse() {
                    let text = line.splitn(3, ' ').nth(2).unwrap_or("").to_owned();
                    extras.reasons.push((t, *kind == "note", text));
                }
            }
            _ => {}
        }
    }
    (ok, extras)
}

/// The checker's findings.
#[derive(Debug, Default)]
pub struct Report {
    pub produced: usize,
    pub poison: usize,
    pub handled: usize,
    /// `key #seq (partition@offset)` of each record never handled.
    pub lost: Vec<String>,
    pub duplicates: usize,
    pub duplicates_explained: usize,
    /// Explained duplicates by the fault that explains them (the first
    /// that fits).
    pub explained_by: BTreeMap<String, usize>,
    pub unexplained: Vec<String>,
    pub order_violations: Vec<String>,
    /// Poison records whose success came from a topic other than the
    /// second tier (the tiers were skipped or a success was invented).
    pub poison_not_from_tier_2: usize,
    pub unknown: usize,
}

impl Report {
    /// The failures, one line each; empty when the soak passed.
    pub fn failures(&self, backwards: usize, dead_lettered: i64) -> Vec<String> {
        let mut out = Vec::new();
        if !self.lost.is_empty() {
            let some: Vec<_> = self.lost.iter().take(10).collect();
            out.push(format!("{} records lost, e.g. {some:?}", self.lost.len()));
        }
        if !self.unexplained.is_empty() {
            out.push(format!(
                "{} duplicates not explained by a fault, e.g. {:?}",
                self.unexplained.len(),
                &self.unexplained[..self.unexplained.len().min(5)]
            ));
        }
        if !self.order_violations.is_empty() {
            out.push(format!(
                "{} keys handled out of order, e.g. {:?}",
                self.order_violations.len(),
                &self.order_violations[..self.order_violations.len().min(5)]
            ));
        }
        if self.poison_not_from_tier_2 > 0 {
            out.push(format!(
                "{} poison records succeeded outside the second tier",
                self.poison_not_from_tier_2
            ));
        }
        if self.unknown > 0 {
            out.push(format!(
                "{} successes of records never produced",
                self.unknown
            ));
        }
        if backwards > 0 {
            out.push(format!(
                "a committed offset moved backwards {backwards} times"
            ));
        }
        if dead_lettered != 0 {
            out.push(format!(
                "{dead_lettered} records in the dead-letter topic (every poison record succeeds in the second tier)"
            ));
        }
        out
    }
}

/// The group's committed offsets over the run, as the sampler read them
/// from outside: per partition, (unix ms, offset) at each change.
#[derive(Debug, Default)]
pub struct Commits {
    by_partition: HashMap<(String, i32), Vec<(i64, i64)>>,
}

impl Commits {
    /// A sample of `topic`/`partition` at `t_ms` read `offset`.
    pub fn note(&mut self, topic: &str, partition: i32, t_ms: i64, offset: i64) {
        let list = self
            .by_partition
            .entry((topic.to_owned(), partition))
            .or_default();
        if list.last().is_none_or(|(_, o)| *o != offset) {
            list.push((t_ms, offset));
        }
    }

    /// The committed offset the last sample at or before `t_ms` read;
    /// `None` before any sample read one.
    pub fn at(&self, topic: &str, partition: i32, t_ms: i64) -> Option<i64> {
        let list = self.by_partition.get(&(topic.to_owned(), partition))?;
        let i = list.partition_point(|(t, _)| *t <= t_ms);
        i.checked_sub(1).map(|i| list[i].1)
    }
}

/// Checks the successes against what was produced. A repeated handling of
/// a record is explained when a fault or a rebalance (`events`; a slowed
/// handler or a collector outage explains nothing) began at most `window_ms` after its first
/// handling, or was under way then (plus `window_ms`): the work between
/// the last commit and the fault is what the partition's next owner does
/// again. Each is put down to the nearest such event.
/// `source` is the source topic (order is checked there only: a poison
/// record is handled later, from its tier, by design).
///
/// With transactional outputs (`commits`, the committed offsets sampled
/// from outside) a handling is not an effect: a transaction that could not
/// commit (aborted, or its member lost its partitions) is handled again
/// from the committed offsets, however long it stayed open, and its
/// outputs are checked for exactly once apart ([`check_outputs`]). So a
/// repeat the window does not explain is explained when the group's
/// committed offset had not passed the record when it was handled again
/// (the redelivery of an uncommitted transaction); a repeat of a record
/// already committed past stays unexplained.
pub fn check(
    produced: &[Produced],
    successes: &[Success],
    events: &[Event],
    source: &str,
    window_ms: i64,
    commits: Option<&Commits>,
) -> Report {
    let mut report = Report {
        produced: produced.len(),
        handled: successes.len(),
        ..Report::default()
    };
    let ids: HashSet<(&str, u64)> = produced.iter().map(|p| (p.key.as_str(), p.seq)).collect();
    report.poison = produced.iter().filter(|p| is_poison(&p.key, p.seq)).count();

    // First handling of each record, and the repeats.
    let mut sorted: Vec<&Success> = successes.iter().collect();
    sorted.sort_by_key(|s| s.t_ms);
    let mut first: HashMap<(&str, u64), &Success> = HashMap::new();
    for s in &sorted {
        let id = (s.key.as_str(), s.seq);
        if !ids.contains(&id) {
            report.unknown += 1;
            continue;
        }
        match first.get(&id) {
            None => {
                first.insert(id, s);
            }
            Some(f) => {
                report.duplicates += 1;
                // Two tier records of one poison record: its tier write was
                // repeated by a replay of the stage before, after a fault
                // before the second copy was written.
                let tier_copy = s.topic != source
                    && (&s.topic, s.partition, s.offset) != (&f.topic, f.partition, f.offset);
                let explained = events
                    .iter()
                    .filter(|e| !e.what.contains("slow") && !e.what.contains("collector"))
                    .filter(|e| {
                        if tier_copy {
                            return e.until_ms >= f.t_ms - TIER_REPLAY_MS && e.t_ms <= s.t_ms;
                        }
                        (e.t_ms >= f.t_ms - 1_000 && e.t_ms - f.t_ms <= window_ms)
                            || (f.t_ms >= e.t_ms && f.t_ms <= e.until_ms + window_ms)
                    })
                    .min_by_key(|e| (e.t_ms - f.t_ms).abs());
                if let Some(e) = explained {
                    report.duplicates_explained += 1;
                    let mut why = cause(&e.what);
                    if tier_copy {
                        why.push_str(" (a tier record written twice)");
                    }
                    *report.explained_by.entry(why).or_default() += 1;
                } else if let Some(commits) = commits
                    && commits
                        .at(&s.topic, s.partition, s.t_ms)
                        .is_none_or(|c| c <= s.offset)
                {
                    report.duplicates_explained += 1;
                    *report
                        .explained_by
                        .entry("an uncommitted transaction, handled again".to_owned())
                        .or_default() += 1;
                } else {
                    report.unexplained.push(format!(
                        "{} #{} first at {} (log {}), again at {} (log {})",
                        s.key, s.seq, f.t_ms, f.log, s.t_ms, s.log
                    ));
                }
            }
        }
    }
    for p in produced {
        match first.get(&(p.key.as_str(), p.seq)) {
            None => report.lost.push(format!(
                "{} #{} ({}@{})",
                p.key, p.seq, p.partition, p.offset
            )),
            Some(s) if is_poison(&p.key, p.seq) && s.topic == source => {
                report.poison_not_from_tier_2 += 1
            }
            Some(_) => {}
        }
    }

    // Order: per key, the first handlings of its non-poison records, in
    // time order, carry rising sequence numbers.
    let mut by_key: BTreeMap<&str, Vec<&Success>> = BTreeMap::new();
    for s in first.values() {
        if s.topic == source && !is_poison(&s.key, s.seq) {
            by_key.entry(s.key.as_str()).or_default().push(s);
        }
    }
    for (key, mut list) in by_key {
        list.sort_by_key(|s| (s.t_ms, s.seq));
        if let Some(w) = list.windows(2).find(|w| w[1].seq < w[0].seq) {
            report.order_violations.push(format!(
                "{key}: #{} at {} after #{} at {}",
                w[1].seq, w[1].t_ms, w[0].seq, w[0].t_ms
            ));
        }
    }
    report
}

/// What a `read_committed` reader found in the transactional outputs
/// (`--transactional`), against the successes the consumers logged.
///
/// Each output names its input (`<key> <seq> <topic> <partition>
/// <offset>`): the record at the topic it was consumed from, the source or
/// a tier. Consumed in transactions, each input must have **exactly one**
/// committed output, however often it was handled (a handling whose
/// transaction aborted wrote nothing a `read_committed` reader sees).
/// A produced record has one input per stage it succeeded at: the source
/// for most, the second tier for a poison record; a poison record whose
/// tier copy was written twice (tier writes are at-least-once, outside
/// the transactions) has two inputs and two outputs, counted apart.
#[derive(Debug, Default)]
pub struct OutputReport {
    pub outputs: usize,
    /// Distinct inputs with an output.
    pub inputs: usize,
    /// Distinct inputs in the success logs.
    pub handled_inputs: usize,
    /// Handled inputs without an output.
    pub lost: Vec<String>,
    /// Acknowledged records without any output.
    pub records_without_output: Vec<String>,
    /// Inputs with more than one output.
    pub duplicates: Vec<String>,
    /// Outputs of inputs no consumer logged as handled.
    pub unknown: Vec<String>,
    pub unreadable: usize,
    /// Records with outputs of two tier copies (their tier record written
    /// twice).
    pub tier_copies: usize,
}

impl OutputReport {
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        let some = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>();
        if !self.lost.is_empty() {
            out.push(format!(
                "transactional outputs: {} handled inputs without an output, e.g. {:?}",
                self.lost.len(),
                some(&self.lost)
            ));
        }
        if !self.records_without_output.is_empty() {
            out.push(format!(
                "transactional outputs: {} records without any output, e.g. {:?}",
                self.records_without_output.len(),
                some(&self.records_without_output)
            ));
        }
        if !self.duplicates.is_empty() {
            out.push(format!(
                "transactional outputs: {} inputs with more than one committed output, e.g. {:?}",
                self.duplicates.len(),
                some(&self.duplicates)
            ));
        }
        if !self.unknown.is_empty() {
            out.push(format!(
                "transactional outputs: {} outputs of inputs never logged as handled, e.g. {:?}",
                self.unknown.len(),
                some(&self.unknown)
            ));
        }
        if self.unreadable > 0 {
            out.push(format!(
                "transactional outputs: {} unreadable payloads",
                self.unreadable
            ));
        }
        out
    }
}

/// Checks the committed outputs (their payloads) against the records
/// produced and the successes logged (see [`OutputReport`]).
pub fn check_outputs(
    produced: &[Produced],
    successes: &[Success],
    outputs: &[String],
) -> OutputReport {
    type Input = (String, i32, i64);
    let mut report = OutputReport {
        outputs: outputs.len(),
        ..OutputReport::default()
    };
    let mut per_input: HashMap<Input, (String, u64, usize)> = HashMap::new();
    for o in outputs {
        let f: Vec<&str> = o.split(' ').collect();
        let parsed = match f.as_slice() {
            [key, seq, topic, partition, offset] => {
                match (
                    seq.parse::<u64>(),
                    partition.parse::<i32>(),
                    offset.parse::<i64>(),
                ) {
                    (Ok(seq), Ok(p), Ok(off)) => Some(((*topic).to_owned(), p, off, *key, seq)),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((topic, p, off, key, seq)) = parsed else {
            report.unreadable += 1;
            continue;
        };
        per_input
            .entry((topic, p, off))
            .or_insert_with(|| (key.to_owned(), seq, 0))
            .2 += 1;
    }
    report.inputs = per_input.len();
    let handled: HashMap<Input, (&str, u64)> = successes
        .iter()
        .map(|s| {
            (
                (s.topic.clone(), s.partition, s.offset),
                (s.key.as_str(), s.seq),
            )
        })
        .collect();
    report.handled_inputs = handled.len();
    let name = |(t, p, o): &Input, key: &str, seq: u64| format!("{key} #{seq} ({t}/{p}@{o})");
    for (input, (key, seq)) in &handled {
        if !per_input.contains_key(input) {
            report.lost.push(name(input, key, *seq));
        }
    }
    let mut per_record: HashMap<(&str, u64), usize> = HashMap::new();
    for (input, (key, seq, n)) in &per_input {
        if *n > 1 {
            report
                .duplicates
                .push(format!("{} x{n}", name(input, key, *seq)));
        }
        if !handled.contains_key(input) {
            report.unknown.push(name(input, key, *seq));
        }
        *per_record.entry((key.as_str(), *seq)).or_default() += 1;
    }
    report.tier_copies = per_record.values().filter(|n| **n > 1).count();
    for p in produced {
        if !per_record.contains_key(&(p.key.as_str(), p.seq)) {
            report.records_without_output.push(format!(
                "{} #{} ({}@{})",
                p.key, p.seq, p.partition, p.offset
            ));
        }
    }
    report.lost.sort();
    report.duplicates.sort();
    report.unknown.sort();
    report
}

/// The kind of a fault, without the consumer's number.
fn cause(what: &str) -> String {
    what.split(' ')
        .filter(|w| w.parse::<usize>().is_err())
        .collect::<Vec<_>>()
        .join(" ")
}

/// RSS after warm-up and at the end, of each consumer incarnation that
/// lived at least twice `warmup_ms`: (log index, kB after `warmup_ms`, kB
/// at its end, its age at the end in ms).
///
/// The warm-up is long (the soak uses 120 s) because a member's memory
/// grows in steps at its first rebalances and broker reconnects (new
/// partitions' buffers and instruments, librdkafka's reconnect state) and
/// is flat between them; a leak shows as growth that goes on.
pub fn rss_after_warmup(extras: &[LogExtras], warmup_ms: i64) -> Vec<(usize, u64, u64, i64)> {
    after_warmup(extras, warmup_ms, |e| &e.rss)
}

/// [`rss_after_warmup`] net of the memory the process freed and glibc
/// keeps on its free lists (RSS minus `mallinfo2`'s `fordblks`, sampled
/// together): what a leak grows. RSS itself stays at the allocator's
/// high-water mark after a burst (a catch-up after a broker restart or a
/// rebalance fills librdkafka's prefetch and the batches in flight, which
/// are freed and kept); without heap samples (another C library), RSS.
pub fn net_rss_after_warmup(extras: &[LogExtras], warmup_ms: i64) -> Vec<(usize, u64, u64, i64)> {
    let net: Vec<LogExtras> = extras
        .iter()
        .map(|e| LogExtras {
            // Written one after the other at each sample (a SIGKILL may
            // cut the last pair: `zip` drops it).
            rss: if !e.heap_free.is_empty() {
                e.rss
                    .iter()
                    .zip(&e.heap_free)
                    .map(|(&(t, rss), &(_, free))| (t, rss.saturating_sub(free)))
                    .collect()
            } else {
                e.rss.clone()
            },
            ..LogExtras::default()
        })
        .collect();
    rss_after_warmup(&net, warmup_ms)
}

/// [`rss_after_warmup`] for the C heap in use (allocated and not freed).
pub fn heap_after_warmup(extras: &[LogExtras], warmup_ms: i64) -> Vec<(usize, u64, u64, i64)> {
    after_warmup(extras, warmup_ms, |e| &e.heap)
}

fn after_warmup(
    extras: &[LogExtras],
    warmup_ms: i64,
    series: impl Fn(&LogExtras) -> &Vec<(i64, u64)>,
) -> Vec<(usize, u64, u64, i64)> {
    extras
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let s = series(e);
            // Counted from the incarnation's first sample of any kind.
            let (start, _) = *e.rss.first().or(s.first())?;
            let (end_t, end_kb) = *s.last()?;
            let (_, warm_kb) = *s.iter().find(|(t, _)| *t - start >= warmup_ms)?;
            (end_t - start >= 2 * warmup_ms).then_some((i, warm_kb, end_kb, end_t - start))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(key: &str, seq: u64) -> Produced {
        Produced {
            key: key.into(),
            seq,
            partition: 0,
            offset: seq as i64,
        }
    }

    fn ok(t_ms: i64, key: &str, seq: u64, log: usize) -> Success {
        Success {
            t_ms,
            topic: "src".into(),
            partition: 0,
            offset: seq as i64,
            key: key.into(),
            seq,
            log,
        }
    }

    #[test]
    fn finds_loss_duplicates_and_order() {
        // k-1 #2 is never handled; #1 is handled twice without a fault;
        // #4 before #3.
        let produced: Vec<_> = (0..5)
            .map(|s| p("k-1", s))
            .filter(|p| !is_poison(&p.key, p.seq))
            .collect();
        let done = [
            ok(10, "k-1", 0, 0),
            ok(20, "k-1", 1, 0),
            ok(30, "k-1", 4, 0),
            ok(40, "k-1", 3, 0),
            ok(50_000, "k-1", 1, 1),
        ];
        let r = check(&produced, &done, &[], "src", 1_000, None);
        assert_eq!(r.lost, vec!["k-1 #2 (0@2)".to_owned()]);
        assert_eq!((r.duplicates, r.unexplained.len()), (1, 1));
        assert_eq!(r.order_violations.len(), 1, "{r:?}");
        // A kill right after the first handling explains the repeat.
        let kill = Event {
            t_ms: 500,
            until_ms: 500,
            what: "kill".into(),
        };
        let r = check(&produced, &done, &[kill], "src", 1_000, None);
        assert_eq!((r.duplicates, r.duplicates_explained), (1, 1));
    }

    /// With transactions, a repeat without a fault near it is explained
    /// only while the group had not committed past the record: k-1 #1
    /// (offset 1) is handled again at 50 s; committed 1 then (not past
    /// it): explained; committed 2 then: not.
    #[test]
    fn a_transactional_repeat_is_explained_only_before_a_commit_passed_it() {
        let produced: Vec<_> = (0..2)
            .map(|s| p("k-1", s))
            .filter(|p| !is_poison(&p.key, p.seq))
            .collect();
        let done = [
            ok(10, "k-1", 0, 0),
            ok(20, "k-1", 1, 0),
            ok(50_000, "k-1", 1, 1),
        ];
        let mut commits = Commits::default();
        commits.note("src", 0, 5, 0);
        commits.note("src", 0, 40_000, 1);
        let r = check(&produced, &done, &[], "src", 1_000, Some(&commits));
        assert_eq!((r.duplicates, r.duplicates_explained), (1, 1), "{r:?}");
        commits.note("src", 0, 45_000, 2);
        let r = check(&produced, &done, &[], "src", 1_000, Some(&commits));
        assert_eq!((r.duplicates, r.unexplained.len()), (1, 1), "{r:?}");
    }

    #[test]
    fn a_line_cut_by_a_kill_is_dropped() {
        let dir = std::env::temp_dir().join(format!("soak-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.log");
        std::fs::write(
            &f,
            "ok 1 src 0 0 k-1 0\nrss 2 100\nheap 2 80 15\nhealth 3 healthy 1\nhealth 4 healthy 2\nok 3 src 0 1 k-1 1\nok 4 sr",
        )
        .unwrap();
        let (ok, extras) = read_log(&f, 0);
        assert_eq!(ok.len(), 2);
        assert_eq!(extras.rss, vec![(2, 100)]);
        assert_eq!(extras.heap, vec![(2, 80)]);
        assert_eq!(extras.heap_free, vec![(2, 15)]);
        assert_eq!(extras.rebalances.len(), 1, "the count rose between 3 and 4");
        assert_eq!(
            (extras.rebalances[0].t_ms, extras.rebalances[0].until_ms),
            (3, 4)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The allocator's kept free memory is taken off RSS, sample by
    /// sample; without heap samples RSS is judged as it is.
    #[test]
    fn net_rss_takes_off_the_free_lists() {
        let with_heap = LogExtras {
            rss: vec![(0, 100), (60, 110), (120, 130)],
            heap_free: vec![(0, 0), (60, 10), (120, 28)],
            ..LogExtras::default()
        };
        let without = LogExtras {
            rss: vec![(0, 100), (60, 110), (120, 130)],
            ..LogExtras::default()
        };
        assert_eq!(
            net_rss_after_warmup(&[with_heap, without], 60),
            vec![(0, 100, 102, 120), (1, 110, 130, 120)]
        );
    }
}
