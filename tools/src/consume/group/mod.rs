//! A consumer group member, as Kafka's classic consumer protocol has it:
//! FindCoordinator, JoinGroup (answering MEMBER_ID_REQUIRED with the id
//! given), SyncGroup (the leader computes the range assignment over every
//! member's subscription), Heartbeat in a background task, OffsetFetch for
//! the start, OffsetCommit with the generation, LeaveGroup on exit.
//!
//! A rebalance is noticed by the heartbeat (REBALANCE_IN_PROGRESS and the
//! like) or a commit, and sets a flag the fetch loop reads: it commits
//! what it printed and joins again. The pure parts (codecs, assignor,
//! start) are in [`super::assign`]; [`offsets`] fetches and commits,
//! [`heartbeat`] beats.

mod heartbeat;
mod offsets;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::cli::{CliError, Session, session::within};
use crate::consume::assign::{
    ASSIGNOR, decode_assignment, decode_subscription, encode_assignment, encode_subscription,
    range_assign,
};

/// Versions sent (Brook serves them; so does every Kafka 3.x and 4.x).
const JOIN_GROUP_VERSION: i16 = 9;
const SYNC_GROUP_VERSION: i16 = 5;
const LEAVE_GROUP_VERSION: i16 = 5;

/// The member's session: the coordinator drops it after this long silent.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a rebalance may wait for members to join again.
const REBALANCE_TIMEOUT: Duration = Duration::from_secs(30);
/// A heartbeat every third of the session, as Kafka's consumer does.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(3_333);
/// Joins tried before giving up (each may wait for a rebalance).
const JOIN_ATTEMPTS_MAX: usize = 10;
/// Tries of a commit or an offset fetch while the coordinator moves.
const COORDINATOR_ATTEMPTS_MAX: usize = 5;
const COORDINATOR_RETRY: Duration = Duration::from_millis(100);

/// Kafka error codes the member handles.
const COORDINATOR_MOVED: [i16; 3] = [14, 15, 16];
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
/// Codes meaning "this generation is over": join again.
const GENERATION_OVER: [i16; 3] = [ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS];

/// The member's id and generation (empty id and -1 before the first join).
#[derive(Clone, Debug)]
struct Generation {
    member_id: String,
    generation_id: i32,
}

impl Default for Generation {
    fn default() -> Generation {
        Generation {
            member_id: String::new(),
            generation_id: -1,
        }
    }
}

/// One member of a group consuming one topic; lives on the command's
/// executor with its heartbeat task.
pub struct Member {
    session: Rc<Session>,
    group: String,
    topic: String,
    coordinator: SocketAddr,
    generation: Generation,
    /// Set by the heartbeat task or a commit when the generation is over.
    rejoin: Rc<Cell<bool>>,
    heartbeat: Option<glommio::Task<()>>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("group", &self.group)
            .field("coordinator", &self.coordinator)
            .field("generation", &self.generation)
            .field("rejoin", &self.rejoin.get())
            .finish()
    }
}

/// The outcome of one JoinGroup + SyncGroup.
enum Joined {
    Assigned(Vec<i32>),
    Retry,
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

impl Member {
    /// Finds the group's coordinator; joins nothing yet.
    pub async fn new(session: Rc<Session>, group: &str, topic: &str) -> Result<Member, CliError> {
        let coordinator = session.coordinator(group, 0).await?;
        Ok(Member {
            session,
            group: group.to_owned(),
            topic: topic.to_owned(),
            coordinator,
            generation: Generation::default(),
            rejoin: Rc::new(Cell::new(false)),
            heartbeat: None,
        })
    }

    /// Whether the generation is over and [`Member::join`] is due.
    pub fn needs_rejoin(&self) -> bool {
        self.rejoin.get()
    }

    /// Joins (or rejoins) the group; the partitions of the topic assigned.
    pub async fn join(&mut self) -> Result<Vec<i32>, CliError> {
        self.stop_heartbeat().await;
        self.rejoin.set(false);
        for _ in 0..JOIN_ATTEMPTS_MAX {
            if let Joined::Assigned(partitions) = self.join_once().await? {
                self.start_heartbeat();
                return Ok(partitions);
            }
        }
        Err(CliError::Failed(format!(
            "group {}: no stable generation after {JOIN_ATTEMPTS_MAX} joins",
            self.group
        )))
    }

