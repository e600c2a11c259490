package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// Tool is a Pulsar benchmark.
type Tool string

// The Pulsar benchmarks.
const (
	// Produce publishes at a rate (or as fast as possible): throughput and publish latency.
	Produce Tool = "produce"
	// Consume receives and acknowledges (e.g. a backlog): throughput.
	Consume Tool = "consume"
	// E2E publishes and consumes together: publish and end-to-end latency, the latter from
	// the scheduled send time stamped in each payload's first 8 bytes.
	E2E Tool = "e2e"
)

// Producer is what the benchmark needs of a producer (a topic's or a scalable topic's).
type Producer interface {
	Send(ctx context.Context, msg *pulsarclient.ProducerMessage) (pulsarclient.MessageID, error)
	SendAsync(ctx context.Context, msg *pulsarclient.ProducerMessage, cb func(pulsarclient.MessageID, error)) error
	Close(ctx context.Context) error
}

// Consumer is what the benchmark needs of a consumer.
type Consumer interface {
	Receive(ctx context.Context) (*pulsarclient.Message, error)
	Ack(m *pulsarclient.Message) error
	Close(ctx context.Context) error
}

// ProducerOptions configure the publishing side (Produce, E2E).
type ProducerOptions struct {
	Producers  int
	Size       int     // message size in bytes (E2E: at least 8)
	Rate       float64 // total msg/s (0: as fast as possible)
	MaxPending int     // messages in flight per producer (async mode)
	Sync       bool    // one message in flight per producer
	Messages   int64   // stop after this many in all (0: by duration)
	NoBatching bool
	BatchMax   int
	BatchDelay time.Duration
	InFlight   int // entries in flight per producer before a partial batch waits
	// Keys is the number of distinct message keys (0: messages have none), spread over the
	// producers: message n of producer p has key (p + n*Producers) mod Keys, so with as many
	// keys as producers each producer sends one key, as an IoT device does.
	Keys int
}

// Mode describes the send mode for the report.
func (f *ProducerOptions) Mode() string {
	if f.Sync {
		return "sync"
	}
	return fmt.Sprintf("async, %d in flight", f.MaxPending)
}

// ConsumerOptions configure the consuming side (Consume, E2E).
type ConsumerOptions struct {
	Consumers int
	// Messages stops a Consume run after this many messages (0: by duration); the warm-up is
	// then skipped, as a backlog is measured from the subscription on.
	Messages int64
	NoAck    bool
	// Options are each consumer's; the topic is Options.Topic.
	Options pulsarclient.ConsumerOptions
}

// Options configure Run.
type Options struct {
	Tool  Tool
	Topic string
	// Duration is the measured time after Warmup (with a message limit: a limit, 0 = none).
	Duration, Warmup time.Duration
	Producer         ProducerOptions
	Consumer         ConsumerOptions
	// NewProducer creates producer i (0 <= i < Producer.Producers) with the given options.
	NewProducer func(ctx context.Context, i int, o pulsarclient.ProducerOptions) (Producer, error)
	// Subscribe creates consumer i (0 <= i < Consumer.Consumers).
	Subscribe func(ctx context.Context, i int, o pulsarclient.ConsumerOptions) (Consumer, error)
	// Progress, if not nil, receives a report once a second from a goroutine of Run.
	Progress func(Progress)
	// Window, if positive, divides the measured time into windows of this length, as the
	// OpenMessaging Benchmark reports: each has its rates and its own latency percentiles
	// (Result.Windows), so a run at a fixed rate shows every window's tail, not only the
	// whole run's.
	Window time.Duration
	// OnWindow, if not nil, receives each window's report as it closes, from a goroutine of
	// Run; it must not block.
	OnWindow func(WindowResult)
}

// WindowResult is one window of a run with Options.Window: the rates of publish
// acknowledgements and of received messages in it, the backlog at its end (acknowledged but
// not yet received; e2e), and the latencies of the publishes acknowledged and the messages
// received in it.
type WindowResult struct {
	Start     float64            `json:"start"` // seconds after the warm-up
	Seconds   float64            `json:"seconds"`
	Published float64            `json:"publishedMsgPerSec"`
	Received  float64            `json:"receivedMsgPerSec,omitempty"`
	Backlog   int64              `json:"backlog,omitempty"`
	Publish   map[string]float64 `json:"publishLatencyMs,omitempty"`
	EndToEnd  map[string]float64 `json:"endToEndLatencyMs,omitempty"`
}

