//! `brook bench run replication`: three voters on this machine (each a
//! broker and a controller, `--cores 1`, unpinned: the brokers and the
//! load generator share the machine's cores), with Kafka's default session
//! timeout (9 s).
//!
//! - Throughput: the throughput workload with `acks=all` on a topic of
//!   three replicas (`min.insync.replicas=2`), then on a topic of one, on
//!   the same cluster: the ratio is what replication costs.
//! - Latency at a fixed rate (half what three replicas reached, or
//!   `--rate`, or with `--kafka` one rate for both brokers): produce→ack
//!   p50/p99/p99.9 with three replicas and with one.
//! - Failover, ten times (`--kills`): kill -9 the leader of a one-partition topic of
//!   three replicas → the first `acks=all` produce to it that succeeds
//!   (tried every 5 ms, the poll of `until_within`); the node then restarts
//!   and rejoins the ISR. A kill that also took the active controller (as
//!   DescribeQuorum names it) is reported apart: it adds a controller
//!   election and a whole session timeout.
//! - Controlled shutdown, half as many times: SIGTERM the leader → the same.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::log::batch::Compression;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
};

use super::failover::{
    NODES, active_controller, duration_figure, samples_ms, until_formed, until_within,
};
use super::report::{Figure, NamedRun, Target};
use super::{Bench, BenchError};
use crate::log::json::JsonObject;
use crate::workload::options::WorkloadOptions;
use crate::workload::report::WorkloadReport;
use brook_launch::BrokerProcess;
use brook_shards::client::cluster::topic_name;
use brook_shards::client::records::BatchBuilder;
use brook_shards::client::{ClientError, Cluster};

const FAILOVER_TOPIC: &str = "replication-failover";
/// How long any one step may take before the run is called failed.
const STEP_LIMIT: Duration = Duration::from_secs(120);

/// `min.insync.replicas=2`, as the replicated topics are made.
fn min_insync() -> Vec<(String, String)> {
    vec![("min.insync.replicas".into(), "2".into())]
}

