package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Bundle ownership, as Pulsar's OwnershipCache: the broker owning a bundle holds
// metadata.BundleOwnerKey, an ephemeral key bound to its metadata session whose value is an
// OwnerRecord, and serves the bundle's topics only while it holds it under its current
// session. A broker restarting with the same id takes over the records of its previous
// incarnation at once; another broker's record is respected until its session expires, or
// until it hands the bundle over (TransferTo names the destination, which takes the bundle
// as soon as the record is deleted).

// BrokerSelector chooses the broker that gets an unowned bundle. bundle is
// "tenant/ns/0x00000000_0x40000000"; the answer is an api.BrokerInfo.ID of a live broker. The
// load manager implements it (the broker's default); without one the live broker
// owning the fewest bundles is chosen, ties broken by id.
type BrokerSelector interface {
	SelectBroker(ctx context.Context, bundle string) (brokerID string, err error)
}

// OwnerRecord is the value of a bundle's ownership record.
type OwnerRecord struct {
	api.BrokerInfo
	// TransferTo is the broker the owner is handing the bundle over to (nil: none).
	TransferTo *api.BrokerInfo `json:"transferTo,omitempty"`
}

type bundleState uint8

const (
	bundleAcquiring bundleState = iota + 1
	bundleOwned
	bundleReleasing
)

// OwnedBundle is a bundle this broker acquires, owns or releases. ready closes when the
// acquisition ends (err says how).
type OwnedBundle struct {
	b       Bundle
	state   bundleState
	ready   chan struct{}
	err     error
	sess    metadata.Session // the session the record is bound to
	version metadata.Version // the record's version
}

// Bundle returns the bundle ob stands for.
func (ob *OwnedBundle) Bundle() Bundle { return ob.b }

// Manager is the broker's bundle table and its watched caches of the store (the ownership
// records and the live brokers). Safe for concurrent use.
type Manager struct {
	ctx   context.Context // ends when the broker closes
	cfg   Config
	b     Broker
	store metadata.Store
	log   *slog.Logger
	// owners and brokers mirror the ownership records and the live brokers (the namespace
	// and partitioned-topic records have theirs in package resources).
	owners, brokers *resources.Cache
	m               *ownershipMetrics
	closing         atomic.Bool // handing over: acquire nothing more
	sel             *defaultSelector

	mu struct {
		sync.Mutex                         // guards bundles; the broker's locks and resources.Cache's may be taken under it
		bundles    map[string]*OwnedBundle // by Bundle.String()
	}
}

type ownershipMetrics struct {
	events    *prometheus.CounterVec // by event: acquired, released, lost
	answers   *prometheus.CounterVec // lookup answers by result
	transfers *prometheus.CounterVec // by direction: out, in
	transferT prometheus.Histogram
	owned     prometheus.Gauge
	retries   prometheus.Counter // take-overs that waited longer than AcquireWait
}

// New returns the bundle table of broker b; ctx ends when the broker closes. Its caches
// run from Start on.
func New(ctx context.Context, cfg Config, b Broker) *Manager {
	if cfg.DefaultBundles <= 0 {
		cfg.DefaultBundles = DefaultBundles
	}
	if cfg.AcquireWait <= 0 {
		cfg.AcquireWait = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Manager{ctx: ctx, cfg: cfg, b: b, store: cfg.Store, log: cfg.Logger,
		owners:  resources.NewCache(cfg.Store, metadata.PrefixBundleOwners, cfg.Logger),
		brokers: resources.NewCache(cfg.Store, metadata.PrefixBrokers, cfg.Logger),
		m: &ownershipMetrics{
			events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_bundle_ownership_changes_total",
				Help: "Bundle ownership changes of this broker, by event (acquired, released, lost)."}, []string{"event"}),
			answers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_lookup_answers_total",
				Help: "Lookups answered (binary and HTTP), by result (connect, redirect, failed)."}, []string{"result"}),
			transfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_bundle_transfers_total",
				Help: "Bundle transfers, by direction (out: handed over; in: taken over)."}, []string{"direction"}),
			transferT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "magnetar_broker_bundle_transfer_seconds",
				Help: "Time to hand a bundle over (its topics closed and the record deleted).", Buckets: prometheus.DefBuckets}),
			owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_broker_owned_bundles",
				Help: "Bundles this broker owns."}),
			retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_bundle_takeover_retries_total",
				Help: "Take-overs of a bundle handed over to this broker that waited longer than one acquisition for the owner to release it."}),
		}}
	o.mu.bundles = map[string]*OwnedBundle{}
	o.sel = &defaultSelector{o: o, recent: map[string]recentPick{}}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(o.m.events, o.m.answers, o.m.transfers, o.m.transferT, o.m.owned, o.m.retries)
	}
	return o
}

