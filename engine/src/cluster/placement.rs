//! Where a new partition's replicas go: Kafka's assignment
//! (`AdminUtils.assignReplicasToBrokers`), rack-unaware and rack-aware.
//!
//! The first replica (the preferred leader) of partition `p` is broker
//! `(p + start) % n` of the sorted broker list, so leaders spread round-robin;
//! the other replicas follow it at a shift that grows by one every `n`
//! partitions, so the followers of one broker's leaderships are spread too.
//! With racks, the broker list is first interleaved rack by rack and a
//! replica is skipped while its rack (or broker) already holds one and an
//! unused rack (or broker) remains. The two random numbers Kafka draws (the
//! start index and the first shift) are arguments here: the caller derives
//! them from its seeded input, so the same request gives the same placement.
//!
//! Invariant, checked at the end of [`assign_replicas`]: no partition has two
//! replicas on one broker (the seeds' rule: a replica on the same broker as
//! another protects nothing).

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::types::BrokerId;

/// A broker that may take new replicas, with its `broker.rack`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: BrokerId,
    pub rack: Option<String>,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PlacementError {
    /// Kafka's INVALID_REPLICATION_FACTOR.
    #[error("Replication factor must be larger than 0.")]
    ReplicationFactorNotPositive,
    /// Kafka's INVALID_REPLICATION_FACTOR, with its message.
    #[error("Replication factor: {replication_factor} larger than available brokers: {brokers}.")]
    ReplicationFactorTooLarge {
        replication_factor: usize,
        brokers: usize,
    },
    /// Kafka's INVALID_PARTITIONS.
    #[error("Number of partitions must be larger than 0.")]
    PartitionsNotPositive,
    /// Kafka refuses a rack-aware assignment when only some brokers have a
    /// rack (`AdminOperationException`; the controller answers
    /// INVALID_REPLICATION_FACTOR).
    #[error("Not all brokers have rack information for replica rack aware assignment.")]
    SomeBrokersWithoutRack,
}

/// The random choices of Kafka's algorithm, taken as values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    /// Index (into the arranged broker list) of partition 0's first replica.
    pub start_index: usize,
    /// The shift of the second replica from the first, before it grows.
    pub replica_shift: usize,
}

impl Spread {
    /// Both choices derived from one seed (the caller's topic id, say).
    pub fn from_seed(seed: u64) -> Spread {
        Spread {
            start_index: (seed & 0xffff_ffff) as usize,
            replica_shift: (seed >> 32) as usize,
        }
    }
}

/// Replicas for partitions `first_partition ..< first_partition + count`,
/// each list in preference order (its first broker is the preferred leader).
pub fn assign_replicas(
    brokers: &[Candidate],
    count: usize,
    replication_factor: usize,
    first_partition: usize,
    spread: Spread,
) -> Result<Vec<Vec<BrokerId>>, PlacementError> {
    if count == 0 {
        return Err(PlacementError::PartitionsNotPositive);
    }
    if replication_factor == 0 {
        return Err(PlacementError::ReplicationFactorNotPositive);
    }
    if replication_factor > brokers.len() {
        return Err(PlacementError::ReplicationFactorTooLarge {
            replication_factor,
            brokers: brokers.len(),
        });
    }
    let with_rack = brokers
        .iter()
        .filter(|broker| broker.rack.is_some())
        .count();
    if with_rack != 0 && with_rack != brokers.len() {
        return Err(PlacementError::SomeBrokersWithoutRack);
    }
    // Without racks every broker is in the one rack "": Kafka's rack-aware
    // walk then takes the followers at the rack-unaware shifts, in order.
    let assignment = assign_over_racks(brokers, count, replication_factor, first_partition, spread);
    assert!(assignment.iter().all(|replicas| {
        replicas.len() == replication_factor
            && replicas.iter().collect::<BTreeSet<_>>().len() == replicas.len()
    }));
    Ok(assignment)
}

