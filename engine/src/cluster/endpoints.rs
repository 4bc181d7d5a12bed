//! Where `brook serve` listens for clients, what it tells them to dial,
//! and where it keeps its data, from Kafka's own settings (`listeners`,
//! `listener.security.protocol.map`, `advertised.listeners`,
//! `controller.listener.names`, `log.dirs`, `log.dir`) with `brook serve`'s
//! flags over them (`--listen`, `--advertised-host`, `--data-dir`), so a
//! Kafka `server.properties` starts a broker where Kafka would.
//!
//! Rules and messages are Kafka's (`KafkaConfig`'s validation) where it
//! has them. Brook differs in its defaults, which keep a broker started
//! with no configuration private to this machine: clients on
//! 127.0.0.1:9092 (Kafka: every address) and data in `./brook-data`
//! (Kafka: `/tmp/kafka-logs`). What Brook does not serve yet is refused
//! with a reason, never dropped: a listener of another security protocol
//! than PLAINTEXT. Several client listeners are each served, each
//! advertised under its own name; several log directories (JBOD) each hold
//! partitions, the first also the broker's metadata (Kafka's default for
//! `metadata.log.dir`).

use std::collections::BTreeMap;

use crate::cluster::node_config::{ClusterConfigError, Listener, invalid, parse_listeners};

/// The settings this module reads (so the broker does not call them unknown).
pub const SETTINGS: &[&str] = &["log.dirs", "log.dir"];

/// Where a broker started with no configuration serves clients.
pub const LISTEN_HOST_DEFAULT: &str = "127.0.0.1";
pub const LISTEN_PORT_DEFAULT: u16 = 9092;
/// Where a broker started with no configuration keeps its data.
pub const DATA_DIR_DEFAULT: &str = "./brook-data";

/// Kafka's security protocols; Brook serves the first.
const PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// `brook serve`'s flags, each over the Kafka setting it stands for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServeFlags {
    /// `--listen`: host and port.
    pub listen: Option<(String, u16)>,
    /// `--advertised-host`.
    pub advertised_host: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<String>,
}

/// What the broker serves clients on and keeps its data in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// The inter-broker client listener's name (`inter.broker.listener.name`,
    /// else the one named PLAINTEXT, else the first): the one other brokers
    /// dial, and the one the flags set.
    pub listener_name: String,
    /// Its host (empty: every address) and port.
    pub listen_host: String,
    pub listen_port: u16,
    /// The host Metadata names for this broker on it; `None`: the listen
    /// host (the machine's name when that is every address, as Kafka does).
    pub advertised_host: Option<String>,
    /// The port Metadata names; `None`: the listen port.
    pub advertised_port: Option<u16>,
    /// The other client listeners, each served, each advertised as
    /// `advertised.listeners` says under its name.
    pub others: Vec<ClientListener>,
    /// The log directories, in the order given (never empty, no two the
    /// same); the first also holds the broker's metadata.
    pub log_dirs: Vec<String>,
}

/// A further client listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientListener {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub advertised_host: Option<String>,
    pub advertised_port: Option<u16>,
}

