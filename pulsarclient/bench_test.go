package pulsarclient

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkProducerSendAsync measures the client's publish path (batching, framing, receipt
// matching) against the in-memory fake broker, 1 KiB messages.
func BenchmarkProducerSendAsync(b *testing.B) {
	for _, batching := range []bool{true, false} {
		b.Run(fmt.Sprintf("batching=%v", batching), func(b *testing.B) {
			fb := startFakeBroker(b)
			cl, err := New(Options{URL: fb.url})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			p, err := cl.CreateProducer(ctx, ProducerOptions{Topic: "bench", DisableBatching: !batching, MaxPendingMessages: 500})
			if err != nil {
				b.Fatal(err)
			}
			msg := &ProducerMessage{Payload: make([]byte, 1024)}
			b.SetBytes(1024)
			for b.Loop() {
				if err := p.SendAsync(ctx, msg, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer() // closing is not part of the publish path
			fb.mu.Lock()
			fb.topics = map[string]*fakeTopic{} // drop the stored entries
			fb.mu.Unlock()
			p.Close(ctx)
		})
	}
}
