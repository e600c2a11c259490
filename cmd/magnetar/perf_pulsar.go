package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/pulsarclient"
)

// The Pulsar perf tools: `magnetar perf produce|consume|e2e`. Latency is counted from each
// message's scheduled send time (start + i/rate), so a client that falls behind its rate
// reports the delay instead of hiding it (no coordinated omission).

// perfClientFlags are the flags every Pulsar perf tool shares.
type perfClientFlags struct {
	serviceFlags
	duration time.Duration
	warmup   time.Duration
	out      outputFlag
}

func (f *perfClientFlags) add(c *cobra.Command) {
	addServiceFlags(c, &f.serviceFlags)
	c.Flags().DurationVarP(&f.duration, "duration", "d", 10*time.Second, "measured time after the warm-up (with --messages: a limit, 0 = none)")
	c.Flags().DurationVar(&f.warmup, "warmup", 2*time.Second, "time before the measurement starts")
	f.out.add(c)
}

func (f *perfClientFlags) validate(messages int64) error {
	if err := f.out.validate(); err != nil {
		return err
	}
	if f.warmup < 0 || f.duration < 0 || (f.duration == 0 && messages <= 0) {
		return usageError{errors.New("--duration must be positive (or 0 with --messages), --warmup not negative")}
	}
	if messages < 0 {
		return usageError{errors.New("--messages must not be negative")}
	}
	return nil
}

// perfProducerFlags configure the publishing side.
type perfProducerFlags struct {
	producers  int
	size       int
	rate       float64
	maxPending int
	sync       bool
	messages   int64
	noBatching bool
	batchMax   int
	batchDelay time.Duration
	inFlight   int
}

func (f *perfProducerFlags) add(c *cobra.Command) {
	c.Flags().IntVar(&f.producers, "producers", 1, "number of producers (each on its own connection)")
	c.Flags().IntVarP(&f.size, "size", "s", 1024, "message size in bytes")
	c.Flags().Float64VarP(&f.rate, "rate", "r", 0, "total publish rate in msg/s (0: as fast as possible)")
	c.Flags().IntVar(&f.maxPending, "max-pending", 500, "messages in flight per producer (async mode)")
	c.Flags().BoolVar(&f.sync, "sync", false, "synchronous sends: one message in flight per producer")
	c.Flags().Int64VarP(&f.messages, "messages", "m", 0, "stop after publishing this many messages in all (0: by --duration)")
	c.Flags().BoolVar(&f.noBatching, "disable-batching", false, "send every message as its own entry")
	c.Flags().IntVar(&f.batchMax, "batch-max-messages", 1000, "messages per batch entry at most")
	c.Flags().DurationVar(&f.batchDelay, "batch-delay", time.Millisecond, "how long a batch waits for more messages")
	c.Flags().IntVar(&f.inFlight, "batch-in-flight", pulsarclient.DefaultBatchingMaxInFlight, "entries in flight per producer before a partial batch waits to gather more")
}

func (f *perfProducerFlags) validate(minSize int) error {
	switch {
	case f.producers < 1:
		return usageError{errors.New("--producers must be at least 1")}
	case f.size < minSize || f.size > 5<<20:
		return usageError{fmt.Errorf("--size must be between %d and %d bytes", minSize, 5<<20)}
	case f.rate < 0:
		return usageError{errors.New("--rate must not be negative")}
	case f.maxPending < 1:
		return usageError{errors.New("--max-pending must be at least 1")}
	case f.batchMax < 1 || f.batchDelay <= 0 || f.inFlight < 1:
		return usageError{errors.New("--batch-max-messages, --batch-delay and --batch-in-flight must be positive")}
	}
	return nil
}

func (f *perfProducerFlags) mode() string {
	if f.sync {
		return "sync"
	}
	return fmt.Sprintf("async, %d in flight", f.maxPending)
}

// perfResult is the final report (-o json prints it).
type perfResult struct {
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
	// their scheduled times (with --rate): the load generator's own share of the latencies
	// above, which are counted from the scheduled times (Go timers fire no sooner than
	// about 1 ms on Linux).
	SendLateness map[string]float64 `json:"sendLatenessMs,omitempty"`
}

