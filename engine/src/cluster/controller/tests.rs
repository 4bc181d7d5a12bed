use super::*;
use crate::cluster::records::Endpoint;

pub(crate) fn registration(id: i32, incarnation: u8) -> BrokerRegistration {
    BrokerRegistration {
        id: BrokerId(id),
        incarnation: [incarnation; 16],
        listeners: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
        }],
        rack: None,
    }
}

/// Three registered, unfenced brokers at offsets 1..=3, unfenced at 4.
pub(crate) fn three_brokers() -> ClusterImage {
    let mut image = ClusterImage::default();
    for id in 1..=3 {
        image
            .apply(
                id as u64,
                &[MetadataRecord::RegisterBroker(registration(id, 1))],
            )
            .unwrap();
    }
    let unfence: Vec<_> = (1..=3)
        .map(|id| MetadataRecord::UnfenceBroker {
            id: BrokerId(id),
            epoch: id as i64,
        })
        .collect();
    image.apply(4, &unfence).unwrap();
    image
}

/// A heartbeat that does not ask to shut down.
fn beat(broker: i32, epoch: i64, applied_offset: u64) -> HeartbeatRequest {
    HeartbeatRequest {
        broker: BrokerId(broker),
        epoch,
        applied_offset,
        want_shut_down: false,
        offline: Vec::new(),
    }
}

fn defaults() -> TopicDefaults {
    TopicDefaults {
        partitions: 1,
        replication_factor: 1,
        log: LogConfig::default(),
    }
}

fn request(name: &str, partitions: i32, replication_factor: i16) -> TopicRequest {
    TopicRequest {
        name: name.into(),
        partitions,
        replication_factor,
        configs: BTreeMap::from([("retention.ms".into(), "60000".into())]),
        assignments: Vec::new(),
        id: None,
    }
}

