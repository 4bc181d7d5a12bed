//! One producer: records (stamped with when they fell due, who made them
//! and their sequence number) into per-partition batches, sent when full or
//! lingered, with a window of requests in flight per broker. Every
//! acknowledged record enters the ledger and the ack-latency histogram.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use glommio::sync::Semaphore;
use hdrhistogram::Histogram;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};

use crate::client::cluster::topic_name;
use crate::client::connection::decode;
use crate::client::records::BatchBuilder;
use crate::client::{ClientError, Cluster, PartitionLeader};
use crate::log::payload::Xorshift64;
use crate::workload::options::{STAMP_BYTES, WorkloadOptions};
use crate::workload::rate::RateLimiter;
use crate::workload::stats::{Ledger, Live, Phase, latency_histogram};
use crate::workload::{now_ns, unix_now_ms};

pub const PRODUCE_VERSION: i16 = 9;

/// One partition a producer writes to.
#[derive(Clone, Debug)]
pub struct Target {
    pub topic: String,
    pub leader: PartitionLeader,
}

#[derive(Debug)]
pub struct ProducerSpec {
    pub index: u32,
    pub run_id: u32,
    pub targets: Vec<Target>,
    /// Records per second for this producer; `None`: unthrottled.
    pub rate: Option<f64>,
    pub options: Arc<WorkloadOptions>,
}

/// What a producer hands back at the end.
#[derive(Debug)]
pub struct ProducerOutcome {
    /// Due → acknowledged, for records due in the measured window.
    pub ack_latency: Histogram<u64>,
    pub acknowledged: Ledger,
    pub errors: Vec<String>,
}

/// A batch being filled for one partition.
#[derive(Debug)]
struct OpenBatch {
    builder: BatchBuilder,
    /// Per record: when it fell due, its sequence, the CRC of its value.
    records: Vec<(u64, u64, u32)>,
    opened_ns: u64,
}

/// A sealed batch on its way.
struct SentBatch {
    target: usize,
    records: Vec<(u64, u64, u32)>,
    bytes: Bytes,
}

/// Shared between the producing loop and the tasks awaiting answers.
struct Acks {
    histogram: Histogram<u64>,
    ledger: Ledger,
    errors: Vec<String>,
}

pub async fn run_producer(
    spec: ProducerSpec,
    cluster: Rc<Cluster>,
    live: Arc<Live>,
) -> Result<ProducerOutcome, ClientError> {
    let options = spec.options.clone();
    let mut windows: BTreeMap<SocketAddr, Rc<Semaphore>> = BTreeMap::new();
    for target in &spec.targets {
        windows
            .entry(target.leader.broker)
            .or_insert_with(|| Rc::new(Semaphore::new(options.max_in_flight as u64)));
    }
    let acks = Rc::new(RefCell::new(Acks {
        histogram: latency_histogram(),
        ledger: Ledger::default(),
        errors: Vec::new(),
    }));
    let mut producer = Producer {
        spec: &spec,
        options: &options,
        cluster: &cluster,
        live: &live,
        windows: &windows,
        acks: &acks,
        targets: Rc::new(spec.targets.clone()),
        open: BTreeMap::new(),
        sticky: spec.index as usize % spec.targets.len().max(1),
        sequence: 0,
        random: Xorshift64::new(0x5eed ^ (u64::from(spec.run_id) << 32) ^ u64::from(spec.index)),
        scratch: vec![0; options.record_bytes],
        zeros: vec![0; options.record_bytes],
    };
    producer.produce().await?;
    // Every request answered: take the whole window of every broker.
    for window in windows.values() {
        let _ = window.acquire(options.max_in_flight as u64).await;
    }
    let acks = Rc::try_unwrap(acks)
        .map_err(|_| ClientError::Protocol("produce answers still pending".into()))?
        .into_inner();
    Ok(ProducerOutcome {
        ack_latency: acks.histogram,
        acknowledged: acks.ledger,
        errors: acks.errors,
    })
}

struct Producer<'a> {
    spec: &'a ProducerSpec,
    options: &'a WorkloadOptions,
    cluster: &'a Rc<Cluster>,
    live: &'a Arc<Live>,
    windows: &'a BTreeMap<SocketAddr, Rc<Semaphore>>,
    acks: &'a Rc<RefCell<Acks>>,
    /// `spec.targets`, shared with the tasks awaiting answers.
    targets: Rc<Vec<Target>>,
    open: BTreeMap<usize, OpenBatch>,
    sticky: usize,
    sequence: u64,
    random: Xorshift64,
    scratch: Vec<u8>,
    zeros: Vec<u8>,
}

