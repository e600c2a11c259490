package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/peer"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/internal/ratelog"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Scalable topics (package scalable): every broker runs a scalable.Controller for
// every scalable topic whose layout record exists (a watch on metadata.PrefixScalableTopics);
// the controllers campaign through the metadata store and one leads each topic. Segments are
// ordinary persistent topics (segment:// names) owned through bundles like any topic: the
// leader performs its effects on the segments here when this broker serves them and
// otherwise on their owner, over the owner's admin API (/admin/v2/scalable/.../segments/...,
// answered by the Segment* methods below). Requests that need the leader (split, merge,
// subscribe, stream consumers) answer *NotOwnerError naming the leading broker elsewhere.

// ScalableConfig configures the scalable-topic controllers (Config.Scalable).
type ScalableConfig struct {
	// TickInterval is the controllers' tick: drain polls, GC, auto-scale (default 1 s).
	TickInterval time.Duration
	// Retention is how long a drained sealed segment is kept (default 1 h).
	Retention time.Duration
	// ConsumerGrace is how long a stream consumer that stopped polling keeps its assignment
	// (default 60 s, as upstream).
	ConsumerGrace time.Duration
	// Policy is the auto-scale policy (scalable.DefaultPolicy, off, if zero).
	Policy scalable.Policy
	// SampleInterval is how often the leader samples its active segments' load for the
	// policy, when it is enabled (default 10 s).
	SampleInterval time.Duration
}

func (c ScalableConfig) withDefaults() ScalableConfig {
	if c.TickInterval <= 0 {
		c.TickInterval = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = time.Hour
	}
	if c.ConsumerGrace <= 0 {
		c.ConsumerGrace = time.Minute
	}
	if c.Policy == (scalable.Policy{}) {
		c.Policy = scalable.DefaultPolicy()
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = 10 * time.Second
	}
	return c
}

// scalableTopics is the broker's part of scalable topics. Goroutines: run (the watch of the
// layout records; it starts and closes the controllers), sample (with an auto-scale policy:
// the leader's load samples) and the controllers' own; close stops them all.
type scalableTopics struct {
	s    *Service
	cfg  ScalableConfig
	peer *peer.Client // calls to the segments' owners and the controllers' leaders
	// refusedLog reports peers refusing this broker's credentials, rate-limited.
	refusedLog *slog.Logger
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	m          scalableMetrics
	marks      segmentMarks // scalable_seek.go

	mu struct {
		sync.Mutex
		ctls map[layout.Topic]*scalableTopic
	}
}

// scalableTopic is one topic's controller on this broker and what its leader published.
type scalableTopic struct {
	ctl *scalable.Controller

	mu      sync.Mutex
	last    *layout.Layout
	assign  map[[2]string]scalable.Assignment // (sub, consumer) → the newest assignment
	polled  map[[2]string]time.Time           // when each consumer last polled (liveness)
	session map[[2]string]uint64
	changed chan struct{} // closed and replaced at every new assignment
	loads   map[layout.SegmentID]scalable.LoadSample
}

type scalableMetrics struct {
	splits, merges, prunes, assignments prometheus.Counter
}

func startScalable(s *Service) *scalableTopics {
	ctx, cancel := context.WithCancel(context.Background())
	st := &scalableTopics{s: s, cfg: s.cfg.Scalable.withDefaults(), cancel: cancel, peer: s.peer,
		refusedLog: slog.New(ratelog.New(s.log.Handler(), ratelog.Options{}))}
	st.mu.ctls = map[layout.Topic]*scalableTopic{}
	c := func(name, help string) prometheus.Counter {
		ctr := prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_scalable_" + name, Help: help})
		s.reg.MustRegister(ctr)
		return ctr
	}
	st.m = scalableMetrics{
		splits:      c("splits_total", "Segment splits committed by the scalable-topic controllers this broker led."),
		merges:      c("merges_total", "Segment merges committed by the scalable-topic controllers this broker led."),
		prunes:      c("prunes_total", "Sealed segments pruned from layouts by the controllers this broker led."),
		assignments: c("assignment_changes_total", "Stream-consumer assignments published by the controllers this broker led."),
	}
	if err := st.cfg.Policy.Validate(); st.cfg.Policy.Enabled && err != nil {
		s.log.Warn("scalable topics: auto-scale policy off", "err", err)
		st.cfg.Policy.Enabled = false
	}
	st.wg.Go(func() { st.run(ctx) })
	if st.cfg.Policy.Enabled {
		st.wg.Go(func() { st.sample(ctx) })
	}
	return st
}

