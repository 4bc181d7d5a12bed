//! The classic group protocol: FindCoordinator, JoinGroup, SyncGroup,
//! Heartbeat and LeaveGroup. Each request is decoded on the connection's
//! shard, sent to the shard hosting the group's `__consumer_offsets`
//! partition, decided there by the engine's coordinator, and answered in the
//! request's version.

use std::future::Future;
use std::rc::Rc;

use brook_engine::group::coordinator::{
    Action, GroupCoordinator, JoinRequest, JoinResponse, LeavingMember, SyncRequest, SyncResponse,
};
use brook_engine::group::state::{Protocol, Token};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use futures::channel::oneshot;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::server::controller::random_id;
use crate::server::groups::{ensure_offsets_topic, locate};
use crate::server::handlers::text;
use crate::server::response::{Response, encode};
use crate::server::shard::{Shard, now_ms};

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Runs `job` on the shard hosting `group_id`'s coordinator with that
/// shard and the group's `__consumer_offsets` partition.
pub(crate) async fn on_coordinator<R, F, Fut>(
    shard: &Rc<Shard>,
    group_id: &str,
    job: F,
) -> Result<R, ErrorCode>
where
    F: FnOnce(Rc<Shard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, ErrorCode>> + 'static,
    R: Send + 'static,
{
    let (partition, owner) = locate(shard, group_id)?;
    shard
        .on_shard(owner, move |owner| job(owner, partition))
        .await
        .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE))
}

/// Hands a JoinGroup or SyncGroup to the coordinator and waits for its
/// answer (now, or when the rebalance gets there).
async fn wait_for_answer<T>(
    owner: &Rc<Shard>,
    partition: i32,
    token: Token,
    decide: impl FnOnce(&mut GroupCoordinator) -> Vec<Action>,
    answer: oneshot::Receiver<T>,
) -> Result<T, ErrorCode> {
    match owner.groups.with(owner, partition, decide).await {
        Ok(actions) => owner.groups.apply(owner, partition, actions),
        Err(error) => {
            owner.groups.forget(token);
            return Err(error);
        }
    }
    answer
        .await
        .map_err(|_| ErrorCode::COORDINATOR_NOT_AVAILABLE)
}

fn optional_text(value: Option<&str>) -> Option<StrBytes> {
    value.map(text)
}

/// Where the coordinator of `key` is: this broker in a one-node cluster;
/// in a cluster, the live leader of the key's partition of
/// `__consumer_offsets` or `__transaction_state`, as the metadata log says.
fn coordinator_of(
    shard: &Shard,
    listener: usize,
    key_type: i8,
    key: &str,
) -> Option<(i32, String, u16)> {
    let context = &shard.context;
    let own = context
        .listeners
        .get(listener)
        .unwrap_or(&context.listeners[0]);
    let view = shard.cluster_view()?;
    let (topic, partition_for): (&str, fn(&str, i32) -> i32) = if key_type == KEY_TYPE_GROUP {
        (
            brook_engine::group::records::OFFSETS_TOPIC_NAME,
            brook_engine::group::records::offsets_partition_for,
        )
    } else {
        (
            brook_engine::txn::records::TRANSACTION_STATE_TOPIC_NAME,
            brook_engine::txn::records::partition_for,
        )
    };
    let registered = view.image.topic_by_name(topic)?;
    let partition = partition_for(key, registered.partitions.len() as i32);
    let leader = registered
        .partitions
        .get(usize::try_from(partition).ok()?)?
        .leader;
    let broker = view
        .image
        .brokers
        .get(&leader)
        .filter(|broker| !broker.fenced)?;
    let endpoint = broker.registration.endpoint(&own.name)?;
    Some((leader.0, endpoint.host.clone(), endpoint.port))
}

