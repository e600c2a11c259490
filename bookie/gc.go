package bookie

import (
	"context"
	"errors"
	"time"

	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/metadata"
)

// checkpointLoop periodically makes storage durable and releases the journal files it covers.
func (b *Bookie) checkpointLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			if err := b.checkpoint(true); err != nil {
				b.log.Error("checkpoint failed", "err", err)
			}
		}
	}
}

// Checkpoint flushes storage and deletes journal files whose records it now holds durably.
// Every record is applied to storage before it is appended to the journal, so a mark taken
// before the flush is covered by it.
func (b *Bookie) Checkpoint() error { return b.checkpoint(false) }

// checkpoint is Checkpoint; paced (the periodic checkpoint, in no hurry) writes the
// cache at the pace of a generation that filled up instead of at the disk's full
// speed, which would delay the journal's fdatasyncs on the same disk.
func (b *Bookie) checkpoint(paced bool) error {
	mark := b.jr.Mark()
	flush := b.st.Flush
	if paced {
		flush = func() error { return b.st.FlushPaced(b.ctx) } // Close hurries it
	}
	if err := flush(); err != nil {
		return err
	}
	return b.jr.Release(mark)
}

func (b *Bookie) gcLoop() {
	defer b.wg.Done()
	if b.cfg.GCInterval < 0 {
		return
	}
	t := time.NewTicker(b.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			if _, err := b.GC(b.ctx); err != nil && b.ctx.Err() == nil {
				b.log.Error("garbage collection failed", "err", err)
			}
		}
	}
}

// GC reclaims the entries of ledgers that no longer exist in metadata and returns how many
// ledgers it removed. Local ledgers are listed before metadata: a ledger's metadata is always
// created before its first entry reaches a bookie, so a ledger missing from the later
// metadata listing was deleted, never "not yet created".
func (b *Bookie) GC(ctx context.Context) (int, error) {
	local, err := b.st.Ledgers()
	if err != nil {
		return 0, err
	}
	if len(local) == 0 {
		return 0, nil
	}
	kvs, _, err := b.cfg.Store.List(ctx, metadata.PrefixLedgers)
	if err != nil {
		return 0, err
	}
	live := make(map[int64]bool, len(kvs))
	for _, kv := range kvs {
		id, err := metadata.LedgerIDFromKey(kv.Key)
		if err != nil {
			continue
		}
		live[id] = true
	}
	deleted := 0
	var errs []error
	for _, id := range local {
		if live[id] {
			continue
		}
		if err := b.deleteLedger(id); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	b.m.gcDeleted.Add(float64(deleted))
	if deleted > 0 {
		b.log.Info("garbage collected ledgers", "count", deleted)
		if err := b.Checkpoint(); err != nil {
			errs = append(errs, err)
		}
		n, err := b.st.Compact(ctx, 0.5)
		if err != nil {
			errs = append(errs, err)
		}
		b.m.gcReclaimed.Add(float64(n))
	}
	return deleted, errors.Join(errs...)
}

// deleteLedger removes a ledger locally: journaled first so a replay cannot resurrect it.
func (b *Bookie) deleteLedger(id int64) error {
	ls := b.ledgers.get(id)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err := b.st.DeleteLedger(id); err != nil {
		return err
	}
	done := make(chan error, 1)
	b.jr.Append(journal.Record{Type: journal.RecDeleteLedger, LedgerID: id}, func(err error) { done <- err })
	ls.loaded, ls.known = false, false
	b.ledgers.drop(id)
	return <-done
}
