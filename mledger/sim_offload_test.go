package mledger

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/sim"
)

// The offload simulation: TestSim's world (sim_test.go) with an in-memory object store as
// the offloader. An upload writes the ledger's entries in data blocks, one event each, then
// the index; blocks and deletes are slow by the seed, uploads fail mid-way, a failed delete
// may still be applied later (a request that timed out at the client and landed after), reads
// fail, and the owner may crash in the middle of an upload (its upload stops there). After
// every step (checkOffload), on the record as stored:
//
//   - TS1: every ledger the record names is readable from a complete copy: its bookie ledger
//     (not deleted) or a complete offloaded copy;
//   - TS2: a copy the record says complete has its index and every entry, with the ledger's
//     bytes, for as long as the record names it;
//
// and at the end (checkBlobLeaks):
//
//   - TS3: no object is left that the record does not name (a trimmed ledger's, a failed or
//     orphaned attempt's), except where the owner that had to delete it crashed first, or it
//     was written by an owner that had lost the record (an object store has no fencing).
//
// TS4 (reads return the right bytes, and fail rather than skip) is checked by the world's
// consumer and reopen reads, which go through the offloaded copies once the bookie copies
// are deleted (or first, with tiered-storage-first).

// offloadParams are one seed's offload policy and object-store behaviour.
type offloadParams struct {
	policy       OffloadPolicy
	blockEntries int64         // entries per data block
	blockDelay   time.Duration // each block, index, read and delete takes 0..blockDelay
	uploadFail   float64       // per block
	readFail     float64
	deleteFail   float64
	lateDelete   float64 // a failed delete is applied later
	crashUpload  float64 // per block: the owner crashes while it uploads
	request      bool    // an admin request "offload everything"
	requestAt    time.Duration
	retention    time.Duration
}

func (p offloadParams) String() string {
	return fmt.Sprintf("threshold=%dB/%v lag=%v read=%v block=%d delay<=%v fail(upload=%.2f read=%.2f delete=%.2f late=%.2f) crashUpload=%.2f request=%v@%v retention=%v",
		p.policy.ThresholdBytes, p.policy.ThresholdAge, p.policy.DeletionLag, p.policy.ReadPriority, p.blockEntries,
		p.blockDelay, p.uploadFail, p.readFail, p.deleteFail, p.lateDelete, p.crashUpload, p.request, p.requestAt, p.retention)
}

// blobKey names one attempt's objects.
type blobKey struct {
	ledger int64
	uuid   string
}

// simBlob is one attempt's data blocks and index.
type simBlob struct {
	entries map[int64][]byte
	index   bool
	writers map[int]bool // core ids
	zombie  bool         // some write came from an owner that no longer owned the record
}

// simOffload is the object store and the offload side of one world.
type simOffload struct {
	w     *world
	p     offloadParams
	blobs map[blobKey]*simBlob
	uuids int
	// duty is the owner whose record write dropped an attempt's objects from the record (it
	// must delete them).
	duty map[blobKey]*simCore
}

func newSimOffload(w *world) {
	s := w.s
	r := s.Rand()
	rate := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return r.Float64() * max
	}
	p := offloadParams{
		blockEntries: int64(1 + r.IntN(3)),
		blockDelay:   time.Duration(1+r.IntN(6)) * time.Millisecond,
		uploadFail:   rate(0.15),
		readFail:     rate(0.2),
		deleteFail:   rate(0.3),
		lateDelete:   r.Float64(),
		crashUpload:  rate(0.05),
		request:      r.IntN(3) == 0,
	}
	if r.IntN(4) == 0 {
		p.blockDelay = time.Duration(10+r.IntN(30)) * time.Millisecond // a slow object store
	}
	p.requestAt = s.Between(0, w.p.addWindow)
	switch r.IntN(4) {
	case 0:
		p.policy.ThresholdBytes = -1
	case 1:
		p.policy.ThresholdBytes = 0
	default:
		p.policy.ThresholdBytes = int64(5 + r.IntN(60))
	}
	if r.IntN(2) == 0 {
		p.policy.ThresholdAge = -1
	} else {
		p.policy.ThresholdAge = s.Between(0, 30*time.Millisecond)
	}
	if r.IntN(6) == 0 {
		p.policy.DeletionLag = -1
	} else if r.IntN(2) == 0 {
		p.policy.DeletionLag = s.Between(0, 30*time.Millisecond)
	}
	if r.IntN(2) == 0 {
		p.policy.ReadPriority = ReadTieredStorageFirst
	}
	p.retention = s.Between(0, 80*time.Millisecond)
	o := &simOffload{w: w, p: p, blobs: map[blobKey]*simBlob{}, duty: map[blobKey]*simCore{}}
	w.off = o
	w.cfg.Offload = &o.p.policy
	if !w.p.retainAll {
		// Keep consumed ledgers a while, so that offloaded (and bookie-deleted) ledgers are
		// read and then trimmed.
		w.cfg.RetentionTime, w.cfg.RetentionSize = p.retention, -1
	}
}

