//! A node's place in a cluster, from Kafka's KRaft settings: `node.id`,
//! `process.roles`, `controller.quorum.voters`, `listeners`,
//! `advertised.listeners`, `controller.listener.names`, `broker.rack`,
//! `broker.heartbeat.interval.ms`, `broker.session.timeout.ms`, and
//! `cluster.id` (Brook's: Kafka writes it with `kafka-storage format`).
//!
//! Without `controller.quorum.voters` a node is a one-node cluster needing
//! no configuration: [`ClusterSettings::parse`] returns `None`, and the
//! broker runs [`ClusterSettings::alone`], a quorum of its own voter on a
//! loopback controller listener. With it, the rules are Kafka's
//! (`KafkaConfig`'s validation), with its messages where it has one.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::cluster::controller::{
    BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT, BROKER_SESSION_TIMEOUT_MS_DEFAULT,
};
use crate::types::BrokerId;

/// The settings this module reads (so the broker does not call them
/// unknown); `inter.broker.listener.name` is read by
/// [`crate::cluster::endpoints`].
pub const SETTINGS: &[&str] = &[
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "listeners",
    "advertised.listeners",
    "controller.listener.names",
    "inter.broker.listener.name",
    "listener.security.protocol.map",
    "broker.rack",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "cluster.id",
    "metadata.log.max.record.bytes.between.snapshots",
    "default.replication.factor",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Roles {
    Broker,
    Controller,
    BrokerAndController,
}

impl Roles {
    pub fn is_controller(self) -> bool {
        self != Roles::Broker
    }

    pub fn is_broker(self) -> bool {
        self != Roles::Controller
    }
}

/// A controller voter: `id@host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voter {
    pub id: BrokerId,
    pub host: String,
    pub port: u16,
}

/// One entry of `listeners` / `advertised.listeners`: `NAME://host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    pub node: BrokerId,
    pub roles: Roles,
    pub voters: Vec<Voter>,
    pub listeners: Vec<Listener>,
    /// What this node tells others to dial, by listener name.
    pub advertised: Vec<Listener>,
    /// The first of `controller.listener.names` (CONTROLLER).
    pub controller_listener: String,
    pub rack: Option<String>,
    pub heartbeat_interval_ms: u64,
    pub session_timeout_ms: u64,
    /// `leader.imbalance.check.interval.seconds` (300) in ms when
    /// `auto.leader.rebalance.enable` (true): how long after leaders become
    /// imbalanced the active controller moves them back to their preferred
    /// replicas. `None` when disabled.
    pub leader_balance_interval_ms: Option<u64>,
    /// Shared by every node: `cluster.id`, or derived from the voters, so a
    /// cluster started with the same `controller.quorum.voters` everywhere
    /// agrees with no more configuration.
    pub cluster_id: String,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ClusterConfigError {
    #[error("invalid {name} {value:?}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: String,
    },
}

