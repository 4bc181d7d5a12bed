//! A leader's choice of the replica a consumer reads from (KIP-392), on the
//! partition's shard: the followers' positions from its replication state,
//! the replicas' racks and endpoints from the cluster image, the rule from
//! [`brook_engine::replica::read_replica`].

use brook_engine::replica::read_replica::{
    ConsumerRead, FollowerView, ReplicaPlace, preferred_read_replica,
};
use brook_engine::replica::replication::Role;
use brook_engine::types::{BrokerId, Offset, TopicPartition};

use crate::server::replication::{ReplicaHost, now};
use crate::server::shard::Shard;

impl ReplicaHost {
    /// The replica a consumer in `client_rack`, whose request came in on
    /// client listener `listener`, should read `topic_partition` from at
    /// `fetch_offset` rather than this leader; `None`: here (no selector,
    /// not the leader, or no better replica). Call on the partition's shard.
    pub fn preferred_read_replica(
        shard: &Shard,
        topic_partition: &TopicPartition,
        fetch_offset: Offset,
        client_rack: &str,
        listener: usize,
    ) -> Option<BrokerId> {
        let selector = shard.context.config.replica_selector;
        let view = shard.cluster_view()?;
        let listener = &shard.context.listeners.get(listener)?.name;
        let place = |broker: BrokerId| {
            let state = view.image.brokers.get(&broker);
            let reachable = state.is_some_and(|state| {
                !state.fenced && state.registration.endpoint(listener).is_some()
            });
            ReplicaPlace {
                broker,
                reachable,
                rack: state.and_then(|state| state.registration.rack.as_deref()),
            }
        };
        let partitions = shard.replication.partitions.borrow();
        let replication = partitions.get(topic_partition)?;
        if replication.role() != Role::Leader {
            return None;
        }
        let leader = place(replication.registration().leader);
        let followers: Vec<FollowerView<'_>> = replication
            .follower_positions()
            .map(|position| FollowerView {
                place: place(position.broker),
                in_isr: position.in_isr,
                log_end_offset: position.log_end_offset,
                log_start_offset: position.log_start_offset,
                last_caught_up_ms: position.last_caught_up_ms,
            })
            .collect();
        let read = ConsumerRead {
            client_rack,
            fetch_offset,
            now_ms: now(),
        };
        preferred_read_replica(selector, &read, &leader, &followers)
    }
}
