package brook;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Clients with the settings the checks share, and bounded helpers. */
final class Kafka {
    private Kafka() {}

    /** The longest any one wait (a future, reading to an offset) may take. */
    static final Duration WAIT = Duration.ofSeconds(60);
    static final Duration POLL = Duration.ofMillis(100);

    static Properties common(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("request.timeout.ms", "30000");
        props.put("default.api.timeout.ms", "60000");
        return props;
    }

    static Admin admin(String bootstrap) {
        return Admin.create(common(bootstrap));
    }

    /** A producer with the Java client's defaults (idempotent, acks=all) and {@code extra}. */
    static KafkaProducer<String, String> producer(String bootstrap, Map<String, String> extra) {
        Properties props = common(bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        props.putAll(extra);
        return new KafkaProducer<>(props);
    }

    /** A consumer that commits only when told, from the earliest offset when it has none. */
    static KafkaConsumer<String, String> consumer(String bootstrap, Map<String, String> extra) {
        Properties props = common(bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        props.putAll(extra);
        return new KafkaConsumer<>(props);
    }

    static void createTopic(Admin admin, String name, int partitions, Map<String, String> configs)
            throws Exception {
        NewTopic topic = new NewTopic(name, partitions, (short) 1).configs(configs);
        admin.createTopics(List.of(topic)).all().get(WAIT.toSeconds(), TimeUnit.SECONDS);
    }

    static List<TopicPartition> partitions(Admin admin, String topic) throws Exception {
        TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(WAIT.toSeconds(), TimeUnit.SECONDS).get(topic);
        List<TopicPartition> partitions = new ArrayList<>();
        description.partitions().forEach(p -> partitions.add(new TopicPartition(topic, p.partition())));
        return partitions;
    }

    /**
     * Every record of {@code topic} from the beginning to its end offsets as
     * this consumer's isolation level sees them (the last stable offset for
     * read_committed), read with assign (no group).
     */
    static List<ConsumerRecord<String, String>> readAll(
            String bootstrap, String topic, String isolation) throws Exception {
        try (Admin admin = admin(bootstrap);
                KafkaConsumer<String, String> consumer =
                        consumer(bootstrap, Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            List<TopicPartition> partitions = partitions(admin, topic);
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, WAIT);
            return readTo(consumer, end);
        }
    }

    /** Polls an assigned consumer until its position reaches {@code end} on every partition. */
    static List<ConsumerRecord<String, String>> readTo(
            KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> end) {
        List<ConsumerRecord<String, String>> records = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!reached(consumer, end)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("read " + records.size() + " records, not to " + end);
            }
            consumer.poll(POLL).forEach(records::add);
        }
        return records;
    }

    private static boolean reached(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> entry : end.entrySet()) {
            if (consumer.position(entry.getKey(), WAIT) < entry.getValue()) {
                return false;
            }
        }
        return true;
    }

    /** Records per partition. */
    static Map<Integer, Integer> countByPartition(List<ConsumerRecord<String, String>> records) {
        Map<Integer, Integer> counts = new HashMap<>();
        records.forEach(r -> counts.merge(r.partition(), 1, Integer::sum));
        return counts;
    }

    static void waitUntil(String what, java.util.function.BooleanSupplier condition) {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            try {
                Thread.sleep(POLL.toMillis());
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(interrupted);
            }
        }
    }
}
