package bookie

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/proto/bk"
)

func dataPath(dataDir, name string) string { return filepath.Join(dataDir, "current", name) }

// maxLongPoll bounds the wait a long-poll read may ask for.
const maxLongPoll = 5 * time.Minute

// handle dispatches one request. It runs on the connection's read goroutine and never waits
// for I/O completion: durable replies are sent from the journal's completion callback.
// req.Body is valid only until handle returns (it is the connection's read buffer).
func (b *Bookie) handle(c *conn, req *bk.Request) {
	switch req.Op {
	case bk.OpAddEntry:
		b.handleAdd(c, req)
	case bk.OpReadEntry:
		b.handleRead(c, req)
	case bk.OpWriteLAC:
		b.handleWriteLAC(c, req)
	case bk.OpReadLAC:
		b.handleReadLAC(c, req)
	case bk.OpLongPoll:
		b.handleLongPoll(c, req)
	case bk.OpForce:
		b.handleForce(c, req)
	case bk.OpListEntries:
		b.handleListEntries(c, req)
	default:
		c.respond(reply(req, bk.StatusBadRequest))
	}
}

func reply(req *bk.Request, s bk.Status) bk.Response {
	return bk.Response{Op: req.Op, RequestID: req.RequestID, Status: s, LedgerID: req.LedgerID, EntryID: req.EntryID, MaxLAC: -1}
}

// storageStatus maps a storage read error to a wire status.
func storageStatus(err error) bk.Status {
	switch {
	case err == nil:
		return bk.StatusOK
	case errors.Is(err, storage.ErrNoSuchEntry):
		return bk.StatusNoSuchEntry
	case errors.Is(err, storage.ErrNoSuchLedger):
		return bk.StatusNoSuchLedger
	}
	return bk.StatusServerError
}

func masterKeyRecord(ledgerID int64, key [bk.MasterKeyLen]byte, d bk.DigestType) journal.Record {
	data := make([]byte, bk.MasterKeyLen+1)
	copy(data, key[:])
	data[bk.MasterKeyLen] = uint8(d)
	return journal.Record{Type: journal.RecMasterKey, LedgerID: ledgerID, Data: data}
}

// adoptLocked makes the ledger known with the caller's master key (first add, fence or LAC
// write) and journals the key ahead of whatever record follows.
func (b *Bookie) adoptLocked(ls *ledgerState, key [bk.MasterKeyLen]byte, d bk.DigestType) error {
	ls.meta.MasterKey = key
	ls.meta.Digest = uint8(d)
	if err := b.st.SetMeta(ls.id, ls.meta); err != nil {
		return err
	}
	ls.known = true
	b.jr.Append(masterKeyRecord(ls.id, key, d), func(error) {})
	return nil
}

// lockLoaded returns the request's ledger state locked and loaded from storage; on failure it
// answers StatusServerError and returns nil.
func (b *Bookie) lockLoaded(c *conn, req *bk.Request) *ledgerState {
	ls := b.ledgers.get(req.LedgerID)
	ls.mu.Lock()
	if err := ls.loadLocked(b.st); err != nil {
		ls.mu.Unlock()
		b.log.Error("load ledger", "ledger", req.LedgerID, "err", err)
		c.respond(reply(req, bk.StatusServerError))
		return nil
	}
	return ls
}

// authorizeLocked checks key against a known ledger's master key, or makes an unknown ledger
// known with it (fence and LAC writes may precede the first add).
func (b *Bookie) authorizeLocked(ls *ledgerState, key [bk.MasterKeyLen]byte, d bk.DigestType) bk.Status {
	if ls.known {
		if ls.meta.MasterKey != key {
			return bk.StatusUnauthorized
		}
		return bk.StatusOK
	}
	if err := b.adoptLocked(ls, key, d); err != nil {
		b.log.Error("store ledger meta", "ledger", ls.id, "err", err)
		return bk.StatusServerError
	}
	return bk.StatusOK
}

func (b *Bookie) reject(c *conn, req *bk.Request, s bk.Status, reason string, args ...any) {
	b.m.addsRejected.WithLabelValues(s.String()).Inc()
	if s != bk.StatusFenced && s != bk.StatusReadOnly {
		b.log.Warn("add refused: "+reason, append([]any{"ledger", req.LedgerID, "entry", req.EntryID, "status", s.String()}, args...)...)
	}
	c.respond(reply(req, s))
}