    async fn join_once(&mut self) -> Result<Joined, CliError> {
        let subscription =
            encode_subscription(std::slice::from_ref(&self.topic)).map_err(CliError::Failed)?;
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_session_timeout_ms(SESSION_TIMEOUT.as_millis() as i32)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT.as_millis() as i32)
            .with_member_id(text(&self.generation.member_id))
            .with_protocol_type(text("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(text(ASSIGNOR))
                    .with_metadata(subscription),
            ])
            .with_reason(Some(text("brook consume")));
        let joined: JoinGroupResponse = self
            .rebalance_request(ApiKey::JoinGroup, JOIN_GROUP_VERSION, &request)
            .await?;
        match joined.error_code {
            0 => {}
            MEMBER_ID_REQUIRED => {
                self.generation.member_id = joined.member_id.to_string();
                return Ok(Joined::Retry);
            }
            code => return self.retry_or_fail(code, "joining").await,
        }
        self.generation = Generation {
            member_id: joined.member_id.to_string(),
            generation_id: joined.generation_id,
        };
        let assignments = if joined.leader == joined.member_id {
            self.assign(&joined.members).await?
        } else {
            Vec::new()
        };
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_generation_id(self.generation.generation_id)
            .with_member_id(text(&self.generation.member_id))
            .with_protocol_type(Some(text("consumer")))
            .with_protocol_name(Some(text(ASSIGNOR)))
            .with_assignments(assignments);
        let synced: SyncGroupResponse = self
            .rebalance_request(ApiKey::SyncGroup, SYNC_GROUP_VERSION, &request)
            .await?;
        if synced.error_code != 0 {
            return self.retry_or_fail(synced.error_code, "syncing").await;
        }
        let partitions = decode_assignment(&synced.assignment, &self.topic)
            .map_err(|error| CliError::Failed(format!("group {}: {error}", self.group)))?;
        Ok(Joined::Assigned(partitions))
    }

    /// After a join or sync error: what to change before the next try.
    async fn retry_or_fail(&mut self, code: i16, what: &str) -> Result<Joined, CliError> {
        match code {
            UNKNOWN_MEMBER_ID => self.generation = Generation::default(),
            ILLEGAL_GENERATION | REBALANCE_IN_PROGRESS => {}
            code if COORDINATOR_MOVED.contains(&code) => self.rediscover().await?,
            code => {
                return Err(CliError::Kafka {
                    what: format!("{what} group {}", self.group),
                    code,
                });
            }
        }
        Ok(Joined::Retry)
    }

    /// The leader's work: every member's partitions by the range assignor.
    async fn assign(
        &self,
        members: &[JoinGroupResponseMember],
    ) -> Result<Vec<SyncGroupRequestAssignment>, CliError> {
        let mut subscriptions = BTreeMap::new();
        for member in members {
            let topics = decode_subscription(&member.metadata).map_err(|error| {
                CliError::Failed(format!(
                    "group {}: member {}: {error}",
                    self.group,
                    member.member_id.as_str()
                ))
            })?;
            subscriptions.insert(member.member_id.to_string(), topics);
        }
        let topics: Vec<String> = subscriptions
            .values()
            .flatten()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let metadata = self.session.metadata(Some(&topics)).await?;
        let counts: BTreeMap<String, i32> = metadata
            .topics
            .iter()
            .filter(|topic| topic.error_code == 0)
            .filter_map(|topic| {
                let name = topic.name.as_ref()?;
                Some((name.to_string(), topic.partitions.len() as i32))
            })
            .collect();
        range_assign(&subscriptions, &counts)
            .iter()
            .map(|(member, partitions)| {
                let assignment = encode_assignment(partitions).map_err(CliError::Failed)?;
                Ok(SyncGroupRequestAssignment::default()
                    .with_member_id(text(member))
                    .with_assignment(assignment))
            })
            .collect()
    }

    /// JoinGroup and SyncGroup wait for the other members: up to the
    /// rebalance timeout, beyond `--timeout`.
    async fn rebalance_request<Q: Encodable, R: Decodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        body: &Q,
    ) -> Result<R, CliError> {
        let connection = self.session.connection(self.coordinator).await?;
        let wait = REBALANCE_TIMEOUT + self.session.timeout();
        let coordinator = self.coordinator;
        within(|| format!("{api_key:?} to {coordinator}"), wait, async {
            Ok(connection.request(api_key, version, body).await?)
        })
        .await
    }

    async fn rediscover(&mut self) -> Result<(), CliError> {
        glommio::timer::sleep(COORDINATOR_RETRY).await;
        self.coordinator = self.session.coordinator(&self.group, 0).await?;
        Ok(())
    }

    /// Leaves the group so the others get its partitions at once (best
    /// effort: without it the session times out).
    pub async fn leave(mut self) {
        self.stop_heartbeat().await;
        if self.generation.member_id.is_empty() {
            return;
        }
        let request = LeaveGroupRequest::default()
            .with_group_id(GroupId(text(&self.group)))
            .with_members(vec![
                MemberIdentity::default()
                    .with_member_id(text(&self.generation.member_id))
                    .with_reason(Some(text("brook consume exits"))),
            ]);
        let _: Result<LeaveGroupResponse, CliError> = self
            .session
            .request(
                self.coordinator,
                ApiKey::LeaveGroup,
                LEAVE_GROUP_VERSION,
                &request,
            )
            .await;
    }

    fn start_heartbeat(&mut self) {
        let beat = heartbeat::Heartbeat {
            session: self.session.clone(),
            coordinator: self.coordinator,
            request: HeartbeatRequest::default()
                .with_group_id(GroupId(text(&self.group)))
                .with_generation_id(self.generation.generation_id)
                .with_member_id(text(&self.generation.member_id)),
            rejoin: self.rejoin.clone(),
        };
        self.heartbeat = Some(glommio::spawn_local(beat.run()));
    }

    async fn stop_heartbeat(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.cancel().await;
        }
    }
}
