//! `brook bench run`: a load generator in the spirit of the OpenMessaging
//! Benchmark, speaking Kafka with Brook's own client ([`brook_shards::client`]) so
//! it drives any Kafka-compatible broker.
//!
//! Producers and consumers are spread over thread-per-core executors (one
//! per `--cpus` entry). A run goes warm-up → measured window → drain (the
//! producers stop; consumers catch up with everything acknowledged) → stop.
//! Throughput comes from the window; latencies are recorded only for records
//! due in it; and a ledger on each side proves every acknowledged record was
//! consumed exactly once.

pub mod consumer;
pub mod options;
pub mod producer;
pub mod rate;
pub mod report;
pub mod stats;
pub mod value;

use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::Placement;
use hdrhistogram::Histogram;

use crate::log::error::BenchError;
use brook_shards::client::cluster::resolve;
use brook_shards::client::{ClientError, Cluster, PartitionLeader};
use brook_shards::runtime::{executor_builder, guarded};
use consumer::{Assignment, ConsumerSpec, run_consumer};
use options::WorkloadOptions;
use producer::{ProducerSpec, Target, run_producer};
use report::WorkloadReport;
use stats::{Ledger, Live, Phase, Totals, Verification, latency_histogram};

/// Nanoseconds on the monotonic clock every executor shares (so a stamp
/// written by a producer can be compared by a consumer on another core).
pub fn now_ns() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// Wall-clock milliseconds, for record timestamps.
pub fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// What one executor's producers and consumers found.
#[derive(Debug)]
struct ExecutorOutcome {
    ack_latency: Histogram<u64>,
    e2e_latency: Histogram<u64>,
    acknowledged: Ledger,
    consumed: Ledger,
    errors: Vec<String>,
}

impl ExecutorOutcome {
    /// Adds another executor's findings: its latency samples to the
    /// histograms, its records to the ledgers, its errors to the list.
    fn absorb(&mut self, part: ExecutorOutcome) {
        // Both histograms share one range; samples beyond it were clamped
        // when recorded, so adding cannot fail.
        let _ = self.ack_latency.add(&part.ack_latency);
        let _ = self.e2e_latency.add(&part.e2e_latency);
        self.acknowledged.merge(&part.acknowledged);
        self.consumed.merge(&part.consumed);
        self.errors.extend(part.errors);
    }

    fn empty() -> ExecutorOutcome {
        ExecutorOutcome {
            ack_latency: latency_histogram(),
            e2e_latency: latency_histogram(),
            acknowledged: Ledger::default(),
            consumed: Ledger::default(),
            errors: Vec::new(),
        }
    }
}

