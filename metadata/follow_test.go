package metadata_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// faultyStore is a real store whose listings can fail ("unreachable") and whose running
// watch can be broken, as a lost stream or a compaction ends one.
type faultyStore struct {
	metadata.Store
	mu struct {
		sync.Mutex
		listFails int // the next listFails listings fail
		lists     int // listings asked for
		stopWatch context.CancelFunc
	}
}

var errUnreachable = errors.New("test: store unreachable")

func (s *faultyStore) List(ctx context.Context, prefix string) ([]metadata.KV, int64, error) {
	s.mu.Lock()
	s.mu.lists++
	fail := s.mu.listFails > 0
	if fail {
		s.mu.listFails--
	}
	s.mu.Unlock()
	if fail {
		return nil, 0, errUnreachable
	}
	return s.Store.List(ctx, prefix)
}

func (s *faultyStore) Watch(ctx context.Context, prefix string, fromRev int64) *metadata.Watch {
	wctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.mu.stopWatch = cancel
	s.mu.Unlock()
	return s.Store.Watch(wctx, prefix, fromRev)
}

// breakWatch ends the running watch.
func (s *faultyStore) breakWatch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.stopWatch()
}

func (s *faultyStore) lists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.lists
}

// next returns the next update from ups, failing the test after waitFor.
func next(t *testing.T, ups <-chan metadata.Update) metadata.Update {
	t.Helper()
	select {
	case u, ok := <-ups:
		if !ok {
			t.Fatal("follower stopped")
		}
		return u
	case <-time.After(waitFor):
		t.Fatal("no update")
	}
	panic("unreachable")
}

func listedKeys(t *testing.T, u metadata.Update) []string {
	t.Helper()
	if u.Kind != metadata.Listed {
		t.Fatalf("update %v (%+v), want a listing", u.Kind, u)
	}
	return keysOf(u.KVs)
}

func wantChange(t *testing.T, u metadata.Update, typ metadata.EventType, key string) {
	t.Helper()
	if u.Kind != metadata.Changed || len(u.Events) != 1 || u.Events[0].Type != typ || u.Events[0].KV.Key != key {
		t.Fatalf("update %v %+v, want one change of type %d of %s", u.Kind, u.Events, typ, key)
	}
}

