use super::*;
use crate::cluster::records::Endpoint;
use crate::types::{LeaderEpoch, PartitionId, TopicPartition};
use proptest::prelude::*;

fn frames() -> Vec<PeerFrame> {
    let message = Message {
        from: 1,
        to: 2,
        term: 7,
        ..Default::default()
    };
    let entry = Entry {
        index: 3,
        term: 2,
        data: b"records".to_vec().into(),
        ..Default::default()
    };
    let mut snapshot = Snapshot::default();
    snapshot.mut_metadata().index = 9;
    snapshot.set_data(b"image".to_vec().into());
    let mut frames = vec![
        PeerFrame::Hello {
            cluster_id: "abc".into(),
            node: BrokerId(2),
        },
        PeerFrame::Raft(Box::new(message)),
        PeerFrame::Request {
            correlation: 5,
            epoch: 3,
            request: PeerRequest::Register(BrokerRegistration {
                id: BrokerId(1),
                incarnation: [4; 16],
                listeners: vec![Endpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9092,
                }],
                rack: None,
            }),
        },
        PeerFrame::Request {
            correlation: u32::MAX,
            epoch: 3,
            request: PeerRequest::Heartbeat {
                broker: BrokerId(1),
                epoch: 12,
                applied: 40,
                want_shut_down: true,
                offline: vec![
                    TopicPartition {
                        topic: "orders".into(),
                        partition: PartitionId(3),
                    },
                    TopicPartition {
                        topic: "a-b".into(),
                        partition: PartitionId(0),
                    },
                ],
            },
        },
        PeerFrame::Request {
            correlation: 6,
            epoch: 3,
            request: PeerRequest::Fetch(MetadataFetch {
                offset: 3,
                served: 2,
                served_by_all: 1,
            }),
        },
        PeerFrame::Response {
            correlation: 5,
            epoch: 3,
            response: PeerResponse::Registered {
                error: ErrorCode::DUPLICATE_BROKER_REGISTRATION,
                epoch: -1,
            },
        },
        PeerFrame::Response {
            correlation: 5,
            epoch: 3,
            response: PeerResponse::Heartbeat {
                error: ErrorCode::NONE,
                fenced: true,
                should_shut_down: true,
            },
        },
        PeerFrame::Response {
            correlation: 5,
            epoch: 3,
            response: PeerResponse::Heartbeat {
                error: ErrorCode::STALE_BROKER_EPOCH,
                fenced: false,
                should_shut_down: false,
            },
        },
        PeerFrame::Response {
            correlation: 6,
            epoch: 3,
            response: PeerResponse::Fetched(Fetched {
                catchup: Catchup::Entries(vec![entry.clone(), entry]),
                served_by_all: 9,
            }),
        },
        PeerFrame::Response {
            correlation: 6,
            epoch: 3,
            response: PeerResponse::Fetched(Fetched {
                catchup: Catchup::Snapshot(snapshot),
                served_by_all: 0,
            }),
        },
        PeerFrame::Response {
            correlation: 7,
            epoch: 3,
            response: PeerResponse::NotController { leader: None },
        },
        PeerFrame::Request {
            correlation: 10,
            epoch: 0,
            request: PeerRequest::DescribeQuorum,
        },
        PeerFrame::Request {
            correlation: 13,
            epoch: 2,
            request: PeerRequest::AllocateProducerIds {
                broker: BrokerId(3),
                broker_epoch: 17,
            },
        },
        PeerFrame::Request {
            correlation: 14,
            epoch: 2,
            request: PeerRequest::AlterPartition(AlterPartitionRequest {
                broker: BrokerId(1),
                broker_epoch: 17,
                topic: TopicId([8; 16]),
                partition: PartitionId(3),
                leader_epoch: LeaderEpoch(4),
                partition_epoch: 9,
                new_isr: vec![BrokerId(1), BrokerId(3)],
            }),
        },
        PeerFrame::Response {
            correlation: 14,
            epoch: 2,
            response: PeerResponse::AlterPartition(AlterPartitionResponse {
                error: ErrorCode::NONE,
                leader: BrokerId(1),
                leader_epoch: LeaderEpoch(4),
                isr: vec![BrokerId(1), BrokerId(3)],
                partition_epoch: 10,
            }),
        },
        PeerFrame::Response {
            correlation: 14,
            epoch: 2,
            response: PeerResponse::AlterPartition(AlterPartitionResponse::refused(
                ErrorCode::INELIGIBLE_REPLICA,
            )),
        },
        PeerFrame::Response {
            correlation: 13,
            epoch: 2,
            response: PeerResponse::ProducerIds {
                error: ErrorCode::NONE,
                start: 5000,
                length: 1000,
            },
        },
        PeerFrame::Request {
            correlation: 11,
            epoch: 2,
            request: PeerRequest::CreatePartitions {
                topic: "orders".into(),
                total: 12,
                assignments: Some(vec![vec![BrokerId(3)], vec![BrokerId(1), BrokerId(2)]]),
                validate_only: false,
            },
        },
        PeerFrame::Request {
            correlation: 12,
            epoch: 2,
            request: PeerRequest::AlterConfigs {
                topic: "orders".into(),
                changes: vec![
                    (
                        "retention.ms".into(),
                        ConfigOperation::Set(Some("5".into())),
                    ),
                    ("segment.ms".into(), ConfigOperation::Delete),
                    (
                        "cleanup.policy".into(),
                        ConfigOperation::Append(Some("compact".into())),
                    ),
                    ("cleanup.policy".into(), ConfigOperation::Subtract(None)),
                ],
                replace: true,
                validate_only: true,
            },
        },
        PeerFrame::Request {
            correlation: 13,
            epoch: 2,
            request: PeerRequest::AlterBrokerConfigs {
                resource: "".into(),
                changes: vec![
                    (
                        "log.retention.ms".into(),
                        ConfigOperation::Set(Some("5".into())),
                    ),
                    ("message.max.bytes".into(), ConfigOperation::Delete),
                ],
                replace: false,
                validate_only: true,
            },
        },
        PeerFrame::Response {
            correlation: 10,
            epoch: 4,
            response: PeerResponse::Quorum(QuorumDescription {
                leader: BrokerId(2),
                epoch: 4,
                high_watermark: 90,
                voters: vec![
                    ReplicaProgress {
                        node: BrokerId(2),
                        log_end_offset: 91,
                        last_fetch_ms: Some(1_700_000_000_000),
                        last_caught_up_ms: Some(1_700_000_000_000),
                    },
                    ReplicaProgress {
                        node: BrokerId(1),
                        log_end_offset: 0,
                        last_fetch_ms: None,
                        last_caught_up_ms: None,
                    },
                ],
                observers: vec![ReplicaProgress {
                    node: BrokerId(4),
                    log_end_offset: 90,
                    last_fetch_ms: Some(5),
                    last_caught_up_ms: None,
                }],
            }),
        },
        PeerFrame::Response {
            correlation: 7,
            epoch: u64::MAX,
            response: PeerResponse::WrongEpoch {
                error: ErrorCode::FENCED_LEADER_EPOCH,
                leader: Some(BrokerId(3)),
            },
        },
        PeerFrame::Request {
            correlation: 8,
            epoch: 3,
            request: PeerRequest::CreateTopics {
                topics: vec![TopicRequest {
                    name: "orders".into(),
                    partitions: 6,
                    replication_factor: 3,
                    configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
                    assignments: vec![(0, vec![BrokerId(1), BrokerId(2)]), (1, vec![])],
                    id: Some(TopicId([5; 16])),
                }],
                validate_only: true,
            },
        },
        PeerFrame::Request {
            correlation: 9,
            epoch: 3,
            request: PeerRequest::DeleteTopics {
                names: vec!["a".into(), "b".into()],
            },
        },
        PeerFrame::Response {
            correlation: 8,
            epoch: 3,
            response: PeerResponse::Topics {
                results: vec![TopicResult {
                    name: "orders".into(),
                    error: ErrorCode::TOPIC_ALREADY_EXISTS,
                    message: Some("exists".into()),
                    id: TopicId([3; 16]),
                    partitions: 6,
                    replication_factor: 3,
                }],
                offset: 41,
            },
        },
    ];
    for topics in [None, Some(vec![("orders".to_owned(), vec![0, 3])])] {
        frames.push(PeerFrame::Request {
            correlation: 15,
            epoch: 2,
            request: PeerRequest::ElectLeaders {
                election: ElectionType::Unclean,
                topics,
            },
        });
    }
    frames.push(PeerFrame::Response {
        correlation: 15,
        epoch: 2,
        response: PeerResponse::Elected {
            results: vec![TopicElections {
                topic: "orders".into(),
                partitions: vec![
                    PartitionElection {
                        partition: 0,
                        error: ErrorCode::NONE,
                        message: None,
                    },
                    PartitionElection {
                        partition: 3,
                        error: ErrorCode::ELECTION_NOT_NEEDED,
                        message: Some("not needed".into()),
                    },
                ],
            }],
            offset: 52,
        },
    });
    // Null assignments ask the controller to place; an empty list is
    // refused (as Kafka does): the two must not decode alike.
    for assignments in [None, Some(Vec::new())] {
        frames.push(PeerFrame::Request {
            correlation: 13,
            epoch: 2,
            request: PeerRequest::CreatePartitions {
                topic: "orders".into(),
                total: 12,
                assignments,
                validate_only: false,
            },
        });
    }
    frames
}

