//go:build race

package storage

// raceEnabled: Pebble builds its invariant checks under -race (a stack trace
// per sstable iterator), so the randomized tests run fewer seeds.
const raceEnabled = true
