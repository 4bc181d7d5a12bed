//! AlterPartition (KIP-497): a partition leader asks the controller to
//! change its ISR, the only way an ISR grows (and the leader's way to
//! shrink one). The controller checks the request as Kafka's
//! `ReplicationControlManager.alterPartition` does, in its order, and
//! answers with Kafka's error codes:
//!
//! | check                                         | error                      |
//! |-----------------------------------------------|----------------------------|
//! | broker unregistered, or at another epoch      | STALE_BROKER_EPOCH         |
//! | topic id unknown                              | UNKNOWN_TOPIC_ID           |
//! | partition unknown                             | UNKNOWN_TOPIC_OR_PARTITION |
//! | leader or partition epoch newer than ours     | NOT_CONTROLLER             |
//! | leader epoch older                            | FENCED_LEADER_EPOCH        |
//! | not from the partition's leader               | INVALID_REQUEST            |
//! | partition epoch older                         | INVALID_UPDATE_VERSION     |
//! | ISR with a non-replica, a repeat, or empty    | INVALID_REQUEST            |
//! | ISR without the leader                        | INVALID_REQUEST            |
//! | ISR member fenced, unregistered, shutting down| INELIGIBLE_REPLICA         |
//! | ISR member added whose log directory failed   | INELIGIBLE_REPLICA         |
//!
//! A newer epoch than the controller's means this controller is behind
//! (perhaps deposed): the leader looks for the new one. A request from a
//! broker that is not the leader, at the current leader epoch, cannot come
//! from a correct broker, hence INVALID_REQUEST rather than
//! NOT_LEADER_OR_FOLLOWER (Kafka's choice too).
//!
//! Kafka ≥ 3.5 (AlterPartition v3) also carries each new ISR member's
//! broker epoch, to refuse a member that restarted since the leader saw it
//! caught up; Brook's request carries ids only (a restarted member is
//! fenced until it catches up with the log, and a fenced member is
//! refused). The leader-recovery state of unclean elections is not kept.

use bytes::BufMut;

use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::elections::OfflineReplicas;
use crate::cluster::image::TopicId;
use crate::cluster::records::{MetadataRecord, PartitionRegistration, Reader, RecordError};
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch, PartitionId};

/// One partition's ISR change, from its leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    pub broker: BrokerId,
    pub broker_epoch: i64,
    pub topic: TopicId,
    pub partition: PartitionId,
    /// The epochs of the registration the leader changes.
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// The partition as the controller has it after the request, or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionResponse {
    pub error: ErrorCode,
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<BrokerId>,
    pub partition_epoch: i32,
}

impl AlterPartitionResponse {
    pub fn refused(error: ErrorCode) -> AlterPartitionResponse {
        AlterPartitionResponse {
            error,
            leader: BrokerId::NONE,
            leader_epoch: LeaderEpoch(-1),
            isr: Vec::new(),
            partition_epoch: -1,
        }
    }

    pub fn of(registration: &PartitionRegistration) -> AlterPartitionResponse {
        AlterPartitionResponse {
            error: ErrorCode::NONE,
            leader: registration.leader,
            leader_epoch: registration.leader_epoch,
            isr: registration.isr.clone(),
            partition_epoch: registration.partition_epoch,
        }
    }
}

/// AlterPartition against the controller's image: the registration the
/// partition will have, and the record that makes it so (none when the
/// ISR asked for is the current one).
///
/// `offline`: what brokers' heartbeats named of their failed log
/// directories. A replica there may not join the ISR (KIP-858): a fetch it
/// sent before its directory failed can still make the leader see it
/// caught up after the controller took it out.
pub fn alter_partition(
    image: &ClusterImage,
    request: &AlterPartitionRequest,
    offline: &OfflineReplicas,
) -> Result<(PartitionRegistration, Vec<MetadataRecord>), ErrorCode> {
    let registered = image
        .brokers
        .get(&request.broker)
        .is_some_and(|broker| broker.epoch == request.broker_epoch);
    if !registered {
        return Err(ErrorCode::STALE_BROKER_EPOCH);
    }
    if !image.topics.contains_key(&request.topic) {
        return Err(ErrorCode::UNKNOWN_TOPIC_ID);
    }
    let current = image
        .partition(request.topic, request.partition)
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    check_epochs(current, request)?;
    check_isr(image, current, &request.new_isr)?;
    let name = image
        .topics
        .get(&request.topic)
        .map_or("", |topic| topic.name.as_str());
    let index = usize::try_from(request.partition.0).unwrap_or(usize::MAX);
    let joins_offline = request
        .new_isr
        .iter()
        .any(|member| !current.isr.contains(member) && offline.holds(*member, name, index));
    if joins_offline {
        return Err(ErrorCode::INELIGIBLE_REPLICA);
    }
    if request.new_isr == current.isr {
        return Ok((current.clone(), Vec::new()));
    }
    let changed = PartitionRegistration {
        isr: request.new_isr.clone(),
        partition_epoch: current.partition_epoch + 1,
        ..current.clone()
    };
    let record = MetadataRecord::Partition {
        topic: request.topic,
        partition: request.partition,
        registration: changed.clone(),
    };
    Ok((changed, vec![record]))
}

