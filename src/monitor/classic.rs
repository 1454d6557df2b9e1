//! A classic consumer group as librdkafka's group listing describes it
//! (`BaseConsumer::fetch_group_list` with the group's name: DescribeGroups
//! sent to the brokers directly), and its members' assignments decoded
//! from the consumer protocol's `ConsumerProtocolAssignment`.
//!
//! Why not librdkafka's DescribeConsumerGroups admin call for every group
//! (`describe.rs`): in librdkafka 2.12.1 a coordinator-targeted admin
//! request whose connection drops aborts the whole process
//! (`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'`,
//! confluentinc/librdkafka#4605; seen in two of three rolling-restart
//! soak runs, issue 46). The listing does not go through that path, so
//! classic groups, the common case, are described without it; only a
//! group the listing calls `Dead` while it has committed offsets (a
//! KIP-848 group) is left to the admin call.

use super::describe::{Described, Member};

/// `group` as the listing describes it; `None` when it does not list it,
/// or calls it `Dead` (a KIP-848 group, or one that does not exist).
pub(crate) fn described(list: &rdkafka::groups::GroupList, group: &str) -> Option<Described> {
    let g = list.groups().iter().find(|g| g.name() == group)?;
    if g.state().is_empty() || g.state().eq_ignore_ascii_case("dead") {
        return None;
    }
    let consumer = g.protocol_type() == "consumer";
    // A consumer group's protocol is its assignor's name (`range`, ...).
    let assignor = (consumer && !g.protocol().is_empty()).then(|| g.protocol().to_owned());
    let assignments = g
        .members()
        .iter()
        .map(|m| Member {
            member_id: m.id().to_owned(),
            client_id: m.client_id().to_owned(),
            host: m.client_host().to_owned(),
            partitions: m
                .assignment()
                .filter(|_| consumer)
                .and_then(assignment)
                .unwrap_or_default(),
        })
        .collect::<Vec<_>>();
    Some(Described {
        members: u32::try_from(assignments.len()).unwrap_or(u32::MAX),
        state: g.state().to_owned(),
        assignor,
        assignments,
    })
}

/// The partitions of a consumer protocol assignment (Kafka's
/// `ConsumerProtocolAssignment`, versions 0 to 3: an `int16` version, an
/// `int32`-counted array of topics, each an `int16`-length string and an
/// `int32`-counted array of `int32` partitions, then user data, ignored).
/// `None` when the bytes are not one (truncated, a negative count, a
/// topic name that is not UTF-8).
pub(crate) fn assignment(bytes: &[u8]) -> Option<Vec<(String, i32)>> {
    let mut r = Reader(bytes);
    let _version = r.i16()?;
    let topics = r.count()?;
    let mut out = Vec::new();
    for _ in 0..topics {
        let len = usize::try_from(r.i16()?).ok()?;
        let topic = std::str::from_utf8(r.take(len)?).ok()?.to_owned();
        let partitions = r.count()?;
        for _ in 0..partitions {
            out.push((topic.clone(), r.i32()?));
        }
    }
    Some(out)
}

/// Big-endian reads off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    /// An array's element count; a null array (-1) counts 0.
    fn count(&mut self) -> Option<usize> {
        match self.i32()? {
            -1 => Some(0),
            n => usize::try_from(n).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::assignment;

    /// Kafka's encoding of an assignment of `orders` 0 and 2 and `refunds`
    /// 1, with user data.
    fn encoded() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(1i16.to_be_bytes());
        b.extend(2i32.to_be_bytes());
        for (topic, parts) in [("orders", &[0i32, 2][..]), ("refunds", &[1i32][..])] {
            b.extend((topic.len() as i16).to_be_bytes());
            b.extend(topic.as_bytes());
            b.extend((parts.len() as i32).to_be_bytes());
            for p in parts {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend(3i32.to_be_bytes());
        b.extend(b"abc");
        b
    }

    #[test]
    fn a_consumer_protocol_assignment_is_decoded() {
        assert_eq!(
            assignment(&encoded()),
            Some(vec![
                ("orders".to_owned(), 0),
                ("orders".to_owned(), 2),
                ("refunds".to_owned(), 1)
            ])
        );
    }

    #[test]
    fn bytes_that_are_not_one_are_refused_not_guessed() {
        let full = encoded();
        // Cut inside the partitions of the second topic.
        assert_eq!(assignment(&full[..full.len() - 12]), None);
        assert_eq!(assignment(&[0, 1]), None);
        let mut negative = full.clone();
        negative[2..6].copy_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(assignment(&negative), None);
        let mut not_utf8 = full;
        not_utf8[8] = 0xff;
        assert_eq!(assignment(&not_utf8), None);
        // No topics at all (an empty assignment) is one.
        let mut empty = Vec::new();
        empty.extend(0i16.to_be_bytes());
        empty.extend(0i32.to_be_bytes());
        assert_eq!(assignment(&empty), Some(vec![]));
    }
}