/// Runs `options` and reports on it; `progress` gets a line a second.
pub fn run(
    options: WorkloadOptions,
    mut progress: impl FnMut(&str),
) -> Result<WorkloadReport, BenchError> {
    options
        .validate()
        .map_err(|reason| BenchError::InvalidOption {
            name: "workload",
            reason,
        })?;
    let bootstrap_text = options
        .brokers
        .clone()
        .ok_or_else(|| BenchError::InvalidOption {
            name: "brokers",
            reason: "no broker to run against".into(),
        })?;
    let bootstrap = resolve(&bootstrap_text).map_err(client_error)?;
    let options = Arc::new(options);
    let run_id = (now_ns() as u32) | 1;
    let (producers, consumers) = prepare(bootstrap, &options, run_id)?;
    let live = Arc::new(Live::default());
    let executors = options.executors();
    let mut handles = Vec::new();
    let mut producer_specs: Vec<Vec<ProducerSpec>> = (0..executors).map(|_| Vec::new()).collect();
    let mut consumer_specs: Vec<Vec<ConsumerSpec>> = (0..executors).map(|_| Vec::new()).collect();
    for (index, spec) in producers.into_iter().enumerate() {
        producer_specs[index % executors].push(spec);
    }
    for (index, spec) in consumers.into_iter().enumerate() {
        consumer_specs[index % executors].push(spec);
    }
    for (executor, (producers, consumers)) in
        producer_specs.into_iter().zip(consumer_specs).enumerate()
    {
        let placement = options
            .cpus
            .get(executor)
            .map_or(Placement::Unbound, |cpu| Placement::Fixed(*cpu));
        let live = live.clone();
        let handle = executor_builder(placement)
            .name(&format!("brook-bench-{executor}"))
            .spawn(move || guarded(run_executor(bootstrap, producers, consumers, live)))
            .map_err(|error| BenchError::Executor {
                cpu: options.cpus.get(executor).copied().unwrap_or(usize::MAX),
                reason: error.to_string(),
            })?;
        handles.push(handle);
    }
    let started = Instant::now();
    let mut last = (started, Totals::default());
    let mut tick = |label: &str, progress: &mut dyn FnMut(&str)| {
        let now = Instant::now();
        let totals = live.snapshot();
        let seconds = now.duration_since(last.0).as_secs_f64().max(1e-9);
        let delta = totals.since(&last.1);
        progress(&format!(
            "[{:>5.1}s {label}] produce {:>8.1} MB/s {:>9.0} rec/s | consume {:>8.1} MB/s {:>9.0} rec/s",
            now.duration_since(started).as_secs_f64(),
            delta.produced_bytes as f64 / seconds / 1e6,
            delta.produced_records as f64 / seconds,
            delta.consumed_bytes as f64 / seconds / 1e6,
            delta.consumed_records as f64 / seconds,
        ));
        last = (now, totals);
    };
    sleep_with_progress(options.warmup, &|| false, &mut || {
        tick("warm-up", &mut progress)
    });
    let window_start = (Instant::now(), live.snapshot());
    live.set_phase(Phase::Measure);
    let limit_reached = || {
        let totals = live.snapshot().since(&window_start.1);
        let moved = if options.producers > 0 {
            totals.produced_bytes
        } else {
            totals.consumed_bytes
        };
        options.bytes_limit > 0 && moved >= options.bytes_limit
    };
    sleep_with_progress(options.duration, &limit_reached, &mut || {
        tick("measure", &mut progress)
    });
    live.set_phase(Phase::Drain);
    let window_end = (Instant::now(), live.snapshot());
    // Producers finish their last requests; consumers catch up with every
    // record acknowledged, or the drain times out.
    let drain_deadline = Instant::now() + options.drain_timeout;
    let mut drained = options.consumers == 0;
    while !drained && Instant::now() < drain_deadline {
        std::thread::sleep(Duration::from_millis(20));
        let totals = live.snapshot();
        let producers_done = handles_idle(&totals);
        drained = producers_done && totals.consumed_own_records >= totals.acked_records;
    }
    // Let producers' last answers land before consumers are counted out.
    std::thread::sleep(Duration::from_millis(100));
    let mut drained_totals = live.snapshot();
    while options.consumers > 0
        && drained_totals.consumed_own_records < drained_totals.acked_records
        && Instant::now() < drain_deadline
    {
        std::thread::sleep(Duration::from_millis(20));
        drained_totals = live.snapshot();
    }
    live.set_phase(Phase::Stop);
    let mut outcome = ExecutorOutcome::empty();
    for handle in handles {
        let joined = handle.join().map_err(|error| BenchError::Executor {
            cpu: usize::MAX,
            reason: error.to_string(),
        })?;
        outcome.absorb(joined.map_err(client_error)?);
    }
    let window = window_end.0.duration_since(window_start.0);
    let totals = window_end.1.since(&window_start.1);
    let verification = (options.consumers > 0 && options.producers > 0)
        .then(|| Verification::of(&outcome.acknowledged, &outcome.consumed));
    Ok(WorkloadReport {
        options: (*options).clone(),
        window,
        totals,
        ack_latency: outcome.ack_latency,
        e2e_latency: outcome.e2e_latency,
        verification,
        errors: outcome.errors,
    })
}

/// Whether producers have stopped adding work (every produced record is
/// answered one way or the other).
fn handles_idle(totals: &Totals) -> bool {
    totals.acked_records + totals.failed_records >= totals.produced_records
}

/// Sleeps `total`, or until `done`, calling `tick` every second.
fn sleep_with_progress(total: Duration, done: &dyn Fn() -> bool, tick: &mut dyn FnMut()) {
    let end = Instant::now() + total;
    let mut next_tick = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end && !done() {
        std::thread::sleep(Duration::from_millis(5));
        if Instant::now() >= next_tick {
            tick();
            next_tick += Duration::from_secs(1);
        }
    }
}

pub(crate) fn client_error(error: ClientError) -> BenchError {
    BenchError::Client(error.to_string())
}

/// A topic's partition leaders and the consumers' start offsets, in
/// partition order.
type TopicLayout = (String, Vec<PartitionLeader>, Vec<i64>);

