package mledger

import (
	"context"
	"time"
)

// offloadCallTimeout bounds each read and delete of offloaded objects (an upload runs until
// it is done or cancelled).
const offloadCallTimeout = 2 * time.Minute

// asyncOffloader is the offloadPort on an Offloader: each call runs on a goroutine of its own
// and reports through its callback. The core counts every call in flight (core.pending) and
// Close waits for them; uploads are cancelled at close and on fencing, reads and deletes are
// bounded by offloadCallTimeout. It holds no state, so one per managed ledger costs nothing.
type asyncOffloader struct {
	o Offloader
}

func (a *asyncOffloader) driver() string { return a.o.Driver() }

func (a *asyncOffloader) offload(req OffloadRequest, read func(first, last int64, cb func([][]byte, error)),
	cb func(map[string]string, error)) func() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		cb(a.o.Offload(ctx, req, entryReader(read)))
	}()
	return cancel
}

func (a *asyncOffloader) readOffloaded(l OffloadedLedger, first, last int64, cb func([][]byte, error)) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), offloadCallTimeout)
		defer cancel()
		cb(a.o.ReadOffloaded(ctx, l, first, last))
	}()
}

func (a *asyncOffloader) deleteOffloaded(l OffloadedLedger, cb func(error)) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), offloadCallTimeout)
		defer cancel()
		cb(a.o.DeleteOffloaded(ctx, l))
	}()
}

// entryReader is the EntryReader of one upload: Ledgers.Read, waited for.
type entryReader func(first, last int64, cb func([][]byte, error))

func (r entryReader) ReadEntries(ctx context.Context, first, last int64) ([][]byte, error) {
	type result struct {
		d   [][]byte
		err error
	}
	ch := make(chan result, 1)
	r(first, last, func(d [][]byte, err error) { ch <- result{d, err} })
	select {
	case res := <-ch:
		return res.d, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