// attach gives a new owner the object store as its offloader.
func (o *simOffload) attach(sc *simCore) {
	sc.c.off.port = &simOffloadPort{o: o, sc: sc}
	sc.c.uuidGen = func() string {
		o.uuids++
		return fmt.Sprintf("u%d-%d", sc.id, o.uuids)
	}
}

// schedule adds the admin request.
func (o *simOffload) schedule() {
	if !o.p.request {
		return
	}
	w := o.w
	var req func()
	req = func() {
		sc := w.owner
		if w.ended {
			return
		}
		if !sc.opened || !sc.alive || sc.closed {
			w.s.After(5*time.Millisecond, "client.offload", req)
			return
		}
		sc.c.offloadTrigger(Latest, func(st OffloadStatus, err error) {
			w.s.Tracef("offload request on core %d: %+v %v", sc.id, st, err)
			if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrOffloadInProgress) {
				w.failf("offload request: %v", err)
			}
		})
	}
	w.s.After(o.p.requestAt, "client.offload", req)
}

func (o *simOffload) delay() time.Duration { return o.w.s.Between(0, o.p.blockDelay) }

// owns reports whether core sc owns the record now (its writes are not a zombie's).
func (o *simOffload) owns(sc *simCore) bool {
	in := o.w.record()
	return in != nil && in.Owner == sc.c.token
}

// simOffloadPort is one owner's offloadPort on the simulated object store.
type simOffloadPort struct {
	o  *simOffload
	sc *simCore
}

func (p *simOffloadPort) driver() string { return "sim" }

func (p *simOffloadPort) offload(req OffloadRequest, read func(first, last int64, cb func([][]byte, error)),
	cb func(map[string]string, error)) func() {
	o, w, sc := p.o, p.o.w, p.sc
	key := blobKey{req.LedgerID, req.UUID}
	cancelled := false
	var block func(first int64)
	// put stores some objects of the attempt (an upload stops when its owner crashes: no
	// completion comes).
	put := func(kind string, fn func(b *simBlob)) bool {
		if !sc.alive {
			return false
		}
		b := o.blobs[key]
		if b == nil {
			b = &simBlob{entries: map[int64][]byte{}, writers: map[int]bool{}}
			o.blobs[key] = b
		}
		b.writers[sc.id] = true
		if !o.owns(sc) {
			b.zombie = true
		}
		fn(b)
		w.s.Tracef("sim: %s of ledger %d attempt %s written by core %d", kind, req.LedgerID, req.UUID, sc.id)
		return true
	}
	fail := func(err error) {
		w.stats.UploadFails++
		cb(nil, err)
	}
	block = func(first int64) {
		if !sc.alive {
			return
		}
		if cancelled {
			cb(nil, errors.New("sim: upload cancelled"))
			return
		}
		if first >= req.Entries {
			w.deliver("blob.index", o.delay(), func() {
				if cancelled || w.s.Chance(o.p.uploadFail) {
					fail(errSimTransient)
					return
				}
				if put("index", func(b *simBlob) { b.index = true }) {
					cb(map[string]string{"blocks": fmt.Sprint((req.Entries + o.p.blockEntries - 1) / o.p.blockEntries)}, nil)
				}
			})
			return
		}
		last := min(first+o.p.blockEntries, req.Entries) - 1
		read(first, last, func(d [][]byte, err error) {
			if err != nil {
				if sc.alive {
					fail(fmt.Errorf("read ledger %d: %w", req.LedgerID, err))
				}
				return
			}
			w.deliver("blob.block", o.delay(), func() {
				if !sc.alive {
					return
				}
				// (Crashes stay within the add window, as the world's others: the restart
				// must come before finish closes the owners.)
				if w.s.Chance(o.p.crashUpload) && w.s.Now() < w.p.addWindow && w.owner == sc {
					w.stats.UploadCrashes++
					w.s.Tracef("core %d crashes while uploading ledger %d", sc.id, req.LedgerID)
					w.crash()
					return
				}
				if cancelled || w.s.Chance(o.p.uploadFail) {
					fail(errSimTransient)
					return
				}
				if put("block", func(b *simBlob) {
					for i, e := range d {
						b.entries[first+int64(i)] = slices.Clone(e)
					}
				}) {
					block(last + 1)
				}
			})
		})
	}
	w.deliver("blob.start", o.delay(), func() { block(0) })
	return func() { cancelled = true }
}