/// Creates the topics, finds their leaders and the consumers' start
/// offsets, and divides the work.
fn prepare(
    bootstrap: std::net::SocketAddr,
    options: &Arc<WorkloadOptions>,
    run_id: u32,
) -> Result<(Vec<ProducerSpec>, Vec<ConsumerSpec>), BenchError> {
    let topics = options.topic_names();
    let setup_options = options.clone();
    let layout: Result<Vec<TopicLayout>, ClientError> = executor_builder(Placement::Unbound)
        .name("brook-bench-setup")
        .make()
        .map_err(|error| BenchError::Executor {
            cpu: usize::MAX,
            reason: error.to_string(),
        })?
        .run(guarded(async move {
            let cluster = Cluster::new(bootstrap, "brook-bench");
            cluster
                .create_topics(
                    &topics,
                    setup_options.partitions,
                    setup_options.replication_factor,
                    &setup_options.topic_configs,
                )
                .await?;
            let mut layout = Vec::new();
            for topic in topics {
                let leaders = cluster.created_leaders(&topic).await?;
                let timestamp = if setup_options.from_beginning { -2 } else { -1 };
                let offsets = cluster.offsets(&topic, &leaders, timestamp).await?;
                let starts = leaders
                    .iter()
                    .map(|leader| offsets.get(&leader.partition).copied().unwrap_or(0))
                    .collect();
                layout.push((topic, leaders, starts));
            }
            cluster.close().await;
            Ok(layout)
        }));
    let layout = layout.map_err(client_error)?;
    let targets: Vec<Target> = layout
        .iter()
        .flat_map(|(topic, leaders, _)| {
            leaders.iter().map(|leader| Target {
                topic: topic.clone(),
                leader: *leader,
            })
        })
        .collect();
    let per_producer_rate =
        (options.rate > 0).then(|| options.rate as f64 / options.producers.max(1) as f64);
    let producers = (0..options.producers)
        .map(|index| ProducerSpec {
            index: index as u32,
            run_id,
            targets: targets.clone(),
            rate: per_producer_rate,
            options: options.clone(),
        })
        .collect();
    let assignments: Vec<Assignment> = layout
        .iter()
        .flat_map(|(topic, leaders, starts)| {
            leaders
                .iter()
                .zip(starts)
                .map(|(leader, start)| Assignment {
                    topic: topic.clone(),
                    partition: leader.partition,
                    broker: leader.broker,
                    next_offset: *start,
                })
        })
        .collect();
    let mut consumers: Vec<ConsumerSpec> = (0..options.consumers)
        .map(|index| ConsumerSpec {
            index: index as u32,
            run_id,
            assignments: Vec::new(),
            options: options.clone(),
        })
        .collect();
    if !consumers.is_empty() {
        let count = consumers.len();
        for (index, assignment) in assignments.into_iter().enumerate() {
            consumers[index % count].assignments.push(assignment);
        }
        consumers.retain(|consumer| !consumer.assignments.is_empty());
    }
    Ok((producers, consumers))
}

async fn run_executor(
    bootstrap: std::net::SocketAddr,
    producers: Vec<ProducerSpec>,
    consumers: Vec<ConsumerSpec>,
    live: Arc<Live>,
) -> Result<ExecutorOutcome, ClientError> {
    let cluster = std::rc::Rc::new(Cluster::new(bootstrap, "brook-bench"));
    let producing = producers
        .into_iter()
        .map(|spec| glommio::spawn_local(run_producer(spec, cluster.clone(), live.clone())));
    let producing: Vec<_> = producing.collect();
    let consuming: Vec<_> = consumers
        .into_iter()
        .map(|spec| glommio::spawn_local(run_consumer(spec, cluster.clone(), live.clone())))
        .collect();
    let mut outcome = ExecutorOutcome::empty();
    let mut first_error = None;
    for task in producing {
        match task.await {
            Ok(producer) => {
                let _ = outcome.ack_latency.add(&producer.ack_latency);
                outcome.acknowledged.merge(&producer.acknowledged);
                outcome.errors.extend(producer.errors);
            }
            Err(error) => {
                live.set_phase(Phase::Stop);
                first_error.get_or_insert(error);
            }
        }
    }
    for task in consuming {
        match task.await {
            Ok(consumer) => {
                let _ = outcome.e2e_latency.add(&consumer.e2e_latency);
                outcome.consumed.merge(&consumer.consumed);
            }
            Err(error) => {
                live.set_phase(Phase::Stop);
                first_error.get_or_insert(error);
            }
        }
    }
    cluster.close().await;
    match first_error {
        Some(error) => Err(error),
        None => Ok(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An executor's outcome with `samples` latencies (µs) and the given
    /// producer's sequences acknowledged and consumed.
    fn outcome(samples: &[u64], producer: u32, sequences: std::ops::Range<u64>) -> ExecutorOutcome {
        let mut outcome = ExecutorOutcome::empty();
        for sample in samples {
            outcome.ack_latency.saturating_record(sample * 1000);
            outcome.e2e_latency.saturating_record(sample * 2000);
        }
        for sequence in sequences {
            outcome
                .acknowledged
                .enter(producer, sequence, sequence as u32);
            outcome.consumed.enter(producer, sequence, sequence as u32);
        }
        outcome
    }

    #[test]
    fn merged_executors_report_the_percentiles_of_all_their_samples() {
        let fast: Vec<u64> = (1..=900).collect();
        let slow: Vec<u64> = (10_001..=10_100).collect();
        let mut merged = outcome(&fast, 0, 0..50);
        merged.absorb(outcome(&slow, 1, 0..30));
        let mut all = latency_histogram();
        for sample in fast.iter().chain(&slow) {
            all.saturating_record(sample * 1000);
        }
        assert_eq!(merged.ack_latency.len(), 1000);
        for quantile in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(
                merged.ack_latency.value_at_quantile(quantile),
                all.value_at_quantile(quantile),
                "q{quantile}"
            );
        }
        // p99 falls among the slow executor's samples: ~10 ms, not ~1 ms.
        assert!(merged.ack_latency.value_at_quantile(0.99) > 10_000_000);
        assert_eq!(merged.e2e_latency.len(), 1000);
        assert!(merged.e2e_latency.max() >= 20_000_000);
        let verification = Verification::of(&merged.acknowledged, &merged.consumed);
        assert_eq!(verification.acknowledged, 80);
        assert!(verification.exactly_once(), "{verification:?}");
    }
}
