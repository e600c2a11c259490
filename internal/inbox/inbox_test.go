package inbox

import (
	"sync"
	"testing"
)

// TestQueue: values pushed from many goroutines all reach the owner, each pusher's in its
// order; after Close nothing is accepted.
func TestQueue(t *testing.T) {
	const pushers, each = 4, 1000
	q := New[[2]int]()
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Go(func() {
			for i := range each {
				if !q.Push([2]int{p, i}) {
					t.Error("Push refused before Close")
				}
			}
		})
	}
	next := make([]int, pushers)
	var batch [][2]int
	for got := 0; got < pushers*each; {
		<-q.Signal()
		batch = q.Drain(batch)
		for _, v := range batch {
			if v[1] != next[v[0]] {
				t.Fatalf("pusher %d: got %d, want %d", v[0], v[1], next[v[0]])
			}
			next[v[0]]++
			got++
		}
	}
	wg.Wait()
	if left := q.Close(); len(left) != 0 {
		t.Fatalf("Close after draining everything returned %v", left)
	}
	if q.Push([2]int{}) {
		t.Fatal("Push accepted after Close")
	}
	if b := q.Drain(nil); len(b) != 0 {
		t.Fatalf("Drain after Close: %v", b)
	}
}

// TestCloseReturnsQueued: Close hands back what the owner did not drain, in push order, once.
func TestCloseReturnsQueued(t *testing.T) {
	q := New[int]()
	for i := range 3 {
		q.Push(i)
	}
	if got := q.Close(); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("Close returned %v, want [0 1 2]", got)
	}
	if got := q.Close(); got != nil {
		t.Fatalf("second Close returned %v, want nil", got)
	}
}

// TestCompact: Compact keeps queued values and drops only an empty queue's storage.
func TestCompact(t *testing.T) {
	q := New[int]()
	for i := range 100 {
		q.Push(i)
	}
	q.Compact()
	if got := q.Drain(nil); len(got) != 100 || got[99] != 99 {
		t.Fatalf("Compact lost values: drained %d", len(got))
	}
	q.Compact()
	if q.q != nil {
		t.Fatalf("an empty queue keeps storage of %d after Compact", cap(q.q))
	}
	q.Push(7)
	if got := q.Drain(nil); len(got) != 1 || got[0] != 7 {
		t.Fatalf("after Compact: drained %v", got)
	}
}