pub(crate) fn invalid(
    name: &'static str,
    value: &str,
    reason: impl Into<String>,
) -> ClusterConfigError {
    ClusterConfigError::Invalid {
        name,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

impl ClusterSettings {
    /// Reads the settings as given (file, then `--set`); `None` when this is
    /// a one-node cluster (no `controller.quorum.voters`, no
    /// `controller.quorum.bootstrap.servers`).
    pub fn parse(
        given: &BTreeMap<String, String>,
    ) -> Result<Option<ClusterSettings>, ClusterConfigError> {
        let standalone;
        let voters_text = match (
            given.get("controller.quorum.voters"),
            given.get("controller.quorum.bootstrap.servers"),
        ) {
            (Some(voters), _) => voters,
            (None, Some(bootstrap)) => {
                standalone = standalone_voter(given, bootstrap)?;
                &standalone
            }
            (None, None) => return Ok(None),
        };
        let voters = parse_voters(voters_text)?;
        let node_text = given
            .get("node.id")
            .or_else(|| given.get("broker.id"))
            .ok_or_else(|| invalid("node.id", "", "a cluster node needs node.id"))?;
        let node = node_text
            .parse::<i32>()
            .ok()
            .filter(|id| *id >= 0)
            .map(BrokerId)
            .ok_or_else(|| invalid("node.id", node_text, "must be an integer of at least 0"))?;
        let is_voter = voters.iter().any(|voter| voter.id == node);
        let roles = match given.get("process.roles").map(String::as_str) {
            None if is_voter => Roles::BrokerAndController,
            None => Roles::Broker,
            Some(text) => parse_roles(text)?,
        };
        if roles.is_controller() && !is_voter {
            return Err(invalid(
                "controller.quorum.voters",
                voters_text,
                format!(
                    "If process.roles contains the 'controller' role, the node id {node} must be included in the set of voters"
                ),
            ));
        }
        if roles == Roles::Broker && is_voter {
            return Err(invalid(
                "controller.quorum.voters",
                voters_text,
                format!(
                    "If process.roles contains just the 'broker' role, the node id {node} must not be included in the set of voters"
                ),
            ));
        }
        let controller_listener = given
            .get("controller.listener.names")
            .map(|names| {
                names
                    .split(',')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            })
            .unwrap_or_else(|| "CONTROLLER".to_owned());
        let listeners = match given.get("listeners") {
            Some(text) => parse_listeners("listeners", text)?,
            None => Vec::new(),
        };
        let advertised = match given.get("advertised.listeners") {
            Some(text) => parse_listeners("advertised.listeners", text)?,
            None => listeners.clone(),
        };
        let voter = voters.iter().find(|voter| voter.id == node).cloned();
        let timing = Timing::read(given)?;
        let settings = ClusterSettings {
            node,
            roles,
            rack: given.get("broker.rack").cloned(),
            heartbeat_interval_ms: timing.heartbeat_interval_ms,
            session_timeout_ms: timing.session_timeout_ms,
            leader_balance_interval_ms: timing.leader_balance_interval_ms,
            cluster_id: given
                .get("cluster.id")
                .cloned()
                .unwrap_or_else(|| derived_cluster_id(&voters)),
            voters,
            listeners,
            advertised,
            controller_listener,
        };
        if let Some(voter) = voter {
            // A voter listens where the others dial it.
            let listener = settings.listener(&settings.controller_listener);
            if listener.is_none_or(|listener| listener.port != voter.port) {
                return Err(invalid(
                    "listeners",
                    given.get("listeners").map_or("", String::as_str),
                    format!(
                        "node {node} is voter {}@{}:{}, so listeners must include {}://…:{}",
                        voter.id, voter.host, voter.port, settings.controller_listener, voter.port
                    ),
                ));
            }
        }
        Ok(Some(settings))
    }

    /// A node started without a quorum: the one voter of its own cluster
    /// (broker and controller), its controller listener on loopback at
    /// `controller_port`, the cluster id its data directory holds. Session,
    /// heartbeat, rack and leader-balance settings are read from `given`
    /// as [`ClusterSettings::parse`] reads them.
    pub fn alone(
        given: &BTreeMap<String, String>,
        node: BrokerId,
        controller_port: u16,
        cluster_id: &str,
    ) -> Result<ClusterSettings, ClusterConfigError> {
        const CONTROLLER: &str = "CONTROLLER";
        let host = "127.0.0.1".to_owned();
        let listener = Listener {
            name: CONTROLLER.to_owned(),
            host: host.clone(),
            port: controller_port,
        };
        let timing = Timing::read(given)?;
        Ok(ClusterSettings {
            node,
            roles: Roles::BrokerAndController,
            voters: vec![Voter {
                id: node,
                host,
                port: controller_port,
            }],
            listeners: vec![listener.clone()],
            advertised: vec![listener],
            controller_listener: CONTROLLER.to_owned(),
            rack: given.get("broker.rack").cloned(),
            heartbeat_interval_ms: timing.heartbeat_interval_ms,
            session_timeout_ms: timing.session_timeout_ms,
            leader_balance_interval_ms: timing.leader_balance_interval_ms,
            cluster_id: cluster_id.to_owned(),
        })
    }

    /// Whether this node is its quorum's only voter (a node started alone,
    /// or Kafka's standalone quorum): it needs no other node to run.
    pub fn is_alone(&self) -> bool {
        matches!(self.voters.as_slice(), [voter] if voter.id == self.node)
    }

    pub fn listener(&self, name: &str) -> Option<&Listener> {
        self.listeners.iter().find(|listener| listener.name == name)
    }

    /// Where this node serves Kafka clients: the first listener that is not
    /// the controller's.
    pub fn client_listener(&self) -> Option<&Listener> {
        self.listeners
            .iter()
            .find(|listener| listener.name != self.controller_listener)
    }

    pub fn voter(&self, id: BrokerId) -> Option<&Voter> {
        self.voters.iter().find(|voter| voter.id == id)
    }
}

/// `controller.quorum.bootstrap.servers` naming this node's own controller
/// listener, alone: the quorum of one node that Kafka's stock
/// `server.properties` describes (formatted there with `kafka-storage
/// format --standalone`), as `controller.quorum.voters` would say it.
/// Brook's quorum is static, so bootstrap servers naming other
/// controllers are refused: they do not say the voters' ids.
fn standalone_voter(
    given: &BTreeMap<String, String>,
    bootstrap: &str,
) -> Result<String, ClusterConfigError> {
    let name = "controller.quorum.bootstrap.servers";
    let static_only = |reason: &str| {
        invalid(
            name,
            bootstrap,
            format!(
                "{reason}; Brook's quorum is static: set controller.quorum.voters (id@host:port,…) on every node"
            ),
        )
    };
    let servers: Vec<&str> = bootstrap
        .split(',')
        .map(str::trim)
        .filter(|server| !server.is_empty())
        .collect();
    let [server] = servers.as_slice() else {
        return Err(static_only("several controllers"));
    };
    let roles = given.get("process.roles").map(String::as_str);
    if roles.is_none_or(|roles| parse_roles(roles).map_or(true, |roles| !roles.is_controller())) {
        return Err(static_only("this node is not a controller"));
    }
    let node = given
        .get("node.id")
        .ok_or_else(|| invalid("node.id", "", "a cluster node needs node.id"))?;
    let (host, port) = split_host_port(server)
        .ok_or_else(|| invalid(name, bootstrap, format!("{server:?} is not host:port")))?;
    let controller_name = given
        .get("controller.listener.names")
        .and_then(|names| names.split(',').next())
        .map_or("CONTROLLER", str::trim);
    let own = match given.get("listeners") {
        Some(text) => parse_listeners("listeners", text)?
            .into_iter()
            .any(|listener| listener.name == controller_name && listener.port == port),
        None => false,
    };
    if !own {
        return Err(static_only(&format!(
            "{server} is not this node's {controller_name} listener"
        )));
    }
    Ok(format!("{node}@{host}:{port}"))
}

/// A node's broker session settings and leader balancing, read the same
/// way whether it runs alone or in a configured quorum.
struct Timing {
    heartbeat_interval_ms: u64,
    session_timeout_ms: u64,
    leader_balance_interval_ms: Option<u64>,
}

impl Timing {
    fn read(given: &BTreeMap<String, String>) -> Result<Timing, ClusterConfigError> {
        let timing = Timing {
            heartbeat_interval_ms: milliseconds(
                given,
                "broker.heartbeat.interval.ms",
                BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT,
            )?,
            session_timeout_ms: milliseconds(
                given,
                "broker.session.timeout.ms",
                BROKER_SESSION_TIMEOUT_MS_DEFAULT,
            )?,
            leader_balance_interval_ms: leader_balance_interval_ms(given)?,
        };
        if timing.heartbeat_interval_ms >= timing.session_timeout_ms {
            return Err(invalid(
                "broker.heartbeat.interval.ms",
                &timing.heartbeat_interval_ms.to_string(),
                "must be less than broker.session.timeout.ms",
            ));
        }
        Ok(timing)
    }
}

fn milliseconds(
    given: &BTreeMap<String, String>,
    name: &'static str,
    default: u64,
) -> Result<u64, ClusterConfigError> {
    match given.get(name) {
        None => Ok(default),
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms > 0)
            .ok_or_else(|| invalid(name, text, "must be a positive number of milliseconds")),
    }
}

/// Kafka's `auto.leader.rebalance.enable` (true) and
/// `leader.imbalance.check.interval.seconds` (300, at least 1).
fn leader_balance_interval_ms(
    given: &BTreeMap<String, String>,
) -> Result<Option<u64>, ClusterConfigError> {
    const ENABLE: &str = "auto.leader.rebalance.enable";
    const INTERVAL: &str = "leader.imbalance.check.interval.seconds";
    let enabled = match given.get(ENABLE).map(|text| text.trim()) {
        None => true,
        Some(text) if text.eq_ignore_ascii_case("true") => true,
        Some(text) if text.eq_ignore_ascii_case("false") => false,
        Some(text) => return Err(invalid(ENABLE, text, "expected true or false")),
    };
    let seconds = match given.get(INTERVAL) {
        None => 300,
        Some(text) => text
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|seconds| *seconds >= 1)
            .ok_or_else(|| invalid(INTERVAL, text, "must be at least 1"))?,
    };
    Ok(enabled.then_some(seconds * 1_000))
}

