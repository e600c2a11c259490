package offload

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

// ReadHandle reads the entries of one offloaded ledger. It holds the ledger's index (read
// once, by OpenLedger) and shares its Offloader's block cache. It is safe for concurrent
// use and holds no resources of its own: dropping it is enough.
type ReadHandle struct {
	o        *Offloader
	ledgerID int64
	attempt  uuid.UUID
	dataKey  string
	idx      *Index // immutable
}

// OpenLedger reads the index of ledger ledgerID's offload attempt. A missing index wraps
// ErrNotFound (the offload never completed, or was deleted); a bad one ErrCorrupt; an
// index written in another format version ErrUnsupportedFormat.
func (o *Offloader) OpenLedger(ctx context.Context, ledgerID int64, attempt uuid.UUID) (*ReadHandle, error) {
	if o.closed() {
		return nil, ErrClosed
	}
	h, err := o.openLedger(ctx, ledgerID, attempt)
	if err != nil {
		o.m.readErrors.Inc()
		return nil, fmt.Errorf("open offloaded ledger %d attempt %s: %w", ledgerID, attempt, err)
	}
	return h, nil
}

func (o *Offloader) openLedger(ctx context.Context, ledgerID int64, attempt uuid.UUID) (*ReadHandle, error) {
	key := IndexKey(attempt, ledgerID)
	attrs, err := o.bucket.Attributes(ctx, key)
	if err != nil {
		return nil, storeError(ctx, "stat", key, err)
	}
	if v, ok := attrs.Metadata[metaFormatVersion]; ok && v != FormatVersion {
		return nil, fmt.Errorf("%w: %s has format version %q, want %q", ErrUnsupportedFormat, key, v, FormatVersion)
	}
	if attrs.Size > maxIndexLen {
		return nil, &CorruptionError{Key: key, Reason: fmt.Sprintf("index of %d bytes exceeds %d", attrs.Size, maxIndexLen)}
	}
	r, err := o.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, storeError(ctx, "get", key, err)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxIndexLen+1))
	r.Close()
	if err != nil {
		return nil, storeError(ctx, "get", key, err)
	}
	x, err := decodeIndex(b, key)
	if err != nil {
		return nil, err
	}
	return &ReadHandle{o: o, ledgerID: ledgerID, attempt: attempt, dataKey: DataKey(attempt, ledgerID), idx: x}, nil
}

// LedgerID returns the ledger's id.
func (h *ReadHandle) LedgerID() int64 { return h.ledgerID }

// LastEntryID returns the ledger's last entry id (-1: empty).
func (h *ReadHandle) LastEntryID() int64 { return h.idx.Metadata.LastEntryID }

// Length returns the ledger's payload bytes.
func (h *ReadHandle) Length() int64 { return h.idx.Metadata.Length }

// Metadata returns the ledger metadata recorded in the index.
func (h *ReadHandle) Metadata() LedgerMetadata { return h.idx.Metadata }

// Blocks returns the number of data blocks.
func (h *ReadHandle) Blocks() int { return len(h.idx.Blocks) }

// Read returns the payloads of entries first..last (inclusive; 0 <= first <= last <=
// LastEntryID), freshly allocated. It issues one ranged GET per block holding them that is
// neither cached nor already being fetched, and starts fetching up to ReadAheadBlocks
// following blocks in the background. Errors: ErrInvalidArgument for a bad range,
// ErrUnavailable (retryable) for an object-store failure, ErrNotFound for a missing data
// object, ErrCorrupt for a block that does not decode or disagrees with the index,
// ctx.Err() when ctx ends first, ErrClosed after Close. A failed block is not cached: the
// next Read fetches it again.
func (h *ReadHandle) Read(ctx context.Context, first, last int64) ([][]byte, error) {
	start := time.Now()
	out, err := h.read(ctx, first, last)
	if err != nil {
		if !errors.Is(err, ErrInvalidArgument) {
			h.o.m.readErrors.Inc()
		}
		return nil, fmt.Errorf("read offloaded ledger %d entries %d..%d: %w", h.ledgerID, first, last, err)
	}
	h.o.m.readLatency.Observe(time.Since(start).Seconds())
	h.o.m.readEntries.Add(float64(len(out)))
	var n int
	for _, p := range out {
		n += len(p)
	}
	h.o.m.readBytes.Add(float64(n))
	return out, nil
}