fn assign_over_racks(
    brokers: &[Candidate],
    count: usize,
    replication_factor: usize,
    first_partition: usize,
    spread: Spread,
) -> Vec<Vec<BrokerId>> {
    let rack_of: BTreeMap<BrokerId, &str> = brokers
        .iter()
        .map(|broker| (broker.id, broker.rack.as_deref().unwrap_or_default()))
        .collect();
    let arranged = rack_alternated(&rack_of);
    let racks = rack_of.values().collect::<BTreeSet<_>>().len();
    let n = arranged.len();
    let start = spread.start_index % n;
    let mut shift = initial_shift(spread, first_partition, n);
    (first_partition..first_partition + count)
        .map(|partition| {
            if partition > 0 && partition % n == 0 {
                shift += 1;
            }
            let first = (partition + start) % n;
            let leader = arranged[first];
            let mut replicas = vec![leader];
            let mut racks_used = BTreeSet::from([rack_of[&leader]]);
            let mut k = 0;
            while replicas.len() < replication_factor {
                // Terminates: within n - 1 steps of k every broker is visited
                // (the shift is 1 + (s + k) % (n - 1)), and an unused broker is
                // always acceptable once every rack is used.
                let broker = arranged[follower_index(first, shift * racks, k, n)];
                let rack = rack_of[&broker];
                if (!racks_used.contains(rack) || racks_used.len() == racks)
                    && !replicas.contains(&broker)
                {
                    replicas.push(broker);
                    racks_used.insert(rack);
                }
                k += 1;
            }
            replicas
        })
        .collect()
}

/// The shift as it stood just before `first_partition`, had the loop run
/// from partition 0: added partitions continue the pattern of the first ones
/// (Kafka restarts it, which can stack followers on one broker).
fn initial_shift(spread: Spread, first_partition: usize, n: usize) -> usize {
    let bumps = first_partition.saturating_sub(1) / n;
    spread.replica_shift % n + bumps
}

/// Kafka's `replicaIndex`: the `j`-th follower sits `1 + (shift + j) % (n - 1)`
/// places after the first replica, so it is never the first replica itself.
fn follower_index(first: usize, shift: usize, j: usize, n: usize) -> usize {
    let step = 1 + (shift + j) % (n - 1);
    (first + step) % n
}

