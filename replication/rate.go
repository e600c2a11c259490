package replication

// The replicator dispatch rate (Pulsar's replicatorDispatchRate policy and the broker's
// dispatchThrottlingRatePerReplicatorIn{Msg,Byte}): two token buckets, in messages and in
// bytes per second, that gate the core's reads of new entries. A read asks for at most the
// message tokens left; what a read brought to be sent (filtered entries are not charged) is
// spent; a read the buckets hold back is asked for at the time they allow it (Ready.TimerAt).
// This is a local copy of the broker's dispatch bucket so that the package imports nothing
// of the broker.

// unlimited is what allow returns for a rate that is off.
const unlimited = 1 << 30

// rate is a rate in messages and bytes per second, two token buckets (an admission may
// overdraw them: a large entry still passes). Thread-unsafe.
type rate struct {
	msgs, bytes bucket
}

// set sets the rates (0: off) and fills the buckets, at now (Unix ms).
func (r *rate) set(msgs, bytes, now int64) {
	r.msgs.set(msgs, now)
	r.bytes.set(bytes, now)
}

// on reports whether a rate is set.
func (r *rate) on() bool { return r.msgs.rate > 0 || r.bytes.rate > 0 }

// allow refills the buckets at now (Unix ms) and returns how many entries they allow: the
// message tokens left (rounded up), 0 if either bucket is empty, with the time (Unix ms)
// when both have a token again.
func (r *rate) allow(now int64) (n int, at int64) {
	n = unlimited
	for _, b := range []*bucket{&r.msgs, &r.bytes} {
		if b.rate == 0 {
			continue
		}
		b.refill(now)
		switch {
		case b.tokens <= 0:
			n, at = 0, max(at, now+b.wait())
		case b == &r.msgs && n > 0:
			n = min(n, int(b.tokens+0.999))
		}
	}
	return n, at
}

// spend charges msgs and bytes.
func (r *rate) spend(msgs, bytes float64) {
	r.msgs.spend(msgs)
	r.bytes.spend(bytes)
}

// bucket is a token bucket in units per second that keeps a tenth of a second's worth of
// tokens, and at least one. Thread-unsafe.
type bucket struct {
	rate   float64 // units per second; 0: off
	tokens float64
	last   int64 // Unix ms of the last refill
}

func (b *bucket) set(rate, now int64) {
	b.rate, b.last = float64(max(rate, 0)), now
	b.tokens = b.burst()
}

func (b *bucket) spend(n float64) {
	if b.rate > 0 {
		b.tokens -= n
	}
}

func (b *bucket) burst() float64 { return max(b.rate/10, 1) }

// refill adds the tokens earned since the last refill (a clock going back adds none).
func (b *bucket) refill(now int64) {
	if now <= b.last {
		return
	}
	b.tokens = min(b.tokens+b.rate*float64(now-b.last)/1e3, b.burst())
	b.last = now
}

// wait is how long (ms, at least 1) until the bucket has a token.
func (b *bucket) wait() int64 {
	if b.rate == 0 || b.tokens > 0 {
		return 0
	}
	return max(int64((-b.tokens+1e-3)/b.rate*1e3)+1, 1)
}
