package scalablehost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/peer"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Host is the broker's part of scalable topics: a controller per topic, the stream
// consumers' assignments, the segment operations and their marks. Its methods are safe for
// concurrent use.
type Host struct {
	cfg  Config
	env  Env
	log  *slog.Logger
	life context.Context // the broker's: ends when it closes
	// refusedLog reports peers refusing this broker's credentials, rate-limited.
	refusedLog *slog.Logger
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	m          metrics
	marks      segmentMarks // segments.go

	mu struct {
		sync.Mutex // guards ctls
		ctls       map[layout.Topic]*scalableTopic
	}
}

// scalableTopic is one topic's controller on this broker and what its leader published.
type scalableTopic struct {
	ctl *scalable.Controller

	mu      sync.Mutex // guards the fields below
	last    *layout.Layout
	assign  map[[2]string]scalable.Assignment // (sub, consumer) → the newest assignment
	polled  map[[2]string]time.Time           // when each consumer last polled (liveness)
	session map[[2]string]uint64
	changed chan struct{} // closed and replaced at every new assignment
	loads   map[layout.SegmentID]scalable.LoadSample
}

type metrics struct {
	splits, merges, prunes, assignments prometheus.Counter
}

// New starts the host: the watch of the layout records (a controller for each) and, with an
// auto-scale policy, the load sampling. life is the broker's life context (a stream
// consumer's long poll ends with it); env.Broker.ID must be known. Close stops it.
func New(life context.Context, cfg Config, env Env) *Host {
	if env.Logger == nil {
		env.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(life)
	h := &Host{cfg: cfg.withDefaults(), env: env, log: env.Logger, life: life, cancel: cancel,
		refusedLog: slog.New(ratelog.New(env.Logger.Handler(), ratelog.Options{}))}
	h.mu.ctls = map[layout.Topic]*scalableTopic{}
	c := func(name, help string) prometheus.Counter {
		ctr := prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_scalable_" + name, Help: help})
		if env.Registry != nil {
			env.Registry.MustRegister(ctr)
		}
		return ctr
	}
	h.m = metrics{
		splits:      c("splits_total", "Segment splits committed by the scalable-topic controllers this broker led."),
		merges:      c("merges_total", "Segment merges committed by the scalable-topic controllers this broker led."),
		prunes:      c("prunes_total", "Sealed segments pruned from layouts by the controllers this broker led."),
		assignments: c("assignment_changes_total", "Stream-consumer assignments published by the controllers this broker led."),
	}
	if err := h.cfg.Policy.Validate(); h.cfg.Policy.Enabled && err != nil {
		h.log.Warn("scalable topics: auto-scale policy off", "err", err)
		h.cfg.Policy.Enabled = false
	}
	h.wg.Go(func() { h.run(ctx) })
	if h.cfg.Policy.Enabled {
		h.wg.Go(func() { h.sample(ctx) })
	}
	return h
}

// Close stops every controller (resigning leaderships) and the watch, and waits for them.
// Idempotent; a nil Host does nothing.
func (h *Host) Close() {
	if h == nil {
		return
	}
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	ctls := h.mu.ctls
	h.mu.ctls = map[layout.Topic]*scalableTopic{}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range ctls {
		wg.Go(func() { t.ctl.Close() }) //nolint:errcheck // always nil
	}
	wg.Wait()
}

// run keeps a controller running for every layout record: list, then watch from there
// (metadata.Follower: a failed listing is retried every second, a watch that ends is
// followed by a new listing), and sweeps the stream consumers every tick.
func (h *Host) run(ctx context.Context) {
	sweep := time.NewTicker(h.cfg.TickInterval)
	defer sweep.Stop()
	ups := metadata.Follower{Store: h.env.Store, Prefix: metadata.PrefixScalableTopics, Log: h.log}.Chan(ctx)
	for {
		select {
		case u := <-ups:
			switch u.Kind {
			case metadata.Listed:
				h.listed(u.KVs)
			case metadata.Changed:
				for _, ev := range u.Events {
					t, ok := layoutKeyTopic(ev.KV.Key)
					switch {
					case !ok:
					case ev.Type == metadata.EventPut:
						h.ensure(t)
					default:
						h.wg.Go(func() { h.stop(t) })
					}
				}
			}
		case <-sweep.C:
			h.sweepConsumers(ctx)
		case <-ctx.Done():
			for range ups { // the follower ends with ctx
			}
			return
		}
	}
}

// listed runs a controller for every layout record of a listing and stops the others.
// Stops run on goroutines of their own, started here or in run on run's goroutine: run
// holds h.wg above zero meanwhile, so Close's Wait waits for them too.
func (h *Host) listed(kvs []metadata.KV) {
	seen := map[layout.Topic]bool{}
	for _, kv := range kvs {
		if t, ok := layoutKeyTopic(kv.Key); ok {
			seen[t] = true
			h.ensure(t)
		}
	}
	h.mu.Lock()
	for t := range h.mu.ctls {
		if !seen[t] {
			h.wg.Go(func() { h.stop(t) })
		}
	}
	h.mu.Unlock()
}

func (h *Host) ensure(t layout.Topic) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.ctls[t] != nil {
		return
	}
	sct := &scalableTopic{assign: map[[2]string]scalable.Assignment{}, polled: map[[2]string]time.Time{},
		session: map[[2]string]uint64{}, changed: make(chan struct{})}
	cfg := scalable.DriverConfig{BrokerID: h.env.Broker.ID(), SessionTTL: h.env.SessionTTL, Core: scalable.Config{
		Topic: t, RetentionMs: h.cfg.Retention.Milliseconds(), TickMs: h.cfg.TickInterval.Milliseconds(),
		GraceMs: h.cfg.ConsumerGrace.Milliseconds(), Policy: h.cfg.Policy,
	}}
	sct.ctl = scalable.Start(h.env.Store, &segmentEffects{h: h}, &listener{h: h, t: sct}, cfg)
	h.mu.ctls[t] = sct
}

