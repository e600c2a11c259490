package offload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"gocloud.dev/blob/memblob"

	"github.com/magnetar-io/magnetar/mledger"
)

// A full throttle lets a read through at once, even one larger than its burst; the reads
// after it wait until the debt is paid, at the rate.
func TestThrottleReserve(t *testing.T) {
	t0 := time.Unix(1000, 0)
	th := NewThrottle(1000, t0) // 1000 B/s, burst 100 B
	if d := th.Reserve(300, t0); d != 0 {
		t.Fatalf("first read waited %v", d)
	}
	// 100 - 300 = -200 tokens: the next read waits 0.2 s.
	if d := th.Reserve(10, t0); d < 199*time.Millisecond || d > 201*time.Millisecond {
		t.Fatalf("second read waits %v, want 0.2 s", d)
	}
	// -210 tokens, 0.1 s later -110: 0.11 s more.
	if d := th.Reserve(10, t0.Add(100*time.Millisecond)); d < 109*time.Millisecond || d > 111*time.Millisecond {
		t.Fatalf("third read waits %v, want 0.11 s", d)
	}
	// A clock going back adds no tokens.
	if d := th.Reserve(0, t0); d != 0 {
		t.Fatalf("an empty read waits %v", d)
	}
	if d := th.Reserve(1, t0); d < 119*time.Millisecond {
		t.Fatalf("after the clock went back a read waits %v, want >= 0.12 s", d)
	}
	// Idle for long, the bucket holds no more than its burst: a 100 B read passes, the next
	// one waits.
	later := t0.Add(time.Hour)
	if d := th.Reserve(100, later); d != 0 {
		t.Fatalf("a read after an idle hour waits %v", d)
	}
	if d := th.Reserve(1, later); d == 0 {
		t.Fatal("the burst exceeds 0.1 s of the rate")
	}
}

// Offloads that each read as soon as the throttle lets them (on a virtual clock) read, all
// together, the rate times the time plus at most the burst and one read.
func TestThrottleRateShared(t *testing.T) {
	const rate, read = 4 << 20, 1 << 20 // 4 MiB/s, reads of 1 MiB
	for _, offloads := range []int{1, 3} {
		t0 := time.Unix(0, 0)
		th := NewThrottle(rate, t0)
		next := make([]time.Time, offloads) // when each offload may read next
		for i := range next {
			next[i] = t0
		}
		var bytes int64
		end := t0.Add(10 * time.Second)
		reads := make([]int, offloads)
		for {
			// The offload due first reads next (a read takes no time).
			i := 0
			for j := range next {
				if next[j].Before(next[i]) {
					i = j
				}
			}
			now := next[i]
			wait := th.Reserve(read, now)
			if now.Add(wait).After(end) {
				break
			}
			bytes += read
			reads[i]++
			next[i] = now.Add(wait)
		}
		lo, hi := int64(rate*10), int64(rate*10+rate/10+read)
		if bytes < lo-read || bytes > hi {
			t.Errorf("%d offloads read %d bytes in 10 s, want %d..%d", offloads, bytes, lo-read, hi)
		}
		for i, n := range reads {
			if n < 40/offloads-2 {
				t.Errorf("%d offloads: offload %d read %d times of %d: starved", offloads, i, n, bytes/read)
			}
		}
	}
}

// A nil throttle and one of rate <= 0 never wait; Wait gives up when its context ends.
func TestThrottleOffAndCancel(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, th := range []*Throttle{nil, NewThrottle(0, t0), NewThrottle(-1, t0)} {
		for range 3 {
			if d := th.Reserve(1<<30, t0); d != 0 {
				t.Fatalf("rate %d: waits %v", th.Rate(), d)
			}
		}
	}
	th := NewThrottle(1, time.Now()) // 1 B/s
	ctx, cancel := context.WithCancel(context.Background())
	if err := th.Wait(ctx, 1<<20); err != nil { // full: passes, leaves a debt of a week or so
		t.Fatal(err)
	}
	cancel()
	if err := th.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v", err)
	}
}

// ManagedLedgerPort.Offload waits for the Offloader's throttle before each bookie read: at
// 1 B/s the first read passes and the second waits, until the offload's context ends.
func TestManagedLedgerPortThrottled(t *testing.T) {
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{MaxBlockSize: 2048, OffloadBytesPerSecond: 1})
	if o.throttle.Rate() != 1 {
		t.Fatalf("throttle rate %d", o.throttle.Rate())
	}
	p := NewManagedLedgerPort(o, "aws-s3")
	payloads := randomPayloads(41, 40, 400)
	md := metadataOf(payloads)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reads := 0
	src := readerFunc(func(_ context.Context, first, last int64) ([][]byte, error) {
		reads++
		cancel() // the throttle's wait for the next read ends with the context
		return payloads[first : last+1], nil
	})
	req := mledger.OffloadRequest{LedgerID: 41, UUID: uuid.NewString(), Entries: md.LastEntryID + 1, Size: md.Length}
	if _, err := p.Offload(ctx, req, src); !errors.Is(err, context.Canceled) {
		t.Fatalf("Offload: %v, want context.Canceled", err)
	}
	if reads != 1 {
		t.Fatalf("%d bookie reads, want 1 before the throttle held the offload", reads)
	}
	if md.Length <= 2048 {
		t.Fatalf("the ledger (%d bytes) fits one read: the test proves nothing", md.Length)
	}
}
