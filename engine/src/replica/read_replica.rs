//! Which replica answers a fetch, and where a consumer should read (KIP-392,
//! SPEC Q7): Kafka's rules as pure functions.
//!
//! - **Who may answer** ([`fetch_access`]; Kafka's
//!   `ReplicaManager.getPartitionOrException`, then `Partition.getLocalLog`
//!   with `FetchParams.fetchOnlyLeader`): a broker that is no replica of the
//!   partition answers NOT_LEADER_OR_FOLLOWER. A replica first checks the
//!   client's `current_leader_epoch` against its own (KIP-320:
//!   FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer). A
//!   follower's fetch, and a consumer's fetch before v11 (Kafka builds the
//!   client metadata from v11 on, whether `rack_id` is empty or not), then
//!   need the leader. A consumer's fetch v11+ is served by any replica,
//!   whether `replica.selector.class` is set or not: a client only goes to
//!   a follower it was sent to.
//! - **Where a consumer should read** ([`preferred_read_replica`]; Kafka's
//!   `ReplicaManager.findPreferredReadReplica` and `RackAwareReplicaSelector`):
//!   only a leader chooses, only with a selector, only for a consumer whose
//!   fetch names a rack. The candidates are the leader and the followers in
//!   the ISR whose log covers the fetch offset (log start ≤ offset ≤ log
//!   end, as the leader last saw them) and whose endpoint the client can use
//!   (registered, unfenced, with a listener of the name the request came in
//!   on). The leader stays if it is in the client's rack or no candidate is;
//!   otherwise the most caught-up candidate of that rack: the largest log
//!   end, then the most recently caught up, then the largest broker id
//!   (Kafka's `ReplicaView.comparator`). Another broker than the leader goes
//!   back to the client as `preferred_read_replica`, with no records.
//! - **How far a follower serves**: as a leader, up to its own high
//!   watermark (read_committed: its own last stable offset). A follower's
//!   HW is the leader's from the last fetch answer as far as its own log
//!   counts ([`super::replication::PartitionReplication::leader_high_watermark_is`]),
//!   so it trails the leader's by one fetch; its LSO comes from the producer
//!   state and transaction markers it appends as the leader wrote them, as
//!   Kafka's followers keep theirs. A fetch offset below the log start or
//!   past the log end is OFFSET_OUT_OF_RANGE (the consumer goes back to the
//!   leader: Kafka's `FetchCollector` clears the preferred replica, librdkafka
//!   delegates to the leader); between the HW and the log end there is
//!   nothing yet (Kafka's `LocalLog.read`). Kafka's Fetch never answers
//!   OFFSET_NOT_AVAILABLE: KIP-392's drafts proposed it for a replica whose
//!   HW is not known yet, the implementation returns no records instead
//!   (of Kafka's broker, only ListOffsets, which stays leader-only, answers
//!   it).

use std::cmp::Reverse;

use crate::protocol::errors::ErrorCode;
use crate::replica::replication::Role;
use crate::types::{BrokerId, LeaderEpoch, Offset};

/// `replica.selector.class`'s one value Brook has (Kafka's only selector).
pub const RACK_AWARE_REPLICA_SELECTOR: &str =
    "org.apache.kafka.common.replica.RackAwareReplicaSelector";

/// `replica.selector.class`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// Not set (Kafka's default): the leader never sends a consumer
    /// elsewhere.
    #[default]
    LeaderOnly,
    /// Kafka's `RackAwareReplicaSelector`.
    RackAware,
}

impl ReplicaSelector {
    /// The selector a class name names; `None` for a class Brook does not
    /// have (Kafka fails to start when it cannot instantiate the class).
    /// Surrounding blanks are ignored, as Kafka trims its settings.
    pub fn from_class_name(name: &str) -> Option<ReplicaSelector> {
        (name.trim() == RACK_AWARE_REPLICA_SELECTOR).then_some(ReplicaSelector::RackAware)
    }

    /// The class name, `None` when not set.
    pub fn class_name(self) -> Option<&'static str> {
        match self {
            ReplicaSelector::LeaderOnly => None,
            ReplicaSelector::RackAware => Some(RACK_AWARE_REPLICA_SELECTOR),
        }
    }
}

