package storage

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// The benchmark workload: 1 KiB entries of 100 ledgers written round-robin
// (interleaved, as a bookie receives them), and uniformly random reads over
// 100k of them. BenchmarkPebbleValues runs the same workload with the
// payload stored as the Pebble value (the design doc.go argues against).
const (
	benchEntrySize = 1 << 10
	benchLedgers   = 100
	benchReadN     = 100_000
	// benchCheckpoint is the number of entries between Flush calls in the
	// checkpoint variants (10 MiB of entries).
	benchCheckpoint = 10_000
)

func benchKey(i int64) (ledgerID, entryID int64) { return i % benchLedgers, i / benchLedgers }

func BenchmarkPut(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		s := openT(b, b.TempDir(), Options{})
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
		b.ReportAllocs()
		var i int64
		for b.Loop() {
			l, e := benchKey(i)
			if err := s.Put(l, e, data); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.StopTimer() // Close flushes the memtable: not part of Put.
		reportCacheStats(b, s)
		closeT(b, s)
	})
	// A bookie checkpoints (Flush) periodically; include that cost.
	b.Run(fmt.Sprintf("checkpoint=%d", benchCheckpoint), func(b *testing.B) {
		s := openT(b, b.TempDir(), Options{})
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
		b.ReportAllocs()
		var i int64
		for b.Loop() {
			l, e := benchKey(i)
			if err := s.Put(l, e, data); err != nil {
				b.Fatal(err)
			}
			if i++; i%benchCheckpoint == 0 {
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer() // teardown is not a write
		closeT(b, s)
	})
	// The add path's tail latency: every Put is timed, and the p50, p99,
	// p99.9 and max of the run are reported (the bookie's target is p99 ≤
	// 5 ms). Flush calls are not timed.
	b.Run("latency", func(b *testing.B) {
		s := openT(b, b.TempDir(), Options{})
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
		b.ReportAllocs()
		var (
			h latencyHistogram
			i int64
		)
		for b.Loop() {
			l, e := benchKey(i)
			start := time.Now()
			if err := s.Put(l, e, data); err != nil {
				b.Fatal(err)
			}
			h.add(time.Since(start))
			if i++; i%benchCheckpoint == 0 {
				if err := s.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer() // teardown is not a write
		reportCacheStats(b, s)
		b.ReportMetric(float64(h.quantile(0.5).Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(h.quantile(0.99).Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(h.quantile(0.999).Nanoseconds()), "p99.9-ns")
		b.ReportMetric(float64(h.max.Microseconds()), "max-µs")
		closeT(b, s)
	})
	b.Run("parallel", func(b *testing.B) {
		s := openT(b, b.TempDir(), Options{})
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l, e := benchKey(next.Add(1) - 1)
				if err := s.Put(l, e, data); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer() // Close flushes the memtable: not part of Put.
		closeT(b, s)
	})
}

func BenchmarkGetRandom(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	data := payload(0, 0, benchEntrySize)
	for i := range int64(benchReadN) {
		l, e := benchKey(i)
		if err := s.Put(l, e, data); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.SetBytes(benchEntrySize)
	for b.Loop() {
		l, e := benchKey(rng.Int64N(benchReadN))
		if _, err := s.Get(l, e); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer() // teardown is not a read
	closeT(b, s)
}

// openPebbleValues opens Pebble configured as Storage configures its index.
func openPebbleValues(b *testing.B) *pebble.DB {
	cache := pebble.NewCache(defaultCacheSize)
	defer cache.Unref()
	db, err := pebble.Open(b.TempDir(), &pebble.Options{
		Cache:              cache,
		DisableWAL:         true,
		MemTableSize:       defaultMemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{quiet},
	})
	if err != nil {
		b.Fatal(err)
	}
	return db
}

func BenchmarkPebbleValues(b *testing.B) {
	b.Run("put", func(b *testing.B) {
		db := openPebbleValues(b)
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
		var i int64
		for b.Loop() {
			l, e := benchKey(i)
			if err := db.Set(entryKey(l, e), data, pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.StopTimer() // teardown is not a write
		b.ReportMetric(float64(writeAmp(db)), "write-amp")
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run(fmt.Sprintf("put-checkpoint=%d", benchCheckpoint), func(b *testing.B) {
		db := openPebbleValues(b)
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
		var i int64
		for b.Loop() {
			l, e := benchKey(i)
			if err := db.Set(entryKey(l, e), data, pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			if i++; i%benchCheckpoint == 0 {
				if err := db.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer() // teardown is not a write
		b.ReportMetric(float64(writeAmp(db)), "write-amp")
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("get-random", func(b *testing.B) {
		db := openPebbleValues(b)
		data := payload(0, 0, benchEntrySize)
		for i := range int64(benchReadN) {
			l, e := benchKey(i)
			if err := db.Set(entryKey(l, e), data, pebble.NoSync); err != nil {
				b.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		b.SetBytes(benchEntrySize)
		for b.Loop() {
			l, e := benchKey(rng.Int64N(benchReadN))
			v, closer, err := db.Get(entryKey(l, e))
			if err != nil {
				b.Fatal(err)
			}
			_ = append([]byte(nil), v...) // Storage.Get returns a copy too
			_ = closer.Close()
		}
		b.StopTimer() // teardown is not a read
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	})
}

// writeAmp is bytes written by flushes and compactions over bytes flushed.
func writeAmp(db *pebble.DB) float64 {
	m := db.Metrics()
	total := m.Total()
	if total.TableBytesFlushed == 0 {
		return 0
	}
	return float64(total.TableBytesFlushed+total.TableBytesCompacted) / float64(total.TableBytesFlushed)
}

// latencyHistogram is a log-linear histogram of durations (16 sub-buckets
// per power of two, so quantiles are within ~6%), allocation-free so that
// timing every Put does not disturb allocs/op.
type latencyHistogram struct {
	counts [64 * 16]uint64
	n      uint64
	max    time.Duration
}

func latencyBucket(ns uint64) int {
	if ns < 16 {
		return int(ns)
	}
	e := bits.Len64(ns) // ≥ 5
	return (e-4)*16 + int(ns>>(e-5))&15
}

func (h *latencyHistogram) add(d time.Duration) {
	h.counts[latencyBucket(uint64(max(d, 0)))]++
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the lower bound of the bucket holding quantile q.
func (h *latencyHistogram) quantile(q float64) time.Duration {
	rank := uint64(q * float64(h.n))
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen > rank {
			if i < 16 {
				return time.Duration(i)
			}
			e := i/16 + 4
			return time.Duration(uint64(16+i%16) << (e - 5))
		}
	}
	return h.max
}

func TestLatencyHistogram(t *testing.T) {
	var h latencyHistogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99} {
		want := time.Duration(q*1000) * time.Microsecond
		if got := h.quantile(q); got > want || got < want*15/16 {
			t.Errorf("quantile(%v) = %v, want within 1/16 below %v", q, got, want)
		}
	}
	if h.max != time.Millisecond {
		t.Errorf("max = %v", h.max)
	}
}

// reportCacheStats reports the share of Puts that waited for the flusher
// and the mean time of a generation's flush.
func reportCacheStats(b *testing.B, s *Storage) {
	st := s.Stats()
	b.ReportMetric(float64(st.CacheBlockedPuts)/float64(b.N), "blocked/op")
	if st.CacheFlushes > 0 {
		b.ReportMetric(float64(st.CacheFlushTime.Milliseconds())/float64(st.CacheFlushes), "ms/flush")
	}
}

// BenchmarkWriteCache measures the write cache's pure core, without locks
// or I/O: put is the copy into the arena and the map insert (per entry,
// generations recycled as the flusher does); flush-order is what sorting a
// full generation by (ledger, entry) costs the flusher, per entry.
func BenchmarkWriteCache(b *testing.B) {
	data := payload(0, 0, benchEntrySize)
	perGen := int64(defaultWriteCacheSize / (benchEntrySize + recordHeaderSize))
	b.Run("put", func(b *testing.B) {
		var free [][]byte
		alloc := func() []byte {
			if n := len(free); n > 0 {
				c := free[n-1]
				free = free[:n-1]
				return c
			}
			return make([]byte, 0, cacheChunkSize)
		}
		wc := newWriteCache()
		b.SetBytes(benchEntrySize)
		b.ReportAllocs()
		var i int64
		for b.Loop() {
			l, e := benchKey(i)
			wc.put(l, e, data, false, alloc)
			if i++; i%perGen == 0 {
				wc.reset(func(c []byte) { free = append(free, c) })
			}
		}
	})
	b.Run("flush-order", func(b *testing.B) {
		wc := newWriteCache()
		alloc := func() []byte { return make([]byte, 0, cacheChunkSize) }
		for i := range perGen {
			l, e := benchKey(i)
			wc.put(l, e, data, false, alloc)
		}
		var ledgers, ids []int64
		b.ReportAllocs()
		for b.Loop() {
			ledgers = wc.appendLedgers(ledgers[:0])
			slices.Sort(ledgers)
			for _, l := range ledgers {
				ids = wc.appendEntryIDs(ids[:0], l)
				slices.Sort(ids)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*perGen), "ns/entry")
	})
}