func (b *Bookie) handleAdd(c *conn, req *bk.Request) {
	start := time.Now()
	if b.State() == StateReadOnly {
		b.reject(c, req, bk.StatusReadOnly, "read-only")
		return
	}
	if len(req.Body) > b.cfg.MaxEntrySize {
		b.reject(c, req, bk.StatusTooLarge, "entry too large", "size", len(req.Body))
		return
	}
	if err := bk.VerifyEntry(req.Body, req.Digest, req.LedgerID, req.EntryID); err != nil {
		b.reject(c, req, bk.StatusDigestMismatch, "entry does not verify", "err", err)
		return
	}
	entry, err := bk.DecodeEntry(req.Body, req.Digest)
	if err != nil {
		b.reject(c, req, bk.StatusDigestMismatch, "entry does not decode", "err", err)
		return
	}
	recovery := req.Flags&bk.FlagRecovery != 0
	ls := b.ledgers.get(req.LedgerID)
	ls.mu.Lock()
	if err := ls.loadLocked(b.st); err != nil {
		ls.mu.Unlock()
		b.reject(c, req, bk.StatusServerError, "load ledger", "err", err)
		return
	}
	if st := b.authorizeLocked(ls, req.MasterKey, req.Digest); st != bk.StatusOK {
		ls.mu.Unlock()
		b.reject(c, req, st, "not authorized")
		return
	}
	if ls.meta.Fenced && !recovery {
		ls.mu.Unlock()
		b.reject(c, req, bk.StatusFenced, "fenced")
		return
	}
	if err := b.st.Put(req.LedgerID, req.EntryID, req.Body); err != nil {
		ls.mu.Unlock()
		b.reject(c, req, bk.StatusServerError, "store entry", "err", err)
		return
	}
	ready := ls.advanceLACLocked(entry.LAC)
	size := len(req.Body)
	b.jr.Append(journal.Record{Type: journal.RecAddEntry, LedgerID: req.LedgerID, EntryID: req.EntryID, Data: req.Body},
		func(err error) {
			if err != nil {
				b.log.Error("journal append failed", "ledger", req.LedgerID, "entry", req.EntryID, "err", err)
				c.respond(reply(req, bk.StatusServerError))
				return
			}
			b.m.addLatency.Observe(time.Since(start).Seconds())
			b.m.entriesAdded.Inc()
			b.m.bytesAdded.Add(float64(size))
			c.respond(reply(req, bk.StatusOK))
		})
	ls.mu.Unlock()
	b.answerWaiters(ls, ready)
}

func (b *Bookie) handleRead(c *conn, req *bk.Request) {
	start := time.Now()
	ls := b.lockLoaded(c, req)
	if ls == nil {
		return
	}
	if req.Flags&bk.FlagFence == 0 {
		if !ls.known {
			ls.mu.Unlock()
			c.respond(reply(req, bk.StatusNoSuchLedger))
			return
		}
		lac := ls.lac
		ls.mu.Unlock()
		data, err := b.st.Get(req.LedgerID, req.EntryID)
		r := reply(req, storageStatus(err))
		r.MaxLAC = lac
		if err == nil {
			r.Body = data
			r.EntryID = entryIDOf(data, req.EntryID)
			b.m.readBytes.Add(float64(len(data)))
		}
		b.m.readLatency.Observe(time.Since(start).Seconds())
		c.respond(r)
		return
	}
	// Fencing read: the fence is set and journaled under the ledger lock, so no add can pass
	// the fence check after this point; the reply goes out once the fence record is durable.
	if st := b.authorizeLocked(ls, req.MasterKey, bk.DigestType(ls.meta.Digest)); st != bk.StatusOK {
		ls.mu.Unlock()
		c.respond(reply(req, st))
		return
	}
	newlyFenced := !ls.meta.Fenced
	if newlyFenced {
		ls.meta.Fenced = true
		if err := b.st.SetMeta(ls.id, ls.meta); err != nil {
			ls.meta.Fenced = false
			ls.mu.Unlock()
			c.respond(reply(req, bk.StatusServerError))
			return
		}
	}
	data, err := b.st.Get(req.LedgerID, req.EntryID)
	r := reply(req, storageStatus(err))
	r.MaxLAC = ls.lac
	if err == nil {
		r.Body = data
		r.EntryID = entryIDOf(data, req.EntryID)
		b.m.readBytes.Add(float64(len(data)))
	}
	b.m.fences.Inc()
	b.jr.Append(journal.Record{Type: journal.RecFence, LedgerID: req.LedgerID}, func(err error) {
		if err != nil {
			b.log.Error("journal fence failed", "ledger", req.LedgerID, "err", err)
			c.respond(reply(req, bk.StatusServerError))
			return
		}
		if newlyFenced {
			b.m.fencedLedgers.Inc()
			b.log.Info("ledger fenced", "ledger", req.LedgerID)
		}
		b.m.readLatency.Observe(time.Since(start).Seconds())
		c.respond(r)
	})
	ls.mu.Unlock()
}

// entryIDOf returns the entry id in a stored entry's header (for reads of entry -1).
func entryIDOf(data []byte, fallback int64) int64 {
	if fallback != bk.LastEntry || len(data) < bk.EntryHeaderLen {
		return fallback
	}
	var id int64
	for _, x := range data[8:16] {
		id = id<<8 | int64(x)
	}
	return id
}

