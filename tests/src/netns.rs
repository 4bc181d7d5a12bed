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
                let mut inside_namespace = vec!["netns", "exec", &namespace, "ip"];
                inside_namespace.extend(arguments);
                ip(&inside_namespace);
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

    /// Node `index`'s namespace file, for [`brook_bench::broker::BrokerLaunch`].
    pub fn namespace_file(&self, index: usize) -> PathBuf {
        PathBuf::from("/run/netns").join(self.namespace(index))
    }

    fn route(&self, action: &str, from: usize, to: usize) {
        ip(&[
            "netns",
            "exec",
            &self.namespace(from),
            "ip",
            "route",
            action,
            "blackhole",
            &format!("{}/32", self.address(to)),
        ]);
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
