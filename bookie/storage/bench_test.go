package storage

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

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
		var i int64
		for b.Loop() {
			l, e := benchKey(i)
			if err := s.Put(l, e, data); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.StopTimer() // Close flushes the memtable: not part of Put.
		closeT(b, s)
	})
	// A bookie checkpoints (Flush) periodically; include that cost.
	b.Run(fmt.Sprintf("checkpoint=%d", benchCheckpoint), func(b *testing.B) {
		s := openT(b, b.TempDir(), Options{})
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
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
	b.Run("parallel", func(b *testing.B) {
		s := openT(b, b.TempDir(), Options{})
		data := payload(0, 0, benchEntrySize)
		b.SetBytes(benchEntrySize)
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
