//! Manual replica assignments (`kafka-topics --replica-assignment`,
//! CreateTopics' and CreatePartitions' `assignments`), checked as Kafka's
//! `ReplicationControlManager` checks them: each replica list non-empty,
//! of registered brokers, none twice, all of one length; partitions
//! numbered consecutively from where the topic ends. The ISR is the
//! replicas that are active (not fenced, not shutting down), the leader
//! the first of them.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::controller::Refusal;
use crate::cluster::image::{PARTITIONS_MAX, TopicId};
use crate::cluster::records::{MetadataRecord, PartitionRegistration};
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch, PartitionId};

fn invalid(message: String) -> Refusal {
    Refusal::new(ErrorCode::INVALID_REPLICA_ASSIGNMENT, message)
}

/// Registrations for the partitions `assignments` lists, (partition,
/// replicas). For a new topic (`existing` None) they are numbered from 0;
/// for one with `existing = (partitions, replication_factor)` they follow
/// its last partition and have its factor.
pub fn manual_partitions(
    image: &ClusterImage,
    topic: TopicId,
    assignments: &[(i32, Vec<BrokerId>)],
    existing: Option<(usize, usize)>,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let (first, mut replication_factor) = match existing {
        Some((partitions, factor)) => (partitions, Some(factor)),
        None => (0, None),
    };
    let mut registrations = BTreeMap::new();
    for (partition, replicas) in assignments {
        if registrations.contains_key(partition) {
            return Err(invalid(format!(
                "Found multiple manual partition assignments for partition {partition}"
            )));
        }
        check_replicas(image, replicas, replication_factor)?;
        replication_factor = Some(replicas.len());
        let isr: Vec<BrokerId> = replicas
            .iter()
            .copied()
            .filter(|broker| image.is_active(*broker))
            .collect();
        let Some(&leader) = isr.first() else {
            return Err(invalid(format!(
                "All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."
            )));
        };
        registrations.insert(
            *partition,
            PartitionRegistration {
                replicas: replicas.clone(),
                isr,
                leader,
                leader_epoch: LeaderEpoch(0),
                partition_epoch: 0,
            },
        );
    }
    let expected = (first..first + registrations.len()).map(|index| index as i32);
    if !registrations.keys().copied().eq(expected) {
        return Err(invalid(
            "partitions should be a consecutive 0-based integer sequence".to_owned(),
        ));
    }
    if first + registrations.len() > PARTITIONS_MAX {
        return Err(Refusal::new(
            ErrorCode::INVALID_PARTITIONS,
            format!("over Brook's limit of {PARTITIONS_MAX} partitions"),
        ));
    }
    Ok(registrations
        .into_iter()
        .map(|(partition, registration)| MetadataRecord::Partition {
            topic,
            partition: PartitionId(partition),
            registration,
        })
        .collect())
}

/// Kafka's `validateManualPartitionAssignment`.
fn check_replicas(
    image: &ClusterImage,
    replicas: &[BrokerId],
    replication_factor: Option<usize>,
) -> Result<(), Refusal> {
    if replicas.is_empty() {
        return Err(invalid(
            "The manual partition assignment includes an empty replica list.".to_owned(),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut sorted = replicas.to_vec();
    sorted.sort();
    for broker in sorted {
        if !image.brokers.contains_key(&broker) {
            return Err(invalid(format!(
                "The manual partition assignment includes broker {broker}, but no such broker is registered."
            )));
        }
        if !seen.insert(broker) {
            return Err(invalid(format!(
                "The manual partition assignment includes the broker {broker} more than once."
            )));
        }
    }
    if let Some(factor) = replication_factor.filter(|factor| *factor != replicas.len()) {
        return Err(invalid(format!(
            "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {factor} replica(s).",
            replicas.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::controller::tests::three_brokers;

    fn ids(brokers: &[i32]) -> Vec<BrokerId> {
        brokers.iter().copied().map(BrokerId).collect()
    }

    #[test]
    fn an_assignment_becomes_registrations_with_live_replicas_in_sync() {
        let mut image = three_brokers();
        image
            .apply(
                5,
                &[MetadataRecord::FenceBroker {
                    id: BrokerId(2),
                    epoch: 2,
                }],
            )
            .unwrap();
        let records = manual_partitions(
            &image,
            TopicId([1; 16]),
            &[(1, ids(&[3, 1])), (0, ids(&[2, 3]))],
            None,
        )
        .unwrap();
        let registrations: Vec<_> = records
            .iter()
            .map(|record| match record {
                MetadataRecord::Partition {
                    partition,
                    registration,
                    ..
                } => (partition.0, registration.leader, registration.isr.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            registrations,
            vec![(0, BrokerId(3), ids(&[3])), (1, BrokerId(3), ids(&[3, 1])),]
        );
    }

    #[test]
    fn kafkas_refusals() {
        let image = three_brokers();
        let refused = |assignments: &[(i32, Vec<BrokerId>)], existing| {
            manual_partitions(&image, TopicId([1; 16]), assignments, existing)
                .unwrap_err()
                .message
        };
        assert_eq!(
            refused(&[(0, vec![])], None),
            "The manual partition assignment includes an empty replica list."
        );
        assert_eq!(
            refused(&[(0, ids(&[1, 9]))], None),
            "The manual partition assignment includes broker 9, but no such broker is registered."
        );
        assert_eq!(
            refused(&[(0, ids(&[2, 2]))], None),
            "The manual partition assignment includes the broker 2 more than once."
        );
        assert!(
            refused(&[(0, ids(&[1, 2])), (1, ids(&[3]))], None).contains("which have 2 replica(s)")
        );
        assert_eq!(
            refused(&[(0, ids(&[1])), (2, ids(&[2]))], None),
            "partitions should be a consecutive 0-based integer sequence"
        );
        assert!(refused(&[(0, ids(&[1])), (0, ids(&[2]))], None).contains("multiple"));
        // Added partitions continue the topic and keep its factor.
        assert!(refused(&[(3, ids(&[1]))], Some((3, 2))).contains("which have 2 replica(s)"));
        assert_eq!(
            refused(&[(4, ids(&[1, 2]))], Some((3, 2))),
            "partitions should be a consecutive 0-based integer sequence"
        );
        assert!(
            manual_partitions(&image, TopicId([1; 16]), &[(3, ids(&[1, 2]))], Some((3, 2))).is_ok()
        );
    }
}