pub async fn find_coordinator(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: FindCoordinatorRequest = request.decode_body()?;
    let keys: Vec<String> = if request.api_version >= 4 {
        body.coordinator_keys
            .iter()
            .map(ToString::to_string)
            .collect()
    } else {
        vec![body.key.to_string()]
    };
    let error = match body.key_type {
        KEY_TYPE_GROUP => ensure_offsets_topic(shard).await.err(),
        KEY_TYPE_TRANSACTION => crate::server::transactions::ensure_state_topic(shard)
            .await
            .err(),
        _ => Some(ErrorCode::INVALID_REQUEST),
    }
    .unwrap_or(ErrorCode::NONE);
    let node = |key: &str| {
        let found = if error.is_error() {
            Err(error)
        } else {
            coordinator_of(shard, request.listener, body.key_type, key)
                .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        };
        match found {
            Ok((id, host, port)) => Coordinator::default()
                .with_key(text(key))
                .with_node_id(BrokerId(id))
                .with_host(text(&host))
                .with_port(i32::from(port)),
            Err(error) => Coordinator::default()
                .with_key(text(key))
                .with_node_id(BrokerId(-1))
                .with_host(text(""))
                .with_port(-1)
                .with_error_code(error.0),
        }
    };
    let response = if request.api_version >= 4 {
        FindCoordinatorResponse::default()
            .with_coordinators(keys.iter().map(|key| node(key)).collect())
    } else {
        // Kafka answers v1-3 with `Errors.message()`: the error's default
        // message, and "NONE" on success (v4+ leaves the field at "").
        let single = node(&keys[0]);
        FindCoordinatorResponse::default()
            .with_error_code(single.error_code)
            .with_error_message(Some(text(ErrorCode(single.error_code).message())))
            .with_node_id(single.node_id)
            .with_host(single.host)
            .with_port(single.port)
    };
    encode(request, &response)
}

pub async fn join_group(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: JoinGroupRequest = request.decode_body()?;
    let client_id = request.client_id.clone().unwrap_or_default();
    let join = JoinRequest {
        group_id: body.group_id.to_string(),
        member_id: body.member_id.to_string(),
        group_instance_id: body.group_instance_id.as_ref().map(ToString::to_string),
        new_member_id: format!("{client_id}-{}", Uuid::from_bytes(random_id())),
        client_id,
        client_host: request.client_host.clone(),
        session_timeout_ms: body.session_timeout_ms,
        // Version 0 has no rebalance timeout: the session timeout serves.
        rebalance_timeout_ms: if request.api_version == 0 {
            body.session_timeout_ms
        } else {
            body.rebalance_timeout_ms
        },
        protocol_type: body.protocol_type.to_string(),
        protocols: body
            .protocols
            .iter()
            .map(|protocol| Protocol {
                name: protocol.name.to_string(),
                metadata: protocol.metadata.clone(),
            })
            .collect(),
        require_known_member_id: request.api_version >= 4,
        supports_skip_assignment: request.api_version >= 9,
    };
    let member_id = join.member_id.clone();
    let group_id = join.group_id.clone();
    let answered = on_coordinator(shard, &group_id, move |owner, partition| async move {
        let (token, receiver) = owner.groups.register_join();
        let decide =
            move |coordinator: &mut GroupCoordinator| coordinator.join(now_ms(), token, join);
        wait_for_answer(&owner, partition, token, decide, receiver).await
    })
    .await;
    let response = answered.unwrap_or_else(|error| JoinResponse {
        error,
        generation: -1,
        member_id,
        ..JoinResponse::default()
    });
    encode(request, &join_group_response(response))
}

fn join_group_response(response: JoinResponse) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(response.error.0)
        .with_generation_id(response.generation)
        .with_protocol_type(optional_text(response.protocol_type.as_deref()))
        .with_protocol_name(optional_text(response.protocol_name.as_deref()))
        .with_leader(text(&response.leader))
        .with_skip_assignment(response.skip_assignment)
        .with_member_id(text(&response.member_id))
        .with_members(
            response
                .members
                .into_iter()
                .map(|member| {
                    JoinGroupResponseMember::default()
                        .with_member_id(text(&member.member_id))
                        .with_group_instance_id(optional_text(member.group_instance_id.as_deref()))
                        .with_metadata(member.metadata)
                })
                .collect(),
        )
}

