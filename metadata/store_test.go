package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait on an event. Generous: the machine is shared.
const waitFor = 20 * time.Second

func TestEmbeddedStore(t *testing.T) {
	eps := metadatatest.Embedded(t)
	testStore(t, storeFactory(eps))
	t.Run("SessionRevokedElsewhere", func(t *testing.T) { testSessionRevokedElsewhere(t, eps) })
}

// TestInProcessStore: a store through in-process calls to the embedded server (as
// standalone opens it) behaves as one over TCP.
func TestInProcessStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{Name: "inproc", DataDir: t.TempDir(),
		ListenClient: "127.0.0.1:0", ListenPeer: "127.0.0.1:0", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	testStore(t, namespacedStores(func(t *testing.T, ns string) metadata.Store {
		st, err := e.OpenStore(context.Background(), metadata.Config{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}))
}

func TestExternalStore(t *testing.T) {
	eps := metadatatest.External(t)
	testStore(t, storeFactory(eps))
	t.Run("SessionRevokedElsewhere", func(t *testing.T) { testSessionRevokedElsewhere(t, eps) })
}

// storeFactory opens stores on eps. Stores opened for the same (sub)test share a namespace, so
// one subtest can play two processes; different subtests never see each other's keys.
func storeFactory(eps []string) func(t *testing.T) metadata.Store {
	return namespacedStores(func(t *testing.T, ns string) metadata.Store { return metadatatest.OpenStore(t, eps, ns) })
}

// namespacedStores opens stores with open, in one namespace per (sub)test.
func namespacedStores(open func(t *testing.T, ns string) metadata.Store) func(t *testing.T) metadata.Store {
	var mu sync.Mutex
	namespaces := map[string]string{}
	return func(t *testing.T) metadata.Store {
		mu.Lock()
		ns, ok := namespaces[t.Name()]
		if !ok {
			ns = metadatatest.RandomNamespace()
			namespaces[t.Name()] = ns
		}
		mu.Unlock()
		return open(t, ns)
	}
}

// testStore is the conformance suite every Store implementation must pass.
func testStore(t *testing.T, newStore func(t *testing.T) metadata.Store) {
	t.Run("GetPutCAS", func(t *testing.T) { testGetPutCAS(t, newStore(t)) })
	t.Run("DeleteGuarded", func(t *testing.T) { testDeleteGuarded(t, newStore(t)) })
	t.Run("ListRange", func(t *testing.T) { testListRange(t, newStore(t)) })
	t.Run("WatchOrderAndResume", func(t *testing.T) { testWatchOrderAndResume(t, newStore(t)) })
	t.Run("WatchConcurrentWriters", func(t *testing.T) { testWatchConcurrentWriters(t, newStore(t)) })
	t.Run("WatchCompacted", func(t *testing.T) { testWatchCompacted(t, newStore(t)) })
	t.Run("SessionClose", func(t *testing.T) { testSessionClose(t, newStore(t)) })
	t.Run("SessionOwnerDies", func(t *testing.T) { testSessionOwnerDies(t, newStore(t), newStore(t)) })
	t.Run("NextID", func(t *testing.T) { testNextID(t, newStore(t), newStore(t)) })
	t.Run("Commit", func(t *testing.T) { testCommit(t, newStore(t)) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, newStore(t)) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, s metadata.Store, key, val string, expected metadata.Version) metadata.Version {
	t.Helper()
	v, err := s.Put(ctxT(t), key, []byte(val), expected)
	if err != nil {
		t.Fatalf("Put(%q, %q, %d): %v", key, val, expected, err)
	}
	return v
}

func testGetPutCAS(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	if _, err := s.Get(ctx, "/a"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get missing: err %v, want ErrNotFound", err)
	}
	v1 := mustPut(t, s, "/a", "one", metadata.NotExists)
	if v1 <= 0 {
		t.Fatalf("first version %d, want > 0", v1)
	}
	kv, err := s.Get(ctx, "/a")
	if err != nil {
		t.Fatal(err)
	}
	if kv.Key != "/a" || string(kv.Value) != "one" || kv.Version != v1 || kv.Created != int64(v1) || kv.Lease != 0 {
		t.Fatalf("Get = %+v, want key /a value one version %d created %d lease 0", kv, v1, v1)
	}
	if _, err := s.Put(ctx, "/a", []byte("again"), metadata.NotExists); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Put NotExists on existing key: err %v, want ErrBadVersion", err)
	}
	v2 := mustPut(t, s, "/a", "two", v1)
	if v2 <= v1 {
		t.Fatalf("CAS version %d, want > %d", v2, v1)
	}
	if _, err := s.Put(ctx, "/a", []byte("stale"), v1); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Put with stale version: err %v, want ErrBadVersion", err)
	}
	if _, err := s.Put(ctx, "/missing", []byte("x"), v2); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Put with a version on a missing key: err %v, want ErrBadVersion", err)
	}
	if _, err := s.Get(ctx, "/missing"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("failed CAS created the key: err %v", err)
	}
	if _, err := s.Put(ctx, "/a", []byte("bad"), -7); err == nil || errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Put with invalid expected -7: err %v, want a non-ErrBadVersion error", err)
	}
	v3 := mustPut(t, s, "/a", "three", metadata.AnyVersion)
	if v3 <= v2 {
		t.Fatalf("unconditional put version %d, want > %d", v3, v2)
	}
	kv, err = s.Get(ctx, "/a")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "three" || kv.Version != v3 || kv.Created != int64(v1) {
		t.Fatalf("Get = %+v, want value three version %d created %d", kv, v3, v1)
	}
	// An empty value is a value, not a missing key.
	mustPut(t, s, "/empty", "", metadata.NotExists)
	if kv, err := s.Get(ctx, "/empty"); err != nil || len(kv.Value) != 0 {
		t.Fatalf("Get empty value = %+v, %v", kv, err)
	}
}

