//! Metadata, DescribeCluster and DescribeLogDirs: what this single broker,
//! its topics and its log directory look like to clients.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brook_engine::cluster::image::{LocalImage, TopicId, TopicMetadata, validate_topic_name};
use brook_engine::cluster::topic_pages::{Cursor, PageTopic, page};
use brook_engine::cluster::visibility::Visibility;
use brook_engine::group::records::OFFSETS_TOPIC_NAME;
use brook_engine::protocol::acl::{
    AUTHORIZED_OPERATIONS_OMITTED, AclResource, authorized_operations, authorized_operations_if,
};
use brook_engine::protocol::endpoint_type;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::txn::records::TRANSACTION_STATE_TOPIC_NAME;
use brook_engine::types::{PartitionId, TopicPartition};
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::describe_topic_partitions_response::{
    self, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, BrokerId, DescribeClusterRequest,
    DescribeClusterResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, MetadataRequest,
    MetadataResponse,
};
use uuid::Uuid;

use crate::server::controller::{self, Change, NewTopic};
use crate::server::handlers::{text, topic_name};
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;

/// Creates the missing topics among `names` (auto topic creation) and
/// returns the image that includes them.
pub(crate) async fn ensure_topics(shard: &Rc<Shard>, names: &[String]) -> Arc<LocalImage> {
    let image = shard.local_image();
    let missing: Vec<NewTopic> = names
        .iter()
        .filter(|name| image.topic(name).is_none() && validate_topic_name(name).is_ok())
        .map(|name| NewTopic {
            name: name.clone(),
            partitions: shard.context.config.num_partitions as i32,
            replication_factor: -1,
            configs: Default::default(),
            id: None,
            assignments: Vec::new(),
        })
        .collect();
    if missing.is_empty() || !shard.context.config.auto_create_topics_enable {
        return image;
    }
    for outcome in controller::apply(
        shard,
        Change::Create {
            topics: missing,
            validate_only: false,
        },
    )
    .await
    {
        if outcome.error.is_error() && outcome.error != ErrorCode::TOPIC_ALREADY_EXISTS {
            tracing::warn!(topic = %outcome.name, error = ?outcome.error, "auto-creating a topic failed");
        }
    }
    shard.local_image()
}

/// How long a request about topics waits while some of them are applied
/// here but not yet known to be served by every live broker (normally one
/// metadata fetch of this broker, tens of ms); then they are left out.
const PENDING_TOPICS_WAIT_MAX: Duration = Duration::from_secs(2);
/// How often the wait looks again.
const PENDING_TOPICS_POLL: Duration = Duration::from_millis(5);
/// How long a request about the cluster waits for a starting node to have
/// caught up with the metadata log (Kafka's brokers process no request
/// before that). Through a controller's election after a kill -9 it took
/// a restarted node up to about 2 s here under load.
const FIRST_VIEW_WAIT_MAX: Duration = Duration::from_secs(10);

/// The topics clients may be told of now: in a cluster, only those every
/// live broker serves ([`Visibility`]), so that a client asking the
/// brokers in turn never hears "exists" from one and "unknown" from the
/// next. Topics of `wanted` (every topic: `None`) that this broker has
/// applied but does not yet know to be served everywhere are waited for,
/// at most [`PENDING_TOPICS_WAIT_MAX`]; so is this broker's first view of
/// the cluster after a start.
pub(crate) async fn client_image(
    shard: &Rc<Shard>,
    image: Arc<LocalImage>,
    wanted: Option<&[String]>,
) -> Arc<LocalImage> {
    first_view(shard).await;
    let deadline = Instant::now() + PENDING_TOPICS_WAIT_MAX;
    // The newest image: the wait may have let this broker apply more.
    let mut image = match shard.cluster_view() {
        Some(_) => shard.local_image(),
        None => image,
    };
    loop {
        let settled = shard.cluster_view().is_some_and(|view| {
            let ids = match wanted {
                None => image
                    .topics
                    .values()
                    .map(|topic| topic.id)
                    .collect::<Vec<_>>(),
                Some(names) => names
                    .iter()
                    .filter_map(|name| image.topic(name))
                    .map(|topic| topic.id)
                    .collect(),
            };
            !view.visibility.any_pending(ids.into_iter())
        });
        if settled || Instant::now() >= deadline {
            break;
        }
        glommio::timer::sleep(PENDING_TOPICS_POLL).await;
        image = shard.local_image();
    }
    let Some(view) = shard.cluster_view() else {
        // No view of the cluster yet: the topics this broker had.
        return image;
    };
    let shown = |topic: &TopicMetadata| view.visibility.of(topic.id) == Visibility::Visible;
    if image.topics.values().all(shown) {
        return image;
    }
    let mut visible = (*image).clone();
    visible.topics.retain(|_, topic| shown(topic));
    Arc::new(visible)
}

