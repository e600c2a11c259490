package txnbuf

import (
	"runtime"
	"testing"

	"github.com/magnetar-io/magnetar/txn"
)

// TestMemoryWithCommittedHistory: a buffer's state is proportional to its open
// transactions, not to its history — after 100,000 committed transactions it holds nothing
// of them, and the heap it grew by is small. Each transaction registers, appends two
// entries, commits, and its apply completes.
func TestMemoryWithCommittedHistory(t *testing.T) {
	c := New()
	c.Load(Loaded{Aborted: map[txn.ID]Position{}})
	c.TakeReady()
	pos := Position{LedgerID: 1, EntryID: -1}
	perform := func() {
		for {
			r := c.TakeReady()
			for _, reg := range r.Registers {
				if err := c.Registered(reg.Tag, Registered, nil); err != nil {
					t.Fatal(err)
				}
			}
			for _, w := range r.Writes {
				c.Written(0, w.Tag, 1, nil)
			}
			if len(r.Registers) == 0 && len(r.Writes) == 0 {
				return
			}
		}
	}
	run := func(from, n uint64) {
		for s := from; s < from+n; s++ {
			id := txn.ID{Most: 0, Least: s}
			if v, _ := c.Admit(id); v != Hold {
				t.Fatalf("txn %d: first admit %v", s, v)
			}
			perform()
			for i := 0; i < 2; i++ {
				if v, err := c.Admit(id); v != Append {
					t.Fatalf("txn %d: admit %v %v", s, v, err)
				}
				c.Appending(id)
				pos.EntryID++
				c.Added(&id, pos, true)
			}
			c.Ended(id, txn.Committed)
			perform()
		}
	}
	run(1, 1000) // warm up (maps, slices)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run(1001, 100_000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if c.Open() != 0 || len(c.Aborted()) != 0 || len(c.applyQ) != 0 || c.MaxRead() != nil {
		t.Fatalf("after 100k committed transactions: open %d, aborted %d, queued %d, bound %v",
			c.Open(), len(c.Aborted()), len(c.applyQ), c.MaxRead())
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap after 100k committed transactions: %+d bytes", grew)
	if grew > 1<<20 {
		t.Fatalf("heap grew by %d bytes over 100k committed transactions", grew)
	}
}
