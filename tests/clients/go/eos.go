package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	eosInput      = "franz-eos-in"
	eosOutput     = "franz-eos-out"
	eosPartitions = 3
	eosGroup      = "franz-eos"
	eosTxnID      = "franz-eos-txn"
	// eosPhaseRecords are produced to the input before each phase, record
	// i to partition i % eosPartitions.
	eosPhaseRecords = 150
	// eosPollWait bounds one poll inside a transaction.
	eosPollWait = 2 * time.Second
)

// eosProgress is what the transactions of the session did.
type eosProgress struct {
	// committedInputs counts each input record's deliveries in committed
	// transactions, by key.
	committedInputs map[string]int
	committed       int
	aborted         int
	abortedOutputs  int
}

// eosScenario: a GroupTransactSession reads the input (read_committed),
// produces one output record per input record to the same partition and
// commits the consumed offsets in the same transaction; one transaction
// with records in it is aborted, which makes the session go back to the
// committed offsets and do those records again. Then read_committed sees
// each input's output exactly once; read_uncommitted also the aborted ones.
func eosScenario(ctx context.Context, addr string) {
	admin := kadm.NewClient(newClient(addr))
	defer admin.Close()
	createTopics(ctx, admin, eosPartitions, eosInput, eosOutput)
	producer := newClient(addr, kgo.DefaultProduceTopic(eosInput),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer producer.Close()

	session, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(addr),
		kgo.WithLogger(logger),
		kgo.TransactionalID(eosTxnID),
		kgo.ConsumerGroup(eosGroup),
		kgo.ConsumeTopics(eosInput),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	check(err, "new group transact session")
	progress := &eosProgress{committedInputs: map[string]int{}}

	// Phase 1: every input partition gets committed offsets.
	produceEOSPhase(ctx, producer, 0)
	for len(progress.committedInputs) < eosPhaseRecords {
		transact(ctx, session, kgo.TryCommit, progress)
	}
	// Phase 2: the first transaction with records in it is aborted.
	produceEOSPhase(ctx, producer, eosPhaseRecords)
	for progress.aborted == 0 {
		transact(ctx, session, kgo.TryAbort, progress)
	}
	for len(progress.committedInputs) < 2*eosPhaseRecords {
		transact(ctx, session, kgo.TryCommit, progress)
	}
	session.Close()

	deliveries := 0
	for _, times := range progress.committedInputs {
		deliveries += times
	}
	report("eos.transactions.aborted", progress.aborted)
	report("eos.transactions.committed_some", progress.committed > 0)
	report("eos.aborted_outputs", progress.abortedOutputs)
	report("eos.committed_inputs", deliveries)
	report("eos.committed_distinct", len(progress.committedInputs))

	// EndTxn is answered once the commit is decided; its markers, and with
	// them the transaction's offsets, follow: wait for both (bounded).
	transaction := settledTransaction(ctx, admin)
	report("eos.describe_transaction", fmt.Sprintf("%s/%d", transaction.State, len(transaction.Topics)))
	listed, err := admin.ListTransactions(ctx, nil, nil)
	check(err, "list transactions")
	listedTransaction, ok := listed[eosTxnID]
	report("eos.list_transactions", ok && listedTransaction.State == transaction.State &&
		listedTransaction.ProducerID == transaction.ProducerID)
	report("eos.group_committed", partitionOffsets(stableOffsets(ctx, admin, eosGroup)))
	report("eos.input_end", partitionOffsets(endOffsets(ctx, admin, eosInput)))

	total := 2 * eosPhaseRecords
	readOutput("eos.read_committed", readTopic(ctx, addr, eosOutput, total,
		kgo.FetchIsolationLevel(kgo.ReadCommitted())))
	readOutput("eos.read_uncommitted", readTopic(ctx, addr, eosOutput, total+progress.abortedOutputs,
		kgo.FetchIsolationLevel(kgo.ReadUncommitted())))
}

// settlePollEOS is how often a wait for markers looks again.
const settlePollEOS = 50 * time.Millisecond

// settledTransaction describes the session's transactional id once it is
// no longer preparing a commit or abort.
func settledTransaction(ctx context.Context, admin *kadm.Client) kadm.DescribedTransaction {
	for {
		described, err := admin.DescribeTransactions(ctx, eosTxnID)
		check(err, "describe transactions")
		transaction, ok := described[eosTxnID]
		if !ok {
			fail("describe transactions: no %s", eosTxnID)
		}
		check(transaction.Err, "describe "+eosTxnID)
		if !strings.HasPrefix(transaction.State, "Prepare") {
			return transaction
		}
		if ctx.Err() != nil {
			fail("transaction still %s at the deadline", transaction.State)
		}
		time.Sleep(settlePollEOS)
	}
}

// stableOffsets is OffsetFetch with require_stable: retried while a
// transaction's offsets are pending (UNSTABLE_OFFSET_COMMIT).
func stableOffsets(ctx context.Context, admin *kadm.Client, group string) map[int32]int64 {
	for {
		committed, err := admin.FetchOffsets(kadm.RequireStable(ctx), group)
		check(err, "fetch offsets")
		err = committed.Error()
		if errors.Is(err, kerr.UnstableOffsetCommit) && ctx.Err() == nil {
			time.Sleep(settlePollEOS)
			continue
		}
		check(err, "fetch offsets")
		offsets := map[int32]int64{}
		committed.Each(func(offset kadm.OffsetResponse) { offsets[offset.Partition] = offset.At })
		return offsets
	}
}

// transact runs one transaction: poll, one output record per input record
// (produced and acknowledged before End), End with end.
func transact(ctx context.Context, session *kgo.GroupTransactSession, end kgo.TransactionEndTry, progress *eosProgress) {
	if ctx.Err() != nil {
		fail("transactions: %d of %d inputs committed before the deadline",
			len(progress.committedInputs), 2*eosPhaseRecords)
	}
	check(session.Begin(), "begin")
	poll, cancel := context.WithTimeout(ctx, eosPollWait)
	fetches := session.PollFetches(poll)
	cancel()
	fetches.EachError(func(topic string, partition int32, err error) {
		if poll.Err() == nil {
			fail("fetch %s[%d]: %v", topic, partition, err)
		}
	})
	inputs := fetches.Records()
	outputs := make([]*kgo.Record, 0, len(inputs))
	for _, input := range inputs {
		outputs = append(outputs, &kgo.Record{
			Topic:     eosOutput,
			Partition: input.Partition,
			Key:       input.Key,
			Value:     []byte("out-" + string(input.Value)),
		})
	}
	if len(outputs) > 0 {
		check(session.ProduceSync(ctx, outputs...).FirstErr(), "produce in a transaction")
	}
	committed, err := session.End(ctx, end)
	check(err, "end transaction")
	switch {
	case committed:
		progress.committed++
		for _, input := range inputs {
			progress.committedInputs[string(input.Key)]++
		}
	case end == kgo.TryCommit:
		fail("a transaction meant to commit was aborted")
	case len(inputs) > 0:
		progress.aborted++
		progress.abortedOutputs += len(outputs)
	}
}

// produceEOSPhase produces eosPhaseRecords input records numbered from first.
func produceEOSPhase(ctx context.Context, producer *kgo.Client, first int) {
	records := make([]*kgo.Record, 0, eosPhaseRecords)
	for index := first; index < first+eosPhaseRecords; index++ {
		records = append(records, &kgo.Record{
			Partition: int32(index % eosPartitions),
			Key:       []byte(fmt.Sprintf("in-%d", index)),
			Value:     []byte(fmt.Sprintf("value-%d", index)),
		})
	}
	check(producer.ProduceSync(ctx, records...).FirstErr(), "produce input")
}

// readOutput reports what a reader of the output saw: records, distinct
// keys, and how many are the transform of an input in its partition.
func readOutput(prefix string, records []*kgo.Record) {
	keys := map[string]bool{}
	matching := 0
	for _, record := range records {
		keys[string(record.Key)] = true
		var index int
		_, err := fmt.Sscanf(string(record.Key), "in-%d", &index)
		if err == nil && index%eosPartitions == int(record.Partition) &&
			string(record.Value) == fmt.Sprintf("out-value-%d", index) {
			matching++
		}
	}
	report(prefix+".records", len(records))
	report(prefix+".distinct", len(keys))
	report(prefix+".matching", matching)
}