/// Kafka's `getRackAlternatedBrokerList`: racks in order, brokers of each
/// rack in order, taken one from each rack in turn (rack a's first, rack b's
/// first, …, rack a's second, …).
fn rack_alternated(rack_of: &BTreeMap<BrokerId, &str>) -> Vec<BrokerId> {
    let mut by_rack: BTreeMap<&str, Vec<BrokerId>> = BTreeMap::new();
    for (broker, rack) in rack_of {
        by_rack.entry(rack).or_default().push(*broker);
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|round| {
            by_rack
                .values()
                .filter_map(move |brokers| brokers.get(round).copied())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(ids: &[i32]) -> Vec<Candidate> {
        ids.iter()
            .map(|id| Candidate {
                id: BrokerId(*id),
                rack: None,
            })
            .collect()
    }

    fn racked(pairs: &[(i32, &str)]) -> Vec<Candidate> {
        pairs
            .iter()
            .map(|(id, rack)| Candidate {
                id: BrokerId(*id),
                rack: Some((*rack).to_owned()),
            })
            .collect()
    }

    fn ids(assignment: &[Vec<BrokerId>]) -> Vec<Vec<i32>> {
        assignment
            .iter()
            .map(|replicas| replicas.iter().map(|broker| broker.0).collect())
            .collect()
    }

    const FIXED: Spread = Spread {
        start_index: 0,
        replica_shift: 0,
    };

    /// Kafka's AdminUtilsTest.testReplicaAssignment: five brokers, ten
    /// partitions, three replicas, start index and shift fixed at 0.
    #[test]
    fn kafkas_own_rack_unaware_table() {
        let assignment = assign_replicas(&brokers(&[0, 1, 2, 3, 4]), 10, 3, 0, FIXED).unwrap();
        assert_eq!(
            ids(&assignment),
            vec![
                vec![0, 1, 2],
                vec![1, 2, 3],
                vec![2, 3, 4],
                vec![3, 4, 0],
                vec![4, 0, 1],
                vec![0, 2, 3],
                vec![1, 3, 4],
                vec![2, 4, 0],
                vec![3, 0, 1],
                vec![4, 1, 2],
            ]
        );
    }

    /// The cluster issue's acceptance shape: RF 3, 6 partitions, 3 brokers
    /// give every partition 3 distinct brokers and each broker 2 leaderships,
    /// whatever the random choices.
    #[test]
    fn three_brokers_six_partitions_spread_evenly_for_every_spread() {
        for start_index in 0..6 {
            for replica_shift in 0..6 {
                let spread = Spread {
                    start_index,
                    replica_shift,
                };
                let assignment = assign_replicas(&brokers(&[3, 1, 2]), 6, 3, 0, spread).unwrap();
                let mut leaders = BTreeMap::new();
                for replicas in &assignment {
                    assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 3);
                    *leaders.entry(replicas[0]).or_insert(0) += 1;
                }
                assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
            }
        }
    }

    /// Added partitions continue the pattern where the first ones stopped
    /// (CreatePartitions passes the first new partition's number).
    #[test]
    fn added_partitions_continue_the_round_robin() {
        let all = assign_replicas(&brokers(&[0, 1, 2, 3, 4]), 10, 3, 0, FIXED).unwrap();
        let added = assign_replicas(&brokers(&[0, 1, 2, 3, 4]), 4, 3, 6, FIXED).unwrap();
        assert_eq!(added, all[6..10].to_vec());
    }

    /// Kafka's AdminUtilsTest rack-aware case: six brokers on three racks,
    /// every partition's three replicas on three racks; leaders even.
    #[test]
    fn rack_aware_puts_each_replica_on_its_own_rack() {
        let cluster = racked(&[(0, "a"), (1, "b"), (2, "c"), (3, "a"), (4, "b"), (5, "c")]);
        assert_eq!(
            rack_alternated(
                &cluster
                    .iter()
                    .map(|c| (c.id, c.rack.as_deref().unwrap()))
                    .collect()
            ),
            vec![
                BrokerId(0),
                BrokerId(1),
                BrokerId(2),
                BrokerId(3),
                BrokerId(4),
                BrokerId(5)
            ]
        );
        for seed in 0..40u64 {
            let assignment =
                assign_replicas(&cluster, 12, 3, 0, Spread::from_seed(seed * 0x1_0000_0003))
                    .unwrap();
            let mut leaders = BTreeMap::new();
            for replicas in &assignment {
                let racks: BTreeSet<_> = replicas
                    .iter()
                    .map(|b| cluster[b.0 as usize].rack.clone())
                    .collect();
                assert_eq!(racks.len(), 3, "{replicas:?}");
                *leaders.entry(replicas[0]).or_insert(0) += 1;
            }
            assert!(leaders.values().all(|count| *count == 2), "{leaders:?}");
        }
    }

    /// Two racks, three replicas: one rack must hold two, but never twice
    /// the same broker.
    #[test]
    fn more_replicas_than_racks_still_never_share_a_broker() {
        let cluster = racked(&[(1, "x"), (2, "x"), (3, "y"), (4, "y")]);
        for seed in 0..20u64 {
            for replicas in assign_replicas(&cluster, 8, 3, 0, Spread::from_seed(seed)).unwrap() {
                assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 3);
                let racks: BTreeSet<_> = replicas.iter().map(|b| b.0 <= 2).collect();
                assert_eq!(racks.len(), 2);
            }
        }
    }

    #[test]
    fn impossible_requests_get_kafkas_errors() {
        let three = brokers(&[1, 2, 3]);
        assert_eq!(
            assign_replicas(&three, 1, 4, 0, FIXED),
            Err(PlacementError::ReplicationFactorTooLarge {
                replication_factor: 4,
                brokers: 3
            })
        );
        assert_eq!(
            PlacementError::ReplicationFactorTooLarge {
                replication_factor: 4,
                brokers: 3
            }
            .to_string(),
            "Replication factor: 4 larger than available brokers: 3."
        );
        assert_eq!(
            assign_replicas(&three, 1, 0, 0, FIXED),
            Err(PlacementError::ReplicationFactorNotPositive)
        );
        assert_eq!(
            assign_replicas(&three, 0, 1, 0, FIXED),
            Err(PlacementError::PartitionsNotPositive)
        );
        let mixed = vec![
            Candidate {
                id: BrokerId(1),
                rack: Some("a".into()),
            },
            Candidate {
                id: BrokerId(2),
                rack: None,
            },
        ];
        assert_eq!(
            assign_replicas(&mixed, 1, 1, 0, FIXED),
            Err(PlacementError::SomeBrokersWithoutRack)
        );
        assert_eq!(
            assign_replicas(&brokers(&[]), 1, 1, 0, FIXED),
            Err(PlacementError::ReplicationFactorTooLarge {
                replication_factor: 1,
                brokers: 0
            })
        );
    }

    #[test]
    fn one_broker_gets_every_replica_of_rf_one() {
        let assignment = assign_replicas(&brokers(&[7]), 3, 1, 0, Spread::from_seed(99)).unwrap();
        assert_eq!(ids(&assignment), vec![vec![7], vec![7], vec![7]]);
    }
}
