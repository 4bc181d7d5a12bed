"""kafka-python consumer groups against brook serve. Prints `name value`
lines for tests/tests/e2e/client_groups.rs to check; exits non-zero (with the
reason on stderr) when a step does not finish in time.

Usage:
  python3 kafka_python_group.py HOST:PORT members TOPIC GROUP RECORDS
      Creates TOPIC (4 partitions), starts two members of GROUP (one thread
      each, manual commits), waits until they share the partitions, produces
      RECORDS records, consumes them, describes the group with the admin
      client while both are in it, commits and closes them; then produces
      RECORDS more and a third member of GROUP consumes those.
  python3 kafka_python_group.py HOST:PORT offsets TOPIC GROUP
      What the admin client and a consumer's committed() say of GROUP's
      offsets on TOPIC (created by someone else, e.g. kcat).
KAFKA_PYTHON_LOG=FILE logs every request and response the clients send and
get (kafka-python's debug log) to FILE."""
import logging
import os
import sys
import threading
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

PARTITIONS = 4
# Every wait gives up after this long: the test fails rather than hangs.
WAIT_SECONDS = 60
# Members keep polling this long after the last record, so a duplicate or
# a late rebalance is seen.
LINGER_SECONDS = 1.5


def fail(reason):
    sys.stderr.write("kafka_python_group.py: %s\n" % reason)
    sys.exit(1)


def wait_until(what, condition):
    deadline = time.time() + WAIT_SECONDS
    while not condition():
        if time.time() > deadline:
            fail("not within %ds: %s" % (WAIT_SECONDS, what))
        time.sleep(0.05)


def emit(name, value):
    print("%s %s" % (name, value), flush=True)


def offsets_text(offsets):
    """{partition: offset} as `0:100 1:100 ...`."""
    return " ".join("%d:%d" % (p, offsets[p]) for p in sorted(offsets)) or "none"


def consumer(address, group, client_id):
    return KafkaConsumer(bootstrap_servers=address, group_id=group, client_id=client_id,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         session_timeout_ms=10000, heartbeat_interval_ms=500)


class Member(threading.Thread):
    """One group member polling in its own thread: commits its position
    when asked, closes (leaves the group) when stopped."""

    def __init__(self, address, group, topic, name):
        super().__init__(daemon=True)
        self.name = name
        self.consumer = consumer(address, group, name)
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        self.deliveries = []  # (partition, offset, key)
        self.assignment = set()
        self.rebalances = 0
        self.commit_requested = threading.Event()
        self.committed = threading.Event()
        self.stopping = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.stopping.is_set():
                batches = self.consumer.poll(timeout_ms=100)
                with self.lock:
                    assignment = {tp.partition for tp in self.consumer.assignment()}
                    if assignment != self.assignment:
                        self.rebalances += 1
                        self.assignment = assignment
                    for records in batches.values():
                        for record in records:
                            self.deliveries.append((record.partition, record.offset, record.key.decode()))
                # The consumer is not thread-safe: its own thread commits.
                if self.commit_requested.is_set() and not self.committed.is_set():
                    self.consumer.commit()
                    self.committed.set()
            self.consumer.close()
        except Exception as error:  # reported by the main thread
            self.error = repr(error)
            self.committed.set()

    def snapshot(self):
        with self.lock:
            return set(self.assignment), list(self.deliveries), self.rebalances


def produce(address, topic, records, tag):
    """RECORDS records spread evenly over the partitions; returns
    key -> (partition, offset) as acknowledged."""
    producer = KafkaProducer(bootstrap_servers=address, acks="all")
    futures = {}
    for i in range(records):
        key = "%s-%d" % (tag, i)
        futures[key] = producer.send(topic, key=key.encode(), value=key.encode(), partition=i % PARTITIONS)
    producer.flush()
    delivered = {key: (f.get(timeout=WAIT_SECONDS).partition, f.get().offset) for key, f in futures.items()}
    producer.close()
    return delivered


def check_deliveries(label, deliveries, delivered):
    """Counts what the members got against what was produced."""
    positions = [(p, o) for p, o, _ in deliveries]
    misplaced = sum(1 for p, o, key in deliveries if delivered.get(key) != (p, o))
    emit("%s.records" % label, len(deliveries))
    emit("%s.distinct" % label, len(set(positions)))
    emit("%s.misplaced" % label, misplaced)


def describe(admin, group, label):
    """The admin client's view: ListGroups, DescribeGroups, OffsetFetch."""
    listed = admin.list_consumer_groups()
    emit("%s.listed" % label, " ".join(sorted("%s/%s" % g for g in listed)))
    [description] = admin.describe_consumer_groups([group])
    emit("%s.state" % label, description.state)
    emit("%s.protocol" % label, "%s/%s" % (description.protocol_type, description.protocol))
    for member in sorted(description.members, key=lambda m: m.client_id):
        assigned = []
        if member.member_assignment:
            for topic, partitions in member.member_assignment.assignment:
                assigned += ["%s/%d" % (topic, p) for p in sorted(partitions)]
        topics = member.member_metadata.subscription if member.member_metadata else []
        emit("%s.member" % label, "%s subscribed=%s assigned=%s id=%s" % (
            member.client_id, ",".join(topics), ",".join(assigned) or "none",
            "yes" if member.member_id else "no"))
    offsets = admin.list_consumer_group_offsets(group)
    emit("%s.offsets" % label, " ".join(sorted("%s/%d:%d" % (tp.topic, tp.partition, meta.offset)
                                                for tp, meta in offsets.items())) or "none")