func testDeleteGuarded(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	if err := s.Delete(ctx, "/d", metadata.AnyVersion); err != nil {
		t.Fatalf("Delete missing with AnyVersion: %v, want nil", err)
	}
	if err := s.Delete(ctx, "/d", 12345); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Delete missing with a version: err %v, want ErrBadVersion", err)
	}
	if err := s.Delete(ctx, "/d", metadata.NotExists); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Delete missing with NotExists: err %v, want ErrBadVersion", err)
	}
	v := mustPut(t, s, "/d", "x", metadata.NotExists)
	if err := s.Delete(ctx, "/d", v+1000); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Delete with wrong version: err %v, want ErrBadVersion", err)
	}
	if err := s.Delete(ctx, "/d", metadata.NotExists); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("Delete existing with NotExists: err %v, want ErrBadVersion", err)
	}
	if _, err := s.Get(ctx, "/d"); err != nil {
		t.Fatalf("failed guarded delete removed the key: %v", err)
	}
	if err := s.Delete(ctx, "/d", v); err != nil {
		t.Fatalf("Delete with right version: %v", err)
	}
	if _, err := s.Get(ctx, "/d"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get after delete: err %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "/d", v); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("second guarded delete: err %v, want ErrBadVersion", err)
	}
	mustPut(t, s, "/d", "y", metadata.NotExists)
	if err := s.Delete(ctx, "/d", metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "/d"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get after unconditional delete: err %v, want ErrNotFound", err)
	}
}

func keysOf(kvs []metadata.KV) []string {
	keys := make([]string, len(kvs))
	for i, kv := range kvs {
		keys[i] = kv.Key
	}
	return keys
}