#[test]
fn a_topic_is_placed_on_live_brokers_with_every_replica_in_sync() {
    let mut image = three_brokers();
    let records = create_topic(
        &image,
        &request("orders", 6, 3),
        &defaults(),
        TopicId([5; 16]),
    )
    .unwrap();
    image.apply(5, &records).unwrap();
    let topic = image.topic_by_name("orders").unwrap();
    assert_eq!(topic.partitions.len(), 6);
    assert_eq!(topic.configs["retention.ms"], "60000");
    let mut leaders = BTreeMap::new();
    for partition in &topic.partitions {
        assert_eq!(partition.replicas.len(), 3);
        assert_eq!(partition.isr, partition.replicas);
        assert_eq!(partition.leader, partition.replicas[0]);
        *leaders.entry(partition.leader).or_insert(0) += 1;
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
}

#[test]
fn create_topics_refusals_are_kafkas() {
    let mut image = three_brokers();
    let refuse = |image: &ClusterImage, request: TopicRequest| {
        create_topic(image, &request, &defaults(), TopicId([7; 16]))
            .unwrap_err()
            .error
    };
    assert_eq!(
        refuse(&image, request("a b", 1, 1)),
        ErrorCode::INVALID_TOPIC_EXCEPTION
    );
    assert_eq!(
        refuse(&image, request("t", 0, 1)),
        ErrorCode::INVALID_PARTITIONS
    );
    assert_eq!(
        refuse(&image, request("t", 1, 0)),
        ErrorCode::INVALID_REPLICATION_FACTOR
    );
    assert_eq!(
        refuse(&image, request("t", 1, 4)),
        ErrorCode::INVALID_REPLICATION_FACTOR
    );
    let records =
        create_topic(&image, &request("t", -1, -1), &defaults(), TopicId([6; 16])).unwrap();
    image.apply(5, &records).unwrap();
    assert_eq!(image.topic_by_name("t").unwrap().partitions.len(), 1);
    assert_eq!(
        refuse(&image, request("t", 1, 1)),
        ErrorCode::TOPIC_ALREADY_EXISTS
    );
    // A new topic never takes an id in use (ids are drawn again).
    assert_eq!(
        create_topic(&image, &request("v", 1, 1), &defaults(), TopicId([6; 16]))
            .unwrap_err()
            .error,
        ErrorCode::UNKNOWN_SERVER_ERROR
    );
    // A fenced broker takes no replicas.
    image
        .apply(
            6,
            &[MetadataRecord::FenceBroker {
                id: BrokerId(2),
                epoch: 2,
            }],
        )
        .unwrap();
    assert_eq!(
        refuse(&image, request("u", 1, 3)),
        ErrorCode::INVALID_REPLICATION_FACTOR
    );
    assert_eq!(
        delete_topic(&image, "t"),
        Ok(vec![MetadataRecord::RemoveTopic {
            id: TopicId([6; 16])
        }])
    );
    assert_eq!(
        delete_topic(&image, "nope").unwrap_err().error,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
    );
}

#[test]
fn one_request_creates_and_deletes_several_topics_in_one_batch() {
    let mut image = three_brokers();
    let requests = vec![request("a", 2, 3), request("b", 1, 1), request("a", 1, 1)];
    let ids = [TopicId([1; 16]), TopicId([2; 16]), TopicId([3; 16])];
    let (results, records) = create_topics(&image, &requests, &defaults(), &ids);
    assert_eq!(
        results[0],
        Ok(Created {
            id: ids[0],
            partitions: 2,
            replication_factor: 3
        })
    );
    assert!(results[1].is_ok());
    assert_eq!(
        results[2].as_ref().unwrap_err().error,
        ErrorCode::TOPIC_ALREADY_EXISTS
    );
    image.apply(5, &records).unwrap();
    assert_eq!(image.topics.len(), 2);
    let names = vec!["a".to_owned(), "a".to_owned(), "zz".to_owned()];
    let (results, records) = delete_topics(&image, &names);
    assert_eq!(results[0], Ok(ids[0]));
    assert_eq!(results[1], Ok(ids[0]));
    assert_eq!(
        results[2].as_ref().unwrap_err().error,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
    );
    image.apply(6, &records).unwrap();
    assert!(image.topic_by_name("a").is_none());
}

/// A broker forwards a CreateTopics again when the controller that
/// committed it died before answering: the topic it finds under its own
/// id is its own, and succeeds again; another request's id is refused.
#[test]
fn a_create_asked_again_with_its_own_id_succeeds_with_no_records() {
    let mut image = three_brokers();
    let requests = vec![request("a", 2, 3)];
    let ids = [TopicId([1; 16])];
    let (first, records) = create_topics(&image, &requests, &defaults(), &ids);
    image.apply(5, &records).unwrap();
    let (again, records) = create_topics(&image, &requests, &defaults(), &ids);
    assert_eq!(again, first);
    assert!(records.is_empty(), "{records:?}");
    let (other, records) = create_topics(&image, &requests, &defaults(), &[TopicId([2; 16])]);
    assert_eq!(
        other[0].as_ref().unwrap_err().error,
        ErrorCode::TOPIC_ALREADY_EXISTS
    );
    assert!(records.is_empty());
}

#[test]
fn a_stalled_controller_counts_its_stall_against_no_session() {
    let image = three_brokers();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    sessions.restart_all(&image, 1_000);
    // Ticks every 100 ms: nothing credited.
    for now in (1_100..=3_000).step_by(100) {
        assert_eq!(sessions.looked(now), None);
    }
    for id in [1, 2] {
        heartbeat(&image, &mut sessions, beat(id, id as i64, 4), 0, 3_000);
    }
    // The loop stalls 12 s: broker 3, last heard at 1,000, and the two
    // others, heard at 3,000, would all be past the 9 s session.
    assert_eq!(sessions.looked(15_000), Some(12_000));
    assert!(sessions.expired(&image, 15_000).is_empty());
    // Time the controller runs on counts again: broker 3 stays silent,
    // and its session (heard at 1,000, plus the 12 s stall) ends at
    // 22,000.
    for now in (15_100..=22_000).step_by(100) {
        assert_eq!(sessions.looked(now), None);
        if now % 2_000 == 0 {
            for id in [1, 2] {
                heartbeat(&image, &mut sessions, beat(id, id as i64, 4), 0, now);
            }
        }
    }
    assert!(sessions.expired(&image, 22_000).is_empty());
    let expired = sessions.expired(&image, 22_001);
    assert!(
        matches!(
            &expired[..],
            [MetadataRecord::FenceBroker {
                id: BrokerId(3),
                ..
            }]
        ),
        "{expired:?}"
    );
}

#[test]
fn a_broker_is_fenced_when_its_session_expires_and_unfenced_when_it_returns() {
    let mut image = three_brokers();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    sessions.restart_all(&image, 1_000);
    assert!(sessions.expired(&image, 10_000).is_empty());
    for id in [1, 3] {
        heartbeat(&image, &mut sessions, beat(id, id as i64, 4), 0, 9_000);
    }
    let expired = sessions.expired(&image, 10_001);
    assert_eq!(
        expired,
        vec![MetadataRecord::FenceBroker {
            id: BrokerId(2),
            epoch: 2
        }]
    );
    image.apply(5, &expired).unwrap();
    // It comes back serving its registration but not as far as brokers
    // were told every live broker serves (7): still fenced, or it could
    // lack a topic the others show.
    let behind = heartbeat(&image, &mut sessions, beat(2, 2, 5), 7, 11_000);
    assert!(behind.fenced && behind.records.is_empty());
    // It comes back: a heartbeat at its epoch, caught up, unfences it.
    let outcome = heartbeat(&image, &mut sessions, beat(2, 2, 5), 5, 11_000);
    assert_eq!(outcome.error, ErrorCode::NONE);
    assert!(outcome.fenced);
    assert_eq!(
        outcome.records,
        vec![MetadataRecord::UnfenceBroker {
            id: BrokerId(2),
            epoch: 2
        }]
    );
    // Not yet caught up to its own registration: stays fenced.
    let mut fresh = image.clone();
    fresh
        .apply(6, &[MetadataRecord::RegisterBroker(registration(2, 9))])
        .unwrap();
    assert!(
        heartbeat(&fresh, &mut sessions, beat(2, 6, 5), 0, 11_000)
            .records
            .is_empty()
    );
    assert_eq!(
        heartbeat(&fresh, &mut sessions, beat(2, 2, 6), 0, 11_000).error,
        ErrorCode::STALE_BROKER_EPOCH
    );
    assert_eq!(
        heartbeat(&fresh, &mut sessions, beat(7, 1, 6), 0, 11_000).error,
        ErrorCode::BROKER_ID_NOT_REGISTERED
    );
}

/// Three brokers and topic "orders" of 3 partitions on all three, one
/// led by each, applied at offset 5.
fn three_brokers_one_topic() -> ClusterImage {
    let mut image = three_brokers();
    let records = create_topic(
        &image,
        &request("orders", 3, 3),
        &defaults(),
        TopicId([5; 16]),
    )
    .unwrap();
    image.apply(5, &records).unwrap();
    image
}

/// Brokers 1..=3 and topic "solo": three partitions of one replica each.
fn three_brokers_one_single_replica_topic() -> ClusterImage {
    let mut image = three_brokers();
    let single = create_topic(
        &image,
        &request("solo", 3, 1),
        &defaults(),
        TopicId([6; 16]),
    )
    .unwrap();
    image.apply(5, &single).unwrap();
    image
}

fn leaders(image: &ClusterImage) -> Vec<BrokerId> {
    let topic = image.topic_by_name("orders").unwrap();
    topic
        .partitions
        .iter()
        .map(|partition| partition.leader)
        .collect()
}

#[test]
fn an_expired_session_fences_the_broker_and_moves_its_leaderships_in_one_batch() {
    let mut image = three_brokers_one_topic();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    sessions.restart_all(&image, 0);
    for id in [1, 3] {
        heartbeat(&image, &mut sessions, beat(id, id as i64, 5), 0, 9_000);
    }
    let records = sessions.expired(&image, 9_001);
    assert_eq!(
        records.last(),
        Some(&MetadataRecord::FenceBroker {
            id: BrokerId(2),
            epoch: 2
        })
    );
    assert!(records.len() > 1, "{records:?}");
    image.apply(6, &records).unwrap();
    assert!(!leaders(&image).contains(&BrokerId(2)));
    let topic = image.topic_by_name("orders").unwrap();
    for partition in &topic.partitions {
        assert!(!partition.isr.contains(&BrokerId(2)));
    }
}

#[test]
fn an_unfenced_broker_leads_the_offline_partitions_of_which_it_is_in_the_isr() {
    let mut image = three_brokers_one_single_replica_topic();
    image
        .apply(6, &fence_brokers(&image, &[(BrokerId(2), 2)]))
        .unwrap();
    let solo = image.topic_by_name("solo").unwrap();
    let offline = solo
        .partitions
        .iter()
        .filter(|p| p.leader == BrokerId::NONE)
        .count();
    assert_eq!(offline, 1, "broker 2's partition is offline, its ISR kept");
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    let outcome = heartbeat(&image, &mut sessions, beat(2, 2, 6), 0, 0);
    assert_eq!(
        outcome.records[0],
        MetadataRecord::UnfenceBroker {
            id: BrokerId(2),
            epoch: 2
        }
    );
    assert_eq!(outcome.records.len(), 2, "{:?}", outcome.records);
    image.apply(7, &outcome.records).unwrap();
    let solo = image.topic_by_name("solo").unwrap();
    assert!(solo.partitions.iter().all(|p| p.leader != BrokerId::NONE));
}

fn partition(topic: &str, index: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.to_owned(),
        partition: PartitionId(index),
    }
}