fn parse_roles(text: &str) -> Result<Roles, ClusterConfigError> {
    let mut broker = false;
    let mut controller = false;
    for role in text.split(',').map(str::trim) {
        match role {
            "broker" if !broker => broker = true,
            "controller" if !controller => controller = true,
            _ => {
                return Err(invalid(
                    "process.roles",
                    text,
                    "must be broker, controller, or broker,controller",
                ));
            }
        }
    }
    match (broker, controller) {
        (true, true) => Ok(Roles::BrokerAndController),
        (true, false) => Ok(Roles::Broker),
        (false, true) => Ok(Roles::Controller),
        (false, false) => Err(invalid("process.roles", text, "names no role")),
    }
}

/// `controller.quorum.voters`: `id@host:port[,id@host:port…]`.
pub fn parse_voters(text: &str) -> Result<Vec<Voter>, ClusterConfigError> {
    let mut voters: Vec<Voter> = Vec::new();
    for entry in text.split(',').map(str::trim) {
        let bad = || {
            invalid(
                "controller.quorum.voters",
                text,
                format!("{entry:?} is not id@host:port"),
            )
        };
        let (id, address) = entry.split_once('@').ok_or_else(bad)?;
        let id = id
            .parse::<i32>()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(bad)?;
        let (host, port) = split_host_port(address).ok_or_else(bad)?;
        if voters.iter().any(|voter| voter.id.0 == id) {
            return Err(invalid(
                "controller.quorum.voters",
                text,
                format!("voter {id} is listed twice"),
            ));
        }
        voters.push(Voter {
            id: BrokerId(id),
            host,
            port,
        });
    }
    Ok(voters)
}

