//! The controller's rules for changing a topic that exists: CreatePartitions
//! and (Incremental)AlterConfigs, as pure functions of the cluster image
//! returning the records to propose (see [`crate::cluster::controller`]).

use std::collections::BTreeMap;

use crate::cluster::broker_dynamic::changed;
use crate::cluster::cluster_image::{ClusterImage, TopicRegistration};
use crate::cluster::controller::{Refusal, new_partitions};
use crate::cluster::image::PARTITIONS_MAX;
use crate::cluster::manual_assignment::manual_partitions;
use crate::cluster::records::MetadataRecord;
use crate::cluster::topic_config::{ConfigOperation, altered, check_overrides};
use crate::log::config::LogConfig;
use crate::protocol::errors::ErrorCode;
use crate::types::BrokerId;

fn existing<'a>(image: &'a ClusterImage, name: &str) -> Result<&'a TopicRegistration, Refusal> {
    image.topic_by_name(name).ok_or_else(|| {
        Refusal::new(
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        )
    })
}

/// Whether topic `name` with `current` partitions may grow to `total`
/// (Kafka's refusals, and Brook's partition limit): the rule a one-node
/// broker applies too.
pub fn check_partition_increase(name: &str, current: usize, total: i32) -> Result<(), Refusal> {
    if total < 0 || (total as usize) < current {
        return Err(Refusal::new(
            ErrorCode::INVALID_PARTITIONS,
            format!(
                "The topic {name} currently has {current} partition(s); {total} would not be an increase."
            ),
        ));
    }
    if total as usize == current {
        return Err(Refusal::new(
            ErrorCode::INVALID_PARTITIONS,
            format!("Topic already has {current} partition(s)."),
        ));
    }
    if total as usize > PARTITIONS_MAX {
        return Err(Refusal::new(
            ErrorCode::INVALID_PARTITIONS,
            format!("{total} partitions is over Brook's limit of {PARTITIONS_MAX}"),
        ));
    }
    Ok(())
}

/// Kafka's refusal of CreatePartitions' assignments that are not one per
/// partition added (an empty list among them).
pub fn check_assignment_count(
    current: usize,
    total: i32,
    assignments: usize,
) -> Result<(), Refusal> {
    let additional = (total as usize).saturating_sub(current);
    if assignments == additional {
        return Ok(());
    }
    Err(Refusal::new(
        ErrorCode::INVALID_REPLICA_ASSIGNMENT,
        format!(
            "Attempted to add {additional} additional partition(s), but only {assignments} assignment(s) were specified."
        ),
    ))
}

/// CreatePartitions: topic `name` grows to `total` partitions, the new ones
/// placed over the live brokers with the topic's replication factor,
/// continuing its placement walk, or as `assignments` say (one replica list
/// per new partition; an empty list is not `None`). Kafka's refusals: a
/// total that is not an increase, assignments that do not match it, or
/// over Brook's partition limit.
pub fn add_partitions(
    image: &ClusterImage,
    name: &str,
    total: i32,
    assignments: Option<&[Vec<BrokerId>]>,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let topic = existing(image, name)?;
    let current = topic.partitions.len();
    check_partition_increase(name, current, total)?;
    let replication_factor = topic
        .partitions
        .first()
        .map_or(1, |first| first.replicas.len());
    if let Some(assignments) = assignments {
        check_assignment_count(current, total, assignments.len())?;
        let numbered: Vec<(i32, Vec<BrokerId>)> = assignments
            .iter()
            .enumerate()
            .map(|(offset, replicas)| ((current + offset) as i32, replicas.clone()))
            .collect();
        return manual_partitions(
            image,
            topic.id,
            &numbered,
            Some((current, replication_factor)),
        );
    }
    new_partitions(
        image,
        topic.id,
        current,
        total as usize - current,
        replication_factor,
    )
}

/// A topic's overrides after (Incremental)AlterConfigs' `changes`, checked
/// under `log_defaults`: the rule a one-node broker applies too.
pub fn altered_overrides(
    current: &BTreeMap<String, String>,
    changes: &[(String, ConfigOperation)],
    replace: bool,
    log_defaults: &LogConfig,
) -> Result<BTreeMap<String, String>, Refusal> {
    let invalid = |message: String| Refusal::new(ErrorCode::INVALID_CONFIG, message);
    let base = if replace {
        BTreeMap::new()
    } else {
        current.clone()
    };
    let configs = altered(&base, log_defaults, changes).map_err(invalid)?;
    check_overrides(log_defaults, &configs).map_err(invalid)?;
    Ok(configs)
}