/// KIP-858: a heartbeat naming partitions of a failed log directory takes
/// the broker out of their ISRs and gives their leaderships to others; its
/// other partitions stay as they are, and the same report again changes
/// nothing.
#[test]
fn a_heartbeat_naming_offline_replicas_moves_them_out_of_isr_and_leadership() {
    let mut image = three_brokers_one_topic();
    let led = leaders(&image);
    let failed = led
        .iter()
        .position(|leader| *leader == BrokerId(1))
        .expect("broker 1 leads a partition") as i32;
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    let report = HeartbeatRequest {
        offline: vec![partition("orders", failed), partition("gone", 0)],
        ..beat(1, 1, 5)
    };
    let outcome = heartbeat(&image, &mut sessions, report.clone(), 0, 0);
    assert_eq!(outcome.error, ErrorCode::NONE);
    assert_eq!(outcome.records.len(), 1, "{:?}", outcome.records);
    image.apply(6, &outcome.records).unwrap();
    let topic = image.topic_by_name("orders").unwrap();
    for (index, registration) in topic.partitions.iter().enumerate() {
        if index as i32 == failed {
            assert_ne!(registration.leader, BrokerId(1));
            assert_ne!(registration.leader, BrokerId::NONE);
            assert!(!registration.isr.contains(&BrokerId(1)));
            assert_eq!(registration.leader_epoch, LeaderEpoch(1));
        } else {
            assert!(registration.isr.contains(&BrokerId(1)), "untouched");
            assert_eq!(registration.leader, led[index]);
        }
    }
    let again = heartbeat(&image, &mut sessions, report, 0, 0);
    assert!(again.records.is_empty(), "{:?}", again.records);
}

