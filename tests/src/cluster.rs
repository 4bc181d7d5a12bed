//! Several real `brook serve` processes forming one cluster on 127.0.0.1:
//! each node a combined broker and controller voter, its client port
//! ephemeral and its controller port drawn free before start.

use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, MetadataRequest, MetadataResponse,
};

use crate::broker::Broker;
use crate::netns::Network;
use crate::raw;

#[derive(Debug)]
pub struct Cluster {
    pub nodes: Vec<Broker>,
    /// `controller.quorum.voters`, as every node was given it.
    pub voters: String,
}

/// What one node says of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The live brokers Metadata lists.
    pub brokers: Vec<i32>,
    /// The active controller, as DescribeQuorum through this node names the
    /// metadata log's leader (-1: none). Metadata's controller id is not
    /// it: a KRaft broker names a live broker there, as Kafka's do.
    pub controller: i32,
    /// Metadata's controller id.
    pub metadata_controller: i32,
}

/// A free port of 127.0.0.1 for a broker to listen on (see
/// [`brook_launch::free_port`]).
pub fn free_port() -> u16 {
    brook_launch::free_port().expect("a free port")
}

/// The `--set` arguments that make node `id` a voter of `voters` listening
/// for controllers on `port` of 127.0.0.1.
pub fn node_arguments(id: usize, port: u16, voters: &str) -> Vec<String> {
    node_arguments_at(id, &format!("127.0.0.1:{port}"), voters)
}

/// As [`node_arguments`], listening for controllers on `address`.
fn node_arguments_at(id: usize, address: &str, voters: &str) -> Vec<String> {
    vec![
        "--set".into(),
        format!("node.id={id}"),
        "--set".into(),
        format!("controller.quorum.voters={voters}"),
        "--set".into(),
        format!("listeners=CONTROLLER://{address}"),
    ]
}

/// What the broker at `address` (`host:port`) says (Metadata, then
/// DescribeQuorum), `None` if it does not answer.
pub fn seen_at(address: &str) -> Option<Seen> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let response: MetadataResponse = raw::try_exchange(
        &mut stream,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![])),
    )?;
    let mut brokers: Vec<i32> = response
        .brokers
        .iter()
        .map(|broker| broker.node_id.0)
        .collect();
    brokers.sort();
    Some(Seen {
        brokers,
        controller: leader_through(&mut stream)?,
        metadata_controller: response.controller_id.0,
    })
}

/// The metadata log's leader as DescribeQuorum on `stream` names it (-1:
/// none), `None` if the broker does not answer.
fn leader_through(stream: &mut std::net::TcpStream) -> Option<i32> {
    let response: DescribeQuorumResponse = raw::try_exchange(
        stream,
        ApiKey::DescribeQuorum,
        0,
        &metadata_quorum_request(),
    )?;
    let partition = response.topics.first()?.partitions.first()?;
    Some(match partition.error_code {
        0 => partition.leader_id.0,
        _ => -1,
    })
}

/// DescribeQuorum for the metadata log's one partition.
pub fn metadata_quorum_request() -> DescribeQuorumRequest {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(kafka_protocol::messages::TopicName(
                kafka_protocol::protocol::StrBytes::from_static_str("__cluster_metadata"),
            ))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
    ])
}

impl Cluster {
    /// Starts `count` voters, node ids 0.., each in `root/node-<id>`, with
    /// `extra` arguments for every node.
    pub fn start(binary: &str, root: &Path, count: usize, extra: &[&str]) -> Cluster {
        let controllers: Vec<String> = (0..count)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let extra = |_| {
            extra
                .iter()
                .map(|argument| (*argument).to_owned())
                .collect()
        };
        Cluster::start_at(binary, root, &controllers, extra, |_| (None, None))
    }

    /// As [`Cluster::formed`], node `id` with its own arguments
    /// `extra_of(id)` (a rack, a setting one node alone has).
    pub fn formed_each(
        binary: &str,
        root: &Path,
        count: usize,
        extra_of: impl Fn(usize) -> Vec<String>,
    ) -> (Cluster, Vec<Seen>) {
        let controllers: Vec<String> = (0..count)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let cluster = Cluster::start_at(binary, root, &controllers, extra_of, |_| (None, None));
        let seen = cluster.wait_formed(count);
        (cluster, seen)
    }