func testListRange(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	var last metadata.Version
	for _, k := range []string{"/l/c", "/k", "/l/a", "/m/z", "/l/b/x", "/l/b", "/l0"} {
		last = mustPut(t, s, k, "v"+k, metadata.NotExists)
	}
	kvs, rev, err := s.List(ctx, "/l/")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(kvs), []string{"/l/a", "/l/b", "/l/b/x", "/l/c"}; !slices.Equal(got, want) {
		t.Fatalf("List(/l/) keys %q, want %q", got, want)
	}
	for _, kv := range kvs {
		if string(kv.Value) != "v"+kv.Key || kv.Version <= 0 || int64(kv.Version) > rev {
			t.Fatalf("List entry %+v inconsistent with list revision %d", kv, rev)
		}
	}
	if rev < int64(last) {
		t.Fatalf("List revision %d < last write %d", rev, last)
	}
	empty, rev2, err := s.List(ctx, "/nothing/")
	if err != nil || len(empty) != 0 || rev2 < rev {
		t.Fatalf("List(/nothing/) = %v, rev %d, %v; want empty at rev >= %d", empty, rev2, err, rev)
	}
	all, _, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(all), []string{"/k", "/l/a", "/l/b", "/l/b/x", "/l/c", "/l0", "/m/z"}; !slices.Equal(got, want) {
		t.Fatalf("List(\"\") keys %q, want %q (only this namespace, sorted)", got, want)
	}

	for _, tc := range []struct {
		start, end string
		limit      int
		want       []string
	}{
		{"/l/a", "/l/c", 0, []string{"/l/a", "/l/b", "/l/b/x"}},
		{"/l/a", "/l/c", 2, []string{"/l/a", "/l/b"}},
		{"/l/", "/l0", -1, []string{"/l/a", "/l/b", "/l/b/x", "/l/c"}},
		{"/l/b", "", 0, []string{"/l/b", "/l/b/x", "/l/c", "/l0", "/m/z"}},
		{"/l/b", "", 1, []string{"/l/b"}},
		{"/n", "/z", 0, []string{}},
		{"/l/c", "/l/a", 0, []string{}},
	} {
		got, err := s.Range(ctx, tc.start, tc.end, tc.limit)
		if err != nil {
			t.Fatalf("Range(%q, %q, %d): %v", tc.start, tc.end, tc.limit, err)
		}
		if !slices.Equal(keysOf(got), tc.want) {
			t.Errorf("Range(%q, %q, %d) = %q, want %q", tc.start, tc.end, tc.limit, keysOf(got), tc.want)
		}
	}
}

// recv waits for the next batch or the channel's end, with a deadline.
func recv(t *testing.T, w *metadata.Watch) (metadata.WatchBatch, bool) {
	t.Helper()
	select {
	case b, ok := <-w.C:
		return b, ok
	case <-time.After(waitFor):
		t.Fatalf("no watch batch within %v", waitFor)
		return metadata.WatchBatch{}, false
	}
}

// collect receives batches until it has n events, checking batch invariants on the way.
func collect(t *testing.T, w *metadata.Watch, n int) []metadata.Event {
	t.Helper()
	var evs []metadata.Event
	for len(evs) < n {
		b, ok := recv(t, w)
		if !ok {
			t.Fatalf("watch ended after %d of %d events: %v", len(evs), n, w.Err())
		}
		if len(b.Events) == 0 {
			t.Fatalf("empty watch batch %+v", b)
		}
		if lastRev := int64(b.Events[len(b.Events)-1].KV.Version); b.Rev != lastRev {
			t.Fatalf("batch Rev %d, want its last event's revision %d", b.Rev, lastRev)
		}
		evs = append(evs, b.Events...)
	}
	if len(evs) != n {
		t.Fatalf("got %d events, want %d: %+v", len(evs), n, evs)
	}
	return evs
}

// waitClosed waits for the watch channel to close and returns Err.
func waitClosed(t *testing.T, w *metadata.Watch) error {
	t.Helper()
	for {
		b, ok := recv(t, w)
		if !ok {
			return w.Err()
		}
		t.Fatalf("unexpected batch %+v while waiting for the watch to end", b)
	}
}

type wantEv struct {
	typ metadata.EventType
	key string
	val string
	ver metadata.Version
}

func checkEvents(t *testing.T, got []metadata.Event, want []wantEv) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.typ || g.KV.Key != w.key || string(g.KV.Value) != w.val || g.KV.Version != w.ver {
			t.Fatalf("event %d = {type %d key %q value %q version %d}, want {type %d key %q value %q version %d}",
				i, g.Type, g.KV.Key, g.KV.Value, g.KV.Version, w.typ, w.key, w.val, w.ver)
		}
	}
}

