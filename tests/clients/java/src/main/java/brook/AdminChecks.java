package brook;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/** The Java AdminClient's calls, one check each, on topics of their own. */
final class AdminChecks {
    private AdminChecks() {}

    static final String TOPIC = "java-admin";
    /** Record i of the offsets topic has this timestamp plus {@link #TIMESTAMPS}[i]. */
    static final long BASE = 1_700_000_000_000L;
    /** Out of order on purpose: the largest is at offset 6. */
    static final long[] TIMESTAMPS = {0, 10, 20, 30, 40, 50, 90, 60, 70, 80};
    static final String GROUP = "java-admin-group";
    static final String TRANSACTIONAL_ID = "java-admin-txn";

    static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(Kafka.WAIT.toSeconds(), TimeUnit.SECONDS);
    }

    static void run(String bootstrap) throws Exception {
        try (Admin admin = Kafka.admin(bootstrap)) {
            Report.check("admin.topics", () -> topics(admin));
            Report.check("admin.partitions", () -> partitions(admin));
            Report.check("admin.configs", () -> configs(admin));
            Report.check("admin.offsets", () -> offsets(admin, bootstrap));
            Report.check("admin.delete_records", () -> deleteRecords(admin));
            Report.check("admin.cluster", () -> cluster(admin));
            Report.check("admin.groups", () -> groups(admin, bootstrap));
            Report.check("admin.log_dirs", () -> logDirs(admin));
            Report.check("admin.producers", () -> producers(admin, bootstrap));
            Report.check("admin.transactions", () -> transactions(admin, bootstrap));
            Report.check("admin.delete_topics", () -> deleteTopics(admin));
        }
    }

    static void topics(Admin admin) throws Exception {
        Kafka.createTopic(admin, TOPIC, 3, Map.of("retention.ms", "3600000"));
        try {
            Kafka.createTopic(admin, TOPIC, 3, Map.of());
            Report.put("admin.topics.create_again", "created");
        } catch (Exception error) {
            Report.put("admin.topics.create_again", Report.describe(error).split(":")[0]);
        }
        admin.createTopics(List.of(new NewTopic("java-admin-validate", 2, (short) 1)),
                new CreateTopicsOptions().validateOnly(true)).all().get();
        Set<String> names = get(admin.listTopics().names());
        Report.put("admin.topics.listed", names.contains(TOPIC));
        Report.put("admin.topics.validate_only_listed", names.contains("java-admin-validate"));
        TopicDescription description = get(admin.describeTopics(List.of(TOPIC)).allTopicNames()).get(TOPIC);
        Report.put("admin.topics.partitions", description.partitions().size());
        Report.put("admin.topics.internal", description.isInternal());
        Report.put("admin.topics.has_id", !description.topicId().equals(org.apache.kafka.common.Uuid.ZERO_UUID));
        Report.put("admin.topics.leaders", description.partitions().stream()
                .map(p -> p.leader().id() + "/" + p.replicas().size() + "/" + p.isr().size())
                .collect(Collectors.joining(",")));
    }

    static void partitions(Admin admin) throws Exception {
        get(admin.createPartitions(Map.of(TOPIC, NewPartitions.increaseTo(5))).all());
        Report.put("admin.partitions.after", Kafka.partitions(admin, TOPIC).size());
        try {
            get(admin.createPartitions(Map.of(TOPIC, NewPartitions.increaseTo(2))).all());
            Report.put("admin.partitions.decrease", "accepted");
        } catch (Exception error) {
            Report.put("admin.partitions.decrease", Report.describe(error).split(":")[0]);
        }
    }

    static ConfigEntry topicConfig(Admin admin, String name) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, TOPIC);
        Config config = get(admin.describeConfigs(List.of(resource)).all()).get(resource);
        return config.get(name);
    }

    static void configs(Admin admin) throws Exception {
        ConfigEntry retention = topicConfig(admin, "retention.ms");
        Report.put("admin.configs.retention", retention.value() + ":" + retention.source());
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, TOPIC);
        Collection<AlterConfigOp> ops = List.of(
                new AlterConfigOp(new ConfigEntry("segment.bytes", "1048576"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE));
        get(admin.incrementalAlterConfigs(Map.of(resource, ops)).all());
        ConfigEntry segment = topicConfig(admin, "segment.bytes");
        Report.put("admin.configs.segment_after", segment.value() + ":" + segment.source());
        retention = topicConfig(admin, "retention.ms");
        Report.put("admin.configs.retention_after", retention.value() + ":" + retention.source());
        int brokerId = get(admin.describeCluster().nodes()).iterator().next().id();
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(brokerId));
        Config brokerConfig = get(admin.describeConfigs(List.of(broker)).all()).get(broker);
        ConfigEntry partitions = brokerConfig.get("num.partitions");
        Report.put("admin.configs.broker_num_partitions", partitions == null ? "missing" : partitions.value());
    }

    static void offsets(Admin admin, String bootstrap) throws Exception {
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of())) {
            for (int index = 0; index < TIMESTAMPS.length; index++) {
                producer.send(new ProducerRecord<>(TOPIC, 0, BASE + TIMESTAMPS[index], null, "r" + index));
            }
            producer.flush();
        }
        TopicPartition partition = new TopicPartition(TOPIC, 0);
        Map<String, OffsetSpec> specs = new TreeMap<>(Map.of(
                "earliest", OffsetSpec.earliest(),
                "latest", OffsetSpec.latest(),
                "timestamp", OffsetSpec.forTimestamp(BASE + 55),
                "max_timestamp", OffsetSpec.maxTimestamp()));
        for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
            ListOffsetsResult.ListOffsetsResultInfo info =
                    get(admin.listOffsets(Map.of(partition, spec.getValue())).partitionResult(partition));
            long timestamp = info.timestamp() < 0 ? info.timestamp() : info.timestamp() - BASE;
            Report.put("admin.offsets." + spec.getKey(), info.offset() + ":" + timestamp);
        }
    }

    static void deleteRecords(Admin admin) throws Exception {
        TopicPartition partition = new TopicPartition(TOPIC, 0);
        long low = get(admin.deleteRecords(Map.of(partition, RecordsToDelete.beforeOffset(3)))
                .lowWatermarks().get(partition)).lowWatermark();
        Report.put("admin.delete_records.low_watermark", low);
        long earliest = get(admin.listOffsets(Map.of(partition, OffsetSpec.earliest()))
                .partitionResult(partition)).offset();
        Report.put("admin.delete_records.earliest", earliest);
    }

    static void cluster(Admin admin) throws Exception {
        DescribeClusterResult cluster = admin.describeCluster();
        Report.put("admin.cluster.nodes", get(cluster.nodes()).size());
        Report.put("admin.cluster.controller", get(cluster.controller()).id());
        String clusterId = get(cluster.clusterId());
        Report.put("admin.cluster.has_id", clusterId != null && !clusterId.isEmpty());
    }

    @SuppressWarnings("deprecation")
    static void groups(Admin admin, String bootstrap) throws Exception {
        TopicPartition partition = new TopicPartition(TOPIC, 1);
        try (KafkaConsumer<String, String> consumer = Kafka.consumer(bootstrap, Map.of("group.id", GROUP))) {
            consumer.assign(List.of(partition));
            consumer.commitSync(Map.of(partition, new OffsetAndMetadata(0)), Kafka.WAIT);
        }
        Collection<ConsumerGroupListing> listed = get(admin.listConsumerGroups().all());
        Report.put("admin.groups.listed", listed.stream().anyMatch(g -> g.groupId().equals(GROUP)));
        ConsumerGroupDescription description =
                get(admin.describeConsumerGroups(List.of(GROUP)).describedGroups().get(GROUP));
        Report.put("admin.groups.state", description.groupState());
        Report.put("admin.groups.members", description.members().size());
        get(admin.alterConsumerGroupOffsets(GROUP, Map.of(partition, new OffsetAndMetadata(0, "moved"))).all());
        OffsetAndMetadata offset = get(admin.listConsumerGroupOffsets(GROUP).partitionsToOffsetAndMetadata())
                .get(partition);
        Report.put("admin.groups.altered", offset.offset() + ":" + offset.metadata());
        get(admin.deleteConsumerGroups(List.of(GROUP)).all());
        listed = get(admin.listConsumerGroups().all());
        Report.put("admin.groups.listed_after_delete", listed.stream().anyMatch(g -> g.groupId().equals(GROUP)));
    }

    static void logDirs(Admin admin) throws Exception {
        int broker = get(admin.describeCluster().nodes()).iterator().next().id();
        Map<String, LogDirDescription> dirs = get(admin.describeLogDirs(List.of(broker)).allDescriptions()).get(broker);
        Report.put("admin.log_dirs.dirs", dirs.size());
        LogDirDescription dir = dirs.values().iterator().next();
        ReplicaInfo replica = dir.replicaInfos().get(new TopicPartition(TOPIC, 0));
        Report.put("admin.log_dirs.replica_nonempty", replica != null && replica.size() > 0);
        Report.put("admin.log_dirs.dir_error", dir.error() == null ? "none" : dir.error().getClass().getSimpleName());
    }

    static void producers(Admin admin, String bootstrap) throws Exception {
        String topic = "java-admin-producers";
        Kafka.createTopic(admin, topic, 1, Map.of());
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> producer = Kafka.producer(bootstrap, Map.of())) {
            for (int index = 0; index < 7; index++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "p" + index)).get();
            }
        }
        List<ProducerState> states = get(admin.describeProducers(List.of(partition)).partitionResult(partition))
                .activeProducers();
        Report.put("admin.producers.count", states.size());
        ProducerState state = states.get(0);
        Report.put("admin.producers.state", state.producerEpoch() + ":" + state.lastSequence()
                + ":" + state.currentTransactionStartOffset());
    }

    /** One committed and one open transaction, seen by listTransactions and describeTransactions. */
    static void transactions(Admin admin, String bootstrap) throws Exception {
        String topic = "java-admin-txn";
        Kafka.createTopic(admin, topic, 1, Map.of());
        try (KafkaProducer<String, String> producer =
                Kafka.producer(bootstrap, Map.of("transactional.id", TRANSACTIONAL_ID))) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "committed"));
            producer.commitTransaction();
            describeTransaction(admin, "committed", "CompleteCommit");
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "open")).get();
            describeTransaction(admin, "open", "Ongoing");
            TopicPartition partition = new TopicPartition(topic, 0);
            ProducerState state = get(admin.describeProducers(List.of(partition)).partitionResult(partition))
                    .activeProducers().get(0);
            Report.put("admin.transactions.open_start_offset", state.currentTransactionStartOffset());
            producer.abortTransaction();
            describeTransaction(admin, "aborted", "CompleteAbort");
        }
    }

    /**
     * The transaction's state as listTransactions and describeTransactions
     * show it, once it is {@code settled}: commitTransaction and
     * abortTransaction return at Prepare*, before the markers are written.
     */
    static void describeTransaction(Admin admin, String stage, String settled) throws Exception {
        Kafka.waitUntil("transaction state " + settled, () -> settled.equals(listedState(admin)));
        Report.put("admin.transactions." + stage + ".listed", listedState(admin));
        TransactionDescription description =
                get(admin.describeTransactions(List.of(TRANSACTIONAL_ID)).description(TRANSACTIONAL_ID));
        Report.put("admin.transactions." + stage + ".described", description.state() + ":"
                + description.topicPartitions().size() + ":" + description.transactionTimeoutMs());
    }

    static String listedState(Admin admin) {
        try {
            Collection<TransactionListing> listed = get(admin.listTransactions().all());
            return listed.stream().filter(t -> t.transactionalId().equals(TRANSACTIONAL_ID))
                    .map(t -> t.state().toString()).findFirst().orElse("missing");
        } catch (Exception error) {
            return Report.describe(error);
        }
    }

    /** Deleted topics leave the metadata once the deletion completes (in Kafka, a moment later). */
    static void deleteTopics(Admin admin) throws Exception {
        get(admin.deleteTopics(List.of(TOPIC)).all());
        Kafka.waitUntil("the topic to go", () -> {
            try {
                return !get(admin.listTopics().names()).contains(TOPIC);
            } catch (Exception error) {
                return false;
            }
        });
        Report.put("admin.delete_topics.listed", get(admin.listTopics().names()).contains(TOPIC));
        try {
            get(admin.describeTopics(List.of(TOPIC)).allTopicNames());
            Report.put("admin.delete_topics.describe", "found");
        } catch (Exception error) {
            Report.put("admin.delete_topics.describe", Report.describe(error).split(":")[0]);
        }
    }
}
