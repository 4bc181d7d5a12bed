//! The controller epoch (the Raft term) as a peer meets it on the
//! controller listener, and DescribeQuorum as a client sees it: a request
//! from an older epoch is refused FENCED_LEADER_EPOCH, one from an epoch the
//! voter has not reached UNKNOWN_LEADER_EPOCH (KRaft's answers), and every
//! answer carries the voter's epoch.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use brook_engine::cluster::peer_wire::{
    PeerFrame, PeerRequest, PeerResponse, decode_frame, encode_frame, frame_length,
};
use brook_engine::cluster::quorum::MetadataFetch;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::types::BrokerId;
use brook_tests::broker::Broker;
use brook_tests::cluster::{Cluster, metadata_quorum_request};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, DescribeQuorumResponse,
};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const ALL: [usize; 3] = [0, 1, 2];

/// A peer connection to a voter's controller listener, as a broker opens it.
struct Peer {
    stream: TcpStream,
    correlation: u32,
}

impl Peer {
    fn connect(port: u16, cluster_id: &str) -> Peer {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let hello = PeerFrame::Hello {
            cluster_id: cluster_id.to_owned(),
            node: BrokerId(42),
        };
        stream.write_all(&encode_frame(&hello)).unwrap();
        let mut peer = Peer {
            stream,
            correlation: 0,
        };
        assert!(matches!(peer.read(), PeerFrame::Hello { .. }));
        peer
    }

    fn read(&mut self) -> PeerFrame {
        let mut prefix = [0u8; 4];
        self.stream.read_exact(&mut prefix).unwrap();
        let mut body = vec![0u8; frame_length(prefix).unwrap()];
        self.stream.read_exact(&mut body).unwrap();
        decode_frame(&body).unwrap()
    }

    /// A request sent at `epoch`: the answer and the epoch it carries.
    fn ask(&mut self, epoch: u64, request: PeerRequest) -> (u64, PeerResponse) {
        self.correlation += 1;
        let frame = PeerFrame::Request {
            correlation: self.correlation,
            epoch,
            request,
        };
        self.stream.write_all(&encode_frame(&frame)).unwrap();
        match self.read() {
            PeerFrame::Response {
                correlation,
                epoch,
                response,
            } if correlation == self.correlation => (epoch, response),
            other => panic!("not the answer: {other:?}"),
        }
    }
}

fn cluster_id(broker: &Broker) -> String {
    let mut stream = brook_tests::raw::connect(broker);
    let response: DescribeClusterResponse = brook_tests::raw::exchange(
        &mut stream,
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(1),
    );
    response.cluster_id.to_string()
}

/// After an election (kill -9 of the first controller), requests at the
/// first epoch and at one not reached yet are refused by the new
/// controller; at its epoch, or with none known yet, they are served.
#[test]
fn requests_from_another_controller_epoch_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, seen) = Cluster::formed(BROOK, root.path(), 3, &[]);
    let first = seen[0].controller as usize;
    let first_epoch = described(&cluster, first).leader_epoch as u64;
    cluster.nodes[first].kill();
    let survivors: Vec<usize> = ALL.into_iter().filter(|index| *index != first).collect();
    let seen = cluster.wait_until(
        &survivors,
        Duration::from_secs(30),
        "a new controller",
        |seen| seen.controller >= 0 && seen.controller != first as i32,
    );
    let controller = seen[0].controller as usize;
    let partition = described(&cluster, survivors[0]);
    assert_eq!(partition.leader_id.0, controller as i32);
    let epoch = partition.leader_epoch as u64;
    assert!(epoch > first_epoch, "{epoch} after {first_epoch}");

    let mut peer = Peer::connect(
        cluster.controller_port(controller),
        &cluster_id(&cluster.nodes[controller]),
    );
    let fetch = || PeerRequest::Fetch(MetadataFetch::default());
    assert_eq!(
        peer.ask(first_epoch, fetch()),
        (
            epoch,
            PeerResponse::WrongEpoch {
                error: ErrorCode::FENCED_LEADER_EPOCH,
                leader: Some(BrokerId(controller as i32)),
            }
        )
    );
    let (answered, response) = peer.ask(epoch + 1, fetch());
    assert_eq!(answered, epoch);
    assert!(
        matches!(response, PeerResponse::WrongEpoch { error, .. } if error == ErrorCode::UNKNOWN_LEADER_EPOCH),
        "{response:?}"
    );
    for known in [epoch, 0] {
        let (answered, response) = peer.ask(known, fetch());
        assert_eq!(answered, epoch);
        assert!(matches!(response, PeerResponse::Fetched(_)), "{response:?}");
    }
    // Any broker's DescribeQuorum reaches the same controller, at every
    // version (v2 adds the voters' endpoints).
    for version in 0..=2 {
        let response = cluster.described_quorum(survivors[1], version).unwrap();
        let partition = &response.topics[0].partitions[0];
        assert_eq!(partition.leader_epoch as u64, epoch, "v{version}");
        assert_eq!(partition.current_voters.len(), 3, "v{version}");
        assert_eq!(response.nodes.len(), if version >= 2 { 3 } else { 0 });
    }
}