// close stops every controller (resigning leaderships) and the watch.
func (st *scalableTopics) close() {
	if st == nil {
		return
	}
	st.cancel()
	st.wg.Wait()
	st.mu.Lock()
	ctls := st.mu.ctls
	st.mu.ctls = map[layout.Topic]*scalableTopic{}
	st.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range ctls {
		wg.Go(func() { t.ctl.Close() }) //nolint:errcheck // always nil
	}
	wg.Wait()
}

// run keeps a controller running for every layout record: list, then watch from there
// (metadata.Follower: a failed listing is retried every second, a watch that ends is
// followed by a new listing), and sweeps the stream consumers every tick.
func (st *scalableTopics) run(ctx context.Context) {
	sweep := time.NewTicker(st.cfg.TickInterval)
	defer sweep.Stop()
	ups := metadata.Follower{Store: st.s.store, Prefix: metadata.PrefixScalableTopics, Log: st.s.log}.Chan(ctx)
	for {
		select {
		case u := <-ups:
			switch u.Kind {
			case metadata.Listed:
				st.listed(u.KVs)
			case metadata.Changed:
				for _, ev := range u.Events {
					t, ok := layoutKeyTopic(ev.KV.Key)
					switch {
					case !ok:
					case ev.Type == metadata.EventPut:
						st.ensure(t)
					default:
						go st.stop(t)
					}
				}
			}
		case <-sweep.C:
			st.sweepConsumers(ctx)
		case <-ctx.Done():
			for range ups { // the follower ends with ctx
			}
			return
		}
	}
}

// listed runs a controller for every layout record of a listing and stops the others.
func (st *scalableTopics) listed(kvs []metadata.KV) {
	seen := map[layout.Topic]bool{}
	for _, kv := range kvs {
		if t, ok := layoutKeyTopic(kv.Key); ok {
			seen[t] = true
			st.ensure(t)
		}
	}
	st.mu.Lock()
	for t := range st.mu.ctls {
		if !seen[t] {
			go st.stop(t)
		}
	}
	st.mu.Unlock()
}

// layoutKeyTopic returns the topic of a layout record's key.
func layoutKeyTopic(key string) (layout.Topic, bool) {
	rest, ok := strings.CutPrefix(key, metadata.PrefixScalableTopics)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 || parts[3] != "layout" {
		return layout.Topic{}, false
	}
	return layout.Topic{Tenant: parts[0], Namespace: parts[1], Name: parts[2]}, true
}

func (st *scalableTopics) ensure(t layout.Topic) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.mu.ctls[t] != nil {
		return
	}
	sct := &scalableTopic{assign: map[[2]string]scalable.Assignment{}, polled: map[[2]string]time.Time{},
		session: map[[2]string]uint64{}, changed: make(chan struct{})}
	cfg := scalable.DriverConfig{BrokerID: st.s.info.ID, SessionTTL: st.s.cfg.SessionTTL, Core: scalable.Config{
		Topic: t, RetentionMs: st.cfg.Retention.Milliseconds(), TickMs: st.cfg.TickInterval.Milliseconds(),
		GraceMs: st.cfg.ConsumerGrace.Milliseconds(), Policy: st.cfg.Policy,
	}}
	sct.ctl = scalable.Start(st.s.store, &segmentEffects{st: st}, &scalableListener{st: st, t: sct}, cfg)
	st.mu.ctls[t] = sct
}