/// Waits, at most [`FIRST_VIEW_WAIT_MAX`], for a cluster node's first
/// view of the cluster after its start to list it among the live brokers:
/// before its view it knows only itself, and while its new registration is
/// still fenced its view lists the other brokers only. A client told
/// either by a broker that restarted a moment ago would believe it.
/// (Kafka's broker processes no request before it is first unfenced. The
/// registration of the run before, live until its session ends, counts:
/// it names the same broker at the same address.) Once this run has been
/// unfenced nothing waits, even if it is fenced later.
async fn first_view(shard: &Shard) {
    let deadline = Instant::now() + FIRST_VIEW_WAIT_MAX;
    let local = brook_engine::types::BrokerId(shard.context.broker_id);
    let ready = || {
        let was_unfenced = &shard.context.was_unfenced;
        shard.cluster_view().is_some_and(|view| {
            was_unfenced.load(std::sync::atomic::Ordering::Acquire)
                || view
                    .image
                    .brokers
                    .get(&local)
                    .is_some_and(|broker| !broker.fenced)
        })
    };
    while !ready() && Instant::now() < deadline {
        glommio::timer::sleep(PENDING_TOPICS_POLL).await;
    }
}

pub(crate) fn uuid(id: TopicId) -> Uuid {
    Uuid::from_bytes(id.0)
}

/// A broker as clients are told of it.
struct Advertised {
    id: i32,
    host: String,
    port: u16,
    rack: Option<String>,
}

/// The live (registered, unfenced) brokers of the cluster image, at their
/// endpoints on client listener `listener` (the one a request came in on;
/// a broker without a listener of that name is left out, as Kafka leaves
/// it out); this broker alone in a one-node cluster, or before it has seen
/// the image.
fn advertised_brokers(shard: &Shard, listener: usize) -> Vec<Advertised> {
    let endpoint = shard
        .context
        .listeners
        .get(listener)
        .unwrap_or(&shard.context.listeners[0]);
    let this = || Advertised {
        id: shard.context.broker_id,
        host: endpoint.advertised_host.clone(),
        port: endpoint.advertised_port,
        rack: shard.context.cluster.rack.clone(),
    };
    let Some(view) = shard.cluster_view() else {
        return vec![this()];
    };
    let live: Vec<Advertised> = view
        .image
        .live_brokers()
        .filter_map(|broker| {
            let registered = broker.registration.endpoint(&endpoint.name)?;
            Some(Advertised {
                id: broker.registration.id.0,
                host: registered.host.clone(),
                port: registered.port,
                rack: broker.registration.rack.clone(),
            })
        })
        .collect();
    if live.is_empty() { vec![this()] } else { live }
}

/// The controller id clients are told (Metadata, DescribeCluster): in a
/// cluster, as Kafka's KRaft brokers answer (KIP-590), a live broker that
/// forwards admin requests to the active controller, never -1: this broker
/// while it is live, else the first live one it knows (itself before it
/// knows any). DescribeQuorum names the active controller itself.
fn controller_id(shard: &Shard) -> BrokerId {
    let this = shard.context.broker_id;
    let live = advertised_brokers(shard, 0);
    match live.iter().any(|broker| broker.id == this) {
        true => BrokerId(this),
        false => BrokerId(live.first().map_or(this, |broker| broker.id)),
    }
}

fn metadata_brokers(shard: &Shard, listener: usize) -> Vec<MetadataResponseBroker> {
    advertised_brokers(shard, listener)
        .into_iter()
        .map(|broker| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(broker.id))
                .with_host(text(&broker.host))
                .with_port(i32::from(broker.port))
                .with_rack(broker.rack.as_deref().map(text))
        })
        .collect()
}

/// Kafka's internal topics (`Topic.isInternal`).
pub(crate) fn is_internal_topic(name: &str) -> bool {
    name == OFFSETS_TOPIC_NAME || name == TRANSACTION_STATE_TOPIC_NAME
}

