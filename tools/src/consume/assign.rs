//! The pure half of a consumer group member: the consumer protocol's
//! subscription and assignment bytes (each an int16 version, then the
//! message at that version, as Kafka's `ConsumerProtocol` writes them),
//! Kafka's RangeAssignor, and where a partition starts.
//!
//! Kept free of IO so the rules are table-tested here; [`super::group`]
//! sends what these build.

use std::collections::BTreeMap;

use brook_shards::client::cluster::topic_name;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The assignor Brook's consumer offers (every Kafka consumer knows it).
pub const ASSIGNOR: &str = "range";
/// The subscription version written: v1 (owned partitions, empty) is what
/// every broker and consumer since Kafka 2.4 reads.
const SUBSCRIPTION_VERSION: i16 = 1;
const ASSIGNMENT_VERSION: i16 = 1;
/// Highest consumer protocol version kafka-protocol decodes; newer ones
/// only add fields at the end, so they are read as this one (as Kafka does).
const CONSUMER_PROTOCOL_VERSION_MAX: i16 = 3;

/// Member id → the member's partitions, by topic.
pub type Assignment = BTreeMap<String, BTreeMap<String, Vec<i32>>>;

/// A JoinGroup protocol's metadata: a subscription to `topics`.
pub fn encode_subscription(topics: &[String]) -> Result<Bytes, String> {
    let subscription = ConsumerProtocolSubscription::default().with_topics(
        topics
            .iter()
            .map(|topic| StrBytes::from_string(topic.clone()))
            .collect(),
    );
    versioned(SUBSCRIPTION_VERSION, &subscription)
}

/// The topics of a member's subscription.
pub fn decode_subscription(bytes: &Bytes) -> Result<Vec<String>, String> {
    let subscription: ConsumerProtocolSubscription = unversioned(bytes, "subscription")?;
    Ok(subscription
        .topics
        .iter()
        .map(|topic| topic.to_string())
        .collect())
}

/// A SyncGroup assignment: `partitions` by topic.
pub fn encode_assignment(partitions: &BTreeMap<String, Vec<i32>>) -> Result<Bytes, String> {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        partitions
            .iter()
            .map(|(topic, partitions)| {
                TopicPartition::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(partitions.clone())
            })
            .collect(),
    );
    versioned(ASSIGNMENT_VERSION, &assignment)
}

/// The partitions of `topic` in an assignment (empty bytes: none).
pub fn decode_assignment(bytes: &Bytes, topic: &str) -> Result<Vec<i32>, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let assignment: ConsumerProtocolAssignment = unversioned(bytes, "assignment")?;
    let mut partitions: Vec<i32> = assignment
        .assigned_partitions
        .iter()
        .filter(|assigned| assigned.topic.as_str() == topic)
        .flat_map(|assigned| assigned.partitions.iter().copied())
        .collect();
    partitions.sort_unstable();
    partitions.dedup();
    Ok(partitions)
}

fn versioned<T: Encodable>(version: i16, message: &T) -> Result<Bytes, String> {
    let mut buffer = BytesMut::new();
    buffer.put_i16(version);
    message
        .encode(&mut buffer, version)
        .map_err(|error| format!("encoding the consumer protocol: {error}"))?;
    Ok(buffer.freeze())
}

fn unversioned<T: Decodable>(bytes: &Bytes, what: &str) -> Result<T, String> {
    let mut body = bytes.clone();
    if body.remaining() < 2 {
        return Err(format!(
            "a consumer protocol {what} of {} bytes",
            bytes.len()
        ));
    }
    let version = body.get_i16();
    if version < 0 {
        return Err(format!("a consumer protocol {what} of version {version}"));
    }
    T::decode(&mut body, version.min(CONSUMER_PROTOCOL_VERSION_MAX))
        .map_err(|error| format!("a consumer protocol {what}: {error}"))
}

/// Kafka's RangeAssignor: for each topic, its partitions in order are cut
/// into consecutive ranges, one per subscribed member in member-id order;
/// the first `partitions % members` members get one more. `subscriptions`
/// is member id → topics; `partition_counts` topic → partitions (topics not
/// in it, unknown to the cluster, are assigned to no one). Every member
/// appears in the result, with no partitions if it gets none.
pub fn range_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> Assignment {
    let mut assignment: Assignment = subscriptions
        .keys()
        .map(|member| (member.clone(), BTreeMap::new()))
        .collect();
    for (topic, count) in partition_counts {
        // BTreeMap keys: the members are already in member-id order.
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(member, _)| member)
            .collect();
        if members.is_empty() || *count <= 0 {
            continue;
        }
        let count = *count as usize;
        let each = count / members.len();
        let extra = count % members.len();
        let mut next = 0usize;
        for (index, member) in members.into_iter().enumerate() {
            let size = each + usize::from(index < extra);
            let partitions: Vec<i32> = (next..next + size).map(|p| p as i32).collect();
            next += size;
            if let Some(topics) = assignment.get_mut(member) {
                topics.insert(topic.clone(), partitions);
            }
        }
        debug_assert_eq!(next, count, "every partition of {topic} is assigned once");
    }
    assignment
}

/// Where a partition starts reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    Earliest,
    Latest,
    Offset(i64),
    /// The first record at or after this time (milliseconds since the epoch).
    Timestamp(i64),
}

/// Kafka's auto.offset.reset: where to go with no usable offset (none
/// committed, or out of range).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    Earliest,
    Latest,
}

impl Reset {
    pub fn start(self) -> Start {
        match self {
            Reset::Earliest => Start::Earliest,
            Reset::Latest => Start::Latest,
        }
    }
}

