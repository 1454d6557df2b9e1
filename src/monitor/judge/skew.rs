//! Skew: the few partitions that carry most of a group's lag, group-wide
//! (by time lag, or by offset lag and production together) and per consumer
//! (from the members' assignments). A partition is read by one consumer,
//! so more replicas do not help it.

use std::collections::BTreeMap;

use super::model::{Judged, Rules, secs};

/// The few partitions (at most a quarter, at least one) that carry at least
/// `share` of the summed time lag, when there are two or more partitions.
pub(super) fn concentrated<'a>(partitions: &[&'a Judged], share: f64) -> Option<Vec<&'a Judged>> {
    if partitions.len() < 2 {
        return None;
    }
    let mut by_lag: Vec<&Judged> = partitions
        .iter()
        .copied()
        .filter(|j| j.row.time_lag.is_some())
        .collect();
    by_lag.sort_by_key(|j| std::cmp::Reverse(j.row.time_lag));
    let total: f64 = by_lag.iter().filter_map(|j| j.row.time_lag).map(secs).sum();
    if total <= 0.0 {
        return None;
    }
    let k = (partitions.len() / 4).max(1);
    let mut top = 0.0;
    for (i, j) in by_lag.iter().enumerate().take(k) {
        top += j.row.time_lag.map(secs).unwrap_or(0.0);
        if top / total >= share {
            return Some(by_lag[..=i].to_vec());
        }
    }
    None
}

/// The few partitions (at most a quarter, at least one) that carry at least
/// `share` of the group's offset lag **and** of its produce rate (of the
/// offset lag alone while nothing is produced), with the text saying so:
/// a hot partition that shares its consumer with others. Its neighbours
/// wait behind it, so their time lags match its own and the time-lag rule
/// ([`concentrated`]) cannot see it; offset lag and production can. More
/// replicas at most move the neighbours off its consumer: the hot
/// partition is still read by one consumer.
pub(super) fn concentrated_load<'a>(
    partitions: &[&'a Judged],
    share: f64,
) -> Option<(Vec<&'a Judged>, String)> {
    if partitions.len() < 2 {
        return None;
    }
    let lag = |j: &Judged| j.row.offset_lag.unwrap_or(0) as f64;
    let total_lag: f64 = partitions.iter().map(|j| lag(j)).sum();
    let total_produced: f64 = partitions.iter().map(|j| j.produce_rate).sum();
    if total_lag <= 0.0 {
        return None;
    }
    let mut by_lag: Vec<&Judged> = partitions.to_vec();
    by_lag.sort_by(|a, b| lag(b).total_cmp(&lag(a)));
    let k = (partitions.len() / 4).max(1);
    let (mut top_lag, mut top_produced) = (0.0, 0.0);
    for (i, j) in by_lag.iter().enumerate().take(k) {
        top_lag += lag(j);
        top_produced += j.produce_rate;
        let lag_share = top_lag / total_lag;
        let produced_share = if total_produced > 0.0 {
            top_produced / total_produced
        } else {
            lag_share
        };
        if lag_share >= share && produced_share >= share {
            let text = if total_produced > 0.0 {
                format!(
                    "{:.0} % of the offset lag and {:.0} % of the produce rate",
                    lag_share * 100.0,
                    produced_share * 100.0
                )
            } else {
                format!("{:.0} % of the offset lag", lag_share * 100.0)
            };
            return Some((by_lag[..=i].to_vec(), text));
        }
    }
    None
}

/// Per consumer, from the members' assignments: the partitions that carry
/// `skew_share` of their owner's offset lag and produce rate (among the
/// two or more partitions it owns, by [`concentrated_load`]) and are
/// themselves behind (time lag at or above the lag threshold), with the
/// text saying so; `None` when no owner has one, or the owners are not
/// known. A consumer with a hot partition is bound by that partition
/// alone: more replicas move its neighbours off it, never the hot one.
/// This sees what the group-wide shares cannot: two hot partitions on two
/// consumers each carry half the group's lag, and all of their own
/// consumer's.
pub(super) fn owner_concentrated<'a>(
    partitions: &[&'a Judged],
    rules: &Rules,
) -> Option<(Vec<&'a Judged>, String)> {
    let mut by_owner: BTreeMap<&str, Vec<&Judged>> = BTreeMap::new();
    for j in partitions {
        if let Some(owner) = &j.row.owner {
            by_owner
                .entry(owner.member_id.as_str())
                .or_default()
                .push(j);
        }
    }
    let mut hot = Vec::new();
    let mut texts = Vec::new();
    for owned in by_owner.values().filter(|o| o.len() >= 2) {
        let Some((found, text)) = concentrated_load(owned, rules.skew_share) else {
            continue;
        };
        let found: Vec<&Judged> = found
            .into_iter()
            .filter(|j| j.row.time_lag.is_some_and(|t| t >= rules.lag_threshold))
            .collect();
        if found.is_empty() {
            continue;
        }
        let names: Vec<String> = found
            .iter()
            .map(|j| format!("{}-{}", j.row.topic, j.row.partition))
            .collect();
        let client = found[0]
            .row
            .owner
            .as_ref()
            .map_or_else(String::new, |o| format!("{} at {}", o.client_id, o.host));
        texts.push(format!(
            "{}: {text} of the {} partitions consumer {client} owns",
            names.join(", "),
            owned.len()
        ));
        hot.extend(found);
    }
    if hot.is_empty() {
        return None;
    }
    Some((
        hot,
        format!("most of their consumer's backlog ({})", texts.join("; ")),
    ))
}
