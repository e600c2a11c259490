package offload

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkBlock measures the pure block codec (no I/O): filling and finishing a 1 MiB block
// (with its CRC32C), and decoding it, per entry size.
func BenchmarkBlock(b *testing.B) {
	const blockSize = 1 << 20
	for _, size := range []int{100, 1 << 10, 64 << 10} {
		p := bytes.Repeat([]byte{0xA5}, size)
		n := (blockSize - BlockHeaderLen) / (EntryHeaderLen + size)
		var bb blockBuilder
		b.Run(fmt.Sprintf("encode/entry=%d", size), func(b *testing.B) {
			b.SetBytes(int64(n * size))
			for b.Loop() {
				bb.reset(0, blockSize, blockSize)
				for i := range n {
					bb.add(int64(i), p)
				}
				bb.finish(blockSize)
			}
		})
		bb.reset(0, blockSize, blockSize)
		for i := range n {
			bb.add(int64(i), p)
		}
		block := append([]byte(nil), bb.finish(blockSize)...)
		b.Run(fmt.Sprintf("decode/entry=%d", size), func(b *testing.B) {
			b.SetBytes(int64(n * size))
			for b.Loop() {
				if _, err := DecodeBlock(block); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The block buffer does not keep the size of an oversized entry once its block is written.
func TestBlockBufferShrinks(t *testing.T) {
	var bb blockBuilder
	bb.reset(0, 1024, 256)
	bb.add(0, make([]byte, 10_000))
	bb.finish(bb.size())
	if cap(bb.buf) < 10_000 {
		t.Fatal("the oversized entry was not buffered")
	}
	bb.reset(1, 1024, 256)
	if cap(bb.buf) > 1024 {
		t.Fatalf("block buffer keeps %d bytes after an oversized block; bound 1024", cap(bb.buf))
	}
}
