//! Leadership moved back to a partition's preferred replica (its first),
//! as Kafka's PREFERRED election: the active controller's periodic
//! balancing (`auto.leader.rebalance.enable`) and ElectLeaders (KIP-460),
//! which may also ask for an UNCLEAN election of a leaderless partition.
//! Pure functions of the cluster image, like the rest of
//! `cluster::elections`, whose election rule ([`change_partition`]) they
//! reuse.

use crate::cluster::cluster_image::{ClusterImage, TopicRegistration};
use crate::cluster::controller::Refusal;
use crate::cluster::records::{MetadataRecord, PartitionRegistration};
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch};

use crate::cluster::elections::{
    Election, OfflineReplicas, change_partition, changed_partitions, partition_record,
};

/// Kafka's cap on the elections one balancing run proposes
/// (`ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE`); a run that
/// reaches it is followed by another at once.
pub const ELECTIONS_PER_BALANCE_MAX: usize = 1_000;

/// Kafka's PREFERRED election: the first replica leads if it is in the ISR
/// and may lead; otherwise the leader stays if it may, or the first ISR
/// member that may leads (an ONLINE election). The ISR is kept. `None` when
/// the leader stays.
pub fn elect_preferred(
    current: &PartitionRegistration,
    may_lead: impl Fn(BrokerId) -> bool,
) -> Option<PartitionRegistration> {
    let preferred = *current.replicas.first()?;
    if current.leader == preferred {
        return None;
    }
    if current.isr.contains(&preferred) && may_lead(preferred) {
        return Some(PartitionRegistration {
            leader: preferred,
            leader_epoch: LeaderEpoch(current.leader_epoch.0 + 1),
            partition_epoch: current.partition_epoch + 1,
            ..current.clone()
        });
    }
    change_partition(current, current.isr.clone(), may_lead, Election::Clean)
}

/// Whether some partition is not led by its preferred replica (or by no
/// one): what makes Kafka's controller schedule a balancing run.
pub fn leaders_imbalanced(image: &ClusterImage) -> bool {
    image.topics.values().any(|topic| {
        topic
            .partitions
            .iter()
            .any(|partition| partition.replicas.first() != Some(&partition.leader))
    })
}

/// One balancing run (`auto.leader.rebalance.enable`): a preferred election
/// for each partition not led by its first replica, in topic-id and
/// partition order, at most `max` of them. Kafka (KRaft) moves every such
/// partition whose preferred replica may lead; `leader.imbalance.per.broker
/// .percentage` is a ZooKeeper-mode setting it no longer reads.
pub fn balance_leaders(
    image: &ClusterImage,
    max: usize,
    offline: &OfflineReplicas,
) -> Vec<MetadataRecord> {
    changed_partitions(image, |current| {
        (current.replicas.first() != Some(&current.leader)).then(Vec::new)
    })
    .filter_map(|(topic, index, current, _, _)| {
        let name = image
            .topics
            .get(&topic)
            .map_or("", |topic| topic.name.as_str());
        let may_lead =
            |replica: BrokerId| image.is_active(replica) && !offline.holds(replica, name, index);
        let changed = elect_preferred(current, may_lead)?;
        Some(partition_record(topic, index, changed))
    })
    .take(max)
    .collect()
}

/// What ElectLeaders asks for (its `ElectionType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionType {
    /// 0: the first replica, if it is in the ISR and may lead.
    Preferred,
    /// 1: for a partition with no leader, any replica that may lead (the
    /// ISR first).
    Unclean,
}

/// ElectLeaders for one partition (Kafka's `ReplicationControlManager
/// .electLeader`): the record that elects, or Kafka's refusal.
pub fn elect_leader(
    image: &ClusterImage,
    topic: &str,
    partition: i32,
    election: ElectionType,
) -> Result<MetadataRecord, Refusal> {
    let registered = image
        .topic_by_name(topic)
        .ok_or_else(|| no_such_topic(topic))?;
    let current = usize::try_from(partition)
        .ok()
        .and_then(|index| registered.partitions.get(index))
        .ok_or_else(|| no_such_partition(topic, partition))?;
    let not_needed_now = match election {
        ElectionType::Preferred => current.replicas.first() == Some(&current.leader),
        ElectionType::Unclean => current.leader != BrokerId::NONE,
    };
    if not_needed_now {
        return Err(not_needed());
    }
    let may_lead = |replica: BrokerId| image.is_active(replica);
    let changed = match election {
        ElectionType::Preferred => elect_preferred(current, may_lead).ok_or_else(|| {
            Refusal::new(
                ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
                "The preferred leader was not available.",
            )
        }),
        ElectionType::Unclean => {
            change_partition(current, current.isr.clone(), may_lead, Election::Unclean)
                .filter(|changed| changed.leader != BrokerId::NONE)
                .ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        "Eligible topic partitions leaders are not available.",
                    )
                })
        }
    }?;
    Ok(partition_record(registered.id, partition as usize, changed))
}