func (r *perfResult) print(w io.Writer, asJSON bool) error {
	if asJSON {
		return printJSON(w, r)
	}
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
		fmt.Fprintf(w, "  publish latency (ms): %s\n", fmtPercentiles(r.Publish))
	}
	if r.EndToEnd != nil {
		fmt.Fprintf(w, "  end-to-end latency (ms): %s\n", fmtPercentiles(r.EndToEnd))
	}
	if r.SendLateness != nil {
		fmt.Fprintf(w, "  of which the generator's send lateness (ms): %s\n", fmtPercentiles(r.SendLateness))
	}
	return nil
}

func fmtPercentiles(m map[string]float64) string {
	return fmt.Sprintf("p50 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (%0.f samples)", m["p50"], m["p99"], m["p99.9"], m["max"], m["samples"])
}

// percentiles returns p50/p99/p99.9/max in milliseconds (and the sample count).
func percentiles(l *latencies) map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.s) == 0 {
		return nil
	}
	slices.Sort(l.s)
	pct := func(p float64) float64 {
		return float64(l.s[min(len(l.s)-1, int(float64(len(l.s))*p))]) / 1e6
	}
	return map[string]float64{"p50": pct(0.5), "p99": pct(0.99), "p99.9": pct(0.999), "max": pct(1), "samples": float64(len(l.s))}
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

// perfRun is the shared state of one perf run.
type perfRun struct {
	sf       *serviceFlags // --admin-url for scalable topics
	size     int
	pubWin   window // publish acknowledgements
	subWin   window // messages received
	rxBytes  atomic.Int64
	received chan struct{} // cap 1: a message was received (for draining)
	sent     atomic.Int64  // publishes started (reserved against --messages)
	queued   atomic.Int64  // publishes handed to the producer
	acked    atomic.Int64  // publishes acknowledged
	nrecv    atomic.Int64  // messages consumed
	failed   atomic.Int64
	pubLat   latencies
	e2eLat   latencies
	lateness latencies // paced sends: handed to the client after the scheduled time by this much
	errOnce  sync.Once
	err      error
}

func (r *perfRun) fail(err error) {
	r.failed.Add(1)
	r.errOnce.Do(func() { r.err = err })
}

// report prints a progress line per second until ctx ends.
func (r *perfRun) report(ctx context.Context, w io.Writer, count *atomic.Int64, what string) {
	pr := newProgress(r.size, func(s string) {
		fmt.Fprintf(w, "%s  %s total %d, %d in flight\n", s, what, count.Load(), r.queued.Load()-r.acked.Load()-r.failed.Load())
	})
	pr.unit = "msg"
	t := time.NewTicker(100 * time.Millisecond) // tick prints once a second has passed
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pr.tick(count.Load())
		}
	}
}