/// A partition's leader, leader epoch, replicas and ISR: as the metadata
/// log registers them in a cluster; this broker alone otherwise.
struct Placement {
    error: ErrorCode,
    leader: BrokerId,
    leader_epoch: i32,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    /// This broker, if its replica is in a failed log directory.
    offline: Vec<BrokerId>,
}

fn placement(shard: &Shard, topic: TopicId, name: &str, index: usize) -> Placement {
    let mut placement = registered_placement(shard, topic, index);
    let this = BrokerId(shard.context.broker_id);
    let dirs = &shard.context.log_dirs;
    let here = TopicPartition {
        topic: name.to_owned(),
        partition: PartitionId(index as i32),
    };
    let offline_here = dirs.failures() > 0
        && placement.replicas.contains(&this)
        && dirs.location(&here).is_some_and(|dir| dirs.is_offline(dir));
    if offline_here {
        placement.offline.push(this);
        // A leader whose replica failed leads nothing: until the controller
        // moves the leadership (or, with no other replica in sync, leaves
        // the partition without one, as Kafka's does), there is none.
        if placement.leader == this {
            placement.error = ErrorCode::LEADER_NOT_AVAILABLE;
            placement.leader = BrokerId(-1);
        }
    }
    placement
}

fn registered_placement(shard: &Shard, topic: TopicId, index: usize) -> Placement {
    let brokers = |ids: &[brook_engine::types::BrokerId]| -> Vec<BrokerId> {
        ids.iter().map(|id| BrokerId(id.0)).collect()
    };
    let registered = shard.cluster_view().and_then(|view| {
        view.image
            .topics
            .get(&topic)
            .and_then(|registered| registered.partitions.get(index).cloned())
    });
    match registered {
        Some(registration) => Placement {
            error: ErrorCode::NONE,
            leader: BrokerId(registration.leader.0),
            leader_epoch: registration.leader_epoch.0,
            replicas: brokers(&registration.replicas),
            isr: brokers(&registration.isr),
            offline: Vec::new(),
        },
        // A partition this broker's view of the metadata log does not hold
        // yet (it is catching up after a restart): no leader known, as Kafka
        // answers a partition without one; the client asks again.
        None => Placement {
            error: ErrorCode::LEADER_NOT_AVAILABLE,
            leader: BrokerId(-1),
            leader_epoch: -1,
            replicas: Vec::new(),
            isr: Vec::new(),
            offline: Vec::new(),
        },
    }
}