func (h *ReadHandle) read(ctx context.Context, first, last int64) ([][]byte, error) {
	x := h.idx
	if first < 0 || first > last || last > x.Metadata.LastEntryID {
		return nil, fmt.Errorf("%w: entries %d..%d of a ledger ending at %d", ErrInvalidArgument, first, last, x.Metadata.LastEntryID)
	}
	bi, bj := x.blockOf(first), x.blockOf(last)
	fetches, err := h.o.startFetches(h, bi, bj)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, last-first+1)
	for i, f := range fetches {
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil {
			return nil, f.err
		}
		bfirst, blast := x.blockEntries(bi + i)
		lo, hi := max(first, bfirst)-bfirst, min(last, blast)-bfirst
		var n int
		for _, p := range f.blk.entries[lo : hi+1] {
			n += len(p)
		}
		buf := make([]byte, 0, n)
		for _, p := range f.blk.entries[lo : hi+1] {
			s := len(buf)
			buf = append(buf, p...)
			out = append(out, buf[s:len(buf):len(buf)])
		}
	}
	return out, nil
}

// blockKey names a data block in the cache: the data object's key and the block's index.
type blockKey struct {
	data  string
	block int
}

// cachedBlock is a decoded data block: its entries alias buf's storage, which is never
// written after decoding.
type cachedBlock struct {
	key     blockKey
	entries [][]byte
	size    int64 // bytes of the block
}

// fetch is a block being fetched; done closes when blk or err is set.
type fetch struct {
	done chan struct{}
	blk  *cachedBlock
	err  error
}

// startFetches returns one fetch per block bi..bj, done at once for cached blocks, shared
// with a fetch already in flight, or new; it then starts the read-ahead of the following
// blocks that fit in the cache beside these.
func (o *Offloader) startFetches(h *ReadHandle, bi, bj int) ([]*fetch, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.state == stateClosed {
		return nil, ErrClosed
	}
	fs := make([]*fetch, 0, bj-bi+1)
	budget := o.opts.CacheSize
	for i := bi; i <= bj; i++ {
		f, miss := o.fetchLocked(h, i)
		if miss {
			o.m.cacheMisses.Inc()
		} else {
			o.m.cacheHits.Inc()
		}
		fs = append(fs, f)
		_, n := h.idx.blockSpan(i)
		budget -= n
	}
	for i := bj + 1; i <= bj+o.opts.ReadAheadBlocks && i < len(h.idx.Blocks); i++ {
		_, n := h.idx.blockSpan(i)
		if n > budget {
			break
		}
		budget -= n
		o.fetchLocked(h, i)
	}
	return fs, nil
}

// fetchLocked returns block i's fetch, starting one if the block is neither cached nor in
// flight (miss). o.mu is held.
func (o *Offloader) fetchLocked(h *ReadHandle, i int) (f *fetch, miss bool) {
	k := blockKey{h.dataKey, i}
	if b := o.mu.cache.get(k); b != nil {
		f := &fetch{done: make(chan struct{}), blk: b}
		close(f.done)
		return f, false
	}
	if f := o.mu.inflight[k]; f != nil {
		return f, false
	}
	f = &fetch{done: make(chan struct{})}
	o.mu.inflight[k] = f
	o.wg.Add(1)
	go o.runFetch(h, i, f)
	return f, true
}

