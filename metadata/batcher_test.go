package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// gatedStore counts commits and holds the first one until released, so that calls queue.
type gatedStore struct {
	metadata.Store
	mu      sync.Mutex
	commits []int // operations per commit
	gate    chan struct{}
	entered chan struct{}
}

func (g *gatedStore) Commit(ctx context.Context, ops []metadata.Op) ([]metadata.Version, error) {
	g.mu.Lock()
	g.commits = append(g.commits, len(ops))
	first := len(g.commits) == 1
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Commit(ctx, ops)
}

// TestBatcherGroupCommit: calls that come while a commit is out go together in the next;
// each gets its own versions, a stale one fails alone with ErrBadVersion, and a shared
// fence goes once.
func TestBatcherGroupCommit(t *testing.T) {
	st := metadatatest.NewStore(t, metadatatest.Embedded(t))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	fenceVer, err := st.Put(ctx, "/fence", []byte("f"), metadata.NotExists)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st, gate: make(chan struct{}), entered: make(chan struct{})}
	b := metadata.NewBatcher(g, 0, 10*time.Second)

	type result struct {
		vers []metadata.Version
		err  error
	}
	first := make(chan result, 1)
	go func() {
		vs, err := b.Commit(ctx, []metadata.Op{{Key: "/k/first", Value: []byte("1"), Expected: metadata.NotExists}})
		first <- result{vs, err}
	}()
	<-g.entered // the first commit is out: the next calls queue behind it
	const n = 5
	results := make([]chan result, n)
	var queued sync.WaitGroup
	for i := range results {
		results[i] = make(chan result, 1)
		queued.Add(1)
		go func(i int) {
			ops := []metadata.Op{{Key: fmt.Sprintf("/k/%d", i), Value: []byte("v"), Expected: metadata.NotExists},
				{Key: "/fence", Expected: fenceVer, Check: true}}
			if i == n-1 {
				ops[0].Expected = 12345 // stale: the key does not exist
			}
			queued.Done()
			vs, err := b.Commit(ctx, ops)
			results[i] <- result{vs, err}
		}(i)
	}
	queued.Wait()
	// Let the goroutines reach the queue; a later arrival only makes a third commit, which
	// the count below would show (it does not hide a missing group).
	deadline := time.Now().Add(waitFor)
	for b.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls queued", b.Queued())
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
	}
	close(g.gate)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for i, ch := range results {
		r := <-ch
		if i == n-1 {
			if !errors.Is(r.err, metadata.ErrBadVersion) {
				t.Fatalf("stale call: %v, want ErrBadVersion", r.err)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		kv, err := st.Get(ctx, fmt.Sprintf("/k/%d", i))
		if err != nil || kv.Version != r.vers[0] || r.vers[1] != 0 {
			t.Fatalf("call %d: versions %v, stored %v %v", i, r.vers, kv.Version, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// The first alone; then one shared commit of all five (5 puts + 1 fence), refused for the
	// stale one; then each of the five alone.
	want := []int{1, n + 1, 2, 2, 2, 2, 2}
	if fmt.Sprint(g.commits) != fmt.Sprint(want) {
		t.Fatalf("commits of %v operations, want %v", g.commits, want)
	}
}
