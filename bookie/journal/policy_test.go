package journal

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// memFS is an in-memory vfs whose Sync takes syncDelay of (fake) time, for testing
// the group commit policy in a synctest bubble.
type memFS struct{ syncDelay time.Duration }

type memFile struct {
	fs *memFS
	mu sync.Mutex
	b  []byte
}

func (m *memFS) Create(string, int64) (file, error) { return &memFile{fs: m}, nil }
func (m *memFS) SyncDir(string) error               { return nil }

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := int(off) + len(p); end > len(f.b) {
		f.b = append(f.b, make([]byte, end-len(f.b))...)
	}
	copy(f.b[off:], p)
	return len(p), nil
}

func (f *memFile) Sync() error  { time.Sleep(f.fs.syncDelay); return nil }
func (f *memFile) Close() error { return nil }

// TestGroupCommitPolicy checks the group commit policy with fake time:
//   - a closed loop of N writers settles at groups of N: the writers are waited for;
//   - a lone record right after a group waits min(MaxGroupWait, previous fsync) for
//     company, never more; when that company does not come, the next unmetWaitBackoff
//     groups do not wait;
//   - a lone record after a quiet period is synced at once;
//   - with MaxGroupWait 0 nothing waits.
func TestGroupCommitPolicy(t *testing.T) {
	const (
		writers   = 10
		rounds    = 20
		syncDelay = 2 * time.Millisecond
	)
	cases := []struct {
		maxWait       time.Duration
		fullGroups    bool          // the closed loop runs in groups of writers
		loneAfter     time.Duration // latency of a lone record right after a group
		loneAtLeisure time.Duration // latency of a lone record after a quiet period
	}{
		{maxWait: 5 * time.Millisecond, fullGroups: true, loneAfter: syncDelay + syncDelay, loneAtLeisure: syncDelay},
		{maxWait: time.Millisecond, fullGroups: true, loneAfter: time.Millisecond + syncDelay, loneAtLeisure: syncDelay},
		{maxWait: 0, loneAfter: syncDelay, loneAtLeisure: syncDelay},
	}
	for _, tc := range cases {
		t.Run("wait="+tc.maxWait.String(), func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				var groups []int
				opts := testOptions(1 << 20)
				opts.MaxGroupWait = tc.maxWait
				opts.fs = &memFS{syncDelay: syncDelay}
				opts.OnGroupSynced = func(records, _ int, _ time.Duration) { groups = append(groups, records) }
				j, _ := openCollect(t, dir, opts)
				appendWait := func(id int64) time.Duration {
					start := time.Now()
					done := make(chan error, 1)
					j.Append(Record{Type: RecAddEntry, LedgerID: 1, EntryID: id, Data: make([]byte, 100)},
						func(err error) { done <- err })
					if err := <-done; err != nil {
						t.Error(err)
					}
					return time.Since(start)
				}

				// Closed loop.
				var wg sync.WaitGroup
				for w := range writers {
					wg.Go(func() {
						for i := range rounds {
							appendWait(int64(w*1000 + i))
						}
					})
				}
				wg.Wait()
				synctest.Wait() // the syncer has run OnGroupSynced for the last group
				if tc.fullGroups {
					// Once settled, every group holds all writers. The last two groups
					// are the wind-down.
					for _, g := range groups[len(groups)/2 : len(groups)-2] {
						if g != writers {
							t.Errorf("group sizes %v: want the closed loop to settle at %d", groups, writers)
							break
						}
					}
				}

				// A group of all writers (formed behind a blocker record that holds the
				// syncer), then a lone record right after it. First lone records at
				// leisure, which never wait: they use up any backoff left by an unmet
				// wait as the closed loop wound down.
				time.Sleep(time.Second)
				for i := range unmetWaitBackoff {
					appendWait(int64(-200 - i))
				}
				blocker := make(chan error, 1)
				j.Append(Record{Type: RecFence, LedgerID: 2}, func(err error) { blocker <- err })
				synctest.Wait() // the blocker is being synced
				for w := range writers {
					wg.Go(func() { appendWait(int64(w*1000 + 999)) })
				}
				wg.Wait()
				<-blocker
				synctest.Wait()
				if g := groups[len(groups)-1]; g != writers {
					t.Errorf("group behind the blocker has %d records, want %d", g, writers)
				}
				if lone := appendWait(-1); lone != tc.loneAfter {
					t.Errorf("lone record right after a group took %v, want %v", lone, tc.loneAfter)
				}
				// Its company never came (an open loop): the next records do not wait.
				for i := range unmetWaitBackoff {
					if d := appendWait(int64(-100 - i)); d != syncDelay {
						t.Fatalf("record %d after an unmet wait took %v, want %v (no wait)", i, d, syncDelay)
					}
				}
				time.Sleep(time.Second)
				if d := appendWait(-2); d != tc.loneAtLeisure {
					t.Errorf("lone record after a quiet period took %v, want %v", d, tc.loneAtLeisure)
				}
				if err := j.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestGroupCommitMaxGroupBytes checks that a group ends as soon as it holds
// MaxGroupBytes, without waiting for the company the writer expects.
func TestGroupCommitMaxGroupBytes(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		const syncDelay = 2 * time.Millisecond
		var groups []int
		opts := testOptions(1 << 20)
		opts.MaxGroupWait = time.Second
		opts.MaxGroupBytes = 4 << 10
		opts.fs = &memFS{syncDelay: syncDelay}
		opts.OnGroupSynced = func(records, _ int, _ time.Duration) { groups = append(groups, records) }
		j, _ := openCollect(t, dir, opts)
		appendAsync := func(n int, size int) <-chan error {
			done := make(chan error, n)
			for i := range n {
				j.Append(Record{Type: RecAddEntry, LedgerID: 1, EntryID: int64(i), Data: make([]byte, size)},
					func(err error) { done <- err })
			}
			return done
		}
		// A group of 10 small records behind a blocker: the writer then expects 10.
		blocker := appendAsync(1, 0)
		synctest.Wait()
		ten := appendAsync(10, 10)
		<-blocker
		for range 10 {
			<-ten
		}
		// Right after it, 4 records of 1 KiB: 4×(25+1024) bytes >= MaxGroupBytes.
		start := time.Now()
		four := appendAsync(4, 1024)
		for range 4 {
			if err := <-four; err != nil {
				t.Error(err)
			}
		}
		if d := time.Since(start); d != syncDelay {
			t.Errorf("a full group took %v, want %v (no wait for company)", d, syncDelay)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		if want := []int{1, 10, 4}; len(groups) != 3 || groups[1] != 10 || groups[2] != 4 {
			t.Errorf("groups %v, want %v", groups, want)
		}
	})
}

// TestUnmetWaitBackoffGrows: under an open-loop load (a group of writers, then a lone
// record whose company never comes), each unmet wait for company makes the stretch of
// groups that do not wait longer; a closed loop, whose waits are met, makes it short again.
func TestUnmetWaitBackoffGrows(t *testing.T) {
	const writers, syncDelay = 4, 2 * time.Millisecond
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		opts := testOptions(1 << 20)
		opts.MaxGroupWait = time.Millisecond
		opts.fs = &memFS{syncDelay: syncDelay}
		j, _ := openCollect(t, dir, opts)
		var id atomic.Int64
		appendWait := func() time.Duration {
			start := time.Now()
			done := make(chan error, 1)
			j.Append(Record{Type: RecAddEntry, LedgerID: 1, EntryID: id.Add(1), Data: make([]byte, 100)},
				func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Error(err)
			}
			return time.Since(start)
		}
		// waits runs the open-loop pattern n times and returns the rounds whose lone
		// record waited for company.
		waits := func(n int) []int {
			var waited []int
			var wg sync.WaitGroup
			for round := range n {
				blocker := make(chan error, 1)
				j.Append(Record{Type: RecFence, LedgerID: 2}, func(err error) { blocker <- err })
				synctest.Wait() // the blocker is being synced; the writers queue behind it
				for range writers {
					wg.Go(func() { appendWait() })
				}
				wg.Wait()
				<-blocker
				synctest.Wait()
				if appendWait() > syncDelay {
					waited = append(waited, round)
				}
			}
			return waited
		}
		waited := waits(120)
		if len(waited) < 4 {
			t.Fatalf("lone records waited in rounds %v: want at least 4 waits to compare", waited)
		}
		for i := 2; i < len(waited); i++ {
			if waited[i]-waited[i-1] <= waited[i-1]-waited[i-2] {
				t.Fatalf("lone records waited in rounds %v: want the stretches between waits to grow", waited)
			}
		}
		// A closed loop, long enough to use up the stretch left: its waits are met, so
		// the next stretch is short again.
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				for range 600 {
					appendWait()
				}
			})
		}
		wg.Wait()
		first := waited[1] - waited[0]
		if again := waits(first + 1); len(again) == 0 || again[0] > first {
			t.Fatalf("after a closed loop, lone records waited in rounds %v: want a wait within %d rounds again (open loop: %v)",
				again, first, waited)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// syncLogFS is a memFS that records when each fdatasync starts.
type syncLogFS struct {
	memFS
	mu     sync.Mutex
	starts []time.Time
}

type syncLogFile struct {
	memFile
	fs *syncLogFS
}

func (s *syncLogFS) Create(string, int64) (file, error) {
	return &syncLogFile{memFile: memFile{fs: &s.memFS}, fs: s}, nil
}

func (f *syncLogFile) Sync() error {
	f.fs.mu.Lock()
	f.fs.starts = append(f.fs.starts, time.Now())
	f.fs.mu.Unlock()
	return f.memFile.Sync()
}

// TestMinSyncIntervalPaces: under an open-loop load, fdatasyncs start at least
// MinSyncInterval apart and the records arriving meanwhile share them; a closed loop
// (one writer appending again as soon as released) is not paced.
func TestMinSyncIntervalPaces(t *testing.T) {
	const (
		interval  = 2 * time.Millisecond
		syncDelay = 300 * time.Microsecond
		arrival   = 200 * time.Microsecond // open loop: one record every 200 µs
		records   = 500
	)
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		fs := &syncLogFS{memFS: memFS{syncDelay: syncDelay}}
		opts := testOptions(1 << 20)
		opts.MinSyncInterval = interval
		opts.fs = fs
		var groups atomic.Int64
		opts.OnGroupSynced = func(int, int, time.Duration) { groups.Add(1) }
		j, _ := openCollect(t, dir, opts)
		defer j.Close()

		var wg sync.WaitGroup
		for i := range records {
			wg.Add(1)
			j.Append(Record{Type: RecAddEntry, LedgerID: 1, EntryID: int64(i), Data: make([]byte, 100)},
				func(err error) {
					if err != nil {
						t.Error(err)
					}
					wg.Done()
				})
			time.Sleep(arrival)
		}
		wg.Wait()
		fs.mu.Lock()
		starts := append([]time.Time(nil), fs.starts...)
		fs.mu.Unlock()
		for i := 1; i < len(starts); i++ {
			if gap := starts[i].Sub(starts[i-1]); gap < interval {
				t.Fatalf("fdatasyncs %d and %d started %v apart under an open loop: want at least %v", i-1, i, gap, interval)
			}
		}
		// 500 records over 100 ms: about 50 paced groups of 10, against 500 unpaced groups.
		synctest.Wait() // the last group's OnGroupSynced runs after its callbacks
		if n, max := groups.Load(), int64(records*arrival/interval)+2; n > max {
			t.Fatalf("open loop: %d groups, want at most %d", n, max)
		}

		// A closed loop of one writer, after a quiet period: each append is synced at
		// once (it waits syncDelay), not held until the interval is over.
		time.Sleep(time.Second)
		synctest.Wait()
		for i := range 20 {
			start := time.Now()
			done := make(chan error, 1)
			j.Append(Record{Type: RecAddEntry, LedgerID: 2, EntryID: int64(i), Data: make([]byte, 100)},
				func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took != syncDelay {
				t.Fatalf("closed loop append %d took %v: want %v (not paced)", i, took, syncDelay)
			}
		}
	})
}
