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
    let fetch = || PeerRequest::Fetch { offset: 0 };
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

/// A one-node Brook has no quorum: it does not advertise DescribeQuorum,
/// and answers one with UNSUPPORTED_VERSION and a reason.
#[test]
fn a_one_node_brook_has_no_quorum_to_describe() {
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
        !versions
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
    assert_eq!(response.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(
        response
            .error_message
            .is_some_and(|message| message.contains("controller.quorum.voters"))
    );
}