/// IncrementalAlterConfigs (`replace` false: `changes` in order) or
/// AlterConfigs (`replace` true: the overrides become exactly the `Set`
/// ones) on topic `name`, checked under the broker's `log_defaults`. The
/// records set or remove each override that changes; none when nothing
/// does.
pub fn alter_topic_configs(
    image: &ClusterImage,
    name: &str,
    changes: &[(String, ConfigOperation)],
    replace: bool,
    log_defaults: &LogConfig,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let topic = existing(image, name)?;
    let configs = altered_overrides(&topic.configs, changes, replace, log_defaults)?;
    Ok(changed(&topic.configs, &configs)
        .map(|(key, value)| MetadataRecord::TopicConfig {
            topic: name.to_owned(),
            key,
            value,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::controller::tests::three_brokers;
    use crate::cluster::controller::{TopicDefaults, TopicRequest, create_topic};
    use crate::cluster::image::TopicId;
    use std::collections::BTreeSet;

    fn with_topic(partitions: i32, replication_factor: i16) -> ClusterImage {
        let mut image = three_brokers();
        let request = TopicRequest {
            name: "orders".into(),
            partitions,
            replication_factor,
            configs: BTreeMap::from([("retention.ms".into(), "60000".into())]),
            assignments: Vec::new(),
            id: None,
        };
        let records = create_topic(
            &image,
            &request,
            &TopicDefaults::default(),
            TopicId([9; 16]),
        )
        .unwrap();
        image.apply(5, &records).unwrap();
        image
    }

    #[test]
    fn added_partitions_keep_the_replication_factor_and_spread_over_brokers() {
        let mut image = with_topic(3, 3);
        let records = add_partitions(&image, "orders", 6, None).unwrap();
        assert_eq!(records.len(), 3);
        image.apply(6, &records).unwrap();
        let topic = image.topic_by_name("orders").unwrap();
        assert_eq!(topic.partitions.len(), 6);
        let mut leaders = BTreeMap::<BrokerId, usize>::new();
        for partition in &topic.partitions {
            let distinct: BTreeSet<_> = partition.replicas.iter().collect();
            assert_eq!(distinct.len(), 3, "{partition:?}");
            assert_eq!(partition.isr, partition.replicas);
            *leaders.entry(partition.leader).or_default() += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    #[test]
    fn added_partitions_can_be_assigned_by_hand() {
        let image = with_topic(2, 2);
        let assigned =
            add_partitions(&image, "orders", 3, Some(&[vec![BrokerId(3), BrokerId(1)]])).unwrap();
        assert!(matches!(
            &assigned[..],
            [MetadataRecord::Partition { partition, registration, .. }]
                if partition.0 == 2 && registration.leader == BrokerId(3)
        ));
        let refusal = add_partitions(&image, "orders", 4, Some(&[vec![BrokerId(3), BrokerId(1)]]))
            .unwrap_err();
        assert_eq!(refusal.error, ErrorCode::INVALID_REPLICA_ASSIGNMENT);
        assert_eq!(
            refusal.message,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
        );
        let refusal = add_partitions(&image, "orders", 3, Some(&[vec![BrokerId(3)]])).unwrap_err();
        assert_eq!(refusal.error, ErrorCode::INVALID_REPLICA_ASSIGNMENT);
        // An empty list is not "place them" (that is null), as in Kafka.
        let refusal = add_partitions(&image, "orders", 3, Some(&[])).unwrap_err();
        assert_eq!(
            (refusal.error, refusal.message.as_str()),
            (
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "Attempted to add 1 additional partition(s), but only 0 assignment(s) were specified."
            )
        );
    }

    #[test]
    fn partitions_only_grow() {
        let image = with_topic(3, 1);
        for (total, message) in [
            (
                2,
                "The topic orders currently has 3 partition(s); 2 would not be an increase.",
            ),
            (3, "Topic already has 3 partition(s)."),
        ] {
            let refusal = add_partitions(&image, "orders", total, None).unwrap_err();
            assert_eq!(refusal.error, ErrorCode::INVALID_PARTITIONS);
            assert_eq!(refusal.message, message);
        }
        assert_eq!(
            add_partitions(&image, "nope", 4, None).unwrap_err().error,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        );
    }

    #[test]
    fn config_changes_become_records_of_what_changed() {
        let image = with_topic(1, 1);
        let defaults = LogConfig::default();
        let set =
            |key: &str, value: &str| (key.to_owned(), ConfigOperation::Set(Some(value.into())));
        let records = alter_topic_configs(
            &image,
            "orders",
            &[
                set("cleanup.policy", "compact"),
                set("retention.ms", "60000"),
            ],
            false,
            &defaults,
        )
        .unwrap();
        assert_eq!(
            records,
            vec![MetadataRecord::TopicConfig {
                topic: "orders".into(),
                key: "cleanup.policy".into(),
                value: Some("compact".into()),
            }]
        );
        // AlterConfigs replaces: retention.ms goes, segment.ms comes.
        let records = alter_topic_configs(
            &image,
            "orders",
            &[set("segment.ms", "1000")],
            true,
            &defaults,
        )
        .unwrap();
        assert_eq!(
            records,
            vec![
                MetadataRecord::TopicConfig {
                    topic: "orders".into(),
                    key: "retention.ms".into(),
                    value: None,
                },
                MetadataRecord::TopicConfig {
                    topic: "orders".into(),
                    key: "segment.ms".into(),
                    value: Some("1000".into()),
                },
            ]
        );
    }

    #[test]
    fn bad_configs_are_invalid_config() {
        let image = with_topic(1, 1);
        let defaults = LogConfig::default();
        for (key, value) in [("no.such.config", "1"), ("retention.ms", "soon")] {
            let refusal = alter_topic_configs(
                &image,
                "orders",
                &[(key.into(), ConfigOperation::Set(Some(value.into())))],
                false,
                &defaults,
            )
            .unwrap_err();
            assert_eq!(refusal.error, ErrorCode::INVALID_CONFIG, "{key}");
        }
    }
}
