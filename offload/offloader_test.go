package offload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// randomPayloads returns n payloads of random lengths below maxLen, from seed.
func randomPayloads(seed uint64, n, maxLen int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0))
	out := make([][]byte, n)
	for i := range out {
		p := make([]byte, r.IntN(maxLen))
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		out[i] = p
	}
	return out
}

func metadataOf(payloads [][]byte) LedgerMetadata {
	var n int64
	for _, p := range payloads {
		n += int64(len(p))
	}
	return LedgerMetadata{LastEntryID: int64(len(payloads)) - 1, Length: n, EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2}
}

// roundTrip offloads payloads as ledger ledgerID, reads every entry back one by one and in
// random ranges, and returns the read handle.
func roundTrip(t *testing.T, o *Offloader, ledgerID int64, payloads [][]byte) *ReadHandle {
	t.Helper()
	ctx := context.Background()
	attempt := uuid.New()
	res, err := o.Offload(ctx, ledgerID, attempt, metadataOf(payloads), SliceEntries(payloads))
	if err != nil {
		t.Fatalf("Offload: %v", err)
	}
	if res.Entries != int64(len(payloads)) {
		t.Fatalf("offloaded %d entries, want %d", res.Entries, len(payloads))
	}
	h, err := o.OpenLedger(ctx, ledgerID, attempt)
	if err != nil {
		t.Fatalf("OpenLedger: %v", err)
	}
	if h.LastEntryID() != int64(len(payloads))-1 || h.Length() != metadataOf(payloads).Length || h.Blocks() != res.Blocks {
		t.Fatalf("handle: last %d length %d blocks %d; result %+v", h.LastEntryID(), h.Length(), h.Blocks(), res)
	}
	checkBlockSizes(t, h, o.opts.MaxBlockSize)
	if len(payloads) == 0 {
		if _, err := h.Read(ctx, 0, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("read of an empty ledger: %v", err)
		}
		return h
	}
	for i := range payloads {
		got, err := h.Read(ctx, int64(i), int64(i))
		if err != nil {
			t.Fatalf("Read(%d): %v", i, err)
		}
		if len(got) != 1 || !bytes.Equal(got[0], payloads[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
	r := rand.New(rand.NewPCG(uint64(ledgerID), 1))
	for range 20 {
		a := r.Int64N(int64(len(payloads)))
		b := a + r.Int64N(int64(len(payloads))-a)
		got, err := h.Read(ctx, a, b)
		if err != nil {
			t.Fatalf("Read(%d, %d): %v", a, b, err)
		}
		if len(got) != int(b-a+1) {
			t.Fatalf("Read(%d, %d) returned %d entries", a, b, len(got))
		}
		for i, p := range got {
			if !bytes.Equal(p, payloads[a+int64(i)]) {
				t.Fatalf("Read(%d, %d): entry %d differs", a, b, a+int64(i))
			}
		}
	}
	return h
}

// checkBlockSizes checks the layout: every block but the last is exactly the block size,
// unless it holds a single oversized entry.
func checkBlockSizes(t *testing.T, h *ReadHandle, blockSize int) {
	t.Helper()
	x := h.idx
	for i := range x.Blocks {
		_, n := x.blockSpan(i)
		first, last := x.blockEntries(i)
		switch {
		case i == len(x.Blocks)-1:
		case n == int64(blockSize):
		case n > int64(blockSize) && first == last:
		default:
			t.Fatalf("block %d (entries %d..%d) is %d bytes; block size %d", i, first, last, n, blockSize)
		}
	}
}

func newTestOffloader(t *testing.T, b *blob.Bucket, opts Options) *Offloader {
	t.Helper()
	o, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func TestRoundTrip(t *testing.T) {
	const blockSize = 1024
	ledgers := map[string][][]byte{
		"empty":              nil,
		"one entry":          {[]byte("x")},
		"empty payloads":     make([][]byte, 100),
		"small entries":      randomPayloads(1, 500, 100),
		"mixed sizes":        randomPayloads(2, 200, 3*blockSize),
		"one huge entry":     {bytes.Repeat([]byte("h"), 10*blockSize)},
		"huge between small": {[]byte("a"), bytes.Repeat([]byte("h"), 5*blockSize), []byte("b"), bytes.Repeat([]byte("i"), 2*blockSize)},
		// Entries that fill a block exactly (header 128 + 4 × (12 + 212) = 1024), so no
		// padding, then one more.
		"exact fill": slices.Repeat([][]byte{bytes.Repeat([]byte("e"), 212)}, 9),
		// Entries that leave less than an entry header at a block's end.
		"tail under header": slices.Repeat([][]byte{bytes.Repeat([]byte("t"), 200)}, 17),
	}
	for _, kind := range bucketKinds {
		t.Run(kind.name, func(t *testing.T) {
			o := newTestOffloader(t, kind.open(t), Options{MaxBlockSize: blockSize, ReadAheadBlocks: 1})
			for name, payloads := range ledgers {
				t.Run(name, func(t *testing.T) {
					h := roundTrip(t, o, int64(len(name)), payloads)
					if name == "exact fill" {
						// 9 entries: two full blocks of 4, one of 1.
						if off, n := h.idx.blockSpan(0); off != 0 || n != blockSize || len(h.idx.Blocks) != 3 {
							t.Fatalf("exact fill: blocks %+v", h.idx.Blocks)
						}
					}
				})
			}
		})
	}
}

func TestOffloadBlockSizeDefault(t *testing.T) {
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{})
	if o.opts.MaxBlockSize != DefaultMaxBlockSize || o.opts.CacheSize != 2*DefaultMaxBlockSize {
		t.Fatalf("defaults %+v", o.opts)
	}
	roundTrip(t, o, 9, randomPayloads(9, 100, 1000))
	if _, err := New(memblob.OpenBucket(nil), Options{MaxBlockSize: 100}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("block size 100: %v", err)
	}
}

// A read of entries [a, b] issues exactly one ranged GET per block holding them, each of
// exactly that block's bytes, and none for blocks already cached, also when many readers
// ask at once.
func TestOneRangedGetPerBlock(t *testing.T) {
	const blockSize = 1024
	b, fb := newFaultBucket(memblob.OpenBucket(nil))
	o := newTestOffloader(t, b, Options{MaxBlockSize: blockSize, CacheSize: 100 * blockSize})
	payloads := slices.Repeat([][]byte{bytes.Repeat([]byte("p"), 77)}, 100) // 10 entries of 89 bytes per block
	ctx := context.Background()
	attempt := uuid.New()
	if _, err := o.Offload(ctx, 7, attempt, metadataOf(payloads), SliceEntries(payloads)); err != nil {
		t.Fatal(err)
	}
	h, err := o.OpenLedger(ctx, 7, attempt)
	if err != nil {
		t.Fatal(err)
	}
	if h.Blocks() != 10 {
		t.Fatalf("%d blocks, want 10", h.Blocks())
	}
	fb.resetGets()
	check := func(name string, wantBlocks ...int) {
		t.Helper()
		gets := fb.gets()
		fb.resetGets()
		var got []int
		for _, g := range gets {
			if g.key != h.dataKey {
				t.Fatalf("%s: GET of %s", name, g.key)
			}
			i := slices.IndexFunc(h.idx.Blocks, func(e IndexEntry) bool { return e.Offset == g.off })
			if i < 0 {
				t.Fatalf("%s: GET at offset %d, not a block's start", name, g.off)
			}
			off, n := h.idx.blockSpan(i)
			if g.off != off || g.length != n {
				t.Fatalf("%s: GET %d+%d is not block %d (%d+%d)", name, g.off, g.length, i, off, n)
			}
			got = append(got, i)
		}
		slices.Sort(got)
		if !slices.Equal(got, wantBlocks) {
			t.Fatalf("%s: GETs of blocks %v, want %v", name, got, wantBlocks)
		}
	}
	read := func(a, b int64) {
		t.Helper()
		got, err := h.Read(ctx, a, b)
		if err != nil || len(got) != int(b-a+1) || !bytes.Equal(got[0], payloads[a]) {
			t.Fatalf("Read(%d, %d): %d entries, %v", a, b, len(got), err)
		}
	}
	read(12, 17)
	check("one block", 1)
	read(12, 17)
	check("cached")
	read(25, 58)
	check("several blocks", 2, 3, 4, 5)
	read(19, 61)
	check("several blocks, two new", 6)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { read(70, 99) })
	}
	wg.Wait()
	check("concurrent readers", 7, 8, 9)
}

// Read-ahead fetches the following blocks, as far as the cache has room, and a read that
// then needs them issues no GET.
func TestReadAhead(t *testing.T) {
	const blockSize = 1024
	b, fb := newFaultBucket(memblob.OpenBucket(nil))
	reg := prometheus.NewRegistry()
	o := newTestOffloader(t, b, Options{MaxBlockSize: blockSize, CacheSize: 4 * blockSize, ReadAheadBlocks: 5, Registerer: reg})
	payloads := slices.Repeat([][]byte{bytes.Repeat([]byte("p"), 77)}, 100)
	ctx := context.Background()
	attempt := uuid.New()
	if _, err := o.Offload(ctx, 1, attempt, metadataOf(payloads), SliceEntries(payloads)); err != nil {
		t.Fatal(err)
	}
	h, err := o.OpenLedger(ctx, 1, attempt)
	if err != nil {
		t.Fatal(err)
	}
	fb.resetGets()
	if _, err := h.Read(ctx, 0, 9); err != nil {
		t.Fatal(err)
	}
	// Block 0 was needed; the cache holds 4 blocks, so 3 more are read ahead, not 5.
	waitIdle(t, o)
	if n := len(fb.gets()); n != 4 {
		t.Fatalf("%d GETs after the first read, want 4 (1 + 3 read ahead)", n)
	}
	fb.resetGets()
	for i := int64(1); i <= 3; i++ {
		if _, err := h.Read(ctx, 10*i, 10*i+9); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, o)
	}
	// Blocks 1..3 were read ahead; each read of one also read ahead the blocks after it.
	gets := fb.gets()
	if len(gets) != 3 {
		t.Fatalf("GETs %v while reading blocks 1..3, want 3 read-aheads (blocks 4, 5, 6)", gets)
	}
	if hits := testutil.ToFloat64(o.m.cacheHits); hits != 3 {
		t.Fatalf("cache hits %v, want 3", hits)
	}
	if misses := testutil.ToFloat64(o.m.cacheMisses); misses != 1 {
		t.Fatalf("cache misses %v, want 1", misses)
	}
}