// String formats a window as one line of the text report.
func (w WindowResult) String() string {
	s := fmt.Sprintf("%6.0fs  pub %8.0f msg/s", w.Start+w.Seconds, w.Published)
	if w.Received > 0 || w.EndToEnd != nil {
		s += fmt.Sprintf("  recv %8.0f msg/s  backlog %d", w.Received, w.Backlog)
	}
	if w.Publish != nil {
		s += fmt.Sprintf("  pub ms p50 %.2f p99 %.2f p99.9 %.2f max %.2f", w.Publish["p50"], w.Publish["p99"], w.Publish["p99.9"], w.Publish["max"])
	}
	if w.EndToEnd != nil {
		s += fmt.Sprintf("  e2e ms p50 %.2f p99 %.2f p99.9 %.2f max %.2f", w.EndToEnd["p50"], w.EndToEnd["p99"], w.EndToEnd["p99.9"], w.EndToEnd["max"])
	}
	return s
}

// Result is a Pulsar benchmark's report (the JSON form of `magnetar perf ... -o json`).
type Result struct {
	Tool       string  `json:"tool"`
	Topic      string  `json:"topic"`
	Clients    int     `json:"clients"`
	Size       int     `json:"size"`
	Mode       string  `json:"mode,omitempty"`
	Batching   bool    `json:"batching"`
	TargetRate float64 `json:"targetRate,omitempty"`
	Messages   int64   `json:"messages"`
	Seconds    float64 `json:"seconds"`
	MsgPerSec  float64 `json:"msgPerSec"`
	MiBPerSec  float64 `json:"mibPerSec"`
	Failed     int64   `json:"failed"`
	// ReceivedMsgPerSec is the consumers' rate in an e2e run.
	ReceivedMsgPerSec float64            `json:"receivedMsgPerSec,omitempty"`
	Publish           map[string]float64 `json:"publishLatencyMs,omitempty"`
	EndToEnd          map[string]float64 `json:"endToEndLatencyMs,omitempty"`
	// SendLateness is how late the paced producers handed messages to the client after
	// their scheduled times (with a rate): the load generator's own share of the latencies
	// above, which are counted from the scheduled times (Go timers fire no sooner than
	// about 1 ms on Linux).
	SendLateness map[string]float64 `json:"sendLatenessMs,omitempty"`
	// Windows are the per-window reports of a run with Options.Window.
	Windows []WindowResult `json:"windows,omitempty"`
}

// WriteText writes the report as text.
func (r *Result) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%s %s: %d clients, %d B messages", r.Tool, r.Topic, r.Clients, r.Size)
	if r.Mode != "" {
		fmt.Fprintf(w, ", %s, batching %v", r.Mode, r.Batching)
	}
	if r.TargetRate > 0 {
		fmt.Fprintf(w, ", rate %.0f msg/s", r.TargetRate)
	}
	fmt.Fprintf(w, "\n  %d messages in %.2fs: %.0f msg/s, %.2f MiB/s, %d failed\n", r.Messages, r.Seconds, r.MsgPerSec, r.MiBPerSec, r.Failed)
	if r.ReceivedMsgPerSec > 0 {
		fmt.Fprintf(w, "  received: %.0f msg/s\n", r.ReceivedMsgPerSec)
	}
	if r.Publish != nil {
		fmt.Fprintf(w, "  publish latency (ms): %s\n", FormatMillis(r.Publish))
	}
	if r.EndToEnd != nil {
		fmt.Fprintf(w, "  end-to-end latency (ms): %s\n", FormatMillis(r.EndToEnd))
	}
	if r.SendLateness != nil {
		if _, err := fmt.Fprintf(w, "  of which the generator's send lateness (ms): %s\n", FormatMillis(r.SendLateness)); err != nil {
			return err
		}
	}
	for i, win := range r.Windows {
		if i == 0 {
			fmt.Fprintf(w, "  windows (end, rates, backlog, latencies of the window):\n")
		}
		if _, err := fmt.Fprintf(w, "  %s\n", win); err != nil {
			return err
		}
	}
	return nil
}

