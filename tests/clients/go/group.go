package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	groupTopic      = "franz-group"
	groupPartitions = 6
	groupName       = "franz-coop"
	// groupPhaseRecords are produced in each phase, record i to partition
	// i % groupPartitions, once the phase's assignment is settled.
	groupPhaseRecords = 120
	// settlePoll is how often the main goroutine looks at the members.
	settlePoll = 20 * time.Millisecond
)

// groupState is what the members' callbacks and poll loops saw, under mutex.
type groupState struct {
	mutex sync.Mutex
	// assigned is each member's partitions now, from its callbacks.
	assigned map[string]map[int32]bool
	// revoked counts each member's partitions revoked so far.
	revoked map[string]int
	lost    int
	// consumed counts each member's records.
	consumed map[string]int
	// seen counts each record key's deliveries, over all members.
	seen         map[string]int
	commitErrors []string
}

// member is one consumer of the group, polling in a goroutine of its own.
type member struct {
	client *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// groupScenario: three members with the cooperative-sticky balancer, A
// alone, then B joining, then C, then A leaving, each phase producing
// records once its assignment settled and waiting for them all. Every
// member commits after each poll and when partitions are revoked (with
// BlockRebalanceOnPoll, so no rebalance runs between a poll and its
// commit), so a moved partition goes on where its last owner stopped.
func groupScenario(ctx context.Context, addr string) {
	admin := kadm.NewClient(newClient(addr))
	defer admin.Close()
	createTopics(ctx, admin, groupPartitions, groupTopic)
	producer := newClient(addr, kgo.DefaultProduceTopic(groupTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()
	state := &groupState{
		assigned: map[string]map[int32]bool{},
		revoked:  map[string]int{},
		consumed: map[string]int{},
		seen:     map[string]int{},
	}

	produced := 0
	members := map[string]*member{}
	phases := []struct {
		name  string
		join  string
		leave string
	}{{"a", "A", ""}, {"ab", "B", ""}, {"abc", "C", ""}, {"bc", "", "A"}}
	var before map[string][]int32
	sticky := true
	for _, phase := range phases {
		revokedBefore := state.revokedCounts()
		if phase.join != "" {
			members[phase.join] = state.join(ctx, addr, phase.join)
		}
		if phase.leave != "" {
			members[phase.leave].leave()
			delete(members, phase.leave)
		}
		assignment := state.waitSettled(ctx, members)
		sticky = sticky && kept(before, assignment)
		before = assignment
		report("group."+phase.name+".assignment", formatAssignment(assignment))
		report("group."+phase.name+".revoked", formatRevoked(revokedBefore, state.revokedCounts()))

		produced += produceGroupPhase(ctx, producer, produced)
		state.waitConsumed(ctx, produced)
	}
	report("group.sticky", sticky)
	describeGroup(ctx, admin, "group.describe", state)

	for name, member := range members {
		member.leave()
		delete(members, name)
	}
	state.mutex.Lock()
	defer state.mutex.Unlock()
	duplicates := 0
	for _, times := range state.seen {
		duplicates += times - 1
	}
	report("group.produced", produced)
	report("group.distinct", len(state.seen))
	report("group.duplicates", duplicates)
	report("group.consumed", formatRevoked(nil, state.consumed))
	report("group.lost", state.lost)
	report("group.commit_errors", len(state.commitErrors))
	for _, commitError := range state.commitErrors {
		fmt.Fprintln(os.Stderr, "franz: commit:", commitError)
	}

	committed, err := admin.FetchOffsets(ctx, groupName)
	check(err, "fetch offsets")
	check(committed.Error(), "fetch offsets")
	offsets := map[int32]int64{}
	committed.Each(func(offset kadm.OffsetResponse) { offsets[offset.Partition] = offset.At })
	report("group.committed", partitionOffsets(offsets))
	report("group.end", partitionOffsets(endOffsets(ctx, admin, groupTopic)))
	described, err := admin.DescribeGroups(ctx, groupName)
	check(err, "describe groups")
	group, err := described.On(groupName, nil)
	check(err, "describe "+groupName)
	report("group.after.state", group.State)
	report("group.after.members", len(group.Members))
}

// join starts member name polling in a goroutine.
func (state *groupState) join(ctx context.Context, addr, name string) *member {
	client := newClient(addr,
		kgo.ClientID("franz-"+name),
		kgo.ConsumerGroup(groupName),
		kgo.ConsumeTopics(groupTopic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			state.mutex.Lock()
			defer state.mutex.Unlock()
			if state.assigned[name] == nil {
				state.assigned[name] = map[int32]bool{}
			}
			for _, partition := range assigned[groupTopic] {
				state.assigned[name][partition] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, client *kgo.Client, revoked map[string][]int32) {
			err := client.CommitUncommittedOffsets(ctx)
			state.mutex.Lock()
			defer state.mutex.Unlock()
			if err != nil {
				state.commitErrors = append(state.commitErrors, fmt.Sprintf("%s on revoke: %v", name, err))
			}
			for _, partition := range revoked[groupTopic] {
				delete(state.assigned[name], partition)
				state.revoked[name]++
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			state.mutex.Lock()
			defer state.mutex.Unlock()
			for _, partition := range lost[groupTopic] {
				delete(state.assigned[name], partition)
			}
			state.lost++
		}),
	)
	pollContext, cancel := context.WithCancel(ctx)
	joined := &member{client: client, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(joined.done)
		for pollContext.Err() == nil {
			fetches := client.PollFetches(pollContext)
			fetches.EachError(func(topic string, partition int32, err error) {
				if pollContext.Err() == nil {
					fail("%s: fetch %s[%d]: %v", name, topic, partition, err)
				}
			})
			records := fetches.Records()
			state.consume(name, records)
			if len(records) > 0 {
				if err := client.CommitUncommittedOffsets(ctx); err != nil {
					state.mutex.Lock()
					state.commitErrors = append(state.commitErrors, fmt.Sprintf("%s: %v", name, err))
					state.mutex.Unlock()
				}
			}
			client.AllowRebalance()
		}
	}()
	return joined
}

// leave stops polling and closes the client, which leaves the group (and
// commits in OnPartitionsRevoked).
func (member *member) leave() {
	member.cancel()
	<-member.done
	member.client.Close()
}

func (state *groupState) consume(name string, records []*kgo.Record) {
	state.mutex.Lock()
	defer state.mutex.Unlock()
	for _, record := range records {
		state.seen[string(record.Key)]++
		state.consumed[name]++
	}
}

func (state *groupState) revokedCounts() map[string]int {
	state.mutex.Lock()
	defer state.mutex.Unlock()
	counts := map[string]int{}
	for name, count := range state.revoked {
		counts[name] = count
	}
	return counts
}

// waitSettled waits until the members' partitions cover the topic with
// none twice and none of them empty (with the cooperative protocol, the
// second of the two rebalances has then run), and nobody else holds any.
func (state *groupState) waitSettled(ctx context.Context, members map[string]*member) map[string][]int32 {
	for {
		assignment, settled := state.assignment(members)
		if settled {
			return assignment
		}
		if ctx.Err() != nil {
			fail("the group did not settle: %s", formatAssignment(assignment))
		}
		time.Sleep(settlePoll)
	}
}

func (state *groupState) assignment(members map[string]*member) (map[string][]int32, bool) {
	state.mutex.Lock()
	defer state.mutex.Unlock()
	assignment := map[string][]int32{}
	owners := map[int32]int{}
	settled := true
	for name, partitions := range state.assigned {
		_, isMember := members[name]
		settled = settled && (isMember || len(partitions) == 0)
		for partition := range partitions {
			assignment[name] = append(assignment[name], partition)
			owners[partition]++
		}
	}
	for name := range members {
		settled = settled && len(assignment[name]) > 0
	}
	for partition := int32(0); partition < groupPartitions; partition++ {
		settled = settled && owners[partition] == 1
	}
	return assignment, settled
}

// waitConsumed waits until the members have seen total distinct records.
func (state *groupState) waitConsumed(ctx context.Context, total int) {
	for {
		state.mutex.Lock()
		seen := len(state.seen)
		state.mutex.Unlock()
		if seen >= total {
			return
		}
		if ctx.Err() != nil {
			fail("the group consumed %d of %d records", seen, total)
		}
		time.Sleep(settlePoll)
	}
}

// produceGroupPhase produces the next groupPhaseRecords records, numbered
// from first; returns how many.
func produceGroupPhase(ctx context.Context, producer *kgo.Client, first int) int {
	records := make([]*kgo.Record, 0, groupPhaseRecords)
	for index := first; index < first+groupPhaseRecords; index++ {
		records = append(records, &kgo.Record{
			Partition: int32(index % groupPartitions),
			Key:       []byte(fmt.Sprintf("group-%d", index)),
			Value:     []byte(fmt.Sprintf("value-%d", index)),
		})
	}
	check(producer.ProduceSync(ctx, records...).FirstErr(), "produce")
	return len(records)
}

// kept says whether each member in both before and after only gained
// partitions or only gave some up (sticky: only partitions that must move
// move).
func kept(before, after map[string][]int32) bool {
	subset := func(small, large []int32) bool {
		owned := map[int32]bool{}
		for _, partition := range large {
			owned[partition] = true
		}
		for _, partition := range small {
			if !owned[partition] {
				return false
			}
		}
		return true
	}
	for name, previous := range before {
		now, stayed := after[name]
		if stayed && !subset(previous, now) && !subset(now, previous) {
			return false
		}
	}
	return true
}

// describeGroup reports DescribeGroups for the group while its members run,
// and whether each member's assignment there is the one its callbacks saw.
func describeGroup(ctx context.Context, admin *kadm.Client, prefix string, state *groupState) {
	described, err := admin.DescribeGroups(ctx, groupName)
	check(err, "describe groups")
	group, err := described.On(groupName, nil)
	check(err, "describe "+groupName)
	check(group.Err, "describe "+groupName)
	report(prefix+".state", group.State)
	report(prefix+".protocol_type", group.ProtocolType)
	report(prefix+".protocol", group.Protocol)
	report(prefix+".members", len(group.Members))
	state.mutex.Lock()
	defer state.mutex.Unlock()
	matches := true
	for _, described := range group.Members {
		name := strings.TrimPrefix(described.ClientID, "franz-")
		assignment, ok := described.Assigned.AsConsumer()
		if !ok {
			matches = false
			continue
		}
		var partitions []int32
		for _, topic := range assignment.Topics {
			partitions = append(partitions, topic.Partitions...)
		}
		matches = matches && len(partitions) == len(state.assigned[name])
		for _, partition := range partitions {
			matches = matches && state.assigned[name][partition]
		}
	}
	report(prefix+".matches_callbacks", matches)
}

// formatAssignment is `A:0,1,2 B:3,4,5`, by member name.
func formatAssignment(assignment map[string][]int32) string {
	names := make([]string, 0, len(assignment))
	for name, partitions := range assignment {
		if len(partitions) > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, name+":"+partitionList(assignment[name]))
	}
	return strings.Join(parts, " ")
}

// formatRevoked is `A:3 B:0`: after minus before, by member name.
func formatRevoked(before, after map[string]int) string {
	names := make([]string, 0, len(after))
	for name := range after {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s:%d", name, after[name]-before[name]))
	}
	return strings.Join(parts, " ")
}