/// Who sent a fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetcher {
    /// A follower's replica fetch (replica id ≥ 0).
    Follower,
    /// A consumer (replica id -1): `client_metadata` from Fetch v11 on.
    Consumer { client_metadata: bool },
}

/// The leader-epoch check of Fetch and ListOffsets (KIP-320): the
/// client's `current_leader_epoch` (negative: not sent) against the one
/// the partition is served at.
pub fn leader_epoch_error(current_leader_epoch: i32, served: LeaderEpoch) -> Option<ErrorCode> {
    match current_leader_epoch {
        epoch if epoch < 0 || epoch == served.0 => None,
        epoch if epoch < served.0 => Some(ErrorCode::FENCED_LEADER_EPOCH),
        _ => Some(ErrorCode::UNKNOWN_LEADER_EPOCH),
    }
}

/// Whether this broker, `role` for the partition at `leader_epoch`, may
/// answer a fetch from `fetcher` (see the module documentation).
pub fn fetch_access(
    role: Role,
    fetcher: Fetcher,
    current_leader_epoch: i32,
    leader_epoch: LeaderEpoch,
) -> Result<(), ErrorCode> {
    if role == Role::Outsider {
        return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    }
    if let Some(error) = leader_epoch_error(current_leader_epoch, leader_epoch) {
        return Err(error);
    }
    let leader_only = match fetcher {
        Fetcher::Follower => true,
        Fetcher::Consumer { client_metadata } => !client_metadata,
    };
    if leader_only && role != Role::Leader {
        return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    }
    Ok(())
}

/// A consumer's fetch of one partition, as the leader's choice needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerRead<'a> {
    /// The fetch's `rack_id` (the consumer's `client.rack`).
    pub client_rack: &'a str,
    pub fetch_offset: Offset,
    pub now_ms: u64,
}

/// A replica's place as the client would reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaPlace<'a> {
    pub broker: BrokerId,
    /// Registered, unfenced, with an endpoint on the client's listener
    /// (Kafka's `getPartitionReplicaEndpoints`).
    pub reachable: bool,
    /// Its `broker.rack`.
    pub rack: Option<&'a str>,
}

impl ReplicaPlace<'_> {
    fn in_rack(&self, rack: &str) -> bool {
        self.reachable && self.rack == Some(rack)
    }
}

/// A follower as its leader last saw it (Kafka's `Replica.stateSnapshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerView<'a> {
    pub place: ReplicaPlace<'a>,
    pub in_isr: bool,
    /// Where it fetched from last (its log end as the leader knows it);
    /// `None` until it fetched from this leader.
    pub log_end_offset: Option<Offset>,
    /// Its log start as its last fetch said; `None` until one did.
    pub log_start_offset: Option<Offset>,
    pub last_caught_up_ms: u64,
}

impl FollowerView<'_> {
    /// Holds the fetch offset (Kafka: unknown offsets are -1, so an unknown
    /// log end never covers it and an unknown log start always does).
    fn covers(&self, fetch_offset: Offset) -> bool {
        self.log_end_offset.is_some_and(|end| end >= fetch_offset)
            && self
                .log_start_offset
                .is_none_or(|start| start <= fetch_offset)
    }
}