// Start runs the caches until ctx ends; wg counts them.
func (o *Manager) Start(ctx context.Context, wg *sync.WaitGroup) {
	for _, c := range []*resources.Cache{o.owners, o.brokers} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Run(ctx)
		}()
	}
}

// StartTransfers runs the transfer watcher until ctx ends, once the broker knows its id;
// wg counts it.
func (o *Manager) StartTransfers(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		o.takeTransfers(ctx)
	}()
}

func bundleKey(b Bundle) string {
	t, ns, _ := strings.Cut(b.Namespace, "/")
	return metadata.BundleOwnerKey(t, ns, b.Range())
}

// ownerOf returns the record of b's owner from the watched cache (the store if the cache
// is not synced yet), nil if none.
func (o *Manager) OwnerOf(ctx context.Context, b Bundle) (*OwnerRecord, metadata.KV, error) {
	kv, found, synced := o.owners.Get(bundleKey(b))
	if !synced {
		var err error
		cctx, cancel := context.WithTimeout(ctx, resources.StoreWait)
		kv, err = o.store.Get(cctx, bundleKey(b))
		cancel()
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, kv, nil
		}
		if err != nil {
			return nil, kv, resources.StoreUnreachable(bundleKey(b), err)
		}
	} else if !found {
		return nil, kv, nil
	}
	var r OwnerRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, kv, fmt.Errorf("ownership record of %s: %w", b, err)
	}
	return &r, kv, nil
}

// serving reports whether ob is owned under the broker's current session.
func (o *Manager) Serving(ob *OwnedBundle) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.bundles[ob.b.String()] == ob && ob.state == bundleOwned && ob.sess == o.b.Session()
}

// owned returns the bundle if this broker serves it, nil otherwise.
func (o *Manager) Owned(b Bundle) *OwnedBundle {
	o.mu.Lock()
	ob := o.mu.bundles[b.String()]
	o.mu.Unlock()
	if ob != nil && o.Serving(ob) {
		return ob
	}
	return nil
}

