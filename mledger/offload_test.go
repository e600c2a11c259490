package mledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
)

// memOffloader is a thread-safe in-memory Offloader for tests of the public API: an attempt's
// entries and index are written when Offload returns.
type memOffloader struct {
	mu        sync.Mutex
	blobs     map[blobKey][][]byte
	reads     int
	failReads bool
	uploads   int
	// stuck, when set, makes Offload write the first entry, tell stuck, and wait for its
	// ctx (an upload in progress when the owner goes away).
	stuck chan blobKey
}

func newMemOffloader() *memOffloader { return &memOffloader{blobs: map[blobKey][][]byte{}} }

func (o *memOffloader) Driver() string { return "mem" }

func (o *memOffloader) Offload(ctx context.Context, req OffloadRequest, r EntryReader) (map[string]string, error) {
	d, err := r.ReadEntries(ctx, 0, req.Entries-1)
	if err != nil {
		return nil, err
	}
	if int64(len(d)) != req.Entries {
		return nil, fmt.Errorf("read %d entries of %d", len(d), req.Entries)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	key := blobKey{req.LedgerID, req.UUID}
	if o.stuck != nil {
		o.blobs[key] = d[:1]
		o.stuck <- key
		o.mu.Unlock()
		<-ctx.Done()
		o.mu.Lock()
		return nil, ctx.Err()
	}
	o.uploads++
	o.blobs[key] = d
	return map[string]string{"driver": "mem"}, nil
}

func (o *memOffloader) has(k blobKey) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.blobs[k]
	return ok
}

func (o *memOffloader) ReadOffloaded(_ context.Context, l OffloadedLedger, first, last int64) ([][]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failReads {
		return nil, errors.New("mem: object store unreachable")
	}
	d, ok := o.blobs[blobKey{l.LedgerID, l.UUID}]
	if !ok || last >= int64(len(d)) {
		return nil, fmt.Errorf("mem: no entries %d..%d of ledger %d attempt %s", first, last, l.LedgerID, l.UUID)
	}
	o.reads++
	return slices.Clone(d[first : last+1]), nil
}

func (o *memOffloader) DeleteOffloaded(_ context.Context, l OffloadedLedger) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.blobs, blobKey{l.LedgerID, l.UUID})
	return nil
}

func (o *memOffloader) stats() (blobs, reads int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.blobs), o.reads
}

