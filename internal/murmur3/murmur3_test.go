package murmur3

import "testing"

func TestSum32(t *testing.T) {
	// Reference values of MurmurHash3_x86_32 with seed 0.
	for _, tc := range []struct {
		in   string
		want uint32
	}{
		{"", 0},
		{"hello", 0x248bfa47},
		{"Hello, world!", 0xc0363e43},
		{"The quick brown fox jumps over the lazy dog", 0x2e4ff723},
	} {
		if got := Sum32([]byte(tc.in), 0); got != tc.want {
			t.Errorf("Sum32(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}
