package ledger_test

import (
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/ledger"
)

// waitParked waits until o gives up its goroutine, failing after a minute.
func waitParked(t *testing.T, o *inbox.Owner) {
	t.Helper()
	ch := make(chan struct{}, 1)
	o.SetParkHook(func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	timeout := time.After(time.Minute)
	for o.Running() {
		select {
		case <-ch:
		case <-timeout:
			t.Fatal("the writer's owner still runs a minute after its last append")
		}
	}
}

// TestIdleWriterParks: a writer handle with nothing in flight gives up its goroutine, but
// only after it published its LAC (the bookie knows the last entry without a further add:
// the explicit-LAC tick ran before the owner parked); the next append starts it again, and
// a parked handle closes normally (goleak: no goroutine is left behind).
func TestIdleWriterParks(t *testing.T) {
	c := newCluster(t, 1)
	lc := c.client(ledger.Options{LACFlushInterval: 5 * time.Millisecond})
	ctx := ctxT(t)
	h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	o := ledger.OwnerOf(h)
	for i := range 5 {
		if _, err := h.Append(ctx, payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitParked(t, o)
	r, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{Password: []byte("pw")})
	if err != nil {
		t.Fatal(err)
	}
	if lac, err := r.ReadLAC(ctx); err != nil || lac != 4 {
		t.Fatalf("ReadLAC of a parked writer's ledger = %d, %v; want 4 (the explicit LAC)", lac, err)
	}
	if id, err := h.Append(ctx, payload(5)); err != nil || id != 5 {
		t.Fatalf("append after parking = %d, %v; want entry 5", id, err)
	}
	waitParked(t, o)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if m := h.Metadata(); m.State != ledger.StateClosed || m.LastEntryID != 5 {
		t.Fatalf("closed metadata: state %v, last entry %d; want CLOSED at 5", m.State, m.LastEntryID)
	}
	waitParked(t, o) // a closed handle's owner ends
	es, err := r.Read(ctx, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 0, 4)
	r.Close(ctx) //nolint:errcheck // a read handle's Close only marks it
}
