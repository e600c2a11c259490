// Package chunkpool keeps fixed-size byte buffers for reuse: the journal's batch chunks and
// the write cache's arena chunks.
package chunkpool

// Pool keeps at most Max free chunks of capacity Size. The zero Pool is not usable: set
// Size (and Max). Not safe for concurrent use: its owner guards it.
type Pool struct {
	Size int
	Max  int
	free [][]byte
}

// Get returns an empty chunk of capacity Size: a free one, or a new one.
func (p *Pool) Get() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return b
	}
	return make([]byte, 0, p.Size)
}

// Put keeps b (emptied) for a later Get, unless Max chunks are already kept.
func (p *Pool) Put(b []byte) {
	if len(p.free) < p.Max {
		p.free = append(p.free, b[:0])
	}
}

// Len is the number of free chunks kept.
func (p *Pool) Len() int { return len(p.free) }