// Run runs one Pulsar benchmark until its duration (after the warm-up) has passed, its
// message limit is reached, or ctx ends. It returns a nil Result only if the producers or
// consumers could not be created; otherwise the Result, and the first error of the run
// (a failed send, receive or acknowledgement; an unreached Consume limit), if any. An ended
// ctx is no error.
func Run(ctx context.Context, o Options) (*Result, error) {
	switch o.Tool {
	case Produce, Consume, E2E:
	default:
		return nil, fmt.Errorf("perf: unknown tool %q", o.Tool)
	}
	if o.Warmup < 0 || o.Duration < 0 {
		return nil, errors.New("perf: negative duration or warm-up")
	}
	if o.Tool != Consume && (o.Producer.Producers < 1 || o.Producer.Size < 1 || o.NewProducer == nil) {
		return nil, errors.New("perf: no producers")
	}
	if o.Tool != Produce && (o.Consumer.Consumers < 1 || o.Subscribe == nil) {
		return nil, errors.New("perf: no consumers")
	}
	if o.Tool == E2E && o.Producer.Size < 8 {
		return nil, errors.New("perf: e2e messages need at least 8 bytes")
	}
	if o.Window < 0 || o.Producer.Keys < 0 {
		return nil, errors.New("perf: negative window or keys")
	}
	if o.Tool == Consume && o.Consumer.Messages > 0 {
		o.Warmup = 0 // a backlog is measured from the subscription on
	}
	start := time.Now().Add(o.Warmup)
	var end time.Time
	if o.Duration > 0 {
		end = start.Add(o.Duration)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	size := o.Producer.Size
	if o.Tool == Consume {
		size = 0
	}
	r := &run{o: &o, size: size, pubWin: window{start: start, end: end}, subWin: window{start: start, end: end},
		received: make(chan struct{}, 1)}
	for k := range o.Producer.Keys {
		r.keys = append(r.keys, "key-"+strconv.Itoa(k))
	}
	switch o.Tool {
	case Produce:
		return r.produce(ctx)
	case Consume:
		return r.consume(ctx)
	default:
		return r.e2e(ctx)
	}
}

func (r *run) produce(ctx context.Context) (*Result, error) {
	wait, err := r.startProducers(ctx, false)
	if err != nil {
		return nil, err
	}
	stopReport := r.report(ctx, &r.acked, "acked")
	stopWindows := r.windows(ctx)
	werr := wait()
	stopWindows()
	stopReport()
	return r.result(), firstErr(r.err, werr)
}

func (r *run) consume(ctx context.Context) (*Result, error) {
	cctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	limit := r.o.Consumer.Messages
	wait, err := r.startConsumers(cctx, limit, false, stopAll)
	if err != nil {
		return nil, err
	}
	stopReport := r.report(cctx, &r.nrecv, "received")
	stopWindows := r.windows(cctx)
	wait()
	stopWindows()
	stopReport()
	res := r.result()
	if limit > 0 && r.nrecv.Load() < limit {
		return res, firstErr(r.err, fmt.Errorf("received %d of %d messages", r.nrecv.Load(), limit))
	}
	return res, firstErr(r.err)
}

func (r *run) e2e(ctx context.Context) (*Result, error) {
	// The consumers outlive ctx: they receive what was acknowledged after it ends.
	cctx, stopConsumers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsumers()
	// Consumers first, so that nothing published is missed.
	waitCons, err := r.startConsumers(cctx, 0, true, stopConsumers)
	if err != nil {
		return nil, err
	}
	wait, err := r.startProducers(ctx, true)
	if err != nil {
		stopConsumers()
		waitCons()
		return nil, err
	}
	stopReport := r.report(cctx, &r.nrecv, "received")
	stopWindows := r.windows(ctx)
	werr := wait()
	stopWindows()
	// Let the consumers receive what was acknowledged, for at most 10 s.
	drain := time.NewTimer(10 * time.Second)
drain:
	for r.nrecv.Load() < r.acked.Load() {
		select {
		case <-r.received:
		case <-drain.C:
			break drain
		}
	}
	drain.Stop()
	stopReport()
	stopConsumers()
	waitCons()
	return r.result(), firstErr(r.err, werr)
}

// firstErr returns the first error that is not the end of the run's context.
func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) && !errors.Is(e, context.DeadlineExceeded) {
			return e
		}
	}
	return nil
}