/// Resolves the client listeners, what is advertised and the data
/// directory from the settings `given` (file, then `--set`) and `flags`.
pub fn resolve(
    given: &BTreeMap<String, String>,
    flags: &ServeFlags,
) -> Result<Endpoints, ClusterConfigError> {
    let listeners = match given.get("listeners") {
        Some(text) => parse_listeners("listeners", text)?,
        None => Vec::new(),
    };
    let controller_names: Vec<&str> = given
        .get("controller.listener.names")
        .map(|names| names.split(',').map(str::trim).collect())
        .unwrap_or_else(|| vec!["CONTROLLER"]);
    let protocols = protocol_map(given, &controller_names)?;
    check_listeners(given, &listeners, &protocols)?;
    let mut clients: Vec<&Listener> = listeners
        .iter()
        .filter(|listener| !controller_names.contains(&listener.name.as_str()))
        .collect();
    let inter_broker = given.get("inter.broker.listener.name");
    if let Some(name) = inter_broker.filter(|_| !clients.is_empty()) {
        if !clients.iter().any(|client| &client.name == name) {
            let names: Vec<&str> = clients.iter().map(|client| client.name.as_str()).collect();
            return Err(invalid(
                "inter.broker.listener.name",
                name,
                format!(
                    "inter.broker.listener.name must be a listener name defined in advertised.listeners. \
                     The valid options based on currently configured listeners are {}",
                    names.join(",")
                ),
            ));
        }
    }
    // The inter-broker listener first.
    let first = clients
        .iter()
        .position(|client| Some(&client.name) == inter_broker)
        .or_else(|| clients.iter().position(|client| client.name == "PLAINTEXT"))
        .unwrap_or(0);
    if first < clients.len() {
        let inter = clients.remove(first);
        clients.insert(0, inter);
    }
    let advertised = match given.get("advertised.listeners") {
        Some(text) => parse_listeners("advertised.listeners", text)?,
        None => Vec::new(),
    };
    let advertised_of = |name: &str| {
        let listener = advertised.iter().find(|listener| listener.name == name);
        (
            listener
                .map(|listener| listener.host.clone())
                .filter(|host| !host.is_empty()),
            listener.map(|listener| listener.port),
        )
    };
    let client = clients.first().copied();
    let (listen_host, listen_port) = match (&flags.listen, client) {
        (Some((host, port)), _) => (host.clone(), *port),
        (None, Some(client)) => (client.host.clone(), client.port),
        (None, None) => (LISTEN_HOST_DEFAULT.to_owned(), LISTEN_PORT_DEFAULT),
    };
    let listener_name = client.map_or("PLAINTEXT".to_owned(), |client| client.name.clone());
    // `--listen` replaces the first listener, and with it what the file
    // advertised for it (which names the file's port): the listen address
    // is advertised, or `--advertised-host` at the new port.
    let (advertised_host, advertised_port) = match (client, &flags.listen) {
        (Some(client), None) => advertised_of(&client.name),
        _ => (None, None),
    };
    let others = clients
        .iter()
        .skip(1)
        .map(|listener| {
            let (advertised_host, advertised_port) = advertised_of(&listener.name);
            ClientListener {
                name: listener.name.clone(),
                host: listener.host.clone(),
                port: listener.port,
                advertised_host,
                advertised_port,
            }
        })
        .collect();
    Ok(Endpoints {
        listener_name,
        listen_host,
        listen_port,
        advertised_host: flags.advertised_host.clone().or(advertised_host),
        advertised_port,
        others,
        log_dirs: log_dirs(given, flags)?,
    })
}

/// `listener.security.protocol.map`: listener name → protocol. Without it,
/// Kafka's default (each protocol's own name), with the controller
/// listeners on PLAINTEXT.
fn protocol_map(
    given: &BTreeMap<String, String>,
    controller_names: &[&str],
) -> Result<BTreeMap<String, String>, ClusterConfigError> {
    let Some(text) = given.get("listener.security.protocol.map") else {
        let mut map: BTreeMap<String, String> = PROTOCOLS
            .iter()
            .map(|protocol| ((*protocol).to_owned(), (*protocol).to_owned()))
            .collect();
        for name in controller_names {
            map.entry((*name).to_owned())
                .or_insert_with(|| "PLAINTEXT".to_owned());
        }
        return Ok(map);
    };
    let mut map = BTreeMap::new();
    for entry in text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let name = "listener.security.protocol.map";
        let (listener, protocol) = entry
            .split_once(':')
            .ok_or_else(|| invalid(name, text, format!("{entry:?} is not NAME:PROTOCOL")))?;
        let protocol = protocol.trim().to_ascii_uppercase();
        if !PROTOCOLS.contains(&protocol.as_str()) {
            return Err(invalid(
                name,
                text,
                format!(
                    "unknown security protocol {protocol} (one of {})",
                    PROTOCOLS.join(", ")
                ),
            ));
        }
        if map.insert(listener.trim().to_owned(), protocol).is_some() {
            return Err(invalid(
                name,
                text,
                format!("listener {} is mapped twice", listener.trim()),
            ));
        }
    }
    Ok(map)
}

/// Every listener has a protocol Brook serves and a port of its own.
fn check_listeners(
    given: &BTreeMap<String, String>,
    listeners: &[Listener],
    protocols: &BTreeMap<String, String>,
) -> Result<(), ClusterConfigError> {
    let text = given.get("listeners").map_or("", String::as_str);
    for (index, listener) in listeners.iter().enumerate() {
        let protocol = protocols.get(&listener.name).ok_or_else(|| {
            invalid(
                "listeners",
                text,
                format!(
                    "No security protocol defined for listener {}: add it to listener.security.protocol.map",
                    listener.name
                ),
            )
        })?;
        if protocol != "PLAINTEXT" {
            return Err(invalid(
                "listeners",
                text,
                format!(
                    "listener {} uses {protocol}, which Brook does not serve yet (PLAINTEXT only)",
                    listener.name
                ),
            ));
        }
        if listener.port != 0
            && listeners[..index]
                .iter()
                .any(|earlier| earlier.port == listener.port)
        {
            return Err(invalid(
                "listeners",
                text,
                "Each listener must have a different port",
            ));
        }
    }
    Ok(())
}

