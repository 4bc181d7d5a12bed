#!/usr/bin/env bash
# Runs one Apache Kafka broker in the foreground: a single node in KRaft
# mode (combined broker and controller), from the jars that tests/run puts
# in target/test-clients/java/lib (Kafka 4.1.2, pinned in
# tests/clients/java/pom.xml). Used by the end-to-end tests
# (tests/src/kafka.rs) and meant for running Kafka beside Brook in
# benchmarks.
#
#   bench/kafka/start-kafka.sh DATA_DIR PORT CONTROLLER_PORT [key=value ...]
#
# Listens on 127.0.0.1:PORT (clients) and 127.0.0.1:CONTROLLER_PORT (the
# KRaft quorum of one); the log directory is DATA_DIR/logs, formatted on the
# first start; every key=value is appended to the broker's properties
# (later ones win). Kafka logs to stdout; "Kafka Server started" says it is
# ready. SIGTERM stops it cleanly. KAFKA_HEAP sets the heap (default 512m),
# KAFKA_LIB another directory of jars.
#
# A node of a larger cluster: KAFKA_NODE_ID (default 1) and KAFKA_VOTERS
# (every voter as id@host:port, comma-separated; default this node alone),
# with the same KAFKA_CLUSTER_ID on every node (default: a new one), and
# the internal topics' replication factors given as key=value.
#
# Brook's benchmark (`brook bench run ... --kafka`) starts it pinned like
# `brook serve` and with KAFKA_HEAP=1g, the heap of Kafka's own
# kafka-server-start.sh.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 DATA_DIR PORT CONTROLLER_PORT [key=value ...]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
lib=${KAFKA_LIB:-$here/../../target/test-clients/java/lib}
if [ ! -f "$lib/kafka_2.13-4.1.2.jar" ]; then
    echo "$0: Kafka's jars are missing in $lib: run tests/run (it installs them)" >&2
    exit 1
fi
data=$(mkdir -p "$1" && cd "$1" && pwd)
port=$2
controller_port=$3
shift 3

properties=$data/server.properties
cat >"$properties" <<PROPERTIES
process.roles=broker,controller
node.id=${KAFKA_NODE_ID:-1}
controller.quorum.voters=${KAFKA_VOTERS:-${KAFKA_NODE_ID:-1}@127.0.0.1:$controller_port}
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPERTIES
for setting in "$@"; do
    echo "$setting" >>"$properties"
done

java_options=(
    "-Xmx${KAFKA_HEAP:-512m}" "-Xms${KAFKA_HEAP:-512m}"
    # The garbage collector settings of Kafka's kafka-run-class.sh.
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$here/log4j2.properties"
    -cp "$lib/*"
)
if [ ! -f "$data/logs/meta.properties" ]; then
    # A cluster id is 16 random bytes in URL-safe base64 without padding;
    # like Kafka's Uuid.randomUuid, draw again when it starts with '-', which
    # the tool's argument parser would take for an option (1 start in 64).
    cluster_id=${KAFKA_CLUSTER_ID:--}
    while [ "${cluster_id:0:1}" = - ]; do
        cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    done
    java "${java_options[@]}" kafka.tools.StorageTool format \
        --cluster-id "$cluster_id" --config "$properties" --ignore-formatted
fi
exec java "${java_options[@]}" kafka.Kafka "$properties"
