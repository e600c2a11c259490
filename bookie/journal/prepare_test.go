package journal

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestPreparedFiles: the journal zero-fills the next file in the background, rolls early
// from its fallocated first file once that is done, adopts prepared files at later rolls,
// and every record replays in order afterwards; Close leaves no prepared file behind.
func TestPreparedFiles(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64 << 10)
	opts.PrepareRate = DefaultPrepareRate
	opts.alwaysPrepare = true // the appends fill a file in about as long as its preparation takes
	var mu sync.Mutex
	var rolls []bool // prepared, per roll
	opts.OnRoll = func(_ uint64, prepared bool) {
		mu.Lock()
		rolls = append(rolls, prepared)
		mu.Unlock()
	}
	preparedRolls := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, p := range rolls {
			if p {
				n++
			}
		}
		return n
	}
	j, _ := openCollect(t, dir, opts)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []Record
	deadline := time.Now().Add(20 * time.Second)
	for preparedRolls() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no 3 rolls to prepared files before the deadline; rolls %v", rolls)
		}
		recs := genRecords(rng, 4, 2000, int64(len(want)+1))
		appendAll(t, j, recs)
		want = append(want, recs...)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, ok := parseFileName(e.Name()); !ok {
			t.Errorf("file %s left behind after Close", e.Name())
		}
	}
	checkRecords(t, replayAll(t, dir, opts), want)
}

// TestPrepareLeftoversRemoved: prepared or half-prepared files, and released files being
// removed, that a crash left behind are not journal files and are deleted by Open.
func TestPrepareLeftoversRemoved(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64 << 10)
	replayAll(t, dir, opts)
	leftovers := []string{fileName(7) + preparedExt, fileName(8) + preparingExt, fileName(2) + deletingExt, sparePrefix + "1" + preparingExt,
		fileName(9) + preparedExt + deletingExt}
	for _, n := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, n), []byte{1, 2, 3}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j, _ := openCollect(t, dir, opts)
	defer j.Close()
	for _, n := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want removed", n, err)
		}
	}
}

// TestEarlyRollToPrepared: a journal whose file was fallocated (as at every Open) moves
// its appends to the next file as soon as that one is prepared, long before the first
// is full; the records on both sides replay in order.
func TestEarlyRollToPrepared(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(1 << 20)
	opts.PrepareRate = DefaultPrepareRate
	rolled := make(chan bool, 4)
	opts.OnRoll = func(_ uint64, prepared bool) { rolled <- prepared }
	j, _ := openCollect(t, dir, opts)
	var want []Record
	deadline := time.After(20 * time.Second)
	for done := false; !done; {
		r := Record{Type: RecAddEntry, LedgerID: 1, EntryID: int64(len(want)), Data: []byte("x")}
		appendAll(t, j, []Record{r})
		want = append(want, r)
		select {
		case p := <-rolled:
			if !p {
				t.Fatal("rolled to a file that was not prepared")
			}
			done = true
		case <-deadline:
			t.Fatal("no early roll to the prepared file")
		default:
		}
	}
	r := Record{Type: RecAddEntry, LedgerID: 1, EntryID: int64(len(want)), Data: []byte("after")}
	appendAll(t, j, []Record{r})
	want = append(want, r)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(journalFiles(t, dir)); n != 2 {
		t.Fatalf("%d journal files, want 2 (the early roll)", n)
	}
	checkRecords(t, replayAll(t, dir, opts), want)
}

func TestShouldPrepare(t *testing.T) {
	const size = 256 << 20 // 4 s to prepare at DefaultPrepareRate
	for _, c := range []struct {
		rate int64
		fill time.Duration
		want bool
	}{
		{DefaultPrepareRate, 50 * time.Second, true}, // 5 MB/s of appends
		{DefaultPrepareRate, 8 * time.Second, true},  // ready in exactly half the time
		{DefaultPrepareRate, 7 * time.Second, false},
		{DefaultPrepareRate, 3 * time.Second, false}, // 85 MB/s of appends
		{0, time.Hour, false},                        // preparation off
	} {
		if got := shouldPrepare(size, c.rate, c.fill); got != c.want {
			t.Errorf("shouldPrepare(256 MiB, %d B/s, fill %v) = %v, want %v", c.rate, c.fill, got, c.want)
		}
	}
}