// storedRecord returns managed ledger name's record as stored.
func storedRecord(t *testing.T, ms *memMeta, name string) *Info {
	t.Helper()
	ms.mu.Lock()
	e, ok := ms.kv[metadata.ManagedLedgerKey(name)]
	ms.mu.Unlock()
	if !ok {
		t.Fatalf("no record of %s", name)
	}
	in, err := decodeInfo(e.value)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// waitUntil waits (up to 10 s) for cond, checking it every few milliseconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// TestOffloadRequestAndReads: a requested offload copies every closed ledger, the bookie
// copies go after the (zero) deletion lag, and the entries read back byte-identical from the
// object store; an object-store failure fails the read with ErrOffloadRead and skips nothing;
// the record survives a reopen; Delete deletes the objects.
func TestOffloadRequestAndReads(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	mo := newMemOffloader()
	cfg := memConfig()
	cfg.MaxEntriesPerLedger = 3
	cfg.CacheSize = -1 // every read goes to a ledger copy
	cfg.Offloader = mo
	cfg.Offload = &OffloadPolicy{ThresholdBytes: -1, ThresholdAge: -1, DeletionLag: 0}
	m := mustOpen(t, e.f, "off", cfg)
	ps := addN(t, m, 0, 10) // ledgers of 3, 3, 3 and the current one with 1
	if st, err := m.OffloadStatus(ctx); err != nil || st.State != OffloadNotRun {
		t.Fatalf("status before a request: %+v %v", st, err)
	}
	if _, err := m.Offload(ctx, Latest); err != nil {
		t.Fatalf("offload: %v", err)
	}
	closed := []int64{ps[0].LedgerID, ps[3].LedgerID, ps[6].LedgerID}
	var st Stats
	waitUntil(t, "the closed ledgers offloaded and their bookie copies deleted", func() bool {
		var err error
		if st, err = m.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Ledgers {
			if slices.Contains(closed, l.ID) && (l.Offload == nil || !l.Offload.BookkeeperDeleted) {
				return false
			}
		}
		return st.Offload.State == OffloadSuccess
	})
	if l := st.Ledgers[len(st.Ledgers)-1]; l.Offload != nil {
		t.Fatalf("the current ledger was offloaded: %+v", l)
	}
	if st.OffloadCounters.Offloaded != 3 || st.OffloadedSize != st.Ledgers[0].Size*3 || st.Offload.FirstUnoffloaded != ps[9] {
		t.Fatalf("stats %+v", st)
	}
	e.bk.mu.Lock()
	for _, id := range closed {
		if !e.bk.deleted[id] {
			t.Errorf("bookie copy of offloaded ledger %d not deleted", id)
		}
	}
	e.bk.mu.Unlock()

	check := func(m *ManagedLedger) {
		t.Helper()
		cu, err := m.NewNonDurableCursor(ctx, Earliest)
		if err != nil {
			t.Fatal(err)
		}
		es := readAll(t, cu)
		if len(es) != len(ps) {
			t.Fatalf("read %d entries, want %d", len(es), len(ps))
		}
		for i, e := range es {
			if e.Position != ps[i] || string(e.Data) != fmt.Sprintf("m-%d", i) {
				t.Fatalf("entry %d: %v %q", i, e.Position, e.Data)
			}
		}
	}
	check(m)
	if _, reads := mo.stats(); reads == 0 {
		t.Fatal("no read was served from the object store")
	}

	// The object store fails: the read fails, retryably, and skips nothing.
	mo.mu.Lock()
	mo.failReads = true
	mo.mu.Unlock()
	cu, err := m.NewNonDurableCursor(ctx, Earliest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cu.TryRead(ctx, 2); !errors.Is(err, ErrOffloadRead) {
		t.Fatalf("read with the object store down: %v, want ErrOffloadRead", err)
	}
	mo.mu.Lock()
	mo.failReads = false
	mo.mu.Unlock()
	if es, err := cu.TryRead(ctx, 2); err != nil || len(es) != 2 || es[0].Position != ps[0] {
		t.Fatalf("read after the object store returned: %v %v", es, err)
	}

	// The record (format 2) survives a reopen; without an offloader the offloaded ledgers
	// fail to read, clearly.
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m = mustOpen(t, e.f, "off", cfg)
	check(m)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	noOff := memConfig()
	noOff.MaxEntriesPerLedger, noOff.CacheSize = 3, -1
	m2 := mustOpen(t, e.f, "off", noOff)
	if _, err := m2.Read(ctx, Earliest, 1); !errors.Is(err, ErrOffloadRead) || !strings.Contains(err.Error(), "no offloader") {
		t.Fatalf("read of an offloaded ledger without an offloader: %v", err)
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Factory.Delete (no Config) deletes the objects through the factory's offloader.
	f := NewFactory(e.bk, e.ms, FactoryOptions{Offloader: mo})
	if err := f.Delete(ctx, "off"); err != nil {
		t.Fatal(err)
	}
	if blobs, _ := mo.stats(); blobs != 0 {
		t.Fatalf("%d offloaded ledgers left after Delete", blobs)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOffloadOrphanCleanedAtOpen: an upload in progress when the owner closes leaves its
// attempt recorded, incomplete, with a partial object (as a crash would); the next owner
// deletes that object, clears the attempt and offloads the ledger again under a new UUID,
// while the bookie copy stays until the new copy is complete.
func TestOffloadOrphanCleanedAtOpen(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	mo := newMemOffloader()
	mo.stuck = make(chan blobKey, 1)
	cfg := memConfig()
	cfg.MaxEntriesPerLedger = 2
	cfg.Offloader = mo
	cfg.Offload = &OffloadPolicy{ThresholdBytes: 0, ThresholdAge: -1, DeletionLag: 0}
	m := mustOpen(t, e.f, "orphan", cfg)
	ps := addN(t, m, 0, 3)
	var orphan blobKey
	select {
	case orphan = <-mo.stuck:
	case <-ctx.Done():
		t.Fatal("no upload started")
	}
	if orphan.ledger != ps[0].LedgerID {
		t.Fatalf("offloading ledger %d, want the oldest, %d", orphan.ledger, ps[0].LedgerID)
	}
	if err := m.Close(ctx); err != nil { // cancels the upload
		t.Fatal(err)
	}
	in := storedRecord(t, e.ms, "orphan")
	if oc := in.Ledgers[0].Offload; oc == nil || oc.UUID != orphan.uuid || oc.Complete {
		t.Fatalf("after the interrupted upload the record has %+v", oc)
	}
	mo.mu.Lock()
	mo.stuck = nil
	mo.mu.Unlock()
	m = mustOpen(t, e.f, "orphan", cfg)
	waitUntil(t, "the ledger offloaded again", func() bool {
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		oc := st.Ledgers[0].Offload
		return oc != nil && oc.BookkeeperDeleted
	})
	st, _ := m.Stats(ctx)
	if oc := st.Ledgers[0].Offload; oc.UUID == orphan.uuid || !mo.has(blobKey{orphan.ledger, oc.UUID}) {
		t.Fatalf("retried offload %+v (orphan %s)", oc, orphan.uuid)
	}
	if mo.has(orphan) {
		t.Fatal("the orphan attempt's object was not deleted")
	}
	if es, err := m.Read(ctx, Earliest, 2); err != nil || len(es) != 2 || string(es[1].Data) != "m-1" {
		t.Fatalf("read the offloaded ledger: %v %v", es, err)
	}
}

// TestOffloadPolicyThreshold: with a size threshold, the oldest closed ledgers beyond it are
// offloaded at rollover; the read priority and the deletion lag change live; with no
// offloader, Offload fails with ErrOffloadDisabled.
func TestOffloadPolicyThreshold(t *testing.T) {
	e := newMemEnv(t)
	ctx := tctx(t)
	mo := newMemOffloader()
	cfg := memConfig()
	cfg.MaxEntriesPerLedger, cfg.CacheSize = 2, -1
	cfg.Offloader = mo
	// Each ledger holds 2 entries of 3 bytes: summing the closed ledgers from the newest, the
	// sum exceeds 7 bytes at the second newest; it and every older one are offloaded. Bookie
	// copies stay (lag -1).
	cfg.Offload = &OffloadPolicy{ThresholdBytes: 7, ThresholdAge: -1, DeletionLag: -1}
	m := mustOpen(t, e.f, "thr", cfg)
	ps := addN(t, m, 0, 9) // ledgers of 2, 2, 2, 2 and the current one
	want := []int64{ps[0].LedgerID, ps[2].LedgerID, ps[4].LedgerID}
	waitUntil(t, "all closed ledgers but the newest offloaded", func() bool {
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Ledgers {
			done := l.Offload != nil && l.Offload.Complete
			if done != slices.Contains(want, l.ID) || (l.Offload != nil && l.Offload.BookkeeperDeleted) {
				return false
			}
		}
		return true
	})
	// Reads go to the bookies while they have the ledger (bookkeeper-first), to the object
	// store under tiered-storage-first.
	read := func() {
		t.Helper()
		es, err := m.Read(ctx, Earliest, 2)
		if err != nil || len(es) != 2 || string(es[1].Data) != "m-1" {
			t.Fatalf("read: %v %v", es, err)
		}
	}
	read()
	if _, reads := mo.stats(); reads != 0 {
		t.Fatalf("%d reads served from the object store under bookkeeper-first", reads)
	}
	p := *cfg.Offload
	p.ReadPriority = ReadTieredStorageFirst
	if err := m.SetOffloadPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	read()
	if _, reads := mo.stats(); reads != 1 {
		t.Fatalf("%d reads served from the object store under tiered-storage-first, want 1", reads)
	}
	// A deletion lag set live deletes the bookie copies.
	p.DeletionLag = 0
	if err := m.SetOffloadPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the offloaded ledgers' bookie copies deleted", func() bool {
		e.bk.mu.Lock()
		defer e.bk.mu.Unlock()
		for _, id := range want {
			if !e.bk.deleted[id] {
				return false
			}
		}
		return true
	})
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	plain := mustOpen(t, e.f, "plain", memConfig())
	if _, err := plain.Offload(ctx, Latest); !errors.Is(err, ErrOffloadDisabled) {
		t.Fatalf("offload without an offloader: %v", err)
	}
}

// TestInfoOffloadFormat: a record without offload state stays format 1 (and older records
// read as before); one with an offload context is written as format 2 and round-trips; an
// unknown format or an inconsistent context is refused.
func TestInfoOffloadFormat(t *testing.T) {
	old := []byte(`{"format":1,"owner":"o","epoch":3,"ledgers":[{"id":4,"entries":2,"size":10,"ctime":1,"closed":2},{"id":7,"entries":0,"size":0,"ctime":3}]}`)
	in, err := decodeInfo(old)
	if err != nil || in.Ledgers[0].Offload != nil {
		t.Fatalf("format 1 record: %+v %v", in, err)
	}
	if b := in.marshal(); !strings.Contains(string(b), `"format":1`) || strings.Contains(string(b), "offload") {
		t.Fatalf("a record without offload state written as %s", b)
	}
	in.Ledgers[0].Offload = &OffloadContext{UUID: "u", Complete: true, BookkeeperDeleted: true, Started: 5, Timestamp: 6,
		Driver: "aws-s3", DriverMetadata: map[string]string{"bucket": "b"}}
	b := in.marshal()
	if !strings.Contains(string(b), `"format":2`) {
		t.Fatalf("a record with offload state written as %s", b)
	}
	back, err := decodeInfo(b)
	if err != nil || back.Ledgers[0].Offload == nil || back.Ledgers[0].Offload.DriverMetadata["bucket"] != "b" ||
		!back.Ledgers[0].Offload.BookkeeperDeleted {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	// clone copies the context: an update of the copy leaves the original alone.
	cl := back.clone()
	cl.Ledgers[0].Offload.DriverMetadata["bucket"] = "other"
	cl.Ledgers[0].Offload.Complete = false
	if back.Ledgers[0].Offload.DriverMetadata["bucket"] != "b" || !back.Ledgers[0].Offload.Complete {
		t.Fatal("clone shares the offload context")
	}
	for _, bad := range []string{
		`{"format":3,"ledgers":[]}`,
		`{"format":2,"ledgers":[{"id":4,"entries":2,"size":10,"ctime":1,"closed":2,"offload":{"uuid":""}}]}`,
		`{"format":2,"ledgers":[{"id":4,"entries":2,"size":10,"ctime":1,"closed":2,"offload":{"uuid":"u","bkDeleted":true}}]}`,
	} {
		if _, err := decodeInfo([]byte(bad)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("decode %s: %v, want ErrBadRecord", bad, err)
		}
	}
}

func TestOffloadNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want OffloadReadPriority
	}{{"bookkeeper-first", ReadBookkeeperFirst}, {"TIERED_STORAGE_FIRST", ReadTieredStorageFirst}, {"tiered-storage-first", ReadTieredStorageFirst}} {
		if got, err := ParseOffloadReadPriority(tc.in); err != nil || got != tc.want || parseMust(t, got.String()) != tc.want {
			t.Errorf("parse %q: %v %v", tc.in, got, err)
		}
	}
	if _, err := ParseOffloadReadPriority("nearest"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("parse nearest: %v", err)
	}
	for s, want := range map[OffloadState]string{OffloadNotRun: "NOT_RUN", OffloadRunning: "RUNNING", OffloadSuccess: "SUCCESS", OffloadError: "ERROR"} {
		if s.String() != want {
			t.Errorf("%d: %s, want %s", s, s, want)
		}
	}
	if p := DefaultOffloadPolicy(); p.ThresholdBytes != -1 || p.ThresholdAge != -1 || p.DeletionLag != 4*time.Hour || p.ReadPriority != ReadBookkeeperFirst {
		t.Errorf("default policy %+v", p)
	}
}

// parseMust parses a read priority's name, failing t on an error.
func parseMust(t *testing.T, s string) OffloadReadPriority {
	t.Helper()
	p, err := ParseOffloadReadPriority(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
