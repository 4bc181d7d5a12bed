//! A member's offsets: OffsetFetch (v8) for where its partitions start,
//! OffsetCommit (v8, with the generation and member id) for what it printed.

use std::collections::BTreeMap;
use std::time::Instant;

use brook_shards::client::cluster::topic_name;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse,
};

use super::{
    COORDINATOR_ATTEMPTS_MAX, COORDINATOR_MOVED, GENERATION_OVER, Member, UNSTABLE_OFFSET_COMMIT,
    text,
};
use crate::cli::CliError;

const OFFSET_FETCH_VERSION: i16 = 8;
const OFFSET_COMMIT_VERSION: i16 = 8;

impl Member {
    /// The committed offset of each of `partitions` (-1: none).
    pub async fn committed(&mut self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, CliError> {
        let request = OffsetFetchRequest::default()
            .with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(text(&self.group)))
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopics::default()
                            .with_name(topic_name(&self.topic))
                            .with_partition_indexes(partitions.to_vec()),
                    ])),
            ])
            // Wait out transactional commits still pending (KIP-447).
            .with_require_stable(true);
        let started = Instant::now();
        loop {
            let response: OffsetFetchResponse = self
                .session
                .request(
                    self.coordinator,
                    ApiKey::OffsetFetch,
                    OFFSET_FETCH_VERSION,
                    &request,
                )
                .await?;
            let group = response.groups.into_iter().next().ok_or_else(|| {
                CliError::Failed(format!(
                    "OffsetFetch gave no answer for group {}",
                    self.group
                ))
            })?;
            let partitions: Vec<_> = group
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .collect();
            let code = std::iter::once(group.error_code)
                .chain(partitions.iter().map(|partition| partition.error_code))
                .find(|code| *code != 0)
                .unwrap_or(0);
            let retriable = code == UNSTABLE_OFFSET_COMMIT || COORDINATOR_MOVED.contains(&code);
            if code == 0 {
                return Ok(partitions
                    .iter()
                    .map(|partition| (partition.partition_index, partition.committed_offset))
                    .collect());
            } else if !retriable || started.elapsed() > self.session.timeout() {
                return Err(CliError::Kafka {
                    what: format!("the committed offsets of group {}", self.group),
                    code,
                });
            }
            self.rediscover().await?;
        }
    }

    /// Commits `positions` (the next offset to read, per partition) in the
    /// current generation. `false` when the generation is over: nothing was
    /// committed and the member must join again.
    pub async fn commit(&mut self, positions: &BTreeMap<i32, i64>) -> Result<bool, CliError> {
        let partitions = positions
            .iter()
            .map(|(partition, offset)| {
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(text("")))
            })
            .collect();
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_generation_id_or_member_epoch(self.generation.generation_id)
            .with_member_id(text(&self.generation.member_id))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(topic_name(&self.topic))
                    .with_partitions(partitions),
            ]);
        for _ in 0..COORDINATOR_ATTEMPTS_MAX {
            let response: OffsetCommitResponse = self
                .session
                .request(
                    self.coordinator,
                    ApiKey::OffsetCommit,
                    OFFSET_COMMIT_VERSION,
                    &request,
                )
                .await?;
            let code = response
                .topics
                .iter()
                .flat_map(|topic| &topic.partitions)
                .map(|partition| partition.error_code)
                .find(|code| *code != 0)
                .unwrap_or(0);
            match code {
                0 => return Ok(true),
                code if GENERATION_OVER.contains(&code) => {
                    self.rejoin.set(true);
                    return Ok(false);
                }
                code if COORDINATOR_MOVED.contains(&code) => self.rediscover().await?,
                code => {
                    return Err(CliError::Kafka {
                        what: format!("committing offsets of group {}", self.group),
                        code,
                    });
                }
            }
        }
        Err(CliError::Failed(format!(
            "committing offsets of group {}: the coordinator kept moving",
            self.group
        )))
    }
}