// TestNoPrepareWhenFilesFillFast: while files fill much faster than a preparation takes,
// the next file's preparation is not started and rolls fallocate.
func TestNoPrepareWhenFilesFillFast(t *testing.T) {
	dir := t.TempDir()
	// Larger than a preparation's first write (prepareChunk): the preparation Open starts
	// is stopped with part of its file zeroed, and kept as the spare.
	opts := testOptions(4 << 20)
	opts.PrepareRate = 64 << 10 // a minute per file, while the appends fill one in milliseconds
	opts.rateWindow = 5 * time.Millisecond
	var mu sync.Mutex
	var rolls []bool
	opts.OnRoll = func(_ uint64, prepared bool) {
		mu.Lock()
		rolls = append(rolls, prepared)
		mu.Unlock()
	}
	j, _ := openCollect(t, dir, opts)
	rng := rand.New(rand.NewPCG(3, 4))
	var want []Record
	start := time.Now()
	for len(journalFiles(t, dir)) < 4 || time.Since(start) < 4*opts.rateWindow {
		recs := genRecords(rng, 16, 8000, int64(len(want)+1))
		appendAll(t, j, recs)
		want = append(want, recs...)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rolls) < 3 {
		t.Fatalf("%d rolls, want at least 3", len(rolls))
	}
	for i, p := range rolls {
		if p {
			t.Errorf("roll %d adopted a prepared file", i)
		}
	}
	if j.w.prepSkipped == 0 {
		t.Errorf("no preparation skipped in %d rolls of files filling in milliseconds", len(rolls))
	}
	checkRecords(t, replayAll(t, dir, opts), want)
}

// appendHeavily appends batches of records of up to maxData bytes as fast as the journal
// takes them, for at least d and 200 KiB, staying in the first 4 MiB file (a heavy load
// whose rate the writer measures), and returns them.
func appendHeavily(t *testing.T, j *Journal, rng *rand.Rand, d time.Duration, maxData int) []Record {
	t.Helper()
	var recs []Record
	written := 0
	for start := time.Now(); written < 200<<10 || time.Since(start) < d; {
		if written > 3<<20 {
			t.Fatal("the appends were too slow to measure a rate before the file filled")
		}
		batch := genRecords(rng, 8, maxData, 1)
		appendAll(t, j, batch)
		for _, r := range batch {
			written += len(r.Data) + 25
		}
		recs = append(recs, batch...)
	}
	return recs
}

// TestRunningPreparationStopsUnderLoad: a preparation started while the journal was quiet
// (at Open) stops once appends come fast enough that it would not be ready in time.
func TestRunningPreparationStopsUnderLoad(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(4 << 20)
	opts.PrepareRate = 64 << 10 // a minute for the next file
	opts.rateWindow = 5 * time.Millisecond
	j, _ := openCollect(t, dir, opts)
	want := appendHeavily(t, j, rand.New(rand.NewPCG(5, 6)), 4*opts.rateWindow, 2000)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j.w.prepStopped != 1 {
		t.Errorf("%d preparations stopped, want 1 (the one Open started)", j.w.prepStopped)
	}
	checkRecords(t, replayAll(t, dir, opts), want)
}

// TestSpareReused: with preparations on, Release keeps released journal files (up to
// maxSpares) as spares instead of removing them; the next preparation zero-fills one in
// place and a roll adopts it; replay afterwards finds every record and none of the
// spare's stale ones.
func TestSpareReused(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(64 << 10)
	opts.PrepareRate = DefaultPrepareRate
	opts.alwaysPrepare = true
	preparedRolls := countPreparedRolls(&opts)
	j, _ := openCollect(t, dir, opts)
	rng := rand.New(rand.NewPCG(7, 8))
	var all []Record
	add := func() {
		recs := genRecords(rng, 4, 2000, int64(len(all)+1))
		appendAll(t, j, recs)
		all = append(all, recs...)
	}
	for len(journalFiles(t, dir)) < 4 {
		add()
	}
	mark := j.Mark()
	before := len(all)
	spares := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, sparePrefix+"*"+preparingExt))
		return m
	}
	had := len(spares()) // kept from preparations that rolls stopped
	if err := j.Release(mark); err != nil {
		t.Fatal(err)
	}
	kept := spares()
	if released := int(mark.File - 1); len(kept) != min(had+released, maxSpares) {
		t.Fatalf("spares after Release of %d files (%d before): %v, want %d", released, had, kept, min(had+released, maxSpares))
	}
	if doomed, _ := filepath.Glob(filepath.Join(dir, "*"+deletingExt)); len(doomed) != 0 {
		t.Fatalf("left after Release: %v", doomed)
	}
	// Append until preparations have taken every spare and a roll has adopted what the last
	// one made (the released files' stale records are then all under zeros or records).
	deadline := time.Now().Add(20 * time.Second)
	taken := -1 // prepared rolls when the last spare was seen gone
	for taken < 0 || preparedRolls() <= taken {
		if time.Now().After(deadline) {
			t.Fatalf("spares not reused before the deadline (%v left; taken at %d prepared rolls, now %d)", spares(), taken, preparedRolls())
		}
		add()
		if taken < 0 && len(spares()) == 0 {
			taken = preparedRolls()
		}
	}
	add() // records in the adopted file, ahead of its zeros
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	got := replayAll(t, dir, opts)
	if len(got) < len(all)-before || len(got) > len(all) {
		t.Fatalf("replayed %d records; %d appended, %d of them after the release mark", len(got), len(all), len(all)-before)
	}
	checkRecords(t, got, all[len(all)-len(got):])
}

