//! The cluster as the load generator sees it: brokers from Metadata, the
//! leader of every partition of the workload's topics, topic creation, and
//! the offsets a consumer starts from.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{ClientError, Connection};

/// Versions the client speaks (every Kafka 4.x broker serves them).
pub const METADATA_VERSION: i16 = 12;
pub const CREATE_TOPICS_VERSION: i16 = 7;
pub const LIST_OFFSETS_VERSION: i16 = 7;
/// Kafka's TOPIC_ALREADY_EXISTS.
const TOPIC_ALREADY_EXISTS: i16 = 36;

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
    connections: std::cell::RefCell<BTreeMap<SocketAddr, Rc<Connection>>>,
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
        }
    }

    /// The connection to `broker`, opened on first use.
    pub async fn connection(&self, broker: SocketAddr) -> Result<Rc<Connection>, ClientError> {
        if let Some(connection) = self.connections.borrow().get(&broker) {
            return Ok(connection.clone());
        }
        let connection = Connection::connect(broker, &self.client_id).await?;
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
        Connection::connect(broker, &self.client_id).await
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
                            .with_replication_factor(1)
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
        let connection = self.bootstrap_connection().await?;
        let response: CreateTopicsResponse = connection
            .request(ApiKey::CreateTopics, CREATE_TOPICS_VERSION, &request)
            .await?;
        for topic in response.topics {
            if topic.error_code != 0 && topic.error_code != TOPIC_ALREADY_EXISTS {
                return Err(ClientError::Kafka {
                    what: format!("creating topic {}", topic.name.as_str()),
                    code: topic.error_code,
                });
            }
        }
        Ok(())
    }

    /// The leader of every partition of `topic`, by partition number.
    pub async fn leaders(&self, topic: &str) -> Result<Vec<PartitionLeader>, ClientError> {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic))),
            ]))
            .with_allow_auto_topic_creation(false);
        let connection = self.bootstrap_connection().await?;
        let response: MetadataResponse = connection
            .request(ApiKey::Metadata, METADATA_VERSION, &request)
            .await?;
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
        let mut by_broker: BTreeMap<SocketAddr, Vec<i32>> = BTreeMap::new();
        for leader in leaders {
            by_broker
                .entry(leader.broker)
                .or_default()
                .push(leader.partition);
        }
        let mut offsets = BTreeMap::new();
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
            let connection = self.connection(broker).await?;
            let response: ListOffsetsResponse = connection
                .request(ApiKey::ListOffsets, LIST_OFFSETS_VERSION, &request)
                .await?;
            for partition in response
                .topics
                .into_iter()
                .flat_map(|topic| topic.partitions)
            {
                if partition.error_code != 0 {
                    return Err(ClientError::Kafka {
                        what: format!("offsets of {topic}-{}", partition.partition_index),
                        code: partition.error_code,
                    });
                }
                offsets.insert(partition.partition_index, partition.offset);
            }
        }
        Ok(offsets)
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
