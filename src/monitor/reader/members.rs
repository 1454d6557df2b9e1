//! A watched group's members, state and partition owners as the brokers
//! describe them: the classic listing first (`monitor/classic.rs`), the
//! DescribeConsumerGroups admin call only for KIP-848 groups, and what the
//! reads take from either.

use rdkafka::consumer::Consumer;
use rdkafka::error::RDKafkaErrorCode;

use super::state::{GroupReads, Reader};
use crate::monitor::judge::Observation;
use crate::monitor::report::PartitionOwner;
use crate::monitor::{classic, describe};

impl Reader {
    /// Every group in `groups` as the brokers describe it: its member
    /// count, state and assignor, and the partition each member owns, set
    /// on its observations ([`Observation::owner`]). A classic group from
    /// the group listing (`listing`, the discovery's, or one listing per
    /// group: DescribeGroups, see `classic.rs`); a group the listing calls
    /// `Dead` while it has committed offsets (a KIP-848 group) in one
    /// DescribeConsumerGroups admin request for all of them. A group the
    /// brokers do not know keeps `None`. When the listing fails (a broker
    /// down), the group is described next cycle: the admin request is not
    /// tried then (librdkafka 2.12.1 aborts the process when a connection
    /// drops under it, see `classic.rs`). The admin request refused for
    /// good (the brokers lack the APIs, as librdkafka's mock broker does,
    /// or the client may not describe groups): not asked again.
    pub(super) fn describe_members(
        &mut self,
        groups: &mut [GroupReads],
        listing: Option<&rdkafka::groups::GroupList>,
    ) {
        let timeout = self.settings.request_timeout;
        let mut kip848: Vec<String> = Vec::new();
        for g in groups.iter_mut() {
            let classic = match listing {
                Some(list) => Ok(classic::described(list, &g.group)),
                None => self
                    .uncommitted
                    .fetch_group_list(Some(&g.group), timeout)
                    .map(|list| classic::described(&list, &g.group)),
            };
            match classic {
                Ok(Some(d)) => apply(g, &d),
                Ok(None) if g.observations.iter().any(|o| o.committed.is_some()) => {
                    kip848.push(g.group.clone());
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = %e, group = %g.group, "list group: described next cycle");
                }
            }
        }
        if !self.describe_groups || kip848.is_empty() {
            return;
        }
        // A broker missing from the metadata (stopped, killed, restarting):
        // the admin call's connection to a coordinator may drop under it,
        // which aborts the process in librdkafka 2.12.1 (`classic.rs`).
        // The KIP-848 groups go without members and owners until the
        // cluster is whole again.
        let (most, now) = self.brokers_seen.get();
        if now < most {
            tracing::debug!(
                brokers = now,
                of = most,
                "a broker is missing: KIP-848 groups are not described this cycle"
            );
            return;
        }
        let wanted: Vec<&str> = kip848.iter().map(String::as_str).collect();
        let refused = |code: RDKafkaErrorCode| {
            matches!(
                code,
                RDKafkaErrorCode::UnsupportedFeature
                    | RDKafkaErrorCode::UnsupportedVersion
                    | RDKafkaErrorCode::GroupAuthorizationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
            )
        };
        let described = match describe::describe(
            self.uncommitted.client(),
            &wanted,
            self.settings.request_timeout,
        ) {
            Ok(d) => d,
            Err(code) if refused(code) => {
                tracing::info!(error = %code, "the brokers do not describe groups: the replica suggestion counts from current_replicas");
                self.describe_groups = false;
                return;
            }
            // A timeout or a lost connection: asked again next cycle.
            Err(code) => {
                tracing::debug!(error = %code, "describe groups");
                return;
            }
        };
        for g in groups.iter_mut() {
            match described.get(&g.group) {
                Some(Ok(d)) if !d.state.eq_ignore_ascii_case("dead") => apply(g, d),
                // The mock broker answers each group so.
                Some(Err(code)) if refused(*code) => {
                    tracing::info!(error = %code, group = %g.group, "the brokers do not describe groups: the replica suggestion counts from current_replicas");
                    self.describe_groups = false;
                }
                Some(Err(code)) if *code != RDKafkaErrorCode::GroupIdNotFound => {
                    tracing::debug!(error = %code, group = %g.group, "describe group");
                }
                _ => {}
            }
        }
    }
}

/// Takes what the brokers say of a group: its member count, state and
/// assignor where the listing gave none, and the partition each member
/// owns ([`Observation::owner`]).
fn apply(g: &mut GroupReads, d: &describe::Described) {
    if g.members.is_none() {
        g.members = Some(d.members);
        g.state = Some(d.state.clone());
        g.assignor.clone_from(&d.assignor);
    }
    owners(&mut g.observations, &d.assignments);
    g.assignments_unreadable = unreadable(d, &g.observations);
}

/// A described group that is `Stable` with members and committed offsets,
/// none of whose members has an assignment librdkafka could read: its
/// protocol is not Kafka's consumer protocol. (Between rebalances, or for
/// a group without offsets, empty assignments are ordinary.)
pub(super) fn unreadable(d: &describe::Described, observations: &[Observation]) -> bool {
    d.members > 0
        && d.state.eq_ignore_ascii_case("stable")
        && d.assignments.iter().all(|m| m.partitions.is_empty())
        && observations.iter().any(|o| o.committed.is_some())
}

/// Sets each observation's owner from a described group's members.
pub(super) fn owners(observations: &mut [Observation], members: &[describe::Member]) {
    for m in members {
        for (topic, partition) in &m.partitions {
            if let Some(o) = observations
                .iter_mut()
                .find(|o| o.partition == *partition && &o.topic == topic)
            {
                o.owner = Some(PartitionOwner {
                    member_id: m.member_id.clone(),
                    client_id: m.client_id.clone(),
                    host: m.host.clone(),
                });
            }
        }
    }
}
