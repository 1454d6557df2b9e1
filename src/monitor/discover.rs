//! Group discovery: which of the groups the brokers list the monitor
//! watches besides the named ones. The listing itself (ListGroups) is in
//! `reader.rs`; here are the rules, without I/O.
//!
//! A listed group is a candidate when the filter accepts its name and it is
//! neither named nor the probe's own group; a candidate is watched in a
//! cycle when it has a committed offset on at least one watched partition
//! (decided by the reader after its OffsetFetch). Candidates are listed
//! again every cycle: a new group is picked up in the cycle after it first
//! commits, one that is gone (deleted, or its offsets expired) is dropped.

use std::fmt;
use std::sync::Arc;

use crate::monitor::error::MonitorError;

/// The group id the probe assigns partitions under (it never joins or
/// commits): `fresh-consumer-monitor-probe`.
pub const PROBE_GROUP_ID: &str = "fresh-consumer-monitor-probe";

/// Which listed group names to consider: `true` to consider the group.
pub(crate) type GroupFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Discovery settings: the filter and the cap on watched groups.
#[derive(Clone)]
pub(crate) struct Discovery {
    pub(crate) filter: GroupFilter,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

/// The candidates among the `listed` group names, sorted and without
/// duplicates: accepted by the filter, not `named` (watched anyway), not the
/// monitor's probe group.
///
/// # Errors
/// [`MonitorError::TooMany`] when the candidates and the named groups
/// together exceed `max_groups`: each one costs an offset client and an
/// OffsetFetch per cycle, so the monitor refuses rather than watching an
/// arbitrary subset.
pub(crate) fn candidates<I>(
    listed: I,
    named: &[String],
    discovery: &Discovery,
    max_groups: usize,
) -> Result<Vec<String>, MonitorError>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut out: Vec<String> = listed
        .into_iter()
        .filter_map(|g| {
            let g = g.as_ref();
            (g != PROBE_GROUP_ID
                && !g.is_empty()
                && !named.iter().any(|n| n == g)
                && (discovery.filter)(g))
            .then(|| g.to_owned())
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    let count = out.len() + named.len();
    if count > max_groups {
        return Err(MonitorError::TooMany {
            what: "groups",
            count,
            max: max_groups,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Discovery {
        Discovery {
            filter: Arc::new(f),
        }
    }

    #[test]
    fn candidates_are_filtered_sorted_and_exclude_named_and_probe() {
        let d = discovery(|g| !g.starts_with("tmp-"));
        let got = candidates(
            [
                "zeta",
                "alpha",
                "tmp-1",
                "billing",
                PROBE_GROUP_ID,
                "alpha",
                "",
            ],
            &["billing".to_owned()],
            &d,
            10,
        )
        .unwrap();
        assert_eq!(got, ["alpha", "zeta"]);
    }

    #[test]
    fn above_the_cap_is_a_typed_error_naming_the_counts() {
        let d = discovery(|_| true);
        let listed: Vec<String> = (0..5).map(|i| format!("g{i}")).collect();
        let err = candidates(&listed, &["named".to_owned()], &d, 5).unwrap_err();
        assert!(
            matches!(
                err,
                MonitorError::TooMany {
                    what: "groups",
                    count: 6,
                    max: 5
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "6 groups to watch, above the cap of 5");
        assert_eq!(err.kind(), "too_many");
        assert_eq!(candidates(&listed, &[], &d, 5).unwrap().len(), 5);
    }

    #[test]
    fn a_filter_that_matches_nothing_gives_no_candidates() {
        let d = discovery(|_| false);
        assert!(candidates(["a", "b"], &[], &d, 1).unwrap().is_empty());
    }
}