fn check_epochs(
    current: &PartitionRegistration,
    request: &AlterPartitionRequest,
) -> Result<(), ErrorCode> {
    if request.leader_epoch > current.leader_epoch
        || request.partition_epoch > current.partition_epoch
    {
        return Err(ErrorCode::NOT_CONTROLLER);
    }
    if request.leader_epoch < current.leader_epoch {
        return Err(ErrorCode::FENCED_LEADER_EPOCH);
    }
    if request.broker != current.leader {
        return Err(ErrorCode::INVALID_REQUEST);
    }
    if request.partition_epoch < current.partition_epoch {
        return Err(ErrorCode::INVALID_UPDATE_VERSION);
    }
    Ok(())
}

fn check_isr(
    image: &ClusterImage,
    current: &PartitionRegistration,
    new_isr: &[BrokerId],
) -> Result<(), ErrorCode> {
    let repeated = new_isr
        .iter()
        .enumerate()
        .any(|(position, member)| new_isr[..position].contains(member));
    let outside = new_isr
        .iter()
        .any(|member| !current.replicas.contains(member));
    if repeated || outside || !new_isr.contains(&current.leader) {
        return Err(ErrorCode::INVALID_REQUEST);
    }
    if !new_isr.iter().all(|member| image.is_active(*member)) {
        return Err(ErrorCode::INELIGIBLE_REPLICA);
    }
    Ok(())
}

/// The request on the peer wire: `broker:i32 broker_epoch:i64 topic:16
/// partition:i32 leader_epoch:i32 partition_epoch:i32 isr:list(i32)`.
pub(crate) fn put_request(out: &mut Vec<u8>, request: &AlterPartitionRequest) {
    out.put_i32(request.broker.0);
    out.put_i64(request.broker_epoch);
    out.put_slice(&request.topic.0);
    out.put_i32(request.partition.0);
    out.put_i32(request.leader_epoch.0);
    out.put_i32(request.partition_epoch);
    put_brokers(out, &request.new_isr);
}

pub(crate) fn read_request(reader: &mut Reader<'_>) -> Result<AlterPartitionRequest, RecordError> {
    Ok(AlterPartitionRequest {
        broker: BrokerId(reader.i32()?),
        broker_epoch: reader.i64()?,
        topic: reader.topic_id()?,
        partition: PartitionId(reader.i32()?),
        leader_epoch: LeaderEpoch(reader.i32()?),
        partition_epoch: reader.i32()?,
        new_isr: reader.brokers()?,
    })
}

/// The response: `error:i16 leader:i32 leader_epoch:i32 partition_epoch:i32
/// isr:list(i32)`.
pub(crate) fn put_response(out: &mut Vec<u8>, response: &AlterPartitionResponse) {
    out.put_i16(response.error.0);
    out.put_i32(response.leader.0);
    out.put_i32(response.leader_epoch.0);
    out.put_i32(response.partition_epoch);
    put_brokers(out, &response.isr);
}

pub(crate) fn read_response(
    reader: &mut Reader<'_>,
) -> Result<AlterPartitionResponse, RecordError> {
    Ok(AlterPartitionResponse {
        error: ErrorCode(reader.u16()? as i16),
        leader: BrokerId(reader.i32()?),
        leader_epoch: LeaderEpoch(reader.i32()?),
        partition_epoch: reader.i32()?,
        isr: reader.brokers()?,
    })
}