func (h *Host) stop(t layout.Topic) {
	h.mu.Lock()
	sct := h.mu.ctls[t]
	delete(h.mu.ctls, t)
	h.mu.Unlock()
	if sct != nil {
		sct.ctl.Close() //nolint:errcheck // always nil
	}
}

func (h *Host) topic(t layout.Topic) *scalableTopic {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.ctls[t]
}

// leading returns the topics this broker leads.
func (h *Host) leading() []*scalableTopic {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*scalableTopic
	for _, t := range h.mu.ctls {
		if t.ctl.Leading() {
			out = append(out, t)
		}
	}
	return out
}

// sample feeds the load of the led topics' active segments to their auto-scale policy every
// SampleInterval. A sample's ChangedMs moves only when a rate changed by more than a
// quarter (upstream's reporting band), so a segment counts as cold once it stayed cold.
func (h *Host) sample(ctx context.Context) {
	tick := time.NewTicker(h.cfg.SampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		for _, t := range h.leading() {
			t.mu.Lock()
			l := t.last
			if t.loads == nil {
				t.loads = map[layout.SegmentID]scalable.LoadSample{}
			}
			t.mu.Unlock()
			if l == nil {
				continue
			}
			tp := t.ctl.Topic()
			for _, seg := range l.Active() {
				var ts api.TopicStats
				if err := h.segmentStats(ctx, tp.SegmentName(seg), &ts); err != nil {
					continue
				}
				now := time.Now().UnixMilli()
				next := scalable.LoadSample{MsgRateIn: ts.MsgRateIn, BytesRateIn: ts.MsgThroughputIn, MsgRateOut: ts.MsgRateOut,
					BytesRateOut: ts.MsgThroughputOut, ChangedMs: now}
				t.mu.Lock()
				if prev, ok := t.loads[seg.ID]; ok && !movedBand(prev, next) {
					next.ChangedMs = prev.ChangedMs
				}
				t.loads[seg.ID] = next
				t.mu.Unlock()
				_ = t.ctl.Sample(ctx, seg.ID, next)
			}
		}
	}
}

