package brook;

import java.nio.charset.StandardCharsets;
import java.util.Map;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * {@code format-produce <bootstrap>}: the records whose segment files the
 * format test reads with both Kafka's DumpLogSegments and {@code brook log
 * dump}, written the same way to Brook and to Apache Kafka. Record i of
 * topic T has key {@code key-i}, value {@link #value}, headers
 * {@code index=i} and {@code topic=T}, timestamp {@link #BASE} + i.
 */
final class FormatRecords {
    private FormatRecords() {}

    static final long BASE = 1_700_000_000_000L;
    /** Records per codec topic, sent in {@link #ROUNDS} flushed rounds (several batches). */
    static final int CODEC_RECORDS = 200;
    static final int ROUNDS = 5;
    /** Uncompressed records of {@link #ROLL_VALUE_BYTES}, enough to roll a 1 MiB segment. */
    static final int ROLL_RECORDS = 3000;
    static final int ROLL_VALUE_BYTES = 400;

    static String value(int index, String topic) {
        String value = "value-" + index + "-" + topic + "-" + "brook ".repeat(10);
        if (topic.equals("format-roll")) {
            value = value + "x".repeat(ROLL_VALUE_BYTES - value.length());
        }
        return value;
    }

    static ProducerRecord<String, String> record(String topic, int index) {
        RecordHeaders headers = new RecordHeaders();
        headers.add("index", Integer.toString(index).getBytes(StandardCharsets.UTF_8));
        headers.add("topic", topic.getBytes(StandardCharsets.UTF_8));
        return new ProducerRecord<>(topic, 0, BASE + index, "key-" + index, value(index, topic), headers);
    }

    static void produce(String bootstrap) throws Exception {
        // One index entry per batch, so that the indexes have entries to check.
        Map<String, String> configs = Map.of("index.interval.bytes", "1");
        try (Admin admin = Kafka.admin(bootstrap)) {
            for (String codec : ProducerChecks.CODECS) {
                String topic = "format-" + codec;
                Kafka.createTopic(admin, topic, 1, configs);
                try (KafkaProducer<String, String> producer =
                        Kafka.producer(bootstrap, Map.of("compression.type", codec, "linger.ms", "20"))) {
                    for (int index = 0; index < CODEC_RECORDS; index++) {
                        producer.send(record(topic, index));
                        if ((index + 1) % (CODEC_RECORDS / ROUNDS) == 0) {
                            producer.flush();
                        }
                    }
                }
                Report.put("format." + topic + ".records", CODEC_RECORDS);
            }
            Kafka.createTopic(admin, "format-roll", 1,
                    Map.of("index.interval.bytes", "4096", "segment.bytes", "1048576"));
            try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of("linger.ms", "5"))) {
                for (int index = 0; index < ROLL_RECORDS; index++) {
                    producer.send(record("format-roll", index));
                }
            }
            Report.put("format.format-roll.records", ROLL_RECORDS);
            Kafka.createTopic(admin, "format-txn", 1, configs);
            transactional(bootstrap);
        }
    }

    /**
     * Records 0–19 committed, 20–29 aborted, 30–34 committed: data batches,
     * COMMIT and ABORT markers, and an aborted transaction in the .txnindex.
     */
    static void transactional(String bootstrap) throws Exception {
        String topic = "format-txn";
        try (KafkaProducer<String, String> producer =
                Kafka.producer(bootstrap, Map.of("transactional.id", "format-txn"))) {
            producer.initTransactions();
            int[][] transactions = {{0, 20}, {20, 30}, {30, 35}};
            for (int[] range : transactions) {
                producer.beginTransaction();
                for (int index = range[0]; index < range[1]; index++) {
                    producer.send(record(topic, index));
                }
                producer.flush();
                if (range[0] == 20) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
            }
        }
        Report.put("format.format-txn.records", 35);
    }
}
