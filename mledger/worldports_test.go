package mledger

import (
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
	"github.com/magnetar-io/magnetar/sim"
)

// The composed world's ports: the managed ledger's Ledgers port on the real ledger.Writer and
// ledger.Recovery cores, driven over simulated bookies (sim.Bookie) on a simulated network, and
// its MetaStore port on the simulated metadata store (sim.MetaStore) over the same network.
// Both behave as BookieLedgers and AsyncStore do on real servers: a lost message is a timeout
// whose request may still take effect later (a slow "ghost" that lands after the caller gave
// up, so also after its re-read).

var errWorldTransient = errors.New("world: request failed (timeout or unreachable)")

// ---- MetaStore on sim.MetaStore ----

type worldMeta struct{ w *cworld }

func (m worldMeta) call(req any, cb func(sim.MetaReply, error)) {
	m.w.net.Call("meta", req, func(resp any, err error) {
		if err != nil {
			cb(sim.MetaReply{}, fmt.Errorf("%w: %w", errWorldTransient, err))
			return
		}
		r := resp.(sim.MetaReply)
		if errors.Is(r.Err, sim.ErrBadVersion) {
			r.Err = fmt.Errorf("%w: %w", metadata.ErrBadVersion, r.Err)
		}
		cb(r, r.Err)
	})
}

func (m worldMeta) Get(key string, cb func(metadata.KV, error)) {
	m.call(sim.MetaGet{Key: key}, func(r sim.MetaReply, err error) {
		switch {
		case err != nil:
			cb(metadata.KV{}, err)
		case !r.Found:
			cb(metadata.KV{}, fmt.Errorf("%w: %s", metadata.ErrNotFound, key))
		default:
			cb(metadata.KV{Key: key, Value: r.Value, Version: metadata.Version(r.Version)}, nil)
		}
	})
}

func (m worldMeta) Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	m.call(sim.MetaPut{Key: key, Value: slices.Clone(value), Expected: int64(expected)}, func(r sim.MetaReply, err error) {
		cb(metadata.Version(r.Version), err)
	})
}

func (m worldMeta) Delete(key string, expected metadata.Version, cb func(error)) {
	m.call(sim.MetaDelete{Key: key, Expected: int64(expected)}, func(_ sim.MetaReply, err error) { cb(err) })
}

func (m worldMeta) List(prefix string, cb func([]metadata.KV, error)) {
	m.call(sim.MetaList{Prefix: prefix}, func(r sim.MetaReply, err error) {
		out := make([]metadata.KV, len(r.KVs))
		for i, kv := range r.KVs {
			out[i] = metadata.KV{Key: kv.Key, Value: kv.Value, Version: metadata.Version(kv.Version)}
		}
		cb(out, err)
	})
}

// ---- Ledgers on ledger.Writer / ledger.Recovery ----

// worldLedgers is one owner's Ledgers port (ledgers know their creator, for the leak check).
type worldLedgers struct {
	w  *cworld
	sc *wcore
}

var worldPassword = []byte("pw")

// placement picks among the bookies that are up (a client's registration view).
type worldPlacement struct{ w *cworld }

func (p worldPlacement) up(exclude []string) []string {
	var out []string
	for _, id := range p.w.ids {
		if p.w.bookies[id].Up() && !slices.Contains(exclude, id) {
			out = append(out, id)
		}
	}
	return out
}

func (p worldPlacement) NewEnsemble(size int) ([]string, error) {
	ids := p.up(nil)
	if len(ids) < size {
		return nil, ledger.ErrNotEnoughBookies
	}
	p.w.s.Rand().Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids[:size], nil
}

func (p worldPlacement) Replace(exclude []string) (string, error) {
	ids := p.up(exclude)
	if len(ids) == 0 {
		return "", ledger.ErrNotEnoughBookies
	}
	return ids[p.w.s.Rand().IntN(len(ids))], nil
}

