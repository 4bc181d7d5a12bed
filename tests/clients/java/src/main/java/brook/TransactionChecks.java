package brook;

import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;

/**
 * The Java transactional producer: commit and abort seen by read_committed
 * and read_uncommitted consumers, fencing of a zombie, and an exactly-once
 * consume–transform–produce loop with sendOffsetsToTransaction (one of
 * its transactions aborted and redone, as an application does on error).
 */
final class TransactionChecks {
    private TransactionChecks() {}

    static final int PARTITIONS = 2;
    static final int COMMITTED = 50;
    static final int ABORTED = 30;
    /** Records the consume–transform–produce loop copies. */
    static final int LOOP_RECORDS = 300;

    static void run(String bootstrap) throws Exception {
        try (Admin admin = Kafka.admin(bootstrap)) {
            Report.check("txn.basic", () -> commitAndAbort(admin, bootstrap));
            Report.check("txn.fencing", () -> fencing(admin, bootstrap));
            Report.check("txn.loop", () -> loop(admin, bootstrap));
        }
    }

    static void commitAndAbort(Admin admin, String bootstrap) throws Exception {
        String topic = "java-txn";
        Kafka.createTopic(admin, topic, PARTITIONS, Map.of());
        try (KafkaProducer<String, String> producer =
                Kafka.producer(bootstrap, Map.of("transactional.id", "java-txn-basic"))) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int index = 0; index < COMMITTED; index++) {
                producer.send(new ProducerRecord<>(topic, "key-" + index, "committed-" + index));
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (int index = 0; index < ABORTED; index++) {
                producer.send(new ProducerRecord<>(topic, "key-" + index, "aborted-" + index));
            }
            producer.flush();
            producer.abortTransaction();
        }
        List<ConsumerRecord<String, String>> committed = Kafka.readAll(bootstrap, topic, "read_committed");
        Report.put("txn.basic.read_committed", committed.size());
        Report.put("txn.basic.read_committed_aborted",
                committed.stream().filter(r -> r.value().startsWith("aborted")).count());
        List<ConsumerRecord<String, String>> all = Kafka.readAll(bootstrap, topic, "read_uncommitted");
        Report.put("txn.basic.read_uncommitted", all.size());
        long end = 0;
        for (long offset : admin.listOffsets(Map.of(
                new TopicPartition(topic, 0), org.apache.kafka.clients.admin.OffsetSpec.latest(),
                new TopicPartition(topic, 1), org.apache.kafka.clients.admin.OffsetSpec.latest()))
                .all().get(Kafka.WAIT.toSeconds(), TimeUnit.SECONDS).values().stream()
                .map(info -> info.offset()).toList()) {
            end += offset;
        }
        // Each transaction leaves a marker on each partition it wrote to.
        Report.put("txn.basic.log_end_total", end);
    }

    /** A second producer with the same transactional.id fences the first. */
    static void fencing(Admin admin, String bootstrap) throws Exception {
        String topic = "java-txn-fencing";
        Kafka.createTopic(admin, topic, 1, Map.of());
        Map<String, String> settings = Map.of("transactional.id", "java-txn-fencing");
        try (KafkaProducer<String, String> zombie = Kafka.producer(bootstrap, settings);
                KafkaProducer<String, String> successor = Kafka.producer(bootstrap, settings)) {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, "zombie")).get();
            successor.initTransactions();
            String outcome;
            try {
                zombie.commitTransaction();
                outcome = "committed";
            } catch (ProducerFencedException fenced) {
                outcome = "ProducerFencedException";
            } catch (Exception other) {
                outcome = Report.describe(other);
            }
            Report.put("txn.fencing.zombie_commit", outcome);
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(topic, "successor"));
            successor.commitTransaction();
        }
        List<ConsumerRecord<String, String>> committed = Kafka.readAll(bootstrap, topic, "read_committed");
        Report.put("txn.fencing.read_committed", String.join(",", committed.stream().map(ConsumerRecord::value).toList()));
    }

    /**
     * Copies an input topic to an output topic, upper-cased, one
     * transaction per poll with the consumed offsets sent to the
     * transaction; the third transaction is aborted and its records
     * consumed again from the last committed offsets.
     */
    static void loop(Admin admin, String bootstrap) throws Exception {
        String input = "java-loop-in";
        String output = "java-loop-out";
        String group = "java-loop";
        Kafka.createTopic(admin, input, PARTITIONS, Map.of());
        Kafka.createTopic(admin, output, PARTITIONS, Map.of());
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of())) {
            for (int index = 0; index < LOOP_RECORDS; index++) {
                producer.send(new ProducerRecord<>(input, "key-" + index, "value-" + index));
            }
            producer.flush();
        }
        int transactions = 0;
        int aborted = 0;
        int abortedRecords = 0;
        Set<String> copied = new HashSet<>();
        try (KafkaConsumer<String, String> consumer = Kafka.consumer(bootstrap, Map.of(
                        "group.id", group, "isolation.level", "read_committed", "max.poll.records", "40"));
                KafkaProducer<String, String> producer =
                        Kafka.producer(bootstrap, Map.of("transactional.id", "java-loop"))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long deadline = System.nanoTime() + Kafka.WAIT.toNanos();
            while (copied.size() < LOOP_RECORDS) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("copied " + copied.size() + " of " + LOOP_RECORDS);
                }
                ConsumerRecords<String, String> records = consumer.poll(Kafka.POLL);
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> record : records) {
                    producer.send(new ProducerRecord<>(output, record.key(), record.value().toUpperCase()));
                    offsets.put(new TopicPartition(record.topic(), record.partition()),
                            new OffsetAndMetadata(record.offset() + 1));
                }
                // Sent before the offsets, so that the aborted transaction's
                // copies are in the log (abortTransaction drops unsent ones).
                producer.flush();
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                transactions++;
                if (transactions == 3) {
                    producer.abortTransaction();
                    aborted++;
                    abortedRecords += records.count();
                    rewindToCommitted(consumer);
                    continue;
                }
                producer.commitTransaction();
                records.forEach(r -> copied.add(r.value()));
            }
        }
        Report.put("txn.loop.transactions", transactions);
        Report.put("txn.loop.aborted", aborted);
        Report.put("txn.loop.aborted_records", abortedRecords);
        List<ConsumerRecord<String, String>> out = Kafka.readAll(bootstrap, output, "read_committed");
        Set<String> values = new HashSet<>();
        int wrong = 0;
        for (ConsumerRecord<String, String> record : out) {
            values.add(record.value());
            if (!record.value().equals("VALUE-" + record.key().substring("key-".length()))) {
                wrong++;
            }
        }
        Report.put("txn.loop.output", out.size());
        Report.put("txn.loop.output_distinct", values.size());
        Report.put("txn.loop.output_wrong", wrong);
        Report.put("txn.loop.output_uncommitted", Kafka.readAll(bootstrap, output, "read_uncommitted").size());
        long committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                .get(Kafka.WAIT.toSeconds(), TimeUnit.SECONDS).values().stream()
                .mapToLong(OffsetAndMetadata::offset).sum();
        Report.put("txn.loop.group_committed_total", committed);
    }

    static void rewindToCommitted(KafkaConsumer<String, String> consumer) {
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment(), Kafka.WAIT);
        for (TopicPartition partition : consumer.assignment()) {
            OffsetAndMetadata offset = committed.get(partition);
            if (offset == null) {
                consumer.seekToBeginning(List.of(partition));
            } else {
                consumer.seek(partition, offset.offset());
            }
        }
    }
}
