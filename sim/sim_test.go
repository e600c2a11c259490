package sim

import (
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/proto/bk"
)

func TestEventOrder(t *testing.T) {
	s := New(1)
	var got []int
	s.After(2*time.Millisecond, "", func() { got = append(got, 3) })
	s.After(time.Millisecond, "", func() { got = append(got, 1) })
	s.After(time.Millisecond, "", func() { got = append(got, 2) })
	for s.Step() {
	}
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 || s.Now() != 2*time.Millisecond {
		t.Fatalf("order %v at %v", got, s.Now())
	}
}

// TestCallExactlyOnce: with loss and slow messages, every call's callback runs once.
func TestCallExactlyOnce(t *testing.T) {
	s := New(7)
	n := NewNetwork(s, NetConfig{MinDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, DropRate: 0.3,
		SlowRate: 0.3, SlowDelay: 50 * time.Millisecond, Timeout: 10 * time.Millisecond})
	b := NewBookie(s, "b", BookieConfig{FsyncMin: time.Millisecond, FsyncMax: 2 * time.Millisecond})
	n.Add("b", b)
	calls := map[int]int{}
	for i := 0; i < 200; i++ {
		n.Call("b", &bk.Request{Op: bk.OpAddEntry, LedgerID: 1, EntryID: int64(i), Body: []byte{1}}, func(any, error) { calls[i]++ })
	}
	for s.Step() {
	}
	for i := 0; i < 200; i++ {
		if calls[i] != 1 {
			t.Fatalf("call %d: callback ran %d times", i, calls[i])
		}
	}
}

func TestBookieCrashLosesOnlyUnsynced(t *testing.T) {
	s := New(3)
	n := NewNetwork(s, NetConfig{MinDelay: time.Millisecond, MaxDelay: time.Millisecond, Timeout: 100 * time.Millisecond})
	b := NewBookie(s, "b", BookieConfig{FsyncMin: 5 * time.Millisecond, FsyncMax: 5 * time.Millisecond})
	n.Add("b", b)
	var acked []int64
	add := func(e int64) {
		n.Call("b", &bk.Request{Op: bk.OpAddEntry, LedgerID: 1, EntryID: e, Body: []byte{byte(e)}}, func(resp any, err error) {
			if err == nil && resp.(*bk.Response).Status == bk.StatusOK {
				acked = append(acked, e)
			}
		})
	}
	add(0)                                             // arrives at 1ms, synced at 6ms
	s.After(7*time.Millisecond, "", func() { add(1) }) // arrives at 8ms, would sync at 13ms
	s.After(10*time.Millisecond, "", b.Crash)
	s.After(20*time.Millisecond, "", b.Restart)
	for s.Step() {
	}
	if len(acked) != 1 || acked[0] != 0 {
		t.Fatalf("acked %v, want [0]", acked)
	}
	if _, ok := b.DurableEntry(1, 0); !ok {
		t.Fatal("synced entry lost")
	}
	if _, ok := b.DurableEntry(1, 1); ok {
		t.Fatal("unsynced entry survived the crash")
	}
}

func TestBookieFencing(t *testing.T) {
	s := New(4)
	n := NewNetwork(s, NetConfig{MinDelay: time.Millisecond, MaxDelay: time.Millisecond, Timeout: 100 * time.Millisecond})
	b := NewBookie(s, "b", BookieConfig{FsyncMin: time.Millisecond, FsyncMax: time.Millisecond})
	n.Add("b", b)
	var st []bk.Status
	call := func(r *bk.Request) {
		n.Call("b", r, func(resp any, err error) {
			if err != nil {
				t.Fatal(err)
			}
			st = append(st, resp.(*bk.Response).Status)
		})
	}
	call(&bk.Request{Op: bk.OpReadEntry, Flags: bk.FlagFence, LedgerID: 1, EntryID: bk.LastEntry})
	s.After(5*time.Millisecond, "", func() {
		call(&bk.Request{Op: bk.OpAddEntry, LedgerID: 1, EntryID: 0, Body: []byte{0}})
		call(&bk.Request{Op: bk.OpAddEntry, Flags: bk.FlagRecovery, LedgerID: 1, EntryID: 0, Body: []byte{0}})
	})
	for s.Step() {
	}
	want := []bk.Status{bk.StatusNoSuchEntry, bk.StatusFenced, bk.StatusOK}
	if len(st) != 3 || st[0] != want[0] || st[1] != want[1] || st[2] != want[2] || !b.Fenced(1) || len(b.Violations()) != 0 {
		t.Fatalf("statuses %v fenced %v violations %v", st, b.Fenced(1), b.Violations())
	}
}
