//go:build race

package interop

// raceOn: the race detector slows everything several times, so the timing bounds of the
// multi-broker tests are only logged (measure them without -race).
const raceOn = true
