package inbox

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ownedCounter is a component run by an Owner: step drains its queue into plain (not
// atomic) fields, so the race detector reports two steps that overlap or that are not
// ordered by happens-before, and active catches overlap without it.
type ownedCounter struct {
	o      *Owner
	q      *Queue[int]
	batch  []int
	active atomic.Int32
	steps  int
	sum    int
	seen   map[int]bool
	done   chan int // receives each value once processed
}

func newOwnedCounter(linger time.Duration) *ownedCounter {
	c := &ownedCounter{seen: map[int]bool{}, done: make(chan int, 1<<16)}
	c.o = newTestOwner(c.step, linger)
	c.q = NewOwned[int](c.o)
	return c
}

func (c *ownedCounter) step() {
	if n := c.active.Add(1); n != 1 {
		panic("two owners run step at once")
	}
	defer c.active.Add(-1)
	c.steps++
	c.batch = c.q.Drain(c.batch)
	for _, v := range c.batch {
		if c.seen[v] {
			panic("a value was drained twice")
		}
		c.seen[v] = true
		c.sum += v
		c.done <- v
	}
}

// parkSignals maps a test's owners to the channel their onPark hook signals.
var parkSignals sync.Map // *Owner → chan struct{}

// newTestOwner is NewOwner whose parking is signalled for waitParked.
func newTestOwner(step func(), linger time.Duration) *Owner {
	o := NewOwner(step, linger)
	ch := make(chan struct{}, 1)
	o.SetParkHook(func() {
		select {
		case ch <- struct{}{}:
		default: // a signal is pending already: the waiter looks again after taking it
		}
	})
	parkSignals.Store(o, ch)
	return o
}

// waitParked waits until o (made by newTestOwner) has no goroutine once its work is done,
// failing after a minute.
func waitParked(t *testing.T, o *Owner) {
	t.Helper()
	v, _ := parkSignals.Load(o)
	ch := v.(chan struct{})
	timeout := time.After(time.Minute)
	for o.Running() {
		select {
		case <-ch:
		case <-timeout:
			t.Fatal("owner still running a minute after its last work")
		}
	}
}

// TestOwnerOneAtATime: values pushed by many goroutines, with the owner parking and
// starting again in between (each pusher waits for its value before pushing the next, so
// the queue often runs empty), are each processed exactly once by one owner at a time;
// once the pushes stop, the owner has no goroutine.
func TestOwnerOneAtATime(t *testing.T) {
	for _, linger := range []time.Duration{0, 50 * time.Microsecond, time.Millisecond} {
		t.Run(fmt.Sprintf("linger=%v", linger), func(t *testing.T) { testOwnerOneAtATime(t, linger) })
	}
}

func testOwnerOneAtATime(t *testing.T, linger time.Duration) {
	const pushers, each = 8, 2000
	c := newOwnedCounter(linger)
	c.o.Release()
	waiters := make([]chan int, pushers)
	for p := range waiters {
		waiters[p] = make(chan int, 1)
	}
	// Route processed values back to their pusher (the value encodes it).
	go func() {
		for v := range c.done {
			waiters[v%pushers] <- v
		}
	}()
	var wg sync.WaitGroup
	for p := range pushers {
		wg.Go(func() {
			for i := range each {
				v := i*pushers + p
				if !c.q.Push(v) {
					t.Error("Push refused")
					return
				}
				select {
				case got := <-waiters[p]:
					if got != v {
						t.Errorf("pusher %d: got %d back, want %d", p, got, v)
						return
					}
				case <-time.After(time.Minute):
					t.Errorf("pusher %d: value %d not processed within a minute (a lost wake-up)", p, v)
					return
				}
			}
		})
	}
	wg.Wait()
	waitParked(t, c.o)
	close(c.done)
	n := pushers * each
	if c.sum != n*(n-1)/2 || len(c.seen) != n {
		t.Fatalf("processed %d values summing to %d, want %d summing to %d", len(c.seen), c.sum, n, n*(n-1)/2)
	}
	if c.steps < 2 {
		t.Fatalf("%d steps: the owner never ran twice", c.steps)
	}
}

// TestOwnerHeldUntilRelease: pushes before Release run nothing (the creator still owns the
// state); Release starts the owner, which processes them and parks.
func TestOwnerHeldUntilRelease(t *testing.T) {
	c := newOwnedCounter(0)
	for i := range 3 {
		c.q.Push(i)
	}
	c.sum = 100 // the creator sets state up while it holds the owner
	select {
	case v := <-c.done:
		t.Fatalf("value %d processed before Release", v)
	default:
	}
	c.o.Release()
	for range 3 {
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			t.Fatal("values pushed before Release not processed within a minute")
		}
	}
	waitParked(t, c.o)
	if c.sum != 103 {
		t.Fatalf("sum %d, want 103", c.sum)
	}
}

// TestOwnerReleaseIdle: Release without work parks at once; the first push starts it.
func TestOwnerReleaseIdle(t *testing.T) {
	c := newOwnedCounter(0)
	c.o.Release()
	if c.o.Running() {
		t.Fatal("an owner released without work is running")
	}
	c.q.Push(7)
	select {
	case v := <-c.done:
		if v != 7 {
			t.Fatalf("got %d, want 7", v)
		}
	case <-time.After(time.Minute):
		t.Fatal("push to a parked owner not processed within a minute")
	}
	waitParked(t, c.o)
}

// TestOwnerWakeDuringStep: a Wake while step runs makes step run again before the owner
// parks, so a value pushed after the step's Drain is not stranded.
func TestOwnerWakeDuringStep(t *testing.T) {
	entered, proceed := make(chan struct{}), make(chan struct{})
	var q *Queue[int]
	var got []int
	first := true
	o := newTestOwner(func() {
		if first {
			first = false
			close(entered)
			<-proceed
		}
		got = append(got, q.Drain(nil)...)
	}, 0)
	q = NewOwned[int](o)
	o.Release()
	o.Wake() // a step with nothing queued: it blocks until proceed
	<-entered
	q.Push(1) // lands while the first step runs
	close(proceed)
	waitParked(t, o)
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("drained %v, want [1]", got)
	}
}

// TestOwnedQueueClosed: a closed owned queue refuses pushes and wakes nobody.
func TestOwnedQueueClosed(t *testing.T) {
	c := newOwnedCounter(0)
	c.o.Release()
	c.q.Close()
	if c.q.Push(1) {
		t.Fatal("Push accepted after Close")
	}
	if c.o.Running() {
		t.Fatal("a refused push started the owner")
	}
	if c.q.Signal() != nil {
		t.Fatal("an owned queue has a signal channel")
	}
}

// TestOwnerLingers: a lingering owner takes work that comes within its linger period on the
// same goroutine, and gives up ownership once none came for the period.
func TestOwnerLingers(t *testing.T) {
	c := newOwnedCounter(time.Hour) // it lingers until the test has looked
	c.o.Release()
	for i := range 3 {
		c.q.Push(i)
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			t.Fatal("push to a lingering owner not processed within a minute")
		}
	}
	if !c.o.Running() {
		t.Fatal("an owner with a linger of an hour gave up its goroutine")
	}
	c.o.Stop() // ends the linger
	waitParked(t, c.o)
	c.q.Push(9)
	if c.o.Running() {
		t.Fatal("a push started a stopped owner")
	}
	short := newOwnedCounter(time.Millisecond)
	short.o.Release()
	short.q.Push(1)
	<-short.done
	waitParked(t, short.o) // the linger ends
}