// waitIdle waits until no fetch is in flight (the read-ahead of the last read is done).
func waitIdle(t *testing.T, o *Offloader) {
	t.Helper()
	for {
		o.mu.Lock()
		var f *fetch
		for _, f = range o.mu.inflight {
			break
		}
		o.mu.Unlock()
		if f == nil {
			return
		}
		<-f.done
	}
}

// The cache never holds more than its configured bytes, whatever the reads.
func TestCacheBound(t *testing.T) {
	const blockSize = 2048
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{MaxBlockSize: blockSize, CacheSize: 3*blockSize + 100, ReadAheadBlocks: 2})
	ctx := context.Background()
	var handles []*ReadHandle
	var ledgers [][][]byte
	for l := range 3 {
		payloads := randomPayloads(uint64(l), 300, 3*blockSize/2)
		attempt := uuid.New()
		if _, err := o.Offload(ctx, int64(l), attempt, metadataOf(payloads), SliceEntries(payloads)); err != nil {
			t.Fatal(err)
		}
		h, err := o.OpenLedger(ctx, int64(l), attempt)
		if err != nil {
			t.Fatal(err)
		}
		handles, ledgers = append(handles, h), append(ledgers, payloads)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for range 300 {
		l := r.IntN(3)
		a := r.Int64N(300)
		b := min(299, a+r.Int64N(8))
		got, err := handles[l].Read(ctx, a, b)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range got {
			if !bytes.Equal(p, ledgers[l][a+int64(i)]) {
				t.Fatalf("ledger %d entry %d differs", l, a+int64(i))
			}
		}
		o.mu.Lock()
		var sum int64
		for e := o.mu.cache.lru.Front(); e != nil; e = e.Next() {
			sum += e.Value.(*cachedBlock).size
		}
		size := o.mu.cache.size
		gauge := testutil.ToFloat64(o.m.cacheBytes) // under mu: fetches update it
		o.mu.Unlock()
		if size != sum || size > o.opts.CacheSize {
			t.Fatalf("cache holds %d bytes (sum %d), bound %d", size, sum, o.opts.CacheSize)
		}
		if int64(gauge) != size {
			t.Fatalf("cache gauge %v, cache size %d", gauge, size)
		}
	}
}