// runFetch is the goroutine of one block fetch: it waits for a GET slot, reads the block
// with one ranged GET, decodes and checks it, caches it, and completes f.
func (o *Offloader) runFetch(h *ReadHandle, i int, f *fetch) {
	defer o.wg.Done()
	k := blockKey{h.dataKey, i}
	blk, err := o.getBlock(h, i)
	o.mu.Lock()
	delete(o.mu.inflight, k)
	if err == nil {
		f.blk = &cachedBlock{key: k, entries: blk.Entries, size: int64(blockLenOf(h.idx, i))}
		if o.mu.state == stateOpen {
			o.mu.cache.add(f.blk)
		}
	}
	f.err = err
	o.mu.Unlock()
	close(f.done)
}

func blockLenOf(x *Index, i int) int64 {
	_, n := x.blockSpan(i)
	return n
}

// getBlock reads and decodes block i of h's data object.
func (o *Offloader) getBlock(h *ReadHandle, i int) (Block, error) {
	select {
	case o.sem <- struct{}{}:
		defer func() { <-o.sem }()
	case <-o.ctx.Done():
		return Block{}, ErrClosed
	}
	off, n := h.idx.blockSpan(i)
	r, err := o.bucket.NewRangeReader(o.ctx, h.dataKey, off, n, nil)
	if err != nil {
		return Block{}, o.fetchError(h.dataKey, err)
	}
	defer r.Close()
	if size := r.Size(); size != h.idx.DataObjectLen {
		return Block{}, &CorruptionError{Key: h.dataKey, Offset: off, Reason: fmt.Sprintf(
			"data object has %d bytes, the index says %d", size, h.idx.DataObjectLen)}
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Block{}, o.fetchError(h.dataKey, err)
	}
	o.m.blockGets.Inc()
	o.m.getBytes.Add(float64(n))
	blk, err := decodeBlock(buf, h.dataKey)
	if err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			ce.Offset += off
			ce.Reason = fmt.Sprintf("block %d: %s", i, ce.Reason)
		}
		return Block{}, err
	}
	if err := h.idx.checkBlock(i, blk, h.dataKey); err != nil {
		return Block{}, err
	}
	return blk, nil
}

func (o *Offloader) fetchError(key string, err error) error {
	if o.ctx.Err() != nil {
		return ErrClosed
	}
	return storeError(o.ctx, "get", key, err)
}

// blockCache is an LRU of decoded blocks bounded by their bytes. It is thread-unsafe: the
// Offloader's mu guards it.
//
// Invariant: size == sum of the cached blocks' sizes <= capacity.
type blockCache struct {
	capacity int64
	size     int64
	lru      list.List // of *cachedBlock, most recently used at the front
	m        map[blockKey]*list.Element
	gauge    prometheus.Gauge
}

func (c *blockCache) init(capacity int64, gauge prometheus.Gauge) {
	c.capacity, c.gauge = capacity, gauge
	c.m = map[blockKey]*list.Element{}
	c.lru.Init()
}

// get returns the cached block k (nil: not cached) and marks it most recently used.
func (c *blockCache) get(k blockKey) *cachedBlock {
	e := c.m[k]
	if e == nil {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cachedBlock)
}

// add caches b, evicting the least recently used blocks to make room. A block larger than
// the whole cache is not cached.
func (c *blockCache) add(b *cachedBlock) {
	if b.size > c.capacity || c.m[b.key] != nil {
		return
	}
	for c.size+b.size > c.capacity {
		e := c.lru.Back()
		old := e.Value.(*cachedBlock)
		c.lru.Remove(e)
		delete(c.m, old.key)
		c.size -= old.size
	}
	c.m[b.key] = c.lru.PushFront(b)
	c.size += b.size
	c.gauge.Set(float64(c.size))
}

func (c *blockCache) clear() {
	c.m = map[blockKey]*list.Element{}
	c.lru.Init()
	c.size = 0
	c.gauge.Set(0)
}
