package chunkpool

import "testing"

// TestPool: Get gives empty chunks of capacity Size, reusing what Put kept, and Put keeps
// at most Max.
func TestPool(t *testing.T) {
	p := &Pool{Size: 16, Max: 2}
	a, b, c := p.Get(), p.Get(), p.Get()
	for _, x := range [][]byte{a, b, c} {
		if len(x) != 0 || cap(x) != 16 {
			t.Fatalf("Get: len %d cap %d, want 0 and 16", len(x), cap(x))
		}
	}
	p.Put(append(a, 1, 2, 3))
	p.Put(b)
	p.Put(c)
	if p.Len() != 2 {
		t.Fatalf("Len %d after three Puts, want Max 2", p.Len())
	}
	if x := p.Get(); len(x) != 0 || &x[:1][0] != &b[:1][0] {
		t.Fatalf("Get after Put: len %d, or not the chunk put last", len(x))
	}
}