impl Bench<'_> {
    pub(super) fn replication(&mut self) -> Result<NamedRun, BenchError> {
        self.own_broker_needed("replication")?;
        let (nodes, addresses) = self.start_voters("replication", &[])?;
        let formed = addresses.clone();
        let one_controller = self.kafka.is_none();
        super::on_own_executor("brook-bench-replication", move || async move {
            until_formed(&formed, one_controller).await
        })??;
        (self.progress)("replication: three voters started");
        let bootstrap = addresses[0].to_string();
        let shape = |this: &Self, topic: &str, replication_factor: i16| WorkloadOptions {
            acks: -1,
            replication_factor,
            topic_configs: if replication_factor > 1 {
                min_insync()
            } else {
                Vec::new()
            },
            ..this.throughput_workload(bootstrap.clone(), topic)
        };
        // Each workload's topic is deleted after it: unthrottled, they
        // write tens of GB (an RF 1 run here wrote 42 GB in 35 s).
        let rf3 = self.workload_then_delete(&addresses, shape(self, "replication-rf3", 3))?;
        let rf1 = self.workload_then_delete(&addresses, shape(self, "replication-rf1", 1))?;
        let rate = self
            .paced_rate()
            .unwrap_or((rf3.produce_records_per_second() / 2.0) as u64)
            .max(1);
        // One producer, batches as the throughput phase makes them (at a
        // fixed rate the linger, not the batch size, bounds a batch): with
        // 64 KiB batches and no linger one producer's acks=all requests in
        // flight carried too few bytes per replication round trip to reach
        // half the replicated throughput, and the "latency" was a queue.
        let paced = |this: &Self, topic: &str, replication_factor: i16| WorkloadOptions {
            rate,
            producers: 1,
            ..shape(this, topic, replication_factor)
        };
        let rf3_paced =
            self.workload_then_delete(&addresses, paced(self, "replication-rf3-paced", 3))?;
        let rf1_paced =
            self.workload_then_delete(&addresses, paced(self, "replication-rf1-paced", 1))?;
        let rounds = Rounds {
            kills: self.options.kills as usize,
            stops: self.options.kills.div_ceil(2) as usize,
        };
        (self.progress)(&format!(
            "replication: {} leader kills, then {} controlled shutdowns",
            rounds.kills, rounds.stops
        ));
        let (kills, stops) =
            super::on_own_executor("brook-bench-replication", move || async move {
                measure_moves(nodes, addresses, rounds).await
            })??;
        // A leader that was also the active controller costs a controller
        // election and then a whole session timeout: a new active
        // controller starts every broker's session afresh, as Kafka's does
        // (it has seen none of their heartbeats). The figure is
        // the partition's failover alone; the others are shown apart.
        let took = |controller_too: bool| {
            kills
                .iter()
                .filter(|kill| kill.controller_too == controller_too)
                .map(|kill| kill.took)
                .collect::<Vec<_>>()
        };
        let (with_controller, alone) = (took(true), took(false));

        let ratio =
            rf3.produce_mb_per_second() / rf1.produce_mb_per_second().max(f64::MIN_POSITIVE);
        let mut figures = vec![
            Figure::new(
                "rf3_produce_mb_per_s",
                "acks=all throughput, 3 replicas",
                rf3.produce_mb_per_second(),
                "MB/s",
            )
            .against("1 replica, same cluster", rf1.produce_mb_per_second()),
            Figure::new(
                "rf1_produce_mb_per_s",
                "acks=all throughput, 1 replica",
                rf1.produce_mb_per_second(),
                "MB/s",
            ),
            Figure::new(
                "rf3_to_rf1_throughput",
                "throughput, 3 replicas / 1",
                ratio,
                "×",
            ),
        ];
        let paced_keys = [
            (
                "3 replicas",
                &rf3_paced,
                ["rf3_ack_p50_ms", "rf3_ack_p99_ms", "rf3_ack_p999_ms"],
            ),
            (
                "1 replica",
                &rf1_paced,
                ["rf1_ack_p50_ms", "rf1_ack_p99_ms", "rf1_ack_p999_ms"],
            ),
        ];
        for (label, report, keys) in paced_keys {
            let ack = report.ack();
            let quantiles = [("p50", ack.p50), ("p99", ack.p99), ("p99.9", ack.p999)];
            for (key, (quantile, value)) in keys.into_iter().zip(quantiles) {
                figures.push(Figure::new(
                    key,
                    format!("produce→ack {quantile} at {rate} rec/s, {label}"),
                    value / 1000.0,
                    "ms",
                ));
            }
        }
        let moved = |key, label, samples: &[Duration], quantile| {
            let figure = duration_figure(key, label, samples, quantile);
            if samples.is_empty() {
                Figure {
                    value: f64::NAN,
                    ..figure
                }
            } else {
                figure
            }
        };
        figures.extend([
            moved(
                "kill_p50_ms",
                "kill -9 leader → acks=all produce ok, p50",
                &alone,
                0.5,
            )
            .target(Target::AtMost(10_000.0)),
            moved(
                "kill_max_ms",
                "kill -9 leader → acks=all produce ok, max",
                &alone,
                1.0,
            ),
            moved(
                "kill_with_controller_p50_ms",
                "kill -9 leader and active controller → acks=all produce ok, p50",
                &with_controller,
                0.5,
            ),
            moved(
                "shutdown_p50_ms",
                "SIGTERM leader → acks=all produce ok, p50",
                &stops,
                0.5,
            )
            .target(Target::AtMost(1_000.0)),
            moved(
                "shutdown_max_ms",
                "SIGTERM leader → acks=all produce ok, max",
                &stops,
                1.0,
            ),
        ]);
        let samples = samples_ms;
        Ok(NamedRun {
            name: "replication",
            setup: format!(
                "3 {} (broker+controller), unpinned; load generator on cpu {}; \
                 acks=all, 8 partitions, 2 producers unthrottled, then 1 producer at {rate} rec/s; \
                 min.insync.replicas=2; session timeout 9 s; {} kills, {} SIGTERMs",
                if self.kafka.is_some() {
                    "Apache Kafka 4.1.2 nodes (1 GiB heap each)"
                } else {
                    "Brook voters (--cores 1 each)"
                },
                self.options.load_cpu,
                rounds.kills,
                rounds.stops
            ),
            figures,
            details: format!(
                "3 replicas:\n{}\n1 replica:\n{}\nkill -9 ms (* the active controller too): {}\nSIGTERM ms: {}\n",
                rf3.to_text(),
                rf1.to_text(),
                kills
                    .iter()
                    .map(|kill| format!(
                        "{:.0}{}",
                        kill.took.as_secs_f64() * 1000.0,
                        if kill.controller_too { "*" } else { "" }
                    ))
                    .collect::<Vec<_>>()
                    .join(" "),
                samples(&stops)
            ),
            details_json: JsonObject::new()
                .object("rf3", rf3.to_json_object())
                .object("rf1", rf1.to_json_object()),
            error: None,
        })
    }
}

impl Bench<'_> {
    /// Runs `options` against the cluster, then deletes its topics.
    fn workload_then_delete(
        &mut self,
        addresses: &[SocketAddr],
        options: WorkloadOptions,
    ) -> Result<WorkloadReport, BenchError> {
        let topics = options.topic_names();
        let report = self.workload(options);
        let bootstrap = addresses[0];
        let deleted = super::on_own_executor("brook-bench-replication", move || async move {
            let cluster = Cluster::new(bootstrap, "brook-bench-replication");
            let deleted = cluster.delete_topics(&topics).await;
            cluster.close().await;
            deleted
        })?;
        let report = report?;
        deleted.map_err(crate::workload::client_error)?;
        Ok(report)
    }
}

