package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	produceTopic      = "franz-produce"
	producePartitions = 4
	// produceRecords are split evenly over the rounds of produceCodecs.
	produceRecords = 1000
)

// produceCodecs: one producer per round, each franz-go's idempotent default
// (acks=all, a producer id, sequences) with one batch codec; the first is
// franz-go's own default (snappy).
var produceCodecs = []struct {
	name  string
	codec []kgo.CompressionCodec
}{
	{"default", nil},
	{"none", []kgo.CompressionCodec{kgo.NoCompression()}},
	{"gzip", []kgo.CompressionCodec{kgo.GzipCompression()}},
	{"lz4", []kgo.CompressionCodec{kgo.Lz4Compression()}},
	{"zstd", []kgo.CompressionCodec{kgo.ZstdCompression()}},
}

// acked is where the broker said a record went.
type acked struct {
	partition int32
	offset    int64
}

// produceScenario: keyed records with headers, produced asynchronously in
// rounds (one producer and codec each) with franz-go's default partitioner
// (murmur2 on the key, as Kafka's), then read back from the start: each
// record exactly once, where its acknowledgement said, with its key, value
// and headers, and in produce order within each partition.
func produceScenario(ctx context.Context, addr string) {
	admin := kadm.NewClient(newClient(addr))
	defer admin.Close()
	createTopics(ctx, admin, producePartitions, produceTopic)

	acks := make([]acked, produceRecords)
	errors := 0
	perRound := produceRecords / len(produceCodecs)
	for round, codec := range produceCodecs {
		opts := []kgo.Opt{kgo.DefaultProduceTopic(produceTopic)}
		if codec.codec != nil {
			opts = append(opts, kgo.ProducerBatchCompression(codec.codec...))
		}
		producer := newClient(addr, opts...)
		errors += produceRound(ctx, producer, round*perRound, (round+1)*perRound, acks)
		id, _, err := producer.ProducerID(ctx)
		check(err, "producer id")
		report("produce.idempotent."+codec.name, id >= 0)
		producer.Close()
	}
	report("produce.errors", errors)
	checkAcks(acks)
	end := endOffsets(ctx, admin, produceTopic)
	total := int64(0)
	for _, offset := range end {
		total += offset
	}
	report("produce.log_end", total)

	records := readTopic(ctx, addr, produceTopic, produceRecords)
	checkReadBack(records, acks)
}

// produceRound produces records [first, last) and waits for every promise;
// returns how many failed.
func produceRound(ctx context.Context, producer *kgo.Client, first, last int, acks []acked) int {
	var wait sync.WaitGroup
	var mutex sync.Mutex
	errors := 0
	for index := first; index < last; index++ {
		record := &kgo.Record{
			Key:   []byte(fmt.Sprintf("key-%d", index)),
			Value: []byte(fmt.Sprintf("value-%d", index)),
			Headers: []kgo.RecordHeader{
				{Key: "index", Value: []byte(strconv.Itoa(index))},
				{Key: "client", Value: []byte("franz-go")},
			},
		}
		wait.Add(1)
		producer.Produce(ctx, record, func(record *kgo.Record, err error) {
			defer wait.Done()
			mutex.Lock()
			defer mutex.Unlock()
			if err != nil {
				fmt.Fprintf(os.Stderr, "franz: produce %s: %v\n", record.Key, err)
				errors++
				return
			}
			acks[index] = acked{record.Partition, record.Offset}
		})
	}
	check(producer.Flush(ctx), "flush")
	wait.Wait()
	return errors
}

// checkAcks reports how many partitions the keys spread over and whether
// each partition's acknowledged offsets are exactly 0, 1, 2, … (no gap, no
// offset given twice).
func checkAcks(acks []acked) {
	offsets := map[int32]map[int64]bool{}
	for _, ack := range acks {
		if offsets[ack.partition] == nil {
			offsets[ack.partition] = map[int64]bool{}
		}
		offsets[ack.partition][ack.offset] = true
	}
	dense := true
	for _, seen := range offsets {
		for offset := int64(0); offset < int64(len(seen)); offset++ {
			dense = dense && seen[offset]
		}
	}
	distinct := 0
	for _, seen := range offsets {
		distinct += len(seen)
	}
	report("produce.partitions", len(offsets))
	report("produce.acked_distinct", distinct)
	report("produce.acked_dense", dense)
}

// checkReadBack compares what was read with what was acknowledged.
func checkReadBack(records []*kgo.Record, acks []acked) {
	seen := map[int]int{}
	matching, outOfOrder := 0, 0
	lastIndex := map[int32]int{}
	for _, record := range records {
		index, err := strconv.Atoi(string(record.Key[len("key-"):]))
		if err != nil || index < 0 || index >= len(acks) {
			fail("unexpected record key %q", record.Key)
		}
		seen[index]++
		headers := len(record.Headers) == 2 &&
			record.Headers[0].Key == "index" && string(record.Headers[0].Value) == strconv.Itoa(index) &&
			record.Headers[1].Key == "client" && string(record.Headers[1].Value) == "franz-go"
		if headers && string(record.Value) == fmt.Sprintf("value-%d", index) &&
			acks[index] == (acked{record.Partition, record.Offset}) {
			matching++
		}
		if last, ok := lastIndex[record.Partition]; ok && index <= last {
			outOfOrder++
		}
		lastIndex[record.Partition] = index
	}
	report("consume.records", len(records))
	report("consume.distinct", len(seen))
	report("consume.matching", matching)
	report("consume.out_of_order", outOfOrder)
}
