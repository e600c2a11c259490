package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Options configures New. The zero value is usable.
type Options struct {
	// Interval is the shortest time between two records of a kind. Default 10s.
	Interval time.Duration
	// MinLevel is the lowest level limited. Default (nil) slog.LevelWarn.
	MinLevel slog.Leveler
	// Now replaces the clock (tests). Default time.Now.
	Now func() time.Time
}

// DefaultInterval is Options.Interval's default.
const DefaultInterval = 10 * time.Second

// maxKinds bounds the kinds remembered; past it the memory starts afresh.
const maxKinds = 4096

// Handler is a rate-limiting slog.Handler. Create it with New. Safe for concurrent use.
type Handler struct {
	next   slog.Handler
	prefix string // the attributes and groups added by WithAttrs/WithGroup, as a key part
	st     *state
}

type state struct {
	interval time.Duration
	min      slog.Level
	now      func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind // guarded by mu
}

type kind struct {
	last       time.Time // when a record of the kind last passed
	suppressed int       // dropped since
}

// New returns a Handler passing records to next.
func New(next slog.Handler, opts Options) *Handler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MinLevel == nil {
		opts.MinLevel = slog.LevelWarn
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Handler{next: next, st: &state{interval: opts.Interval, min: opts.MinLevel.Level(), now: opts.Now,
		kinds: make(map[string]*kind)}}
}

// Enabled reports whether next handles the level.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle passes r to next unless a record of its kind passed less than an interval ago.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.st.min {
		return h.next.Handle(ctx, r)
	}
	n, ok := h.st.admit(h.prefix + "\x00" + r.Level.String() + "\x00" + r.Message)
	if !ok {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", n))
	}
	return h.next.Handle(ctx, r)
}

// admit reports whether a record of kind k passes now and, if so, how many were dropped
// since the last one did.
func (st *state) admit(k string) (int, bool) {
	now := st.now()
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.kinds[k]
	if e == nil {
		if len(st.kinds) >= maxKinds {
			clear(st.kinds)
		}
		st.kinds[k] = &kind{last: now}
		return 0, true
	}
	if now.Sub(e.last) < st.interval {
		e.suppressed++
		return 0, false
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return n, true
}

// WithAttrs returns a Handler sharing h's limits whose records carry attrs.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		b.WriteString(a.String())
		b.WriteByte(' ')
	}
	return &Handler{next: h.next.WithAttrs(attrs), prefix: b.String(), st: h.st}
}

// WithGroup returns a Handler sharing h's limits whose records' attributes go in group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), prefix: h.prefix + name + ".", st: h.st}
}
