//! `brook bench run controller-failover`: a three-voter cluster on
//! 127.0.0.1 (one core each, unpinned). Metadata propagation: CreateTopics
//! through one broker → the topic in Metadata on every broker. Failover,
//! ten times (`--kills`): kill -9 the active controller → the first CreateTopics that
//! succeeds through a surviving broker; then the node restarts and rejoins.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, DescribeQuorumRequest, DescribeQuorumResponse, MetadataRequest, MetadataResponse,
};

use super::report::{Figure, NamedRun, Target};
use super::{Bench, BenchError};
use crate::log::json::JsonObject;
use brook_launch::{BrokerLaunch, BrokerProcess, KafkaLaunch, free_port};
use brook_shards::client::cluster::{resolve, topic_name};
use brook_shards::client::{ClientError, Cluster};

pub(super) const NODES: usize = 3;
const PROPAGATIONS: usize = 20;
/// How long any one step may take before the run is called failed.
const STEP_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(5);

impl Bench<'_> {
    /// Three fresh voters (each a broker and a controller, `--cores 1`,
    /// unpinned) in `<dir>/<name>-<id>`, with `extra` arguments each, and
    /// their client addresses; Kafka nodes (and no `extra`) while the
    /// workloads run against Kafka.
    pub(super) fn start_voters(
        &self,
        name: &str,
        extra: &[String],
    ) -> Result<(Vec<BrokerProcess>, Vec<SocketAddr>), BenchError> {
        if let Some(script) = &self.kafka {
            return self.start_kafka_voters(name, script);
        }
        let binary = super::brook_binary(self.options)?;
        let ports: Vec<u16> = (0..NODES).map(|_| free_port()).collect::<Result<_, _>>()?;
        let voters = ports
            .iter()
            .enumerate()
            .map(|(id, port)| format!("{id}@127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for (id, port) in ports.iter().enumerate() {
            let data_dir = self.options.dir.join(format!("{name}-{id}"));
            let _ = std::fs::remove_dir_all(&data_dir);
            let mut arguments = vec![
                "--set".into(),
                format!("node.id={id}"),
                "--set".into(),
                format!("controller.quorum.voters={voters}"),
                "--set".into(),
                format!("listeners=CONTROLLER://127.0.0.1:{port}"),
            ];
            arguments.extend(extra.iter().cloned());
            nodes.push(BrokerProcess::start(BrokerLaunch {
                binary: binary.clone(),
                data_dir,
                cores: 1,
                cpus: Vec::new(),
                extra: arguments,
                namespace: None,
                listen: None,
            })?);
        }
        with_addresses(nodes)
    }

    /// Three Kafka nodes, each a broker and a controller (as Brook's
    /// voters), with the internal topics' replication at Kafka's defaults.
    fn start_kafka_voters(
        &self,
        name: &str,
        script: &std::path::Path,
    ) -> Result<(Vec<BrokerProcess>, Vec<SocketAddr>), BenchError> {
        let mut launches = Vec::new();
        for id in 0..NODES {
            let mut launch = KafkaLaunch::single(script.to_owned())?;
            launch.node_id = id as u32;
            // 16 bytes in URL-safe base64 ("brook-bench-kafk"): every
            // node's data directory is fresh, so one id serves every run.
            launch.cluster_id = "YnJvb2stYmVuY2gta2Fmaw".into();
            launch.settings = [
                "offsets.topic.replication.factor=3",
                "transaction.state.log.replication.factor=3",
                "transaction.state.log.min.isr=2",
                "share.coordinator.state.topic.replication.factor=3",
                "share.coordinator.state.topic.min.isr=2",
            ]
            .map(String::from)
            .to_vec();
            launches.push(launch);
        }
        let voters = launches
            .iter()
            .map(|launch| format!("{}@127.0.0.1:{}", launch.node_id, launch.controller_port))
            .collect::<Vec<_>>()
            .join(",");
        // Each node waits for a quorum to start serving: start them all,
        // then wait for each.
        let started: Vec<_> = launches
            .into_iter()
            .enumerate()
            .map(|(id, mut launch)| {
                launch.voters = voters.clone();
                let data_dir = self.options.dir.join(format!("kafka-{name}-{id}"));
                let _ = std::fs::remove_dir_all(&data_dir);
                std::thread::spawn(move || BrokerProcess::start_kafka(launch, data_dir, Vec::new()))
            })
            .collect();
        let mut nodes = Vec::new();
        for node in started {
            let node = node
                .join()
                .map_err(|_| BenchError::Broker("starting a Kafka node panicked".into()))?;
            nodes.push(node?);
        }
        with_addresses(nodes)
    }

    pub(super) fn controller_failover(&mut self) -> Result<NamedRun, BenchError> {
        self.own_broker_needed("controller-failover")?;
        let (nodes, addresses) = self.start_voters("controller-failover", &[])?;
        (self.progress)("controller-failover: three voters started");
        let kills = self.options.kills as usize;
        let measured = super::on_own_executor("brook-bench-failover", move || async move {
            measure(nodes, addresses, kills).await
        })??;
        let (failovers, propagations) = measured;
        let figure = duration_figure;
        let figures = vec![
            figure(
                "failover_p50_ms",
                "kill -9 controller → CreateTopics ok, p50",
                &failovers,
                0.5,
            )
            .target(Target::AtMost(2_000.0)),
            figure(
                "failover_max_ms",
                "kill -9 controller → CreateTopics ok, max",
                &failovers,
                1.0,
            ),
            figure(
                "propagation_p50_ms",
                "CreateTopics → in Metadata on every broker, p50",
                &propagations,
                0.5,
            ),
            figure(
                "propagation_p99_ms",
                "CreateTopics → in Metadata on every broker, p99",
                &propagations,
                0.99,
            ),
        ];
        let samples = samples_ms;
        Ok(NamedRun {
            name: "controller-failover",
            setup: format!(
                "3 voters (broker+controller), --cores 1 each, unpinned; {kills} kills, {PROPAGATIONS} topics"
            ),
            figures,
            details: format!(
                "failover ms: {}\npropagation ms: {}\n",
                samples(&failovers),
                samples(&propagations)
            ),
            details_json: JsonObject::new(),
            error: None,
        })
    }
}

