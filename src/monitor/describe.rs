//! The members (and the partitions each owns) and state of consumer groups
//! as the brokers describe them, through librdkafka's DescribeConsumerGroups
//! admin call (for the groups the classic listing calls `Dead`: KIP-848
//! groups; classic groups are described by `classic.rs`, away from a
//! librdkafka abort in this call, see there): it asks
//! ConsumerGroupDescribe (KIP-848, for groups of `group.protocol=consumer`,
//! classic members of an upgraded group included) and falls back to
//! DescribeGroups for classic groups, so both kinds are described. The
//! classic ListGroups/DescribeGroups pair that `BaseConsumer::fetch_group_list`
//! uses calls a KIP-848 group `Dead` and gives it no members.
//!
//! rust-rdkafka 0.39 has no safe binding for the call; this file is the only
//! place that reaches librdkafka's admin API directly.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::Client;
use rdkafka::error::RDKafkaErrorCode;

/// One group as the brokers describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Described {
    /// Its members, classic and KIP-848 alike.
    pub(crate) members: u32,
    /// Its state as librdkafka names it: `Stable`, `PreparingRebalance`,
    /// `CompletingRebalance`, `Empty`, `Dead`, or `Unknown` (librdkafka 2.12
    /// has no names for KIP-848's `Assigning` and `Reconciling`).
    pub(crate) state: String,
    /// Its partition assignor, if the brokers name one.
    pub(crate) assignor: Option<String>,
    /// Its members and the partitions each owns (librdkafka decodes a
    /// classic member's assignment with the consumer protocol, and reads a
    /// KIP-848 member's from ConsumerGroupDescribe).
    pub(crate) assignments: Vec<Member>,
}

/// One member of a described group and its assigned partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) host: String,
    /// `(topic, partition)`; empty when it owns none, or when its
    /// assignment could not be decoded (a classic group whose protocol is
    /// not the consumer protocol).
    pub(crate) partitions: Vec<(String, i32)>,
}

/// A C string owned by librdkafka, copied; empty for a null pointer.
///
/// # Safety
/// `ptr` is null or a live NUL-terminated string.
unsafe fn text(ptr: *const c_char) -> String {
    if ptr.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned()
    }
}

/// The members of `desc` and their assignments.
///
/// # Safety
/// `desc` is a live group description of a live result event.
unsafe fn members(desc: *const rd::rd_kafka_ConsumerGroupDescription_t) -> Vec<Member> {
    // SAFETY: the caller's contract; every pointer read belongs to `desc`.
    unsafe {
        let count = rd::rd_kafka_ConsumerGroupDescription_member_count(desc);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let m = rd::rd_kafka_ConsumerGroupDescription_member(desc, i);
            if m.is_null() {
                continue;
            }
            let mut partitions = Vec::new();
            let assignment = rd::rd_kafka_MemberDescription_assignment(m);
            let list = if assignment.is_null() {
                std::ptr::null()
            } else {
                rd::rd_kafka_MemberAssignment_partitions(assignment)
            };
            if !list.is_null() {
                let list = &*list;
                for j in 0..usize::try_from(list.cnt).unwrap_or(0) {
                    let tp = &*list.elems.add(j);
                    partitions.push((text(tp.topic), tp.partition));
                }
            }
            out.push(Member {
                member_id: text(rd::rd_kafka_MemberDescription_consumer_id(m)),
                client_id: text(rd::rd_kafka_MemberDescription_client_id(m)),
                host: text(rd::rd_kafka_MemberDescription_host(m)),
                partitions,
            });
        }
        out
    }
}

/// Describes `groups` in one request and waits up to `timeout` (plus a
/// second for the reply to reach this thread). Per group: its description,
/// or the error code the brokers gave for it (`GroupIdNotFound` for a group
/// they do not know). Err: the request as a whole failed (a timeout, no
/// coordinator, a broker without the APIs).
pub(crate) fn describe<C: rdkafka::ClientContext>(
    client: &Client<C>,
    groups: &[&str],
    timeout: Duration,
) -> Result<HashMap<String, Result<Described, RDKafkaErrorCode>>, RDKafkaErrorCode> {
    if groups.is_empty() {
        return Ok(HashMap::new());
    }
    let names: Vec<CString> = groups
        .iter()
        .map(|g| CString::new(*g).map_err(|_| RDKafkaErrorCode::InvalidArgument))
        .collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let rk = client.native_ptr();
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `rk` is a live client for the whole call (borrowed from
    // `client`); the queue, options and event are created and destroyed
    // here; librdkafka copies the group names before
    // `rd_kafka_DescribeConsumerGroups` returns; the result's strings are
    // copied out before the event is destroyed.
    unsafe {
        let queue = rd::rd_kafka_queue_new(rk);
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        );
        let mut errstr = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        rd::rd_kafka_DescribeConsumerGroups(rk, ptrs.as_mut_ptr(), ptrs.len(), options, queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        let event = rd::rd_kafka_queue_poll(queue, timeout_ms.saturating_add(1000));
        let out = if event.is_null() {
            Err(RDKafkaErrorCode::OperationTimedOut)
        } else {
            let read = read_result(event);
            rd::rd_kafka_event_destroy(event);
            read
        };
        rd::rd_kafka_queue_destroy(queue);
        out
    }
}

/// The groups of a DescribeConsumerGroups result event.
///
/// # Safety
/// `event` is a live event polled from the call's queue.
unsafe fn read_result(
    event: *mut rd::rd_kafka_event_t,
) -> Result<HashMap<String, Result<Described, RDKafkaErrorCode>>, RDKafkaErrorCode> {
    // SAFETY: the caller's contract; every pointer read below belongs to
    // `event` and is only read while it lives.
    unsafe {
        let err = rd::rd_kafka_event_error(event);
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(err.into());
        }
        let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event);
        if result.is_null() {
            return Err(RDKafkaErrorCode::Fail);
        }
        let mut count = 0usize;
        let list = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
        let mut out = HashMap::with_capacity(count);
        for i in 0..count {
            let desc = *list.add(i);
            let id = CStr::from_ptr(rd::rd_kafka_ConsumerGroupDescription_group_id(desc))
                .to_string_lossy()
                .into_owned();
            let error = rd::rd_kafka_ConsumerGroupDescription_error(desc);
            let entry = if error.is_null() {
                let state = rd::rd_kafka_consumer_group_state_name(
                    rd::rd_kafka_ConsumerGroupDescription_state(desc),
                );
                let state = if state.is_null() {
                    "Unknown".to_owned()
                } else {
                    CStr::from_ptr(state).to_string_lossy().into_owned()
                };
                let members = rd::rd_kafka_ConsumerGroupDescription_member_count(desc);
                let assignor = rd::rd_kafka_ConsumerGroupDescription_partition_assignor(desc);
                let assignor = (!assignor.is_null())
                    .then(|| CStr::from_ptr(assignor).to_string_lossy().into_owned())
                    .filter(|a| !a.is_empty());
                Ok(Described {
                    members: u32::try_from(members).unwrap_or(u32::MAX),
                    state,
                    assignor,
                    assignments: self::members(desc),
                })
            } else {
                Err(rd::rd_kafka_error_code(error).into())
            };
            out.insert(id, entry);
        }
        Ok(out)
    }
}
