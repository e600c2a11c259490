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

// TestMetaStoreSessions: ephemeral keys vanish with their session; Delete and List.
func TestMetaStoreSessions(t *testing.T) {
	m := NewMetaStore()
	var changes []MetaChange
	m.OnChange = func(c MetaChange) { changes = append(changes, c) }
	s1 := m.NewSession()
	if _, err := m.PutEphemeral("/a/lock", []byte("w1"), 0, s1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutEphemeral("/a/lock", []byte("w2"), 0, s1); err != ErrBadVersion {
		t.Fatalf("second lock: %v", err)
	}
	v, _ := m.Put("/a/mark", []byte("m"), 0)
	if kvs := m.List("/a/"); len(kvs) != 2 || kvs[0].Key != "/a/lock" || kvs[0].Session != s1 || kvs[1].Session != 0 {
		t.Fatalf("list %+v", kvs)
	}
	m.ExpireSession(s1)
	if _, _, ok := m.Get("/a/lock"); ok || m.SessionLive(s1) {
		t.Fatal("ephemeral key outlived its session")
	}
	if _, err := m.PutEphemeral("/a/lock", nil, 0, s1); err != ErrSessionExpired {
		t.Fatalf("put through expired session: %v", err)
	}
	if err := m.Delete("/a/mark", v+1); err != ErrBadVersion {
		t.Fatalf("delete at wrong version: %v", err)
	}
	if err := m.Delete("/a/mark", v); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete("/a/mark", AnyVersion); err != nil {
		t.Fatalf("delete of a missing key with AnyVersion: %v", err)
	}
	if n := len(changes); n != 4 || changes[2].Key != "/a/lock" || changes[2].New != nil || changes[3].Key != "/a/mark" || changes[3].New != nil {
		t.Fatalf("changes %+v", changes)
	}
}

// TestBookieListEntries: ranges of the entries a bookie holds.
func TestBookieListEntries(t *testing.T) {
	s := New(1)
	b := NewBookie(s, "b", BookieConfig{FsyncMin: time.Millisecond, FsyncMax: time.Millisecond})
	for _, e := range []int64{0, 1, 2, 5, 7, 8} {
		b.Handle(&bk.Request{Op: bk.OpAddEntry, LedgerID: 1, EntryID: e, Body: []byte{1}}, func(any) {})
	}
	var got []bk.Range
	b.Handle(&bk.Request{Op: bk.OpListEntries, LedgerID: 1}, func(r any) { got = r.(*bk.Response).Ranges })
	want := []bk.Range{{First: 0, Last: 2}, {First: 5, Last: 5}, {First: 7, Last: 8}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("ranges %v", got)
	}
	var st bk.Status
	b.Handle(&bk.Request{Op: bk.OpListEntries, LedgerID: 2}, func(r any) { st = r.(*bk.Response).Status })
	if st != bk.StatusNoSuchLedger {
		t.Fatalf("unknown ledger: %v", st)
	}
}