func (l *worldLedgers) Create(cfg LedgerConfig, cb func(Writer, error)) {
	w := l.w
	ens, err := worldPlacement{w}.NewEnsemble(cfg.Ensemble)
	if err != nil {
		w.s.After(0, "ledger.create-failed", func() { cb(nil, err) })
		return
	}
	w.nextLedger++
	id := w.nextLedger
	m := &ledger.Metadata{LedgerID: id, State: ledger.StateOpen, EnsembleSize: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum,
		AckQuorum: cfg.AckQuorum, Digest: ledger.DigestCRC32C, Password: cfg.Password,
		Ensembles: []ledger.Ensemble{{FirstEntry: 0, Bookies: ens}}, LastEntryID: -1}
	value, err := m.Marshal()
	if err != nil {
		w.failf("ledger %d: metadata does not encode: %v", id, err)
		return
	}
	worldMeta{w}.Put(metadata.LedgerKey(id), value, metadata.NotExists, func(v metadata.Version, err error) {
		if err != nil {
			cb(nil, err) // maybe created all the same: a ledger nobody was told of
			return
		}
		wr, err := ledger.NewWriter(ledger.WriterConfig{Meta: m, Version: v, Placement: worldPlacement{w}, MaxEnsembleChanges: 64,
			Encode: func(e ledger.Entry) []byte {
				return bk.AppendEntry(nil, id, e.EntryID, e.LAC, e.Length, bk.DigestCRC32C, e.Payload)
			}})
		if err != nil {
			cb(nil, err)
			return
		}
		w.made[id] = l.sc
		w.s.Tracef("world: ledger %d created by core %d (%s) on %v", id, l.sc.id, cfg.Purpose, ens)
		ww := &worldWriter{w: w, sc: l.sc, id: id, wr: wr, cbs: map[int64]func(int64, error){}}
		w.writers[id] = ww
		ww.tick()
		cb(ww, nil)
	})
}

func (l *worldLedgers) OpenRecover(id int64, _ []byte, cb func(LedgerEnd, error)) {
	w := l.w
	w.readLedger(id, func(m *ledger.Metadata, v metadata.Version, err error) {
		if err != nil {
			cb(LedgerEnd{}, err)
			return
		}
		if m.State == ledger.StateClosed {
			cb(LedgerEnd{LastEntry: m.LastEntryID, Size: m.Length}, nil)
			return
		}
		w.recoverLedger(m, v, func(res ledger.RecoveryResult) {
			if res.Err != nil {
				cb(LedgerEnd{}, portErr(res.Err))
				return
			}
			w.stats.Recoveries++
			cb(LedgerEnd{LastEntry: res.Meta.LastEntryID, Size: res.Meta.Length}, nil)
		})
	})
}

func (l *worldLedgers) Read(id int64, _ []byte, first, last int64, cb func([][]byte, error)) {
	w := l.w
	w.readLedger(id, func(m *ledger.Metadata, _ metadata.Version, err error) {
		if err != nil {
			cb(nil, err)
			return
		}
		known := m.LastEntryID // CLOSED: the end; OPEN: what a reader knows confirmed
		if m.State != ledger.StateClosed {
			known = -1
			if ww := w.writers[id]; ww != nil {
				known = ww.wr.LAC()
			}
		}
		if first < 0 || last < first || last > known {
			w.failf("L4: core %d read ledger %d entries %d..%d beyond what is known confirmed (%d, %v)", l.sc.id, id, first, last, known, m.State)
			cb(nil, errWorldTransient)
			return
		}
		out := make([][]byte, last-first+1)
		var next func(e int64, try int)
		next = func(e int64, try int) {
			if e > last {
				cb(out, nil)
				return
			}
			ws := m.WriteSet(e)
			if try >= len(ws) {
				cb(nil, fmt.Errorf("%w: ledger %d entry %d unreadable", errWorldTransient, id, e))
				return
			}
			req := &bk.Request{Op: bk.OpReadEntry, LedgerID: id, EntryID: e, MasterKey: bk.MasterKey(m.Password)}
			w.net.Call(ws[try], req, func(resp any, err error) {
				if err == nil && resp.(*bk.Response).Status == bk.StatusOK {
					if ent, derr := bk.DecodeEntry(resp.(*bk.Response).Body, bk.DigestCRC32C); derr == nil && ent.EntryID == e {
						out[e-first] = ent.Payload
						next(e+1, 0)
						return
					}
				}
				next(e, try+1)
			})
		}
		next(first, 0)
	})
}

// Delete fails on a lost message: the managed ledger then leaves the ledger to garbage
// collection (recorded in w.gc for the leak check).
func (l *worldLedgers) Delete(id int64, cb func(error)) {
	w := l.w
	worldMeta{w}.Get(metadata.LedgerKey(id), func(_ metadata.KV, err error) {
		switch {
		case errors.Is(err, metadata.ErrNotFound):
			cb(fmt.Errorf("%w: %d", ErrNoSuchLedger, id))
		case err != nil:
			w.gc[id] = true
			cb(err)
		default:
			worldMeta{w}.Delete(metadata.LedgerKey(id), metadata.AnyVersion, func(err error) {
				if err != nil {
					w.gc[id] = true
				}
				w.s.Tracef("world: ledger %d deleted by core %d: %v", id, l.sc.id, err)
				cb(err)
			})
		}
	})
}