func (st *scalableTopics) stop(t layout.Topic) {
	st.mu.Lock()
	sct := st.mu.ctls[t]
	delete(st.mu.ctls, t)
	st.mu.Unlock()
	if sct != nil {
		sct.ctl.Close() //nolint:errcheck // always nil
	}
}

func (st *scalableTopics) topic(t layout.Topic) *scalableTopic {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.mu.ctls[t]
}

// leading returns the topics this broker leads.
func (st *scalableTopics) leading() []*scalableTopic {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []*scalableTopic
	for _, t := range st.mu.ctls {
		if t.ctl.Leading() {
			out = append(out, t)
		}
	}
	return out
}

// sample feeds the load of the led topics' active segments to their auto-scale policy every
// SampleInterval. A sample's ChangedMs moves only when a rate changed by more than a
// quarter (upstream's reporting band), so a segment counts as cold once it stayed cold.
func (st *scalableTopics) sample(ctx context.Context) {
	tick := time.NewTicker(st.cfg.SampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		for _, t := range st.leading() {
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
				var ts TopicStats
				name := tp.SegmentName(seg)
				if err := st.segmentStats(ctx, name, &ts); err != nil {
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
func (st *scalableTopics) segmentStats(ctx context.Context, name string, out *TopicStats) error {
	return st.onOwner(ctx, name, "stats", nil, out, func() error {
		var err error
		*out, err = st.s.TopicStats(ctx, name)
		return err
	})
}

// sweepConsumers reports the stream consumers that stopped polling for their assignment as
// disconnected (their grace period starts).
func (st *scalableTopics) sweepConsumers(ctx context.Context) {
	st.mu.Lock()
	ts := make([]*scalableTopic, 0, len(st.mu.ctls))
	for _, t := range st.mu.ctls {
		ts = append(ts, t)
	}
	st.mu.Unlock()
	stale := 3 * st.cfg.TickInterval
	if stale < 10*time.Second {
		stale = 10 * time.Second
	}
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

// scalableListener receives what a leading controller publishes: it counts the layout's
// changes and keeps the assignments for the consumers' polls.
type scalableListener struct {
	st *scalableTopics
	t  *scalableTopic
}

func (l *scalableListener) Layout(next layout.Layout) {
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
			l.st.m.merges.Inc()
		case len(s.Parents) == 1 && !split[s.Parents[0]]:
			split[s.Parents[0]] = true
			l.st.m.splits.Inc()
		}
	}
	for _, s := range prev.Segments {
		if !next.Has(s.ID) {
			l.st.m.prunes.Inc()
		}
	}
}

func (l *scalableListener) Assignment(a scalable.Assignment) {
	l.st.m.assignments.Inc()
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
type segmentEffects struct{ st *scalableTopics }

func (e *segmentEffects) Create(ctx context.Context, t layout.Topic, seg layout.Segment, subs []string) error {
	name := t.SegmentName(seg)
	return e.st.onOwner(ctx, name, "create", url.Values{"sub": subs}, nil, func() error {
		return e.st.s.SegmentCreate(ctx, name, subs)
	})
}

func (e *segmentEffects) Seal(ctx context.Context, t layout.Topic, seg layout.Segment) error {
	name := t.SegmentName(seg)
	return e.st.onOwner(ctx, name, "seal", nil, nil, func() error { return e.st.s.SegmentSeal(ctx, name) })
}

func (e *segmentEffects) Delete(ctx context.Context, t layout.Topic, seg layout.Segment) error {
	name := t.SegmentName(seg)
	return e.st.onOwner(ctx, name, "delete", nil, nil, func() error { return e.st.s.SegmentDelete(ctx, name) })
}

func (e *segmentEffects) Drained(ctx context.Context, t layout.Topic, _ uint64, sub string, seg layout.Segment) (bool, error) {
	name := t.SegmentName(seg)
	var drained bool
	err := e.st.onOwner(ctx, name, "drained", url.Values{"sub": {sub}}, &drained, func() error {
		var err error
		drained, err = e.st.s.SegmentDrained(ctx, name, sub)
		return err
	})
	return drained, err
}

func (e *segmentEffects) Fence(ctx context.Context, t layout.Topic, term uint64, sub string, segs []layout.Segment, version uint64) error {
	for _, seg := range segs {
		name := t.SegmentName(seg)
		q := url.Values{"sub": {sub}, "term": {strconv.FormatUint(term, 10)}, "version": {strconv.FormatUint(version, 10)}}
		if err := e.st.onOwner(ctx, name, "fence", q, nil, func() error {
			return e.st.s.SegmentFence(ctx, name, sub, term, version)
		}); err != nil {
			return err
		}
	}
	return nil
}

func (e *segmentEffects) Reset(ctx context.Context, t layout.Topic, term uint64, sub string, seg layout.Segment, to mledger.Position) error {
	name := t.SegmentName(seg)
	id := MessageID{LedgerID: to.LedgerID, EntryID: to.EntryID, Partition: -1, BatchIndex: -1}
	q := url.Values{"sub": {sub}, "term": {strconv.FormatUint(term, 10)},
		"ledger": {strconv.FormatInt(to.LedgerID, 10)}, "entry": {strconv.FormatInt(to.EntryID, 10)}}
	return e.st.onOwner(ctx, name, "reset", q, nil, func() error { return e.st.s.SegmentReset(ctx, name, sub, term, id) })
}

// onOwner runs local; if another broker serves the segment it POSTs op to that broker's
// admin API instead (decoding the answer into out, if set).
func (st *scalableTopics) onOwner(ctx context.Context, segment, op string, q url.Values, out any, local func() error) error {
	err := local()
	var no *NotOwnerError
	if !errors.As(err, &no) || no.Owner.AdminURL(false) == "" {
		return err
	}
	tp, r, id, err := layout.ParseSegmentName(segment)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	if err := st.peer.Segment(ctx, no.Owner.AdminURL(false), tp, layout.Segment{ID: id, Range: r}, op, q, out); err != nil {
		if errors.Is(err, peer.ErrRefused) {
			st.refusedLog.Warn("a peer refused this broker's credentials (brokerClientAuthentication*)",
				"op", op, "segment", segment, "owner", no.Owner.ID, "err", err)
		}
		return fmt.Errorf("%w: %s of %s on %s: %v", ErrServiceNotReady, op, segment, no.Owner.ID, err)
	}
	return nil
}

// The segment operations: on this broker only (*NotOwnerError if another serves the
// segment). The controller's leader calls them, here or through the admin API.

// SegmentCreate creates segment's topic if missing and a durable subscription at the earliest
// for each of subs it lacks.
func (s *Service) SegmentCreate(ctx context.Context, segment string, subs []string) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	if err := s.createTopic(ctx, segment); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return err
	}
	for _, sub := range subs {
		if err := s.CreateSubscription(ctx, segment, sub, Earliest); err != nil && !errors.Is(err, ErrAlreadyExists) {
			return err
		}
	}
	return nil
}

// SegmentSeal terminates segment's managed ledger (idempotent): its producers get
// TopicTerminated.
func (s *Service) SegmentSeal(ctx context.Context, segment string) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	_, err := s.Terminate(ctx, segment)
	return err
}

// SegmentDelete deletes segment's topic and data (a missing one is not an error).
func (s *Service) SegmentDelete(ctx context.Context, segment string) error {
	if _, err := parseSegment(segment); err != nil {
		return err
	}
	err := s.deleteTopic(ctx, segment, true)
	if errors.Is(err, ErrTopicNotFound) {
		err = nil
	}
	if err == nil {
		s.scal.marks.forget(segment)
	}
	return err
}

// SegmentDrained reports whether segment is terminated and sub has acknowledged all of it.
func (s *Service) SegmentDrained(ctx context.Context, segment, sub string) (bool, error) {
	if _, err := parseSegment(segment); err != nil {
		return false, err
	}
	st, err := s.TopicStats(ctx, segment)
	if err != nil {
		return false, err
	}
	ss, ok := st.Subscriptions[sub]
	return st.Terminated && ok && ss.MsgBacklog == 0, nil
}

func parseSegment(segment string) (topicname.Name, error) {
	n, err := topicname.Parse(segment)
	if err == nil && !n.IsSegment() {
		err = fmt.Errorf("%w: %s is not a segment:// name", ErrInvalidName, segment)
	}
	return n, err
}

// The scalable-topic API of the admin layer (admin/scalable.go).

func (s *Service) scalableTopic(name string) (layout.Topic, error) {
	t, err := layout.ParseTopic(name)
	if err != nil {
		return t, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	return t, topicname.CheckNamespace(t.Tenant, t.Namespace)
}

// CreateScalableTopic creates scalable topic name (topic://tenant/ns/name) with n initial
// segments.
func (s *Service) CreateScalableTopic(ctx context.Context, name string, n int) error {
	t, err := s.scalableTopic(name)
	if err != nil {
		return err
	}
	if n < 1 || n > layout.MaxHash {
		return fmt.Errorf("%w: %d initial segments", ErrInvalidArgument, n)
	}
	if err := s.res.CheckNamespace(ctx, t.Tenant, t.Namespace); err != nil {
		return err
	}
	if _, err := s.store.Get(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name)); err == nil {
		return fmt.Errorf("%w: scalable topic %s", ErrAlreadyExists, t)
	}
	err = scalable.CreateTopic(ctx, s.store, &segmentEffects{st: s.scal}, t, n, nil, time.Now())
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: scalable topic %s", ErrAlreadyExists, t)
	}
	return err
}

