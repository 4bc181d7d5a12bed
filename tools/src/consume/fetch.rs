//! Fetch v12 (topic names, no fetch sessions) to every leader at once, each
//! waiting at most [`FETCH_WAIT_MAX`] for data so the loop sees Ctrl-C and
//! its idle timer often. A partition whose leader moved (or is not known
//! yet) is retried after fresh metadata until `--timeout` has passed; an
//! offset out of range is handed back for the caller to reset, as Kafka's
//! auto.offset.reset does; any other error code ends the command.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_shards::client::PartitionLeader;
use brook_shards::client::cluster::topic_name;
use futures::future::join_all;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};

use crate::cli::{CliError, Session, session::within};
use crate::consume::decode::{Aborted, ConsumedRecord, Isolation, decode_partition};

/// Fetch v12: the last version that names topics (v13 uses topic ids).
const FETCH_VERSION: i16 = 12;
/// The longest one fetch waits for data.
pub const FETCH_WAIT_MAX: Duration = Duration::from_millis(500);
/// Kafka's fetch.max.bytes and max.partition.fetch.bytes defaults (a batch
/// larger than the partition limit still comes whole, KIP-74).
const FETCH_BYTES_MAX: i32 = 50 << 20;
const PARTITION_FETCH_BYTES_MAX: i32 = 1 << 20;
/// Pause before asking again after a leader moved.
const LEADER_RETRY: Duration = Duration::from_millis(100);

/// Kafka's error codes a fetch meets while leadership moves: retried.
const OFFSET_OUT_OF_RANGE: i16 = 1;
const RETRIABLE: [i16; 7] = [
    3,   // UNKNOWN_TOPIC_OR_PARTITION (a new partition's metadata)
    5,   // LEADER_NOT_AVAILABLE
    6,   // NOT_LEADER_OR_FOLLOWER
    56,  // KAFKA_STORAGE_ERROR
    74,  // FENCED_LEADER_EPOCH
    75,  // UNKNOWN_LEADER_EPOCH
    100, // UNKNOWN_TOPIC_ID
];

/// One partition's share of a fetch.
#[derive(Debug)]
pub struct Fetched {
    pub partition: i32,
    pub records: Vec<ConsumedRecord>,
    /// Where the partition's next fetch starts once these are consumed.
    pub next_offset: i64,
}

/// What one round of fetches brought.
#[derive(Debug, Default)]
pub struct Round {
    /// In partition order.
    pub fetched: Vec<Fetched>,
    /// Partitions whose position is out of range, to be reset.
    pub out_of_range: Vec<i32>,
}

/// Fetches one topic's partitions from their leaders; lives on the
/// command's executor.
#[derive(Debug)]
pub struct Fetcher {
    session: Rc<Session>,
    topic: String,
    isolation: Isolation,
    leaders: Vec<PartitionLeader>,
    /// Since when some partition has had no leader that answers.
    failing_since: Option<Instant>,
}

impl Fetcher {
    pub fn new(
        session: Rc<Session>,
        topic: &str,
        isolation: Isolation,
        leaders: Vec<PartitionLeader>,
    ) -> Fetcher {
        Fetcher {
            session,
            topic: topic.to_owned(),
            isolation,
            leaders,
            failing_since: None,
        }
    }

    pub fn leaders(&self) -> &[PartitionLeader] {
        &self.leaders
    }