// readLedger reads a ledger's record.
func (w *cworld) readLedger(id int64, cb func(*ledger.Metadata, metadata.Version, error)) {
	worldMeta{w}.Get(metadata.LedgerKey(id), func(kv metadata.KV, err error) {
		if errors.Is(err, metadata.ErrNotFound) {
			cb(nil, 0, fmt.Errorf("%w: %d", ErrNoSuchLedger, id))
			return
		}
		if err != nil {
			cb(nil, 0, err)
			return
		}
		m, err := ledger.UnmarshalMetadata(kv.Value)
		cb(m, kv.Version, err)
	})
}

// casLedger performs a core's MetaWrite (ledger's driver obligation 3): a conflict, or a
// failure whose outcome is unknown, comes back with the current record.
func (w *cworld) casLedger(mw ledger.MetaWrite, cb func(ledger.MetaResult)) {
	value, err := mw.Meta.Marshal()
	if err != nil {
		w.failf("ledger core proposed invalid metadata: %v", err)
		return
	}
	worldMeta{w}.Put(metadata.LedgerKey(mw.Meta.LedgerID), value, mw.Expected, func(v metadata.Version, err error) {
		if err == nil {
			cb(ledger.MetaResult{Seq: mw.Seq, Version: v})
			return
		}
		var retry func()
		retry = func() {
			w.readLedger(mw.Meta.LedgerID, func(cur *ledger.Metadata, cv metadata.Version, gerr error) {
				switch {
				case errors.Is(gerr, ErrNoSuchLedger):
					cb(ledger.MetaResult{Seq: mw.Seq, Err: fmt.Errorf("%w: %v", ledger.ErrNoSuchLedger, gerr)})
				case gerr != nil:
					w.s.After(w.s.Between(0, 2*ms), "ledger.meta-reread", retry)
				default:
					cb(ledger.MetaResult{Seq: mw.Seq, Err: fmt.Errorf("%w: %v", ledger.ErrMetadataConflict, err),
						Current: cur, CurrentVersion: cv})
				}
			})
		}
		retry()
	})
}

func (w *cworld) sendAdd(lid int64, a ledger.AddRequest, cb func(ledger.AddResult)) {
	req := &bk.Request{Op: bk.OpAddEntry, LedgerID: lid, EntryID: a.Entry.EntryID, MasterKey: bk.MasterKey(worldPassword),
		Digest: bk.DigestCRC32C, Body: a.Body}
	if a.Recovery {
		req.Flags |= bk.FlagRecovery
	}
	w.net.Call(a.Bookie, req, func(resp any, err error) {
		r := ledger.AddResult{Token: a.Token, Bookie: a.Bookie, Err: err}
		if err == nil {
			r.Status = resp.(*bk.Response).Status
		}
		cb(r)
	})
}

// recoverLedger drives a ledger.Recovery to its end.
func (w *cworld) recoverLedger(m *ledger.Metadata, v metadata.Version, cb func(ledger.RecoveryResult)) {
	rec, err := ledger.NewRecovery(ledger.RecoveryConfig{Meta: m, Version: v, Placement: worldPlacement{w}, ReadWindow: 4,
		MaxEnsembleChanges: 32})
	if err != nil {
		cb(ledger.RecoveryResult{Err: err})
		return
	}
	id, key := m.LedgerID, bk.MasterKey(m.Password)
	var pump func()
	pump = func() {
		for rec.HasReady() {
			rd := rec.Ready()
			for _, q := range rd.Reads {
				req := &bk.Request{Op: bk.OpReadEntry, LedgerID: id, EntryID: q.EntryID, MasterKey: key}
				if q.Fence {
					req.Flags |= bk.FlagFence
				}
				w.net.Call(q.Bookie, req, func(resp any, err error) {
					r := ledger.ReadResult{Token: q.Token, Bookie: q.Bookie, Err: err}
					if err == nil {
						rs := resp.(*bk.Response)
						r.Status = rs.Status
						if rs.Status == bk.StatusOK {
							e, derr := bk.DecodeEntry(rs.Body, bk.DigestCRC32C)
							if derr != nil || e.LedgerID != id || (q.EntryID != bk.LastEntry && e.EntryID != q.EntryID) {
								r.Status = bk.StatusDigestMismatch
							} else {
								r.Entry = ledger.Entry{EntryID: e.EntryID, LAC: e.LAC, Length: e.Length, Payload: e.Payload}
								r.Body = rs.Body
							}
						}
					}
					rec.Step(r)
					pump()
				})
			}
			for _, a := range rd.Adds {
				w.sendAdd(id, a, func(r ledger.AddResult) { rec.Step(r); pump() })
			}
			for _, mw := range rd.MetaWrites {
				w.casLedger(mw, func(r ledger.MetaResult) { rec.Step(r); pump() })
			}
			if res := rd.Recovered; res != nil {
				cb(*res)
				return
			}
		}
	}
	rec.Start()
	pump()
}