// TestStoppedPreparationKept: a preparation a roll stops keeps its partly zeroed file as
// the spare (nothing is freed on the writer's path), and the next preparation continues
// it from where its zeros end, so that preparations each cut short by a roll still end in
// a prepared file, and a roll adopts it.
func TestStoppedPreparationKept(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(4 << 20)
	opts.PrepareRate = 1 << 20 // 4 s per file: each preparation zeroes 1 MiB, then a roll stops it
	opts.alwaysPrepare = true  // prepare whatever the appends' rate
	preparedRolls := countPreparedRolls(&opts)
	j, _ := openCollect(t, dir, opts)
	rng := rand.New(rand.NewPCG(9, 10))
	var all []Record
	deadline := time.Now().Add(30 * time.Second)
	for preparedRolls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no roll adopted a prepared file before the deadline")
		}
		recs := genRecords(rng, 16, 8000, int64(len(all)+1))
		appendAll(t, j, recs)
		all = append(all, recs...)
	}
	if doomed, _ := filepath.Glob(filepath.Join(dir, "*"+deletingExt)); len(doomed) != 0 {
		t.Fatalf("files renamed for removal: %v, want stopped preparations kept", doomed)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j.w.prepKept == 0 {
		t.Fatal("no stopped preparation kept")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, sparePrefix+"*")); len(m) != 0 {
		t.Fatalf("spares after Close: %v, want removed", m)
	}
	checkRecords(t, replayAll(t, dir, opts), all)
}

// countPreparedRolls sets opts.OnRoll to count the rolls to prepared files and returns the
// count so far.
func countPreparedRolls(opts *Options) func() int {
	var mu sync.Mutex
	prepared := 0
	opts.OnRoll = func(_ uint64, p bool) {
		if p {
			mu.Lock()
			prepared++
			mu.Unlock()
		}
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return prepared }
}

// TestStoppedPreparationResumes: a preparation stopped by a heavy load goes on once the
// load turns light again, and the journal then rolls early from its fallocated file to the
// prepared one, instead of writing the rest of the fallocated file at the light rate.
func TestStoppedPreparationResumes(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(4 << 20)
	opts.PrepareRate = 4 << 20 // 1 s per file: stopped while the appends fill it in under 2 s
	opts.rateWindow = 5 * time.Millisecond
	preparedRolls := countPreparedRolls(&opts)
	j, _ := openCollect(t, dir, opts)
	want := appendHeavily(t, j, rand.New(rand.NewPCG(11, 12)), 10*opts.rateWindow, 4000)
	// Light: a small record every 2 ms, until the roll to the prepared file.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Second)
	for preparedRolls() == 0 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no roll to a prepared file within 15 s of light appends")
		}
		r := Record{Type: RecAddEntry, LedgerID: 2, EntryID: int64(len(want)), Data: []byte("light")}
		appendAll(t, j, []Record{r})
		want = append(want, r)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j.w.prepStopped == 0 || j.w.prepResumed == 0 {
		t.Errorf("%d preparations stopped, %d resumed: want the heavy phase to stop one and the light one to resume it",
			j.w.prepStopped, j.w.prepResumed)
	}
	if n := len(journalFiles(t, dir)); n != 2 {
		t.Errorf("%d journal files, want 2 (the early roll from the first)", n)
	}
	checkRecords(t, replayAll(t, dir, opts), want)
}
