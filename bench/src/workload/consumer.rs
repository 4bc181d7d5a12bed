//! One consumer: fetches its partitions from their leaders (one connection
//! and one fetch in flight per broker, as Kafka consumers do, the next sent
//! before the last one's records are walked), walks every
//! record, and enters those this run produced in its ledger and the
//! end-to-end latency histogram (due at the producer → in the consumer's
//! hands).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::join_all;
use hdrhistogram::Histogram;
use kafka_protocol::messages::{ApiKey, FetchResponse};

use crate::workload::now_ns;
use crate::workload::options::{STAMP_BYTES, WorkloadOptions};
use crate::workload::stats::{Ledger, Live, Phase, latency_histogram};
use brook_shards::client::connection::{Connection, decode};
use brook_shards::client::fetch_session::{ClientSession, FetchLimits, SessionEntry};
use brook_shards::client::records::{for_each_record, next_offset_after};
use brook_shards::client::{ClientError, Cluster};

pub const FETCH_VERSION: i16 = 12;
/// How long a fetch waits at the broker for data (short: the consumer must
/// notice the end of a run).
const FETCH_WAIT_MS: i32 = 100;
/// Kafka's fetch.max.bytes default.
const FETCH_MAX_BYTES: i32 = 50 << 20;

/// A partition a consumer reads, from `next_offset` on.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub topic: String,
    pub partition: i32,
    pub broker: SocketAddr,
    pub next_offset: i64,
}

#[derive(Debug)]
pub struct ConsumerSpec {
    pub index: u32,
    pub run_id: u32,
    pub assignments: Vec<Assignment>,
    pub options: Arc<WorkloadOptions>,
}

#[derive(Debug)]
pub struct ConsumerOutcome {
    pub e2e_latency: Histogram<u64>,
    pub consumed: Ledger,
}

pub async fn run_consumer(
    spec: ConsumerSpec,
    cluster: Rc<Cluster>,
    live: Arc<Live>,
) -> Result<ConsumerOutcome, ClientError> {
    let mut by_broker: BTreeMap<SocketAddr, Vec<Assignment>> = BTreeMap::new();
    for assignment in spec.assignments {
        by_broker
            .entry(assignment.broker)
            .or_default()
            .push(assignment);
    }
    let loops = by_broker.into_iter().map(|(broker, assignments)| {
        fetch_loop(
            &cluster,
            &live,
            &spec.options,
            spec.run_id,
            broker,
            assignments,
        )
    });
    let mut outcome = ConsumerOutcome {
        e2e_latency: latency_histogram(),
        consumed: Ledger::default(),
    };
    for result in join_all(loops).await {
        let (latency, ledger) = result?;
        outcome
            .e2e_latency
            .add(&latency)
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        outcome.consumed.merge(&ledger);
    }
    Ok(outcome)
}

async fn fetch_loop(
    cluster: &Cluster,
    live: &Live,
    options: &WorkloadOptions,
    run_id: u32,
    broker: SocketAddr,
    mut assignments: Vec<Assignment>,
) -> Result<(Histogram<u64>, Ledger), ClientError> {
    let connection = cluster.own_connection(broker).await?;
    let mut latency = latency_histogram();
    let mut ledger = Ledger::default();
    let mut positions: HashMap<String, HashMap<i32, usize>> = HashMap::new();
    for (position, assignment) in assignments.iter().enumerate() {
        positions
            .entry(assignment.topic.clone())
            .or_default()
            .insert(assignment.partition, position);
    }
    let limits = FetchLimits {
        max_wait_ms: FETCH_WAIT_MS,
        max_bytes: FETCH_MAX_BYTES,
        partition_max_bytes: options.fetch_partition_bytes,
    };
    let mut session = ClientSession::new(assignments.len());
    let mut in_flight = Some(send_fetch(&connection, &mut session, &assignments, limits).await?);
    while let Some(receiver) = in_flight.take() {
        let mut body = receiver.await.map_err(|_| ClientError::Closed(broker))??;
        let response: FetchResponse = decode(&mut body, ApiKey::Fetch, FETCH_VERSION)?;
        if !session.on_response(response.error_code, response.session_id)? {
            in_flight = Some(send_fetch(&connection, &mut session, &assignments, limits).await?);
            continue;
        }
        // Where each partition reads on, from its batch headers; the next
        // fetch goes out before the records are walked, so the broker sends
        // it while this one is checked (as Kafka's consumers pipeline a
        // fetch with the application's handling of the last one).
        let mut fetched = Vec::new();
        for topic in &response.responses {
            let Some(in_topic) = positions.get(topic.topic.as_str()) else {
                continue;
            };
            for partition in &topic.partitions {
                let Some(&position) = in_topic.get(&partition.partition_index) else {
                    continue;
                };
                let assignment = &mut assignments[position];
                if partition.error_code != 0 {
                    return Err(ClientError::Kafka {
                        what: format!("fetching {}-{}", assignment.topic, assignment.partition),
                        code: partition.error_code,
                    });
                }
                let Some(records) = &partition.records else {
                    continue;
                };
                let from = assignment.next_offset;
                assignment.next_offset = next_offset_after(records, from)?;
                fetched.push((records, from, assignment.next_offset));
            }
        }
        if live.phase() != Phase::Stop {
            in_flight = Some(send_fetch(&connection, &mut session, &assignments, limits).await?);
        }
        let now = now_ns();
        let measuring = live.phase() == Phase::Measure;
        for (records, from, expected_next) in fetched {
            let (mut count, mut bytes, mut own) = (0u64, 0u64, 0u64);
            let next = for_each_record(records, from, options.check_crcs, |record| {
                let value = record.value.unwrap_or_default();
                count += 1;
                bytes += value.len() as u64;
                if value.len() < STAMP_BYTES {
                    return;
                }
                let field = |range: std::ops::Range<usize>| &value[range];
                let created = u64::from_le_bytes(field(0..8).try_into().expect("8 bytes"));
                let run = u32::from_le_bytes(field(8..12).try_into().expect("4 bytes"));
                if run != run_id {
                    return;
                }
                let producer = u32::from_le_bytes(field(12..16).try_into().expect("4 bytes"));
                let sequence = u64::from_le_bytes(field(16..24).try_into().expect("8 bytes"));
                ledger.enter(producer, sequence, crc32c::crc32c(value));
                own += 1;
                if measuring {
                    latency.saturating_record(now.saturating_sub(created).max(1_000));
                }
            })?;
            debug_assert_eq!(next, expected_next, "headers and records agree");
            Live::add(&live.consumed_records, count);
            Live::add(&live.consumed_bytes, bytes);
            Live::add(&live.consumed_own_records, own);
        }
    }
    connection.close().await;
    Ok((latency, ledger))
}

/// Sends the session's next Fetch for every assignment from its position.
async fn send_fetch(
    connection: &Connection,
    session: &mut ClientSession,
    assignments: &[Assignment],
    limits: FetchLimits,
) -> Result<oneshot::Receiver<Result<Bytes, ClientError>>, ClientError> {
    let entries = assignments.iter().map(|assignment| SessionEntry {
        topic: &assignment.topic,
        partition: assignment.partition,
        fetch_offset: assignment.next_offset,
        current_leader_epoch: -1,
        last_fetched_epoch: -1,
        log_start_offset: -1,
    });
    let request = session.request(entries, limits);
    connection
        .send(ApiKey::Fetch, FETCH_VERSION, &request, true)
        .await
}