func testWatchOrderAndResume(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	_, rev, err := s.List(ctx, "/w/")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := s.Watch(wctx, "/w/", rev+1)

	va := mustPut(t, s, "/w/a", "a1", metadata.NotExists)
	mustPut(t, s, "/x/outside", "no", metadata.AnyVersion) // not under the prefix
	vb := mustPut(t, s, "/w/b", "b1", metadata.NotExists)
	va2 := mustPut(t, s, "/w/a", "a2", va)
	if err := s.Delete(ctx, "/w/b", vb); err != nil {
		t.Fatal(err)
	}
	_, delRev, err := s.List(ctx, "/w/")
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, w, 4)
	checkEvents(t, evs, []wantEv{
		{metadata.EventPut, "/w/a", "a1", va},
		{metadata.EventPut, "/w/b", "b1", vb},
		{metadata.EventPut, "/w/a", "a2", va2},
		{metadata.EventDelete, "/w/b", "", metadata.Version(delRev)},
	})
	if evs[0].KV.Created != int64(va) || evs[2].KV.Created != int64(va) {
		t.Fatalf("Created of /w/a events = %d, %d, want %d", evs[0].KV.Created, evs[2].KV.Created, va)
	}
	resumeFrom := int64(evs[3].KV.Version) + 1

	// Disconnect: the watch ends with the context's error.
	cancel()
	if err := waitClosed(t, w); !errors.Is(err, context.Canceled) {
		t.Fatalf("watch Err after cancel = %v, want context.Canceled", err)
	}

	// Changes while nobody watches are delivered on resume, and nothing before them.
	vc := mustPut(t, s, "/w/c", "c1", metadata.NotExists)
	if err := s.Delete(ctx, "/w/a", va2); err != nil {
		t.Fatal(err)
	}
	_, delA, err := s.List(ctx, "/w/")
	if err != nil {
		t.Fatal(err)
	}
	w2 := s.Watch(ctx, "/w/", resumeFrom)
	vc2 := mustPut(t, s, "/w/c", "c2", vc) // live after resume
	checkEvents(t, collect(t, w2, 3), []wantEv{
		{metadata.EventPut, "/w/c", "c1", vc},
		{metadata.EventDelete, "/w/a", "", metadata.Version(delA)},
		{metadata.EventPut, "/w/c", "c2", vc2},
	})
	if w2.Err() != nil {
		t.Fatalf("running watch Err = %v, want nil", w2.Err())
	}
}

// testWatchConcurrentWriters checks that a watch delivers exactly the writes made, each once,
// in version order, when several clients write at once.
func testWatchConcurrentWriters(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	_, rev, err := s.List(ctx, "/cw/")
	if err != nil {
		t.Fatal(err)
	}
	w := s.Watch(ctx, "/cw/", rev+1)
	const writers, each = 4, 10
	var (
		mu       sync.Mutex
		versions []metadata.Version
		wg       sync.WaitGroup
		errs     = make(chan error, writers)
	)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				v, err := s.Put(ctx, fmt.Sprintf("/cw/%d", g), []byte(fmt.Sprint(i)), metadata.AnyVersion)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				versions = append(versions, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(versions)
	evs := collect(t, w, writers*each)
	for i, ev := range evs {
		if ev.Type != metadata.EventPut || ev.KV.Version != versions[i] {
			t.Fatalf("event %d = %+v, want a put at version %d (versions %v)", i, ev, versions[i], versions)
		}
	}
}

type compacter interface {
	Compact(ctx context.Context, rev int64) error
}

func testWatchCompacted(t *testing.T, s metadata.Store) {
	c, ok := s.(compacter)
	if !ok {
		t.Skipf("%T cannot compact", s)
	}
	ctx := ctxT(t)
	v1 := mustPut(t, s, "/c/k", "1", metadata.AnyVersion)
	mustPut(t, s, "/c/k", "2", metadata.AnyVersion)
	v3 := mustPut(t, s, "/c/k", "3", metadata.AnyVersion)
	if err := c.Compact(ctx, int64(v3)); err != nil {
		t.Fatal(err)
	}
	w := s.Watch(ctx, "/c/", int64(v1))
	if err := waitClosed(t, w); !errors.Is(err, metadata.ErrCompacted) {
		t.Fatalf("watch from compacted revision: Err = %v, want ErrCompacted", err)
	}
	// The compaction revision itself is still readable.
	w = s.Watch(ctx, "/c/", int64(v3))
	checkEvents(t, collect(t, w, 1), []wantEv{{metadata.EventPut, "/c/k", "3", v3}})
}

func testSessionClose(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	sess, err := s.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if sess.ID() == 0 {
		t.Fatal("session ID 0")
	}
	v, err := sess.Put(ctx, "/e/me", []byte("here"), metadata.NotExists)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Put(ctx, "/e/me", []byte("again"), metadata.NotExists); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("session Put NotExists on existing key: err %v, want ErrBadVersion", err)
	}
	kv, err := s.Get(ctx, "/e/me")
	if err != nil {
		t.Fatal(err)
	}
	if kv.Lease != sess.ID() || kv.Version != v {
		t.Fatalf("ephemeral key %+v, want lease %d version %d", kv, sess.ID(), v)
	}
	select {
	case <-sess.Done():
		t.Fatal("session Done before Close")
	default:
	}
	if err := sess.Close(); err != nil {
		t.Fatalf("session Close: %v", err)
	}
	select {
	case <-sess.Done():
	default:
		t.Fatal("session Done not closed after Close")
	}
	// Close revokes synchronously: the key is gone when Close returns.
	if _, err := s.Get(ctx, "/e/me"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("ephemeral key after session Close: err %v, want ErrNotFound", err)
	}
	if _, err := sess.Put(ctx, "/e/other", []byte("x"), metadata.AnyVersion); !errors.Is(err, metadata.ErrSessionExpired) {
		t.Fatalf("Put on closed session: err %v, want ErrSessionExpired", err)
	}
	if err := sess.Close(); err != nil {
		t.Fatalf("second session Close: %v", err)
	}
}