/// The leader of partition 0 of `topic` and its ISR size, as the first
/// node of `addresses` that answers says.
/// Node `skip` (one known down) is not asked.
async fn placement(
    addresses: &[SocketAddr],
    topic: &str,
    skip: Option<usize>,
) -> Option<(i32, usize)> {
    for (index, address) in addresses.iter().enumerate() {
        if Some(index) == skip {
            continue;
        }
        let cluster = Cluster::new(*address, "brook-bench-replication");
        let Ok(connection) = cluster.own_connection(*address).await else {
            continue;
        };
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name(topic))),
            ]))
            .with_allow_auto_topic_creation(false);
        let answered: Result<MetadataResponse, ClientError> =
            connection.request(ApiKey::Metadata, 12, &request).await;
        connection.close().await;
        let Ok(response) = answered else { continue };
        let partition = response
            .topics
            .first()
            .filter(|found| found.error_code == 0)
            .and_then(|found| found.partitions.first())?;
        return Some((partition.leader_id.0, partition.isr_nodes.len()));
    }
    None
}

/// One `acks=all` record to partition 0 of the failover topic through
/// `leader`: whether it was acknowledged.
async fn produce_one(cluster: &Cluster, leader: SocketAddr) -> bool {
    let mut batch = BatchBuilder::new(256);
    batch.push(0, None, &[b"probe"]);
    let Ok(records) = batch.finish(Compression::None) else {
        return false;
    };
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(2_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(FAILOVER_TOPIC))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    let Ok(connection) = cluster.connection(leader).await else {
        return false;
    };
    let answered: Result<ProduceResponse, ClientError> =
        connection.request(ApiKey::Produce, 9, &request).await;
    answered.is_ok_and(|response| {
        response
            .responses
            .iter()
            .flat_map(|topic| &topic.partition_responses)
            .all(|partition| partition.error_code == 0)
    })
}

async fn until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> Result<T, BenchError> {
    until_within("replication", what, STEP_LIMIT, probe).await
}

/// The leader of the failover topic once all three replicas are in sync.
async fn in_sync_leader(addresses: &[SocketAddr]) -> Result<usize, BenchError> {
    until(
        "a leader with three replicas in sync",
        async || match placement(addresses, FAILOVER_TOPIC, None).await {
            Some((leader, isr)) if leader >= 0 && isr == NODES => Some(leader as usize),
            _ => None,
        },
    )
    .await
}

/// One kill -9 of the failover topic's leader.
struct Kill {
    /// Until an `acks=all` produce succeeded again.
    took: Duration,
    /// Whether the killed node was the active controller as well.
    controller_too: bool,
}

/// How many leader moves the failover phase makes of each kind.
#[derive(Clone, Copy)]
struct Rounds {
    kills: usize,
    stops: usize,
}

/// Kills (then stops) the failover topic's leader in turn: how long each
/// took until an `acks=all` produce succeeded again.
async fn measure_moves(
    mut nodes: Vec<BrokerProcess>,
    addresses: Vec<SocketAddr>,
    rounds: Rounds,
) -> Result<(Vec<Kill>, Vec<Duration>), BenchError> {
    let cluster = Rc::new(Cluster::new(addresses[0], "brook-bench-replication"));
    cluster
        .create_topics(&[FAILOVER_TOPIC.to_owned()], 1, 3, &min_insync())
        .await
        .map_err(crate::workload::client_error)?;
    let (mut kills, mut stops) = (Vec::new(), Vec::new());
    for round in 0..rounds.kills + rounds.stops {
        let leader = in_sync_leader(&addresses).await?;
        until("a produce before the fault", async || {
            produce_one(&cluster, addresses[leader]).await.then_some(())
        })
        .await?;
        let kill = round < rounds.kills;
        let controller_too = kill && active_controller(&addresses).await == Some(leader);
        if kill {
            nodes[leader].kill();
        } else {
            nodes[leader].terminate();
        }
        let faulted = Instant::now();
        // The old leader is not asked (a connection to a dead broker would
        // wait out a reconnect backoff): only the one elected next.
        until("an acks=all produce after the fault", async || {
            let (now_leader, _) = placement(&addresses, FAILOVER_TOPIC, Some(leader)).await?;
            let now_leader = usize::try_from(now_leader)
                .ok()
                .filter(|now| *now != leader)?;
            produce_one(&cluster, *addresses.get(now_leader)?)
                .await
                .then_some(())
        })
        .await?;
        let took = faulted.elapsed();
        if kill {
            kills.push(Kill {
                took,
                controller_too,
            });
        } else {
            stops.push(took);
            nodes[leader].wait_exit();
        }
        nodes[leader].restart()?;
    }
    in_sync_leader(&addresses).await?;
    cluster.close().await;
    for node in &mut nodes {
        node.kill();
    }
    Ok((kills, stops))
}