// produceLoop publishes from one producer until ctx ends, the window closes, or the total
// reaches limit (0: none). rate is this producer's msg/s (0: as fast as possible); stamp puts
// the scheduled send time in the payload's first 8 bytes (for end-to-end latency).
func (r *perfRun) produceLoop(ctx context.Context, p clientProducer, f *perfProducerFlags, rate float64, limit int64, stamp bool) {
	payload := make([]byte, f.size)
	for i := range payload {
		payload[i] = byte(i)
	}
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	t0 := time.Now()
	for i := int64(0); ctx.Err() == nil; i++ {
		if limit > 0 && r.sent.Add(1) > limit {
			r.sent.Add(-1)
			return
		} else if limit == 0 {
			r.sent.Add(1)
		}
		sched := time.Now()
		if interval > 0 {
			sched = t0.Add(time.Duration(i) * interval)
			if d := time.Until(sched); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					r.sent.Add(-1)
					return
				}
			}
		}
		if !r.pubWin.end.IsZero() && sched.After(r.pubWin.end) {
			r.sent.Add(-1)
			return
		}
		if interval > 0 && r.pubWin.in(sched) {
			r.lateness.add(time.Since(sched))
		}
		body := payload
		if stamp {
			body = make([]byte, f.size)
			copy(body, payload)
			binary.BigEndian.PutUint64(body, uint64(sched.UnixNano()))
		}
		msg := &pulsarclient.ProducerMessage{Payload: body}
		done := func(_ pulsarclient.MessageID, err error) {
			if err != nil {
				r.fail(err)
				return
			}
			now := time.Now()
			r.acked.Add(1)
			r.pubWin.add(now)
			if r.pubWin.in(sched) {
				r.pubLat.add(now.Sub(sched))
			}
		}
		if f.sync {
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

// startProducers creates n producers and runs their loops; wait returns when they are done
// and flushed.
func (r *perfRun) startProducers(ctx context.Context, cl []*pulsarclient.Client, topic string, f *perfProducerFlags, stamp bool) (wait func() error, err error) {
	var prods []clientProducer
	for i := range f.producers {
		pending := f.maxPending
		if f.sync {
			pending = 1
		}
		p, err := createProducer(ctx, cl[i%len(cl)], r.sf, pulsarclient.ProducerOptions{Topic: topic,
			DisableBatching: f.noBatching, BatchingMaxMessages: f.batchMax, BatchingMaxDelay: f.batchDelay, BatchingMaxInFlight: f.inFlight,
			MaxPendingMessages: pending})
		if err != nil {
			return nil, err
		}
		prods = append(prods, p)
	}
	var wg sync.WaitGroup
	for _, p := range prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produceLoop(ctx, p, f, f.rate/float64(f.producers), f.messages, stamp)
		}()
	}
	return func() error {
		wg.Wait()
		fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var errs []error
		for _, p := range prods {
			errs = append(errs, p.Close(fctx))
		}
		return errors.Join(errs...)
	}, nil
}

// perfClients opens n clients (one connection each, as separate Pulsar client processes
// would have).
func perfClients(sf *serviceFlags, n int) ([]*pulsarclient.Client, func(), error) {
	var cls []*pulsarclient.Client
	for range n {
		cl, err := newPulsarClient(sf)
		if err != nil {
			return nil, nil, err
		}
		cls = append(cls, cl)
	}
	return cls, func() {
		for _, cl := range cls {
			cl.Close()
		}
	}, nil
}

// runContext returns the run's context: it ends on a signal, or after warm-up + duration
// (plus grace for the last acknowledgements, handled by the callers' Flush).
func runContext(parent context.Context, f *perfClientFlags) (context.Context, context.CancelFunc, time.Time, time.Time) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	start := time.Now().Add(f.warmup)
	var end time.Time
	if f.duration > 0 {
		end = start.Add(f.duration)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		return ctx, func() { cancel(); stop() }, start, end
	}
	return ctx, stop, start, end
}

func newPerfProduceCmd() *cobra.Command {
	var f perfClientFlags
	var pf perfProducerFlags
	c := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Publish at a rate (or as fast as possible) and report throughput and publish latency",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(pf.messages); err != nil {
				return err
			}
			if err := pf.validate(1); err != nil {
				return err
			}
			cls, closeAll, err := perfClients(&f.serviceFlags, pf.producers)
			if err != nil {
				return err
			}
			defer closeAll()
			ctx, cancel, start, end := runContext(cmd.Context(), &f)
			defer cancel()
			r := newPerfRun(pf.size, start, end)
			r.sf = &f.serviceFlags
			wait, err := r.startProducers(ctx, cls, args[0], &pf, false)
			if err != nil {
				return err
			}
			rctx, stopReport := context.WithCancel(ctx)
			go r.report(rctx, cmd.ErrOrStderr(), &r.acked, "acked")
			werr := wait()
			stopReport()
			res := r.result("produce", args[0], pf.producers, &pf)
			if err := res.print(cmd.OutOrStdout(), f.out.json()); err != nil {
				return err
			}
			return firstErr(r.err, werr)
		},
	}
	f.add(c)
	pf.add(c)
	return clientTool(c)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) && !errors.Is(e, context.DeadlineExceeded) {
			return e
		}
	}
	return nil
}

