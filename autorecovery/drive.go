package autorecovery

import (
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// This file drives the sans-I/O cores (Replicator, Checker, ledger.Recovery) on an Env: it
// performs their Ready and feeds the results back, on the owner goroutine.

// runReplicator drives r until it is done and calls done with its result.
func runReplicator(env Env, r *Replicator, placement ledger.Placement, done func(Result)) {
	var pump func()
	pump = func() {
		for r.HasReady() {
			rd := r.Ready()
			for _, q := range rd.Bookies {
				env.Bookie(q.Bookie, q.Req, func(resp bk.Response, err error) {
					r.Step(BookieResult{Token: q.Token, Resp: resp, Err: err})
					pump()
				})
			}
			for _, mw := range rd.MetaWrites {
				casMeta(env, mw, func(res ledger.MetaResult) {
					r.Step(res)
					pump()
				})
			}
			if rd.Recover {
				recoverLedger(env, r.meta.LedgerID, placement, func(res RecoverResult) {
					r.Step(res)
					pump()
				})
			}
			if rd.Done != nil {
				done(*rd.Done)
				return
			}
		}
	}
	r.Start()
	pump()
}

// readLedger reads and decodes a ledger's record.
func readLedger(env Env, id int64, cb func(*ledger.Metadata, metadata.Version, error)) {
	env.Get(metadata.LedgerKey(id), func(kv metadata.KV, err error) {
		if errors.Is(err, metadata.ErrNotFound) {
			cb(nil, 0, fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, id))
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

// casMeta performs a ledger core's MetaWrite (ledger's driver obligation 3): on a version
// conflict, or an error that leaves the outcome unknown, the current record comes back with
// ErrMetadataConflict.
func casMeta(env Env, mw ledger.MetaWrite, cb func(ledger.MetaResult)) {
	value, err := mw.Meta.Marshal()
	if err != nil {
		cb(ledger.MetaResult{Seq: mw.Seq, Err: err})
		return
	}
	env.Put(metadata.LedgerKey(mw.Meta.LedgerID), value, mw.Expected, func(v metadata.Version, err error) {
		if err == nil {
			cb(ledger.MetaResult{Seq: mw.Seq, Version: v})
			return
		}
		if errors.Is(err, metadata.ErrClosed) {
			cb(ledger.MetaResult{Seq: mw.Seq, Err: err})
			return
		}
		readLedger(env, mw.Meta.LedgerID, func(cur *ledger.Metadata, cv metadata.Version, gerr error) {
			if gerr != nil {
				cb(ledger.MetaResult{Seq: mw.Seq, Err: fmt.Errorf("%w (then %v)", err, gerr)})
				return
			}
			cb(ledger.MetaResult{Seq: mw.Seq, Err: fmt.Errorf("%w: %v", ledger.ErrMetadataConflict, err),
				Current: cur, CurrentVersion: cv})
		})
	})
}

// recoverLedger opens a ledger with recovery (ledger.Recovery: mark IN_RECOVERY, fence,
// re-add, close; a bookie that fails a re-add is replaced through placement) and calls cb with
// the CLOSED record.
func recoverLedger(env Env, id int64, placement ledger.Placement, cb func(RecoverResult)) {
	readLedger(env, id, func(m *ledger.Metadata, v metadata.Version, err error) {
		if err != nil {
			cb(RecoverResult{Err: err})
			return
		}
		rec, err := ledger.NewRecovery(ledger.RecoveryConfig{Meta: m, Version: v, Placement: placement, ReadWindow: 16})
		if err != nil {
			cb(RecoverResult{Err: err})
			return
		}
		key, digest := bk.MasterKey(m.Password), m.Digest.Wire()
		var pump func()
		pump = func() {
			for rec.HasReady() {
				rd := rec.Ready()
				for _, q := range rd.Reads {
					req := &bk.Request{Op: bk.OpReadEntry, LedgerID: id, EntryID: q.EntryID, MasterKey: key}
					if q.Fence {
						req.Flags |= bk.FlagFence
					}
					env.Bookie(q.Bookie, req, func(resp bk.Response, err error) {
						rec.Step(readResult(id, digest, q, resp, err))
						pump()
					})
				}
				for _, a := range rd.Adds {
					req := &bk.Request{Op: bk.OpAddEntry, LedgerID: id, EntryID: a.Entry.EntryID, MasterKey: key,
						Digest: digest, Body: a.Body}
					if a.Recovery {
						req.Flags |= bk.FlagRecovery
					}
					env.Bookie(a.Bookie, req, func(resp bk.Response, err error) {
						rec.Step(ledger.AddResult{Token: a.Token, Bookie: a.Bookie, Status: resp.Status, Err: err})
						pump()
					})
				}
				for _, mw := range rd.MetaWrites {
					casMeta(env, mw, func(res ledger.MetaResult) {
						rec.Step(res)
						pump()
					})
				}
				if res := rd.Recovered; res != nil {
					cb(RecoverResult{Meta: res.Meta, Version: res.Version, Err: res.Err})
					return
				}
			}
		}
		rec.Start()
		pump()
	})
}

// readResult verifies a read answer for ledger.Recovery: an entry whose digest or ids do not
// check out is reported as bk.StatusDigestMismatch.
func readResult(id int64, digest bk.DigestType, q ledger.ReadRequest, resp bk.Response, err error) ledger.ReadResult {
	r := ledger.ReadResult{Token: q.Token, Bookie: q.Bookie, Status: resp.Status, Err: err}
	if err != nil || resp.Status != bk.StatusOK {
		return r
	}
	e, derr := bk.DecodeEntry(resp.Body, digest)
	if derr != nil || e.LedgerID != id || (q.EntryID != bk.LastEntry && e.EntryID != q.EntryID) {
		r.Status = bk.StatusDigestMismatch
		return r
	}
	r.Entry = ledger.Entry{EntryID: e.EntryID, LAC: e.LAC, Length: e.Length, Payload: e.Payload}
	r.Body = resp.Body
	return r
}

// markLedger adds bookies to ledger id's under-replication mark (creating it), by
// compare-and-swap with a few retries; cb reports whether the mark changed.
func markLedger(env Env, id int64, bookies []string, reason string, cb func(changed bool, err error)) {
	key := metadata.UnderReplicatedKey(id)
	var try func(attempt int)
	try = func(attempt int) {
		env.Get(key, func(kv metadata.KV, err error) {
			var m Mark
			switch {
			case errors.Is(err, metadata.ErrNotFound):
				m = Mark{Reason: reason, Created: env.Now().UnixMilli()}
			case err != nil && attempt < 5 && !errors.Is(err, metadata.ErrClosed):
				try(attempt + 1)
				return
			case err != nil:
				cb(false, err)
				return
			default:
				if m, err = decodeMark(kv.Value); err != nil {
					m = Mark{Reason: reason, Created: env.Now().UnixMilli()} // rewrite a corrupt mark
				}
			}
			m2, changed := m.withMissing(bookies)
			if !changed && kv.Version != 0 {
				cb(false, nil)
				return
			}
			if changed {
				m2.RetryAt, m2.Failures = 0, 0 // new work: no reason to wait
			}
			env.Put(key, m2.encode(), kv.Version, func(_ metadata.Version, err error) {
				switch {
				case err == nil:
					cb(true, nil)
				case !errors.Is(err, metadata.ErrClosed) && attempt < 5:
					// A conflict, or an unknown outcome: the next Get tells.
					try(attempt + 1)
				default:
					cb(false, err)
				}
			})
		})
	}
	try(0)
}

// registered lists the live bookies: writable ones and read-only ones.
func registered(env Env, cb func(writable, readOnly []string, err error)) {
	env.List(metadata.PrefixAvailable, func(w []metadata.KV, err error) {
		if err != nil {
			cb(nil, nil, err)
			return
		}
		env.List(metadata.PrefixReadOnly, func(ro []metadata.KV, err error) {
			if err != nil {
				cb(nil, nil, err)
				return
			}
			cb(idsOf(w, metadata.PrefixAvailable), idsOf(ro, metadata.PrefixReadOnly), nil)
		})
	})
}

func idsOf(kvs []metadata.KV, prefix string) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, kv.Key[len(prefix):])
	}
	return out
}

// listPlacement picks replacement bookies at random among the writable ones it was given.
type listPlacement struct {
	env      Env
	writable []string
}

func (p listPlacement) NewEnsemble(size int) ([]string, error) {
	if len(p.writable) < size {
		return nil, fmt.Errorf("%w: need %d, %d writable", ledger.ErrNotEnoughBookies, size, len(p.writable))
	}
	all := slices.Clone(p.writable)
	p.env.Rand().Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:size], nil
}

func (p listPlacement) Replace(exclude []string) (string, error) {
	var cands []string
	for _, b := range p.writable {
		if !slices.Contains(exclude, b) {
			cands = append(cands, b)
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%w: no writable bookie outside %v", ledger.ErrNotEnoughBookies, exclude)
	}
	return cands[p.env.Rand().IntN(len(cands))], nil
}