// testSessionOwnerDies plays a process that dies holding an ephemeral key: its store is closed
// without revoking the lease, so keep-alives stop and etcd expires the key after the ttl.
func testSessionOwnerDies(t *testing.T, owner, observer metadata.Store) {
	ctx := ctxT(t)
	const ttl = 2 * time.Second
	sess, err := owner.NewSession(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Put(ctx, "/e/owner", []byte("alive"), metadata.NotExists); err != nil {
		t.Fatal(err)
	}
	kv, rev, err := observer.List(ctx, "/e/")
	if err != nil || len(kv) != 1 || kv[0].Lease != sess.ID() {
		t.Fatalf("observer sees %+v, %v; want the owner's ephemeral key", kv, err)
	}
	w := observer.Watch(ctx, "/e/", rev+1)

	killed := time.Now()
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	default:
		t.Fatal("session Done not closed after its store closed")
	}
	// The lease was not revoked: the key outlives its owner for up to ttl. (Checked only
	// when the machine was quick enough for the answer to mean something.)
	_, getErr := observer.Get(ctx, "/e/owner")
	if time.Since(killed) < ttl/2 && getErr != nil {
		t.Fatalf("ephemeral key gone right after owner death: %v (Close must not revoke)", getErr)
	}
	evs := collect(t, w, 1)
	if evs[0].Type != metadata.EventDelete || evs[0].KV.Key != "/e/owner" {
		t.Fatalf("event %+v, want delete of /e/owner", evs[0])
	}
	if gone := time.Since(killed); gone < ttl/2 {
		t.Fatalf("key vanished %v after owner death, before the %v ttl could lapse", gone, ttl)
	}
	if _, err := observer.Get(ctx, "/e/owner"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get after expiry: err %v, want ErrNotFound", err)
	}
	if err := sess.Close(); err != nil {
		t.Fatalf("Close of an abandoned session: %v", err)
	}
}

