package nonpersistent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func entry(t *testing.T, i, batch int) []byte {
	t.Helper()
	name, seq, at := "p", uint64(i), uint64(1)
	meta := &pb.MessageMetadata{ProducerName: &name, SequenceId: &seq, PublishTime: &at}
	if batch > 0 {
		n := int32(batch)
		meta.NumMessagesInBatch = &n
	}
	b, err := pulsar.AppendHeadersAndPayload(nil, meta, []byte(fmt.Sprint(i)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func add(t *testing.T, l *Log, data []byte) Position {
	t.Helper()
	var got Position
	var gerr error
	l.AddAsync(data, func(p Position, err error) { got, gerr = p, err })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return got
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestWindowAndDrops: without cursors nothing is held; a cursor reads what is added after
// it opened; a cursor that does not read loses the oldest entries once the window is full,
// counted in messages (a batch counts its messages), while adds never wait; a reading
// cursor loses nothing.
func TestWindowAndDrops(t *testing.T) {
	ck := &clock{t: time.Unix(1000, 0)}
	l := New(Config{MaxEntries: 4, Now: ck.now})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	add(t, l, entry(t, 0, 0))
	if st, _ := l.Stats(ctx); st.Size != 0 {
		t.Fatalf("%d bytes held without cursors", st.Size)
	}
	slow, err := l.OpenCursor(ctx, "slow", mledger.Earliest)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := l.OpenNonDurableCursor(ctx, mledger.Earliest)
	if err != nil {
		t.Fatal(err)
	}
	var want []Position
	for i := 1; i <= 10; i++ {
		batch := 0
		if i == 2 {
			batch = 5 // dropped for slow: counts 5 messages
		}
		p := add(t, l, entry(t, i, batch))
		want = append(want, p)
		es, err := fast.Read(ctx, 10)
		if err != nil || len(es) != 1 || es[0].Position != p {
			t.Fatalf("fast cursor read %d: %v, %v", i, es, err)
		}
	}
	if want[0].EntryID != 1 || want[0].LedgerID != 1000_000 {
		t.Fatalf("first position after the opening: %v", want[0])
	}
	// slow missed entries 1..6 (window of 4: 7..10 left); entry 2 held 5 messages.
	info, _ := slow.Info(ctx)
	if info.Dropped != 10 || info.Backlog != 4 {
		t.Fatalf("slow cursor: dropped %d, backlog %d; want 10 and 4", info.Dropped, info.Backlog)
	}
	if info.DropRate <= 0 {
		t.Fatalf("drop rate %v", info.DropRate)
	}
	es, err := slow.Read(ctx, 10)
	if err != nil || len(es) != 4 || es[0].Position != want[6] {
		t.Fatalf("slow cursor read: %v, %v", es, err)
	}
	if info, _ := fast.Info(ctx); info.Dropped != 0 {
		t.Fatalf("fast cursor dropped %d", info.Dropped)
	}
	// Everything is read: nothing is held.
	if st, _ := l.Stats(ctx); st.Size != 0 || st.Entries != 11 {
		t.Fatalf("after reading: %d bytes held, %d entries added", st.Size, st.Entries)
	}
	ck.t = ck.t.Add(time.Minute)
	if info, _ := slow.Info(ctx); info.DropRate != 0 {
		t.Fatalf("drop rate a minute later: %v", info.DropRate)
	}
	// A new subscription starts at the end whatever it asks; Cursors lists named ones.
	late, _ := l.OpenCursor(ctx, "late", mledger.Earliest)
	if md, _ := late.MarkDelete(ctx); md != want[9] {
		t.Fatalf("new cursor at %v, want after %v", md, want[9])
	}
	if names, _ := l.Cursors(ctx); len(names) != 2 || names[0] != "late" || names[1] != "slow" {
		t.Fatalf("cursors %v", names)
	}
	if es, _ := late.ReadPositions(ctx, want); len(es) != 0 {
		t.Fatal("redelivery of a non-persistent entry")
	}
}

// TestReadWaitsAndClose: a cursor read waits for the next add; Close ends waiting reads
// and refuses adds; Terminate refuses adds.
func TestReadWaitsAndClose(t *testing.T) {
	l := New(Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _ := l.OpenCursor(ctx, "s", mledger.Latest)
	got := make(chan error, 1)
	go func() {
		es, err := c.Read(ctx, 1)
		if err == nil && len(es) != 1 {
			err = fmt.Errorf("%d entries", len(es))
		}
		got <- err
	}()
	add(t, l, entry(t, 1, 0))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	go func() { _, err := c.Read(ctx, 1); got <- err }()
	l.Close(ctx)
	if err := <-got; !errors.Is(err, mledger.ErrClosed) {
		t.Fatalf("read across close: %v", err)
	}
	l2 := New(Config{})
	l2.Terminate(ctx)
	l2.AddAsync(entry(t, 1, 0), func(_ Position, err error) {
		if !errors.Is(err, mledger.ErrTerminated) {
			t.Errorf("add after terminate: %v", err)
		}
	})
}

// TestMaxReadAndAcked: SetMaxRead holds cursors before a position until it is lifted; an
// entry read is acknowledged.
func TestMaxReadAndAcked(t *testing.T) {
	l := New(Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _ := l.OpenCursor(ctx, "s", mledger.Latest)
	p0 := add(t, l, entry(t, 0, 0))
	l.SetMaxRead(&Position{LedgerID: p0.LedgerID, EntryID: p0.EntryID + 1})
	p1 := add(t, l, entry(t, 1, 0))
	if es, err := c.Read(ctx, 10); err != nil || len(es) != 1 || es[0].Position != p0 {
		t.Fatalf("read under the bound: %v, %v", es, err)
	}
	if ok, _ := c.Acked(ctx, p1); ok {
		t.Fatal("an entry not read yet is acknowledged")
	}
	l.SetMaxRead(nil)
	es, err := c.Read(ctx, 10)
	if err != nil || len(es) != 1 || es[0].Position != p1 {
		t.Fatalf("read after lifting the bound: %v, %v", es, err)
	}
	if ok, _ := c.Acked(ctx, p1); !ok {
		t.Fatal("an entry read is not acknowledged")
	}
}
