package dispatch

// The dispatch rate: how many entries a cursor read may ask for now. The core asks its own
// rate (the subscription's, SetRate) and the Config.Shared one (the topic's) before it
// issues a read of new entries; a read they do not allow waits, and the core asks for a
// timer (Ready.TimerAt) at the time they will. What a read brought is charged to both.
// Re-reads of returned entries are neither gated nor charged.

// Limiter is a dispatch rate shared with other cores (the topic's, which its
// subscriptions' cores draw on together); its implementation is safe for their owners'
// concurrent use.
type Limiter interface {
	// Allow returns how many entries the rate allows at now (Unix ns; 1<<30: unlimited);
	// if none (n <= 0), wait is how long (ns) until it does.
	Allow(now int64) (n int, wait int64)
	// Spend charges what a read brought.
	Spend(msgs, bytes float64)
}

// Unlimited is what Allow returns for a rate that is off.
const Unlimited = 1 << 30

// Rate is a rate in messages and bytes per second, two token buckets (an admission may
// overdraw them: a large entry still passes). Thread-unsafe.
type Rate struct {
	Msgs, Bytes Bucket
}

// Set sets the rates (0: off) and fills the buckets, at now (Unix ns).
func (r *Rate) Set(msgs, bytes, now int64) {
	r.Msgs.Set(msgs, now)
	r.Bytes.Set(bytes, now)
}

// On reports whether a rate is set.
func (r *Rate) On() bool { return r.Msgs.Rate > 0 || r.Bytes.Rate > 0 }

// Allow refills the buckets at now and returns how many entries they allow: the message
// tokens left (rounded up), 0 if either bucket is empty, with the wait until both have a
// token.
func (r *Rate) Allow(now int64) (n int, wait int64) {
	n = Unlimited
	for _, b := range []*Bucket{&r.Msgs, &r.Bytes} {
		if b.Rate == 0 {
			continue
		}
		b.Refill(now)
		switch {
		case b.Tokens <= 0:
			n, wait = 0, max(wait, b.Wait())
		case b == &r.Msgs && n > 0:
			n = min(n, int(b.Tokens+0.999))
		}
	}
	return n, wait
}

// Spend charges msgs and bytes.
func (r *Rate) Spend(msgs, bytes float64) {
	r.Msgs.Spend(msgs)
	r.Bytes.Spend(bytes)
}

// Bucket is a token bucket in units per second that refills up to Span seconds' worth
// (0: a tenth of a second), and at least one unit. Thread-unsafe.
type Bucket struct {
	Rate   float64 // units per second; 0: off
	Tokens float64
	Last   int64   // Unix ns of the last refill
	Span   float64 // seconds of tokens kept (0: 0.1)
}

// Set sets the rate (0: off) and fills the bucket.
func (b *Bucket) Set(rate, now int64) {
	b.Rate, b.Last = float64(max(rate, 0)), now
	b.Tokens = b.Burst()
}

// Retune changes the rate of a bucket in use, keeping its tokens (refilled at the old rate
// until now, at most the new burst). A bucket that is off stays off.
func (b *Bucket) Retune(rate float64, now int64) {
	if b.Rate == 0 || rate <= 0 {
		return
	}
	b.Refill(now)
	b.Rate = rate
	b.Tokens = min(b.Tokens, b.Burst())
}

// Spend takes n units (a bucket that is off stays full).
func (b *Bucket) Spend(n float64) {
	if b.Rate > 0 {
		b.Tokens -= n
	}
}

// Burst is how many tokens the bucket keeps at most.
func (b *Bucket) Burst() float64 {
	if b.Span > 0 {
		return max(b.Rate*b.Span, 1)
	}
	return max(b.Rate/10, 1)
}

// Refill adds the tokens earned since the last refill (a clock going back adds none).
func (b *Bucket) Refill(now int64) {
	if now <= b.Last {
		return
	}
	b.Tokens = min(b.Tokens+b.Rate*float64(now-b.Last)/1e9, b.Burst())
	b.Last = now
}

// Wait is how long (ns) until the bucket has a token (0: it has one, or it is off).
func (b *Bucket) Wait() int64 {
	if b.Rate == 0 || b.Tokens > 0 {
		return 0
	}
	return int64((-b.Tokens + 1e-3) / b.Rate * 1e9)
}

// SetTime tells the core the time (Unix ms) without acting on it. The owner calls it
// before an input when a dispatch rate may be set, so that the rates are measured at the
// time of that input.
func (d *Core) SetTime(now int64) { d.now = now }

// SetRate sets the subscription's dispatch rate (0: off) from now on (the last time told)
// and dispatches what it allows.
func (d *Core) SetRate(msgs, bytes int64) {
	d.rate.Set(msgs, bytes, d.now*1e6)
	d.rateAt = 0
	d.dispatch()
}

// RetuneRate changes the subscription's dispatch rate keeping its tokens (a rate relative
// to the publish rate); a rate that is off stays off.
func (d *Core) RetuneRate(msgs, bytes float64) {
	d.rate.Msgs.Retune(msgs, d.now*1e6)
	d.rate.Bytes.Retune(bytes, d.now*1e6)
}

// RateOf returns the subscription's dispatch rate (messages and bytes per second; 0: off).
func (d *Core) RateOf() (msgs, bytes float64) { return d.rate.Msgs.Rate, d.rate.Bytes.Rate }

// rateAllow is how many entries the subscription's and the topic's rates allow now and, if
// none, how long (ns) until they do.
func (d *Core) rateAllow() (int, int64) {
	now := d.now * 1e6
	n, wait := d.rate.Allow(now)
	if d.cfg.Shared != nil {
		sn, sw := d.cfg.Shared.Allow(now)
		if sn <= 0 {
			wait = max(wait, sw)
		}
		n = min(n, sn)
	}
	return n, wait
}

// charge takes what a read brought from the dispatch rates.
func (d *Core) charge(es []Entry) {
	if d.mut.RateUncharged || len(es) == 0 || (!d.rate.On() && d.cfg.Shared == nil) {
		return
	}
	var msgs, bytes float64
	for _, e := range es {
		msgs += float64(max(e.Info.Msgs, 1))
		bytes += float64(len(e.Data))
	}
	d.rate.Spend(msgs, bytes)
	if d.cfg.Shared != nil {
		d.cfg.Shared.Spend(msgs, bytes)
	}
}