def members(address, topic, group, records):
    admin = KafkaAdminClient(bootstrap_servers=address)
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    pair = [Member(address, group, topic, "python-%d" % i) for i in range(2)]
    for member in pair:
        member.start()

    def shared():
        assignments = [m.snapshot()[0] for m in pair]
        return all(len(a) == PARTITIONS // 2 for a in assignments) and not (assignments[0] & assignments[1])
    wait_until("the two members share the partitions", shared)
    assignments = [m.snapshot()[0] for m in pair]
    rebalances_before = [m.snapshot()[2] for m in pair]
    for member, assignment in zip(pair, assignments):
        emit("first.assigned", "%s %s" % (member.name, ",".join(map(str, sorted(assignment)))))

    delivered = produce(address, topic, records, "first")
    wait_until("every record of the first batch", lambda: len(
        {(p, o) for m in pair for p, o, _ in m.snapshot()[1]}) >= records)
    time.sleep(LINGER_SECONDS)
    # Before any member leaves: the first to leave makes the other rejoin.
    for member, assignment, before in zip(pair, assignments, rebalances_before):
        _, got, rebalances = member.snapshot()
        emit("first.unowned", "%s %d" % (member.name, sum(1 for p, _, _ in got if p not in assignment)))
        emit("first.rebalances", "%s %d" % (member.name, rebalances - before))
    describe(admin, group, "active")
    # Both commit before either leaves: the one left would otherwise be
    # given the leaver's partitions while its own were not yet committed,
    # and start them again from the earliest offset (no broker does better:
    # with manual commits, what was not committed is consumed again).
    for member in pair:
        member.commit_requested.set()
    for member in pair:
        if not member.committed.wait(WAIT_SECONDS) or member.error:
            fail("%s did not commit: %s" % (member.name, member.error or "timed out"))
    for member in pair:
        member.stopping.set()
    for member in pair:
        member.join(WAIT_SECONDS)
        if member.is_alive() or member.error:
            fail("%s did not close: %s" % (member.name, member.error or "still running"))
    # Everything they got, until they closed.
    for member in pair:
        emit("first.got", "%s %d" % (member.name, len(member.snapshot()[1])))
    check_deliveries("first", [d for m in pair for d in m.snapshot()[1]], delivered)
    describe(admin, group, "closed")

    # A new member of the group starts where the pair committed.
    later = produce(address, topic, records, "second")
    third = consumer(address, group, "python-2")
    committed = {p: third.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    emit("second.committed", offsets_text({p: -1 if o is None else o for p, o in committed.items()}))
    third.subscribe([topic])
    got = []
    deadline = time.time() + WAIT_SECONDS
    linger_until = None
    while linger_until is None or time.time() < linger_until:
        for records_of in third.poll(timeout_ms=100).values():
            got += [(r.partition, r.offset, r.key.decode()) for r in records_of]
        if linger_until is None and len({(p, o) for p, o, _ in got}) >= records:
            linger_until = time.time() + LINGER_SECONDS
        if time.time() > deadline:
            fail("not within %ds: the second batch (%d records)" % (WAIT_SECONDS, len(got)))
    firsts = {}
    for p, o, _ in got:
        firsts[p] = min(o, firsts.get(p, o))
    emit("second.first_offsets", offsets_text(firsts))
    check_deliveries("second", got, later)
    third.commit()
    third.close()
    emit("second.offsets", offsets_text({tp.partition: m.offset for tp, m in
                                        admin.list_consumer_group_offsets(group).items() if tp.topic == topic}))
    admin.close()


def offsets(address, topic, group):
    admin = KafkaAdminClient(bootstrap_servers=address)
    describe(admin, group, "admin")
    admin.close()
    reader = KafkaConsumer(bootstrap_servers=address, group_id=group, enable_auto_commit=False)
    partitions = reader.partitions_for_topic(topic) or set()
    committed = {p: reader.committed(TopicPartition(topic, p)) for p in partitions}
    emit("consumer.committed", offsets_text({p: -1 if o is None else o for p, o in committed.items()}))
    reader.close()


def main():
    if os.environ.get("KAFKA_PYTHON_LOG"):
        logging.basicConfig(filename=os.environ["KAFKA_PYTHON_LOG"], level=logging.DEBUG,
                            format="%(asctime)s %(threadName)s %(name)s %(message)s")
    emit("kafka-python", kafka.__version__)
    address, mode = sys.argv[1], sys.argv[2]
    if mode == "members":
        members(address, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "offsets":
        offsets(address, sys.argv[3], sys.argv[4])
    else:
        fail("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