/// A partition whose only in-sync replica failed keeps it as its last ISR
/// member, leaderless (as when that broker is fenced), and the broker's
/// return from a fence does not make it lead that partition again.
#[test]
fn an_offline_last_isr_member_leaves_its_partition_leaderless_and_does_not_lead_it_again() {
    let mut image = three_brokers_one_single_replica_topic();
    let solo = image.topic_by_name("solo").unwrap();
    let index = solo
        .partitions
        .iter()
        .position(|p| p.leader == BrokerId(2))
        .expect("broker 2 leads one") as i32;
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    let report = HeartbeatRequest {
        offline: vec![partition("solo", index)],
        ..beat(2, 2, 5)
    };
    let outcome = heartbeat(&image, &mut sessions, report.clone(), 0, 0);
    image.apply(6, &outcome.records).unwrap();
    let registration = &image.topic_by_name("solo").unwrap().partitions[index as usize];
    assert_eq!(registration.leader, BrokerId::NONE);
    assert_eq!(
        registration.isr,
        vec![BrokerId(2)],
        "the ISR is never emptied"
    );
    // Fenced, then back with the directory still failed: unfenced, but the
    // partition stays leaderless.
    image
        .apply(7, &fence_brokers(&image, &[(BrokerId(2), 2)]))
        .unwrap();
    let back = heartbeat(&image, &mut sessions, report, 0, 0);
    assert_eq!(
        back.records,
        vec![MetadataRecord::UnfenceBroker {
            id: BrokerId(2),
            epoch: 2
        }]
    );
}

#[test]
fn a_new_incarnation_over_an_expired_session_moves_the_old_ones_leaderships() {
    let mut image = three_brokers_one_topic();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    sessions.restart_all(&image, 0);
    let records =
        register_broker(&image, &sessions, registration(1, 2), BrokerId(0), 9_001).unwrap();
    assert_eq!(
        records.last(),
        Some(&MetadataRecord::RegisterBroker(registration(1, 2)))
    );
    image.apply(6, &records).unwrap();
    assert!(image.brokers[&BrokerId(1)].fenced);
    assert!(!leaders(&image).contains(&BrokerId(1)));
}

