package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	adminTopicA = "franz-admin-a"
	adminTopicB = "franz-admin-b"
	// adminTopicC is only validated (CreateTopics validate_only).
	adminTopicC     = "franz-admin-c"
	adminGroup      = "franz-admin-group"
	adminRecordsA   = 30
	adminRecordsB   = 20
	adminPartitions = 3
	// adminPartitionsB is topic B's partition count after CreatePartitions.
	adminPartitionsB = 4
	// adminDeleteBelow is where DeleteRecords moves topic A's partition 0's
	// log start.
	adminDeleteBelow = 4
)

// adminScenario: kadm over one broker's admin APIs, each answer reported.
func adminScenario(ctx context.Context, addr string) {
	client := newClient(addr)
	admin := kadm.NewClient(client)
	defer admin.Close()

	adminCreate(ctx, admin)
	node := adminMetadata(ctx, admin, addr)
	adminCluster(ctx, client, node)
	adminConfigs(ctx, admin)
	adminOffsets(ctx, admin, addr)
	adminGroups(ctx, admin, addr)
	adminDelete(ctx, client, admin)
}

// errorName is "ok", or Kafka's name of the error (TOPIC_ALREADY_EXISTS).
func errorName(err error) string {
	if err == nil {
		return "ok"
	}
	var kafkaError *kerr.Error
	if errors.As(err, &kafkaError) {
		return kafkaError.Message
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

func adminCreate(ctx context.Context, admin *kadm.Client) {
	configs := map[string]*string{
		"retention.ms":  kadm.StringPtr("3600000"),
		"segment.bytes": kadm.StringPtr("1048576"),
	}
	created, err := admin.CreateTopics(ctx, adminPartitions, 1, configs, adminTopicA)
	check(err, "create topics")
	a, err := created.On(adminTopicA, nil)
	check(err, "create "+adminTopicA)
	report("admin.create.a", errorName(a.Err))
	report("admin.create.a.partitions", a.NumPartitions)
	report("admin.create.a.replication_factor", a.ReplicationFactor)
	report("admin.create.a.has_id", a.ID != kadm.TopicID{})
	retention := a.Configs["retention.ms"]
	report("admin.create.a.retention.ms", fmt.Sprintf("%s/%s", retention.MaybeValue(), retention.Source))

	created, err = admin.CreateTopics(ctx, adminPartitions, 1, nil, adminTopicB)
	check(err, "create topics")
	report("admin.create.b", errorName(created.Error()))
	again, err := admin.CreateTopics(ctx, adminPartitions, 1, nil, adminTopicA)
	check(err, "create topics again")
	report("admin.create.again", errorName(again.Error()))
	validated, err := admin.ValidateCreateTopics(ctx, adminPartitions, 1, nil, adminTopicC)
	check(err, "validate create topics")
	report("admin.validate.c", errorName(validated.Error()))

	resized, err := admin.UpdatePartitions(ctx, adminPartitionsB, adminTopicB)
	check(err, "create partitions")
	report("admin.create_partitions.b", errorName(resized.Error()))

	listed, err := admin.ListTopics(ctx)
	check(err, "list topics")
	report("admin.list", strings.Join(listed.Names(), ","))
}

// adminMetadata reports the brokers and the topics' partitions; returns
// the broker's node id.
func adminMetadata(ctx context.Context, admin *kadm.Client, addr string) int32 {
	metadata, err := admin.Metadata(ctx, adminTopicA, adminTopicB)
	check(err, "metadata")
	report("admin.metadata.brokers", len(metadata.Brokers))
	if len(metadata.Brokers) != 1 {
		fail("brokers: %v", metadata.Brokers)
	}
	broker := metadata.Brokers[0]
	report("admin.metadata.broker", net.JoinHostPort(broker.Host, fmt.Sprint(broker.Port)) == addr)
	report("admin.metadata.controller_is_broker", metadata.Controller == broker.NodeID)
	report("admin.metadata.has_cluster_id", metadata.Cluster != "")
	for _, topic := range []string{adminTopicA, adminTopicB} {
		detail := metadata.Topics[topic]
		check(detail.Err, "metadata of "+topic)
		placed := 0
		for _, partition := range detail.Partitions {
			if partition.Err == nil && partition.Leader == broker.NodeID &&
				slices.Equal(partition.Replicas, []int32{broker.NodeID}) &&
				slices.Equal(partition.ISR, []int32{broker.NodeID}) {
				placed++
			}
		}
		name := "admin.metadata." + strings.TrimPrefix(topic, "franz-admin-")
		report(name+".partitions", len(detail.Partitions))
		report(name+".led_by_broker", placed)
		report(name+".internal", detail.IsInternal)
	}
	return broker.NodeID
}

// adminCluster sends DescribeCluster (kadm has no call for it) and compares
// it with Metadata's view.
func adminCluster(ctx context.Context, client *kgo.Client, node int32) {
	request := kmsg.NewPtrDescribeClusterRequest()
	response, err := request.RequestWith(ctx, client)
	check(err, "describe cluster")
	report("admin.cluster.error", errorName(kerr.ErrorForCode(response.ErrorCode)))
	report("admin.cluster.has_cluster_id", response.ClusterID != "")
	report("admin.cluster.controller_is_broker", response.ControllerID == node)
	report("admin.cluster.brokers", len(response.Brokers))
}

func adminConfigs(ctx context.Context, admin *kadm.Client) {
	describeConfig := func(name, topic, key string) {
		configs, err := admin.DescribeTopicConfigs(ctx, topic)
		check(err, "describe configs of "+topic)
		resource, err := configs.On(topic, nil)
		check(err, "describe configs of "+topic)
		check(resource.Err, "describe configs of "+topic)
		for _, config := range resource.Configs {
			if config.Key == key {
				report(name, fmt.Sprintf("%s/%s", config.MaybeValue(), config.Source))
				return
			}
		}
		report(name, "missing")
	}
	describeConfig("admin.config.a.retention.ms", adminTopicA, "retention.ms")
	describeConfig("admin.config.a.segment.bytes", adminTopicA, "segment.bytes")
	describeConfig("admin.config.b.retention.ms", adminTopicB, "retention.ms")

	altered, err := admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")},
		{Op: kadm.DeleteConfig, Name: "segment.bytes"},
	}, adminTopicA)
	check(err, "alter configs")
	alteredA, err := altered.On(adminTopicA, nil)
	check(err, "alter configs of "+adminTopicA)
	report("admin.alter.a", errorName(alteredA.Err))
	describeConfig("admin.altered.a.retention.ms", adminTopicA, "retention.ms")
	describeConfig("admin.altered.a.segment.bytes", adminTopicA, "segment.bytes")
}