func testNextID(t *testing.T, s1, s2 metadata.Store) {
	ctx := ctxT(t)
	for want := int64(1); want <= 3; want++ {
		id, err := s1.NextID(ctx, "first")
		if err != nil || id != want {
			t.Fatalf("NextID(first) = %d, %v; want %d", id, err, want)
		}
	}
	if id, err := s2.NextID(ctx, "other"); err != nil || id != 1 {
		t.Fatalf("NextID(other) = %d, %v; counters must be independent", id, err)
	}
	const goroutines, each = 8, 25
	results := make([][]int64, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		s := s1
		if g%2 == 1 {
			s = s2 // two clients
		}
		wg.Go(func() {
			for range each {
				id, err := s.NextID(ctx, metadata.CounterLedgerID)
				if err != nil {
					errs[g] = err
					return
				}
				results[g] = append(results[g], id)
			}
		})
	}
	wg.Wait()
	var all []int64
	for g := range goroutines {
		if errs[g] != nil {
			t.Fatalf("goroutine %d: %v", g, errs[g])
		}
		if !slices.IsSorted(results[g]) {
			t.Fatalf("goroutine %d saw ids out of order: %v", g, results[g])
		}
		all = append(all, results[g]...)
	}
	slices.Sort(all)
	for i, id := range all {
		if id != int64(i+1) {
			t.Fatalf("ids are not exactly 1..%d: position %d holds %d (%v)", goroutines*each, i, id, all)
		}
	}
	kv, err := s1.Get(ctx, metadata.CounterKey(metadata.CounterLedgerID))
	if err != nil || string(kv.Value) != fmt.Sprint(goroutines*each) {
		t.Fatalf("counter key = %+v, %v; want value %d", kv, err, goroutines*each)
	}
}

func testClosed(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "/z", "z", metadata.NotExists)
	w := s.Watch(ctx, "/", 0)
	sess, err := s.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := waitClosed(t, w); !errors.Is(err, metadata.ErrClosed) {
		t.Fatalf("running watch after Close: Err %v, want ErrClosed", err)
	}
	select {
	case <-sess.Done():
	default:
		t.Fatal("session Done not closed after store Close")
	}
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, metadata.ErrClosed) {
			t.Errorf("%s after Close: err %v, want ErrClosed", op, err)
		}
	}
	_, err = s.Get(ctx, "/z")
	check("Get", err)
	_, err = s.Put(ctx, "/z", nil, metadata.AnyVersion)
	check("Put", err)
	check("Delete", s.Delete(ctx, "/z", metadata.AnyVersion))
	_, _, err = s.List(ctx, "/")
	check("List", err)
	_, err = s.Range(ctx, "/", "", 0)
	check("Range", err)
	_, err = s.NewSession(ctx, time.Second)
	check("NewSession", err)
	_, err = s.NextID(ctx, "c")
	check("NextID", err)
	_, err = sess.Put(ctx, "/e", nil, metadata.AnyVersion)
	check("Session.Put", err)
	check("new Watch", waitClosed(t, s.Watch(ctx, "/", 0)))
}

// testSessionRevokedElsewhere expires a session's lease behind its back (as etcd does when
// keep-alives do not arrive in time): Done must close and Put must fail with
// ErrSessionExpired.
func testSessionRevokedElsewhere(t *testing.T, eps []string) {
	ctx := ctxT(t)
	s := metadatatest.NewStore(t, eps)
	sess, err := s.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := sess.Put(ctx, "/e/k", []byte("v"), metadata.NotExists); err != nil {
		t.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(sess.ID())); err != nil {
		t.Fatal(err)
	}
	// Usually before the keep-alive notices: etcd itself rejects the unknown lease.
	if _, err := sess.Put(ctx, "/e/k1", []byte("v"), metadata.AnyVersion); !errors.Is(err, metadata.ErrSessionExpired) {
		t.Fatalf("Put right after revocation: err %v, want ErrSessionExpired", err)
	}
	select {
	case <-sess.Done():
	case <-time.After(waitFor):
		t.Fatal("session Done not closed after its lease was revoked")
	}
	if _, err := sess.Put(ctx, "/e/k2", []byte("v"), metadata.AnyVersion); !errors.Is(err, metadata.ErrSessionExpired) {
		t.Fatalf("Put on expired session: err %v, want ErrSessionExpired", err)
	}
	if _, err := s.Get(ctx, "/e/k"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("ephemeral key of revoked lease: err %v, want ErrNotFound", err)
	}
}