/// One partition's outcome of ElectLeaders: `NONE` once elected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionElection {
    pub partition: i32,
    pub error: ErrorCode,
    pub message: Option<String>,
}

/// One topic's outcomes of ElectLeaders, in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicElections {
    pub topic: String,
    pub partitions: Vec<PartitionElection>,
}

/// ElectLeaders (KIP-460) as Kafka's controller answers it: each asked
/// partition's outcome and the records that elect; `None` asks for every
/// partition of every topic (by name), and then the partitions that need
/// no election are left out of the answer, as Kafka leaves them out.
pub fn elect_leaders(
    image: &ClusterImage,
    election: ElectionType,
    asked: Option<&[(String, Vec<i32>)]>,
) -> (Vec<TopicElections>, Vec<MetadataRecord>) {
    let mut topics: Vec<&TopicRegistration> = image.topics.values().collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    let every = || {
        let counts = topics.iter();
        every_partition(counts.map(|topic| (topic.name.as_str(), topic.partitions.len())))
    };
    answer_elections(asked, every, |topic, partition| {
        elect_leader(image, topic, partition, election)
    })
}

fn every_partition<'a>(topics: impl Iterator<Item = (&'a str, usize)>) -> Vec<(String, Vec<i32>)> {
    topics
        .map(|(name, count)| (name.to_owned(), (0..count as i32).collect()))
        .collect()
}

/// Runs `elect` for each asked partition (`None`: each of `every()`'s,
/// leaving out those needing no election) and gathers the answers and the
/// records.
fn answer_elections(
    asked: Option<&[(String, Vec<i32>)]>,
    every: impl FnOnce() -> Vec<(String, Vec<i32>)>,
    mut elect: impl FnMut(&str, i32) -> Result<MetadataRecord, Refusal>,
) -> (Vec<TopicElections>, Vec<MetadataRecord>) {
    let all_partitions;
    let (asked, all) = match asked {
        Some(asked) => (asked, false),
        None => {
            all_partitions = every();
            (all_partitions.as_slice(), true)
        }
    };
    let mut records = Vec::new();
    let results = asked
        .iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .iter()
                .filter_map(|&partition| {
                    let (error, message) = match elect(topic, partition) {
                        Ok(record) => {
                            records.push(record);
                            (ErrorCode::NONE, None)
                        }
                        Err(refusal) if all && refusal.error == ErrorCode::ELECTION_NOT_NEEDED => {
                            return None;
                        }
                        Err(refusal) => (refusal.error, Some(refusal.message)),
                    };
                    Some(PartitionElection {
                        partition,
                        error,
                        message,
                    })
                })
                .collect();
            TopicElections {
                topic: topic.clone(),
                partitions,
            }
        })
        .collect();
    (results, records)
}

fn no_such_topic(topic: &str) -> Refusal {
    Refusal::new(
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        format!("No such topic as {topic}"),
    )
}

fn no_such_partition(topic: &str, partition: i32) -> Refusal {
    Refusal::new(
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        format!("No such partition as {topic}-{partition}"),
    )
}

