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

use futures::FutureExt;
use glommio::sync::Semaphore;
use hdrhistogram::Histogram;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};

use crate::log::payload::Xorshift64;
use crate::workload::options::WorkloadOptions;
use crate::workload::rate::RateLimiter;
use crate::workload::stats::{Ledger, Live, Phase, latency_histogram};
use crate::workload::value::{Values, stamp};
use crate::workload::{now_ns, unix_now_ms};
use brook_shards::client::cluster::topic_name;
use brook_shards::client::connection::decode;
use brook_shards::client::produce;
use brook_shards::client::records::{BatchBuilder, BatchProducer, SealedBatch};
use brook_shards::client::{ClientError, Cluster, PartitionLeader};

pub const PRODUCE_VERSION: i16 = produce::VERSION;
/// How long the broker may take to answer a Produce request.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

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

/// Records of a batch with consecutive sequence numbers that fell due at
/// the same instant, with the wrapping sum of their value CRCs: what the
/// ledger and the latency histogram need, one entry for a whole
/// unthrottled batch instead of one per record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    created_ns: u64,
    first_sequence: u64,
    count: u64,
    value_crcs: u64,
}

/// Appends a record to `runs`, extending the last run when it can.
fn push_record(runs: &mut Vec<Run>, created_ns: u64, sequence: u64, value_crc: u32) {
    if let Some(last) = runs.last_mut()
        && last.created_ns == created_ns
        && last.first_sequence + last.count == sequence
    {
        last.count += 1;
        last.value_crcs = last.value_crcs.wrapping_add(u64::from(value_crc));
        return;
    }
    runs.push(Run {
        created_ns,
        first_sequence: sequence,
        count: 1,
        value_crcs: u64::from(value_crc),
    });
}

/// A batch being filled for one partition.
#[derive(Debug)]
struct OpenBatch {
    builder: BatchBuilder,
    runs: Vec<Run>,
    opened_ns: u64,
}

