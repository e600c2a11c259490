package storage

import (
	"slices"
	"time"
)

// Write-cache sizing. The arena is made of fixed-size chunks that are
// recycled from generation to generation, so a steady stream of Puts
// allocates nothing; an entry larger than cacheLargeEntry gets a chunk of
// its own (not recycled), so a big entry never wastes most of a chunk.
const (
	defaultWriteCacheSize = 32 << 20
	cacheChunkSize        = 1 << 20
	cacheLargeEntry       = cacheChunkSize / 8
	// maxFreeLedgers bounds the cachedLedger structs a recycled generation
	// keeps for reuse.
	maxFreeLedgers = 1024
)

// slot is where an entry's bytes live in a writeCache arena. Pointer-free,
// so the maps holding slots are not scanned by the garbage collector.
type slot struct {
	chunk  uint32
	off    uint32
	length uint32
	// mayBeIndexed is set when the index might already hold the entry (its
	// ID was not above the ledger's highest when it was put): the flusher
	// then looks up the old location to take it off its log's counters.
	// When clear, the index cannot hold the key (see Storage.Put).
	mayBeIndexed bool
	// used tells an entryTable's dense run which IDs it holds.
	used bool
}

// cachedLedger holds one ledger's entries in a writeCache.
type cachedLedger struct {
	entries entryTable // entry ID → slot
	last    int64      // highest key of entries
}

// writeCache is one generation of the write cache: the entries put while it
// was the active generation, their bytes copied into an append-only arena.
// A writeCache is thread-unsafe; Storage guards it with cache (see there for
// who may touch a sealed generation without the lock).
type writeCache struct {
	ledgers map[int64]*cachedLedger
	// chunks is the arena. Entries are appended to the last chunk; a chunk's
	// len is the bytes used. Bytes are never modified once written: a
	// replaced entry's old bytes stay until the generation is recycled.
	chunks [][]byte
	// cur indexes the chunk small entries are appended to; -1: none yet.
	cur int
	// bytes is the generation's size against the threshold: each put counts
	// its entry plus a record header (≈ the entry-log bytes it will take).
	bytes int64
	// puts counts the entries put (replacements included).
	puts int
	// deleted holds ledgers deleted while this generation was sealed: their
	// entries here are dead (readers skip them, the flusher drops them). Nil
	// when empty. Written with both Storage.indexMu and cache held, so
	// either suffices to read it.
	deleted map[int64]struct{}

	// freeLedgers are emptied cachedLedgers kept from the last generation
	// this writeCache held, reused by put.
	freeLedgers []*cachedLedger

	// first is when the first entry was put, sealed when the generation was
	// sealed: the flusher paces its writes by how fast the generation filled.
	first, sealed time.Time
}

func newWriteCache() *writeCache {
	return &writeCache{ledgers: make(map[int64]*cachedLedger), cur: -1}
}

// put copies entry into the arena, replacing any slot the key had. alloc
// returns an empty arena chunk of cacheChunkSize bytes capacity.
func (wc *writeCache) put(ledgerID, entryID int64, entry []byte, mayBeIndexed bool, alloc func() []byte) {
	if wc.puts == 0 {
		wc.first = time.Now()
	}
	s := slot{length: uint32(len(entry)), mayBeIndexed: mayBeIndexed}
	if len(entry) > cacheLargeEntry {
		s.chunk = uint32(len(wc.chunks))
		wc.chunks = append(wc.chunks, slices.Clip(slices.Clone(entry)))
	} else {
		if wc.cur < 0 || cap(wc.chunks[wc.cur])-len(wc.chunks[wc.cur]) < len(entry) {
			wc.cur = len(wc.chunks)
			wc.chunks = append(wc.chunks, alloc())
		}
		c := wc.chunks[wc.cur]
		s.chunk, s.off = uint32(wc.cur), uint32(len(c))
		wc.chunks[wc.cur] = append(c, entry...)
	}
	cl := wc.ledgers[ledgerID]
	if cl == nil {
		cl = wc.newLedger()
		wc.ledgers[ledgerID] = cl
	}
	if old, ok := cl.entries.get(entryID); ok && old.mayBeIndexed {
		s.mayBeIndexed = true
	}
	cl.entries.set(entryID, s)
	cl.last = max(cl.last, entryID)
	wc.bytes += recordHeaderSize + int64(len(entry))
	wc.puts++
}

func (wc *writeCache) newLedger() *cachedLedger {
	if n := len(wc.freeLedgers); n > 0 {
		cl := wc.freeLedgers[n-1]
		wc.freeLedgers = wc.freeLedgers[:n-1]
		return cl
	}
	return &cachedLedger{last: -1}
}

// bytesOf returns the arena bytes of s (not a copy).
func (wc *writeCache) bytesOf(s slot) []byte {
	return wc.chunks[s.chunk][s.off : s.off+s.length : s.off+s.length]
}

// ledger returns the ledger's live entries in this generation, or nil.
func (wc *writeCache) ledger(ledgerID int64) *cachedLedger {
	if _, dead := wc.deleted[ledgerID]; dead {
		return nil
	}
	return wc.ledgers[ledgerID]
}

// get returns the arena bytes of a live entry (not a copy).
func (wc *writeCache) get(ledgerID, entryID int64) ([]byte, bool) {
	cl := wc.ledger(ledgerID)
	if cl == nil {
		return nil, false
	}
	s, ok := cl.entries.get(entryID)
	if !ok {
		return nil, false
	}
	return wc.bytesOf(s), true
}

// deleteLedger drops the ledger's entries from an active generation. Their
// arena bytes stay (and count) until the generation is recycled.
func (wc *writeCache) deleteLedger(ledgerID int64) {
	delete(wc.ledgers, ledgerID)
}

// markDeleted makes the ledger's entries in a sealed generation dead
// without modifying the maps the flusher reads. Requires Storage.indexMu
// and cache.
func (wc *writeCache) markDeleted(ledgerID int64) {
	if _, ok := wc.ledgers[ledgerID]; !ok {
		return
	}
	if wc.deleted == nil {
		wc.deleted = make(map[int64]struct{})
	}
	wc.deleted[ledgerID] = struct{}{}
}

// appendEntryIDs appends the ledger's live entry IDs (in ascending order).
func (wc *writeCache) appendEntryIDs(dst []int64, ledgerID int64) []int64 {
	if cl := wc.ledger(ledgerID); cl != nil {
		dst = cl.entries.appendIDs(dst)
	}
	return dst
}

// appendLedgers appends the IDs of the ledgers with live entries.
func (wc *writeCache) appendLedgers(dst []int64) []int64 {
	for l := range wc.ledgers {
		if _, dead := wc.deleted[l]; !dead {
			dst = append(dst, l)
		}
	}
	return dst
}

// reset empties the generation for reuse, handing its recyclable arena
// chunks to free.
func (wc *writeCache) reset(free func([]byte)) {
	wc.first, wc.sealed = time.Time{}, time.Time{}
	for _, c := range wc.chunks {
		if cap(c) == cacheChunkSize {
			free(c[:0])
		}
	}
	clear(wc.chunks)
	wc.chunks, wc.cur = wc.chunks[:0], -1
	for l, cl := range wc.ledgers {
		if len(wc.freeLedgers) < maxFreeLedgers {
			cl.entries.reset()
			cl.last = -1
			wc.freeLedgers = append(wc.freeLedgers, cl)
		}
		delete(wc.ledgers, l)
	}
	wc.bytes, wc.puts, wc.deleted = 0, 0, nil
}
