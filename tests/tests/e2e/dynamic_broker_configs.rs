//! Dynamic broker configs (KIP-226) set as Kafka operators set them, with
//! `kafka-configs` (Kafka 4.1.2's ConfigCommand), on a one-node broker and
//! on a three-node cluster: applied live (a batch over the new
//! `message.max.bytes` is refused, and taken again once the broker's own
//! setting raises it), kept over a restart and a controller failover,
//! described with Kafka's sources; a read-only setting refused with Kafka's
//! error.

use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::clients::run;
use brook_tests::cluster::Cluster;
use brook_tests::java::{Spawned, java};
use brook_tests::raw;

use crate::cluster_replication::{create_replicated, leaders};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const CONFIGS: &str = "kafka.admin.ConfigCommand";
const TOPIC: &str = "dynamic";
/// A batch of one record this large: over 2000 bytes, under 100000.
const RECORD_BYTES: usize = 5_000;
const MESSAGE_TOO_LARGE: i16 = 10;

/// `kafka-configs --bootstrap-server <bootstrap> args…`; its stdout
/// (`broker`'s log shown if it fails).
fn configs(bootstrap: &str, args: &[&str], broker: &Broker) -> String {
    let mut command = java(CONFIGS);
    command.args(["--bootstrap-server", bootstrap]).args(args);
    let output = run(&mut command, None, broker);
    eprintln!("$ kafka-configs {}\n{output}", args.join(" "));
    output
}

/// As [`configs`] for a command that must fail: what it printed.
fn refused(bootstrap: &str, args: &[&str]) -> String {
    let mut command = java(CONFIGS);
    command.args(["--bootstrap-server", bootstrap]).args(args);
    let mut tool = Spawned::start(&mut command);
    let status = tool.wait_status(Duration::from_secs(60));
    let output = tool.output();
    assert!(
        status.is_some_and(|status| !status.success()),
        "kafka-configs {args:?} did not fail:\n{output}"
    );
    output
}

/// The error code of a one-record batch of [`RECORD_BYTES`] produced to
/// partition 0 at `address` (acks=all).
fn produce_error(address: &str) -> i16 {
    let mut stream = raw::connect_to(address);
    let batch = raw::filler_batch(1, RECORD_BYTES);
    raw::produce_batch(&mut stream, TOPIC, 0, -1, batch).error_code
}

/// IncrementalAlterConfigs SET `key=value` on BROKER resource `resource`
/// at `address`: the resource's error code and message.
fn alter_broker_raw(
    address: &str,
    resource: &str,
    key: &str,
    value: &str,
) -> (i16, Option<String>) {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(resource.to_owned()))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(key.to_owned()))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(value.to_owned()))),
            ]),
    ]);
    let response: IncrementalAlterConfigsResponse = raw::exchange(
        &mut raw::connect_to(address),
        ApiKey::IncrementalAlterConfigs,
        1,
        &request,
    );
    let answer = &response.responses[0];
    (
        answer.error_code,
        answer
            .error_message
            .as_ref()
            .map(|message| message.to_string()),
    )
}

/// The describe line of `name` in kafka-configs' output.
fn line<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in:\n{output}"))
}

const DEFAULT: &[&str] = &["--entity-type", "brokers", "--entity-default"];

