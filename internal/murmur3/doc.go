// Package murmur3 is MurmurHash3_x86_32, the key hash Pulsar uses for Key_Shared ranges and
// for routing scalable-topic keys to segments. It is a pure function; the package starts no
// goroutines.
package murmur3