// movedBand reports whether a rate moved by more than 25% (or from zero to more than 1/s).
func movedBand(a, b scalable.LoadSample) bool {
	moved := func(x, y float64) bool {
		if x < 1 {
			return y >= 1
		}
		d := y - x
		return d > x/4 || -d > x/4
	}
	return moved(a.MsgRateIn, b.MsgRateIn) || moved(a.BytesRateIn, b.BytesRateIn) ||
		moved(a.MsgRateOut, b.MsgRateOut) || moved(a.BytesRateOut, b.BytesRateOut)
}

// segmentStats reads a segment's statistics from the broker serving it.
func (h *Host) segmentStats(ctx context.Context, name string, out *api.TopicStats) error {
	return h.onOwner(ctx, name, "stats", nil, out, func() error {
		var err error
		*out, err = h.env.Segments.TopicStats(ctx, name)
		return err
	})
}

// sweepConsumers reports the stream consumers that stopped polling for their assignment as
// disconnected (their grace period starts).
func (h *Host) sweepConsumers(ctx context.Context) {
	h.mu.Lock()
	ts := make([]*scalableTopic, 0, len(h.mu.ctls))
	for _, t := range h.mu.ctls {
		ts = append(ts, t)
	}
	h.mu.Unlock()
	stale := max(3*h.cfg.TickInterval, 10*time.Second)
	for _, t := range ts {
		if !t.ctl.Leading() {
			continue
		}
		t.mu.Lock()
		var gone [][2]string
		var sessions []uint64
		for k, at := range t.polled {
			if time.Since(at) > stale {
				gone = append(gone, k)
				sessions = append(sessions, t.session[k])
				delete(t.polled, k)
			}
		}
		t.mu.Unlock()
		for i, k := range gone {
			_ = t.ctl.Disconnected(ctx, k[0], k[1], sessions[i])
		}
	}
}

// listener receives what a leading controller publishes: it counts the layout's changes
// and keeps the assignments for the consumers' polls.
type listener struct {
	h *Host
	t *scalableTopic
}

func (l *listener) Layout(next layout.Layout) {
	l.t.mu.Lock()
	prev := l.t.last
	l.t.last = &next
	l.t.mu.Unlock()
	if prev == nil {
		return
	}
	split := map[layout.SegmentID]bool{} // the parents of new single-parent segments
	for _, s := range next.Segments {
		switch {
		case prev.Has(s.ID):
		case len(s.Parents) >= 2:
			l.h.m.merges.Inc()
		case len(s.Parents) == 1 && !split[s.Parents[0]]:
			split[s.Parents[0]] = true
			l.h.m.splits.Inc()
		}
	}
	for _, s := range prev.Segments {
		if !next.Has(s.ID) {
			l.h.m.prunes.Inc()
		}
	}
}

func (l *listener) Assignment(a scalable.Assignment) {
	l.h.m.assignments.Inc()
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	k := [2]string{a.Sub, a.Consumer}
	if cur, ok := l.t.assign[k]; ok && cur.Version >= a.Version {
		return
	}
	l.t.assign[k] = a
	close(l.t.changed)
	l.t.changed = make(chan struct{})
}

// segmentEffects performs a controller's effects on segment topics: here if this broker
// serves the segment, else on its owner through the owner's admin API.
type segmentEffects struct{ h *Host }

func (e *segmentEffects) Create(ctx context.Context, t layout.Topic, seg layout.Segment, subs []string) error {
	name := t.SegmentName(seg)
	return e.h.onOwner(ctx, name, "create", url.Values{"sub": subs}, nil, func() error {
		return e.h.SegmentCreate(ctx, name, subs)
	})
}

func (e *segmentEffects) Seal(ctx context.Context, t layout.Topic, seg layout.Segment) error {
	name := t.SegmentName(seg)
	return e.h.onOwner(ctx, name, "seal", nil, nil, func() error { return e.h.SegmentSeal(ctx, name) })
}

func (e *segmentEffects) Delete(ctx context.Context, t layout.Topic, seg layout.Segment) error {
	name := t.SegmentName(seg)
	return e.h.onOwner(ctx, name, "delete", nil, nil, func() error { return e.h.SegmentDelete(ctx, name) })
}

