package brook;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams word count with processing.guarantee=exactly_once_v2:
 * lines are split into words, regrouped by word (a repartition topic) and
 * counted in a state store (its changelog topic); every count update goes
 * to the output topic (the record cache is off). The Rust test writes the
 * input, runs the application, kills it with SIGKILL while it works, runs
 * it again until it has counted everything, then verifies that the
 * committed output holds, for each word, exactly the counts 1, 2, … n.
 */
final class WordCount {
    private WordCount() {}

    static final String INPUT = "words-in";
    static final String OUTPUT = "words-out";
    static final int INPUT_PARTITIONS = 2;
    static final int WORDS = 20;
    static final int WORDS_PER_LINE = 5;
    /** Slows the application down so that the kill lands in the middle of the work. */
    static final long SLEEP_PER_LINE_MS = 2;
    /** Output records between two progress lines. */
    static final int PROGRESS_EVERY = 250;

    static List<String> line(int index) {
        List<String> words = new ArrayList<>();
        for (int word = 0; word < WORDS_PER_LINE; word++) {
            words.add("w" + ((index * 7 + word * 3) % WORDS));
        }
        return words;
    }

    static Map<String, Long> expected(int lines) {
        Map<String, Long> counts = new TreeMap<>();
        for (int index = 0; index < lines; index++) {
            line(index).forEach(word -> counts.merge(word, 1L, Long::sum));
        }
        return counts;
    }

    /** {@code streams-input <bootstrap> <lines>}: the input topic and its lines. */
    static void input(String bootstrap, String[] args) throws Exception {
        int lines = Integer.parseInt(args[0]);
        try (Admin admin = Kafka.admin(bootstrap)) {
            Kafka.createTopic(admin, INPUT, INPUT_PARTITIONS, Map.of());
            Kafka.createTopic(admin, OUTPUT, INPUT_PARTITIONS, Map.of());
        }
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of())) {
            for (int index = 0; index < lines; index++) {
                producer.send(new ProducerRecord<>(INPUT, "line-" + index, String.join(" ", line(index))));
            }
            producer.flush();
        }
        Report.put("streams.input_lines", lines);
    }

    /**
     * {@code streams-run <bootstrap> <application id> <state dir> <lines>}:
     * runs until every word's count has reached its final value, then closes
     * (committing) and prints {@code streams.done}; prints
     * {@code streams.progress N} as it goes.
     */
    static void runApplication(String bootstrap, String[] args) throws Exception {
        String applicationId = args[0];
        String stateDir = args[1];
        Map<String, Long> expected = expected(Integer.parseInt(args[2]));
        Map<String, Long> seen = new ConcurrentHashMap<>();
        AtomicLong updates = new AtomicLong();
        CountDownLatch complete = new CountDownLatch(1);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(INPUT, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(value -> {
                    sleep(SLEEP_PER_LINE_MS);
                    return Arrays.asList(value.split(" "));
                })
                .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.as("word-counts"))
                .toStream()
                .peek((word, count) -> {
                    seen.merge(word, count, Math::max);
                    if (updates.incrementAndGet() % PROGRESS_EVERY == 0) {
                        Report.put("streams.progress", updates.get());
                    }
                    if (seen.equals(expected)) {
                        complete.countDown();
                    }
                })
                .to(OUTPUT, Produced.with(Serdes.String(), Serdes.Long()));

        try (KafkaStreams streams = new KafkaStreams(builder.build(), properties(bootstrap, applicationId, stateDir))) {
            streams.setUncaughtExceptionHandler(error -> {
                Report.put("streams.error", Report.describe(error));
                error.printStackTrace();
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                        .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            if (!complete.await(Kafka.WAIT.toSeconds() * 2, TimeUnit.SECONDS)) {
                Report.put("streams.error", "incomplete after " + updates.get() + " updates: " + seen);
                return;
            }
            streams.close(Duration.ofSeconds(60));
        }
        Report.put("streams.updates", updates.get());
        Report.put("streams.done", "true");
    }

    static Properties properties(String bootstrap, String applicationId, String stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        // The killed instance's member would otherwise hold the rebalance of
        // the restarted one for Kafka's default 45 s.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), "6000");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), "1000");
        return props;
    }

    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * {@code streams-verify <bootstrap> <lines>}: the committed output,
     * word by word. A word is exact when its counts, in offset order, are
     * 1, 2, … up to its number of occurrences in the input.
     */
    static void verify(String bootstrap, String[] args) throws Exception {
        Map<String, Long> expected = expected(Integer.parseInt(args[0]));
        Map<String, List<Long>> counts = new TreeMap<>();
        Properties props = Kafka.common(bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        long total = 0;
        try (Admin admin = Kafka.admin(bootstrap);
                KafkaConsumer<String, Long> consumer =
                        new KafkaConsumer<>(props, new StringDeserializer(), new LongDeserializer())) {
            List<TopicPartition> partitions = Kafka.partitions(admin, OUTPUT);
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, Kafka.WAIT);
            long deadline = System.nanoTime() + Kafka.WAIT.toNanos();
            while (!reached(consumer, end)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("output not read to " + end);
                }
                for (ConsumerRecord<String, Long> record : consumer.poll(Kafka.POLL)) {
                    counts.computeIfAbsent(record.key(), word -> new ArrayList<>()).add(record.value());
                    total++;
                }
            }
        }
        long exact = 0;
        Map<String, List<Long>> wrong = new HashMap<>();
        for (Map.Entry<String, Long> word : expected.entrySet()) {
            List<Long> got = counts.getOrDefault(word.getKey(), List.of());
            boolean isExact = got.size() == word.getValue();
            for (int index = 0; isExact && index < got.size(); index++) {
                isExact = got.get(index) == index + 1;
            }
            if (isExact) {
                exact++;
            } else {
                wrong.put(word.getKey(), got);
            }
        }
        Report.put("streams.output_records", total);
        Report.put("streams.expected_records", expected.values().stream().mapToLong(Long::longValue).sum());
        Report.put("streams.words", counts.size());
        Report.put("streams.words_exact", exact);
        if (!wrong.isEmpty()) {
            Report.put("streams.wrong", wrong);
        }
    }

    private static boolean reached(KafkaConsumer<String, Long> consumer, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> entry : end.entrySet()) {
            if (consumer.position(entry.getKey(), Kafka.WAIT) < entry.getValue()) {
                return false;
            }
        }
        return true;
    }
}