// DeleteScalableTopic deletes scalable topic name: its layout record (which stops its
// controllers), then every segment's topic.
func (s *Service) DeleteScalableTopic(ctx context.Context, name string) error {
	t, l, ver, err := s.scalableLayout(ctx, name)
	if err != nil {
		return err
	}
	if err := s.store.Delete(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name), ver); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: scalable topic %s changed meanwhile: retry", ErrServiceNotReady, t)
		}
		return err
	}
	fx := &segmentEffects{st: s.scal}
	var errs []error
	for _, seg := range append(slices.Clone(l.Segments), l.Deleting...) {
		errs = append(errs, fx.Delete(ctx, t, seg))
	}
	if l.Pending != nil {
		for _, seg := range l.Pending.Children {
			errs = append(errs, fx.Delete(ctx, t, seg))
		}
	}
	return errors.Join(errs...)
}

// ScalableTopics lists namespace ns's scalable topics (topic:// names, in order).
func (s *Service) ScalableTopics(ctx context.Context, ns string) ([]string, error) {
	tenant, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := s.res.CheckNamespace(ctx, tenant, n); err != nil {
		return nil, err
	}
	kvs, _, err := s.store.List(ctx, metadata.PrefixScalableTopics+tenant+"/"+n+"/")
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, kv := range kvs {
		if t, ok := layoutKeyTopic(kv.Key); ok {
			out = append(out, t.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

// ScalableLayout returns scalable topic name's stored layout.
func (s *Service) ScalableLayout(ctx context.Context, name string) (layout.Layout, error) {
	_, l, _, err := s.scalableLayout(ctx, name)
	return l, err
}

func (s *Service) scalableLayout(ctx context.Context, name string) (layout.Topic, layout.Layout, metadata.Version, error) {
	t, err := s.scalableTopic(name)
	if err != nil {
		return t, layout.Layout{}, 0, err
	}
	kv, err := s.store.Get(ctx, metadata.ScalableLayoutKey(t.Tenant, t.Namespace, t.Name))
	if errors.Is(err, metadata.ErrNotFound) {
		return t, layout.Layout{}, 0, fmt.Errorf("%w: scalable topic %s", ErrTopicNotFound, t)
	}
	if err != nil {
		return t, layout.Layout{}, 0, err
	}
	l, err := layout.Unmarshal(kv.Value)
	return t, l, kv.Version, err
}

// leader returns the controller of topic name if this broker leads it, else a
// *NotOwnerError naming the leader (ErrServiceNotReady while none leads).
func (s *Service) leader(ctx context.Context, name string) (*scalableTopic, error) {
	t, _, _, err := s.scalableLayout(ctx, name)
	if err != nil {
		return nil, err
	}
	sct := s.scal.topic(t)
	if sct != nil && sct.ctl.Leading() {
		return sct, nil
	}
	kv, err := s.store.Get(ctx, metadata.ScalableControllerKey(t.Tenant, t.Namespace, t.Name))
	if err == nil && string(kv.Value) != s.info.ID {
		if bi, err := s.own.LiveBroker(ctx, string(kv.Value)); err == nil {
			return nil, &NotOwnerError{Topic: t.String(), Owner: bi}
		}
	}
	return nil, fmt.Errorf("%w: no controller leads %s yet", ErrServiceNotReady, t)
}

// controllerErr maps the controller's errors to the service's sentinels.
func controllerErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, scalable.ErrNotLeading), errors.Is(err, scalable.ErrStopped):
		return fmt.Errorf("%w: %v", ErrServiceNotReady, err)
	case errors.Is(err, scalable.ErrUnknownSubscription), errors.Is(err, layout.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrTopicNotFound, err)
	case errors.Is(err, layout.ErrNotActive), errors.Is(err, layout.ErrNotAdjacent), errors.Is(err, layout.ErrBadSplit):
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return err
}

// SplitScalableSegment splits active segment seg of topic name at hash at (0: the
// midpoint) and returns once the new layout is committed.
func (s *Service) SplitScalableSegment(ctx context.Context, name string, seg uint64, at uint16) error {
	sct, err := s.leader(ctx, name)
	if err != nil {
		return err
	}
	return controllerErr(sct.ctl.Split(ctx, layout.SegmentID(seg), at))
}

// MergeScalableSegments merges adjacent active segments a and b of topic name.
func (s *Service) MergeScalableSegments(ctx context.Context, name string, a, b uint64) error {
	sct, err := s.leader(ctx, name)
	if err != nil {
		return err
	}
	return controllerErr(sct.ctl.Merge(ctx, layout.SegmentID(a), layout.SegmentID(b)))
}

// CreateScalableSubscription adds subscription sub to topic name (a cursor at the earliest
// of every segment); an existing one is ErrAlreadyExists.
func (s *Service) CreateScalableSubscription(ctx context.Context, name, sub string) error {
	if sub == "" {
		return fmt.Errorf("%w: empty subscription name", ErrInvalidArgument)
	}
	if _, l, _, err := s.scalableLayout(ctx, name); err != nil {
		return err
	} else if slices.Contains(l.Subscriptions, sub) {
		return fmt.Errorf("%w: subscription %s", ErrAlreadyExists, sub)
	}
	sct, err := s.leader(ctx, name)
	if err != nil {
		return err
	}
	return controllerErr(sct.ctl.Subscribe(ctx, sub))
}

// RegisterStreamConsumer registers stream consumer consumer of sub on topic name, for
// client session session (a new session of a registered consumer is its reconnect).
func (s *Service) RegisterStreamConsumer(ctx context.Context, name, sub, consumer string, session uint64) error {
	sct, err := s.leader(ctx, name)
	if err != nil {
		return err
	}
	k := [2]string{sub, consumer}
	sct.mu.Lock()
	sct.polled[k], sct.session[k] = time.Now(), session
	sct.mu.Unlock()
	return controllerErr(sct.ctl.Register(ctx, sub, consumer, session))
}

// UnregisterStreamConsumer removes stream consumer consumer of sub on topic name.
func (s *Service) UnregisterStreamConsumer(ctx context.Context, name, sub, consumer string) error {
	sct, err := s.leader(ctx, name)
	if err != nil {
		return err
	}
	k := [2]string{sub, consumer}
	sct.mu.Lock()
	delete(sct.polled, k)
	delete(sct.assign, k)
	sct.mu.Unlock()
	return controllerErr(sct.ctl.Unregister(ctx, sub, consumer))
}

// StreamAssignment returns the newest assignment of stream consumer consumer of sub, waiting
// (until ctx ends) for one newer than version after; on timeout it returns the current one.
// A consumer that stops asking is reported disconnected after a while.
func (s *Service) StreamAssignment(ctx context.Context, name, sub, consumer string, after uint64) (scalable.Assignment, error) {
	sct, err := s.leader(ctx, name)
	if err != nil {
		return scalable.Assignment{}, err
	}
	k := [2]string{sub, consumer}
	for {
		sct.mu.Lock()
		if _, ok := sct.polled[k]; !ok {
			sct.mu.Unlock()
			return scalable.Assignment{}, fmt.Errorf("%w: stream consumer %s of %s is not registered here", ErrSubscriptionNotFound, consumer, sub)
		}
		sct.polled[k] = time.Now()
		a, ok := sct.assign[k]
		ch := sct.changed
		sct.mu.Unlock()
		if ok && a.Version > after {
			return a, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if !ok {
				return scalable.Assignment{Sub: sub, Consumer: consumer}, nil
			}
			return a, nil
		case <-s.ctx.Done():
			return scalable.Assignment{}, ErrServiceNotReady
		}
		if !sct.ctl.Leading() {
			return scalable.Assignment{}, fmt.Errorf("%w: leadership of %s lost", ErrServiceNotReady, name)
		}
	}
}

// ScalableTopicStats returns the statistics of topic name's segments (from their owners)
// and their sums.
func (s *Service) ScalableTopicStats(ctx context.Context, name string) (ScalableStats, error) {
	t, l, _, err := s.scalableLayout(ctx, name)
	if err != nil {
		return ScalableStats{}, err
	}
	out := ScalableStats{Topic: t.String(), Epoch: l.Epoch, Backlog: map[string]int64{}, Segments: map[string]TopicStats{}}
	for _, sub := range l.Subscriptions {
		out.Backlog[sub] = 0
	}
	for _, seg := range l.Segments {
		if seg.State == layout.StateActive {
			out.Active++
		} else {
			out.Sealed++
		}
		segName := t.SegmentName(seg)
		var ts TopicStats
		if err := s.scal.segmentStats(ctx, segName, &ts); err != nil {
			return ScalableStats{}, fmt.Errorf("segment %s: %w", segName, err)
		}
		out.Segments[segName] = ts
		out.MsgIn += ts.MsgInCounter
		out.MsgOut += ts.MsgOutCounter
		out.RateIn += ts.MsgRateIn
		out.RateOut += ts.MsgRateOut
		for sub, ss := range ts.Subscriptions {
			if _, ok := out.Backlog[sub]; ok {
				out.Backlog[sub] += ss.MsgBacklog
			}
		}
	}
	return out, nil
}

// leaderCall calls topic name's controller leader bi about consumer's session of
// subscription sub (its assignment if assignment is set) through the peer client; a 404 is
// ErrSubscriptionNotFound, another refusal ErrServiceNotReady.
func (st *scalableTopics) leaderCall(ctx context.Context, bi BrokerInfo, method, name, sub, consumer string, assignment bool, q url.Values, out any) error {
	t, err := layout.ParseTopic(name)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	err = st.peer.Consumer(ctx, bi.AdminURL(false), method, t, sub, consumer, assignment, q, out)
	var se *peer.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.Status == http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrSubscriptionNotFound, se.Body)
	case errors.Is(err, peer.ErrRefused):
		st.refusedLog.Warn("a peer refused this broker's credentials (brokerClientAuthentication*)",
			"method", method, "topic", name, "consumer", consumer, "leader", bi.ID, "err", err)
	}
	return fmt.Errorf("%w: %s consumer %s of %s on %s: %v", ErrServiceNotReady, method, consumer, name, bi.ID, err)
}
