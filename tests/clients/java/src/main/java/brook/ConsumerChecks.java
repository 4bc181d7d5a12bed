package brook;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * The Java consumer: two members of a group (classic protocol) with the
 * range and the cooperative-sticky assignors, commitSync and commitAsync,
 * seek, offsetsForTimes, beginningOffsets and endOffsets.
 */
final class ConsumerChecks {
    private ConsumerChecks() {}

    static final int GROUP_PARTITIONS = 4;
    /** Records in the group topic, {@code index % 4} to partition {@code index % 4}. */
    static final int GROUP_RECORDS = 400;
    static final int TIMES_RECORDS = 10;
    /** Record i of the timestamp topic has this timestamp plus i seconds. */
    static final long TIMES_BASE = 1_700_000_000_000L;

    static void run(String bootstrap) throws Exception {
        try (Admin admin = Kafka.admin(bootstrap)) {
            Report.check("consumer.range", () -> group(admin, bootstrap, "range", RangeAssignor.class));
            Report.check("consumer.cooperative",
                    () -> group(admin, bootstrap, "cooperative", CooperativeStickyAssignor.class));
            Report.check("consumer.seek", () -> seek(admin, bootstrap));
            Report.check("consumer.times", () -> times(admin, bootstrap));
        }
    }

    static void produceToPartitions(String bootstrap, String topic, int records) throws Exception {
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of())) {
            for (int index = 0; index < records; index++) {
                producer.send(new ProducerRecord<>(topic, index % GROUP_PARTITIONS, "key-" + index, "value-" + index));
            }
            producer.flush();
        }
    }

    /** A member's partitions and what its rebalance listener saw. */
    static final class Member implements ConsumerRebalanceListener {
        final KafkaConsumer<String, String> consumer;
        final AtomicInteger revoked = new AtomicInteger();
        final AtomicInteger assignedCalls = new AtomicInteger();
        final Map<TopicPartition, Long> consumedTo = new HashMap<>();
        final Set<String> consumed = new HashSet<>();

        Member(String bootstrap, String group, Class<?> assignor) {
            consumer = Kafka.consumer(bootstrap, Map.of(
                    "group.id", group,
                    "partition.assignment.strategy", assignor.getName()));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            revoked.addAndGet(partitions.size());
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            assignedCalls.incrementAndGet();
        }

        void poll() {
            for (ConsumerRecord<String, String> record : consumer.poll(Kafka.POLL)) {
                consumed.add(record.partition() + "@" + record.offset());
            }
        }

        String assignment() {
            return consumer.assignment().stream().map(TopicPartition::partition).sorted()
                    .map(String::valueOf).collect(Collectors.joining(","));
        }
    }

    /**
     * The first member joins alone and gets every partition; the second
     * joins; once both have two, records are produced and both consume;
     * one commits with commitSync, the other with commitAsync. With the
     * cooperative assignor the first member gives up only the two partitions
     * that move (an eager rebalance revokes all four).
     */
    static void group(Admin admin, String bootstrap, String name, Class<?> assignor) throws Exception {
        String topic = "java-group-" + name;
        String group = "java-group-" + name;
        String prefix = "consumer." + name;
        Kafka.createTopic(admin, topic, GROUP_PARTITIONS, Map.of());
        Member first = new Member(bootstrap, group, assignor);
        Member second = new Member(bootstrap, group, assignor);
        try {
            first.consumer.subscribe(List.of(topic), first);
            Kafka.waitUntil("the first member's assignment", () -> {
                first.poll();
                return first.consumer.assignment().size() == GROUP_PARTITIONS;
            });
            Report.put(prefix + ".first_alone", first.assignment());
            int revokedBefore = first.revoked.get();
            second.consumer.subscribe(List.of(topic), second);
            Kafka.waitUntil("both members' assignments", () -> {
                first.poll();
                second.poll();
                return first.consumer.assignment().size() == 2 && second.consumer.assignment().size() == 2;
            });
            Report.put(prefix + ".assignments", new TreeSet<>(List.of(first.assignment(), second.assignment())));
            Report.put(prefix + ".first_revoked", first.revoked.get() - revokedBefore);
            produceToPartitions(bootstrap, topic, GROUP_RECORDS);
            Kafka.waitUntil("every record consumed", () -> {
                first.poll();
                second.poll();
                return first.consumed.size() + second.consumed.size() >= GROUP_RECORDS;
            });
            Set<String> all = new HashSet<>(first.consumed);
            all.addAll(second.consumed);
            Report.put(prefix + ".consumed", first.consumed.size() + second.consumed.size());
            Report.put(prefix + ".distinct", all.size());
            first.consumer.commitSync(Kafka.WAIT);
            AtomicReference<Exception> asyncResult = new AtomicReference<>();
            AtomicInteger asyncDone = new AtomicInteger();
            second.consumer.commitAsync((offsets, exception) -> {
                asyncResult.set(exception);
                asyncDone.incrementAndGet();
            });
            Kafka.waitUntil("the async commit", () -> {
                first.poll();
                second.poll();
                return asyncDone.get() > 0;
            });
            Report.put(prefix + ".commit_async_error", asyncResult.get() == null ? "none" : Report.describe(asyncResult.get()));
            Set<TopicPartition> partitions = new HashSet<>(Kafka.partitions(admin, topic));
            long committed = 0;
            for (OffsetAndMetadata offset : first.consumer.committed(partitions, Kafka.WAIT).values()) {
                committed += offset == null ? 0 : offset.offset();
            }
            Report.put(prefix + ".committed_total", committed);
        } finally {
            first.consumer.close();
            second.consumer.close();
        }
        Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(Kafka.WAIT.toSeconds(), TimeUnit.SECONDS);
        Report.put(prefix + ".admin_committed_total",
                offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
    }

    /**
     * seek, seekToBeginning and seekToEnd on an assigned partition; a
     * commitSync with metadata read back through committed().
     */
    static void seek(Admin admin, String bootstrap) throws Exception {
        String topic = "java-seek";
        Kafka.createTopic(admin, topic, GROUP_PARTITIONS, Map.of());
        produceToPartitions(bootstrap, topic, GROUP_RECORDS);
        TopicPartition partition = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> consumer =
                Kafka.consumer(bootstrap, Map.of("group.id", "java-seek", "max.poll.records", "1"))) {
            consumer.assign(List.of(partition));
            consumer.seek(partition, 7);
            List<ConsumerRecord<String, String>> polled = new ArrayList<>();
            Kafka.waitUntil("a record after seek", () -> {
                consumer.poll(Kafka.POLL).forEach(polled::add);
                return !polled.isEmpty();
            });
            // Record 4 * 7 + 1 is the eighth of partition 1.
            Report.put("consumer.seek.record", polled.get(0).offset() + ":" + polled.get(0).value());
            consumer.seekToEnd(List.of(partition));
            Report.put("consumer.seek.end_position", consumer.position(partition, Kafka.WAIT));
            consumer.seekToBeginning(List.of(partition));
            Report.put("consumer.seek.beginning_position", consumer.position(partition, Kafka.WAIT));
            consumer.commitSync(Map.of(partition, new OffsetAndMetadata(42, "brook-metadata")), Kafka.WAIT);
            OffsetAndMetadata committed = consumer.committed(Set.of(partition), Kafka.WAIT).get(partition);
            Report.put("consumer.seek.committed", committed.offset() + ":" + committed.metadata());
            Map<TopicPartition, Long> end = consumer.endOffsets(Kafka.partitions(admin, topic), Kafka.WAIT);
            Map<TopicPartition, Long> beginning = consumer.beginningOffsets(Kafka.partitions(admin, topic), Kafka.WAIT);
            Report.put("consumer.seek.end_offsets", end.values().stream().mapToLong(Long::longValue).sum());
            Report.put("consumer.seek.beginning_offsets", beginning.values().stream().mapToLong(Long::longValue).sum());
        }
    }

    /** offsetsForTimes on records with given timestamps, one second apart. */
    static void times(Admin admin, String bootstrap) throws Exception {
        String topic = "java-times";
        Kafka.createTopic(admin, topic, 1, Map.of());
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of())) {
            for (int index = 0; index < TIMES_RECORDS; index++) {
                producer.send(new ProducerRecord<>(topic, 0, TIMES_BASE + index * 1000L, null, "t" + index));
            }
            producer.flush();
        }
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = Kafka.consumer(bootstrap, Map.of())) {
            Map<TopicPartition, OffsetAndTimestamp> between =
                    consumer.offsetsForTimes(Map.of(partition, TIMES_BASE + 3500), Kafka.WAIT);
            OffsetAndTimestamp found = between.get(partition);
            Report.put("consumer.times.between", found.offset() + ":" + (found.timestamp() - TIMES_BASE));
            OffsetAndTimestamp exact = consumer.offsetsForTimes(Map.of(partition, TIMES_BASE + 5000), Kafka.WAIT)
                    .get(partition);
            Report.put("consumer.times.exact", exact.offset() + ":" + (exact.timestamp() - TIMES_BASE));
            OffsetAndTimestamp after = consumer.offsetsForTimes(
                    Map.of(partition, TIMES_BASE + 1_000_000), Kafka.WAIT).get(partition);
            Report.put("consumer.times.after_last", after == null ? "null" : after.toString());
            OffsetAndTimestamp before = consumer.offsetsForTimes(Map.of(partition, 0L), Kafka.WAIT).get(partition);
            Report.put("consumer.times.before_first", before.offset() + ":" + (before.timestamp() - TIMES_BASE));
        }
    }
}