    /// One fetch per leader of the partitions in `positions`, at once.
    pub async fn fetch(&mut self, positions: &BTreeMap<i32, i64>) -> Result<Round, CliError> {
        let mut by_broker: BTreeMap<SocketAddr, Vec<(i32, i64)>> = BTreeMap::new();
        let mut leaderless = false;
        for (partition, offset) in positions {
            match self.leaders.iter().find(|l| l.partition == *partition) {
                Some(leader) => by_broker
                    .entry(leader.broker)
                    .or_default()
                    .push((*partition, *offset)),
                None => leaderless = true,
            }
        }
        let session = self.session.clone();
        let answers = join_all(by_broker.iter().map(|(broker, partitions)| {
            let request = self.request(partitions);
            let session = session.clone();
            async move {
                session
                    .request::<_, FetchResponse>(*broker, ApiKey::Fetch, FETCH_VERSION, &request)
                    .await
            }
        }))
        .await;
        let mut round = Round::default();
        let mut retry = leaderless;
        for answer in answers {
            let response = answer?;
            CliError::check(response.error_code, || format!("fetching {}", self.topic))?;
            for data in response.responses.into_iter().flat_map(|t| t.partitions) {
                let Some(offset) = positions.get(&data.partition_index).copied() else {
                    continue;
                };
                match data.error_code {
                    0 => round.fetched.push(self.decode(&data, offset)?),
                    OFFSET_OUT_OF_RANGE => round.out_of_range.push(data.partition_index),
                    code if RETRIABLE.contains(&code) => retry = true,
                    code => {
                        return Err(CliError::Kafka {
                            what: format!("fetching {}-{}", self.topic, data.partition_index),
                            code,
                        });
                    }
                }
            }
        }
        round.fetched.sort_by_key(|fetched| fetched.partition);
        if retry {
            self.refresh_leaders().await?;
        } else {
            self.failing_since = None;
        }
        Ok(round)
    }

    fn request(&self, partitions: &[(i32, i64)]) -> FetchRequest {
        let max_wait = FETCH_WAIT_MAX.min(self.session.timeout() / 2);
        let partitions = partitions
            .iter()
            .map(|(partition, offset)| {
                FetchPartition::default()
                    .with_partition(*partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(*offset)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(PARTITION_FETCH_BYTES_MAX)
            })
            .collect();
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait.as_millis() as i32)
            .with_min_bytes(1)
            .with_max_bytes(FETCH_BYTES_MAX)
            .with_isolation_level(self.isolation.level())
            // No fetch session: every fetch names its partitions (epoch -1).
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic_name(&self.topic))
                    .with_partitions(partitions),
            ])
    }

    fn decode(&self, data: &PartitionData, offset: i64) -> Result<Fetched, CliError> {
        let aborted: Vec<Aborted> = data
            .aborted_transactions
            .iter()
            .flatten()
            .map(|aborted| Aborted {
                producer_id: aborted.producer_id.0,
                first_offset: aborted.first_offset,
            })
            .collect();
        let bytes = data.records.clone().unwrap_or_default();
        let decoded = decode_partition(
            data.partition_index,
            &bytes,
            offset,
            &aborted,
            self.isolation,
        )
        .map_err(|error| CliError::Failed(format!("reading {}: {error}", self.topic)))?;
        Ok(Fetched {
            partition: data.partition_index,
            records: decoded.records,
            next_offset: decoded.next_offset,
        })
    }

    /// New leaders after a pause; fails once leaders have been missing for
    /// longer than `--timeout`.
    async fn refresh_leaders(&mut self) -> Result<(), CliError> {
        let timeout = self.session.timeout();
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() > timeout {
            return Err(CliError::Timeout {
                what: format!("a leader for every partition of {}", self.topic),
                timeout,
            });
        }
        glommio::timer::sleep(LEADER_RETRY).await;
        match self.update_leaders().await {
            Ok(()) => Ok(()),
            // Metadata may lag an election: asked again next round.
            Err(_) if since.elapsed() <= timeout => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The topic's leaders now (a rebalance may bring partitions created
    /// since the start).
    pub async fn update_leaders(&mut self) -> Result<(), CliError> {
        let session = self.session.clone();
        let topic = self.topic.clone();
        self.leaders = within(
            || format!("the metadata of {topic}"),
            session.timeout(),
            async { Ok(session.cluster().leaders(&topic).await?) },
        )
        .await?;
        Ok(())
    }
}
