//go:build !race

package interop

const raceOn = false