impl Producer<'_> {
    async fn produce(&mut self) -> Result<(), ClientError> {
        let linger_ns = self.options.linger.as_nanos() as u64;
        let mut limiter = self
            .spec
            .rate
            .map(|per_second| RateLimiter::new(per_second, now_ns()));
        while self.live.phase() < Phase::Drain {
            match &mut limiter {
                None => {
                    // As fast as the window allows: fill the sticky batch.
                    let created = now_ns();
                    while !self.full(self.sticky) {
                        self.add_record(created);
                    }
                    let target = self.sticky;
                    self.sticky = (self.sticky + 1) % self.spec.targets.len();
                    self.send(vec![target]).await?;
                }
                Some(limiter) => {
                    let now = now_ns();
                    // Behind schedule (the window was full), records due
                    // meanwhile go out as full batches, never larger ones.
                    while let Some(due) = limiter.take(now) {
                        if self.add_record(due) {
                            break;
                        }
                    }
                    let ready: Vec<usize> = self
                        .open
                        .iter()
                        .filter(|(target, batch)| {
                            self.full(**target) || now >= batch.opened_ns + linger_ns
                        })
                        .map(|(target, _)| *target)
                        .collect();
                    if !ready.is_empty() {
                        // Kafka's sticky partitioner moves on once its
                        // batch is sent.
                        if ready.contains(&self.sticky) {
                            self.sticky = (self.sticky + 1) % self.spec.targets.len();
                        }
                        self.send(ready).await?;
                        continue;
                    }
                    let linger_left = self
                        .open
                        .values()
                        .map(|batch| (batch.opened_ns + linger_ns).saturating_sub(now))
                        .min()
                        .map_or(Duration::MAX, Duration::from_nanos);
                    let wait = limiter.wait(now).min(linger_left);
                    if wait > Duration::from_micros(20) {
                        glommio::timer::sleep(wait.min(Duration::from_millis(50))).await;
                    } else {
                        glommio::yield_if_needed().await;
                    }
                }
            }
        }
        let all: Vec<usize> = self.open.keys().copied().collect();
        if !all.is_empty() {
            self.send(all).await?;
        }
        Ok(())
    }

    /// Whether `target`'s batch cannot take another record.
    fn full(&self, target: usize) -> bool {
        self.open.get(&target).is_some_and(|batch| {
            batch.builder.size_bytes() + self.options.record_bytes + 32 > self.options.batch_bytes
        })
    }

    /// Adds one record, due at `created_ns`, to its partition's batch;
    /// returns whether that batch is now full.
    fn add_record(&mut self, created_ns: u64) -> bool {
        let sequence = self.sequence;
        self.sequence += 1;
        let key = (self.options.keys > 0)
            .then(|| (self.random.next_u64() % self.options.keys).to_be_bytes());
        let target = match &key {
            Some(key) => {
                (u64::from_be_bytes(*key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
                    % self.spec.targets.len()
            }
            None => self.sticky,
        };
        if key.is_none() && self.full(target) {
            // A throttled producer's sticky batch filled up: move on, the
            // full one goes with the next send.
            self.sticky = (self.sticky + 1) % self.spec.targets.len();
        }
        let target = if key.is_none() { self.sticky } else { target };
        let random_bytes = ((self.options.record_bytes - STAMP_BYTES) as f64
            * self.options.random_fraction) as usize;
        let value_bytes = self.options.record_bytes;
        let stamp = &mut self.scratch[..STAMP_BYTES];
        stamp[..8].copy_from_slice(&created_ns.to_le_bytes());
        stamp[8..12].copy_from_slice(&self.spec.run_id.to_le_bytes());
        stamp[12..16].copy_from_slice(&self.spec.index.to_le_bytes());
        stamp[16..24].copy_from_slice(&sequence.to_le_bytes());
        self.random
            .fill(&mut self.scratch[STAMP_BYTES..STAMP_BYTES + random_bytes]);
        let zeros = &self.zeros[..value_bytes - STAMP_BYTES - random_bytes];
        let head = &self.scratch[..STAMP_BYTES + random_bytes];
        let crc = crc32c::crc32c_append(crc32c::crc32c(head), zeros);
        let batch = self.open.entry(target).or_insert_with(|| OpenBatch {
            builder: BatchBuilder::new(self.options.batch_bytes),
            records: Vec::new(),
            opened_ns: created_ns,
        });
        batch.builder.push(
            unix_now_ms(),
            key.as_ref().map(|key| &key[..]),
            &[head, zeros],
        );
        batch.records.push((created_ns, sequence, crc));
        Live::add(&self.live.produced_records, 1);
        Live::add(&self.live.produced_bytes, value_bytes as u64);
        self.full(target)
    }

    /// Seals the batches of `targets` and sends them, one request per broker.
    async fn send(&mut self, targets: Vec<usize>) -> Result<(), ClientError> {
        let mut by_broker: BTreeMap<SocketAddr, Vec<SentBatch>> = BTreeMap::new();
        for target in targets {
            let Some(mut batch) = self.open.remove(&target) else {
                continue;
            };
            if batch.builder.is_empty() {
                continue;
            }
            let bytes = batch.builder.finish(self.options.compression)?;
            by_broker
                .entry(self.spec.targets[target].leader.broker)
                .or_default()
                .push(SentBatch {
                    target,
                    records: std::mem::take(&mut batch.records),
                    bytes,
                });
        }
        for (broker, batches) in by_broker {
            self.send_request(broker, batches).await?;
        }
        Ok(())
    }

    async fn send_request(
        &self,
        broker: SocketAddr,
        batches: Vec<SentBatch>,
    ) -> Result<(), ClientError> {
        let window = self.windows[&broker].clone();
        let permit = window
            .acquire_static_permit(1)
            .await
            .map_err(|_| ClientError::Closed(broker))?;
        let mut by_topic: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
        for batch in &batches {
            let target = &self.spec.targets[batch.target];
            by_topic.entry(&target.topic).or_default().push(
                PartitionProduceData::default()
                    .with_index(target.leader.partition)
                    .with_records(Some(batch.bytes.clone())),
            );
        }
        let request = ProduceRequest::default()
            .with_acks(self.options.acks)
            .with_timeout_ms(30_000)
            .with_topic_data(
                by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        TopicProduceData::default()
                            .with_name(topic_name(topic))
                            .with_partition_data(partitions)
                    })
                    .collect(),
            );
        let connection = self.cluster.connection(broker).await?;
        let expect_response = self.options.acks != 0;
        let answer = connection
            .send(ApiKey::Produce, PRODUCE_VERSION, &request, expect_response)
            .await?;
        let acks = self.acks.clone();
        let live = self.live.clone();
        let targets = self.targets.clone();
        let producer = self.spec.index;
        let answered = async move {
            let _permit = permit;
            let outcome = if expect_response {
                match answer.await {
                    Ok(Ok(mut body)) => {
                        decode::<ProduceResponse>(&mut body, ApiKey::Produce, PRODUCE_VERSION)
                            .map(Some)
                    }
                    Ok(Err(error)) => Err(error),
                    Err(_) => Err(ClientError::Closed(broker)),
                }
            } else {
                Ok(None)
            };
            account(producer, &acks, &live, &targets, batches, outcome);
        };
        glommio::spawn_local(answered.boxed_local()).detach();
        Ok(())
    }
}