fn put_brokers(out: &mut Vec<u8>, brokers: &[BrokerId]) {
    out.put_u32(brokers.len() as u32);
    for broker in brokers {
        out.put_i32(broker.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::controller::tests::three_brokers;

    const TOPIC: TopicId = TopicId([1; 16]);

    fn brokers(ids: &[i32]) -> Vec<BrokerId> {
        ids.iter().copied().map(BrokerId).collect()
    }

    /// Brokers 1..=3, broker 3 then fenced; topic "t" partition 0 on
    /// replicas [1, 2, 3] led by 1 with ISR [1], at epochs 4 / 7.
    fn image() -> ClusterImage {
        let mut image = three_brokers();
        let registration = PartitionRegistration {
            replicas: brokers(&[1, 2, 3]),
            isr: brokers(&[1]),
            leader: BrokerId(1),
            leader_epoch: LeaderEpoch(4),
            partition_epoch: 7,
        };
        let records = [
            MetadataRecord::Topic {
                name: "t".into(),
                id: TOPIC,
            },
            MetadataRecord::Partition {
                topic: TOPIC,
                partition: PartitionId(0),
                registration,
            },
            MetadataRecord::FenceBroker {
                id: BrokerId(3),
                epoch: 3,
            },
        ];
        image.apply(5, &records).unwrap();
        image
    }

    fn request(new_isr: &[i32]) -> AlterPartitionRequest {
        AlterPartitionRequest {
            broker: BrokerId(1),
            broker_epoch: 1,
            topic: TOPIC,
            partition: PartitionId(0),
            leader_epoch: LeaderEpoch(4),
            partition_epoch: 7,
            new_isr: brokers(new_isr),
        }
    }

    #[test]
    fn the_leader_grows_the_isr_and_the_partition_epoch_moves() {
        let mut image = image();
        let (changed, records) =
            alter_partition(&image, &request(&[1, 2]), &OfflineReplicas::default()).unwrap();
        assert_eq!(
            AlterPartitionResponse::of(&changed),
            AlterPartitionResponse {
                error: ErrorCode::NONE,
                leader: BrokerId(1),
                leader_epoch: LeaderEpoch(4),
                isr: brokers(&[1, 2]),
                partition_epoch: 8,
            }
        );
        image.apply(6, &records).unwrap();
        assert_eq!(image.partition(TOPIC, PartitionId(0)), Some(&changed));
        // Asked again (a retry with the new epochs): nothing to change.
        let retry = AlterPartitionRequest {
            partition_epoch: 8,
            ..request(&[1, 2])
        };
        assert_eq!(
            alter_partition(&image, &retry, &OfflineReplicas::default()),
            Ok((changed, Vec::new()))
        );
    }

    #[test]
    fn every_refusal_has_kafkas_error_code() {
        let image = image();
        let shutting = {
            let mut image = image.clone();
            let mark = MetadataRecord::ControlledShutdown {
                id: BrokerId(2),
                epoch: 2,
            };
            image.apply(6, &[mark]).unwrap();
            image
        };
        type Change = fn(&mut AlterPartitionRequest);
        #[rustfmt::skip]
        let rows: &[(&str, Change, ErrorCode)] = &[
            ("stale broker epoch", |r| r.broker_epoch = 9, ErrorCode::STALE_BROKER_EPOCH),
            ("unregistered broker", |r| r.broker = BrokerId(8), ErrorCode::STALE_BROKER_EPOCH),
            ("unknown topic", |r| r.topic = TopicId([9; 16]), ErrorCode::UNKNOWN_TOPIC_ID),
            ("unknown partition", |r| r.partition = PartitionId(1), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            ("negative partition", |r| r.partition = PartitionId(-1), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            ("newer leader epoch", |r| r.leader_epoch = LeaderEpoch(5), ErrorCode::NOT_CONTROLLER),
            ("newer partition epoch", |r| r.partition_epoch = 8, ErrorCode::NOT_CONTROLLER),
            ("older leader epoch", |r| r.leader_epoch = LeaderEpoch(3), ErrorCode::FENCED_LEADER_EPOCH),
            ("not the leader", |r| (r.broker, r.broker_epoch) = (BrokerId(2), 2), ErrorCode::INVALID_REQUEST),
            ("older partition epoch", |r| r.partition_epoch = 6, ErrorCode::INVALID_UPDATE_VERSION),
            ("a broker that is not a replica", |r| r.new_isr = brokers(&[1, 4]), ErrorCode::INVALID_REQUEST),
            ("a member twice", |r| r.new_isr = brokers(&[1, 2, 2]), ErrorCode::INVALID_REQUEST),
            ("an empty ISR", |r| r.new_isr = Vec::new(), ErrorCode::INVALID_REQUEST),
            ("an ISR without the leader", |r| r.new_isr = brokers(&[2]), ErrorCode::INVALID_REQUEST),
            ("a fenced member", |r| r.new_isr = brokers(&[1, 3]), ErrorCode::INELIGIBLE_REPLICA),
        ];
        for (what, change, error) in rows {
            let mut asked = request(&[1, 2]);
            change(&mut asked);
            assert_eq!(
                alter_partition(&image, &asked, &OfflineReplicas::default()).map(|_| ()),
                Err(*error),
                "{what}"
            );
        }
        assert_eq!(
            alter_partition(&shutting, &request(&[1, 2]), &OfflineReplicas::default()).map(|_| ()),
            Err(ErrorCode::INELIGIBLE_REPLICA),
            "a member shutting down"
        );
        let mut offline = OfflineReplicas::default();
        let failed = crate::types::TopicPartition {
            topic: "t".into(),
            partition: PartitionId(0),
        };
        offline.report(BrokerId(2), &[failed]);
        assert_eq!(
            alter_partition(&image, &request(&[1, 2]), &offline).map(|_| ()),
            Err(ErrorCode::INELIGIBLE_REPLICA),
            "a member joining from a failed log directory"
        );
        let mut unregistered = image.clone();
        unregistered.brokers.remove(&BrokerId(2));
        assert_eq!(
            alter_partition(
                &unregistered,
                &request(&[1, 2]),
                &OfflineReplicas::default()
            )
            .map(|_| ()),
            Err(ErrorCode::INELIGIBLE_REPLICA),
            "an unregistered member"
        );
    }
}