// Corrupt objects are detected: a flipped byte in a block, a truncated data object, a
// damaged index, an index of another format version.
func TestCorruptObjects(t *testing.T) {
	ctx := context.Background()
	const blockSize = 1024
	setup := func(t *testing.T) (*Offloader, *blob.Bucket, uuid.UUID, [][]byte) {
		b := memblob.OpenBucket(nil)
		o := newTestOffloader(t, b, Options{MaxBlockSize: blockSize})
		payloads := randomPayloads(3, 50, 300)
		attempt := uuid.New()
		if _, err := o.Offload(ctx, 3, attempt, metadataOf(payloads), SliceEntries(payloads)); err != nil {
			t.Fatal(err)
		}
		return o, b, attempt, payloads
	}
	rewrite := func(t *testing.T, b *blob.Bucket, key string, f func([]byte) []byte, md map[string]string) {
		data, err := b.ReadAll(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := b.Attributes(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if md == nil {
			md = attrs.Metadata
		}
		if err := b.WriteAll(ctx, key, f(data), &blob.WriterOptions{Metadata: md}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("block byte flipped", func(t *testing.T) {
		o, b, attempt, _ := setup(t)
		rewrite(t, b, DataKey(attempt, 3), func(d []byte) []byte { d[blockSize+200] ^= 1; return d }, nil)
		h, err := o.OpenLedger(ctx, 3, attempt)
		if err != nil {
			t.Fatal(err)
		}
		var ce *CorruptionError
		_, err = h.Read(ctx, 0, h.LastEntryID())
		if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Key != DataKey(attempt, 3) || IsRetryable(err) {
			t.Fatalf("Read: %v", err)
		}
		// The block before the damage still reads.
		if _, err := h.Read(ctx, 0, 0); err != nil {
			t.Fatalf("Read of an intact block: %v", err)
		}
	})
	t.Run("data truncated", func(t *testing.T) {
		o, b, attempt, _ := setup(t)
		rewrite(t, b, DataKey(attempt, 3), func(d []byte) []byte { return d[:len(d)-1] }, nil)
		h, err := o.OpenLedger(ctx, 3, attempt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Read(ctx, 0, 0); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Read: %v", err)
		}
	})
	t.Run("index damaged", func(t *testing.T) {
		o, b, attempt, _ := setup(t)
		rewrite(t, b, IndexKey(attempt, 3), func(d []byte) []byte { d[len(d)-12] ^= 1; return d }, nil)
		if _, err := o.OpenLedger(ctx, 3, attempt); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("OpenLedger: %v", err)
		}
	})
	t.Run("index of another version", func(t *testing.T) {
		o, b, attempt, _ := setup(t)
		rewrite(t, b, IndexKey(attempt, 3), func(d []byte) []byte { return d }, map[string]string{metaFormatVersion: "2"})
		if _, err := o.OpenLedger(ctx, 3, attempt); !errors.Is(err, ErrUnsupportedFormat) {
			t.Fatalf("OpenLedger: %v", err)
		}
	})
	t.Run("data missing", func(t *testing.T) {
		o, b, attempt, _ := setup(t)
		if err := b.Delete(ctx, DataKey(attempt, 3)); err != nil {
			t.Fatal(err)
		}
		h, err := o.OpenLedger(ctx, 3, attempt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Read(ctx, 0, 0); !errors.Is(err, ErrNotFound) || IsRetryable(err) {
			t.Fatalf("Read: %v", err)
		}
	})
	t.Run("index missing", func(t *testing.T) {
		o, _, _, _ := setup(t)
		if _, err := o.OpenLedger(ctx, 3, uuid.New()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("OpenLedger: %v", err)
		}
	})
}

// An object-store outage fails reads with a retryable error, caches nothing, and reads
// succeed again when the store returns.
func TestOutage(t *testing.T) {
	ctx := context.Background()
	b, fb := newFaultBucket(memblob.OpenBucket(nil))
	reg := prometheus.NewRegistry()
	o := newTestOffloader(t, b, Options{MaxBlockSize: 1024, ReadAheadBlocks: 1, Registerer: reg})
	payloads := randomPayloads(4, 40, 300)
	attempt := uuid.New()
	if _, err := o.Offload(ctx, 4, attempt, metadataOf(payloads), SliceEntries(payloads)); err != nil {
		t.Fatal(err)
	}
	fb.set(func(f *faultBucket) { f.mu.failGets = true })
	if _, err := o.OpenLedger(ctx, 4, attempt); !errors.Is(err, ErrUnavailable) || !IsRetryable(err) {
		t.Fatalf("OpenLedger during an outage: %v", err)
	}
	fb.set(func(f *faultBucket) { f.mu.failGets = false })
	h, err := o.OpenLedger(ctx, 4, attempt)
	if err != nil {
		t.Fatal(err)
	}
	fb.set(func(f *faultBucket) { f.mu.failGets = true })
	for range 3 {
		_, err := h.Read(ctx, 0, 5)
		if !errors.Is(err, ErrUnavailable) || !IsRetryable(err) || !strings.Contains(err.Error(), errInjected.Error()) {
			t.Fatalf("Read during an outage: %v", err)
		}
	}
	waitIdle(t, o)
	o.mu.Lock()
	cached := o.mu.cache.lru.Len()
	o.mu.Unlock()
	if cached != 0 {
		t.Fatalf("%d blocks cached during an outage", cached)
	}
	fb.set(func(f *faultBucket) { f.mu.failGets = false })
	got, err := h.Read(ctx, 0, 5)
	if err != nil || !bytes.Equal(got[5], payloads[5]) {
		t.Fatalf("Read after the outage: %v", err)
	}
	if n := testutil.ToFloat64(o.m.readErrors); n < 4 {
		t.Fatalf("read errors metric %v, want >= 4", n)
	}
}

// A failed offload leaves no object behind: entries that disagree with the metadata, a
// failing source, a failing data write, a failing index write.
func TestOffloadFailuresLeaveNothing(t *testing.T) {
	ctx := context.Background()
	payloads := randomPayloads(6, 60, 500)
	for _, tc := range []struct {
		name  string
		md    func(LedgerMetadata) LedgerMetadata
		src   func() Entries
		fault func(f *faultBucket)
		want  error
	}{
		{name: "too few entries", md: func(m LedgerMetadata) LedgerMetadata { m.LastEntryID++; return m }, want: ErrSourceMismatch},
		{name: "too many entries", md: func(m LedgerMetadata) LedgerMetadata { m.LastEntryID -= 2; return m }, want: ErrSourceMismatch},
		{name: "wrong length", md: func(m LedgerMetadata) LedgerMetadata { m.Length++; return m }, want: ErrSourceMismatch},
		{name: "ids out of order", src: func() Entries { return &skipEntries{SliceEntries(payloads), 30} }, want: ErrSourceMismatch},
		{name: "source fails", src: func() Entries {
			return RangeEntries(func(_ context.Context, first, last int64) ([][]byte, error) {
				if last >= 40 {
					return nil, errBookies
				}
				return payloads[first : last+1], nil
			}, 59, 10)
		}, want: errBookies},
		{name: "data write fails", fault: func(f *faultBucket) { f.mu.failWrites = true }, want: ErrUnavailable},
		{name: "index write fails", want: ErrUnavailable, fault: func(f *faultBucket) { f.mu.failWrites, f.mu.failKey = true, "index" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := memblob.OpenBucket(nil)
			b, fb := newFaultBucket(inner)
			o := newTestOffloader(t, b, Options{MaxBlockSize: 1024})
			md := metadataOf(payloads)
			if tc.md != nil {
				md = tc.md(md)
			}
			src := SliceEntries(payloads)
			if tc.src != nil {
				src = tc.src()
			}
			attempt := uuid.New()
			if tc.fault != nil {
				fb.set(tc.fault)
				fb.set(func(f *faultBucket) {
					if f.mu.failKey == "index" {
						f.mu.failKey = IndexKey(attempt, 1)
					}
				})
			}
			_, err := o.Offload(ctx, 1, attempt, md, src)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Offload: %v, want %v", err, tc.want)
			}
			if k := keys(t, inner); len(k) != 0 {
				t.Fatalf("objects left behind: %v", k)
			}
			if n := testutil.ToFloat64(o.m.offloadErrors); n != 1 {
				t.Fatalf("offload errors metric %v", n)
			}
		})
	}
}

var errBookies = errors.New("bookies unavailable")

// skipEntries skips entry id skip.
type skipEntries struct {
	Entries
	skip int64
}

func (s *skipEntries) Next(ctx context.Context) (int64, []byte, error) {
	id, p, err := s.Entries.Next(ctx)
	if err == nil && id == s.skip {
		return s.Entries.Next(ctx)
	}
	return id, p, err
}

func TestDeleteAndScan(t *testing.T) {
	ctx := context.Background()
	inner := memblob.OpenBucket(nil)
	b, fb := newFaultBucket(inner)
	o := newTestOffloader(t, b, Options{MaxBlockSize: 1024})
	payloads := randomPayloads(8, 30, 200)
	a1, a2 := uuid.New(), uuid.New()
	for _, a := range []uuid.UUID{a1, a2} {
		if _, err := o.Offload(ctx, 8, a, metadataOf(payloads), SliceEntries(payloads)); err != nil {
			t.Fatal(err)
		}
	}
	if err := inner.WriteAll(ctx, "unrelated", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	var seen []string
	err := o.Scan(ctx, func(oi ObjectInfo) error {
		if oi.LedgerID != 8 || (oi.Attempt != a1 && oi.Attempt != a2) || oi.Size == 0 {
			return fmt.Errorf("bad object info %+v", oi)
		}
		seen = append(seen, oi.Key)
		return nil
	})
	if err != nil || len(seen) != 4 {
		t.Fatalf("Scan: %v %v", seen, err)
	}
	fb.set(func(f *faultBucket) { f.mu.failDeletes = true })
	if err := o.Delete(ctx, 8, a1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Delete during an outage: %v", err)
	}
	fb.set(func(f *faultBucket) { f.mu.failDeletes = false })
	for range 2 { // a repeated Delete is fine
		if err := o.Delete(ctx, 8, a1); err != nil {
			t.Fatal(err)
		}
	}
	got := keys(t, inner)
	want := []string{DataKey(a2, 8), IndexKey(a2, 8), "unrelated"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after Delete: %v, want %v", got, want)
	}
	if _, err := o.OpenLedger(ctx, 8, a1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenLedger after Delete: %v", err)
	}
}

// RangeEntries reads in batches and returns every entry once.
func TestRangeEntries(t *testing.T) {
	payloads := randomPayloads(10, 25, 50)
	var calls [][2]int64
	src := RangeEntries(func(_ context.Context, first, last int64) ([][]byte, error) {
		calls = append(calls, [2]int64{first, last})
		return payloads[first : last+1], nil
	}, 24, 10)
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{MaxBlockSize: 512})
	if _, err := o.Offload(context.Background(), 10, uuid.New(), metadataOf(payloads), src); err != nil {
		t.Fatal(err)
	}
	if want := [][2]int64{{0, 9}, {10, 19}, {20, 24}}; !slices.Equal(calls, want) {
		t.Fatalf("reads %v, want %v", calls, want)
	}
}

// Close cancels read-ahead in flight, waits for it, and later calls fail with ErrClosed.
func TestClose(t *testing.T) {
	ctx := context.Background()
	o, err := New(memblob.OpenBucket(nil), Options{MaxBlockSize: 1024, ReadAheadBlocks: 4, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	payloads := randomPayloads(11, 100, 300)
	attempt := uuid.New()
	if _, err := o.Offload(ctx, 11, attempt, metadataOf(payloads), SliceEntries(payloads)); err != nil {
		t.Fatal(err)
	}
	h, err := o.OpenLedger(ctx, 11, attempt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Read(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Read(ctx, 0, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := o.Offload(ctx, 12, uuid.New(), metadataOf(nil), SliceEntries(nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Offload after Close: %v", err)
	}
}

// The metrics count what happened.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{MaxBlockSize: 1024, Registerer: reg})
	payloads := randomPayloads(12, 40, 200)
	md := metadataOf(payloads)
	attempt := uuid.New()
	res, err := o.Offload(ctx, 12, attempt, md, SliceEntries(payloads))
	if err != nil {
		t.Fatal(err)
	}
	h, err := o.OpenLedger(ctx, 12, attempt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Read(ctx, 0, 39); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"pulsar_ledgeroffloader_offload_rate":    float64(md.Length),
		"magnetar_offload_ledgers_total":         1,
		"magnetar_offload_read_entries_total":    40,
		"magnetar_offload_read_bytes_total":      float64(md.Length),
		"magnetar_offload_block_gets_total":      float64(res.Blocks),
		"magnetar_offload_block_get_bytes_total": float64(res.DataObjectLen),
	} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == name {
				found = true
				if got := mf.GetMetric()[0].GetCounter().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		}
		if !found {
			t.Errorf("%s not registered", name)
		}
	}
	if n := testutil.CollectAndCount(reg, "magnetar_offload_latency_seconds", "magnetar_offload_read_latency_seconds"); n != 2 {
		t.Errorf("latency histograms: %d", n)
	}
	if w := testutil.ToFloat64(o.m.writeBytes); w <= float64(res.DataObjectLen) {
		t.Errorf("write bytes %v, data object %d", w, res.DataObjectLen)
	}
}

// TestBlockBufferReused: an offload leaves its whole-block buffer for the next one, which
// takes it (and gives it back), and a ledger's data never leaks into another's blocks
// (TestRoundTrip reads back ledgers of every shape offloaded one after another).
func TestBlockBufferReused(t *testing.T) {
	const blockSize = 1024
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{MaxBlockSize: blockSize})
	roundTrip(t, o, 1, randomPayloads(3, 50, 100))
	if len(o.spareBlocks) != 1 {
		t.Fatalf("%d spare block buffers after an offload, want 1", len(o.spareBlocks))
	}
	spare := <-o.spareBlocks
	o.spareBlocks <- spare
	roundTrip(t, o, 2, [][]byte{[]byte("small")})
	if len(o.spareBlocks) != 1 {
		t.Fatalf("%d spare block buffers after a second offload, want 1", len(o.spareBlocks))
	}
	if again := <-o.spareBlocks; &again[:1][0] != &spare[:1][0] {
		t.Fatal("the second offload did not reuse the spare block buffer")
	} else {
		o.spareBlocks <- again
	}
	// An oversized entry grows the buffer past a block: it is not kept.
	roundTrip(t, o, 3, [][]byte{bytes.Repeat([]byte("h"), 3*blockSize)})
	if len(o.spareBlocks) != 0 {
		t.Fatalf("an oversized block buffer was kept")
	}
}