func (e *segmentEffects) Drained(ctx context.Context, t layout.Topic, _ uint64, sub string, seg layout.Segment) (bool, error) {
	name := t.SegmentName(seg)
	var drained bool
	err := e.h.onOwner(ctx, name, "drained", url.Values{"sub": {sub}}, &drained, func() error {
		var err error
		drained, err = e.h.SegmentDrained(ctx, name, sub)
		return err
	})
	return drained, err
}

func (e *segmentEffects) Fence(ctx context.Context, t layout.Topic, term uint64, sub string, segs []layout.Segment, version uint64) error {
	for _, seg := range segs {
		name := t.SegmentName(seg)
		q := url.Values{"sub": {sub}, "term": {strconv.FormatUint(term, 10)}, "version": {strconv.FormatUint(version, 10)}}
		if err := e.h.onOwner(ctx, name, "fence", q, nil, func() error {
			return e.h.SegmentFence(ctx, name, sub, term, version)
		}); err != nil {
			return err
		}
	}
	return nil
}

func (e *segmentEffects) Reset(ctx context.Context, t layout.Topic, term uint64, sub string, seg layout.Segment, to mledger.Position) error {
	name := t.SegmentName(seg)
	id := api.MessageID{LedgerID: to.LedgerID, EntryID: to.EntryID, Partition: -1, BatchIndex: -1}
	q := url.Values{"sub": {sub}, "term": {strconv.FormatUint(term, 10)},
		"ledger": {strconv.FormatInt(to.LedgerID, 10)}, "entry": {strconv.FormatInt(to.EntryID, 10)}}
	return e.h.onOwner(ctx, name, "reset", q, nil, func() error { return e.h.SegmentReset(ctx, name, sub, term, id) })
}

// onOwner runs local; if another broker serves the segment it POSTs op to that broker's
// admin API instead (decoding the answer into out, if set).
func (h *Host) onOwner(ctx context.Context, segment, op string, q url.Values, out any, local func() error) error {
	err := local()
	var no *api.NotOwnerError
	if !errors.As(err, &no) || no.Owner.AdminURL(false) == "" {
		return err
	}
	tp, r, id, err := layout.ParseSegmentName(segment)
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrInvalidName, err)
	}
	if err := h.env.Peers.Segment(ctx, no.Owner.AdminURL(false), tp, layout.Segment{ID: id, Range: r}, op, q, out); err != nil {
		if errors.Is(err, peer.ErrRefused) {
			h.refusedLog.Warn("a peer refused this broker's credentials (brokerClientAuthentication*)",
				"op", op, "segment", segment, "owner", no.Owner.ID, "err", err)
		}
		return fmt.Errorf("%w: %s of %s on %s: %v", api.ErrServiceNotReady, op, segment, no.Owner.ID, err)
	}
	return nil
}

// leaderCall calls topic name's controller leader bi about consumer's session of
// subscription sub (its assignment if assignment is set) through the peer client; a 404 is
// api.ErrSubscriptionNotFound, another refusal api.ErrServiceNotReady.
func (h *Host) leaderCall(ctx context.Context, bi api.BrokerInfo, method, name, sub, consumer string, assignment bool, q url.Values, out any) error {
	t, err := layout.ParseTopic(name)
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrInvalidName, err)
	}
	err = h.env.Peers.Consumer(ctx, bi.AdminURL(false), method, t, sub, consumer, assignment, q, out)
	var se *peer.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		return fmt.Errorf("%w: %s", api.ErrSubscriptionNotFound, se.Body)
	case errors.Is(err, peer.ErrRefused):
		h.refusedLog.Warn("a peer refused this broker's credentials (brokerClientAuthentication*)",
			"method", method, "topic", name, "consumer", consumer, "leader", bi.ID, "err", err)
	}
	return fmt.Errorf("%w: %s consumer %s of %s on %s: %v", api.ErrServiceNotReady, method, consumer, name, bi.ID, err)
}
