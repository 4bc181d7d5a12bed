//! The cluster as a client sees it: brokers from Metadata, the leader of
//! every partition of a topic, topic creation, and the offsets a consumer
//! starts from. Connections are opened on first use, negotiate versions
//! (ApiVersions), and are opened again after a failure with a backoff
//! (`reconnect.backoff.ms` 50 doubling to `reconnect.backoff.max.ms` 1 s,
//! as Kafka's clients); each request has a deadline
//! ([`REQUEST_TIMEOUT`], Kafka's `request.timeout.ms`); a partition whose
//! leader moved (NOT_LEADER_OR_FOLLOWER and its kin) is asked again of the
//! leader fresh metadata names.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::client::{ClientError, Connection};

/// Versions the client speaks (every Kafka 4.x broker serves them).
pub const METADATA_VERSION: i16 = 12;
pub const CREATE_TOPICS_VERSION: i16 = 7;
pub const LIST_OFFSETS_VERSION: i16 = 7;
/// Kafka's TOPIC_ALREADY_EXISTS.
const TOPIC_ALREADY_EXISTS: i16 = 36;
/// Kafka's NOT_CONTROLLER.
const NOT_CONTROLLER: i16 = 41;
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const OFFSET_NOT_AVAILABLE: i16 = 78;
pub const DELETE_TOPICS_VERSION: i16 = 6;
pub const CREATE_PARTITIONS_VERSION: i16 = 3;
/// Kafka's `request.timeout.ms` default.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Kafka's `reconnect.backoff.ms` and `reconnect.backoff.max.ms` defaults.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(50);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Times a request whose partitions' leaders moved is asked again.
const LEADER_RETRIES: usize = 10;
/// Pause before asking fresh metadata for a moved leader.
const LEADER_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long a new topic's metadata and offsets are asked again until every
/// partition has a serving leader: a broker may learn of a topic after its
/// CreateTopics answered, and a leader be named before it serves (Kafka's
/// brokers create a hundred partitions' logs in seconds); Kafka's clients
/// wait `default.api.timeout.ms` (60 s) for the same.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a partition error means "ask its leader again" (the leader
/// moved, or is being elected): NOT_LEADER_OR_FOLLOWER,
/// LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH.
pub fn leader_moved(code: i16) -> bool {
    matches!(code, 6 | 5 | 74 | 75)
}

/// How long to wait before connecting again after `failures` failures in
/// a row: Kafka's exponential reconnect backoff.
pub fn reconnect_backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    RECONNECT_BACKOFF
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(RECONNECT_BACKOFF_MAX)
}

/// `future`, or [`ClientError::TimedOut`] after `limit`.
pub async fn within<T>(
    what: &str,
    limit: Duration,
    future: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    futures::select_biased! {
        result = future.fuse() => result,
        () = glommio::timer::sleep(limit).fuse() => Err(ClientError::TimedOut {
            what: what.to_owned(),
            after: limit,
        }),
    }
}

/// Where a partition lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionLeader {
    pub partition: i32,
    pub broker: SocketAddr,
}

/// One connection per broker, opened as needed, and the partitions' leaders.
#[derive(Debug)]
pub struct Cluster {
    client_id: String,
    bootstrap: SocketAddr,
    connections: RefCell<BTreeMap<SocketAddr, Rc<Connection>>>,
    /// Per broker: connection failures in a row and when the last was.
    failures: RefCell<BTreeMap<SocketAddr, (u32, Instant)>>,
    /// Brokers the last Metadata named, asked when the bootstrap is not.
    known: RefCell<Vec<SocketAddr>>,
    request_timeout: std::cell::Cell<Duration>,
}