fn topic_response(shard: &Shard, topic: &TopicMetadata, operations: i32) -> MetadataResponseTopic {
    let partitions = (0..topic.partitions.len())
        .map(|index| {
            let placement = placement(shard, topic.id, &topic.name, index);
            MetadataResponsePartition::default()
                .with_error_code(placement.error.0)
                .with_partition_index(index as i32)
                .with_leader_id(placement.leader)
                .with_leader_epoch(placement.leader_epoch)
                .with_replica_nodes(placement.replicas)
                .with_isr_nodes(placement.isr)
                .with_offline_replicas(placement.offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(uuid(topic.id))
        .with_is_internal(is_internal_topic(&topic.name))
        .with_partitions(partitions)
        .with_topic_authorized_operations(operations)
}

fn missing_topic(
    name: Option<&str>,
    id: Uuid,
    error: ErrorCode,
    operations: i32,
) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.0)
        .with_name(name.map(topic_name))
        .with_topic_id(id)
        .with_topic_authorized_operations(operations)
}

pub async fn metadata(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: MetadataRequest = request.decode_body()?;
    let version = request.api_version;
    // v0 lists all topics with an empty list; later versions with null.
    let wanted = body
        .topics
        .filter(|topics| version > 0 || !topics.is_empty());
    let auto_create = version < 4 || body.allow_auto_topic_creation;
    let names: Option<Vec<String>> = wanted.as_ref().map(|topics| {
        topics
            .iter()
            .filter_map(|topic| topic.name.as_ref().map(|name| name.to_string()))
            .collect()
    });
    let image = match &names {
        Some(names) if auto_create => ensure_topics(shard, names).await,
        _ => shard.local_image(),
    };
    let image = client_image(shard, image, names.as_deref()).await;
    // Without an authorizer every supported operation is allowed (Kafka's
    // answer); v8+ asks for them. Topics named by an unknown id get none.
    let topic_operations = authorized_operations_if(
        version >= 8 && body.include_topic_authorized_operations,
        AclResource::Topic,
    );
    let cluster_operations = authorized_operations_if(
        (8..=10).contains(&version) && body.include_cluster_authorized_operations,
        AclResource::Cluster,
    );
    let topics = match wanted {
        None => image
            .topics
            .values()
            .map(|topic| topic_response(shard, topic, topic_operations))
            .collect(),
        Some(topics) => topics
            .iter()
            .map(|requested| match &requested.name {
                Some(name) => match image.topic(name) {
                    Some(topic) => topic_response(shard, topic, topic_operations),
                    None if validate_topic_name(name).is_err() => missing_topic(
                        Some(name),
                        Uuid::nil(),
                        ErrorCode::INVALID_TOPIC_EXCEPTION,
                        topic_operations,
                    ),
                    None => missing_topic(
                        Some(name),
                        Uuid::nil(),
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        topic_operations,
                    ),
                },
                None => match image.topic_by_id(TopicId(*requested.topic_id.as_bytes())) {
                    Some(topic) => topic_response(shard, topic, topic_operations),
                    None => missing_topic(
                        None,
                        requested.topic_id,
                        ErrorCode::UNKNOWN_TOPIC_ID,
                        AUTHORIZED_OPERATIONS_OMITTED,
                    ),
                },
            })
            .collect(),
    };
    let response = MetadataResponse::default()
        .with_brokers(metadata_brokers(shard, request.listener))
        .with_cluster_id(Some(text(&shard.context.cluster_id)))
        .with_controller_id(controller_id(shard))
        .with_topics(topics)
        .with_cluster_authorized_operations(cluster_operations);
    encode(request, &response)
}

pub async fn describe_cluster(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: DescribeClusterRequest = request.decode_body()?;
    // v0 has no endpoint type: it asks for brokers.
    let endpoint_type = match request.api_version {
        0 => endpoint_type::BROKER,
        _ => body.endpoint_type,
    };
    if let Err((error, message)) = endpoint_type::broker_answers(endpoint_type) {
        let response = DescribeClusterResponse::default()
            .with_error_code(error.0)
            .with_error_message(Some(text(&message)));
        return encode(request, &response);
    }
    first_view(shard).await;
    let brokers = advertised_brokers(shard, request.listener)
        .into_iter()
        .map(|broker| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(broker.id))
                .with_host(text(&broker.host))
                .with_port(i32::from(broker.port))
                .with_rack(broker.rack.as_deref().map(text))
        })
        .collect();
    let response = DescribeClusterResponse::default()
        .with_endpoint_type(endpoint_type)
        .with_cluster_id(text(&shard.context.cluster_id))
        .with_controller_id(controller_id(shard))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(authorized_operations_if(
            body.include_cluster_authorized_operations,
            AclResource::Cluster,
        ));
    encode(request, &response)
}

pub async fn describe_log_dirs(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: DescribeLogDirsRequest = request.decode_body()?;
    let image = shard.local_image();
    let wanted: Vec<TopicPartition> = match body.topics {
        None => image
            .partitions()
            .map(|(topic_partition, _)| topic_partition)
            .collect(),
        Some(topics) => topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().map(|partition| TopicPartition {
                    topic: topic.topic.to_string(),
                    partition: PartitionId(*partition),
                })
            })
            .collect(),
    };
    // Per log directory (by index), per topic, its partitions there.
    let dirs = &shard.context.log_dirs;
    let mut by_dir: Vec<std::collections::BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
        vec![Default::default(); dirs.len()];
    for topic_partition in wanted {
        let Some(owner) = image.owner(&topic_partition) else {
            continue;
        };
        let Some(dir) = dirs.location(&topic_partition) else {
            continue;
        };
        let lookup = topic_partition.clone();
        let size = shard
            .on_shard(owner, move |shard| async move {
                shard.log(&lookup).map(|log| log.size_bytes())
            })
            .await;
        if let Ok(Some(size)) = size {
            let partition = DescribeLogDirsPartition::default()
                .with_partition_index(topic_partition.partition.0)
                .with_partition_size(size as i64);
            by_dir[dir]
                .entry(topic_partition.topic)
                .or_default()
                .push(partition);
        }
    }
    // As Kafka: a failed directory is listed with KAFKA_STORAGE_ERROR and
    // nothing in it.
    let results = dirs
        .reports()
        .into_iter()
        .zip(by_dir)
        .map(|(dir, by_topic)| {
            let result = DescribeLogDirsResult::default()
                .with_log_dir(text(&dir.path.display().to_string()));
            if dir.offline {
                return result.with_error_code(ErrorCode::KAFKA_STORAGE_ERROR.0);
            }
            let topics = by_topic
                .into_iter()
                .map(|(name, partitions)| {
                    DescribeLogDirsTopic::default()
                        .with_name(topic_name(&name))
                        .with_partitions(partitions)
                })
                .collect();
            let (total_bytes, usable_bytes) = filesystem_space(&dir.path);
            result
                .with_topics(topics)
                .with_total_bytes(total_bytes)
                .with_usable_bytes(usable_bytes)
        })
        .collect();
    encode(
        request,
        &DescribeLogDirsResponse::default().with_results(results),
    )
}

