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
	q.Close()
	if q.Push([2]int{}) {
		t.Fatal("Push accepted after Close")
	}
	if b := q.Drain(nil); len(b) != 0 {
		t.Fatalf("Drain after Close: %v", b)
	}
}