// window is the measured interval: after the warm-up, until the end (or the last event).
type window struct {
	start, end time.Time // end is zero without a duration limit
	count      atomic.Int64
	last       atomic.Int64 // unix nanos of the last counted event
}

// in reports whether t is inside the window.
func (w *window) in(t time.Time) bool {
	return !t.Before(w.start) && (w.end.IsZero() || t.Before(w.end))
}

func (w *window) add(t time.Time) {
	if w.in(t) {
		w.count.Add(1)
		w.last.Store(t.UnixNano())
	}
}

// seconds is the window's measured length so far.
func (w *window) seconds(now time.Time) float64 {
	end := now
	if !w.end.IsZero() && w.end.Before(end) {
		end = w.end
	}
	if l := w.last.Load(); l != 0 && (w.end.IsZero() || now.After(w.end)) {
		end = time.Unix(0, l)
		if !w.end.IsZero() && w.end.Before(end) {
			end = w.end
		}
	}
	return max(end.Sub(w.start).Seconds(), 1e-9)
}

// run is the shared state of one Pulsar benchmark.
type run struct {
	o        *Options
	size     int
	pubWin   window // publish acknowledgements
	subWin   window // messages received
	rxBytes  atomic.Int64
	received chan struct{} // cap 1: a message was received (for draining)
	sent     atomic.Int64  // publishes started (reserved against the message limit)
	queued   atomic.Int64  // publishes handed to the producer
	acked    atomic.Int64  // publishes acknowledged
	nrecv    atomic.Int64  // messages consumed
	failed   atomic.Int64
	pubLat   Latencies
	e2eLat   Latencies
	lateness Latencies // paced sends: handed to the client after the scheduled time by this much
	keys     []string  // ProducerOptions.Keys
	// The current window's latencies (Options.Window), by completion time, and the
	// finished windows.
	winPub, winE2E Latencies
	winMu          sync.Mutex
	wins           []WindowResult // guarded by winMu
	errOnce        sync.Once
	err            error
}

func (r *run) fail(err error) {
	r.failed.Add(1)
	r.errOnce.Do(func() { r.err = err })
}

// report sends a progress report per second until ctx ends or the returned stop is called;
// stop waits for the reporting goroutine.
func (r *run) report(ctx context.Context, count *atomic.Int64, what string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pr := newMeter(RealClock, r.size, "msg", r.o.Progress)
		t := time.NewTicker(100 * time.Millisecond) // tick reports once a second has passed
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pr.tick(count.Load(), func(p *Progress) {
					p.Counted, p.Total = what, count.Load()
					p.InFlight = r.queued.Load() - r.acked.Load() - r.failed.Load()
				})
			}
		}
	}()
	return func() { cancel(); <-done }
}