#[test]
fn every_frame_round_trips() {
    for frame in frames() {
        let bytes = encode_frame(&frame);
        let length = frame_length(bytes[..4].try_into().unwrap()).unwrap();
        assert_eq!(length, bytes.len() - 4);
        assert_eq!(decode_frame(&bytes[4..]), Ok(frame));
    }
}

#[test]
fn oversized_and_garbage_frames_are_errors() {
    assert_eq!(
        frame_length([0xff; 4]),
        Err(PeerWireError::TooLarge(u32::MAX as usize))
    );
    assert_eq!(frame_length([0; 4]), Err(PeerWireError::Empty));
    assert_eq!(decode_frame(&[9]), Err(PeerWireError::UnknownKind(9)));
    assert_eq!(
        decode_frame(&[3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 77]),
        Err(PeerWireError::UnknownTag(77))
    );
}

/// Whether the frame's body ends in a protobuf message that takes the rest
/// of it: a raft message, or a snapshot sent to a follower catching up.
fn ends_in_protobuf(frame: &PeerFrame) -> bool {
    matches!(
        frame,
        PeerFrame::Raft(_)
            | PeerFrame::Response {
                response: PeerResponse::Fetched(Fetched {
                    catchup: Catchup::Snapshot(_),
                    ..
                }),
                ..
            }
    )
}

#[test]
fn a_cut_frame_never_decodes_to_the_frame() {
    for frame in frames() {
        let bytes = encode_frame(&frame);
        for cut in 4..bytes.len() {
            let decoded = decode_frame(&bytes[4..cut]);
            if ends_in_protobuf(&frame) {
                // A protobuf message that runs to the end of the frame, cut
                // at a field boundary, is a shorter valid message (the
                // frame's length prefix is what keeps a whole one whole):
                // it must at least not be this one.
                assert_ne!(decoded, Ok(frame.clone()), "cut at {cut}");
            } else {
                // Brook's own fields have no optional tail: every cut is
                // refused.
                assert!(decoded.is_err(), "{frame:?} cut at {cut}: {decoded:?}");
            }
        }
    }
}

proptest! {
    /// Bytes off the wire either fail or decode to a frame that encodes
    /// back to something decoding to the same frame.
    #[test]
    fn arbitrary_bytes_fail_or_decode_to_a_frame_that_round_trips(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        if let Ok(frame) = decode_frame(&bytes) {
            let again = encode_frame(&frame);
            prop_assert_eq!(decode_frame(&again[4..]), Ok(frame));
        }
    }
}