#[test]
fn controlled_shutdown_moves_every_leadership_before_the_broker_may_stop() {
    let mut image = three_brokers_one_topic();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    let stopping = HeartbeatRequest {
        want_shut_down: true,
        ..beat(1, 1, 5)
    };
    let before = leaders(&image);
    assert!(before.contains(&BrokerId(1)));
    let first = heartbeat(&image, &mut sessions, stopping.clone(), 0, 0);
    assert_eq!(
        (first.error, first.should_shut_down),
        (ErrorCode::NONE, false)
    );
    assert_eq!(
        first.records[0],
        MetadataRecord::ControlledShutdown {
            id: BrokerId(1),
            epoch: 1
        }
    );
    image.apply(6, &first.records).unwrap();
    assert!(!image.leads_any(BrokerId(1)));
    let topic = image.topic_by_name("orders").unwrap();
    for (partition, old_leader) in topic.partitions.iter().zip(&before) {
        assert!(!partition.isr.contains(&BrokerId(1)));
        let bumped = i32::from(*old_leader == BrokerId(1));
        assert_eq!(partition.leader_epoch, LeaderEpoch(bumped));
    }
    // It leads nothing now: fenced, and told to stop; a plain
    // heartbeat in controlled shutdown goes the same way.
    for request in [stopping.clone(), beat(1, 1, 6)] {
        let second = heartbeat(&image, &mut sessions, request, 0, 0);
        assert!(second.should_shut_down);
        assert_eq!(
            second.records,
            vec![MetadataRecord::FenceBroker {
                id: BrokerId(1),
                epoch: 1
            }]
        );
    }
    image
        .apply(
            7,
            &[MetadataRecord::FenceBroker {
                id: BrokerId(1),
                epoch: 1,
            }],
        )
        .unwrap();
    let fenced = heartbeat(&image, &mut sessions, stopping, 0, 0);
    assert!(fenced.should_shut_down && fenced.records.is_empty());
    // A broker in controlled shutdown is offered no new replicas.
    let mut shutting = three_brokers();
    let mark = MetadataRecord::ControlledShutdown {
        id: BrokerId(3),
        epoch: 3,
    };
    shutting.apply(5, &[mark]).unwrap();
    assert_eq!(
        create_topic(
            &shutting,
            &request("u", 1, 3),
            &defaults(),
            TopicId([7; 16])
        )
        .unwrap_err()
        .error,
        ErrorCode::INVALID_REPLICATION_FACTOR
    );
}

/// The controller's own node started again (a node alone, killed and
/// restarted): its new incarnation registers at once, over the session the
/// controller granted the old one when it took over, and the old one's
/// leaderships move as its fencing would have moved them.
#[test]
fn the_controllers_own_node_restarted_registers_at_once() {
    let mut image = three_brokers_one_topic();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    sessions.restart_all(&image, 0);
    let refused = register_broker(&image, &sessions, registration(1, 2), BrokerId(0), 100);
    assert_eq!(
        refused.unwrap_err().error,
        ErrorCode::DUPLICATE_BROKER_REGISTRATION,
        "another node's live incarnation"
    );
    let records = register_broker(&image, &sessions, registration(1, 2), BrokerId(1), 100).unwrap();
    assert_eq!(
        records.last(),
        Some(&MetadataRecord::RegisterBroker(registration(1, 2)))
    );
    image.apply(6, &records).unwrap();
    assert!(image.brokers[&BrokerId(1)].fenced);
    assert!(!leaders(&image).contains(&BrokerId(1)));
}

#[test]
fn a_second_live_incarnation_of_a_node_id_is_refused() {
    let image = three_brokers();
    let mut sessions = BrokerSessions::new(BROKER_SESSION_TIMEOUT_MS_DEFAULT);
    sessions.restart_all(&image, 0);
    // A retry of the same incarnation: nothing new.
    assert_eq!(
        register_broker(&image, &sessions, registration(1, 1), BrokerId(0), 100),
        Ok(vec![])
    );
    let duplicate =
        register_broker(&image, &sessions, registration(1, 2), BrokerId(0), 100).unwrap_err();
    assert_eq!(duplicate.error, ErrorCode::DUPLICATE_BROKER_REGISTRATION);
    // Once the old session expired, the new incarnation registers.
    assert_eq!(
        register_broker(&image, &sessions, registration(1, 2), BrokerId(0), 9_001),
        Ok(vec![MetadataRecord::RegisterBroker(registration(1, 2))])
    );
    assert_eq!(
        register_broker(&image, &sessions, registration(-1, 2), BrokerId(0), 0)
            .unwrap_err()
            .error,
        ErrorCode::INVALID_REQUEST
    );
}
