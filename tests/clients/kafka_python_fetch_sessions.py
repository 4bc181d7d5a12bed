"""kafka-python 3 (which opens incremental fetch sessions, KIP-227) against
brook serve: produce to every partition of a topic, consume it all back by
assignment, then produce to one partition only and consume that. Prints
`name value` lines: what was consumed, and what the consumer's fetcher logged
about its sessions (created; each incremental response's partition count).
Usage: python3 kafka_python_fetch_sessions.py HOST:PORT TOPIC PARTITIONS RECORDS"""
import logging
import re
import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

address, topic, partitions, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
STEP_TIMEOUT_S = 60


class SessionLog(logging.Handler):
    """Collects the fetcher's session lines (kafka.consumer.fetcher, DEBUG)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.created = 0
        self.incremental = []  # partitions carried by each incremental response

    def emit(self, record):
        message = record.getMessage()
        if "created a new incremental fetch session" in message:
            self.created += 1
        found = re.search(r"incremental fetch response for session \d+ with (\d+) response partitions", message)
        if found:
            self.incremental.append(int(found.group(1)))


sessions = SessionLog()
fetcher_log = logging.getLogger("kafka.consumer.fetcher")
fetcher_log.setLevel(logging.DEBUG)
fetcher_log.addHandler(sessions)

admin = KafkaAdminClient(bootstrap_servers=address)
admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
producer = KafkaProducer(bootstrap_servers=address, acks="all")


def produce(names, partition_of):
    for name in names:
        producer.send(topic, key=name.encode(), value=name.encode(), partition=partition_of(name))
    producer.flush()


def consume(consumer, expected):
    """Reads until every name in `expected` was seen; returns (seen once, seen again)."""
    seen, again = set(), 0
    deadline = time.time() + STEP_TIMEOUT_S
    while seen != expected and time.time() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            for message in batch:
                name = message.key.decode()
                if name in seen:
                    again += 1
                seen.add(name)
    return len(seen & expected), again


first = ["first-%d" % i for i in range(records)]
produce(first, lambda name: int(name.split("-")[1]) % partitions)
consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, fetch_max_wait_ms=100)
consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
consumer.seek_to_beginning()
once, again = consume(consumer, set(first))
print("kafka-python %s" % kafka.__version__)
print("first.consumed %d" % once)
print("first.again %d" % again)
print("first.sessions_created %d" % sessions.created)

sessions.incremental.clear()
second = ["second-%d" % i for i in range(records)]
produce(second, lambda name: 0)
once, again = consume(consumer, set(second))
print("second.consumed %d" % once)
print("second.again %d" % again)
print("second.incremental_responses %d" % len(sessions.incremental))
print("second.most_partitions_in_a_response %d" % max(sessions.incremental, default=-1))
print("sessions_created %d" % sessions.created)
consumer.close()
producer.close()