/// A sealed batch on its way: what to enter once it is acknowledged.
struct SentBatch {
    target: usize,
    runs: Vec<Run>,
    records: u64,
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
    let seed = 0x5eed ^ (u64::from(spec.run_id) << 32) ^ u64::from(spec.index);
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
        random: Xorshift64::new(seed),
        values: Values::new(&options, seed.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15),
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
    /// Picks keys.
    random: Xorshift64,
    values: Values,
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
                    let (created, timestamp_ms) = (now_ns(), unix_now_ms());
                    let mut added = 0;
                    while !self.full(self.sticky) {
                        self.add_record(created, timestamp_ms);
                        added += 1;
                    }
                    self.count_produced(added);
                    let target = self.sticky;
                    self.sticky = (self.sticky + 1) % self.spec.targets.len();
                    self.send(vec![target]).await?;
                }
                Some(limiter) => {
                    let (now, timestamp_ms) = (now_ns(), unix_now_ms());
                    // Behind schedule (the window was full), records due
                    // meanwhile go out as full batches, never larger ones.
                    let mut added = 0;
                    while let Some(due) = limiter.take(now) {
                        added += 1;
                        if self.add_record(due, timestamp_ms) {
                            break;
                        }
                    }
                    self.count_produced(added);
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

    /// Counts records added to batches in the live totals (once per
    /// round: two atomic adds per record were measurable).
    fn count_produced(&self, records: u64) {
        Live::add(&self.live.produced_records, records);
        Live::add(
            &self.live.produced_bytes,
            records * self.options.record_bytes as u64,
        );
    }

    /// Adds one record, due at `created_ns`, to its partition's batch;
    /// returns whether that batch is now full.
    fn add_record(&mut self, created_ns: u64, timestamp_ms: i64) -> bool {
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
        let stamp = stamp(created_ns, self.spec.run_id, self.spec.index, sequence);
        let ([random, zeros], value_crc) = self.values.next(&stamp);
        let batch = self.open.entry(target).or_insert_with(|| OpenBatch {
            builder: BatchBuilder::with_headroom(
                self.options.batch_bytes,
                produce::FRAME_PREFIX_BYTES_MAX,
            ),
            runs: Vec::new(),
            opened_ns: created_ns,
        });
        batch.builder.push(
            timestamp_ms,
            key.as_ref().map(|key| &key[..]),
            &[&stamp, random, zeros],
        );
        push_record(&mut batch.runs, created_ns, sequence, value_crc);
        self.full(target)
    }

    /// Seals the batches of `targets` and sends them, one request per broker.
    async fn send(&mut self, targets: Vec<usize>) -> Result<(), ClientError> {
        let mut by_broker: BTreeMap<SocketAddr, Vec<(SentBatch, SealedBatch)>> = BTreeMap::new();
        for target in targets {
            let Some(mut batch) = self.open.remove(&target) else {
                continue;
            };
            if batch.builder.is_empty() {
                continue;
            }
            let records = batch.builder.record_count() as u64;
            let sealed = batch
                .builder
                .seal(self.options.compression, BatchProducer::NONE)?;
            let sent = SentBatch {
                target,
                runs: std::mem::take(&mut batch.runs),
                records,
            };
            by_broker
                .entry(self.spec.targets[target].leader.broker)
                .or_default()
                .push((sent, sealed));
        }
        for (broker, batches) in by_broker {
            self.send_request(broker, batches).await?;
        }
        Ok(())
    }

    async fn send_request(
        &self,
        broker: SocketAddr,
        batches: Vec<(SentBatch, SealedBatch)>,
    ) -> Result<(), ClientError> {
        let window = self.windows[&broker].clone();
        let permit = window
            .acquire_static_permit(1)
            .await
            .map_err(|_| ClientError::Closed(broker))?;
        let connection = self.cluster.connection(broker).await?;
        let expect_response = self.options.acks != 0;
        let (batches, sealed): (Vec<SentBatch>, Vec<SealedBatch>) = batches.into_iter().unzip();
        let answer = match <[SealedBatch; 1]>::try_from(sealed) {
            Ok([sealed]) => {
                // One batch (always, unthrottled): the request is written
                // around it, in its buffer.
                let target = &self.spec.targets[batches[0].target];
                let acks = self.options.acks;
                let frame = |header: &[u8]| {
                    let prefix = produce::frame_prefix(
                        header,
                        acks,
                        PRODUCE_TIMEOUT_MS,
                        &target.topic,
                        target.leader.partition,
                        sealed.len(),
                    );
                    Ok(sealed.framed(&prefix, &produce::FRAME_SUFFIX))
                };
                connection
                    .send_frame(ApiKey::Produce, PRODUCE_VERSION, expect_response, frame)
                    .await?
            }
            Err(sealed) => {
                let request = self.request(&batches, sealed);
                connection
                    .send(ApiKey::Produce, PRODUCE_VERSION, &request, expect_response)
                    .await?
            }
        };
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

    /// A Produce request of several batches, encoded by kafka-protocol.
    fn request(&self, batches: &[SentBatch], sealed: Vec<SealedBatch>) -> ProduceRequest {
        let mut by_topic: BTreeMap<&str, Vec<PartitionProduceData>> = BTreeMap::new();
        for (batch, sealed) in batches.iter().zip(sealed) {
            let target = &self.spec.targets[batch.target];
            by_topic.entry(&target.topic).or_default().push(
                PartitionProduceData::default()
                    .with_index(target.leader.partition)
                    .with_records(Some(sealed.into_bytes())),
            );
        }
        ProduceRequest::default()
            .with_acks(self.options.acks)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(
                by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        TopicProduceData::default()
                            .with_name(topic_name(topic))
                            .with_partition_data(partitions)
                    })
                    .collect(),
            )
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
            Live::add(&live.failed_records, batch.records);
            if acks.errors.len() < 10 {
                acks.errors.push(error);
            }
            continue;
        }
        Live::add(&live.acked_records, batch.records);
        for run in batch.runs {
            if measuring {
                acks.histogram
                    .saturating_record_n(now.saturating_sub(run.created_ns).max(1_000), run.count);
            }
            let sequences = run.first_sequence..run.first_sequence + run.count;
            acks.ledger
                .enter_sequences(producer, sequences, run.value_crcs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Consecutive records due together share a run; a gap in sequence
    /// (a record that went to another partition) or a new due time starts
    /// the next one, and every record's CRC is in its run's sum.
    #[test]
    fn records_fold_into_runs() {
        let mut runs = Vec::new();
        for (created_ns, sequence, crc) in [
            (5, 0, 1),
            (5, 1, u32::MAX),
            (5, 2, 3),
            (5, 4, 4),
            (6, 5, 5),
            (6, 6, 6),
        ] {
            push_record(&mut runs, created_ns, sequence, crc);
        }
        let run = |created_ns, first_sequence, count, value_crcs| Run {
            created_ns,
            first_sequence,
            count,
            value_crcs,
        };
        assert_eq!(
            runs,
            [
                run(5, 0, 3, 4 + u64::from(u32::MAX)),
                run(5, 4, 1, 4),
                run(6, 5, 2, 11)
            ]
        );
    }
}
