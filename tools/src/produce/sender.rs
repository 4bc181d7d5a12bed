//! Sending sealed batches: one Produce request per leader broker with at
//! most one batch per partition, the brokers' requests in parallel, and
//! every answer awaited before the next round (simple, and it keeps each
//! partition's batches in order, which idempotence needs). Retriable
//! errors (a moved leader, a timeout, a lost connection) send the same
//! batches — same bytes, same sequence numbers — again after a backoff and
//! a metadata refresh, a few times; any other error code ends the command.
//!
//! Connections are the sender's own, not the session's shared ones, so a
//! broken one can be dropped and opened again on retry.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use brook_shards::client::Connection;
use brook_shards::client::cluster::topic_name;
use futures::future::join_all;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
};

use crate::cli::session::within;
use crate::cli::{CliError, Session};
use crate::produce::accumulator::{ProducerIdentity, Sealed};

/// Produce v9: flexible versions, served by Kafka 2.8+ and by Brook (3–11).
pub const PRODUCE_VERSION: i16 = 9;
/// InitProducerId v4 (KIP-360), served by Kafka 2.7+ and by Brook (0–5).
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;
/// Retries of a batch after its first send (Kafka retries until
/// `delivery.timeout.ms`; a tool gives up sooner and says why).
const RETRIES_MAX: u32 = 5;
/// Kafka's `retry.backoff.ms` and `retry.backoff.max.ms`.
const RETRY_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Kafka's idempotent producer asks for this transaction timeout (unused
/// without a transactional id).
const TRANSACTION_TIMEOUT_MS: i32 = 60_000;

/// Kafka error codes.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const REQUEST_TIMED_OUT: i16 = 7;
const NETWORK_EXCEPTION: i16 = 13;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
/// A retried batch the broker already has: written once, as asked.
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
const KAFKA_STORAGE_ERROR: i16 = 56;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

/// Produce errors Kafka's producer retries (its `RetriableException`s).
const RETRIABLE: [i16; 10] = [
    UNKNOWN_TOPIC_OR_PARTITION,
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    NETWORK_EXCEPTION,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KAFKA_STORAGE_ERROR,
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
];

/// Kafka's `acks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// No answer at all (offsets unknown).
    None,
    Leader,
    All,
}

impl Acks {
    /// `0`, `1`, `all` or `-1`.
    pub fn parse(text: &str) -> Result<Acks, String> {
        match text {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!("'{other}' is not 0, 1, all or -1")),
        }
    }

    fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// A batch the broker took: its records start at `base_offset` (`None`
/// with acks=0, or for a duplicate whose offset the broker did not give).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acked {
    pub partition: i32,
    pub records: i32,
    pub base_offset: Option<i64>,
}

/// Why one batch failed, and whether sending it again may work.
#[derive(Debug)]
enum Failure {
    Kafka {
        code: i16,
        message: Option<String>,
    },
    /// No answer: a lost connection, a timeout.
    Transport(String),
}

impl Failure {
    fn is_retriable(&self) -> bool {
        match self {
            Failure::Kafka { code, .. } => RETRIABLE.contains(code),
            Failure::Transport(_) => true,
        }
    }

    fn into_error(self, topic: &str, partition: i32) -> CliError {
        match self {
            Failure::Kafka { code, message } => CliError::Kafka {
                what: match message {
                    Some(message) => format!("producing to {topic}-{partition} ({message})"),
                    None => format!("producing to {topic}-{partition}"),
                },
                code,
            },
            Failure::Transport(reason) => {
                CliError::Failed(format!("producing to {topic}-{partition}: {reason}"))
            }
        }
    }
}

type Outcome = Result<Option<i64>, Failure>;

/// Where the topic's partitions are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicLayout {
    pub partitions: i32,
    /// Partitions with a known leader.
    pub leaders: BTreeMap<i32, SocketAddr>,
}

/// The topic's partitions and leaders, from Metadata (which never creates
/// the topic: an unknown one is UNKNOWN_TOPIC_OR_PARTITION).
pub async fn describe(session: &Session, topic: &str) -> Result<TopicLayout, CliError> {
    let metadata = session.metadata(Some(&[topic.to_owned()])).await?;
    let found = metadata
        .topics
        .iter()
        .find(|found| {
            found
                .name
                .as_ref()
                .is_some_and(|name| name.as_str() == topic)
        })
        .ok_or_else(|| CliError::Failed(format!("the metadata has no topic {topic}")))?;
    CliError::check(found.error_code, || format!("topic {topic}"))?;
    let mut leaders = BTreeMap::new();
    for partition in &found.partitions {
        if partition.error_code == 0 && partition.leader_id.0 >= 0 {
            let address = Session::broker_address(&metadata, partition.leader_id.0)?;
            leaders.insert(partition.partition_index, address);
        }
    }
    let partitions = i32::try_from(found.partitions.len())
        .map_err(|_| CliError::Failed(format!("topic {topic} has too many partitions")))?;
    if partitions == 0 {
        return Err(CliError::Failed(format!("topic {topic} has no partitions")));
    }
    Ok(TopicLayout {
        partitions,
        leaders,
    })
}

