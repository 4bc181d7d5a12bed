#!/usr/bin/env bash
# Kafka's own producer benchmark (kafka-producer-perf-test, from the jars
# tests/run installs) against any Kafka-compatible broker: a second client,
# independent of Brook's, for the figures in bench/RESULTS.md.
#
#   bench/kafka/producer-perf.sh BOOTSTRAP TOPIC RECORDS [producer-prop ...]
#
# Creates TOPIC (8 partitions, replication factor 1, or PARTITIONS and
# REPLICATION_FACTOR from the environment), then sends RECORDS records of
# 1024 bytes unthrottled with acks=1, 1 MiB batches and linger.ms=1 (the
# shape of `brook bench run throughput`); more producer properties
# (key=value) follow and win. PERF_CPU pins the client (default: cpu 1,
# where `brook bench` puts its load generator).
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 BOOTSTRAP TOPIC RECORDS [producer-prop ...]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
lib=${KAFKA_LIB:-$here/../../target/test-clients/java/lib}
bootstrap=$1
topic=$2
records=$3
shift 3
java_run=(taskset -c "${PERF_CPU:-1}" java -Xmx1g -cp "$lib/*")
"${java_run[@]}" org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" \
    --create --if-not-exists --topic "$topic" \
    --partitions "${PARTITIONS:-8}" --replication-factor "${REPLICATION_FACTOR:-1}"
exec "${java_run[@]}" org.apache.kafka.tools.ProducerPerformance \
    --topic "$topic" --num-records "$records" --record-size 1024 --throughput -1 \
    --producer-props bootstrap.servers="$bootstrap" acks=1 batch.size=1048576 \
    linger.ms=1 "$@"
