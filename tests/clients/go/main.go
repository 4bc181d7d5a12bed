// franz drives franz-go (kgo and kadm, pinned in go.mod) against one broker
// for Brook's end-to-end tests (tests/tests/e2e/franz_go.rs): one scenario per
// run, named by the first argument, the broker's address the second.
//
//	franz produce ADDR   idempotent produce (franz-go's default), read back
//	franz group ADDR     a cooperative-sticky group: members join and leave
//	franz eos ADDR       GroupTransactSession consume-transform-produce
//	franz admin ADDR     kadm: topics, configs, offsets, groups, cluster
//
// It prints `name value` lines that the Rust test asserts on and exits 0, or
// prints what went wrong on stderr and exits 1. franz-go's own warnings and
// errors go to stderr too (FRANZ_LOG=debug shows everything), and their
// count is the `log.warnings` line (the first few are `log.warning` lines). Every step is bounded: the whole run by
// runTimeout, each wait by its own context.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runTimeout bounds one run; the Rust side kills the process at 150 s.
const runTimeout = 120 * time.Second

// countingLogger passes franz-go's log lines on to a BasicLogger on stderr
// and counts those at warn level or worse, keeping the first few: a strict
// client that complains about a broker says so there first.
type countingLogger struct {
	inner    kgo.Logger
	warnings atomic.Int64
	mutex    sync.Mutex
	kept     []string
}

// warningsKept bounds the warnings repeated on stdout.
const warningsKept = 20

func (l *countingLogger) Level() kgo.LogLevel { return l.inner.Level() }

func (l *countingLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level != kgo.LogLevelNone && level <= kgo.LogLevelWarn {
		if l.warnings.Add(1) <= warningsKept {
			l.mutex.Lock()
			l.kept = append(l.kept, fmt.Sprint(level, " ", msg, " ", keyvals))
			l.mutex.Unlock()
		}
	}
	l.inner.Log(level, msg, keyvals...)
}

var logger = newLogger()

func newLogger() *countingLogger {
	level := kgo.LogLevelWarn
	switch os.Getenv("FRANZ_LOG") {
	case "info":
		level = kgo.LogLevelInfo
	case "debug":
		level = kgo.LogLevelDebug
	}
	return &countingLogger{inner: kgo.BasicLogger(os.Stderr, level, nil)}
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: franz produce|group|eos|admin BROKER")
	}
	scenarios := map[string]func(context.Context, string){
		"produce": produceScenario,
		"group":   groupScenario,
		"eos":     eosScenario,
		"admin":   adminScenario,
	}
	scenario, ok := scenarios[os.Args[1]]
	if !ok {
		fail("unknown scenario %q", os.Args[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	scenario(ctx, os.Args[2])
	report("log.warnings", logger.warnings.Load())
	logger.mutex.Lock()
	defer logger.mutex.Unlock()
	for _, warning := range logger.kept {
		report("log.warning", warning)
	}
}

// report prints one `name value` line.
func report(name string, value any) {
	fmt.Printf("%s %v\n", name, value)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "franz: "+format+"\n", args...)
	os.Exit(1)
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// newClient is a kgo client of the broker at addr with the counting logger.
func newClient(addr string, opts ...kgo.Opt) *kgo.Client {
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.WithLogger(logger)}, opts...)
	client, err := kgo.NewClient(opts...)
	check(err, "new client")
	return client
}

// createTopics creates topics with partitions each (replication factor 1:
// one broker) and fails unless every one was created.
func createTopics(ctx context.Context, admin *kadm.Client, partitions int32, topics ...string) {
	created, err := admin.CreateTopics(ctx, partitions, 1, nil, topics...)
	check(err, "create topics")
	for _, topic := range topics {
		response, err := created.On(topic, nil)
		check(err, "create "+topic)
		check(response.Err, "create "+topic+": "+response.ErrMessage)
	}
}

// endOffsets is each partition of topic's log end offset (ListOffsets
// latest, read_uncommitted).
func endOffsets(ctx context.Context, admin *kadm.Client, topic string) map[int32]int64 {
	listed, err := admin.ListEndOffsets(ctx, topic)
	check(err, "list end offsets of "+topic)
	check(listed.Error(), "end offsets of "+topic)
	offsets := map[int32]int64{}
	listed.Each(func(offset kadm.ListedOffset) { offsets[offset.Partition] = offset.Offset })
	return offsets
}

// partitionOffsets formats per-partition offsets as `0:12 1:30`.
func partitionOffsets(offsets map[int32]int64) string {
	partitions := make([]int32, 0, len(offsets))
	for partition := range offsets {
		partitions = append(partitions, partition)
	}
	sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
	parts := make([]string, 0, len(partitions))
	for _, partition := range partitions {
		parts = append(parts, fmt.Sprintf("%d:%d", partition, offsets[partition]))
	}
	return strings.Join(parts, " ")
}

// partitionList formats partitions as `0,2,5` (sorted), `-` when none.
func partitionList(partitions []int32) string {
	if len(partitions) == 0 {
		return "-"
	}
	sorted := append([]int32(nil), partitions...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	parts := make([]string, 0, len(sorted))
	for _, partition := range sorted {
		parts = append(parts, fmt.Sprint(partition))
	}
	return strings.Join(parts, ",")
}

// drainWait is how long a read that has every record it expects goes on
// polling for more (duplicates would arrive then).
const drainWait = 1 * time.Second

// readTopic reads topic from its start with a client of its own (no group)
// until it has want records, then drains for drainWait; fails on a fetch
// error or if ctx ends first.
func readTopic(ctx context.Context, addr, topic string, want int, opts ...kgo.Opt) []*kgo.Record {
	opts = append([]kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)
	client := newClient(addr, opts...)
	defer client.Close()
	var records []*kgo.Record
	poll := func(ctx context.Context) {
		fetches := client.PollFetches(ctx)
		fetches.EachError(func(topic string, partition int32, err error) {
			if ctx.Err() == nil {
				fail("fetch %s[%d]: %v", topic, partition, err)
			}
		})
		records = append(records, fetches.Records()...)
	}
	for len(records) < want {
		if ctx.Err() != nil {
			fail("reading %s: %d of %d records before the deadline", topic, len(records), want)
		}
		poll(ctx)
	}
	drain, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for drain.Err() == nil {
		poll(drain)
	}
	return records
}