/// Total and available bytes of the filesystem holding `dir` (-1 if unknown).
fn filesystem_space(dir: &std::path::Path) -> (i64, i64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return (-1, -1);
    };
    // SAFETY: a NUL-terminated path and a zeroed out-parameter.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return (-1, -1);
    }
    let block = stat.f_frsize as i64;
    (stat.f_blocks as i64 * block, stat.f_bavail as i64 * block)
}

fn partition_metadata(
    shard: &Shard,
    topic: TopicId,
    name: &str,
    index: usize,
) -> DescribeTopicPartitionsResponsePartition {
    let placement = placement(shard, topic, name, index);
    DescribeTopicPartitionsResponsePartition::default()
        .with_error_code(placement.error.0)
        .with_partition_index(index as i32)
        .with_leader_id(placement.leader)
        .with_leader_epoch(placement.leader_epoch)
        .with_replica_nodes(placement.replicas)
        .with_isr_nodes(placement.isr)
        .with_offline_replicas(placement.offline)
        // No eligible leader replicas (KIP-966) yet: empty, not null.
        .with_eligible_leader_replicas(Some(Vec::new()))
        .with_last_known_elr(Some(Vec::new()))
}

/// DescribeTopicPartitions (KIP-966; the Java admin client's first choice
/// for describing topics): Metadata's partition view, paged by a cursor.
pub async fn describe_topic_partitions(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: DescribeTopicPartitionsRequest = request.decode_body()?;
    let requested: Vec<String> = body
        .topics
        .iter()
        .map(|topic| topic.name.to_string())
        .collect();
    let cursor = body.cursor.as_ref().map(|cursor| Cursor {
        topic: cursor.topic_name.to_string(),
        partition: cursor.partition_index,
    });
    let wanted = (!requested.is_empty()).then_some(requested.as_slice());
    let image = client_image(shard, shard.local_image(), wanted).await;
    let operations = authorized_operations(AclResource::Topic);
    let response = match page(
        &image,
        &requested,
        cursor.as_ref(),
        body.response_partition_limit,
    ) {
        // Kafka fails every named topic with the request's error.
        Err(_) => DescribeTopicPartitionsResponse::default().with_topics(
            requested
                .iter()
                .map(|name| {
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(Some(topic_name(name)))
                        .with_error_code(ErrorCode::INVALID_REQUEST.0)
                })
                .collect(),
        ),
        Ok(page) => {
            let topics = page
                .topics
                .into_iter()
                .map(|topic| match topic {
                    PageTopic::Found { name, partitions } => {
                        let id = image
                            .topic(&name)
                            .map_or(TopicId::default(), |topic| topic.id);
                        DescribeTopicPartitionsResponseTopic::default()
                            .with_name(Some(topic_name(&name)))
                            .with_topic_id(uuid(id))
                            .with_is_internal(is_internal_topic(&name))
                            .with_partitions(
                                partitions
                                    .map(|index| partition_metadata(shard, id, &name, index))
                                    .collect(),
                            )
                            .with_topic_authorized_operations(operations)
                    }
                    PageTopic::Missing { name, invalid } => {
                        let error = if invalid {
                            ErrorCode::INVALID_TOPIC_EXCEPTION
                        } else {
                            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                        };
                        DescribeTopicPartitionsResponseTopic::default()
                            .with_name(Some(topic_name(&name)))
                            .with_error_code(error.0)
                            .with_is_internal(is_internal_topic(&name))
                            .with_topic_authorized_operations(operations)
                    }
                })
                .collect();
            let next = page.next.map(|next| {
                describe_topic_partitions_response::Cursor::default()
                    .with_topic_name(topic_name(&next.topic))
                    .with_partition_index(next.partition)
            });
            DescribeTopicPartitionsResponse::default()
                .with_topics(topics)
                .with_next_cursor(next)
        }
    };
    encode(request, &response)
}