/// A figure in milliseconds: the `quantile` of `samples`.
pub(super) fn duration_figure(
    key: &'static str,
    label: &str,
    samples: &[Duration],
    quantile: f64,
) -> Figure {
    Figure::new(
        key,
        label.to_owned(),
        percentile(samples, quantile).as_secs_f64() * 1000.0,
        "ms",
    )
}

/// Samples in milliseconds, for a run's details.
pub(super) fn samples_ms(values: &[Duration]) -> String {
    values
        .iter()
        .map(|value| format!("{:.0}", value.as_secs_f64() * 1000.0))
        .collect::<Vec<_>>()
        .join(" ")
}

fn percentile(samples: &[Duration], quantile: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let index =
        ((sorted.len() as f64 * quantile).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(index).copied().unwrap_or_default()
}

/// `nodes` beside their client addresses.
fn with_addresses(
    nodes: Vec<BrokerProcess>,
) -> Result<(Vec<BrokerProcess>, Vec<SocketAddr>), BenchError> {
    let addresses = nodes
        .iter()
        .map(|node| resolve(&node.address))
        .collect::<Result<_, _>>()
        .map_err(crate::workload::client_error)?;
    Ok((nodes, addresses))
}

/// What `address` answers to Metadata for `topic` (none: brokers only):
/// the live brokers, and whether the topic is there.
async fn metadata(address: SocketAddr, topic: Option<&str>) -> Option<(usize, bool)> {
    let cluster = Cluster::new(address, "brook-bench-failover");
    let connection = cluster.own_connection(address).await.ok()?;
    let topics =
        topic.map(|name| vec![MetadataRequestTopic::default().with_name(Some(topic_name(name)))]);
    let request = MetadataRequest::default()
        .with_topics(Some(topics.unwrap_or_default()))
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = connection
        .request(ApiKey::Metadata, 12, &request)
        .await
        .ok()?;
    connection.close().await;
    let found = response.topics.iter().any(|topic| topic.error_code == 0);
    Some((response.brokers.len(), found))
}

async fn create(address: SocketAddr, name: &str) -> Result<(), ClientError> {
    let cluster = Rc::new(Cluster::new(address, "brook-bench-failover"));
    let created = cluster.create_topics(&[name.to_owned()], 1, 1, &[]).await;
    cluster.close().await;
    created
}

async fn until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> Result<T, BenchError> {
    until_within("controller-failover", what, STEP_LIMIT, probe).await
}

/// `probe` every [`POLL`] until it answers, at most `limit`; `workload`
/// names the run in the error.
pub(super) async fn until_within<T>(
    workload: &str,
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Result<T, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(BenchError::Broker(format!(
                "{workload}: {what} not within {limit:?}"
            )));
        }
        glommio::timer::sleep(POLL).await;
    }
}