// adminOffsets produces to both topics (record i to partition i % the
// topic's partitions), lists their start and end offsets and the first
// after a time, describes the log dirs, and deletes the records of one
// partition below an offset.
func adminOffsets(ctx context.Context, admin *kadm.Client, addr string) {
	producer := newClient(addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	var records []*kgo.Record
	for index := 0; index < adminRecordsA; index++ {
		records = append(records, &kgo.Record{Topic: adminTopicA, Partition: int32(index % adminPartitions),
			Value: []byte(fmt.Sprint(index))})
	}
	for index := 0; index < adminRecordsB; index++ {
		records = append(records, &kgo.Record{Topic: adminTopicB, Partition: int32(index % adminPartitionsB),
			Value: []byte(fmt.Sprint(index))})
	}
	check(producer.ProduceSync(ctx, records...).FirstErr(), "produce")
	report("admin.end.a", partitionOffsets(endOffsets(ctx, admin, adminTopicA)))
	report("admin.end.b", partitionOffsets(endOffsets(ctx, admin, adminTopicB)))
	started, err := admin.ListStartOffsets(ctx, adminTopicA)
	check(err, "list start offsets")
	check(started.Error(), "start offsets")
	start := map[int32]int64{}
	started.Each(func(offset kadm.ListedOffset) { start[offset.Partition] = offset.Offset })
	report("admin.start.a", partitionOffsets(start))
	after, err := admin.ListOffsetsAfterMilli(ctx, 0, adminTopicA)
	check(err, "list offsets after 0 ms")
	check(after.Error(), "offsets after 0 ms")
	first := map[int32]int64{}
	after.Each(func(offset kadm.ListedOffset) { first[offset.Partition] = offset.Offset })
	report("admin.after_0ms.a", partitionOffsets(first))

	var logDirTopics kadm.TopicsSet
	for partition := int32(0); partition < adminPartitions; partition++ {
		logDirTopics.Add(adminTopicA, partition)
	}
	described, err := admin.DescribeAllLogDirs(ctx, logDirTopics)
	check(err, "describe log dirs")
	stored := 0
	described.Each(func(dir kadm.DescribedLogDir) {
		check(dir.Err, "log dir "+dir.Dir)
		dir.Topics.Each(func(partition kadm.DescribedLogDirPartition) {
			if partition.Topic == adminTopicA && partition.Size > 0 {
				stored++
			}
		})
	})
	report("admin.log_dirs.a.partitions_with_data", stored)

	var deleteBelow kadm.Offsets
	deleteBelow.AddOffset(adminTopicA, 0, adminDeleteBelow, -1)
	deleted, err := admin.DeleteRecords(ctx, deleteBelow)
	check(err, "delete records")
	response, ok := deleted[adminTopicA][0]
	if !ok {
		fail("delete records: no answer for %s[0]", adminTopicA)
	}
	report("admin.delete_records.a.0", fmt.Sprintf("%s/%d", errorName(response.Err), response.LowWatermark))
	started, err = admin.ListStartOffsets(ctx, adminTopicA)
	check(err, "list start offsets")
	check(started.Error(), "start offsets")
	started.Each(func(offset kadm.ListedOffset) { start[offset.Partition] = offset.Offset })
	report("admin.start_after_delete_records.a", partitionOffsets(start))
}

// adminGroups: a member of a group consumes topic A (from its log start:
// DeleteRecords moved partition 0's) and commits; the group
// is described, listed, its offsets and lag read while the member runs and
// once it left, then it is deleted.
func adminGroups(ctx context.Context, admin *kadm.Client, addr string) {
	consumer := newClient(addr,
		kgo.ClientID("franz-admin"),
		kgo.ConsumerGroup(adminGroup),
		kgo.ConsumeTopics(adminTopicA),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	// DeleteRecords took adminDeleteBelow records off partition 0.
	want := adminRecordsA - adminDeleteBelow
	consumed := 0
	for consumed < want {
		if ctx.Err() != nil {
			fail("group consumed %d of %d records", consumed, want)
		}
		fetches := consumer.PollFetches(ctx)
		fetches.EachError(func(topic string, partition int32, err error) {
			fail("fetch %s[%d]: %v", topic, partition, err)
		})
		consumed += fetches.NumRecords()
	}
	check(consumer.CommitUncommittedOffsets(ctx), "commit")

	describeAdminGroup(ctx, admin, "admin.group")
	listed, err := admin.ListGroups(ctx)
	check(err, "list groups")
	report("admin.groups.listed", slices.Contains(listed.Groups(), adminGroup))
	offsets, err := admin.FetchOffsets(ctx, adminGroup)
	check(err, "fetch offsets")
	check(offsets.Error(), "fetch offsets")
	committed := map[int32]int64{}
	offsets.Each(func(offset kadm.OffsetResponse) { committed[offset.Partition] = offset.At })
	report("admin.group.committed", partitionOffsets(committed))
	lags, err := admin.Lag(ctx, adminGroup)
	check(err, "lag")
	lag := lags[adminGroup]
	check(lag.DescribeErr, "lag: describe")
	check(lag.FetchErr, "lag: fetch")
	report("admin.group.lag", lag.Lag.Total())
	report("admin.group.consumed", consumed)

	consumer.Close()
	describeAdminGroup(ctx, admin, "admin.group.left")
	var forget kadm.TopicsSet
	forget.Add(adminTopicA, 0)
	forgotten, err := admin.DeleteOffsets(ctx, adminGroup, forget)
	check(err, "delete offsets")
	forgottenError, ok := forgotten.Lookup(adminTopicA, 0)
	report("admin.group.delete_offsets", ok && forgottenError == nil)
	offsets, err = admin.FetchOffsets(ctx, adminGroup)
	check(err, "fetch offsets")
	check(offsets.Error(), "fetch offsets")
	committed = map[int32]int64{}
	offsets.Each(func(offset kadm.OffsetResponse) { committed[offset.Partition] = offset.At })
	report("admin.group.committed_after_delete_offsets", partitionOffsets(committed))
	deleted, err := admin.DeleteGroups(ctx, adminGroup)
	check(err, "delete groups")
	report("admin.group.delete", errorName(deleted.Error()))
	listed, err = admin.ListGroups(ctx)
	check(err, "list groups")
	report("admin.groups.listed_after_delete", slices.Contains(listed.Groups(), adminGroup))
}

func describeAdminGroup(ctx context.Context, admin *kadm.Client, prefix string) {
	described, err := admin.DescribeGroups(ctx, adminGroup)
	check(err, "describe groups")
	group, err := described.On(adminGroup, nil)
	check(err, "describe "+adminGroup)
	check(group.Err, "describe "+adminGroup)
	report(prefix+".state", group.State)
	report(prefix+".protocol_type", group.ProtocolType)
	report(prefix+".protocol", group.Protocol)
	report(prefix+".members", len(group.Members))
	for _, member := range group.Members {
		assigned := 0
		if assignment, ok := member.Assigned.AsConsumer(); ok {
			for _, topic := range assignment.Topics {
				assigned += len(topic.Partitions)
			}
		}
		report(prefix+".member", fmt.Sprintf("%s/%d", member.ClientID, assigned))
	}
}

// adminDelete deletes both topics; what is left is read with Metadata
// requests of its own (kadm's listings answer from the client's metadata
// cache, which may still hold the topics for a few seconds).
func adminDelete(ctx context.Context, client *kgo.Client, admin *kadm.Client) {
	deleted, err := admin.DeleteTopics(ctx, adminTopicA, adminTopicB)
	check(err, "delete topics")
	for _, topic := range []string{adminTopicA, adminTopicB} {
		response, err := deleted.On(topic, nil)
		check(err, "delete "+topic)
		report("admin.delete."+strings.TrimPrefix(topic, "franz-admin-"), errorName(response.Err))
	}
	again, err := admin.DeleteTopics(ctx, adminTopicA)
	check(err, "delete topics again")
	report("admin.delete.again", errorName(again.Error()))

	all := kmsg.NewPtrMetadataRequest()
	listed, err := all.RequestWith(ctx, client)
	check(err, "metadata")
	var names []string
	for _, topic := range listed.Topics {
		if topic.Topic != nil && !topic.IsInternal {
			names = append(names, *topic.Topic)
		}
	}
	slices.Sort(names)
	report("admin.list_after_delete", strings.Join(names, ","))
	one := kmsg.NewPtrMetadataRequest()
	requested := kmsg.NewMetadataRequestTopic()
	requested.Topic = kmsg.StringPtr(adminTopicA)
	one.Topics = append(one.Topics, requested)
	one.AllowAutoTopicCreation = false
	described, err := one.RequestWith(ctx, client)
	check(err, "metadata")
	if len(described.Topics) != 1 {
		fail("metadata of %s: %d topics", adminTopicA, len(described.Topics))
	}
	report("admin.metadata_after_delete", errorName(kerr.ErrorForCode(described.Topics[0].ErrorCode)))
}
