package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/ledger/quorum"
	"github.com/magnetar-io/magnetar/metadata"
)

// Options configure a Client. Zero values take the documented defaults.
type Options struct {
	// Placement chooses bookies. Default: random writable bookies from the metadata store's
	// registrations (metadata.PrefixAvailable), excluding read-only ones.
	Placement Placement
	// AddTimeout bounds one add to one bookie before it counts as failed (and the bookie is
	// replaced). Default 10s.
	AddTimeout time.Duration
	// ReadTimeout bounds one read from one bookie. Default 10s.
	ReadTimeout time.Duration
	// LACFlushInterval is how long a writer stays idle before it sends an explicit LAC.
	// Default 100ms.
	LACFlushInterval time.Duration
	// MaxPendingAdds bounds the adds in flight per handle; AppendAsync waits beyond it.
	// Default 4096.
	MaxPendingAdds int
	// MaxEnsembleChanges bounds bookie replacements per writer. Default 64.
	MaxEnsembleChanges int
	// RecoveryReadWindow is how many entries recovery reads ahead. Default 16.
	RecoveryReadWindow int
	// RecoveryAttempts is how many times Open with recovery retries an incomplete recovery.
	// Default 3.
	RecoveryAttempts int
	// MetadataRetries bounds attempts of one metadata compare-and-swap. Default 5.
	MetadataRetries int
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.AddTimeout <= 0 {
		o.AddTimeout = 10 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 10 * time.Second
	}
	if o.LACFlushInterval <= 0 {
		o.LACFlushInterval = 100 * time.Millisecond
	}
	if o.MaxPendingAdds <= 0 {
		o.MaxPendingAdds = 4096
	}
	if o.MaxEnsembleChanges <= 0 {
		o.MaxEnsembleChanges = 64
	}
	if o.RecoveryReadWindow <= 0 {
		o.RecoveryReadWindow = 16
	}
	if o.RecoveryAttempts <= 0 {
		o.RecoveryAttempts = 3
	}
	if o.MetadataRetries <= 0 {
		o.MetadataRetries = 5
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Client creates, opens, recovers and deletes ledgers. It is safe for concurrent use. Close it
// after closing its handles.
type Client struct {
	store   metadata.Store
	pool    *client.Pool
	opts    Options
	bookies *bookieSet
	log     *slog.Logger

	ctx    context.Context // ends on Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the bookie watcher
}

// CreateOptions describe a new ledger.
type CreateOptions struct {
	// Ensemble, WriteQuorum and AckQuorum must satisfy E >= WQ >= AQ >= 1.
	Ensemble, WriteQuorum, AckQuorum int
	// Digest protects entries; the zero value is CRC32C.
	Digest Digest
	// Password derives the master key bookies check on every add.
	Password []byte
}

// OpenOptions describe how to open an existing ledger.
type OpenOptions struct {
	// Recovery fences the ledger and closes it at its last recoverable entry (if it is not
	// CLOSED yet). Any writer still adding fails with ErrFenced.
	Recovery bool
	// Password must match the ledger's.
	Password []byte
}

// NewClient returns a client on the metadata store and bookie connection pool. The pool is
// the caller's and is not closed by Client.Close.
func NewClient(store metadata.Store, pool *client.Pool, opts Options) *Client {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{store: store, pool: pool, opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel,
		bookies: &bookieSet{}}
	if c.opts.Placement == nil {
		c.opts.Placement = &randomPlacement{set: c.bookies, rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
		c.wg.Add(1)
		go c.watchBookies()
	}
	return c
}

// Close stops the client's background goroutine. Idempotent.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// Create makes a new ledger: a fresh id, an ensemble from the placement policy, and an OPEN
// metadata record written with "must not exist". The returned handle appends.
func (c *Client) Create(ctx context.Context, o CreateOptions) (*Handle, error) {
	if err := quorum.Valid(o.Ensemble, o.WriteQuorum, o.AckQuorum); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if o.Digest != DigestCRC32C && o.Digest != DigestNone {
		return nil, fmt.Errorf("%w: digest %d", ErrInvalidConfig, o.Digest)
	}
	if _, ok := c.opts.Placement.(*randomPlacement); ok {
		if err := c.bookies.refresh(ctx, c.store); err != nil {
			return nil, err
		}
	}
	ens, err := c.opts.Placement.NewEnsemble(o.Ensemble)
	if err != nil {
		return nil, fmt.Errorf("ledger: create: %w", err)
	}
	id, err := c.store.NextID(ctx, metadata.CounterLedgerID)
	if err != nil {
		return nil, fmt.Errorf("ledger: create: next id: %w", err)
	}
	m := &Metadata{
		LedgerID: id, State: StateOpen, EnsembleSize: o.Ensemble, WriteQuorum: o.WriteQuorum,
		AckQuorum: o.AckQuorum, Digest: o.Digest, Password: slices.Clone(o.Password),
		Ensembles: []Ensemble{{FirstEntry: 0, Bookies: ens}}, LastEntryID: -1, CTime: time.Now().UnixMilli(),
	}
	value, err := m.Marshal()
	if err != nil {
		return nil, err
	}
	v, err := c.store.Put(ctx, metadata.LedgerKey(id), value, metadata.NotExists)
	if err != nil {
		return nil, fmt.Errorf("ledger %d: create: %w", id, err)
	}
	c.log.Debug("ledger created", "ledger", id, "ensemble", ens)
	return c.newWriteHandle(m, v)
}

// Open opens an existing ledger for reading. With Recovery it first fences and closes the
// ledger (see Recovery); without, an OPEN ledger is read up to the LAC the bookies report.
func (c *Client) Open(ctx context.Context, id int64, o OpenOptions) (*Handle, error) {
	m, v, err := c.readMeta(ctx, id)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(m.Password, o.Password) {
		return nil, fmt.Errorf("%w: ledger %d", ErrUnauthorized, id)
	}
	if o.Recovery && m.State != StateClosed {
		if m, v, err = c.recover(ctx, m, v); err != nil {
			return nil, err
		}
	}
	h := c.newReadHandle(m, v)
	if m.State != StateClosed {
		if _, err := h.ReadLAC(ctx); err != nil && ctx.Err() != nil {
			return nil, err
		}
	}
	return h, nil
}

// Delete removes a ledger's metadata; bookies reclaim its entries in garbage collection.
// Deleting a missing ledger returns ErrNoSuchLedger.
func (c *Client) Delete(ctx context.Context, id int64) error {
	if _, err := c.store.Get(ctx, metadata.LedgerKey(id)); err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
		}
		return fmt.Errorf("ledger %d: delete: %w", id, err)
	}
	if err := c.store.Delete(ctx, metadata.LedgerKey(id), metadata.AnyVersion); err != nil {
		return fmt.Errorf("ledger %d: delete: %w", id, err)
	}
	return nil
}

// recover runs the Recovery core on the caller's goroutine until the ledger is CLOSED,
// retrying an incomplete recovery up to RecoveryAttempts times.
func (c *Client) recover(ctx context.Context, m *Metadata, v metadata.Version) (*Metadata, metadata.Version, error) {
	var err error
	for attempt := 0; attempt < c.opts.RecoveryAttempts; attempt++ {
		if attempt > 0 {
			if !backoff.Sleep(ctx, retryBackoff.Delay(attempt+2)) {
				return nil, 0, ctx.Err()
			}
			if m, v, err = c.readMeta(ctx, m.LedgerID); err != nil {
				return nil, 0, err
			}
		}
		var res *RecoveryResult
		res, err = c.recoverOnce(ctx, m, v)
		if err != nil {
			return nil, 0, err
		}
		if res.Err == nil {
			c.log.Info("ledger recovered", "ledger", m.LedgerID, "lastEntry", res.Meta.LastEntryID)
			return res.Meta, res.Version, nil
		}
		err = res.Err
		if !errors.Is(err, ErrRecoveryIncomplete) {
			break
		}
	}
	return nil, 0, err
}

func (c *Client) recoverOnce(ctx context.Context, m *Metadata, v metadata.Version) (*RecoveryResult, error) {
	if _, ok := c.opts.Placement.(*randomPlacement); ok {
		// Replacements for bookies that fail a re-add come from the current registrations.
		if err := c.bookies.refresh(ctx, c.store); err != nil {
			return nil, err
		}
	}
	r, err := NewRecovery(RecoveryConfig{Meta: m, Version: v, ReadWindow: c.opts.RecoveryReadWindow,
		Placement: c.opts.Placement, MaxEnsembleChanges: c.opts.MaxEnsembleChanges})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	in := inbox.New[event]()
	t := newTransport(ctx, c, m, in)
	defer func() {
		cancel()
		t.wg.Wait()
	}()
	tick := time.NewTicker(min(c.opts.ReadTimeout, c.opts.AddTimeout) / 4)
	defer tick.Stop()
	r.Start()
	var drained, evs []event
	for {
		rd := r.Ready()
		t.perform(&rd)
		if rd.Recovered != nil {
			return rd.Recovered, nil
		}
		evs = evs[:0]
		select {
		case <-in.Signal():
			drained = in.Drain(drained)
			for _, ev := range drained {
				evs = t.handle(ev, evs)
			}
		case now := <-tick.C:
			evs = t.expire(now, evs)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		for _, ev := range evs {
			if ev.other != nil {
				r.Step(ev.other)
			} else {
				r.Step(ev.add)
			}
		}
	}
}

// bookieSet is the client's view of registered bookies, kept by watchBookies. A leaf
// structure: mu guards the maps.
type bookieSet struct {
	mu struct {
		sync.Mutex
		writable map[string]bool
		readOnly map[string]bool
	}
}

// writable returns the writable, not read-only bookies, sorted.
func (s *bookieSet) writable() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.mu.writable {
		if !s.mu.readOnly[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (s *bookieSet) set(writable, readOnly map[string]bool) {
	s.mu.Lock()
	s.mu.writable, s.mu.readOnly = writable, readOnly
	s.mu.Unlock()
}

// refresh lists the registrations.
func (s *bookieSet) refresh(ctx context.Context, store metadata.Store) error {
	kvs, _, err := store.List(ctx, prefixBookies)
	if err != nil {
		return fmt.Errorf("ledger: list bookies: %w", err)
	}
	s.listed(kvs)
	return nil
}

// listed replaces the set with the registrations of a listing.
func (s *bookieSet) listed(kvs []metadata.KV) {
	w, ro := map[string]bool{}, map[string]bool{}
	for _, kv := range kvs {
		switch {
		case strings.HasPrefix(kv.Key, metadata.PrefixAvailable):
			w[strings.TrimPrefix(kv.Key, metadata.PrefixAvailable)] = true
		case strings.HasPrefix(kv.Key, metadata.PrefixReadOnly):
			ro[strings.TrimPrefix(kv.Key, metadata.PrefixReadOnly)] = true
		}
	}
	s.set(w, ro)
}

func (s *bookieSet) apply(evs []metadata.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		var m map[string]bool
		var id string
		switch k := ev.KV.Key; {
		case strings.HasPrefix(k, metadata.PrefixAvailable):
			m, id = s.mu.writable, strings.TrimPrefix(k, metadata.PrefixAvailable)
		case strings.HasPrefix(k, metadata.PrefixReadOnly):
			m, id = s.mu.readOnly, strings.TrimPrefix(k, metadata.PrefixReadOnly)
		default:
			continue
		}
		if m == nil {
			continue
		}
		if ev.Type == metadata.EventPut {
			m[id] = true
		} else {
			delete(m, id)
		}
	}
}

// prefixBookies covers both registration prefixes (and cookies, which are ignored).
const prefixBookies = "/bookies/"

// watchBookies keeps c.bookies current (metadata.Follower: list, then watch from the
// listed revision; list again after a watch ends, backing off after failures). It runs
// until the client is closed.
func (c *Client) watchBookies() {
	defer c.wg.Done()
	metadata.Follower{Store: c.store, Prefix: prefixBookies, Retry: retryBackoff, PauseAfterWatch: true,
		Log: c.log}.Run(c.ctx, func(u metadata.Update) {
		switch u.Kind {
		case metadata.Listed:
			c.bookies.listed(u.KVs)
		case metadata.Changed:
			c.bookies.apply(u.Events)
		}
	})
}

// randomPlacement picks writable bookies uniformly at random.
type randomPlacement struct {
	set  *bookieSet
	mu   sync.Mutex // guards rand
	rand *rand.Rand
}

func (p *randomPlacement) NewEnsemble(size int) ([]string, error) {
	all := p.set.writable()
	if len(all) < size {
		return nil, fmt.Errorf("%w: need %d, %d writable", ErrNotEnoughBookies, size, len(all))
	}
	p.mu.Lock()
	p.rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	p.mu.Unlock()
	return all[:size], nil
}

func (p *randomPlacement) Replace(exclude []string) (string, error) {
	var cands []string
	for _, id := range p.set.writable() {
		if !slices.Contains(exclude, id) {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%w: no writable bookie outside %v", ErrNotEnoughBookies, exclude)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return cands[p.rand.IntN(len(cands))], nil
}