/// Enters a request's batches as acknowledged (or failed) records.
fn account(
    producer: u32,
    acks: &RefCell<Acks>,
    live: &Live,
    targets: &[Target],
    batches: Vec<SentBatch>,
    outcome: Result<Option<ProduceResponse>, ClientError>,
) {
    let now = now_ns();
    let measuring = live.phase() == Phase::Measure;
    let mut acks = acks.borrow_mut();
    let acks = &mut *acks;
    for batch in batches {
        let target = &targets[batch.target];
        let error = match &outcome {
            Err(error) => Some(error.to_string()),
            Ok(None) => None,
            Ok(Some(response)) => {
                let code = response
                    .responses
                    .iter()
                    .filter(|topic| topic.name.as_str() == target.topic)
                    .flat_map(|topic| topic.partition_responses.iter())
                    .find(|partition| partition.index == target.leader.partition)
                    .map_or(-1, |partition| partition.error_code);
                (code != 0).then(|| {
                    format!(
                        "producing to {}-{}: Kafka error {code}",
                        target.topic, target.leader.partition
                    )
                })
            }
        };
        if let Some(error) = error {
            Live::add(&live.failed_records, batch.records.len() as u64);
            if acks.errors.len() < 10 {
                acks.errors.push(error);
            }
            continue;
        }
        Live::add(&live.acked_records, batch.records.len() as u64);
        for (created_ns, sequence, crc) in batch.records {
            if measuring {
                acks.histogram
                    .saturating_record(now.saturating_sub(created_ns).max(1_000));
            }
            acks.ledger.enter(producer, sequence, crc);
        }
    }
}