fn described(
    cluster: &Cluster,
    index: usize,
) -> kafka_protocol::messages::describe_quorum_response::PartitionData {
    let response = cluster
        .described_quorum(index, 2)
        .expect("a DescribeQuorum answer");
    assert_eq!(response.error_code, 0, "{response:?}");
    let partition = response.topics[0].partitions[0].clone();
    assert_eq!(partition.error_code, 0, "{partition:?}");
    partition
}

/// A one-node Brook is the one voter of its own quorum: it advertises
/// DescribeQuorum and describes itself as the leader and only voter, as
/// Kafka's standalone quorum does.
#[test]
fn a_one_node_brook_describes_its_own_quorum() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 1, &[]);
    let mut stream = brook_tests::raw::connect(&broker);
    let versions: ApiVersionsResponse = brook_tests::raw::exchange(
        &mut stream,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert!(
        versions
            .api_keys
            .iter()
            .any(|key| key.api_key == ApiKey::DescribeQuorum as i16)
    );
    let response: DescribeQuorumResponse = brook_tests::raw::exchange(
        &mut stream,
        ApiKey::DescribeQuorum,
        2,
        &metadata_quorum_request(),
    );
    assert_eq!(response.error_code, 0, "{response:?}");
    let partition = &response.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{response:?}");
    assert_eq!(partition.leader_id.0, 0, "{response:?}");
    let voters: Vec<i32> = partition
        .current_voters
        .iter()
        .map(|voter| voter.replica_id.0)
        .collect();
    assert_eq!(voters, [0], "{response:?}");
    assert!(partition.leader_epoch >= 1, "{response:?}");
}

/// The committed metadata as the controller at `port` serves it to a
/// broker, applied to an image.
fn metadata_image(
    port: u16,
    cluster_id: &str,
) -> brook_engine::cluster::cluster_image::ClusterImage {
    use brook_engine::cluster::quorum::{Catchup, Fetched, apply_catchup};
    let mut peer = Peer::connect(port, cluster_id);
    let mut image = brook_engine::cluster::cluster_image::ClusterImage::default();
    loop {
        let offset = image.offset;
        let fetch = MetadataFetch {
            offset,
            ..MetadataFetch::default()
        };
        match peer.ask(0, PeerRequest::Fetch(fetch)).1 {
            PeerResponse::Fetched(Fetched {
                catchup: Catchup::Entries(entries),
                ..
            }) if entries.is_empty() => return image,
            PeerResponse::Fetched(Fetched { catchup, .. }) => {
                apply_catchup(&mut image, &catchup).unwrap();
            }
            other => panic!("not a catch-up: {other:?}"),
        }
        if image.offset == offset {
            return image;
        }
    }
}

/// One partition's answer to a Fetch v12 sent as replica `replica`.
fn replica_fetch(
    broker: &Broker,
    replica: i32,
    current_leader_epoch: i32,
    fetch_offset: i64,
    last_fetched_epoch: i32,
) -> kafka_protocol::messages::fetch_response::PartitionData {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
    let request = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(replica))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str("fenced"),
                ))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(current_leader_epoch)
                        .with_fetch_offset(fetch_offset)
                        .with_last_fetched_epoch(last_fetched_epoch)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let mut stream = brook_tests::raw::connect(broker);
    let mut response: FetchResponse =
        brook_tests::raw::exchange(&mut stream, ApiKey::Fetch, 12, &request);
    assert_eq!(response.error_code, 0, "{response:?}");
    response.responses.remove(0).partitions.remove(0)
}