/// Where a replica may move (AlterReplicaLogDirs): `target` is the index
/// of the log directory the request names (`None`: not one of the
/// broker's), `current` the one that holds the replica (`None`: the broker
/// has none), `target_offline` whether the target has failed. Kafka's
/// answers: LOG_DIR_NOT_FOUND for a directory not in the config,
/// KAFKA_STORAGE_ERROR for a failed one, REPLICA_NOT_AVAILABLE for a
/// partition the broker does not have, NONE for one already in the
/// directory asked for. Brook does not move a replica between its
/// directories yet: INVALID_REQUEST says so.
fn replica_move(target: Option<usize>, current: Option<usize>, target_offline: bool) -> ErrorCode {
    match (target, current) {
        (None, _) => ErrorCode::LOG_DIR_NOT_FOUND,
        _ if target_offline => ErrorCode::KAFKA_STORAGE_ERROR,
        (Some(_), None) => ErrorCode::REPLICA_NOT_AVAILABLE,
        (Some(target), Some(current)) if target == current => ErrorCode::NONE,
        (Some(_), Some(_)) => ErrorCode::INVALID_REQUEST,
    }
}

/// Which of the broker's log directories `path` names: as configured,
/// absolute, or resolved (Kafka compares absolute paths).
fn log_dir_named(dirs: &crate::storage::LogDirs, path: &str) -> Option<usize> {
    let names = |dir: &std::path::Path| {
        let mut names = vec![dir.display().to_string()];
        if let Ok(absolute) = std::path::absolute(dir) {
            names.push(absolute.display().to_string());
        }
        if let Ok(canonical) = dir.canonicalize() {
            names.push(canonical.display().to_string());
        }
        names
    };
    dirs.paths().position(|dir| {
        names(dir)
            .iter()
            .any(|name| name.trim_end_matches('/') == path.trim_end_matches('/'))
    })
}

/// AlterReplicaLogDirs: a replica stays where it is (see [`replica_move`]).
pub fn alter_replica_log_dirs(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: AlterReplicaLogDirsRequest = request.decode_body()?;
    let image = shard.local_image();
    let dirs = &shard.context.log_dirs;
    let mut by_topic: Vec<(String, Vec<AlterReplicaLogDirPartitionResult>)> = Vec::new();
    for dir in &body.dirs {
        let target = log_dir_named(dirs, &dir.path);
        let target_offline = target.is_some_and(|index| dirs.is_offline(index));
        for topic in &dir.topics {
            let name = topic.name.to_string();
            let results = topic.partitions.iter().map(|partition| {
                let topic_partition = TopicPartition {
                    topic: name.clone(),
                    partition: PartitionId(*partition),
                };
                let current = image
                    .owner(&topic_partition)
                    .and_then(|_| dirs.location(&topic_partition));
                AlterReplicaLogDirPartitionResult::default()
                    .with_partition_index(*partition)
                    .with_error_code(replica_move(target, current, target_offline).0)
            });
            match by_topic.iter_mut().find(|(known, _)| *known == name) {
                Some((_, partitions)) => partitions.extend(results),
                None => by_topic.push((name.clone(), results.collect())),
            }
        }
    }
    let results = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            AlterReplicaLogDirTopicResult::default()
                .with_topic_name(topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    encode(
        request,
        &AlterReplicaLogDirsResponse::default().with_results(results),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_stays_in_its_log_directory() {
        assert_eq!(replica_move(Some(1), Some(1), false), ErrorCode::NONE);
        assert_eq!(
            replica_move(Some(0), None, false),
            ErrorCode::REPLICA_NOT_AVAILABLE
        );
        assert_eq!(
            replica_move(None, Some(0), false),
            ErrorCode::LOG_DIR_NOT_FOUND
        );
        assert_eq!(
            replica_move(None, None, false),
            ErrorCode::LOG_DIR_NOT_FOUND
        );
        assert_eq!(
            replica_move(Some(1), Some(1), true),
            ErrorCode::KAFKA_STORAGE_ERROR
        );
        assert_eq!(
            replica_move(Some(0), Some(1), false),
            ErrorCode::INVALID_REQUEST,
            "no move between directories yet"
        );
    }
}