pub fn resolve(address: &str) -> Result<SocketAddr, ClientError> {
    address
        .to_socket_addrs()
        .map_err(|_| ClientError::Resolve(address.to_owned()))?
        .next()
        .ok_or_else(|| ClientError::Resolve(address.to_owned()))
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

impl Cluster {
    pub fn new(bootstrap: SocketAddr, client_id: &str) -> Cluster {
        Cluster {
            client_id: client_id.to_owned(),
            bootstrap,
            connections: Default::default(),
            failures: Default::default(),
            known: Default::default(),
            request_timeout: std::cell::Cell::new(REQUEST_TIMEOUT),
        }
    }

    /// Each request's deadline from now on.
    pub fn set_request_timeout(&self, timeout: Duration) {
        self.request_timeout.set(timeout);
    }

    pub fn request_timeout(&self) -> Duration {
        self.request_timeout.get()
    }

    /// The connection to `broker`, opened (again, once it failed) on use.
    pub async fn connection(&self, broker: SocketAddr) -> Result<Rc<Connection>, ClientError> {
        let cached = self.connections.borrow().get(&broker).cloned();
        match cached {
            Some(connection) if !connection.is_failed() => return Ok(connection),
            Some(_) => {
                self.connections.borrow_mut().remove(&broker);
            }
            None => {}
        }
        let connection = self.open(broker).await?;
        // Another task may have connected while this one waited: keep one.
        let kept = self
            .connections
            .borrow_mut()
            .entry(broker)
            .or_insert_with(|| connection.clone())
            .clone();
        if !Rc::ptr_eq(&kept, &connection) {
            connection.close().await;
        }
        Ok(kept)
    }

    /// A dedicated connection (a consumer's fetches must not queue behind a
    /// producer's requests).
    pub async fn own_connection(&self, broker: SocketAddr) -> Result<Rc<Connection>, ClientError> {
        self.open(broker).await
    }

    /// Connects (after the backoff its earlier failures call for) and
    /// negotiates versions, within the request timeout.
    async fn open(&self, broker: SocketAddr) -> Result<Rc<Connection>, ClientError> {
        let backoff = self.failures.borrow().get(&broker).map(|(failures, at)| {
            (*at + reconnect_backoff(*failures)).saturating_duration_since(Instant::now())
        });
        if let Some(wait) = backoff.filter(|wait| !wait.is_zero()) {
            glommio::timer::sleep(wait).await;
        }
        let opened = within("connecting", self.request_timeout(), async {
            let connection = Connection::connect(broker, &self.client_id).await?;
            if let Err(error) = connection.negotiate().await {
                connection.close().await;
                return Err(error);
            }
            Ok(connection)
        })
        .await;
        let mut failures = self.failures.borrow_mut();
        match &opened {
            Ok(_) => {
                failures.remove(&broker);
            }
            Err(_) => {
                let entry = failures.entry(broker).or_insert((0, Instant::now()));
                *entry = (entry.0.saturating_add(1), Instant::now());
            }
        }
        opened
    }

    /// Metadata for `request` from the bootstrap broker or, when it does
    /// not answer, from another broker an earlier answer named.
    pub async fn metadata(
        &self,
        request: &MetadataRequest,
    ) -> Result<MetadataResponse, ClientError> {
        let mut candidates = vec![self.bootstrap];
        candidates.extend(
            self.known
                .borrow()
                .iter()
                .filter(|known| **known != self.bootstrap),
        );
        let mut last_error = None;
        for broker in candidates {
            let asked = within("Metadata", self.request_timeout(), async {
                let connection = self.connection(broker).await?;
                connection
                    .request::<_, MetadataResponse>(ApiKey::Metadata, METADATA_VERSION, request)
                    .await
            })
            .await;
            match asked {
                Ok(response) => {
                    let known: Vec<SocketAddr> = response
                        .brokers
                        .iter()
                        .filter_map(|broker| {
                            resolve(&format!("{}:{}", broker.host.as_str(), broker.port)).ok()
                        })
                        .collect();
                    if !known.is_empty() {
                        *self.known.borrow_mut() = known;
                    }
                    return Ok(response);
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or(ClientError::Closed(self.bootstrap)))
    }

    pub async fn bootstrap_connection(&self) -> Result<Rc<Connection>, ClientError> {
        self.connection(self.bootstrap).await
    }

    /// Creates `topics` with `partitions` each (replication 1); existing
    /// topics are fine.
    pub async fn create_topics(
        &self,
        topics: &[String],
        partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
    ) -> Result<(), ClientError> {
        use kafka_protocol::messages::create_topics_request::CreatableTopicConfig;
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(
                topics
                    .iter()
                    .map(|name| {
                        CreatableTopic::default()
                            .with_name(topic_name(name))
                            .with_num_partitions(partitions)
                            .with_replication_factor(replication_factor)
                            .with_configs(
                                configs
                                    .iter()
                                    .map(|(key, value)| {
                                        CreatableTopicConfig::default()
                                            .with_name(StrBytes::from_string(key.clone()))
                                            .with_value(Some(StrBytes::from_string(value.clone())))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        self.topics_request(
            ApiKey::CreateTopics,
            CREATE_TOPICS_VERSION,
            &request,
            ("creating topic", TOPIC_ALREADY_EXISTS),
            |response: CreateTopicsResponse| {
                response
                    .topics
                    .into_iter()
                    .map(|topic| (topic.name.to_string(), topic.error_code))
                    .collect()
            },
        )
        .await
    }

    /// An admin request about topics to the bootstrap broker, and each
    /// topic's code from its answer (`codes`): 0 and `what.1` pass,
    /// NOT_CONTROLLER (the controller is moving) is asked again after a
    /// pause, as Kafka's admin client does; any other fails.
    async fn topics_request<Q: Encodable, R: Decodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Q,
        what: (&str, i16),
        codes: impl Fn(R) -> Vec<(String, i16)>,
    ) -> Result<(), ClientError> {
        let (doing, harmless) = what;
        for attempt in 1..=LEADER_RETRIES {
            let response: R = within(doing, self.request_timeout() * 2, async {
                let connection = self.bootstrap_connection().await?;
                connection.request(api_key, version, request).await
            })
            .await?;
            let failed = codes(response)
                .into_iter()
                .find(|(_, code)| *code != 0 && *code != harmless);
            match failed {
                None => return Ok(()),
                Some((_, NOT_CONTROLLER)) if attempt < LEADER_RETRIES => {
                    glommio::timer::sleep(LEADER_RETRY_PAUSE).await;
                }
                Some((name, code)) => {
                    return Err(ClientError::Kafka {
                        what: format!("{doing} {name}"),
                        code,
                    });
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Grows `topic` to `total` partitions (CreatePartitions).
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<(), ClientError> {
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(vec![
                // No assignments is null, as Kafka's admin client sends it:
                // the broker places the new partitions. The generated
                // default, an empty list, asks for none to be added, which
                // Kafka refuses with INVALID_REPLICA_ASSIGNMENT.
                CreatePartitionsTopic::default()
                    .with_name(topic_name(topic))
                    .with_count(total)
                    .with_assignments(None),
            ]);
        self.topics_request(
            ApiKey::CreatePartitions,
            CREATE_PARTITIONS_VERSION,
            &request,
            // No code passes but 0: INVALID_PARTITIONS would mean the topic
            // already has that many, which the caller did not expect.
            ("adding partitions to", 0),
            |response: CreatePartitionsResponse| {
                response
                    .results
                    .into_iter()
                    .map(|result| (result.name.to_string(), result.error_code))
                    .collect()
            },
        )
        .await
    }

    /// Deletes `topics` (one that does not exist is no error).
    pub async fn delete_topics(&self, topics: &[String]) -> Result<(), ClientError> {
        use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
        let request = DeleteTopicsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(
                topics
                    .iter()
                    .map(|name| DeleteTopicState::default().with_name(Some(topic_name(name))))
                    .collect(),
            );
        self.topics_request(
            ApiKey::DeleteTopics,
            DELETE_TOPICS_VERSION,
            &request,
            ("deleting topic", UNKNOWN_TOPIC_OR_PARTITION),
            |response: DeleteTopicsResponse| {
                response
                    .responses
                    .into_iter()
                    .map(|topic| {
                        let name = topic.name.map_or_else(String::new, |name| name.to_string());
                        (name, topic.error_code)
                    })
                    .collect()
            },
        )
        .await
    }

    /// As [`Cluster::leaders`] for a topic just created: asked again while
    /// the broker does not know the topic yet or a partition has no leader.
    pub async fn created_leaders(&self, topic: &str) -> Result<Vec<PartitionLeader>, ClientError> {
        let deadline = std::time::Instant::now() + SETTLE_TIMEOUT;
        loop {
            match self.leaders(topic).await {
                Err(ClientError::Kafka { code, .. })
                    if (code == UNKNOWN_TOPIC_OR_PARTITION || leader_moved(code))
                        && std::time::Instant::now() < deadline => {}
                Err(ClientError::Protocol(_)) if std::time::Instant::now() < deadline => {}
                answered => return answered,
            }
            glommio::timer::sleep(LEADER_RETRY_PAUSE).await;
        }
    }

    /// The leader of every partition of `topic`, by partition number.
    pub async fn leaders(&self, topic: &str) -> Result<Vec<PartitionLeader>, ClientError> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic))),
            ]))
            .with_allow_auto_topic_creation(false);
        let response = self.metadata(&request).await?;
        let brokers: BTreeMap<i32, SocketAddr> = response
            .brokers
            .iter()
            .filter_map(|broker| {
                let address = format!("{}:{}", broker.host.as_str(), broker.port);
                resolve(&address)
                    .ok()
                    .map(|address| (broker.node_id.0, address))
            })
            .collect();
        let found = response
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol(format!("no metadata for {topic}")))?;
        if found.error_code != 0 {
            return Err(ClientError::Kafka {
                what: format!("metadata of {topic}"),
                code: found.error_code,
            });
        }
        let mut leaders: Vec<PartitionLeader> = found
            .partitions
            .iter()
            .map(|partition| {
                let broker = brokers
                    .get(&partition.leader_id.0)
                    .copied()
                    .ok_or_else(|| {
                        ClientError::Protocol(format!(
                            "{topic}-{} has no known leader",
                            partition.partition_index
                        ))
                    })?;
                Ok(PartitionLeader {
                    partition: partition.partition_index,
                    broker,
                })
            })
            .collect::<Result<_, ClientError>>()?;
        leaders.sort_by_key(|leader| leader.partition);
        Ok(leaders)
    }

    /// Each partition's offset at `timestamp` (-1 latest, -2 earliest).
    pub async fn offsets(
        &self,
        topic: &str,
        leaders: &[PartitionLeader],
        timestamp: i64,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        self.offsets_isolated(topic, leaders, timestamp, 0).await
    }

    /// As [`Cluster::offsets`] for a consumer of `isolation_level` (1,
    /// read_committed: "latest" is the last stable offset).
    pub async fn offsets_isolated(
        &self,
        topic: &str,
        leaders: &[PartitionLeader],
        timestamp: i64,
        isolation_level: i8,
    ) -> Result<BTreeMap<i32, i64>, ClientError> {
        let mut offsets = BTreeMap::new();
        let mut asked: Vec<PartitionLeader> = leaders.to_vec();
        let deadline = std::time::Instant::now() + SETTLE_TIMEOUT;
        while std::time::Instant::now() < deadline {
            let moved = self
                .offsets_from_leaders(topic, &asked, timestamp, isolation_level, &mut offsets)
                .await?;
            if moved.is_empty() {
                return Ok(offsets);
            }
            glommio::timer::sleep(LEADER_RETRY_PAUSE).await;
            asked = self
                .leaders(topic)
                .await?
                .into_iter()
                .filter(|leader| moved.contains(&leader.partition))
                .collect();
        }
        Err(ClientError::Protocol(format!(
            "the leaders of {topic} kept moving"
        )))
    }

    /// One ListOffsets per leader; the partitions to ask again (their
    /// leader moved, or cannot answer yet).
    async fn offsets_from_leaders(
        &self,
        topic: &str,
        leaders: &[PartitionLeader],
        timestamp: i64,
        isolation_level: i8,
        offsets: &mut BTreeMap<i32, i64>,
    ) -> Result<Vec<i32>, ClientError> {
        let mut by_broker: BTreeMap<SocketAddr, Vec<i32>> = BTreeMap::new();
        for leader in leaders {
            by_broker
                .entry(leader.broker)
                .or_default()
                .push(leader.partition);
        }
        let mut moved = Vec::new();
        for (broker, partitions) in by_broker {
            let request = ListOffsetsRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_isolation_level(isolation_level)
                .with_topics(vec![
                    ListOffsetsTopic::default()
                        .with_name(topic_name(topic))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|partition| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(*partition)
                                        .with_timestamp(timestamp)
                                })
                                .collect(),
                        ),
                ]);
            let response: ListOffsetsResponse =
                within("ListOffsets", self.request_timeout(), async {
                    let connection = self.connection(broker).await?;
                    connection
                        .request(ApiKey::ListOffsets, LIST_OFFSETS_VERSION, &request)
                        .await
                })
                .await?;
            for partition in response
                .topics
                .into_iter()
                .flat_map(|topic| topic.partitions)
            {
                // A leader that has not served a topic just created yet
                // says UNKNOWN_TOPIC_OR_PARTITION, and a new leader whose
                // HW is behind its epoch's start OFFSET_NOT_AVAILABLE
                // (KIP-207): both retriable, as in Kafka.
                if leader_moved(partition.error_code)
                    || partition.error_code == UNKNOWN_TOPIC_OR_PARTITION
                    || partition.error_code == OFFSET_NOT_AVAILABLE
                {
                    moved.push(partition.partition_index);
                    continue;
                }
                if partition.error_code != 0 {
                    return Err(ClientError::Kafka {
                        what: format!("offsets of {topic}-{}", partition.partition_index),
                        code: partition.error_code,
                    });
                }
                offsets.insert(partition.partition_index, partition.offset);
            }
        }
        Ok(moved)
    }

    pub async fn close(&self) {
        let connections: Vec<_> = std::mem::take(&mut *self.connections.borrow_mut())
            .into_values()
            .collect();
        for connection in connections {
            connection.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_as_kafkas_clients_do() {
        let waits: Vec<u64> = (0..8)
            .map(|failures| reconnect_backoff(failures).as_millis() as u64)
            .collect();
        assert_eq!(waits, vec![0, 50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(reconnect_backoff(u32::MAX), RECONNECT_BACKOFF_MAX);
    }

    #[test]
    fn moved_leaders_are_asked_again_other_errors_are_not() {
        for code in [5, 6, 74, 75] {
            assert!(leader_moved(code), "{code}");
        }
        for code in [0, 3, 1, 7] {
            assert!(!leader_moved(code), "{code}");
        }
    }
}