func TestFollower(t *testing.T) {
	eps := metadatatest.Embedded(t)

	// A broken watch ends in WatchEnded, then a listing that shows what changed meanwhile
	// (a key put and one deleted while no watch ran), then changes from the new listing.
	t.Run("RelistAfterWatchEnds", func(t *testing.T) {
		s := &faultyStore{Store: metadatatest.NewStore(t, eps)}
		ctx, cancel := context.WithCancel(ctxT(t))
		mustPut(t, s, "/f/a", "1", metadata.AnyVersion)
		mustPut(t, s, "/other", "x", metadata.AnyVersion)
		ups := make(chan metadata.Update, 16)
		done := make(chan struct{})
		go func() {
			defer close(done)
			metadata.Follower{Store: s, Prefix: "/f/"}.Run(ctx, func(u metadata.Update) {
				if u.Kind == metadata.WatchEnded { // the gap before the next listing
					mustPut(t, s, "/f/b", "2", metadata.AnyVersion)
					if err := s.Delete(ctx, "/f/a", metadata.AnyVersion); err != nil {
						t.Error(err)
					}
				}
				ups <- u
			})
		}()
		if got := listedKeys(t, next(t, ups)); !slices.Equal(got, []string{"/f/a"}) {
			t.Fatalf("first listing %v, want [/f/a]", got)
		}
		mustPut(t, s, "/f/c", "3", metadata.AnyVersion)
		wantChange(t, next(t, ups), metadata.EventPut, "/f/c")
		s.breakWatch()
		if u := next(t, ups); u.Kind != metadata.WatchEnded || !errors.Is(u.Err, context.Canceled) {
			t.Fatalf("update %v (err %v), want WatchEnded", u.Kind, u.Err)
		}
		if got := listedKeys(t, next(t, ups)); !slices.Equal(got, []string{"/f/b", "/f/c"}) {
			t.Fatalf("listing after the broken watch %v, want [/f/b /f/c]", got)
		}
		if err := s.Delete(ctx, "/f/c", metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
		wantChange(t, next(t, ups), metadata.EventDelete, "/f/c")
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Fatal("Run did not return after ctx ended")
		}
	})

	// A Resume from a compacted revision: the watch fails with ErrCompacted, and the
	// follower lists again.
	t.Run("ResumeCompacted", func(t *testing.T) {
		s := metadatatest.OpenStore(t, eps, metadatatest.RandomNamespace())
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		v1 := mustPut(t, s, "/f/k", "1", metadata.AnyVersion)
		v2 := mustPut(t, s, "/f/k", "2", metadata.AnyVersion)
		if err := s.Compact(ctx, int64(v2)); err != nil {
			t.Fatal(err)
		}
		ups := metadata.Follower{Store: s, Prefix: "/f/"}.ResumeChan(ctx, int64(v1)-1)
		if u := next(t, ups); u.Kind != metadata.WatchEnded || !errors.Is(u.Err, metadata.ErrCompacted) {
			t.Fatalf("update %v (err %v), want WatchEnded with ErrCompacted", u.Kind, u.Err)
		}
		u := next(t, ups)
		if got := listedKeys(t, u); !slices.Equal(got, []string{"/f/k"}) || string(u.KVs[0].Value) != "2" {
			t.Fatalf("listing %+v, want /f/k=2", u.KVs)
		}
	})

	// While listings fail the follower waits Base, doubling up to Max, between them (one
	// listing per wait: no spinning); a watch batch resets the delay, and PauseAfterWatch
	// waits it after a broken watch too.
	t.Run("BackoffWhileUnreachable", func(t *testing.T) {
		s := &faultyStore{Store: metadatatest.NewStore(t, eps)}
		s.mu.listFails = 5
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		var mu sync.Mutex
		var waits []time.Duration
		ms := time.Millisecond
		f := metadata.Follower{Store: s, Prefix: "/f/", Retry: backoff.Policy{Base: 10 * ms, Max: 40 * ms},
			PauseAfterWatch: true}.WithSleep(func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			return ctx.Err() == nil
		})
		waited := func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(waits)
		}
		ups := f.Chan(ctx)
		if got := listedKeys(t, next(t, ups)); len(got) != 0 {
			t.Fatalf("listing %v, want none", got)
		}
		want := []time.Duration{10 * ms, 20 * ms, 40 * ms, 40 * ms, 40 * ms}
		if got := waited(); !slices.Equal(got, want) {
			t.Fatalf("waits %v, want %v", got, want)
		}
		if got := s.lists(); got != 6 {
			t.Fatalf("%d listings, want 6 (5 failed, one per wait)", got)
		}
		mustPut(t, s, "/f/a", "1", metadata.AnyVersion)
		wantChange(t, next(t, ups), metadata.EventPut, "/f/a")
		s.breakWatch()
		if u := next(t, ups); u.Kind != metadata.WatchEnded {
			t.Fatalf("update %v, want WatchEnded", u.Kind)
		}
		if got := listedKeys(t, next(t, ups)); !slices.Equal(got, []string{"/f/a"}) {
			t.Fatalf("listing %v, want [/f/a]", got)
		}
		if got := waited(); !slices.Equal(got, append(want, 10*ms)) {
			t.Fatalf("waits %v, want %v then Base after the broken watch", got, want)
		}
	})

	// RevisionKey: the listings carry no keys, and the watch still sees every change of
	// the prefix after them.
	t.Run("RevisionKey", func(t *testing.T) {
		s := metadatatest.NewStore(t, eps)
		mustPut(t, s, "/f/a", "1", metadata.AnyVersion)
		ups := metadata.Follower{Store: s, Prefix: "/f/", RevisionKey: "/rev"}.Chan(ctxT(t))
		if u := next(t, ups); u.Kind != metadata.Listed || len(u.KVs) != 0 || u.Rev == 0 {
			t.Fatalf("update %v %+v rev %d, want an empty listing with a revision", u.Kind, u.KVs, u.Rev)
		}
		mustPut(t, s, "/f/b", "1", metadata.AnyVersion)
		wantChange(t, next(t, ups), metadata.EventPut, "/f/b")
	})

	// Cancelling ctx ends the follower while it waits for an unreachable store and while
	// it watches: the channel closes (and goleak finds no goroutine left).
	t.Run("CancelStops", func(t *testing.T) {
		s := &faultyStore{Store: metadatatest.NewStore(t, eps)}
		s.mu.listFails = 1 << 30
		for _, watching := range []bool{false, true} {
			if watching {
				s.mu.Lock()
				s.mu.listFails = 0
				s.mu.Unlock()
			}
			ctx, cancel := context.WithCancel(ctxT(t))
			waiting := make(chan struct{}, 1)
			f := metadata.Follower{Store: s, Prefix: "/f/"}.WithSleep(func(ctx context.Context, _ time.Duration) bool {
				waiting <- struct{}{}
				<-ctx.Done() // an unreachable store: only ctx ends the wait
				return false
			})
			ups := f.Chan(ctx)
			if watching {
				listedKeys(t, next(t, ups))
			} else {
				select {
				case <-waiting:
				case <-time.After(waitFor):
					t.Fatal("no wait after a failed listing")
				}
			}
			cancel()
			select {
			case _, ok := <-ups:
				if ok {
					t.Fatal("an update after cancel")
				}
			case <-time.After(waitFor):
				t.Fatalf("follower (watching %v) did not stop after cancel", watching)
			}
		}
	})
}