func (p *simOffloadPort) readOffloaded(l OffloadedLedger, first, last int64, cb func([][]byte, error)) {
	o, w := p.o, p.o.w
	w.deliver("blob.read", o.delay(), func() {
		if w.s.Chance(o.p.readFail) {
			w.stats.OffloadReadFails++
			cb(nil, errSimTransient)
			return
		}
		b := o.blobs[blobKey{l.LedgerID, l.UUID}]
		if b == nil || !b.index {
			cb(nil, fmt.Errorf("sim: no index object for ledger %d attempt %s", l.LedgerID, l.UUID))
			return
		}
		out := make([][]byte, 0, last-first+1)
		for e := first; e <= last; e++ {
			d, ok := b.entries[e]
			if !ok {
				cb(nil, fmt.Errorf("sim: ledger %d attempt %s has no entry %d", l.LedgerID, l.UUID, e))
				return
			}
			out = append(out, slices.Clone(d))
		}
		w.stats.OffloadReads++
		cb(out, nil)
	})
}

func (p *simOffloadPort) deleteOffloaded(l OffloadedLedger, cb func(error)) {
	o, w := p.o, p.o.w
	key := blobKey{l.LedgerID, l.UUID}
	apply := func() {
		if _, ok := o.blobs[key]; ok {
			w.s.Tracef("sim: objects of ledger %d attempt %s deleted", l.LedgerID, l.UUID)
			delete(o.blobs, key)
		}
	}
	w.deliver("blob.delete", o.delay(), func() {
		if w.s.Chance(o.p.deleteFail) {
			if w.s.Chance(o.p.lateDelete) {
				w.stats.LateDeletes++
				w.deliver("blob.late-delete", w.s.Between(0, 100*time.Millisecond), apply)
			}
			cb(errSimTransient)
			return
		}
		apply()
		cb(nil)
	})
}

// complete reports whether attempt key has its index and every entry of ledger id, with
// the ledger's bytes (why not, otherwise).
func (o *simOffload) complete(id int64, uuid string, entries int64) error {
	b := o.blobs[blobKey{id, uuid}]
	if b == nil {
		return errors.New("no objects")
	}
	if !b.index {
		return errors.New("no index object")
	}
	sl := o.w.bk.ls[id]
	for e := int64(0); e < entries; e++ {
		d, ok := b.entries[e]
		switch {
		case !ok:
			return fmt.Errorf("no entry %d", e)
		case sl == nil || e >= int64(len(sl.data)) || string(sl.data[e]) != string(d):
			return fmt.Errorf("entry %d differs from the ledger's", e)
		}
	}
	return nil
}

// offloadedCopy reports whether the record's ledger l has a complete offloaded copy.
func (w *world) offloadedCopy(l LedgerInfo) bool {
	return w.off != nil && l.Offload != nil && l.Offload.Complete && w.off.complete(l.ID, l.Offload.UUID, l.Entries) == nil
}

// checkOffload is TS1 and TS2 on the record as stored, after every step.
func (w *world) checkOffload(in *Info) {
	o := w.off
	if o == nil {
		return
	}
	for _, l := range in.Ledgers {
		oc := l.Offload
		if oc != nil && oc.Complete {
			if err := o.complete(l.ID, oc.UUID, l.Entries); err != nil {
				w.failf("TS2: the record says ledger %d is offloaded (attempt %s), but its copy is incomplete: %v", l.ID, oc.UUID, err)
			}
		}
		if sl := w.bk.ls[l.ID]; (sl == nil || sl.deleted) && (oc == nil || !oc.Complete) {
			w.failf("TS1: ledger %d in the record has neither its bookie copy nor a complete offloaded copy (%+v)", l.ID, oc)
		}
	}
}

// onOffloadChange tracks who dropped an attempt from the record (it must delete its
// objects), on every change of the record.
func (o *simOffload) onRecordChange(by *simCore, old, nw *Info) {
	for _, l := range old.Ledgers {
		if l.Offload == nil {
			continue
		}
		i := -1
		if nw != nil {
			i = nw.ledger(l.ID)
		}
		if i < 0 || nw.Ledgers[i].Offload == nil || nw.Ledgers[i].Offload.UUID != l.Offload.UUID {
			o.duty[blobKey{l.ID, l.Offload.UUID}] = by
			if i < 0 {
				o.w.stats.OffloadedTrims++
			} else if !l.Offload.Complete {
				o.w.stats.OrphansCleaned++
			}
		}
	}
	if nw == nil {
		return
	}
	for _, l := range nw.Ledgers {
		oc := l.Offload
		if oc == nil {
			continue
		}
		if i := old.ledger(l.ID); i >= 0 {
			if prev := old.Ledgers[i].Offload; prev != nil && prev.UUID == oc.UUID {
				if oc.Complete && !prev.Complete {
					o.w.stats.Offloaded++
				}
				if oc.BookkeeperDeleted && !prev.BookkeeperDeleted {
					o.w.stats.BookieDeletes++
				}
			}
		}
	}
}