// produceLoop publishes from one producer until ctx ends, the window closes, or the total
// reaches limit (0: none). rate is this producer's msg/s (0: as fast as possible); stamp puts
// the scheduled send time in the payload's first 8 bytes (for end-to-end latency).
func (r *run) produceLoop(ctx context.Context, idx int, p Producer, f *ProducerOptions, rate float64, limit int64, stamp bool) {
	payload := make([]byte, f.Size)
	for i := range payload {
		payload[i] = byte(i)
	}
	pacer := NewPacer(RealClock, rate, 0)
	for i := int64(0); ctx.Err() == nil; i++ {
		if limit > 0 && r.sent.Add(1) > limit {
			r.sent.Add(-1)
			return
		} else if limit == 0 {
			r.sent.Add(1)
		}
		sched, err := pacer.Wait(ctx, i)
		if err != nil {
			r.sent.Add(-1)
			return
		}
		if !r.pubWin.end.IsZero() && sched.After(r.pubWin.end) {
			r.sent.Add(-1)
			return
		}
		if pacer.Paced() && r.pubWin.in(sched) {
			r.lateness.Add(time.Since(sched))
		}
		body := payload
		if stamp {
			body = make([]byte, f.Size)
			copy(body, payload)
			binary.BigEndian.PutUint64(body, uint64(sched.UnixNano()))
		}
		msg := &pulsarclient.ProducerMessage{Payload: body}
		if len(r.keys) > 0 {
			msg.Key = r.keys[(int64(idx)+i*int64(f.Producers))%int64(len(r.keys))]
		}
		done := func(_ pulsarclient.MessageID, err error) {
			if err != nil {
				r.fail(err)
				return
			}
			now := time.Now()
			r.acked.Add(1)
			r.pubWin.add(now)
			if r.pubWin.in(sched) {
				r.pubLat.Add(now.Sub(sched))
			}
			if r.o.Window > 0 && r.pubWin.in(now) {
				r.winPub.Add(now.Sub(sched))
			}
		}
		if f.Sync {
			r.queued.Add(1)
			id, err := p.Send(ctx, msg)
			if err != nil && ctx.Err() != nil {
				r.sent.Add(-1)
				return
			}
			done(id, err)
			continue
		}
		r.queued.Add(1)
		if err := p.SendAsync(ctx, msg, done); err != nil {
			r.sent.Add(-1)
			r.queued.Add(-1)
			if ctx.Err() == nil {
				r.fail(err)
			}
			return
		}
	}
}

// startProducers creates the producers and runs their loops; wait returns when they are
// done and closed (which flushes them).
func (r *run) startProducers(ctx context.Context, stamp bool) (wait func() error, err error) {
	f := &r.o.Producer
	var prods []Producer
	closeAll := func() error {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var errs []error
		for _, p := range prods {
			errs = append(errs, p.Close(fctx))
		}
		return errors.Join(errs...)
	}
	for i := range f.Producers {
		pending := f.MaxPending
		if f.Sync {
			pending = 1
		}
		p, err := r.o.NewProducer(ctx, i, pulsarclient.ProducerOptions{Topic: r.o.Topic,
			DisableBatching: f.NoBatching, BatchingMaxMessages: f.BatchMax, BatchingMaxDelay: f.BatchDelay, BatchingMaxInFlight: f.InFlight,
			MaxPendingMessages: pending})
		if err != nil {
			closeAll()
			return nil, err
		}
		prods = append(prods, p)
	}
	var wg sync.WaitGroup
	for i, p := range prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produceLoop(ctx, i, p, f, f.Rate/float64(f.Producers), f.Messages, stamp)
		}()
	}
	return func() error {
		wg.Wait()
		return closeAll()
	}, nil
}

// consumeLoop receives and acknowledges until ctx ends or the total reaches limit.
func (r *run) consumeLoop(ctx context.Context, cons Consumer, limit int64, stamped bool, done func()) {
	for ctx.Err() == nil {
		m, err := cons.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.fail(err)
			}
			return
		}
		now := time.Now()
		if stamped && len(m.Payload) >= 8 {
			sched := time.Unix(0, int64(binary.BigEndian.Uint64(m.Payload)))
			if r.pubWin.in(sched) {
				r.e2eLat.Add(now.Sub(sched))
			}
			if r.o.Window > 0 && r.subWin.in(now) {
				r.winE2E.Add(now.Sub(sched))
			}
		}
		if !r.o.Consumer.NoAck {
			if err := cons.Ack(m); err != nil {
				r.fail(err)
				return
			}
		}
		if r.subWin.in(now) {
			r.rxBytes.Add(int64(len(m.Payload)))
		}
		r.subWin.add(now)
		n := r.nrecv.Add(1)
		select {
		case r.received <- struct{}{}:
		default:
		}
		if limit > 0 && n >= limit {
			done()
			return
		}
	}
}