/// Acceptance 9 of replication: replica fetches and ISR changes with bad
/// fields get Kafka's answers, and nothing panics: a fetch from a broker
/// that is no replica, at a future or a stale leader epoch, past the log
/// end, or from a follower whose last epoch ended earlier here
/// (DivergingEpoch); an AlterPartition at a stale partition epoch or broker
/// epoch.
#[test]
fn bad_replica_fetches_and_isr_changes_get_kafkas_errors() {
    use brook_engine::cluster::alter_partition::AlterPartitionRequest;
    use brook_engine::types::{LeaderEpoch, PartitionId};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    brook_tests::raw::create(
        &mut brook_tests::raw::connect(&cluster.nodes[0]),
        CreatableTopic::default()
            .with_name(TopicName(
                kafka_protocol::protocol::StrBytes::from_static_str("fenced"),
            ))
            .with_num_partitions(1)
            .with_replication_factor(3),
    );
    let cluster_id = cluster_id(&cluster.nodes[0]);
    // The active controller as a live node knows it; once `stopped` is
    // down, another node may still name it until the election lands.
    let controller_port = |cluster: &Cluster, stopped: Option<usize>| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let known = (0..3)
                .filter(|index| Some(*index) != stopped)
                .filter_map(|index| cluster.seen_by(index))
                .map(|seen| seen.controller)
                .find(|controller| *controller >= 0 && Some(*controller as usize) != stopped);
            if let Some(controller) = known {
                return cluster.controller_port(controller as usize);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no live node knows a live controller"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let registration = |cluster: &Cluster, stopped: Option<usize>| {
        let image = metadata_image(controller_port(cluster, stopped), &cluster_id);
        let topic = image.topic_by_name("fenced").unwrap().clone();
        (image, topic.id, topic.partitions[0].clone())
    };
    let (_, _, first) = registration(&cluster, None);
    let leader = first.leader.0 as usize;
    let mut to_leader = brook_tests::raw::connect(&cluster.nodes[leader]);
    // The leader serves the topic once the metadata reaches it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let one = || {
        brook_engine::log::builder::encode_batch(
            &[brook_engine::log::builder::NewRecord::value(
                b"x".to_vec(),
                brook_engine::types::TimestampMs(1),
            )],
            &brook_engine::log::builder::BatchOptions::default(),
        )
    };
    while brook_tests::raw::produce_batch(&mut to_leader, "fenced", 0, -1, one()).error_code != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the leader does not take records"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 1..10 {
        brook_tests::raw::produce_filler(&mut to_leader, "fenced", 0, 1, 10);
    }
    let follower = first
        .replicas
        .iter()
        .find(|id| id.0 as usize != leader)
        .unwrap()
        .0;
    let on_leader = &cluster.nodes[leader];
    // No replica: UNKNOWN_LEADER_EPOCH with an epoch, else NOT_LEADER_OR_FOLLOWER.
    assert_eq!(replica_fetch(on_leader, 42, 0, 0, -1).error_code, 75);
    assert_eq!(replica_fetch(on_leader, 42, -1, 0, -1).error_code, 6);
    // A future epoch: UNKNOWN_LEADER_EPOCH.
    assert_eq!(replica_fetch(on_leader, follower, 5, 0, -1).error_code, 75);
    // Past the log end with no epoch: OFFSET_OUT_OF_RANGE.
    assert_eq!(replica_fetch(on_leader, follower, 0, 100, -1).error_code, 1);
    // Epoch 0 ends at 10 here: a follower at 15 of epoch 0 diverged.
    let diverged = replica_fetch(on_leader, follower, 0, 15, 0);
    assert_eq!(diverged.error_code, 0);
    assert_eq!(
        (
            diverged.diverging_epoch.epoch,
            diverged.diverging_epoch.end_offset
        ),
        (0, 10)
    );
    // A fetch that follows gets the records and the high watermark.
    let fetched = replica_fetch(on_leader, follower, 0, 0, -1);
    assert_eq!((fetched.error_code, fetched.high_watermark), (0, 10));
    assert!(fetched.records.is_some_and(|records| !records.is_empty()));

    // The leader moves (a controlled shutdown): epoch 0 is stale now.
    assert!(cluster.nodes[leader].stop());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (image, topic_id, moved) = loop {
        let (image, id, now) = registration(&cluster, Some(leader));
        if now.leader_epoch.0 > 0 && now.leader.0 >= 0 {
            break (image, id, now);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new leader: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let new_leader = &cluster.nodes[moved.leader.0 as usize];
    let other = moved
        .replicas
        .iter()
        .find(|id| **id != moved.leader)
        .unwrap()
        .0;
    assert_eq!(
        replica_fetch(new_leader, other, 0, 0, -1).error_code,
        74,
        "FENCED_LEADER_EPOCH"
    );
    let epoch = moved.leader_epoch.0;
    let diverged = replica_fetch(new_leader, other, epoch, 15, 0);
    assert_eq!(
        (
            diverged.diverging_epoch.epoch,
            diverged.diverging_epoch.end_offset
        ),
        (0, 10)
    );

    // AlterPartition at a stale partition epoch, then a stale broker epoch.
    let broker_epoch = image.brokers[&moved.leader].epoch;
    let change = |partition_epoch: i32, broker_epoch: i64| {
        PeerRequest::AlterPartition(AlterPartitionRequest {
            broker: moved.leader,
            broker_epoch,
            topic: topic_id,
            partition: PartitionId(0),
            leader_epoch: LeaderEpoch(epoch),
            partition_epoch,
            new_isr: vec![moved.leader],
        })
    };
    let mut peer = Peer::connect(controller_port(&cluster, Some(leader)), &cluster_id);
    for (request, wanted) in [
        (
            change(moved.partition_epoch - 1, broker_epoch),
            ErrorCode::INVALID_UPDATE_VERSION,
        ),
        (
            change(moved.partition_epoch, broker_epoch - 1),
            ErrorCode::STALE_BROKER_EPOCH,
        ),
    ] {
        match peer.ask(0, request).1 {
            PeerResponse::AlterPartition(answer) => assert_eq!(answer.error, wanted, "{answer:?}"),
            other => panic!("not an AlterPartition answer: {other:?}"),
        }
    }
    // Every broker still serves.
    cluster.nodes[leader].restart();
    for node in &cluster.nodes {
        assert!(
            brook_tests::cluster::seen_at(&node.address).is_some(),
            "{}",
            node.log()
        );
    }
}