/// A group member's start: its committed offset (OffsetFetch answers -1
/// for none), else the reset.
pub fn start_for_committed(committed: i64, reset: Reset) -> Start {
    if committed >= 0 {
        Start::Offset(committed)
    } else {
        reset.start()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn range_assignment_follows_kafkas_range_assignor() {
        // (members and their topics, partitions per topic, expected per member).
        type Row = (
            Vec<(&'static str, Vec<&'static str>)>,
            Vec<(&'static str, i32)>,
            Vec<(&'static str, Vec<(&'static str, Vec<i32>)>)>,
        );
        let rows: Vec<Row> = vec![
            // Kafka's docs: 2 consumers, 2 topics of 3 partitions each.
            (
                vec![("c0", vec!["t0", "t1"]), ("c1", vec!["t0", "t1"])],
                vec![("t0", 3), ("t1", 3)],
                vec![
                    ("c0", vec![("t0", vec![0, 1]), ("t1", vec![0, 1])]),
                    ("c1", vec![("t0", vec![2]), ("t1", vec![2])]),
                ],
            ),
            // More members than partitions: the last get nothing.
            (
                vec![("a", vec!["t"]), ("b", vec!["t"]), ("c", vec!["t"])],
                vec![("t", 2)],
                vec![
                    ("a", vec![("t", vec![0])]),
                    ("b", vec![("t", vec![1])]),
                    ("c", vec![("t", vec![])]),
                ],
            ),
            // Sorted by member id, not by arrival; 7 over 3 is 3, 2, 2.
            (
                vec![("m-2", vec!["t"]), ("m-1", vec!["t"]), ("m-3", vec!["t"])],
                vec![("t", 7)],
                vec![
                    ("m-1", vec![("t", vec![0, 1, 2])]),
                    ("m-2", vec![("t", vec![3, 4])]),
                    ("m-3", vec![("t", vec![5, 6])]),
                ],
            ),
            // Only subscribers share a topic; unknown topics go to no one.
            (
                vec![("a", vec!["x", "gone"]), ("b", vec!["y"])],
                vec![("x", 2), ("y", 1)],
                vec![("a", vec![("x", vec![0, 1])]), ("b", vec![("y", vec![0])])],
            ),
        ];
        for (members, counts, expected) in rows {
            let subscriptions = members
                .iter()
                .map(|(member, topics)| ((*member).to_owned(), names(topics)))
                .collect();
            let counts = counts
                .iter()
                .map(|(topic, count)| ((*topic).to_owned(), *count))
                .collect();
            let expected: Assignment = expected
                .into_iter()
                .map(|(member, topics)| {
                    let topics = topics
                        .into_iter()
                        .filter(|(_, partitions)| !partitions.is_empty())
                        .map(|(topic, partitions)| (topic.to_owned(), partitions))
                        .collect();
                    (member.to_owned(), topics)
                })
                .collect();
            let mut assigned = range_assign(&subscriptions, &counts);
            for topics in assigned.values_mut() {
                topics.retain(|_, partitions| !partitions.is_empty());
            }
            assert_eq!(assigned, expected, "{members:?}");
        }
    }

    #[test]
    fn subscriptions_and_assignments_round_trip_with_their_version() {
        let bytes = encode_subscription(&names(&["orders", "payments"])).unwrap();
        assert_eq!(&bytes[..2], &SUBSCRIPTION_VERSION.to_be_bytes());
        assert_eq!(decode_subscription(&bytes).unwrap(), ["orders", "payments"]);
        let partitions = BTreeMap::from([
            ("orders".to_owned(), vec![3, 1]),
            ("other".to_owned(), vec![0]),
        ]);
        let bytes = encode_assignment(&partitions).unwrap();
        assert_eq!(decode_assignment(&bytes, "orders").unwrap(), [1, 3]);
        assert_eq!(
            decode_assignment(&bytes, "absent").unwrap(),
            Vec::<i32>::new()
        );
        assert_eq!(
            decode_assignment(&Bytes::new(), "orders").unwrap(),
            Vec::<i32>::new()
        );
    }

    #[test]
    fn newer_and_broken_consumer_protocol_versions() {
        // A v3 subscription (rack id) from a newer client, and a version
        // beyond what is known, read as the highest known.
        let subscription = ConsumerProtocolSubscription::default()
            .with_topics(vec![StrBytes::from_static_str("t")])
            .with_rack_id(Some(StrBytes::from_static_str("rack-a")));
        let v3 = versioned(3, &subscription).unwrap();
        assert_eq!(decode_subscription(&v3).unwrap(), ["t"]);
        let mut v9 = BytesMut::from(&v3[..]);
        v9[..2].copy_from_slice(&9i16.to_be_bytes());
        assert_eq!(decode_subscription(&v9.freeze()).unwrap(), ["t"]);
        assert!(decode_subscription(&Bytes::from_static(&[0])).is_err());
        assert!(decode_subscription(&Bytes::from_static(&[0, 0, 0])).is_err());
        assert!(decode_assignment(&Bytes::from_static(&[0xff, 0xff]), "t").is_err());
    }

    #[test]
    fn a_committed_offset_wins_over_the_reset() {
        assert_eq!(start_for_committed(42, Reset::Latest), Start::Offset(42));
        assert_eq!(start_for_committed(0, Reset::Latest), Start::Offset(0));
        assert_eq!(start_for_committed(-1, Reset::Latest), Start::Latest);
        assert_eq!(start_for_committed(-1, Reset::Earliest), Start::Earliest);
    }
}