pub async fn sync_group(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: SyncGroupRequest = request.decode_body()?;
    let sync = SyncRequest {
        group_id: body.group_id.to_string(),
        member_id: body.member_id.to_string(),
        group_instance_id: body.group_instance_id.as_ref().map(ToString::to_string),
        generation: body.generation_id,
        protocol_type: body.protocol_type.as_ref().map(ToString::to_string),
        protocol_name: body.protocol_name.as_ref().map(ToString::to_string),
        assignments: body
            .assignments
            .iter()
            .map(|assignment| {
                (
                    assignment.member_id.to_string(),
                    assignment.assignment.clone(),
                )
            })
            .collect(),
    };
    let group_id = sync.group_id.clone();
    let answered = on_coordinator(shard, &group_id, move |owner, partition| async move {
        let (token, receiver) = owner.groups.register_sync();
        let decide =
            move |coordinator: &mut GroupCoordinator| coordinator.sync(now_ms(), token, sync);
        wait_for_answer(&owner, partition, token, decide, receiver).await
    })
    .await;
    let response = answered.unwrap_or_else(|error| SyncResponse {
        error,
        ..SyncResponse::default()
    });
    encode(
        request,
        &SyncGroupResponse::default()
            .with_error_code(response.error.0)
            .with_protocol_type(optional_text(response.protocol_type.as_deref()))
            .with_protocol_name(optional_text(response.protocol_name.as_deref()))
            .with_assignment(response.assignment),
    )
}

pub async fn heartbeat(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: HeartbeatRequest = request.decode_body()?;
    let group_id = body.group_id.to_string();
    let member_id = body.member_id.to_string();
    let instance = body.group_instance_id.as_ref().map(ToString::to_string);
    let generation = body.generation_id;
    let error = on_coordinator(
        shard,
        &group_id.clone(),
        move |owner, partition| async move {
            owner
                .groups
                .with(&owner, partition, |coordinator| {
                    coordinator.heartbeat(
                        now_ms(),
                        &group_id,
                        &member_id,
                        instance.as_deref(),
                        generation,
                    )
                })
                .await
        },
    )
    .await
    .unwrap_or_else(|error| error);
    encode(
        request,
        &HeartbeatResponse::default().with_error_code(error.0),
    )
}

pub async fn leave_group(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: LeaveGroupRequest = request.decode_body()?;
    let leaving: Vec<LeavingMember> = if request.api_version >= 3 {
        body.members
            .iter()
            .map(|member| LeavingMember {
                member_id: member.member_id.to_string(),
                group_instance_id: member.group_instance_id.as_ref().map(ToString::to_string),
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: body.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let group_id = body.group_id.to_string();
    let job_leaving = leaving.clone();
    let decided = on_coordinator(
        shard,
        &group_id.clone(),
        move |owner, partition| async move {
            let (errors, actions) = owner
                .groups
                .with(&owner, partition, |coordinator| {
                    coordinator.leave(now_ms(), &group_id, &job_leaving)
                })
                .await?;
            owner.groups.apply(&owner, partition, actions);
            Ok(errors)
        },
    )
    .await;
    let response = match decided {
        Err(error) => LeaveGroupResponse::default().with_error_code(error.0),
        Ok(errors) if request.api_version < 3 => LeaveGroupResponse::default()
            .with_error_code(errors.first().copied().unwrap_or(ErrorCode::NONE).0),
        Ok(errors) => LeaveGroupResponse::default().with_members(
            leaving
                .iter()
                .zip(errors)
                .map(|(member, error)| {
                    MemberResponse::default()
                        .with_member_id(text(&member.member_id))
                        .with_group_instance_id(optional_text(member.group_instance_id.as_deref()))
                        .with_error_code(error.0)
                })
                .collect(),
        ),
    };
    encode(request, &response)
}

pub(crate) fn group_id(name: &str) -> GroupId {
    GroupId(text(name))
}
