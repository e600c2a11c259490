package compaction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

type msg struct {
	key   string // "" : no key
	value string // "" : a deletion
}

func meta() *pb.MessageMetadata {
	return &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
}

// single builds an unbatched entry.
func single(t *testing.T, m msg) []byte {
	md := meta()
	if m.key != "" {
		md.PartitionKey = proto.String(m.key)
	}
	b, err := pulsar.AppendHeadersAndPayload(nil, md, []byte(m.value))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// batch builds a batch entry.
func batch(t *testing.T, ms ...msg) []byte {
	var payload []byte
	for _, m := range ms {
		smm := &pb.SingleMessageMetadata{}
		if m.key != "" {
			smm.PartitionKey = proto.String(m.key)
		}
		var err error
		if payload, err = pulsar.AppendBatchMessage(payload, smm, []byte(m.value)); err != nil {
			t.Fatal(err)
		}
	}
	md := meta()
	md.NumMessagesInBatch = proto.Int32(int32(len(ms)))
	b, err := pulsar.AppendHeadersAndPayload(nil, md, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendAll(t *testing.T, log topic.Log, entries ...[]byte) {
	for _, e := range entries {
		ch := make(chan error, 1)
		log.AddAsync(e, func(_ Position, err error) { ch <- err })
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

// values decodes entries into key → value (the last one of each key wins, in order).
func values(t *testing.T, es []topic.Entry) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range es {
		md, payload, err := pulsar.ParseHeadersAndPayload(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !pulsar.IsBatch(md) {
			out[md.GetPartitionKey()] = string(payload)
			continue
		}
		msgs, err := pulsar.ParseBatch(payload, pulsar.NumMessages(md))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			out[m.Metadata.GetPartitionKey()] = string(m.Payload)
		}
	}
	return out
}

func newTestManager(t *testing.T, store *topictest.Store, log topic.Log) *Manager {
	m := NewManager(Config{Log: log, Name: "t/compacted", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Open: func(_ context.Context, name string) (topic.Log, error) {
		return store.Open(name), nil
	}})
	t.Cleanup(m.Close)
	return m
}

func run(t *testing.T, m *Manager) (Status, string) {
	t.Helper()
	done, err := m.Trigger()
	if err != nil {
		t.Fatal(err)
	}
	<-done
	return m.Status()
}

func equal(a, b map[string]string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestCompaction: the latest value per key survives, deletions (empty payloads) remove
// keys, keyless messages are dropped, batches are split and batched again with their kept
// messages; a second compaction folds the first generation with what followed; a failure
// before the commit leaves the previous generation and horizon in force.
func TestCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := topictest.NewStore()
	log := store.Open("t")
	appendAll(t, log,
		single(t, msg{"a", "a1"}),
		batch(t, msg{"b", "b1"}, msg{"a", "a2"}, msg{"", "keyless"}, msg{"c", "c1"}),
		single(t, msg{"", "no key"}),
		single(t, msg{"c", ""}), // deletes c
		batch(t, msg{"d", "d1"}, msg{"b", "b2"}),
	)
	m := newTestManager(t, store, log)
	if st, _ := m.Status(); st != NotRun {
		t.Fatalf("status before: %v", st)
	}
	if st, e := run(t, m); st != Success {
		t.Fatalf("compaction: %v %s", st, e)
	}
	v, err := m.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a2", "b": "b2", "d": "d1"}
	if got := values(t, v.Entries()); !equal(got, want) {
		t.Fatalf("compacted %v, want %v", got, want)
	}
	if len(v.Entries()) != 2 || v.State().Messages != 3 || v.State().Horizon().EntryID != 4 {
		t.Fatalf("view: %d entries, state %+v", len(v.Entries()), v.State())
	}

	// More messages, and a compaction that fails before its commit: nothing changes.
	appendAll(t, log, single(t, msg{"a", "a3"}), single(t, msg{"d", ""}), single(t, msg{"e", "e1"}))
	m.cfg.BeforeCommit = func(State) error { return errors.New("crash") }
	if st, e := run(t, m); st != Error || e != "crash" {
		t.Fatalf("failed compaction: %v %q", st, e)
	}
	m2 := newTestManager(t, store, log) // the topic loaded again
	v2, err := m2.View(ctx)
	if err != nil || v2.State().Generation != 1 || !equal(values(t, v2.Entries()), want) {
		t.Fatalf("after a crash: %+v %v, %v", v2.State(), values(t, v2.Entries()), err)
	}
	if st, e := run(t, m2); st != Success {
		t.Fatalf("compaction after a crash: %v %s", st, e)
	}
	v3, _ := m2.View(ctx)
	want = map[string]string{"a": "a3", "b": "b2", "e": "e1"}
	if got := values(t, v3.Entries()); v3.State().Generation != 2 || !equal(got, want) {
		t.Fatalf("second generation %+v: %v, want %v", v3.State(), got, want)
	}
	if st, _ := ReadState(ctx, log); st.Generation != 2 || st.Horizon().EntryID != 7 {
		t.Fatalf("recorded state %+v", st)
	}
	// Nothing new: a compaction keeps the generation.
	if st, _ := run(t, m2); st != Success {
		t.Fatal(st)
	}
	if st, _ := ReadState(ctx, log); st.Generation != 2 {
		t.Fatalf("generation after an idle compaction: %d", st.Generation)
	}
}

// TestCompactedCursor: a ReadCompacted cursor from the earliest delivers the compacted
// entries up to the horizon, then the topic after it; one from a position after the
// horizon reads the topic; ReadPositions serves the view's entries up to the horizon.
func TestCompactedCursor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := topictest.NewStore()
	log := store.Open("t")
	appendAll(t, log, single(t, msg{"a", "a1"}), single(t, msg{"a", "a2"}), single(t, msg{"b", "b1"}))
	m := newTestManager(t, store, log)
	if st, e := run(t, m); st != Success {
		t.Fatal(e)
	}
	appendAll(t, log, single(t, msg{"a", "a3"}))
	inner, err := log.OpenNonDurableCursor(ctx, mledger.Earliest)
	if err != nil {
		t.Fatal(err)
	}
	c := m.WrapCursor(inner)
	var got []string
	for len(got) < 3 {
		es, err := c.Read(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			got = append(got, fmt.Sprintf("%v=%v", e.Position.EntryID, values(t, []topic.Entry{e})))
		}
	}
	if fmt.Sprint(got) != "[1=map[a:a2] 2=map[b:b1] 3=map[a:a3]]" {
		t.Fatalf("compacted read: %v", got)
	}
	es, err := c.ReadPositions(ctx, []Position{{LedgerID: 1, EntryID: 0}, {LedgerID: 1, EntryID: 1}, {LedgerID: 1, EntryID: 3}})
	if err != nil || len(es) != 2 || es[0].Position.EntryID != 1 || es[1].Position.EntryID != 3 {
		t.Fatalf("ReadPositions: %v, %v", es, err)
	}
	late, _ := log.OpenNonDurableCursor(ctx, Position{LedgerID: 1, EntryID: 3})
	if es, err := m.WrapCursor(late).Read(ctx, 10); err != nil || len(es) != 1 || es[0].Position.EntryID != 3 {
		t.Fatalf("read after the horizon: %v, %v", es, err)
	}
}
