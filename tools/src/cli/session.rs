//! A session with a cluster: Brook's own client (`brook_shards::client`)
//! behind a deadline on every connect and request, so an unreachable or
//! silent broker fails the command within `--timeout` with one line.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use brook_shards::client::cluster::{METADATA_VERSION, resolve, topic_name};
use brook_shards::client::{Cluster, Connection};
use futures::future::{Either, select};
use glommio::Placement;
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorResponse, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::cli::{CliError, ClientArgs};

/// The client id the tools give brokers (it shows in their logs).
pub const CLIENT_ID: &str = "brook-cli";
/// FindCoordinator v4: batched keys (Kafka 3.0+).
pub const FIND_COORDINATOR_VERSION: i16 = 4;
/// Kafka's COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE: a
/// coordinator that is starting; asked again until the timeout.
const COORDINATOR_NOT_READY: [i16; 2] = [14, 15];
/// Pause between asks for a coordinator that is not ready.
const COORDINATOR_RETRY: Duration = Duration::from_millis(100);
/// UNKNOWN_TOPIC_OR_PARTITION and LEADER_NOT_AVAILABLE: in a cluster, what
/// a broker answers for a topic whose creation has not reached it yet.
const TOPIC_NOT_YET_KNOWN: [i16; 2] = [3, 5];
/// How long a cluster's topic may take to reach every broker (metadata
/// propagation measures 54 ms p50, 72 ms p99 with `brook bench run
/// controller-failover`), and the pause between asks meanwhile.
const TOPIC_PROPAGATION_GRACE: Duration = Duration::from_secs(1);
const TOPIC_PROPAGATION_RETRY: Duration = Duration::from_millis(50);

/// A connection to a cluster for one command; lives on its executor.
#[derive(Debug)]
pub struct Session {
    cluster: Cluster,
    bootstrap: SocketAddr,
    timeout: Duration,
}

/// Runs `future` on a fresh unpinned executor on this thread.
pub fn block_on<T: 'static>(
    future: impl Future<Output = Result<T, CliError>> + 'static,
) -> Result<T, CliError> {
    let executor = brook_shards::runtime::executor_builder(Placement::Unbound)
        .make()
        .map_err(|error| CliError::Failed(format!("starting an io_uring executor: {error}")))?;
    executor.run(brook_shards::runtime::guarded(future))
}

/// `future`, or a [`CliError::Timeout`] naming `what` after `timeout`.
pub async fn within<T>(
    what: impl FnOnce() -> String,
    timeout: Duration,
    future: impl Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    let future = std::pin::pin!(future);
    let timer = std::pin::pin!(glommio::timer::sleep(timeout));
    match select(future, timer).await {
        Either::Left((result, _)) => result,
        Either::Right(_) => Err(CliError::Timeout {
            what: what(),
            timeout,
        }),
    }
}

impl Session {
    /// Connects to the first of `args.brokers` that accepts.
    pub async fn connect(args: &ClientArgs) -> Result<Session, CliError> {
        let mut last_error = None;
        for broker in args
            .brokers
            .split(',')
            .map(str::trim)
            .filter(|b| !b.is_empty())
        {
            let address = match resolve(broker) {
                Ok(address) => address,
                Err(error) => {
                    last_error = Some(CliError::from(error));
                    continue;
                }
            };
            let cluster = Cluster::new(address, CLIENT_ID);
            let connected = within(|| format!("broker {broker}"), args.timeout, async {
                Ok(cluster.bootstrap_connection().await?)
            })
            .await;
            match connected {
                Ok(_) => {
                    return Ok(Session {
                        cluster,
                        bootstrap: address,
                        timeout: args.timeout,
                    });
                }
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| CliError::Usage("--brokers is empty".to_owned())))
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn bootstrap(&self) -> SocketAddr {
        self.bootstrap
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The connection to `broker` (opened within the timeout).
    pub async fn connection(&self, broker: SocketAddr) -> Result<Rc<Connection>, CliError> {
        within(|| format!("broker {broker}"), self.timeout, async {
            Ok(self.cluster.connection(broker).await?)
        })
        .await
    }

    /// Sends `body` to `broker` and decodes the answer, within the timeout.
    pub async fn request<Q: Encodable, R: Decodable>(
        &self,
        broker: SocketAddr,
        api_key: ApiKey,
        version: i16,
        body: &Q,
    ) -> Result<R, CliError> {
        let connection = self.connection(broker).await?;
        within(|| format!("{api_key:?} to {broker}"), self.timeout, async {
            Ok(connection.request(api_key, version, body).await?)
        })
        .await
    }

    /// Metadata of `topics` (every topic when `None`); never creates topics.
    /// In a cluster a topic another broker just created may not have
    /// reached this one yet: a topic it does not know is asked again for
    /// [`TOPIC_PROPAGATION_GRACE`] before the answer stands.
    pub async fn metadata(&self, topics: Option<&[String]>) -> Result<MetadataResponse, CliError> {
        let started = std::time::Instant::now();
        loop {
            let response = self.metadata_once(topics).await?;
            let unknown = topics.is_some()
                && response
                    .topics
                    .iter()
                    .any(|topic| TOPIC_NOT_YET_KNOWN.contains(&topic.error_code));
            if !unknown || response.brokers.len() < 2 || started.elapsed() > TOPIC_PROPAGATION_GRACE
            {
                return Ok(response);
            }
            glommio::timer::sleep(TOPIC_PROPAGATION_RETRY).await;
        }
    }

    async fn metadata_once(&self, topics: Option<&[String]>) -> Result<MetadataResponse, CliError> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|topics| {
                topics
                    .iter()
                    .map(|name| MetadataRequestTopic::default().with_name(Some(topic_name(name))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        self.request(self.bootstrap, ApiKey::Metadata, METADATA_VERSION, &request)
            .await
    }

    /// The address of broker `node_id` in a Metadata response.
    pub fn broker_address(
        metadata: &MetadataResponse,
        node_id: i32,
    ) -> Result<SocketAddr, CliError> {
        let broker = metadata
            .brokers
            .iter()
            .find(|broker| broker.node_id.0 == node_id)
            .ok_or_else(|| CliError::Failed(format!("broker {node_id} is not in the metadata")))?;
        Ok(resolve(&format!(
            "{}:{}",
            broker.host.as_str(),
            broker.port
        ))?)
    }

    /// The coordinator of `key` (`key_type` 0 a group, 1 a transactional
    /// id), waiting while it loads, up to the timeout.
    pub async fn coordinator(&self, key: &str, key_type: i8) -> Result<SocketAddr, CliError> {
        let request = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![StrBytes::from_string(key.to_owned())]);
        let timeout = self.timeout;
        within(|| format!("the coordinator of {key}"), timeout, async {
            loop {
                let response: FindCoordinatorResponse = self
                    .request(
                        self.bootstrap,
                        ApiKey::FindCoordinator,
                        FIND_COORDINATOR_VERSION,
                        &request,
                    )
                    .await?;
                let found = response.coordinators.into_iter().next().ok_or_else(|| {
                    CliError::Failed(format!("FindCoordinator gave no answer for {key}"))
                })?;
                if COORDINATOR_NOT_READY.contains(&found.error_code) {
                    glommio::timer::sleep(COORDINATOR_RETRY).await;
                    continue;
                }
                CliError::check(found.error_code, || {
                    format!("finding the coordinator of {key}")
                })?;
                return Ok(resolve(&format!("{}:{}", found.host.as_str(), found.port))?);
            }
        })
        .await
    }

    pub async fn close(&self) {
        self.cluster.close().await;
    }
}