pub(super) async fn all_formed(addresses: &[SocketAddr]) -> Result<i32, BenchError> {
    until_formed(addresses, true).await
}

/// Every node of `addresses` names three brokers, and (`one_controller`)
/// DescribeQuorum names an active controller, which is returned (-1 when
/// not asked: Kafka's KRaft brokers name a random live broker as the
/// controller in Metadata, so only their brokers count).
pub(super) async fn until_formed(
    addresses: &[SocketAddr],
    one_controller: bool,
) -> Result<i32, BenchError> {
    until("three brokers and one controller", async || {
        for address in addresses {
            match metadata(*address, None).await {
                Some((brokers, _)) if brokers == NODES => {}
                _ => return None,
            }
        }
        match one_controller {
            true => active_controller(addresses)
                .await
                .and_then(|controller| i32::try_from(controller).ok()),
            false => Some(-1),
        }
    })
    .await
}

/// The active controller's node id, as DescribeQuorum names the leader of
/// the metadata log (Kafka's KRaft brokers, and Brook's, put a live broker
/// in Metadata's controller id; DescribeQuorum they forward to the
/// controller).
pub(super) async fn active_controller(addresses: &[SocketAddr]) -> Option<usize> {
    let request = DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(topic_name("__cluster_metadata"))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
    ]);
    for address in addresses {
        let cluster = Cluster::new(*address, "brook-bench-failover");
        let Ok(connection) = cluster.own_connection(*address).await else {
            continue;
        };
        let answered: Result<DescribeQuorumResponse, ClientError> = connection
            .request(ApiKey::DescribeQuorum, 0, &request)
            .await;
        connection.close().await;
        let leader = answered
            .ok()
            .filter(|response| response.error_code == 0)
            .and_then(|response| response.topics.into_iter().next())
            .and_then(|topic| topic.partitions.into_iter().next())
            .filter(|partition| partition.error_code == 0)
            .and_then(|partition| usize::try_from(partition.leader_id.0).ok());
        if leader.is_some() {
            return leader;
        }
    }
    None
}

async fn measure(
    mut nodes: Vec<BrokerProcess>,
    addresses: Vec<SocketAddr>,
    kills: usize,
) -> Result<(Vec<Duration>, Vec<Duration>), BenchError> {
    all_formed(&addresses).await?;
    let mut propagations = Vec::new();
    for round in 0..PROPAGATIONS {
        let name = format!("propagation-{round}");
        let started = Instant::now();
        create(addresses[round % NODES], &name)
            .await
            .map_err(crate::workload::client_error)?;
        until("a topic on every broker", async || {
            for address in &addresses {
                if !metadata(*address, Some(&name))
                    .await
                    .is_some_and(|(_, found)| found)
                {
                    return None;
                }
            }
            Some(())
        })
        .await?;
        propagations.push(started.elapsed());
    }
    let mut failovers = Vec::new();
    for round in 0..kills {
        let controller = all_formed(&addresses).await? as usize;
        let survivor = (controller + 1) % NODES;
        nodes[controller].kill();
        let killed = Instant::now();
        let name = format!("failover-{round}");
        until("CreateTopics after the kill", async || {
            create(addresses[survivor], &name).await.ok()
        })
        .await?;
        failovers.push(killed.elapsed());
        nodes[controller].restart()?;
    }
    all_formed(&addresses).await?;
    for node in &mut nodes {
        node.kill();
    }
    Ok((failovers, propagations))
}