func (b *Bookie) handleWriteLAC(c *conn, req *bk.Request) {
	ls := b.lockLoaded(c, req)
	if ls == nil {
		return
	}
	if st := b.authorizeLocked(ls, req.MasterKey, bk.DigestType(ls.meta.Digest)); st != bk.StatusOK {
		ls.mu.Unlock()
		c.respond(reply(req, st))
		return
	}
	var ready []*pollWaiter
	if req.LAC >= ls.lac {
		ls.meta.ExplicitLAC = append([]byte(nil), req.Body...) // req.Body is the reader's buffer
		if err := b.st.SetMeta(ls.id, ls.meta); err != nil {
			ls.mu.Unlock()
			c.respond(reply(req, bk.StatusServerError))
			return
		}
		ready = ls.advanceLACLocked(req.LAC)
		b.jr.Append(journal.Record{Type: journal.RecExplicitLAC, LedgerID: req.LedgerID, Data: req.Body}, func(err error) {
			if err != nil {
				c.respond(reply(req, bk.StatusServerError))
				return
			}
			c.respond(reply(req, bk.StatusOK))
		})
	} else {
		c.respond(reply(req, bk.StatusOK)) // an older LAC than known: nothing to record
	}
	ls.mu.Unlock()
	b.answerWaiters(ls, ready)
}

func (b *Bookie) handleReadLAC(c *conn, req *bk.Request) {
	ls := b.lockLoaded(c, req)
	if ls == nil {
		return
	}
	known, lacBody, lac := ls.known, ls.meta.ExplicitLAC, ls.lac
	ls.mu.Unlock()
	if !known {
		c.respond(reply(req, bk.StatusNoSuchLedger))
		return
	}
	r := reply(req, bk.StatusOK)
	r.MaxLAC = lac
	r.LACBody = lacBody
	last, err := b.st.Get(req.LedgerID, bk.LastEntry)
	switch {
	case err == nil:
		r.Body = last
	case errors.Is(err, storage.ErrNoSuchEntry), errors.Is(err, storage.ErrNoSuchLedger):
		if len(lacBody) == 0 {
			r.Status = bk.StatusNoSuchEntry
		}
	default:
		r.Status = bk.StatusServerError
	}
	c.respond(r)
}

func (b *Bookie) handleLongPoll(c *conn, req *bk.Request) {
	ls := b.lockLoaded(c, req)
	if ls == nil {
		return
	}
	w := &pollWaiter{prevLAC: req.PreviousLAC, piggyback: req.Flags&bk.FlagPiggyback != 0, respond: c.respond, req: req}
	if ls.lac > req.PreviousLAC {
		ls.mu.Unlock()
		b.answerWaiters(ls, []*pollWaiter{w})
		return
	}
	wait := time.Duration(req.TimeoutMs) * time.Millisecond
	if wait > maxLongPoll {
		wait = maxLongPoll
	}
	t := time.AfterFunc(wait, func() {
		ls.mu.Lock()
		parked := ls.removeWaiterLocked(w)
		lac := ls.lac
		ls.mu.Unlock()
		if parked {
			r := reply(req, bk.StatusTimeout)
			r.EntryID = -1
			r.MaxLAC = lac
			w.respond(r)
		}
	})
	w.stop = t.Stop
	ls.waiters = append(ls.waiters, w)
	ls.mu.Unlock()
}

// answerWaiters answers released long polls with the current LAC (and the entry after their
// previous LAC when asked).
func (b *Bookie) answerWaiters(ls *ledgerState, ws []*pollWaiter) {
	if len(ws) == 0 {
		return
	}
	ls.mu.Lock()
	lac := ls.lac
	ls.mu.Unlock()
	for _, w := range ws {
		if w.stop != nil {
			w.stop()
		}
		r := reply(w.req, bk.StatusOK)
		r.MaxLAC = lac
		r.EntryID = -1
		if w.piggyback {
			if data, err := b.st.Get(w.req.LedgerID, w.prevLAC+1); err == nil {
				r.Body = data
				r.EntryID = w.prevLAC + 1
				b.m.readBytes.Add(float64(len(data)))
			}
		}
		w.respond(r)
	}
}

// handleForce answers once everything journaled before it is durable. Every add is already
// acknowledged only after its fsync, so Force is a barrier: it journals the ledger's master
// key again (an idempotent record) and replies when that record is synced.
func (b *Bookie) handleForce(c *conn, req *bk.Request) {
	ls := b.lockLoaded(c, req)
	if ls == nil {
		return
	}
	if !ls.known {
		ls.mu.Unlock()
		c.respond(reply(req, bk.StatusNoSuchLedger))
		return
	}
	rec := masterKeyRecord(ls.id, ls.meta.MasterKey, bk.DigestType(ls.meta.Digest))
	ls.mu.Unlock()
	b.jr.Append(rec, func(err error) {
		if err != nil {
			c.respond(reply(req, bk.StatusServerError))
			return
		}
		c.respond(reply(req, bk.StatusOK))
	})
}

func (b *Bookie) handleListEntries(c *conn, req *bk.Request) {
	rs, err := b.st.ListEntries(req.LedgerID)
	r := reply(req, storageStatus(err))
	if err == nil {
		r.Ranges = make([]bk.Range, len(rs))
		for i, x := range rs {
			r.Ranges[i] = bk.Range{First: x[0], Last: x[1]}
		}
	}
	c.respond(r)
}