/// `listeners`: `NAME://host:port[,…]` (an empty host is every address).
pub fn parse_listeners(
    name: &'static str,
    text: &str,
) -> Result<Vec<Listener>, ClusterConfigError> {
    let mut listeners: Vec<Listener> = Vec::new();
    for entry in text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let bad = || invalid(name, text, format!("{entry:?} is not NAME://host:port"));
        let (listener, address) = entry.split_once("://").ok_or_else(bad)?;
        if listener.is_empty()
            || !listener
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        {
            return Err(bad());
        }
        let (host, port) = split_host_port(address).ok_or_else(bad)?;
        if listeners.iter().any(|known| known.name == listener) {
            return Err(invalid(
                name,
                text,
                format!("listener {listener} is listed twice"),
            ));
        }
        listeners.push(Listener {
            name: listener.to_owned(),
            host,
            port,
        });
    }
    Ok(listeners)
}

fn split_host_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

/// A 22-character cluster id (Kafka's are base64 of 16 bytes) derived
/// from the voters, so nodes given the same voters agree.
fn derived_cluster_id(voters: &[Voter]) -> String {
    let text: Vec<String> = voters
        .iter()
        .map(|voter| format!("{}@{}:{}", voter.id, voter.host, voter.port))
        .collect();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut bytes = Vec::with_capacity(16);
    for round in 0..2u8 {
        for byte in text.join(",").bytes().chain([round]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        bytes.extend_from_slice(&hash.to_be_bytes());
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut id = String::with_capacity(22);
    let mut bits = 0u32;
    let mut pending = 0u32;
    for byte in bytes {
        pending = (pending << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            id.push(ALPHABET[((pending >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        id.push(ALPHABET[((pending << (6 - bits)) & 63) as usize] as char);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    const VOTERS: &str = "0@127.0.0.1:9190,1@127.0.0.1:9191,2@127.0.0.1:9192";

    #[test]
    fn no_voters_is_the_one_node_cluster() {
        assert_eq!(
            ClusterSettings::parse(&given(&[("node.id", "3")])),
            Ok(None)
        );
    }

    /// A node without a quorum is the one voter of its own, on loopback,
    /// and reads the session settings as a quorum's node does: a heartbeat
    /// not shorter than the session is refused there too.
    #[test]
    fn a_node_alone_is_its_own_voter_with_the_given_session_settings() {
        let settings = ClusterSettings::alone(
            &given(&[("broker.session.timeout.ms", "4000"), ("broker.rack", "r2")]),
            BrokerId(3),
            40_000,
            "abc",
        )
        .unwrap();
        assert!(settings.is_alone());
        assert_eq!(settings.roles, Roles::BrokerAndController);
        assert_eq!(settings.voter(BrokerId(3)).unwrap().port, 40_000);
        assert_eq!(settings.listener("CONTROLLER").unwrap().host, "127.0.0.1");
        assert_eq!(settings.session_timeout_ms, 4_000);
        assert_eq!(settings.rack.as_deref(), Some("r2"));
        assert_eq!(settings.cluster_id, "abc");
        let refused = ClusterSettings::alone(
            &given(&[("broker.heartbeat.interval.ms", "9000")]),
            BrokerId(3),
            40_000,
            "abc",
        );
        assert!(matches!(
            refused,
            Err(ClusterConfigError::Invalid {
                name: "broker.heartbeat.interval.ms",
                ..
            })
        ));
    }

    #[test]
    fn a_combined_node_reads_kafkas_names() {
        let settings = ClusterSettings::parse(&given(&[
            ("node.id", "1"),
            ("process.roles", "broker,controller"),
            ("controller.quorum.voters", VOTERS),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9191",
            ),
            ("broker.rack", "r1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(settings.node, BrokerId(1));
        assert_eq!(settings.roles, Roles::BrokerAndController);
        assert_eq!(settings.voters.len(), 3);
        assert_eq!(settings.client_listener().unwrap().port, 9093);
        assert_eq!(settings.listener("CONTROLLER").unwrap().port, 9191);
        assert_eq!(settings.rack.as_deref(), Some("r1"));
        assert_eq!(settings.session_timeout_ms, 9_000);
        assert_eq!(settings.heartbeat_interval_ms, 2_000);
        assert_eq!(settings.leader_balance_interval_ms, Some(300_000));
        assert_eq!(settings.cluster_id.len(), 22);
        // The same voters give the same id on every node.
        let other = ClusterSettings::parse(&given(&[
            ("node.id", "5"),
            ("controller.quorum.voters", VOTERS),
            ("listeners", "PLAINTEXT://127.0.0.1:9099"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(other.roles, Roles::Broker);
        assert_eq!(other.cluster_id, settings.cluster_id);
    }

    #[test]
    fn leader_balancing_reads_kafkas_two_settings() {
        let with = |pairs: &[(&str, &str)]| {
            let mut all = vec![
                ("node.id", "5"),
                ("controller.quorum.voters", VOTERS),
                ("listeners", "PLAINTEXT://127.0.0.1:9099"),
            ];
            all.extend_from_slice(pairs);
            ClusterSettings::parse(&given(&all))
                .map(|settings| settings.expect("a cluster").leader_balance_interval_ms)
        };
        assert_eq!(with(&[]), Ok(Some(300_000)));
        let interval = ("leader.imbalance.check.interval.seconds", "2");
        assert_eq!(with(&[interval]), Ok(Some(2_000)));
        let disabled = ("auto.leader.rebalance.enable", "false");
        assert_eq!(with(&[disabled, interval]), Ok(None));
        for bad in [
            ("leader.imbalance.check.interval.seconds", "0"),
            ("auto.leader.rebalance.enable", "yes"),
        ] {
            let refused = with(&[bad]).unwrap_err().to_string();
            assert!(refused.contains(bad.0), "{refused}");
        }
    }

    #[test]
    fn malformed_settings_are_refused_with_a_reason() {
        let refused = |pairs: &[(&str, &str)]| {
            ClusterSettings::parse(&given(pairs))
                .unwrap_err()
                .to_string()
        };
        for voters in [
            "1@host",
            "x@h:1",
            "1@h:port",
            "1h:9",
            "-1@h:9",
            "1@h:9,1@h:10",
            "",
        ] {
            let message = refused(&[("node.id", "1"), ("controller.quorum.voters", voters)]);
            assert!(
                message.contains("controller.quorum.voters"),
                "{voters}: {message}"
            );
        }
        assert!(refused(&[("controller.quorum.voters", VOTERS)]).contains("node.id"));
        assert!(
            refused(&[
                ("node.id", "7"),
                ("process.roles", "controller"),
                ("controller.quorum.voters", VOTERS)
            ])
            .contains("must be included in the set of voters")
        );
        assert!(
            refused(&[
                ("node.id", "1"),
                ("process.roles", "broker"),
                ("controller.quorum.voters", VOTERS)
            ])
            .contains("must not be included")
        );
        assert!(
            refused(&[
                ("node.id", "1"),
                ("process.roles", "brokr"),
                ("controller.quorum.voters", VOTERS)
            ])
            .contains("process.roles")
        );
        // A voter without its controller listener could never be dialled.
        assert!(
            refused(&[
                ("node.id", "1"),
                ("controller.quorum.voters", VOTERS),
                ("listeners", "PLAINTEXT://:9092")
            ])
            .contains("listeners must include CONTROLLER")
        );
        assert!(
            refused(&[
                ("node.id", "5"),
                ("controller.quorum.voters", VOTERS),
                ("listeners", "PLAINTEXT//:9092")
            ])
            .contains("not NAME://host:port")
        );
        assert!(
            refused(&[
                ("node.id", "5"),
                ("controller.quorum.voters", VOTERS),
                ("broker.heartbeat.interval.ms", "10000"),
            ])
            .contains("less than broker.session.timeout.ms")
        );
        assert!(refused(&[("controller.quorum.bootstrap.servers", "h:9")]).contains("static"));
    }

    /// Kafka 4.1's stock KRaft file: one node, its own controller the only
    /// bootstrap server, is a quorum of itself.
    #[test]
    fn bootstrap_servers_naming_this_controller_alone_make_a_quorum_of_it() {
        let parse = |pairs: &[(&str, &str)]| ClusterSettings::parse(&given(pairs));
        let refused = |pairs: &[(&str, &str)]| parse(pairs).unwrap_err().to_string();
        let stock = [
            ("process.roles", "broker,controller"),
            ("node.id", "1"),
            ("controller.quorum.bootstrap.servers", "localhost:9093"),
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            ("controller.listener.names", "CONTROLLER"),
        ];
        let settings = parse(&stock).unwrap().expect("a cluster node");
        assert_eq!(
            settings.voters,
            [Voter {
                id: BrokerId(1),
                host: "localhost".to_owned(),
                port: 9093
            }]
        );
        assert_eq!(settings.roles, Roles::BrokerAndController);
        let mut others = stock.to_vec();
        others[2] = ("controller.quorum.bootstrap.servers", "a:9093,b:9093");
        assert!(refused(&others).contains("several controllers"));
        let mut elsewhere = stock.to_vec();
        elsewhere[2] = ("controller.quorum.bootstrap.servers", "a:9999");
        assert!(refused(&elsewhere).contains("not this node's CONTROLLER listener"));
        let mut broker = stock.to_vec();
        broker[0] = ("process.roles", "broker");
        assert!(refused(&broker).contains("not a controller"));
    }
}