fn not_needed() -> Refusal {
    Refusal::new(
        ErrorCode::ELECTION_NOT_NEEDED,
        "Leader election not needed for topic partition.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::elections::tests::{TOPIC, brokers, fence, image, partition};
    use crate::types::{PartitionId, TopicPartition};

    /// Broker `id` (epoch `id`) registered and unfenced again, and back in
    /// the partition's ISR (last), as its leader's AlterPartition would do.
    fn rejoin(image: &mut ClusterImage, id: i32) {
        let mut registration = image.partition(TOPIC, PartitionId(0)).unwrap().clone();
        registration.isr.push(BrokerId(id));
        registration.partition_epoch += 1;
        let records = [
            MetadataRecord::UnfenceBroker {
                id: BrokerId(id),
                epoch: id as i64,
            },
            MetadataRecord::Partition {
                topic: TOPIC,
                partition: PartitionId(0),
                registration,
            },
        ];
        image.apply(image.offset + 1, &records).unwrap();
    }

    fn balance(image: &ClusterImage) -> Vec<MetadataRecord> {
        balance_leaders(
            image,
            ELECTIONS_PER_BALANCE_MAX,
            &OfflineReplicas::default(),
        )
    }

    /// A preferred replica in a failed log directory of its broker is not
    /// given the leadership back, though in the ISR (its last member).
    #[test]
    fn balancing_skips_a_preferred_replica_whose_log_directory_failed() {
        let image = image(&[1, 2], &[1], -1, Election::Clean);
        assert_eq!(balance(&image).len(), 1, "the preferred replica leads");
        let mut offline = OfflineReplicas::default();
        offline.report(
            BrokerId(1),
            &[TopicPartition {
                topic: "t".into(),
                partition: PartitionId(0),
            }],
        );
        assert!(balance_leaders(&image, ELECTIONS_PER_BALANCE_MAX, &offline).is_empty());
        offline.report(BrokerId(1), &[]);
        assert_eq!(
            balance_leaders(&image, ELECTIONS_PER_BALANCE_MAX, &offline).len(),
            1
        );
    }

    #[test]
    fn balancing_gives_the_preferred_replica_back_its_leadership_once_in_sync() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, Election::Clean);
        assert!(!leaders_imbalanced(&image));
        assert!(balance(&image).is_empty());
        fence(&mut image, &[1]);
        assert_eq!(partition(&image), (brokers(&[2, 3]), BrokerId(2), 1, 1));
        // Fenced and out of the ISR: the leader stays.
        assert!(leaders_imbalanced(&image));
        assert!(balance(&image).is_empty());
        rejoin(&mut image, 1);
        let records = balance_leaders(
            &image,
            ELECTIONS_PER_BALANCE_MAX,
            &OfflineReplicas::default(),
        );
        image.apply(image.offset + 1, &records).unwrap();
        // A new leader epoch; the ISR as it was.
        assert_eq!(partition(&image), (brokers(&[2, 3, 1]), BrokerId(1), 2, 3));
        assert!(!leaders_imbalanced(&image));
        assert!(balance_leaders(&image, 0, &OfflineReplicas::default()).is_empty());
    }

    #[test]
    fn a_preferred_replica_shutting_down_is_not_given_the_leadership() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 2, Election::Clean);
        let shutting_down = MetadataRecord::ControlledShutdown {
            id: BrokerId(1),
            epoch: 1,
        };
        image.apply(image.offset + 1, &[shutting_down]).unwrap();
        assert!(balance(&image).is_empty());
        let refusal = elect_leader(&image, "t", 0, ElectionType::Preferred).unwrap_err();
        assert_eq!(
            (refusal.error, refusal.message.as_str()),
            (
                ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
                "The preferred leader was not available."
            )
        );
    }

    #[test]
    fn elect_leaders_answers_as_kafkas_controller() {
        let image = image(&[1, 2, 3], &[1, 2, 3], 2, Election::Clean);
        let refused = |topic: &str, partition, election| {
            let refusal = elect_leader(&image, topic, partition, election).unwrap_err();
            (refusal.error, refusal.message)
        };
        assert_eq!(
            refused("nope", 0, ElectionType::Preferred),
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "No such topic as nope".to_owned()
            )
        );
        assert_eq!(
            refused("t", 1, ElectionType::Preferred),
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "No such partition as t-1".to_owned()
            )
        );
        let not_needed = (
            ErrorCode::ELECTION_NOT_NEEDED,
            "Leader election not needed for topic partition.".to_owned(),
        );
        // Unclean: it has a leader.
        assert_eq!(refused("t", 0, ElectionType::Unclean), not_needed);
        let record = elect_leader(&image, "t", 0, ElectionType::Preferred).unwrap();
        let mut moved = image.clone();
        moved.apply(moved.offset + 1, &[record]).unwrap();
        assert_eq!(partition(&moved), (brokers(&[1, 2, 3]), BrokerId(1), 1, 1));
        let refusal = elect_leader(&moved, "t", 0, ElectionType::Preferred).unwrap_err();
        assert_eq!((refusal.error, refusal.message), not_needed);
    }

    #[test]
    fn asking_for_every_partition_leaves_out_those_needing_no_election() {
        let image = image(&[1, 2, 3], &[1, 2, 3], 2, Election::Clean);
        let elected = |asked: Option<&[(String, Vec<i32>)]>| {
            elect_leaders(&image, ElectionType::Preferred, asked)
        };
        let (all, records) = elected(None);
        assert_eq!(
            all,
            vec![TopicElections {
                topic: "t".into(),
                partitions: vec![PartitionElection {
                    partition: 0,
                    error: ErrorCode::NONE,
                    message: None,
                }],
            }]
        );
        assert_eq!(records.len(), 1);
        let mut moved = image.clone();
        moved.apply(moved.offset + 1, &records).unwrap();
        let (all, records) = elect_leaders(&moved, ElectionType::Preferred, None);
        assert_eq!(all[0].partitions, vec![]);
        assert!(records.is_empty());
        // Named, each partition is answered, in request order.
        let asked = [("t".to_owned(), vec![0, 7]), ("u".to_owned(), vec![0])];
        let (named, records) = elect_leaders(&moved, ElectionType::Preferred, Some(&asked));
        let codes: Vec<Vec<(i32, ErrorCode)>> = named
            .iter()
            .map(|topic| {
                let codes = topic.partitions.iter();
                codes
                    .map(|result| (result.partition, result.error))
                    .collect()
            })
            .collect();
        assert_eq!(
            codes,
            vec![
                vec![
                    (0, ErrorCode::ELECTION_NOT_NEEDED),
                    (7, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                ],
                vec![(0, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)],
            ]
        );
        assert!(records.is_empty());
    }

    /// A one-broker cluster (a node started alone): its partitions have
    /// one replica, their leader, so no election is ever needed.
    #[test]
    fn one_broker_answers_that_no_election_is_needed() {
        let image = image(&[1], &[1], 1, Election::Clean);
        let asked = [("t".to_owned(), vec![0, 2]), ("c".to_owned(), vec![0])];
        for election in [ElectionType::Preferred, ElectionType::Unclean] {
            let (results, records) = elect_leaders(&image, election, Some(&asked));
            let answers: Vec<(i32, ErrorCode, Option<String>)> = results
                .into_iter()
                .flat_map(|topic| topic.partitions)
                .map(|result| (result.partition, result.error, result.message))
                .collect();
            let message = |text: &str| Some(text.to_owned());
            assert_eq!(
                answers,
                vec![
                    (
                        0,
                        ErrorCode::ELECTION_NOT_NEEDED,
                        message("Leader election not needed for topic partition.")
                    ),
                    (
                        2,
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        message("No such partition as t-2")
                    ),
                    (
                        0,
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        message("No such topic as c")
                    ),
                ]
            );
            assert!(records.is_empty());
            let (all, records) = elect_leaders(&image, election, None);
            assert!(all.iter().all(|topic| topic.partitions.is_empty()));
            assert!(records.is_empty());
        }
    }

    #[test]
    fn an_unclean_election_asked_for_takes_any_replica_that_may_lead() {
        let mut image = image(&[1, 2, 3], &[1], 1, Election::Clean);
        fence(&mut image, &[2, 3]);
        fence(&mut image, &[1]);
        assert_eq!(partition(&image).1, BrokerId::NONE);
        let refusal = elect_leader(&image, "t", 0, ElectionType::Unclean).unwrap_err();
        assert_eq!(refusal.error, ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE);
        let unfence = MetadataRecord::UnfenceBroker {
            id: BrokerId(3),
            epoch: 3,
        };
        image.apply(image.offset + 1, &[unfence]).unwrap();
        // The topic does not allow unclean elections; asking does.
        let record = elect_leader(&image, "t", 0, ElectionType::Unclean).unwrap();
        image.apply(image.offset + 1, &[record]).unwrap();
        assert_eq!(partition(&image), (brokers(&[3]), BrokerId(3), 2, 2));
    }
}
