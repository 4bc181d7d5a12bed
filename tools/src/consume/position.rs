//! Start positions turned into offsets with ListOffsets
//! (`Cluster::offsets`): earliest (-2), latest (-1), or a time, where a
//! partition with no record at or after the time (ListOffsets answers -1)
//! starts at its end, as kafka-console-consumer does.

use std::collections::BTreeMap;

use brook_shards::client::PartitionLeader;

use crate::cli::{CliError, Session, session::within, time};
use crate::consume::assign::Start;
use crate::consume::decode::Isolation;

/// The ListOffsets timestamp a start needs, if any.
fn list_time(start: Start) -> Option<i64> {
    match start {
        Start::Earliest => Some(time::EARLIEST),
        Start::Latest => Some(time::LATEST),
        Start::Timestamp(millis) => Some(millis),
        Start::Offset(_) => None,
    }
}

/// Each partition of `starts` at an offset; `leaders` must cover them.
/// "Latest" is the last stable offset for a read_committed consumer.
pub async fn resolve(
    session: &Session,
    topic: &str,
    leaders: &[PartitionLeader],
    starts: &BTreeMap<i32, Start>,
    isolation: Isolation,
) -> Result<BTreeMap<i32, i64>, CliError> {
    let mut offsets = BTreeMap::new();
    let mut by_time: BTreeMap<i64, Vec<PartitionLeader>> = BTreeMap::new();
    for (partition, start) in starts {
        match list_time(*start) {
            None => {
                if let Start::Offset(offset) = start {
                    offsets.insert(*partition, *offset);
                }
            }
            Some(millis) => {
                let leader = leaders
                    .iter()
                    .find(|leader| leader.partition == *partition)
                    .ok_or_else(|| {
                        CliError::Failed(format!("{topic}-{partition} has no known leader"))
                    })?;
                by_time.entry(millis).or_default().push(*leader);
            }
        }
    }
    let mut past_the_end = Vec::new();
    for (millis, leaders) in by_time {
        for (partition, offset) in list(session, topic, &leaders, millis, isolation).await? {
            if offset >= 0 {
                offsets.insert(partition, offset);
            } else if let Some(leader) = leaders.iter().find(|l| l.partition == partition) {
                past_the_end.push(*leader);
            }
        }
    }
    if !past_the_end.is_empty() {
        offsets.extend(list(session, topic, &past_the_end, time::LATEST, isolation).await?);
    }
    Ok(offsets)
}

async fn list(
    session: &Session,
    topic: &str,
    leaders: &[PartitionLeader],
    millis: i64,
    isolation: Isolation,
) -> Result<BTreeMap<i32, i64>, CliError> {
    let cluster = session.cluster();
    within(
        || format!("the offsets of {topic}"),
        session.timeout(),
        async {
            Ok(cluster
                .offsets_isolated(topic, leaders, millis, isolation.level())
                .await?)
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_offsets_skip_list_offsets() {
        assert_eq!(list_time(Start::Earliest), Some(-2));
        assert_eq!(list_time(Start::Latest), Some(-1));
        assert_eq!(list_time(Start::Timestamp(1_000)), Some(1_000));
        assert_eq!(list_time(Start::Offset(7)), None);
    }
}