func TestNamespaceIsolation(t *testing.T) {
	eps := metadatatest.Embedded(t)
	a := metadatatest.NewStore(t, eps)
	b := metadatatest.NewStore(t, eps)
	ctx := ctxT(t)
	mustPut(t, a, "/k", "a", metadata.NotExists)
	if _, err := b.Get(ctx, "/k"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("namespace b sees a's key: %v", err)
	}
	mustPut(t, b, "/k", "b", metadata.NotExists)
	kvs, _, err := a.List(ctx, "")
	if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "a" {
		t.Fatalf("List in a = %+v, %v; want only a's key", kvs, err)
	}
	// Without a namespace the prefixed keys are visible as they are stored.
	root := metadatatest.OpenStore(t, eps, "")
	all, _, err := root.List(ctx, "/test-")
	if err != nil || len(all) != 2 {
		t.Fatalf("un-namespaced List(/test-) = %+v, %v; want both namespaced keys", all, err)
	}
	ns := a.(*metadata.EtcdStore).Namespace()
	if kv, err := root.Get(ctx, ns+"/k"); err != nil || string(kv.Value) != "a" {
		t.Fatalf("raw key %s/k = %+v, %v", ns, kv, err)
	}
}

func TestEmbeddedRestartKeepsData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etcd")
	ctx := ctxT(t)
	start := func() *metadata.Embedded {
		e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{DataDir: dir, ListenClient: "127.0.0.1:0", Fast: true})
		if err != nil {
			t.Fatal(err)
		}
		if eps := e.Endpoints(); len(eps) != 1 || eps[0] == "127.0.0.1:0" {
			t.Fatalf("Endpoints = %v, want the bound address", eps)
		}
		return e
	}
	e := start()
	s, err := metadata.Open(ctx, metadata.Config{Endpoints: e.Endpoints(), Namespace: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	v := mustPut(t, s, "/keep", "me", metadata.NotExists)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	e = start()
	defer e.Close()
	s, err = metadata.Open(ctx, metadata.Config{Endpoints: e.Endpoints(), Namespace: "/r/"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kv, err := s.Get(ctx, "/keep")
	if err != nil || string(kv.Value) != "me" || kv.Version != v {
		t.Fatalf("after restart Get = %+v, %v; want value me version %d", kv, err, v)
	}
}

func TestStartEmbeddedBadConfig(t *testing.T) {
	ctx := ctxT(t)
	for name, cfg := range map[string]metadata.EmbeddedConfig{
		"no data dir": {ListenClient: "127.0.0.1:0"},
		"no port":     {DataDir: t.TempDir(), ListenClient: "127.0.0.1"},
		"https":       {DataDir: t.TempDir(), ListenClient: "https://127.0.0.1:0"},
	} {
		if e, err := metadata.StartEmbedded(ctx, cfg); err == nil {
			e.Close()
			t.Errorf("%s: StartEmbedded succeeded", name)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx := ctxT(t)
	// Port 1 (tcpmux) is not served on the test machines.
	_, err := metadata.Open(ctx, metadata.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: 300 * time.Millisecond})
	if err == nil {
		t.Fatal("Open of an unreachable etcd succeeded")
	}
	if _, err := metadata.Open(ctx, metadata.Config{}); err == nil {
		t.Fatal("Open without endpoints succeeded")
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: error
	}{
		{"etcd://127.0.0.1:2379", []string{"127.0.0.1:2379"}},
		{"etcd://a:1,b:2,c:3", []string{"a:1", "b:2", "c:3"}},
		{"etcd://host.example:2379/", []string{"host.example:2379"}},
		{"ETCD://h:2379", []string{"h:2379"}},
		{"etcd://[::1]:2379,10.0.0.1:2379", []string{"[::1]:2379", "10.0.0.1:2379"}},
		{"", nil},
		{"127.0.0.1:2379", nil},
		{"http://127.0.0.1:2379", nil},
		{"etcd://", nil},
		{"etcd://host", nil},
		{"etcd://:2379", nil},
		{"etcd://h:0", nil},
		{"etcd://h:65536", nil},
		{"etcd://h:port", nil},
		{"etcd://h:1,", nil},
		{"etcd://h:1,,i:2", nil},
		{"etcd://h:1,h:1", nil},
		{"etcd://h:1/path", nil},
		{"etcd://user@h:1", nil},
		{"etcd://::1:2379", nil},
	} {
		got, err := metadata.ParseURL(tc.in)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("ParseURL(%q) = %q, want an error", tc.in, got)
		case tc.want != nil && err != nil:
			t.Errorf("ParseURL(%q): %v", tc.in, err)
		case tc.want != nil && !slices.Equal(got, tc.want):
			t.Errorf("ParseURL(%q) = %q, want %q", tc.in, got, tc.want)
		case err != nil && !containsAll(err.Error(), tc.in, "etcd://host:port"):
			t.Errorf("ParseURL(%q) error %q should quote the input and the expected form", tc.in, err)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestSessionCloseWithEtcdGone: closing a live session whose etcd has gone away returns
// within the revoke bound instead of holding the caller for the session's ttl (a stopping
// bookie waited 10 s).
func TestSessionCloseWithEtcdGone(t *testing.T) {
	ctx := ctxT(t)
	e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{DataDir: filepath.Join(t.TempDir(), "etcd"),
		ListenClient: "127.0.0.1:0", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := metadata.Open(ctx, metadata.Config{Endpoints: e.Endpoints(), Namespace: "/g"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess, err := s.NewSession(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = sess.Close()
	took := time.Since(start)
	t.Logf("Close with etcd gone: %v (%v)", took.Round(time.Millisecond), err)
	if took > 10*time.Second {
		t.Fatalf("Close took %v with etcd gone (err %v), want about the 2 s revoke bound", took, err)
	}
	if err == nil {
		t.Fatal("Close reported a revocation that etcd never saw")
	}
}

func testCommit(t *testing.T, s metadata.Store) {
	ctx := ctxT(t)
	va := mustPut(t, s, "/c/a", "a1", metadata.NotExists)
	mustPut(t, s, "/c/gone", "x", metadata.NotExists)
	vf := mustPut(t, s, "/c/fence", "f", metadata.NotExists)

	// All or nothing: one stale expectation refuses every op.
	_, err := s.Commit(ctx, []metadata.Op{
		{Key: "/c/a", Value: []byte("a2"), Expected: va},
		{Key: "/c/b", Value: []byte("b1"), Expected: metadata.NotExists},
		{Key: "/c/gone", Delete: true, Expected: metadata.AnyVersion},
		{Key: "/c/a2", Value: []byte("x"), Expected: va + 1000},
	})
	if !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("commit with a stale version: %v, want ErrBadVersion", err)
	}
	if kv, err := s.Get(ctx, "/c/a"); err != nil || string(kv.Value) != "a1" {
		t.Fatalf("/c/a after a refused commit: %q %v", kv.Value, err)
	}
	if _, err := s.Get(ctx, "/c/b"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("/c/b after a refused commit: %v", err)
	}
	if _, err := s.Get(ctx, "/c/gone"); err != nil {
		t.Fatalf("/c/gone after a refused commit: %v", err)
	}

	// A check that does not hold refuses the commit too.
	if _, err := s.Commit(ctx, []metadata.Op{
		{Key: "/c/b", Value: []byte("b1"), Expected: metadata.NotExists},
		{Key: "/c/fence", Expected: vf + 1000, Check: true},
	}); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("commit with a failing check: %v, want ErrBadVersion", err)
	}
	vs, err := s.Commit(ctx, []metadata.Op{
		{Key: "/c/fence", Expected: vf, Check: true},
		{Key: "/c/a", Value: []byte("a2"), Expected: va},
		{Key: "/c/b", Value: []byte("b1"), Expected: metadata.NotExists},
		{Key: "/c/gone", Delete: true, Expected: metadata.AnyVersion},
		{Key: "/c/missing", Delete: true, Expected: metadata.AnyVersion},
	})
	if err != nil {
		t.Fatal(err)
	}
	vs = vs[1:]
	if len(vs) != 4 || vs[0] <= va || vs[1] != vs[0] || vs[2] != 0 {
		t.Fatalf("versions %v (old %d)", vs, va)
	}
	if kv, err := s.Get(ctx, "/c/a"); err != nil || string(kv.Value) != "a2" || kv.Version != vs[0] {
		t.Fatalf("/c/a: %q v%d %v, want a2 v%d", kv.Value, kv.Version, err, vs[0])
	}
	if kv, err := s.Get(ctx, "/c/b"); err != nil || string(kv.Value) != "b1" {
		t.Fatalf("/c/b: %q %v", kv.Value, err)
	}
	if _, err := s.Get(ctx, "/c/gone"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("/c/gone after its delete: %v", err)
	}
	if vs, err := s.Commit(ctx, nil); err != nil || vs != nil {
		t.Fatalf("empty commit: %v %v", vs, err)
	}
}
