package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func startTxnService(t *testing.T, mem *topictest.Store, maxActive int) *broker.Service {
	return startTxnServiceOn(t, metadatatest.NewStore(t, metadatatest.Embedded(t)), mem, maxActive)
}

func startTxnServiceOn(t *testing.T, st metadata.Store, mem *topictest.Store, maxActive int) *broker.Service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := broker.Start(ctx, broker.Config{
		Store: st, Listen: "127.0.0.1:0", ID: "b1",
		Logger:                        slog.New(slog.NewTextHandler(io.Discard, nil)),
		OpenLog:                       func(_ context.Context, name string) (topic.Log, error) { return mem.Open(name), nil },
		TransactionCoordinatorEnabled: true, MaxActiveTransactionsPerCoordinator: maxActive,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// send sends one transactional message (txn nil: plain) and returns the broker's answer.
func (c *rawClient) send(pid, seq uint64, txn *[2]uint64) *pb.BaseCommand {
	c.t.Helper()
	cmd := &pb.CommandSend{ProducerId: &pid, SequenceId: &seq}
	if txn != nil {
		cmd.TxnidMostBits, cmd.TxnidLeastBits = &txn[0], &txn[1]
	}
	name, pt := "raw-producer", uint64(time.Now().UnixMilli())
	b, err := mp.AppendPayloadCommand(nil, mp.Wrap(cmd), &pb.MessageMetadata{ProducerName: &name, SequenceId: &seq, PublishTime: &pt}, []byte("x"))
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatal(err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			return f.Cmd
		}
	}
}

// TestTxnBadInput: transactional commands with an unknown, ended or unregistered
// transaction get the matching error and store nothing; the coordinator bounds its open
// transactions with a clear error.
func TestTxnBadInput(t *testing.T) {
	mem := topictest.NewStore()
	svc := startTxnService(t, mem, 2)
	c := dialRaw(t, svc)
	const topicName = "persistent://public/default/txn-bad"
	pid := uint64(1)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(topicName), ProducerId: &pid, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	if got := c.roundTrip(&pb.CommandTcClientConnectRequest{RequestId: c.nextID(), TcId: proto.Uint64(0)}); got.GetTcClientConnectResponse().Error != nil {
		t.Fatalf("TC connect: %v", got)
	}
	newTxn := func() (*[2]uint64, *pb.CommandNewTxnResponse) {
		r := c.roundTrip(&pb.CommandNewTxn{RequestId: c.nextID(), TcId: proto.Uint64(0), TxnTtlSeconds: proto.Uint64(60_000)}).GetNewTxnResponse()
		return &[2]uint64{r.GetTxnidMostBits(), r.GetTxnidLeastBits()}, r
	}
	stored := func() int64 { return mem.Open("public/default/persistent/txn-bad").LastConfirmed().EntryID + 1 }

	// A send for a transaction that does not exist.
	if got := c.send(pid, 1, &[2]uint64{0, 999}).GetSendError(); got.GetError() != pb.ServerError_TransactionNotFound {
		t.Fatalf("send with an unknown transaction: %v", got)
	}
	// A send for a transaction that did not add the topic.
	tx1, r := newTxn()
	if r.Error != nil {
		t.Fatalf("new txn: %v", r)
	}
	if got := c.send(pid, 2, tx1).GetSendError(); got.GetError() != pb.ServerError_NotAllowedError || !strings.Contains(got.GetMessage(), "did not add") {
		t.Fatalf("send with an unregistered topic: %v", got)
	}
	if n := stored(); n != 0 {
		t.Fatalf("%d entries stored by refused sends", n)
	}
	// Registered, it works; after the commit, more sends and a second end are refused.
	if got := c.roundTrip(&pb.CommandAddPartitionToTxn{RequestId: c.nextID(), TxnidMostBits: &tx1[0], TxnidLeastBits: &tx1[1],
		Partitions: []string{"txn-bad"}}).GetAddPartitionToTxnResponse(); got.Error != nil {
		t.Fatalf("add partition (short name): %v", got)
	}
	if got := c.send(pid, 3, tx1); got.GetType() != pb.BaseCommand_SEND_RECEIPT {
		t.Fatalf("registered send: %v", got)
	}
	end := func(tx *[2]uint64, a pb.TxnAction) *pb.CommandEndTxnResponse {
		return c.roundTrip(&pb.CommandEndTxn{RequestId: c.nextID(), TxnidMostBits: &tx[0], TxnidLeastBits: &tx[1], TxnAction: a.Enum()}).GetEndTxnResponse()
	}
	if got := end(tx1, pb.TxnAction_COMMIT); got.Error != nil {
		t.Fatalf("commit: %v", got)
	}
	if got := end(tx1, pb.TxnAction_ABORT); got.GetError() != pb.ServerError_TransactionNotFound {
		t.Fatalf("abort after commit: %v", got)
	}
	if got := c.roundTrip(&pb.CommandAddPartitionToTxn{RequestId: c.nextID(), TxnidMostBits: &tx1[0], TxnidLeastBits: &tx1[1],
		Partitions: []string{"other"}}).GetAddPartitionToTxnResponse(); got.GetError() != pb.ServerError_InvalidTxnStatus {
		t.Fatalf("add partition after commit: %v", got)
	}
	if got := c.send(pid, 4, tx1).GetSendError(); got.GetError() != pb.ServerError_TransactionNotFound {
		t.Fatalf("send after commit: %v", got)
	}
	if n := stored(); n != 1 {
		t.Fatalf("%d entries stored, want the 1 registered send", n)
	}
	// At most 2 open transactions.
	if _, r := newTxn(); r.Error != nil {
		t.Fatalf("open 1: %v", r)
	}
	if _, r := newTxn(); r.Error != nil {
		t.Fatalf("open 2: %v", r)
	}
	if _, r := newTxn(); r.GetError() != pb.ServerError_NotAllowedError || !strings.Contains(r.GetMessage(), "maximum of 2") {
		t.Fatalf("third open transaction: %v", r)
	}
}

// TestTxnUnusedParticipant: a transaction adds a partition (the coordinator creates the
// partition's record with the header) and commits without sending to it; the loaded topic,
// told of the end, drops the record, so the header is collected.
func TestTxnUnusedParticipant(t *testing.T) {
	st := metadatatest.NewStore(t, metadatatest.Embedded(t))
	svc := startTxnServiceOn(t, st, topictest.NewStore(), 0)
	c := dialRaw(t, svc)
	pid := uint64(1)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String("persistent://public/default/txn-unused"), ProducerId: &pid,
		RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	if got := c.roundTrip(&pb.CommandTcClientConnectRequest{RequestId: c.nextID(), TcId: proto.Uint64(0)}); got.GetTcClientConnectResponse().Error != nil {
		t.Fatalf("TC connect: %v", got)
	}
	r := c.roundTrip(&pb.CommandNewTxn{RequestId: c.nextID(), TcId: proto.Uint64(0), TxnTtlSeconds: proto.Uint64(60_000)}).GetNewTxnResponse()
	most, least := r.GetTxnidMostBits(), r.GetTxnidLeastBits()
	if got := c.roundTrip(&pb.CommandAddPartitionToTxn{RequestId: c.nextID(), TxnidMostBits: &most, TxnidLeastBits: &least,
		Partitions: []string{"persistent://public/default/txn-unused"}}).GetAddPartitionToTxnResponse(); got.Error != nil {
		t.Fatalf("add partition: %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	header := metadata.TxnHeaderKey(most, least)
	record := metadata.TxnOpenKey("public/default/persistent/txn-unused", fmt.Sprintf("%d-%d", most, least))
	for _, k := range []string{header, record} {
		if _, err := st.Get(ctx, k); err != nil {
			t.Fatalf("%s after the add: %v", k, err)
		}
	}
	if got := c.roundTrip(&pb.CommandEndTxn{RequestId: c.nextID(), TxnidMostBits: &most, TxnidLeastBits: &least,
		TxnAction: pb.TxnAction_COMMIT.Enum()}).GetEndTxnResponse(); got.Error != nil {
		t.Fatalf("commit: %v", got)
	}
	for _, k := range []string{record, header} {
		for {
			_, err := st.Get(ctx, k)
			if errors.Is(err, metadata.ErrNotFound) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s still there after the commit: %v", k, err)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
}

// TestTxnDisabled: with transactions off every transaction command answers "Transactions
// are not enabled." in its response.
func TestTxnDisabled(t *testing.T) {
	svc := startService(t, metadatatest.NewStore(t, metadatatest.Embedded(t)), topictest.NewStore(), "b1")
	c := dialRaw(t, svc)
	if got := c.roundTrip(&pb.CommandTcClientConnectRequest{RequestId: c.nextID(), TcId: proto.Uint64(0)}).GetTcClientConnectResponse(); got.GetMessage() != "Transactions are not enabled." {
		t.Fatalf("TC connect: %v", got)
	}
	if got := c.roundTrip(&pb.CommandNewTxn{RequestId: c.nextID()}).GetNewTxnResponse(); got.GetMessage() != "Transactions are not enabled." {
		t.Fatalf("new txn: %v", got)
	}
}