func newPerfRun(size int, start, end time.Time) *perfRun {
	return &perfRun{size: size, pubWin: window{start: start, end: end}, subWin: window{start: start, end: end},
		received: make(chan struct{}, 1)}
}

// result reports the publish side (produce, e2e) or the receive side (consume).
func (r *perfRun) result(tool, topic string, clients int, pf *perfProducerFlags) *perfResult {
	now := time.Now()
	res := &perfResult{Tool: tool, Topic: topic, Clients: clients, Size: r.size, Failed: r.failed.Load(),
		Publish: percentiles(&r.pubLat), EndToEnd: percentiles(&r.e2eLat), SendLateness: percentiles(&r.lateness)}
	if pf != nil {
		res.Mode, res.Batching, res.TargetRate = pf.mode(), !pf.noBatching, pf.rate
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
	if tool == "e2e" {
		res.ReceivedMsgPerSec = float64(r.subWin.count.Load()) / r.subWin.seconds(now)
	}
	return res
}

// perfConsumerFlags configure the consuming side.
type perfConsumerFlags struct {
	sub, subType, position string
	consumers              int
	queue                  int
	ackGrouping            time.Duration
	noAck                  bool
}

func (f *perfConsumerFlags) add(c *cobra.Command, defaultPosition string) {
	c.Flags().StringVar(&f.sub, "subscription", "perf", "subscription name")
	c.Flags().StringVarP(&f.subType, "type", "t", "Exclusive", "subscription type (Shared or Key_Shared for several consumers)")
	c.Flags().StringVarP(&f.position, "position", "p", defaultPosition, "where a new subscription starts: Earliest or Latest")
	c.Flags().IntVar(&f.consumers, "consumers", 1, "number of consumers")
	c.Flags().IntVar(&f.queue, "receiver-queue", 1000, "receiver queue size (permits) per consumer")
	c.Flags().DurationVar(&f.ackGrouping, "ack-grouping", 100*time.Millisecond, "acknowledgement grouping time (negative: ack each at once)")
	c.Flags().BoolVar(&f.noAck, "no-ack", false, "do not acknowledge")
}

func (f *perfConsumerFlags) options(topic string) (pulsarclient.ConsumerOptions, error) {
	st, err := pulsarclient.ParseSubscriptionType(f.subType)
	if err != nil {
		return pulsarclient.ConsumerOptions{}, usageError{err}
	}
	if f.consumers < 1 || f.queue < 1 || f.sub == "" {
		return pulsarclient.ConsumerOptions{}, usageError{errors.New("--consumers and --receiver-queue must be positive, --subscription not empty")}
	}
	if f.consumers > 1 && (st == pulsarclient.Exclusive || st == pulsarclient.Failover) {
		return pulsarclient.ConsumerOptions{}, usageError{fmt.Errorf("%d consumers need a Shared or Key_Shared subscription", f.consumers)}
	}
	o := pulsarclient.ConsumerOptions{Topic: topic, Subscription: f.sub, Type: st, ReceiverQueueSize: f.queue,
		AckGroupingTime: f.ackGrouping}
	switch {
	case strings.EqualFold(f.position, "earliest"):
		o.InitialPosition = pulsarclient.Earliest
	case strings.EqualFold(f.position, "latest"):
		o.InitialPosition = pulsarclient.Latest
	default:
		return o, usageError{fmt.Errorf("--position must be Earliest or Latest, not %q", f.position)}
	}
	return o, nil
}

// consumeLoop receives and acknowledges until ctx ends or the total reaches limit.
func (r *perfRun) consumeLoop(ctx context.Context, cons clientConsumer, f *perfConsumerFlags, limit int64, stamped bool, done func()) {
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
				r.e2eLat.add(now.Sub(sched))
			}
		}
		if !f.noAck {
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

func (r *perfRun) startConsumers(ctx context.Context, cls []*pulsarclient.Client, opts pulsarclient.ConsumerOptions, f *perfConsumerFlags, limit int64, stamped bool, done func()) (func(), error) {
	var conss []clientConsumer
	for i := range f.consumers {
		cons, err := subscribe(ctx, cls[i%len(cls)], r.sf, opts, fmt.Sprintf("perf-%d-%d", os.Getpid(), i))
		if err != nil {
			return nil, err
		}
		conss = append(conss, cons)
	}
	var wg sync.WaitGroup
	for _, cons := range conss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.consumeLoop(ctx, cons, f, limit, stamped, done)
		}()
	}
	return func() {
		wg.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, cons := range conss {
			cons.Close(cctx)
		}
	}, nil
}