// worldWriter is the port's Writer on a ledger.Writer, driven as Handle.run drives it.
type worldWriter struct {
	w       *cworld
	sc      *wcore
	id      int64
	wr      *ledger.Writer
	cbs     map[int64]func(int64, error)
	closing []func(LedgerEnd, error)
	closed  *ledger.CloseResult
}

func (ww *worldWriter) ID() int64  { return ww.id }
func (ww *worldWriter) LAC() int64 { return ww.wr.LAC() }

func (ww *worldWriter) Append(payload []byte, cb func(int64, error)) {
	e, err := ww.wr.Append(payload)
	if err != nil {
		ww.w.s.After(0, "add.rejected", func() { cb(-1, portErr(err)) })
		return
	}
	ww.cbs[e] = cb
	ww.pump()
}

// Close closes the ledger; if the writer cannot (it failed), recovery learns the end, as
// BookieLedgers does.
func (ww *worldWriter) Close(cb func(LedgerEnd, error)) {
	if c := ww.closed; c != nil && c.Err == nil {
		ww.w.s.After(0, "close.again", func() { cb(LedgerEnd{LastEntry: c.Meta.LastEntryID, Size: c.Meta.Length}, nil) })
		return
	}
	ww.closing = append(ww.closing, cb)
	if len(ww.closing) == 1 {
		ww.wr.Close()
		ww.pump()
	}
}

func (ww *worldWriter) tick() {
	ww.w.s.After(10*ms, "", func() {
		if st := ww.wr.State(); ww.w.ended || st == ledger.WriterClosed || st == ledger.WriterFenced || st == ledger.WriterFailed {
			return
		}
		ww.wr.Tick()
		ww.pump()
		ww.tick()
	})
}

func (ww *worldWriter) pump() {
	w, wr := ww.w, ww.wr
	for wr.HasReady() {
		rd := wr.Ready()
		for _, a := range rd.Adds {
			w.sendAdd(ww.id, a, func(r ledger.AddResult) { wr.Step(r); ww.pump() })
		}
		for _, l := range rd.LACWrites {
			w.net.Send(l.Bookie, &bk.Request{Op: bk.OpWriteLAC, LedgerID: ww.id, LAC: l.LAC, MasterKey: bk.MasterKey(worldPassword),
				Body: bk.AppendLACBody(nil, ww.id, l.LAC, bk.DigestCRC32C)})
		}
		for _, mw := range rd.MetaWrites {
			w.casLedger(mw, func(r ledger.MetaResult) { wr.Step(r); ww.pump() })
		}
		for _, c := range rd.Completions {
			cb := ww.cbs[c.EntryID]
			delete(ww.cbs, c.EntryID)
			if cb != nil {
				cb(c.EntryID, portErr(c.Err))
			}
		}
		if rd.Closed != nil {
			ww.closedWith(*rd.Closed)
		}
		wr.Advance(&rd)
	}
}

func (ww *worldWriter) closedWith(res ledger.CloseResult) {
	w := ww.w
	report := func(end LedgerEnd, err error) {
		cbs := ww.closing
		ww.closing = nil
		for _, cb := range cbs {
			cb(end, err)
		}
	}
	switch {
	case res.Err == nil:
		ww.closed = &res
		report(LedgerEnd{LastEntry: res.Meta.LastEntryID, Size: res.Meta.Length}, nil)
	case errors.Is(res.Err, ledger.ErrFenced):
		report(LedgerEnd{}, portErr(res.Err))
	default:
		w.readLedger(ww.id, func(m *ledger.Metadata, v metadata.Version, err error) {
			if err != nil {
				report(LedgerEnd{}, err)
				return
			}
			w.recoverLedger(m, v, func(r ledger.RecoveryResult) {
				if r.Err != nil {
					report(LedgerEnd{}, fmt.Errorf("close ledger %d: %w (recovery: %w)", ww.id, res.Err, portErr(r.Err)))
					return
				}
				report(LedgerEnd{LastEntry: r.Meta.LastEntryID, Size: r.Meta.Length}, nil)
			})
		})
	}
}
