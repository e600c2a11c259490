package journal

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/magnetar-io/magnetar/internal/chunkpool"
)

// TestChunkedBufMatchesSlice appends random pieces (some larger than a chunk) and checks
// that every range written out equals the same range of a plain slice, and that the pool
// keeps at most its bound.
func TestChunkedBufMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := &chunkpool.Pool{Size: chunkSize, Max: 3}
	var c chunkedBuf
	for round := 0; round < 50; round++ {
		var want []byte
		for k := rng.IntN(40); k > 0; k-- {
			p := make([]byte, rng.IntN(3*chunkSize/2))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			c.append(p, pool)
			want = append(want, p...)
		}
		if c.Len() != len(want) {
			t.Fatalf("round %d: Len %d, want %d", round, c.Len(), len(want))
		}
		for k := 0; k < 5 && len(want) > 0; k++ {
			start := rng.IntN(len(want))
			end := start + rng.IntN(len(want)-start+1)
			f := &memFile{fs: &memFS{}}
			if err := c.writeAt(f, start, end, 7); err != nil {
				t.Fatal(err)
			}
			if got := f.b[min(7, len(f.b)):]; !bytes.Equal(got, want[start:end]) {
				t.Fatalf("round %d: bytes [%d, %d) differ", round, start, end)
			}
		}
		c.reset(pool)
		if c.Len() != 0 || len(c.chunks) != 0 || pool.Len() > pool.Max {
			t.Fatalf("after reset: Len %d, %d chunks, pool %d (max %d)", c.Len(), len(c.chunks), pool.Len(), pool.Max)
		}
	}
}
