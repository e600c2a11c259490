package journal

import "github.com/magnetar-io/magnetar/internal/chunkpool"

// chunkSize is the size of the fixed buffers that hold a batch's bytes.
const chunkSize = 64 << 10

// chunkedBuf is a byte sequence kept in chunkSize buffers. Appending never moves the bytes
// already there, so a batch that grows while the writer is busy (it may reach maxQueue)
// costs no reallocation and copy, and its buffers go back to a bounded pool afterwards.
//
// Invariant: every chunk but the last is full (len chunkSize); n is the sum of the lens.
type chunkedBuf struct {
	chunks [][]byte
	n      int
}

// Len is the number of bytes held.
func (c *chunkedBuf) Len() int { return c.n }

// append copies p to the end, taking new chunks (of chunkSize) from pool.
func (c *chunkedBuf) append(p []byte, pool *chunkpool.Pool) {
	for len(p) > 0 {
		k := len(c.chunks)
		if k == 0 || len(c.chunks[k-1]) == chunkSize {
			c.chunks = append(c.chunks, pool.Get())
			k++
		}
		last := c.chunks[k-1]
		m := copy(last[len(last):chunkSize], p)
		c.chunks[k-1] = last[:len(last)+m]
		c.n += m
		p = p[m:]
	}
}

// writeAt writes bytes [start, end) to f at offset off, one WriteAt per chunk touched.
func (c *chunkedBuf) writeAt(f file, start, end int, off int64) error {
	for i := start / chunkSize; start < end; i++ {
		lo := start - i*chunkSize
		hi := min(end-i*chunkSize, len(c.chunks[i]))
		if _, err := f.WriteAt(c.chunks[i][lo:hi], off); err != nil {
			return err
		}
		off += int64(hi - lo)
		start += hi - lo
	}
	return nil
}

// reset empties c, returning its chunks to pool.
func (c *chunkedBuf) reset(pool *chunkpool.Pool) {
	for i, ch := range c.chunks {
		pool.Put(ch)
		c.chunks[i] = nil
	}
	c.chunks = c.chunks[:0]
	c.n = 0
}