// startConsumers subscribes the consumers and runs their loops; wait returns when they are
// done and closed.
func (r *run) startConsumers(ctx context.Context, limit int64, stamped bool, done func()) (wait func(), err error) {
	opts := r.o.Consumer.Options
	opts.Topic = r.o.Topic
	var conss []Consumer
	closeAll := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, cons := range conss {
			cons.Close(cctx)
		}
	}
	for i := range r.o.Consumer.Consumers {
		cons, err := r.o.Subscribe(ctx, i, opts)
		if err != nil {
			closeAll()
			return nil, err
		}
		conss = append(conss, cons)
	}
	var wg sync.WaitGroup
	for _, cons := range conss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consumeLoop(ctx, cons, limit, stamped, done)
		}()
	}
	return func() {
		wg.Wait()
		closeAll()
	}, nil
}

// result reports the publish side (produce, e2e) or the receive side (consume).
func (r *run) result() *Result {
	now := time.Now()
	o := r.o
	clients := o.Producer.Producers
	if o.Tool == Consume {
		clients = o.Consumer.Consumers
	}
	res := &Result{Tool: string(o.Tool), Topic: o.Topic, Clients: clients, Size: r.size, Failed: r.failed.Load(),
		Publish: r.pubLat.Percentiles().Millis(), EndToEnd: r.e2eLat.Percentiles().Millis(),
		SendLateness: r.lateness.Percentiles().Millis()}
	r.winMu.Lock()
	res.Windows = slices.Clone(r.wins)
	r.winMu.Unlock()
	if o.Tool != Consume {
		pf := &o.Producer
		res.Mode, res.Batching, res.TargetRate = pf.Mode(), !pf.NoBatching, pf.Rate
		res.Messages, res.Seconds = r.pubWin.count.Load(), r.pubWin.seconds(now)
		res.MsgPerSec = float64(res.Messages) / res.Seconds
		res.MiBPerSec = res.MsgPerSec * float64(r.size) / (1 << 20)
	} else {
		res.Messages, res.Seconds = r.subWin.count.Load(), r.subWin.seconds(now)
		res.MsgPerSec = float64(res.Messages) / res.Seconds
		res.MiBPerSec = float64(r.rxBytes.Load()) / res.Seconds / (1 << 20)
		if res.Messages > 0 {
			res.Size = int(r.rxBytes.Load() / res.Messages)
		}
	}
	if o.Tool == E2E {
		res.ReceivedMsgPerSec = float64(r.subWin.count.Load()) / r.subWin.seconds(now)
	}
	return res
}

// windows closes a window every Options.Window from the end of the warm-up until ctx ends or
// the returned stop is called (which closes the last, partial window if it lasted a second
// or more, and waits for the goroutine). Without a window it does nothing.
func (r *run) windows(ctx context.Context) (stop func()) {
	if r.o.Window <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		from := r.pubWin.start
		var acked0, recv0 int64
		closeWindow := func(to time.Time) {
			acked, recv := r.acked.Load(), r.nrecv.Load()
			secs := to.Sub(from).Seconds()
			w := WindowResult{Start: from.Sub(r.pubWin.start).Seconds(), Seconds: secs,
				Published: float64(acked-acked0) / secs, Publish: r.winPub.take().Millis(), EndToEnd: r.winE2E.take().Millis()}
			if r.o.Tool != Produce {
				w.Received = float64(recv-recv0) / secs
			}
			if r.o.Tool == E2E {
				w.Backlog = acked - recv
			}
			r.winMu.Lock()
			r.wins = append(r.wins, w)
			r.winMu.Unlock()
			if r.o.OnWindow != nil {
				r.o.OnWindow(w)
			}
			from, acked0, recv0 = to, acked, recv
		}
		// The first window starts at the end of the warm-up: what came before is not counted.
		if err := RealClock.Sleep(ctx, time.Until(from)); err != nil {
			return
		}
		acked0, recv0 = r.acked.Load(), r.nrecv.Load()
		r.winPub.take()
		r.winE2E.take()
		for {
			next := from.Add(r.o.Window)
			if err := RealClock.Sleep(ctx, time.Until(next)); err != nil {
				if now := time.Now(); now.Sub(from) >= time.Second {
					if !r.pubWin.end.IsZero() && now.After(r.pubWin.end) {
						now = r.pubWin.end
					}
					closeWindow(now)
				}
				return
			}
			closeWindow(next)
		}
	}()
	return func() { cancel(); <-done }
}