/// `--data-dir`, else `log.dirs`, else `log.dir`, else
/// [`DATA_DIR_DEFAULT`]. A directory named twice is refused, as Kafka
/// refuses it.
fn log_dirs(
    given: &BTreeMap<String, String>,
    flags: &ServeFlags,
) -> Result<Vec<String>, ClusterConfigError> {
    if let Some(dir) = &flags.data_dir {
        return Ok(vec![dir.clone()]);
    }
    let (name, text) = match (given.get("log.dirs"), given.get("log.dir")) {
        (Some(dirs), _) => ("log.dirs", dirs),
        (None, Some(dir)) => ("log.dir", dir),
        (None, None) => return Ok(vec![DATA_DIR_DEFAULT.to_owned()]),
    };
    let mut dirs: Vec<String> = Vec::new();
    for dir in text.split(',').map(str::trim).filter(|dir| !dir.is_empty()) {
        let same = |known: &String| known.trim_end_matches('/') == dir.trim_end_matches('/');
        if dirs.iter().any(same) {
            return Err(invalid(
                name,
                text,
                format!("Duplicate log directory found: {dir}"),
            ));
        }
        dirs.push(dir.to_owned());
    }
    if dirs.is_empty() {
        return Err(invalid(name, text, "names no directory"));
    }
    Ok(dirs)
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

    /// The listener and log settings of Kafka 4.1's stock KRaft
    /// `config/server.properties`.
    fn stock() -> BTreeMap<String, String> {
        given(&[
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            ("inter.broker.listener.name", "PLAINTEXT"),
            (
                "advertised.listeners",
                "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            ),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listener.security.protocol.map",
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            ),
            ("log.dirs", "/tmp/kraft-combined-logs"),
        ])
    }

    #[test]
    fn nothing_given_is_brooks_private_default() {
        let endpoints = resolve(&BTreeMap::new(), &ServeFlags::default()).unwrap();
        assert_eq!(
            endpoints,
            Endpoints {
                listener_name: "PLAINTEXT".to_owned(),
                listen_host: "127.0.0.1".to_owned(),
                listen_port: 9092,
                advertised_host: None,
                advertised_port: None,
                others: Vec::new(),
                log_dirs: vec!["./brook-data".to_owned()],
            }
        );
    }

    #[test]
    fn kafkas_stock_file_listens_on_every_address_and_advertises_localhost() {
        let endpoints = resolve(&stock(), &ServeFlags::default()).unwrap();
        assert_eq!(
            endpoints,
            Endpoints {
                listener_name: "PLAINTEXT".to_owned(),
                listen_host: String::new(),
                listen_port: 9092,
                advertised_host: Some("localhost".to_owned()),
                advertised_port: Some(9092),
                others: Vec::new(),
                log_dirs: vec!["/tmp/kraft-combined-logs".to_owned()],
            }
        );
    }

    #[test]
    fn flags_win_over_the_file() {
        let flags = ServeFlags {
            listen: Some(("127.0.0.1".to_owned(), 7000)),
            advertised_host: Some("broker-1".to_owned()),
            data_dir: Some("/data".to_owned()),
        };
        let endpoints = resolve(&stock(), &flags).unwrap();
        assert_eq!(
            (
                endpoints.listen_host.as_str(),
                endpoints.listen_port,
                endpoints.advertised_host.as_deref(),
                endpoints.log_dirs[0].as_str()
            ),
            ("127.0.0.1", 7000, Some("broker-1"), "/data")
        );
        // The file advertised localhost:9092 for the listener `--listen`
        // replaced: clients are sent to the new port, not the file's.
        assert_eq!(endpoints.advertised_port, None);
        let listen_only = ServeFlags {
            listen: Some(("127.0.0.1".to_owned(), 7000)),
            ..ServeFlags::default()
        };
        let endpoints = resolve(&stock(), &listen_only).unwrap();
        assert_eq!(
            (endpoints.advertised_host, endpoints.advertised_port),
            (None, None)
        );
    }

    #[test]
    fn a_listener_on_a_protocol_brook_does_not_serve_is_refused() {
        let mut settings = stock();
        settings.insert("listeners".into(), "SSL://:9094,CONTROLLER://:9093".into());
        let error = resolve(&settings, &ServeFlags::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("listener SSL uses SSL"), "{error}");
        settings.insert(
            "listener.security.protocol.map".into(),
            "CONTROLLER:PLAINTEXT,SSL:TLS".into(),
        );
        let error = resolve(&settings, &ServeFlags::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown security protocol TLS"), "{error}");
    }

    #[test]
    fn listeners_must_be_mapped_and_distinct() {
        let unmapped = given(&[("listeners", "EXTERNAL://:9092")]);
        let error = resolve(&unmapped, &ServeFlags::default())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("No security protocol defined for listener EXTERNAL"),
            "{error}"
        );
        let same_port = given(&[("listeners", "PLAINTEXT://:9092,CONTROLLER://:9092")]);
        let error = resolve(&same_port, &ServeFlags::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("different port"), "{error}");
        let malformed = given(&[("listeners", "PLAINTEXT//:9092")]);
        assert!(resolve(&malformed, &ServeFlags::default()).is_err());
    }

    /// Docker's usual pair: clients outside dial EXTERNAL, brokers dial
    /// each other on INTERNAL; each listener advertises its own address.
    #[test]
    fn several_client_listeners_the_inter_broker_one_first() {
        let mut settings = given(&[
            (
                "listeners",
                "EXTERNAL://:9094,INTERNAL://:9092,CONTROLLER://:9093",
            ),
            (
                "advertised.listeners",
                "EXTERNAL://broker.example:19094,INTERNAL://kafka-1:9092",
            ),
            (
                "listener.security.protocol.map",
                "CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
        ]);
        let endpoints = resolve(&settings, &ServeFlags::default()).unwrap();
        assert_eq!(
            (
                endpoints.listener_name.as_str(),
                endpoints.listen_port,
                endpoints.advertised_host.as_deref()
            ),
            ("INTERNAL", 9092, Some("kafka-1"))
        );
        assert_eq!(
            endpoints.others,
            [ClientListener {
                name: "EXTERNAL".into(),
                host: String::new(),
                port: 9094,
                advertised_host: Some("broker.example".into()),
                advertised_port: Some(19094),
            }]
        );
        settings.insert("inter.broker.listener.name".into(), "OTHER".into());
        let error = resolve(&settings, &ServeFlags::default())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(
                "The valid options based on currently configured listeners are EXTERNAL,INTERNAL"
            ),
            "{error}"
        );
    }

    #[test]
    fn log_directories_from_log_dirs_or_log_dir() {
        let dirs = |settings: &[(&str, &str)]| {
            resolve(&given(settings), &ServeFlags::default()).map(|endpoints| endpoints.log_dirs)
        };
        assert_eq!(
            dirs(&[("log.dir", "/var/lib/brook")]).unwrap(),
            ["/var/lib/brook"]
        );
        assert_eq!(
            dirs(&[("log.dir", "/a"), ("log.dirs", "/b")]).unwrap(),
            ["/b"]
        );
        assert_eq!(
            dirs(&[("log.dirs", "/disk1/kafka, /disk2/kafka")]).unwrap(),
            ["/disk1/kafka", "/disk2/kafka"]
        );
        assert!(dirs(&[("log.dirs", " , ")]).is_err());
        let twice = dirs(&[("log.dirs", "/disk1/kafka,/disk2,/disk1/kafka/")])
            .unwrap_err()
            .to_string();
        assert!(
            twice.contains("Duplicate log directory found: /disk1/kafka/"),
            "{twice}"
        );
        let flag = ServeFlags {
            data_dir: Some("/flag".into()),
            ..ServeFlags::default()
        };
        let over = resolve(&given(&[("log.dirs", "/disk1,/disk2")]), &flag).unwrap();
        assert_eq!(over.log_dirs, ["/flag"], "--data-dir stands for log.dirs");
    }

    #[test]
    fn an_advertised_listener_of_another_name_is_not_this_ones() {
        let settings = given(&[
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("advertised.listeners", "OTHER://far:1"),
        ]);
        let endpoints = resolve(&settings, &ServeFlags::default()).unwrap();
        assert_eq!(
            (endpoints.advertised_host, endpoints.advertised_port),
            (None, None)
        );
    }
}