/// The replica `read` should go to instead of this leader, `leader`, with
/// `followers` (see the module documentation); `None`: read here.
pub fn preferred_read_replica(
    selector: ReplicaSelector,
    read: &ConsumerRead<'_>,
    leader: &ReplicaPlace<'_>,
    followers: &[FollowerView<'_>],
) -> Option<BrokerId> {
    if selector == ReplicaSelector::LeaderOnly || read.client_rack.is_empty() {
        return None;
    }
    if leader.in_rack(read.client_rack) {
        return None;
    }
    let chosen = followers
        .iter()
        .filter(|follower| follower.place.broker != leader.broker)
        .filter(|follower| follower.in_isr && follower.covers(read.fetch_offset))
        .filter(|follower| follower.place.in_rack(read.client_rack))
        .max_by_key(|follower| {
            let since_caught_up_ms = read.now_ms.saturating_sub(follower.last_caught_up_ms);
            (
                follower.log_end_offset,
                Reverse(since_caught_up_ms),
                follower.place.broker,
            )
        })?;
    debug_assert!(chosen.place.reachable && chosen.in_isr);
    Some(chosen.place.broker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kafkas_rack_aware_selector_is_a_selector() {
        let rows = [
            (
                RACK_AWARE_REPLICA_SELECTOR,
                Some(ReplicaSelector::RackAware),
            ),
            (
                " org.apache.kafka.common.replica.RackAwareReplicaSelector ",
                Some(ReplicaSelector::RackAware),
            ),
            ("org.example.ClosestReplicaSelector", None),
            ("RackAwareReplicaSelector", None),
            ("", None),
        ];
        for (name, selector) in rows {
            assert_eq!(ReplicaSelector::from_class_name(name), selector, "{name:?}");
        }
        assert_eq!(ReplicaSelector::default(), ReplicaSelector::LeaderOnly);
        assert_eq!(ReplicaSelector::LeaderOnly.class_name(), None);
        assert_eq!(
            ReplicaSelector::RackAware.class_name(),
            Some(RACK_AWARE_REPLICA_SELECTOR)
        );
    }

    #[test]
    fn who_may_answer_a_fetch() {
        use ErrorCode as E;
        let old = Fetcher::Consumer {
            client_metadata: false,
        };
        let new = Fetcher::Consumer {
            client_metadata: true,
        };
        let follower = Fetcher::Follower;
        // (role, fetcher, current leader epoch, served epoch 5 → answer)
        let rows = [
            (Role::Leader, old, -1, Ok(())),
            (Role::Leader, new, 5, Ok(())),
            (Role::Leader, follower, 5, Ok(())),
            (Role::Leader, new, 4, Err(E::FENCED_LEADER_EPOCH)),
            (Role::Leader, new, 6, Err(E::UNKNOWN_LEADER_EPOCH)),
            // Since KIP-392 a follower serves consumers that send client
            // metadata (v11+), selector or not.
            (Role::Follower, new, -1, Ok(())),
            (Role::Follower, new, 5, Ok(())),
            (Role::Follower, old, -1, Err(E::NOT_LEADER_OR_FOLLOWER)),
            (Role::Follower, follower, 5, Err(E::NOT_LEADER_OR_FOLLOWER)),
            // The epoch is checked before leadership, as Kafka's getLocalLog.
            (Role::Follower, new, 4, Err(E::FENCED_LEADER_EPOCH)),
            (Role::Follower, new, 6, Err(E::UNKNOWN_LEADER_EPOCH)),
            (Role::Follower, old, 4, Err(E::FENCED_LEADER_EPOCH)),
            (Role::Follower, follower, 6, Err(E::UNKNOWN_LEADER_EPOCH)),
            // No replica here: whatever the epoch.
            (Role::Outsider, new, 5, Err(E::NOT_LEADER_OR_FOLLOWER)),
            (Role::Outsider, new, 9, Err(E::NOT_LEADER_OR_FOLLOWER)),
        ];
        for (role, fetcher, epoch, answer) in rows {
            assert_eq!(
                fetch_access(role, fetcher, epoch, LeaderEpoch(5)),
                answer,
                "{role:?} {fetcher:?} at epoch {epoch}"
            );
        }
    }

    const LEADER: ReplicaPlace<'static> = ReplicaPlace {
        broker: BrokerId(0),
        reachable: true,
        rack: Some("rack-0"),
    };

    /// A caught-up ISR member of `rack`, last caught up at 1000 ms, log
    /// from 0 to 100.
    fn follower(broker: i32, rack: &str) -> FollowerView<'_> {
        FollowerView {
            place: ReplicaPlace {
                broker: BrokerId(broker),
                reachable: true,
                rack: Some(rack),
            },
            in_isr: true,
            log_end_offset: Some(Offset(100)),
            log_start_offset: Some(Offset(0)),
            last_caught_up_ms: 1_000,
        }
    }

    fn read(rack: &str, fetch_offset: i64) -> ConsumerRead<'_> {
        ConsumerRead {
            client_rack: rack,
            fetch_offset: Offset(fetch_offset),
            now_ms: 2_000,
        }
    }

    fn choose(read: ConsumerRead<'_>, followers: &[FollowerView<'_>]) -> Option<i32> {
        preferred_read_replica(ReplicaSelector::RackAware, &read, &LEADER, followers)
            .map(|broker| broker.0)
    }

    #[test]
    fn the_leader_sends_a_consumer_to_a_caught_up_replica_of_its_rack() {
        let followers = [follower(1, "rack-1"), follower(2, "rack-2")];
        assert_eq!(choose(read("rack-1", 50), &followers), Some(1));
        assert_eq!(choose(read("rack-2", 100), &followers), Some(2));
        // The leader's own rack, a rack no replica is in, no rack: here.
        assert_eq!(choose(read("rack-0", 50), &followers), None);
        assert_eq!(choose(read("rack-9", 50), &followers), None);
        assert_eq!(choose(read("", 50), &followers), None);
        // Without a selector (Kafka's default) never elsewhere.
        let unset = preferred_read_replica(
            ReplicaSelector::LeaderOnly,
            &read("rack-1", 50),
            &LEADER,
            &followers,
        );
        assert_eq!(unset, None);
    }

    #[test]
    fn a_replica_that_cannot_serve_the_offset_is_not_chosen() {
        let out_of_isr = FollowerView {
            in_isr: false,
            ..follower(1, "rack-1")
        };
        let behind = FollowerView {
            log_end_offset: Some(Offset(40)),
            ..follower(1, "rack-1")
        };
        let never_fetched = FollowerView {
            log_end_offset: None,
            log_start_offset: None,
            ..follower(1, "rack-1")
        };
        let started_later = FollowerView {
            log_start_offset: Some(Offset(60)),
            ..follower(1, "rack-1")
        };
        let unreachable = FollowerView {
            place: ReplicaPlace {
                reachable: false,
                ..follower(1, "rack-1").place
            },
            ..follower(1, "rack-1")
        };
        let no_rack = FollowerView {
            place: ReplicaPlace {
                rack: None,
                ..follower(1, "rack-1").place
            },
            ..follower(1, "rack-1")
        };
        for view in [
            out_of_isr,
            behind,
            never_fetched,
            started_later,
            unreachable,
            no_rack,
        ] {
            assert_eq!(choose(read("rack-1", 50), &[view]), None, "{view:?}");
        }
        // At its log end exactly, and with no log start said yet, it is.
        let unknown_start = FollowerView {
            log_start_offset: None,
            ..follower(1, "rack-1")
        };
        assert_eq!(choose(read("rack-1", 100), &[unknown_start]), Some(1));
    }

    #[test]
    fn ties_in_a_rack_go_to_the_most_caught_up_then_the_largest_id() {
        let behind = FollowerView {
            log_end_offset: Some(Offset(90)),
            ..follower(3, "rack-1")
        };
        let ahead = follower(1, "rack-1");
        assert_eq!(choose(read("rack-1", 50), &[behind, ahead]), Some(1));
        let caught_up_long_ago = FollowerView {
            last_caught_up_ms: 100,
            ..follower(3, "rack-1")
        };
        let caught_up_lately = follower(1, "rack-1");
        assert_eq!(
            choose(read("rack-1", 50), &[caught_up_long_ago, caught_up_lately]),
            Some(1)
        );
        let same = [follower(1, "rack-1"), follower(3, "rack-1")];
        assert_eq!(choose(read("rack-1", 50), &same), Some(3));
        // The leader in the rack wins over any follower there.
        let with_leader_rack = [follower(1, "rack-0"), follower(2, "rack-0")];
        assert_eq!(choose(read("rack-0", 50), &with_leader_rack), None);
    }

    #[test]
    fn the_leader_listed_among_followers_is_never_chosen_elsewhere() {
        let leader_as_follower = FollowerView {
            place: ReplicaPlace {
                rack: Some("rack-1"),
                ..LEADER
            },
            ..follower(0, "rack-1")
        };
        assert_eq!(choose(read("rack-1", 50), &[leader_as_follower]), None);
    }
}