// ownedBundles lists the bundles this broker owns, in order.
func (o *Manager) OwnedBundles() []Bundle {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Bundle
	for _, ob := range o.mu.bundles {
		if ob.state == bundleOwned {
			out = append(out, ob.b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// acquire makes this broker the owner of b: at once if it owns it, after the running
// acquisition if one runs, else by writing the record. A bundle being handed over to this
// broker is taken as soon as its owner deleted the record. Another owner's bundle is
// *api.NotOwnerError.
func (o *Manager) Acquire(ctx context.Context, b Bundle) (*OwnedBundle, error) {
	key := b.String()
	for {
		o.mu.Lock()
		ob := o.mu.bundles[key]
		if ob == nil && o.closing.Load() {
			o.mu.Unlock()
			return nil, fmt.Errorf("%w: broker shutting down", api.ErrServiceNotReady)
		}
		if ob == nil {
			ob = &OwnedBundle{b: b, state: bundleAcquiring, ready: make(chan struct{})}
			o.mu.bundles[key] = ob
			o.mu.Unlock()
			go o.write(ob)
		} else {
			o.mu.Unlock()
		}
		select {
		case <-ob.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: acquire %s: %v", api.ErrServiceNotReady, b, ctx.Err())
		}
		if ob.err != nil {
			return nil, ob.err
		}
		if o.Serving(ob) {
			return ob, nil
		}
		o.mu.Lock()
		cur := o.mu.bundles[key]
		if cur == ob && ob.state == bundleOwned && ob.sess != o.b.Session() {
			delete(o.mu.bundles, key) // bound to a session that ended: acquire afresh
			o.m.owned.Dec()
			cur = nil
		}
		o.mu.Unlock()
		if cur == ob {
			// Being released: the caller retries later.
			return nil, fmt.Errorf("%w: bundle %s is being unloaded", api.ErrServiceNotReady, b)
		}
	}
}

// handOverWait bounds how long a broker keeps waiting to take a bundle handed over to it
// while its owner is still closing the bundle's topics.
const handOverWait = 2 * time.Minute

// write performs ob's acquisition and records its outcome.
func (o *Manager) write(ob *OwnedBundle) {
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.AcquireWait+resources.StoreWait)
	defer cancel()
	sess, ver, err := o.writeRecord(ctx, ob.b)
	o.mu.Lock()
	if err != nil {
		delete(o.mu.bundles, ob.b.String())
		ob.err = err
	} else {
		ob.state, ob.sess, ob.version = bundleOwned, sess, ver
	}
	close(ob.ready)
	o.mu.Unlock()
	if err == nil {
		o.m.events.WithLabelValues("acquired").Inc()
		o.m.owned.Inc()
		o.log.Info("bundle acquired", "bundle", ob.b.String())
	}
}

func (o *Manager) writeRecord(ctx context.Context, b Bundle) (metadata.Session, metadata.Version, error) {
	key := bundleKey(b)
	val, _ := json.Marshal(OwnerRecord{BrokerInfo: o.b.Info()})
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			return nil, 0, fmt.Errorf("%w: ownership of %s keeps changing", api.ErrServiceNotReady, b)
		}
		sess := o.b.Session()
		wctx, cancel := context.WithTimeout(ctx, resources.StoreWait)
		ver, err := sess.Put(wctx, key, val, metadata.NotExists)
		cancel()
		if err == nil {
			return sess, ver, nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) {
			return nil, 0, fmt.Errorf("%w: acquire %s: %v", api.ErrServiceNotReady, b, err)
		}
		rctx, cancel := context.WithTimeout(ctx, resources.StoreWait)
		kv, err := o.store.Get(rctx, key)
		cancel()
		if errors.Is(err, metadata.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, resources.StoreUnreachable(key, err)
		}
		var r OwnerRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil || r.ID == o.b.Info().ID {
			if kv.Lease == sess.ID() {
				return sess, kv.Version, nil
			}
			// Our previous incarnation's (or a corrupt) record: take it over.
			if err := o.store.Delete(ctx, key, kv.Version); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
				return nil, 0, resources.StoreUnreachable(key, err)
			}
			continue
		}
		if r.TransferTo == nil || r.TransferTo.ID != o.b.Info().ID {
			return nil, 0, &api.NotOwnerError{Topic: b.String(), Owner: r.BrokerInfo}
		}
		// Handed over to us: wait for the owner to delete its record.
		if err := o.waitGone(ctx, key, kv.Version); err != nil {
			return nil, 0, err
		}
	}
}

// waitGone waits until key no longer has version v in the watched cache.
func (o *Manager) waitGone(ctx context.Context, key string, v metadata.Version) error {
	for {
		ch := o.owners.Changed()
		if kv, found, _ := o.owners.Get(key); !found || kv.Version != v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for %s to be handed over: %v", api.ErrServiceNotReady, key, ctx.Err())
		}
	}
}

