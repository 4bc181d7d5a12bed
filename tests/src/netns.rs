//! Network namespaces for tests that cut the network (not a kill): one
//! namespace per node, each with a veth into a bridge of this process's
//! namespace, so the test (a client on the bridge) reaches every node and
//! the nodes reach each other. A partition blackholes the routes between
//! a node and the others, both ways; the client keeps reaching all of
//! them. Everything is removed when the [`Network`] is dropped.
//!
//! Needs root (CAP_NET_ADMIN) and iproute2's `ip`.

use std::path::PathBuf;
use std::process::Command;

/// The routing table of [`Network::silence_connections`].
const SILENCED_TABLE: &str = "100";

#[derive(Debug)]
pub struct Network {
    /// This network's name prefix (unique per test process and network).
    name: String,
    /// The first three octets of the /24 the nodes live in.
    subnet: String,
    nodes: usize,
    /// Routes blackholed now, as (namespace index, destination index).
    cut: Vec<(usize, usize)>,
}

fn ip(arguments: &[&str]) {
    let output = Command::new("ip")
        .args(arguments)
        .output()
        .unwrap_or_else(|error| panic!("ip {arguments:?}: {error} (iproute2 is needed)"));
    assert!(
        output.status.success(),
        "ip {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Network {
    /// `nodes` namespaces on one bridge; `tag` tells this process's
    /// networks apart (at most 9 characters with the pid).
    pub fn create(tag: u8, nodes: usize) -> Network {
        let pid = std::process::id();
        let network = Network {
            name: format!("bk{}{tag}", pid % 100_000),
            // 10.<pid-derived>.<tag>.0/24: a per-process subnet.
            subnet: format!("10.{}.{tag}", 100 + pid % 150),
            nodes,
            cut: Vec::new(),
        };
        let bridge = network.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", network.subnet),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for index in 0..nodes {
            let namespace = network.namespace(index);
            let (outside, inside) = (format!("{}h{index}", network.name), "eth0".to_owned());
            ip(&["netns", "add", &namespace]);
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside, "netns",
                &namespace,
            ]);
            ip(&["link", "set", &outside, "master", &bridge]);
            ip(&["link", "set", &outside, "up"]);
            let address = format!("{}/24", network.address(index));
            for arguments in [
                vec!["addr", "add", &address, "dev", &inside],
                vec!["link", "set", &inside, "up"],
                vec!["link", "set", "lo", "up"],
            ] {
                network.in_namespace(index, &arguments);
            }
        }
        network
    }

    fn bridge(&self) -> String {
        format!("{}br", self.name)
    }

    fn namespace(&self, index: usize) -> String {
        format!("{}n{index}", self.name)
    }

    /// Node `index`'s address.
    pub fn address(&self, index: usize) -> String {
        format!("{}.{}", self.subnet, index + 2)
    }

    /// Node `index`'s namespace file, for [`brook_launch::BrokerLaunch`].
    pub fn namespace_file(&self, index: usize) -> PathBuf {
        PathBuf::from("/run/netns").join(self.namespace(index))
    }

    fn route(&self, action: &str, from: usize, to: usize) {
        self.in_namespace(
            from,
            &[
                "route",
                action,
                "blackhole",
                &format!("{}/32", self.address(to)),
            ],
        );
    }

    /// Cuts node `index` off from every other node, both ways (packets
    /// between them vanish, as on a failed link); the test still reaches it.
    pub fn isolate(&mut self, index: usize) {
        for other in (0..self.nodes).filter(|other| *other != index) {
            for (from, to) in [(index, other), (other, index)] {
                self.route("add", from, to);
                self.cut.push((from, to));
            }
        }
    }

    /// The local ports of node `from`'s TCP connections to port `port` of
    /// node `to` that are established now.
    pub fn established(&self, from: usize, to: usize, port: u16) -> Vec<u16> {
        let listed = Command::new("ip")
            .args(["netns", "exec", &self.namespace(from), "ss", "-Htn"])
            .args(["state", "established", "dst", &self.address(to)])
            .args(["dport", "=", &format!(":{port}")])
            .output()
            .expect("ss (iproute2) is needed");
        assert!(listed.status.success(), "ss: {listed:?}");
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter_map(|line| {
                let local = line.split_whitespace().nth(2)?;
                local.rsplit_once(':')?.1.parse().ok()
            })
            .collect()
    }

    /// Silences, for good, the TCP connections established now from node
    /// `from` to port `port` of node `to`: their packets vanish both ways
    /// (as when a peer or a middlebox lost the connection's state without a
    /// reset), while connections opened later pass. Their local ports.
    pub fn silence_connections(&self, from: usize, to: usize, port: u16) -> Vec<u16> {
        let local_ports = self.established(from, to, port);
        // A policy rule per direction sends the connection's packets to a
        // table whose only route is a blackhole.
        for namespace in [from, to] {
            self.in_namespace(
                namespace,
                &[
                    "route",
                    "replace",
                    "blackhole",
                    "default",
                    "table",
                    SILENCED_TABLE,
                ],
            );
        }
        let port = port.to_string();
        for local_port in &local_ports {
            let local_port = local_port.to_string();
            let ends = [
                (from, to, local_port.as_str(), port.as_str()),
                (to, from, port.as_str(), local_port.as_str()),
            ];
            for (namespace, peer, source_port, destination_port) in ends {
                self.in_namespace(
                    namespace,
                    &[
                        "rule",
                        "add",
                        "to",
                        &self.address(peer),
                        "ipproto",
                        "tcp",
                        "sport",
                        source_port,
                        "dport",
                        destination_port,
                        "table",
                        SILENCED_TABLE,
                    ],
                );
            }
        }
        local_ports
    }

    /// `ip <arguments>` in node `index`'s namespace.
    fn in_namespace(&self, index: usize, arguments: &[&str]) {
        let namespace = self.namespace(index);
        let mut command = vec!["netns", "exec", &namespace, "ip"];
        command.extend(arguments);
        ip(&command);
    }

    /// Undoes every cut.
    pub fn heal(&mut self) {
        for (from, to) in std::mem::take(&mut self.cut) {
            self.route("del", from, to);
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end, and with it the other.
        for index in 0..self.nodes {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace(index)])
                .output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .output();
    }
}