#[test]
fn kafka_configs_changes_a_broker_live_and_it_outlives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(BROOK, dir.path(), 1, &[]);
    raw::create_topic(&mut raw::connect(&broker), TOPIC, 1);
    let address = broker.address.clone();
    assert_eq!(produce_error(&address), 0);

    let alter = |entity: &[&str], config: &str| {
        let args: Vec<&str> = ["--alter"]
            .iter()
            .chain(entity)
            .chain(&["--add-config", config])
            .copied()
            .collect();
        configs(&address, &args, &broker)
    };
    let done = alter(DEFAULT, "message.max.bytes=2000");
    assert!(
        done.contains("Completed updating default config for brokers in the cluster"),
        "{done}"
    );
    assert_eq!(produce_error(&address), MESSAGE_TOO_LARGE);
    let this_broker = ["--entity-type", "brokers", "--entity-name", "0"];
    let done = alter(&this_broker, "message.max.bytes=100000");
    assert!(
        done.contains("Completed updating config for broker 0"),
        "{done}"
    );
    assert_eq!(produce_error(&address), 0, "the broker's own setting wins");
    // A security setting (librdkafka's admin test sets this one): kept,
    // as Kafka keeps it, with no listener to use it.
    alter(&this_broker, "sasl.kerberos.min.time.before.relogin=58000");

    let described = configs(
        &address,
        &[&["--describe"][..], &this_broker].concat(),
        &broker,
    );
    assert_eq!(
        line(&described, "message.max.bytes"),
        "message.max.bytes=100000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=100000, \
         DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}"
    );
    let defaults = configs(&address, &[&["--describe"][..], DEFAULT].concat(), &broker);
    assert!(
        defaults.contains("Default configs for brokers in the cluster are:"),
        "{defaults}"
    );
    assert_eq!(
        line(&defaults, "message.max.bytes"),
        "message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, \
         DEFAULT_CONFIG:message.max.bytes=1048588}"
    );
    let all = configs(
        &address,
        &[&["--describe", "--all"][..], &this_broker].concat(),
        &broker,
    );
    assert!(all.contains("All configs for broker 0 are:"), "{all}");
    assert_eq!(
        line(&all, "num.partitions"),
        "num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}"
    );
    for identity in ["log.dirs", "advertised.listeners"] {
        assert!(
            line(&all, identity).contains("STATIC_BROKER_CONFIG"),
            "{all}"
        );
    }

    // Only the broker named may change its own configs (Kafka's rule).
    assert_eq!(
        alter_broker_raw(&address, "7", "message.max.bytes", "1"),
        (
            42,
            Some("Unexpected broker id, expected 0, but received 7".to_owned())
        )
    );

    // Read-only in Kafka: refused with Kafka's message, nothing changed.
    let error = refused(
        &address,
        &[
            &["--alter"][..],
            &this_broker,
            &["--add-config", "num.partitions=3"],
        ]
        .concat(),
    );
    assert!(
        error.contains("Cannot update these configs dynamically: Set(num.partitions)"),
        "{error}"
    );

    assert!(broker.stop(), "a clean stop");
    broker.restart();
    assert_eq!(produce_error(&address), 0, "kept over a restart");
    configs(
        &address,
        &[
            &["--alter"][..],
            &this_broker,
            &["--delete-config", "message.max.bytes"],
        ]
        .concat(),
        &broker,
    );
    assert_eq!(
        produce_error(&address),
        MESSAGE_TOO_LARGE,
        "the default again"
    );
}

/// Waits (at most 30 s) until `check` holds.
fn eventually(what: &str, cluster: &Cluster, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "{what}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_clusters_dynamic_configs_live_in_its_metadata_log() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    create_replicated(&cluster, TOPIC, 1);
    let leader = leaders(&cluster, 0, TOPIC).unwrap()[&0] as usize;
    let other = (leader + 1) % 3;
    let addresses: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| node.address.clone())
        .collect();
    let at = |index: usize| addresses[index].clone();

    // The cluster-wide default, set through a broker that does not lead.
    configs(
        &at(other),
        &[
            &["--alter"][..],
            DEFAULT,
            &["--add-config", "message.max.bytes=2000"],
        ]
        .concat(),
        &cluster.nodes[other],
    );
    assert_eq!(produce_error(&at(leader)), MESSAGE_TOO_LARGE);
    // The leader's own (Kafka's admin client asks the broker it names).
    let leader_id = leader.to_string();
    let own = [
        "--entity-type",
        "brokers",
        "--entity-name",
        leader_id.as_str(),
    ];
    configs(
        &at(leader),
        &[
            &["--alter"][..],
            &own,
            &["--add-config", "message.max.bytes=100000"],
        ]
        .concat(),
        &cluster.nodes[leader],
    );
    assert_eq!(produce_error(&at(leader)), 0);

    // The active controller dies and comes back: the configs are in the
    // metadata log, so every broker still runs with them.
    let controller = cluster.quorum_leader(0).expect("a controller");
    cluster.nodes[controller].kill();
    let survivor = (controller + 1) % 3;
    cluster.wait_for_new_controller(survivor, controller);
    cluster.nodes[controller].restart();
    for index in 0..3 {
        eventually(
            &format!("node {index} runs with the default"),
            &cluster,
            || {
                let described = configs(
                    &at(index),
                    &[&["--describe"][..], DEFAULT].concat(),
                    &cluster.nodes[index],
                );
                described.contains("message.max.bytes=2000")
            },
        );
    }
    eventually("the partition has a leader", &cluster, || {
        leaders(&cluster, survivor, TOPIC).is_some_and(|leaders| leaders.contains_key(&0))
    });
    let now_leading = leaders(&cluster, survivor, TOPIC).unwrap()[&0] as usize;
    let expected = match now_leading == leader {
        true => 0,
        false => MESSAGE_TOO_LARGE,
    };
    eventually("the leader applies its configs", &cluster, || {
        produce_error(&at(now_leading)) == expected
    });
}