// takeTransfers acquires every bundle handed over to this broker as soon as its record
// names it, so that the bundle is owned here when the clients arrive.
func (o *Manager) takeTransfers(ctx context.Context) {
	started := map[string]metadata.Version{}
	for {
		ch := o.owners.Changed()
		for _, kv := range o.owners.List(metadata.PrefixBundleOwners) {
			var r OwnerRecord
			if json.Unmarshal(kv.Value, &r) != nil || r.TransferTo == nil || r.TransferTo.ID != o.b.Info().ID ||
				started[kv.Key] == kv.Version {
				continue
			}
			started[kv.Key] = kv.Version
			b, err := bundleFromKey(kv.Key)
			if err != nil {
				continue
			}
			go o.takeOver(ctx, b)
		}
		if len(started) > 1000 {
			clear(started)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// takeOver acquires bundle b, handed over to this broker. Its owner deletes the record
// once it has closed the bundle's topics, which on a loaded machine may take longer than
// one acquisition waits (Config.AcquireWait): the acquisition is tried again while it
// fails only for waiting (api.ErrServiceNotReady), for at most handOverWait. It stops at
// once when another broker owns the bundle (the owner gave up the hand-over, or the
// leader assigned it elsewhere).
func (o *Manager) takeOver(ctx context.Context, b Bundle) {
	deadline := time.Now().Add(handOverWait)
	for {
		actx, cancel := context.WithTimeout(ctx, o.cfg.AcquireWait)
		_, err := o.Acquire(actx, b)
		cancel()
		if err == nil {
			o.m.transfers.WithLabelValues("in").Inc()
			return
		}
		if !errors.Is(err, api.ErrServiceNotReady) || ctx.Err() != nil || time.Now().After(deadline) {
			o.log.Info("take over bundle", "bundle", b.String(), "err", err)
			return
		}
		o.m.retries.Inc()
		select { // an acquisition refused at once ("being unloaded") is not retried in a loop
		case <-time.After(o.cfg.AcquireWait / 10):
		case <-ctx.Done():
			return
		}
	}
}

// bundleFromKey parses a key built by metadata.BundleOwnerKey.
func bundleFromKey(key string) (Bundle, error) {
	parts := strings.Split(strings.TrimPrefix(key, metadata.PrefixBundleOwners), "/")
	if len(parts) != 3 {
		return Bundle{}, fmt.Errorf("%w: ownership key %q", api.ErrInvalidArgument, key)
	}
	return ParseBundle(parts[0]+"/"+parts[1], parts[2])
}

// release stops serving b and deletes its record; to (nil: none) is the broker the
// clients are sent to, which takes the bundle over as soon as the record is gone.
func (o *Manager) Release(ctx context.Context, b Bundle, to *api.BrokerInfo) error {
	o.mu.Lock()
	ob := o.mu.bundles[b.String()]
	if ob == nil || ob.state != bundleOwned {
		o.mu.Unlock()
		return nil
	}
	ob.state = bundleReleasing
	o.mu.Unlock()
	start := time.Now()
	key := bundleKey(b)
	var redirect *topic.Redirect
	if to != nil && to.ID != o.b.Info().ID {
		val, _ := json.Marshal(OwnerRecord{BrokerInfo: o.b.Info(), TransferTo: to})
		wctx, cancel := context.WithTimeout(ctx, resources.StoreWait)
		v, err := ob.sess.Put(wctx, key, val, ob.version)
		cancel()
		if err == nil {
			ob.version = v
			redirect = &topic.Redirect{ServiceURL: to.ServiceURL, ServiceURLTLS: to.ServiceURLTLS}
		} else {
			o.log.Warn("hand bundle over: unloading it instead", "bundle", b.String(), "to", to.ID, "err", err)
		}
	}
	o.b.CloseTopics(ctx, func(n topicname.Name) bool {
		return n.Tenant+"/"+n.Namespace == b.Namespace && b.Contains(TopicHash(n))
	}, redirect)
	err := o.store.Delete(ctx, key, ob.version)
	if errors.Is(err, metadata.ErrBadVersion) || errors.Is(err, metadata.ErrNotFound) {
		err = nil
	}
	o.mu.Lock()
	if o.mu.bundles[b.String()] == ob {
		delete(o.mu.bundles, b.String())
		o.m.owned.Dec()
	}
	o.mu.Unlock()
	o.m.events.WithLabelValues("released").Inc()
	if redirect != nil {
		o.m.transfers.WithLabelValues("out").Inc()
		o.m.transferT.Observe(time.Since(start).Seconds())
	}
	o.log.Info("bundle released", "bundle", b.String(), "to", redirectID(to), "took", time.Since(start).Round(time.Millisecond))
	return err
}

func redirectID(to *api.BrokerInfo) string {
	if to == nil {
		return ""
	}
	return to.ID
}

// DropAll forgets every bundle (the session that bound their records is gone). The broker
// closes their topics.
func (o *Manager) DropAll() {
	o.mu.Lock()
	n := 0
	for k, ob := range o.mu.bundles {
		if ob.state != bundleAcquiring {
			delete(o.mu.bundles, k)
			n++
		}
	}
	o.m.owned.Sub(float64(n))
	o.mu.Unlock()
	o.m.events.WithLabelValues("lost").Add(float64(n))
}

// LocalDeadline is how long after the store last renewed the session the broker keeps
// serving without a renewal: two thirds of the ttl, so that it stops before the lease
// expires and another broker can take its bundles.
func LocalDeadline(ttl time.Duration) time.Duration { return ttl * 2 / 3 }

// WaitSessionLost returns true when sess expired or was not renewed within the local
// deadline (then it is closed), false when the broker closes.
func (o *Manager) WaitSessionLost(sess metadata.Session) bool {
	r, renews := sess.(metadata.Renewer)
	for {
		var tick <-chan time.Time
		if renews {
			d := time.Until(r.Renewed().Add(LocalDeadline(o.cfg.SessionTTL)))
			if d <= 0 {
				o.log.Warn("metadata session not renewed within its local deadline: giving it up",
					"deadline", LocalDeadline(o.cfg.SessionTTL))
				go sess.Close() //nolint:errcheck // the lease expires on its own if etcd is away
				return true
			}
			t := time.NewTimer(d)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-o.ctx.Done():
			return false
		case <-sess.Done():
			return true
		case <-tick:
		}
	}
}

// defaultSelector is the BrokerSelector without a load manager: the live broker owning the
// fewest bundles (records read from the store), ties broken by id. Its recent choices whose
// records have not appeared yet count too, so that a burst of lookups (a partitioned
// topic's) spreads.
type defaultSelector struct {
	o      *Manager
	mu     sync.Mutex            // guards recent
	recent map[string]recentPick // by bundle key
}

type recentPick struct {
	broker string
	at     time.Time
}

// pickMemory is how long a choice counts while its record has not appeared.
const pickMemory = 10 * time.Second

func (d *defaultSelector) SelectBroker(ctx context.Context, bundle string) (string, error) {
	counts := map[string]int{}
	for _, kv := range d.o.brokers.List(metadata.PrefixBrokers) {
		counts[strings.TrimPrefix(kv.Key, metadata.PrefixBrokers)] = 0
	}
	if len(counts) == 0 {
		return d.o.b.Info().ID, nil // not synced yet: take it
	}
	// The records from the store when it answers (the cache may lag behind a burst of
	// assignments), else from the cache.
	lctx, cancel := context.WithTimeout(ctx, resources.StoreFirstWait)
	owners, _, err := d.o.store.List(lctx, metadata.PrefixBundleOwners)
	cancel()
	if err != nil {
		owners = d.o.owners.List(metadata.PrefixBundleOwners)
	}
	for _, kv := range owners {
		var r OwnerRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			if _, live := counts[r.ID]; live {
				counts[r.ID]++
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, p := range d.recent {
		if _, found, _ := d.o.owners.Get(key); found || time.Since(p.at) > pickMemory {
			delete(d.recent, key)
		} else if _, live := counts[p.broker]; live {
			counts[p.broker]++
		}
	}
	b, err := ParseBundleName(bundle)
	if err != nil {
		return "", err
	}
	if p, ok := d.recent[bundleKey(b)]; ok {
		if _, live := counts[p.broker]; live {
			return p.broker, nil // the same answer to the burst of lookups of one bundle
		}
	}
	best, bestN := "", 0
	for id, n := range counts {
		if best == "" || n < bestN || n == bestN && id < best {
			best, bestN = id, n
		}
	}
	d.recent[bundleKey(b)] = recentPick{broker: best, at: time.Now()}
	return best, nil
}

// ParseBundleName parses "tenant/ns/0x00000000_0x40000000".
func ParseBundleName(s string) (Bundle, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Bundle{}, fmt.Errorf("%w: bundle %q", api.ErrInvalidArgument, s)
	}
	return ParseBundle(s[:i], s[i+1:])
}

// liveBroker returns the record of live broker id.
func (o *Manager) LiveBroker(ctx context.Context, id string) (api.BrokerInfo, error) {
	kv, err := o.brokers.Read(ctx, metadata.BrokerKey(id), resources.StoreWait)
	return resources.Decode[api.BrokerInfo](kv, err, errBrokerUnavailable, "broker "+id)
}

// liveBrokers lists the live brokers' records, by id.
func (o *Manager) LiveBrokers() []api.BrokerInfo {
	var out []api.BrokerInfo
	for _, kv := range o.brokers.List(metadata.PrefixBrokers) {
		var bi api.BrokerInfo
		if json.Unmarshal(kv.Value, &bi) == nil {
			out = append(out, bi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// HandOverAll transfers every bundle this broker owns to other live brokers (a clean
// shutdown): the broker first withdraws its registration so that no one assigns it more,
// then hands each bundle to the broker the selector chooses (another one if it chooses this
// one; a plain unload if there is none).
func (o *Manager) HandOverAll(ctx context.Context) {
	o.closing.Store(true)
	if err := o.store.Delete(ctx, metadata.BrokerKey(o.b.Info().ID), metadata.AnyVersion); err != nil {
		o.log.Debug("withdraw broker registration", "err", err)
	}
	bs := o.OwnedBundles()
	if len(bs) == 0 {
		return
	}
	o.log.Info("handing bundles over before shutdown", "bundles", len(bs))
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var to *api.BrokerInfo
			if bi, err := o.otherBroker(ctx, b); err == nil {
				to = &bi
			} else {
				o.log.Info("no broker to hand the bundle over to: unloading it", "bundle", b.String(), "err", err)
			}
			if err := o.Release(ctx, b, to); err != nil {
				o.log.Warn("release bundle", "bundle", b.String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// otherBroker chooses a live broker other than this one for b.
func (o *Manager) otherBroker(ctx context.Context, b Bundle) (api.BrokerInfo, error) {
	if id, err := o.selector().SelectBroker(ctx, b.String()); err == nil && id != o.b.Info().ID {
		if bi, err := o.LiveBroker(ctx, id); err == nil {
			return bi, nil
		}
	}
	counts := map[string]int{}
	for _, kv := range o.owners.List(metadata.PrefixBundleOwners) {
		var r OwnerRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			counts[r.ID]++
		}
	}
	var best *api.BrokerInfo
	for _, bi := range o.LiveBrokers() {
		if bi.ID != o.b.Info().ID && (best == nil || counts[bi.ID] < counts[best.ID]) {
			best = &bi
		}
	}
	if best == nil {
		return api.BrokerInfo{}, fmt.Errorf("%w: no other live broker", api.ErrServiceNotReady)
	}
	return *best, nil
}

// forget deletes b's record without closing its topics (a split: its halves are owned
// here already).
func (o *Manager) Forget(ctx context.Context, b Bundle) {
	o.mu.Lock()
	ob := o.mu.bundles[b.String()]
	if ob != nil && ob.state == bundleOwned {
		delete(o.mu.bundles, b.String())
		o.m.owned.Dec()
	} else {
		ob = nil
	}
	o.mu.Unlock()
	if ob != nil {
		if err := o.store.Delete(ctx, bundleKey(b), ob.version); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
			o.log.Warn("delete the split bundle's record", "bundle", b.String(), "err", err)
		}
	}
}

// selector returns the BrokerSelector in force: the placement's, else the default.
func (o *Manager) selector() BrokerSelector {
	if o.cfg.Placement != nil {
		if sel := o.cfg.Placement.Selector(); sel != nil {
			return sel
		}
	}
	return o.sel
}

// BundlesOf returns the bundles of namespace tenant/ns in this cluster (after its splits);
// a namespace without a record has the default bundles (Pulsar's, for namespaces without
// policies).
func (o *Manager) BundlesOf(ctx context.Context, tenant, ns string) ([]Bundle, error) {
	p, err := o.cfg.Namespaces.CachedBundlePolicies(ctx, tenant, ns)
	if err != nil && !errors.Is(err, api.ErrNamespaceNotFound) {
		return nil, err
	}
	return NamespaceBundles(tenant+"/"+ns, p, o.cfg.DefaultBundles)
}

// BundleOf returns the bundle of topic n.
func (o *Manager) BundleOf(ctx context.Context, n topicname.Name) (Bundle, error) {
	bs, err := o.BundlesOf(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return Bundle{}, err
	}
	return FindBundle(bs, TopicHash(n)), nil
}

// AcquireTopic makes this broker the owner of n's bundle, or returns *api.NotOwnerError
// naming n.
func (o *Manager) AcquireTopic(ctx context.Context, n topicname.Name) (*OwnedBundle, error) {
	b, err := o.BundleOf(ctx, n)
	if err != nil {
		return nil, err
	}
	ob, err := o.Acquire(ctx, b)
	var no *api.NotOwnerError
	if errors.As(err, &no) { // a copy: the bundle's error is shared by every waiter
		named := *no
		named.Topic = n.String()
		err = &named
	}
	return ob, err
}