func newPerfConsumeCmd() *cobra.Command {
	var f perfClientFlags
	var cf perfConsumerFlags
	var messages int64
	c := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Receive and acknowledge (e.g. a backlog) and report throughput",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(messages); err != nil {
				return err
			}
			opts, err := cf.options(args[0])
			if err != nil {
				return err
			}
			cls, closeAll, err := perfClients(&f.serviceFlags, cf.consumers)
			if err != nil {
				return err
			}
			defer closeAll()
			if messages > 0 {
				f.warmup = 0 // a backlog is measured from the subscription on
			}
			ctx, cancel, start, end := runContext(cmd.Context(), &f)
			defer cancel()
			r := newPerfRun(0, start, end)
			r.sf = &f.serviceFlags
			cctx, stopAll := context.WithCancel(ctx)
			defer stopAll()
			wait, err := r.startConsumers(cctx, cls, opts, &cf, messages, false, stopAll)
			if err != nil {
				return err
			}
			go r.report(cctx, cmd.ErrOrStderr(), &r.nrecv, "received")
			wait()
			res := r.result("consume", args[0], cf.consumers, nil)
			if err := res.print(cmd.OutOrStdout(), f.out.json()); err != nil {
				return err
			}
			if messages > 0 && r.nrecv.Load() < messages {
				return firstErr(r.err, fmt.Errorf("received %d of %d messages", r.nrecv.Load(), messages))
			}
			return firstErr(r.err)
		},
	}
	f.add(c)
	cf.add(c, "Earliest")
	c.Flags().Int64VarP(&messages, "messages", "m", 0, "stop after receiving this many messages (0: by --duration)")
	return clientTool(c)
}

func newPerfE2ECmd() *cobra.Command {
	var f perfClientFlags
	var pf perfProducerFlags
	var cf perfConsumerFlags
	c := &cobra.Command{
		Use:   "e2e TOPIC",
		Short: "Publish and consume together; report publish and end-to-end latency from the scheduled send time",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(pf.messages); err != nil {
				return err
			}
			if err := pf.validate(8); err != nil {
				return err
			}
			opts, err := cf.options(args[0])
			if err != nil {
				return err
			}
			cls, closeAll, err := perfClients(&f.serviceFlags, pf.producers+cf.consumers)
			if err != nil {
				return err
			}
			defer closeAll()
			ctx, cancel, start, end := runContext(cmd.Context(), &f)
			defer cancel()
			r := newPerfRun(pf.size, start, end)
			r.sf = &f.serviceFlags
			cctx, stopConsumers := context.WithCancel(context.Background())
			defer stopConsumers()
			// Consumers first, so that nothing published is missed.
			waitCons, err := r.startConsumers(cctx, cls[pf.producers:], opts, &cf, 0, true, stopConsumers)
			if err != nil {
				return err
			}
			wait, err := r.startProducers(ctx, cls[:pf.producers], args[0], &pf, true)
			if err != nil {
				stopConsumers()
				waitCons()
				return err
			}
			rctx, stopReport := context.WithCancel(cctx)
			go r.report(rctx, cmd.ErrOrStderr(), &r.nrecv, "received")
			werr := wait()
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
			res := r.result("e2e", args[0], pf.producers, &pf)
			if err := res.print(cmd.OutOrStdout(), f.out.json()); err != nil {
				return err
			}
			return firstErr(r.err, werr)
		},
	}
	f.add(c)
	pf.add(c)
	cf.add(c, "Latest")
	return clientTool(c)
}