    /// Starts one node per controller address (`host:port`), node `id`'s
    /// namespace and listen address from `placed(id)`.
    fn start_at(
        binary: &str,
        root: &Path,
        controllers: &[String],
        extra_of: impl Fn(usize) -> Vec<String>,
        placed: impl Fn(usize) -> (Option<std::path::PathBuf>, Option<String>),
    ) -> Cluster {
        let voters = controllers
            .iter()
            .enumerate()
            .map(|(id, address)| format!("{id}@{address}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = controllers
            .iter()
            .enumerate()
            .map(|(id, address)| {
                let mut arguments = node_arguments_at(id, address, &voters);
                arguments.extend(extra_of(id));
                let (namespace, listen) = placed(id);
                Broker::launch(brook_launch::BrokerLaunch {
                    binary: binary.into(),
                    data_dir: root.join(format!("node-{id}")),
                    cores: 1,
                    cpus: Vec::new(),
                    extra: arguments,
                    namespace,
                    listen,
                })
            })
            .collect();
        Cluster { nodes, voters }
    }

    /// As [`Cluster::formed`], node `i` in namespace `i` of `network`
    /// (listening on its address there, port 9092 for clients and 9093 for
    /// controllers).
    pub fn formed_in(
        binary: &str,
        root: &Path,
        network: &Network,
        count: usize,
        extra: &[&str],
    ) -> (Cluster, Vec<Seen>) {
        let controllers: Vec<String> = (0..count)
            .map(|id| format!("{}:9093", network.address(id)))
            .collect();
        let extra_of = |_| {
            extra
                .iter()
                .map(|argument| (*argument).to_owned())
                .collect()
        };
        let cluster = Cluster::start_at(binary, root, &controllers, extra_of, |id| {
            (
                Some(network.namespace_file(id)),
                Some(format!("{}:9092", network.address(id))),
            )
        });
        let seen = cluster.wait_formed(count);
        (cluster, seen)
    }

    /// Starts a broker-only node `id` (`process.roles=broker`) of this
    /// cluster in `root/node-<id>`, with `extra` arguments; it is
    /// `nodes[len]` from then on.
    pub fn add_broker(&mut self, binary: &str, root: &Path, id: usize, extra: &[&str]) {
        let mut arguments: Vec<String> = vec![
            "--set".into(),
            format!("node.id={id}"),
            "--set".into(),
            "process.roles=broker".into(),
            "--set".into(),
            format!("controller.quorum.voters={}", self.voters),
        ];
        arguments.extend(extra.iter().map(|argument| (*argument).to_owned()));
        let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
        let directory = root.join(format!("node-{id}"));
        self.nodes
            .push(Broker::start(binary, &directory, 1, &arguments));
    }

    /// Metadata from node `index`: its live brokers and the controller; `None`
    /// if it does not answer.
    pub fn seen_by(&self, index: usize) -> Option<Seen> {
        seen_at(&self.nodes[index].address)
    }

    /// Every node's log, each under a header naming it (what a failed
    /// wait shows).
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, node)| format!("----- node {index}\n{}", node.log()))
            .collect()
    }

    /// DescribeCluster's controller id from node `index` (a live broker,
    /// as Kafka's KRaft brokers answer; not the active controller).
    pub fn described_controller(&self, index: usize) -> Option<i32> {
        let stream = std::net::TcpStream::connect(&self.nodes[index].address).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut stream = stream;
        let response: DescribeClusterResponse = raw::try_exchange(
            &mut stream,
            ApiKey::DescribeCluster,
            1,
            &DescribeClusterRequest::default().with_endpoint_type(1),
        )?;
        Some(response.controller_id.0)
    }

    /// Starts `count` voters (as [`Cluster::start`]) and waits until every
    /// node sees all of them and a controller; with what each sees.
    pub fn formed(binary: &str, root: &Path, count: usize, extra: &[&str]) -> (Cluster, Vec<Seen>) {
        let cluster = Cluster::start(binary, root, count, extra);
        let seen = cluster.wait_formed(count);
        (cluster, seen)
    }

    /// Waits until each of the first `count` nodes sees all of them and a
    /// controller.
    fn wait_formed(&self, count: usize) -> Vec<Seen> {
        let all: Vec<usize> = (0..count).collect();
        let ids: Vec<i32> = (0..count as i32).collect();
        self.wait_until(
            &all,
            Duration::from_secs(30),
            "every broker and a controller",
            |seen| seen.brokers == ids && seen.controller >= 0,
        )
    }

    /// DescribeQuorum at `version` from node `index`, `None` if it does
    /// not answer.
    pub fn described_quorum(&self, index: usize, version: i16) -> Option<DescribeQuorumResponse> {
        let mut stream = std::net::TcpStream::connect(&self.nodes[index].address).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        raw::try_exchange(
            &mut stream,
            ApiKey::DescribeQuorum,
            version,
            &metadata_quorum_request(),
        )
    }

    /// The active controller as DescribeQuorum through node `index` says
    /// (`None`: no answer, an error, or no leader yet). Metadata's
    /// controller id is not it while a broker knows no controller: the
    /// broker then names itself, as Kafka's brokers name any live broker.
    pub fn quorum_leader(&self, index: usize) -> Option<usize> {
        let response = self.described_quorum(index, 1)?;
        let partition = response.topics.first()?.partitions.first()?;
        let leader = partition.leader_id.0;
        (response.error_code == 0 && partition.error_code == 0 && leader >= 0)
            .then_some(leader as usize)
    }

    /// Waits until DescribeQuorum through node `index` names a controller
    /// other than `old`; that one.
    pub fn wait_for_new_controller(&self, index: usize, old: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(leader) = self.quorum_leader(index).filter(|leader| *leader != old) {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no controller but {old} through node {index}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Node `index`'s controller listener port, from `controller.quorum.voters`.
    pub fn controller_port(&self, index: usize) -> u16 {
        self.voters
            .split(',')
            .find_map(|voter| {
                let (id, address) = voter.split_once('@')?;
                (id == index.to_string()).then(|| address.rsplit_once(':')?.1.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no voter {index} in {}", self.voters))
    }

    /// Waits until every node in `asked` sees `wanted` (a function of what
    /// it sees), up to `limit`; panics with the nodes' views and logs if not.
    pub fn wait_until(
        &self,
        asked: &[usize],
        limit: Duration,
        what: &str,
        wanted: impl Fn(&Seen) -> bool,
    ) -> Vec<Seen> {
        let deadline = Instant::now() + limit;
        loop {
            let seen: Vec<Option<Seen>> = asked.iter().map(|index| self.seen_by(*index)).collect();
            if seen.iter().all(|seen| seen.as_ref().is_some_and(&wanted)) {
                return seen.into_iter().map(Option::unwrap).collect();
            }
            if Instant::now() > deadline {
                let logs: Vec<String> =
                    asked.iter().map(|index| self.nodes[*index].log()).collect();
                panic!(
                    "{what}: not within {limit:?}; nodes see {seen:?}\nlogs:\n{}",
                    logs.join("\n-----\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