/// An idempotent producer's id and epoch (InitProducerId with no
/// transactional id), asking again while the broker's allocator starts.
pub async fn init_producer_id(session: &Session) -> Result<ProducerIdentity, CliError> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(TRANSACTION_TIMEOUT_MS);
    within(|| "a producer id".to_owned(), session.timeout(), async {
        loop {
            let response: InitProducerIdResponse = session
                .request(
                    session.bootstrap(),
                    ApiKey::InitProducerId,
                    INIT_PRODUCER_ID_VERSION,
                    &request,
                )
                .await?;
            if [COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE]
                .contains(&response.error_code)
            {
                glommio::timer::sleep(RETRY_BACKOFF_INITIAL).await;
                continue;
            }
            CliError::check(response.error_code, || "getting a producer id".to_owned())?;
            return Ok(ProducerIdentity {
                producer_id: response.producer_id.0,
                producer_epoch: response.producer_epoch,
            });
        }
    })
    .await
}

/// Sends batches of one topic; lives on the producing task.
#[derive(Debug)]
pub struct Sender {
    session: Rc<Session>,
    topic: String,
    acks: Acks,
    layout: TopicLayout,
    connections: BTreeMap<SocketAddr, Rc<Connection>>,
}

impl Sender {
    pub fn new(session: Rc<Session>, topic: String, acks: Acks, layout: TopicLayout) -> Sender {
        Sender {
            session,
            topic,
            acks,
            layout,
            connections: BTreeMap::new(),
        }
    }

    /// Sends `batches` (at most one per partition) until each is taken,
    /// retrying the retriable failures; the first failure that is not, or
    /// that outlasts the retries, is the error.
    pub async fn send(&mut self, batches: Vec<Sealed>) -> Result<Vec<Acked>, CliError> {
        debug_assert!(
            batches
                .windows(2)
                .all(|pair| pair[0].partition != pair[1].partition)
        );
        let mut pending = batches;
        let mut acked = Vec::with_capacity(pending.len());
        let mut backoff = RETRY_BACKOFF_INITIAL;
        let mut attempt = 0;
        loop {
            let outcomes = self.attempt(&pending).await;
            let mut retry = Vec::new();
            for (batch, outcome) in pending.into_iter().zip(outcomes) {
                match outcome {
                    Ok(base_offset) => acked.push(Acked {
                        partition: batch.partition,
                        records: batch.records,
                        base_offset,
                    }),
                    Err(failure) if failure.is_retriable() && attempt < RETRIES_MAX => {
                        retry.push(batch);
                    }
                    Err(failure) => return Err(failure.into_error(&self.topic, batch.partition)),
                }
            }
            if retry.is_empty() {
                return Ok(acked);
            }
            pending = retry;
            attempt += 1;
            glommio::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            // A failed refresh keeps the old leaders; the next attempt
            // fails with its own error if they are wrong.
            if let Ok(layout) = describe(&self.session, &self.topic).await {
                self.layout = layout;
            }
        }
    }