// checkBlobLeaks is TS3, at the end: every object left is named by the record, or its
// cleanup was the duty of an owner that crashed, or a zombie wrote it.
func (o *simOffload) checkBlobLeaks() {
	w := o.w
	in := w.record()
	for key, b := range o.blobs {
		if in != nil {
			if i := in.ledger(key.ledger); i >= 0 && in.Ledgers[i].Offload != nil && in.Ledgers[i].Offload.UUID == key.uuid {
				continue
			}
		}
		if b.zombie {
			continue // written after its owner lost the record: nobody knows of it
		}
		excused := false
		for id := range b.writers {
			if !w.cores[id-1].alive {
				excused = true // crashed before it could clean up (or record the attempt's end)
			}
		}
		if by := o.duty[key]; by != nil && !by.alive {
			excused = true
		}
		if !excused {
			w.failf("TS3: objects of ledger %d attempt %s (written by cores %v) are left, and the record does not name them",
				key.ledger, key.uuid, b.writers)
		}
	}
}

func runOffloadSeed(seed int64, mut mutation, verbose bool) (sim.Outcome, simStats) {
	w := newWorldWith(seed, mut, verbose, true)
	o, st := w.outcome(w.run())
	o.Params = offloadSeedParams{w.p, w.off.p}
	return o, st
}

type offloadSeedParams struct {
	simParams
	off offloadParams
}

func (p offloadSeedParams) String() string {
	return p.simParams.String() + " offload: " + p.off.String()
}

// TestSimOffload is TestSim with tiered storage: ledgers offloaded by policy and by request,
// bookie copies deleted after the lag, reads from the object store, and a failing, slow
// object store and owner crashes in the middle of uploads. It checks TS1–TS4 besides
// TestSim's invariants.
func TestSimOffload(t *testing.T) {
	st, ran, failed := runSeeds(t, offloadSeeds(), func(seed int64, verbose bool) (sim.Outcome, simStats) {
		return runOffloadSeed(seed, mutation{}, verbose)
	})
	if failed {
		return
	}
	t.Logf("%+v", st)
	sim.RequireCoverage(t, ran, 50, map[string]int{
		"offloaded ledger": st.Offloaded, "bookie copy deleted": st.BookieDeletes, "read from the object store": st.OffloadReads,
		"failed object-store read": st.OffloadReadFails, "failed upload": st.UploadFails, "crash during an upload": st.UploadCrashes,
		"orphan attempt cleaned up": st.OrphansCleaned, "trim of an offloaded ledger": st.OffloadedTrims,
		"late object delete": st.LateDeletes, "crash": st.Crashes, "cursor read": st.CursorReads,
	})
}

// offloadSeeds is how many seeds TestSimOffload runs: a twentieth of -seeds (50 in CI, which
// also runs the seeds of TestSimOffloadCatchesMutations; an offload seed costs about twice a
// TestSim seed).
func offloadSeeds() int { return max(1, *flags.Count/20) }

// TestSimOffloadCatchesMutations proves TS1–TS3 can fail: each deliberately broken offload
// is caught by some seed.
func TestSimOffloadCatchesMutations(t *testing.T) {
	catchMutations(t, 2000, []namedMutation{
		{Name: "TS1: the bookie copy is deleted before the offload is complete", Mut: mutation{deleteBookieBeforeComplete: true}},
		{Name: "TS2: an offload is recorded complete before its last block and index are written", Mut: mutation{offloadCompleteEarly: true}},
		{Name: "TS2: a retried offload reuses the failed attempt's prefix", Mut: mutation{reuseAttemptUUID: true}},
		{Name: "TS1: a trim deletes the offloaded objects before the record drops the ledger", Mut: mutation{trimDeletesBlobsFirst: true}},
		{Name: "TS3: an orphan attempt is cleared without deleting its objects", Mut: mutation{skipOrphanCleanup: true}},
	}, func(seed int64, mut mutation) error {
		o, _ := runOffloadSeed(seed, mut, false)
		return o.Err
	})
}

// TestSimOffloadDeterministic replays offload seeds and requires identical traces.
func TestSimOffloadDeterministic(t *testing.T) {
	sim.CheckDeterministic(t, 10, func(seed int64) *sim.Sim {
		o, _ := runOffloadSeed(seed, mutation{}, true)
		return o.Sim
	})
}
