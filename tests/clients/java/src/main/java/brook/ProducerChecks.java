package brook;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * The Java producer with its defaults (idempotent, acks=all): keys and
 * headers under every compression codec, and ordering with five requests in
 * flight per connection.
 */
final class ProducerChecks {
    private ProducerChecks() {}

    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    /** Records per codec, over {@link #CODEC_PARTITIONS} partitions. */
    static final int CODEC_RECORDS = 300;
    static final int CODEC_PARTITIONS = 3;
    /** Records sent in order to one partition with five requests in flight. */
    static final int ORDER_RECORDS = 5000;

    static void run(String bootstrap) throws Exception {
        try (Admin admin = Kafka.admin(bootstrap)) {
            for (String codec : CODECS) {
                Report.check("producer." + codec, () -> codec(admin, bootstrap, codec));
            }
            Report.check("producer.order", () -> order(admin, bootstrap));
        }
    }

    static String value(int index, String codec) {
        // Repetitive, so that every codec has something to compress.
        return "value-" + index + "-" + codec + "-" + "brook ".repeat(20);
    }

    /**
     * Sends keyed records with two headers, reads them back and counts those
     * whose key, value, headers, partition and offset are what the producer
     * was told (and whose partition is the default partitioner's).
     */
    static void codec(Admin admin, String bootstrap, String codec) throws Exception {
        String topic = "java-codec-" + codec;
        Kafka.createTopic(admin, topic, CODEC_PARTITIONS, Map.of());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer =
                Kafka.producer(bootstrap, Map.of("compression.type", codec, "linger.ms", "20"))) {
            for (int index = 0; index < CODEC_RECORDS; index++) {
                RecordHeaders headers = new RecordHeaders();
                headers.add("index", Integer.toString(index).getBytes(StandardCharsets.UTF_8));
                headers.add("codec", codec.getBytes(StandardCharsets.UTF_8));
                sent.add(producer.send(new ProducerRecord<>(
                        topic, null, "key-" + index, value(index, codec), headers)));
            }
            producer.flush();
        }
        List<RecordMetadata> acked = new ArrayList<>();
        for (Future<RecordMetadata> future : sent) {
            acked.add(future.get(Kafka.WAIT.toSeconds(), TimeUnit.SECONDS));
        }
        Report.put("producer." + codec + ".acked", acked.size());
        List<ConsumerRecord<String, String>> records = Kafka.readAll(bootstrap, topic, "read_uncommitted");
        Report.put("producer." + codec + ".records", records.size());
        int matching = 0;
        for (ConsumerRecord<String, String> record : records) {
            int index = Integer.parseInt(record.key().substring("key-".length()));
            RecordMetadata metadata = acked.get(index);
            Header indexHeader = record.headers().lastHeader("index");
            Header codecHeader = record.headers().lastHeader("codec");
            boolean matches = record.value().equals(value(index, codec))
                    && record.headers().toArray().length == 2
                    && indexHeader != null
                    && new String(indexHeader.value(), StandardCharsets.UTF_8).equals(Integer.toString(index))
                    && codecHeader != null
                    && new String(codecHeader.value(), StandardCharsets.UTF_8).equals(codec)
                    && record.partition() == metadata.partition()
                    && record.offset() == metadata.offset()
                    && record.partition() == defaultPartition(record.key(), CODEC_PARTITIONS);
            if (matches) {
                matching++;
            }
        }
        Report.put("producer." + codec + ".matching", matching);
    }

    /** Kafka's default partitioner for a keyed record: murmur2 of the key bytes. */
    static int defaultPartition(String key, int partitions) {
        byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
        return org.apache.kafka.common.utils.Utils.toPositive(
                org.apache.kafka.common.utils.Utils.murmur2(bytes)) % partitions;
    }

    /**
     * Many small batches to one partition with
     * max.in.flight.requests.per.connection=5 (the idempotent producer keeps
     * order across them): record i must be at offset i.
     */
    static void order(Admin admin, String bootstrap) throws Exception {
        String topic = "java-order";
        Kafka.createTopic(admin, topic, 1, Map.of());
        Map<String, String> settings = Map.of(
                "max.in.flight.requests.per.connection", "5",
                "linger.ms", "0",
                "batch.size", "512");
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, settings)) {
            for (int index = 0; index < ORDER_RECORDS; index++) {
                sent.add(producer.send(new ProducerRecord<>(topic, 0, null, Integer.toString(index))));
            }
            producer.flush();
        }
        int ackedInOrder = 0;
        for (int index = 0; index < sent.size(); index++) {
            if (sent.get(index).get(Kafka.WAIT.toSeconds(), TimeUnit.SECONDS).offset() == index) {
                ackedInOrder++;
            }
        }
        Report.put("producer.order.acked_in_order", ackedInOrder);
        List<ConsumerRecord<String, String>> records = Kafka.readAll(bootstrap, topic, "read_uncommitted");
        Report.put("producer.order.records", records.size());
        int inOrder = 0;
        for (ConsumerRecord<String, String> record : records) {
            if (Long.parseLong(record.value()) == record.offset()) {
                inOrder++;
            }
        }
        Report.put("producer.order.in_order", inOrder);
    }
}