    /// One try: a request per leader, in parallel; an outcome per batch.
    async fn attempt(&mut self, batches: &[Sealed]) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = batches.iter().map(|_| None).collect();
        let mut by_broker: BTreeMap<SocketAddr, Vec<usize>> = BTreeMap::new();
        for (index, batch) in batches.iter().enumerate() {
            match self.layout.leaders.get(&batch.partition) {
                Some(broker) => by_broker.entry(*broker).or_default().push(index),
                None => {
                    outcomes[index] = Some(Err(Failure::Kafka {
                        code: LEADER_NOT_AVAILABLE,
                        message: None,
                    }));
                }
            }
        }
        let mut requests = Vec::with_capacity(by_broker.len());
        for (broker, indices) in by_broker {
            match self.connection(broker).await {
                Ok(connection) => requests.push((broker, indices, connection)),
                Err(error) => {
                    for index in indices {
                        outcomes[index] = Some(Err(Failure::Transport(error.to_string())));
                    }
                }
            }
        }
        let answers = join_all(requests.iter().map(|(broker, indices, connection)| {
            let batches: Vec<&Sealed> = indices.iter().map(|index| &batches[*index]).collect();
            self.produce(*broker, connection, batches)
        }))
        .await;
        for ((broker, indices, _), answer) in requests.into_iter().zip(answers) {
            match answer {
                Ok(per_batch) => {
                    for (index, outcome) in indices.into_iter().zip(per_batch) {
                        outcomes[index] = Some(outcome);
                    }
                }
                Err(reason) => {
                    // The connection may be broken: open a new one next time.
                    self.connections.remove(&broker);
                    for index in indices {
                        outcomes[index] = Some(Err(Failure::Transport(reason.clone())));
                    }
                }
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| Err(Failure::Transport("not sent".to_owned())))
            })
            .collect()
    }

    /// One Produce request to `broker`: each batch's outcome, or why there
    /// was no answer.
    async fn produce(
        &self,
        broker: SocketAddr,
        connection: &Connection,
        batches: Vec<&Sealed>,
    ) -> Result<Vec<Outcome>, String> {
        let timeout = self.session.timeout();
        let request = ProduceRequest::default()
            .with_transactional_id(None)
            .with_acks(self.acks.wire())
            .with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic_name(&self.topic))
                    .with_partition_data(
                        batches
                            .iter()
                            .map(|batch| {
                                PartitionProduceData::default()
                                    .with_index(batch.partition)
                                    .with_records(Some(batch.bytes.clone()))
                            })
                            .collect(),
                    ),
            ]);
        let what = || format!("Produce to {broker}");
        if self.acks == Acks::None {
            within(what, timeout, async {
                // acks=0: the broker never answers, so nothing waits.
                let _no_answer = connection
                    .send(ApiKey::Produce, PRODUCE_VERSION, &request, false)
                    .await?;
                Ok(())
            })
            .await
            .map_err(|error| error.to_string())?;
            return Ok(batches.iter().map(|_| Ok(None)).collect());
        }
        let response: ProduceResponse = within(what, timeout, async {
            Ok(connection
                .request(ApiKey::Produce, PRODUCE_VERSION, &request)
                .await?)
        })
        .await
        .map_err(|error| error.to_string())?;
        Ok(batches
            .iter()
            .map(|batch| self.outcome(&response, batch.partition))
            .collect())
    }

    /// What `response` says about `partition`.
    fn outcome(&self, response: &ProduceResponse, partition: i32) -> Outcome {
        let answer = response
            .responses
            .iter()
            .filter(|topic| topic.name.as_str() == self.topic)
            .flat_map(|topic| &topic.partition_responses)
            .find(|answer| answer.index == partition)
            .ok_or_else(|| Failure::Transport(format!("no answer for partition {partition}")))?;
        match answer.error_code {
            0 => Ok(Some(answer.base_offset)),
            DUPLICATE_SEQUENCE_NUMBER => {
                Ok((answer.base_offset >= 0).then_some(answer.base_offset))
            }
            code => Err(Failure::Kafka {
                code,
                message: answer
                    .error_message
                    .as_ref()
                    .map(|message| message.as_str().to_owned())
                    .filter(|message| !message.is_empty()),
            }),
        }
    }

    /// The sender's connection to `broker`, opened within the timeout.
    async fn connection(&mut self, broker: SocketAddr) -> Result<Rc<Connection>, CliError> {
        if let Some(connection) = self.connections.get(&broker) {
            return Ok(connection.clone());
        }
        let session = &self.session;
        let connection = within(|| format!("broker {broker}"), session.timeout(), async {
            Ok(session.cluster().own_connection(broker).await?)
        })
        .await?;
        self.connections.insert(broker, connection.clone());
        Ok(connection)
    }

    pub async fn close(&mut self) {
        for (_, connection) in std::mem::take(&mut self.connections) {
            connection.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_kafkas_spellings() {
        assert_eq!(Acks::parse("0"), Ok(Acks::None));
        assert_eq!(Acks::parse("1"), Ok(Acks::Leader));
        assert_eq!(Acks::parse("all"), Ok(Acks::All));
        assert_eq!(Acks::parse("-1"), Ok(Acks::All));
        assert!(Acks::parse("2").is_err());
        assert_eq!(Acks::All.wire(), -1);
    }

    #[test]
    fn kafkas_retriable_errors_are_retried_and_others_are_not() {
        let kafka = |code| Failure::Kafka {
            code,
            message: None,
        };
        assert!(kafka(NOT_LEADER_OR_FOLLOWER).is_retriable());
        assert!(kafka(REQUEST_TIMED_OUT).is_retriable());
        assert!(Failure::Transport("closed".into()).is_retriable());
        // OUT_OF_ORDER_SEQUENCE_NUMBER, MESSAGE_TOO_LARGE, CORRUPT_MESSAGE.
        for code in [45, 10, 2] {
            assert!(!kafka(code).is_retriable(), "{code}");
        }
        let error = Failure::Kafka {
            code: 10,
            message: Some("too big".into()),
        }
        .into_error("t", 2);
        assert_eq!(
            error.to_string(),
            "producing to t-2 (too big): MESSAGE_TOO_LARGE (10)"
        );
    }
}
