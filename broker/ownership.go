package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Bundle ownership, as Pulsar's OwnershipCache: the broker owning a bundle holds
// metadata.BundleOwnerKey, an ephemeral key bound to its metadata session whose value is an
// ownerRecord, and serves the bundle's topics only while it holds it under its current
// session. A broker restarting with the same id takes over the records of its previous
// incarnation at once; another broker's record is respected until its session expires, or
// until it hands the bundle over (TransferTo names the destination, which takes the bundle
// as soon as the record is deleted).

// BrokerSelector chooses the broker that gets an unowned bundle. bundle is
// "tenant/ns/0x00000000_0x40000000"; the answer is a BrokerInfo.ID of a live broker. The
// load manager implements it (the default, Config.LoadManager); without one the live broker
// owning the fewest bundles is chosen, ties broken by id.
type BrokerSelector interface {
	SelectBroker(ctx context.Context, bundle string) (brokerID string, err error)
}

// ownerRecord is the value of a bundle's ownership record.
type ownerRecord struct {
	BrokerInfo
	// TransferTo is the broker the owner is handing the bundle over to (nil: none).
	TransferTo *BrokerInfo `json:"transferTo,omitempty"`
}

type bundleState uint8

const (
	bundleAcquiring bundleState = iota + 1
	bundleOwned
	bundleReleasing
)

// ownedBundle is a bundle this broker acquires, owns or releases. ready closes when the
// acquisition ends (err says how).
type ownedBundle struct {
	b       Bundle
	state   bundleState
	ready   chan struct{}
	err     error
	sess    metadata.Session // the session the record is bound to
	version metadata.Version // the record's version
}

// ownership is the broker's bundle table and its watched caches of the store. Safe for
// concurrent use.
type ownership struct {
	s *Service
	// owners and brokers mirror the ownership records and the live brokers (the namespace
	// and partitioned-topic records have theirs in Service.res).
	owners, brokers *resources.Cache
	m               *ownershipMetrics
	closing         atomic.Bool // handing over: acquire nothing more
	sel             *defaultSelector

	mu struct {
		sync.Mutex                         // guards bundles; Service.mu and resources.Cache's may be taken under it
		bundles    map[string]*ownedBundle // by Bundle.String()
	}
}

type ownershipMetrics struct {
	events    *prometheus.CounterVec // by event: acquired, released, lost
	answers   *prometheus.CounterVec // lookup answers by result
	transfers *prometheus.CounterVec // by direction: out, in
	transferT prometheus.Histogram
	owned     prometheus.Gauge
}

func newOwnership(s *Service) *ownership {
	o := &ownership{s: s,
		owners:  resources.NewCache(s.store, metadata.PrefixBundleOwners, s.log),
		brokers: resources.NewCache(s.store, metadata.PrefixBrokers, s.log),
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
		}}
	o.mu.bundles = map[string]*ownedBundle{}
	o.sel = &defaultSelector{o: o, recent: map[string]recentPick{}}
	s.reg.MustRegister(o.m.events, o.m.answers, o.m.transfers, o.m.transferT, o.m.owned)
	return o
}

// start runs the caches until ctx ends; wg counts them.
func (o *ownership) start(ctx context.Context, wg *sync.WaitGroup) {
	for _, c := range append([]*resources.Cache{o.owners, o.brokers}, o.s.res.Caches()...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Run(ctx)
		}()
	}
}

// startTransfers runs the transfer watcher until ctx ends, once the broker knows its id;
// wg counts it.
func (o *ownership) startTransfers(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		o.takeTransfers(ctx)
	}()
}

// storeWait bounds a metadata read the broker's caches cannot answer (resources.StoreWait).
const storeWait = resources.StoreWait

// storeFirstWait bounds a read that prefers the store to the watched cache.
const storeFirstWait = resources.StoreFirstWait

func errStoreUnreachable(key string, err error) error { return resources.StoreUnreachable(key, err) }

// cachedPolicies returns a namespace's policies from the watched cache (the store if the
// cache does not hold it).
func (s *Service) cachedPolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	return s.res.CachedPolicies(ctx, tenant, ns)
}

// cachedPartitions returns a topic's partition count (0: not partitioned): from the store
// (partition counts grow, and a client must not see a stale one), or from the watched
// cache if the store does not answer within storeFirstWait.
func (s *Service) cachedPartitions(ctx context.Context, n topicname.Name) (int, error) {
	if s.loadedTopic(n.String()) != nil {
		return 0, nil // served here as a non-partitioned topic (a partitioned one is not loaded)
	}
	return s.res.CachedPartitions(ctx, n)
}

// bundlesOf returns the bundles of namespace tenant/ns; a namespace without a record has
// the default bundles (Pulsar's, for namespaces without policies).
func (s *Service) bundlesOf(ctx context.Context, tenant, ns string) ([]Bundle, error) {
	p, err := s.cachedPolicies(ctx, tenant, ns)
	if err != nil && !errors.Is(err, ErrNamespaceNotFound) {
		return nil, err
	}
	return namespaceBundles(tenant+"/"+ns, p, s.cfg.DefaultNumberOfNamespaceBundles)
}

// bundleOf returns the bundle of topic n.
func (s *Service) bundleOf(ctx context.Context, n topicname.Name) (Bundle, error) {
	bs, err := s.bundlesOf(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return Bundle{}, err
	}
	return findBundle(bs, topicHash(n)), nil
}

func bundleKey(b Bundle) string {
	t, ns, _ := strings.Cut(b.Namespace, "/")
	return metadata.BundleOwnerKey(t, ns, b.Range())
}

// ownerOf returns the record of b's owner from the watched cache (the store if the cache
// is not synced yet), nil if none.
func (o *ownership) ownerOf(ctx context.Context, b Bundle) (*ownerRecord, metadata.KV, error) {
	kv, found, synced := o.owners.Get(bundleKey(b))
	if !synced {
		var err error
		cctx, cancel := context.WithTimeout(ctx, storeWait)
		kv, err = o.s.store.Get(cctx, bundleKey(b))
		cancel()
		if errors.Is(err, metadata.ErrNotFound) {
			return nil, kv, nil
		}
		if err != nil {
			return nil, kv, errStoreUnreachable(bundleKey(b), err)
		}
	} else if !found {
		return nil, kv, nil
	}
	var r ownerRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, kv, fmt.Errorf("ownership record of %s: %w", b, err)
	}
	return &r, kv, nil
}

// serving reports whether ob is owned under the broker's current session.
func (o *ownership) serving(ob *ownedBundle) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.bundles[ob.b.String()] == ob && ob.state == bundleOwned && ob.sess == o.s.session()
}

// owned returns the bundle if this broker serves it, nil otherwise.
func (o *ownership) owned(b Bundle) *ownedBundle {
	o.mu.Lock()
	ob := o.mu.bundles[b.String()]
	o.mu.Unlock()
	if ob != nil && o.serving(ob) {
		return ob
	}
	return nil
}

// ownedBundles lists the bundles this broker owns, in order.
func (o *ownership) ownedBundles() []Bundle {
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

// acquire makes this broker the owner of n's bundle, or returns *NotOwnerError.
func (s *Service) acquire(ctx context.Context, n topicname.Name) error {
	_, err := s.acquireTopic(ctx, n)
	return err
}

func (s *Service) acquireTopic(ctx context.Context, n topicname.Name) (*ownedBundle, error) {
	b, err := s.bundleOf(ctx, n)
	if err != nil {
		return nil, err
	}
	ob, err := s.own.acquire(ctx, b)
	var no *NotOwnerError
	if errors.As(err, &no) { // a copy: the bundle's error is shared by every waiter
		named := *no
		named.Topic = n.String()
		err = &named
	}
	return ob, err
}

// acquire makes this broker the owner of b: at once if it owns it, after the running
// acquisition if one runs, else by writing the record. A bundle being handed over to this
// broker is taken as soon as its owner deleted the record. Another owner's bundle is
// *NotOwnerError.
func (o *ownership) acquire(ctx context.Context, b Bundle) (*ownedBundle, error) {
	key := b.String()
	for {
		o.mu.Lock()
		ob := o.mu.bundles[key]
		if ob == nil && o.closing.Load() {
			o.mu.Unlock()
			return nil, fmt.Errorf("%w: broker shutting down", ErrServiceNotReady)
		}
		if ob == nil {
			ob = &ownedBundle{b: b, state: bundleAcquiring, ready: make(chan struct{})}
			o.mu.bundles[key] = ob
			o.mu.Unlock()
			go o.write(ob)
		} else {
			o.mu.Unlock()
		}
		select {
		case <-ob.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: acquire %s: %v", ErrServiceNotReady, b, ctx.Err())
		}
		if ob.err != nil {
			return nil, ob.err
		}
		if o.serving(ob) {
			return ob, nil
		}
		o.mu.Lock()
		cur := o.mu.bundles[key]
		if cur == ob && ob.state == bundleOwned && ob.sess != o.s.session() {
			delete(o.mu.bundles, key) // bound to a session that ended: acquire afresh
			o.m.owned.Dec()
			cur = nil
		}
		o.mu.Unlock()
		if cur == ob {
			// Being released: the caller retries later.
			return nil, fmt.Errorf("%w: bundle %s is being unloaded", ErrServiceNotReady, b)
		}
	}
}

// acquireWait bounds how long an acquisition waits for a bundle handed over to this broker.
const acquireWait = 10 * time.Second

// write performs ob's acquisition and records its outcome.
func (o *ownership) write(ob *ownedBundle) {
	s := o.s
	ctx, cancel := context.WithTimeout(s.ctx, acquireWait+storeWait)
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
		s.log.Info("bundle acquired", "bundle", ob.b.String())
	}
}

func (o *ownership) writeRecord(ctx context.Context, b Bundle) (metadata.Session, metadata.Version, error) {
	s := o.s
	key := bundleKey(b)
	val, _ := json.Marshal(ownerRecord{BrokerInfo: s.info})
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			return nil, 0, fmt.Errorf("%w: ownership of %s keeps changing", ErrServiceNotReady, b)
		}
		sess := s.session()
		wctx, cancel := context.WithTimeout(ctx, storeWait)
		ver, err := sess.Put(wctx, key, val, metadata.NotExists)
		cancel()
		if err == nil {
			return sess, ver, nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) {
			return nil, 0, fmt.Errorf("%w: acquire %s: %v", ErrServiceNotReady, b, err)
		}
		rctx, cancel := context.WithTimeout(ctx, storeWait)
		kv, err := s.store.Get(rctx, key)
		cancel()
		if errors.Is(err, metadata.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, errStoreUnreachable(key, err)
		}
		var r ownerRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil || r.ID == s.info.ID {
			if kv.Lease == sess.ID() {
				return sess, kv.Version, nil
			}
			// Our previous incarnation's (or a corrupt) record: take it over.
			if err := s.store.Delete(ctx, key, kv.Version); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
				return nil, 0, errStoreUnreachable(key, err)
			}
			continue
		}
		if r.TransferTo == nil || r.TransferTo.ID != s.info.ID {
			return nil, 0, &NotOwnerError{Topic: b.String(), Owner: r.BrokerInfo}
		}
		// Handed over to us: wait for the owner to delete its record.
		if err := o.waitGone(ctx, key, kv.Version); err != nil {
			return nil, 0, err
		}
	}
}

// waitGone waits until key no longer has version v in the watched cache.
func (o *ownership) waitGone(ctx context.Context, key string, v metadata.Version) error {
	for {
		ch := o.owners.Changed()
		if kv, found, _ := o.owners.Get(key); !found || kv.Version != v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for %s to be handed over: %v", ErrServiceNotReady, key, ctx.Err())
		}
	}
}

// takeTransfers acquires every bundle handed over to this broker as soon as its record
// names it, so that the bundle is owned here when the clients arrive.
func (o *ownership) takeTransfers(ctx context.Context) {
	started := map[string]metadata.Version{}
	for {
		ch := o.owners.Changed()
		for _, kv := range o.owners.List(metadata.PrefixBundleOwners) {
			var r ownerRecord
			if json.Unmarshal(kv.Value, &r) != nil || r.TransferTo == nil || r.TransferTo.ID != o.s.info.ID ||
				started[kv.Key] == kv.Version {
				continue
			}
			started[kv.Key] = kv.Version
			b, err := bundleFromKey(kv.Key)
			if err != nil {
				continue
			}
			go func() {
				actx, cancel := context.WithTimeout(ctx, acquireWait)
				defer cancel()
				if _, err := o.acquire(actx, b); err == nil {
					o.m.transfers.WithLabelValues("in").Inc()
				} else {
					o.s.log.Info("take over bundle", "bundle", b.String(), "err", err)
				}
			}()
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

// bundleFromKey parses a key built by metadata.BundleOwnerKey.
func bundleFromKey(key string) (Bundle, error) {
	parts := strings.Split(strings.TrimPrefix(key, metadata.PrefixBundleOwners), "/")
	if len(parts) != 3 {
		return Bundle{}, fmt.Errorf("%w: ownership key %q", ErrInvalidArgument, key)
	}
	return parseBundle(parts[0]+"/"+parts[1], parts[2])
}

// release stops serving b and deletes its record; to (nil: none) is the broker the
// clients are sent to, which takes the bundle over as soon as the record is gone.
func (o *ownership) release(ctx context.Context, b Bundle, to *BrokerInfo) error {
	s := o.s
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
	if to != nil && to.ID != s.info.ID {
		val, _ := json.Marshal(ownerRecord{BrokerInfo: s.info, TransferTo: to})
		wctx, cancel := context.WithTimeout(ctx, storeWait)
		v, err := ob.sess.Put(wctx, key, val, ob.version)
		cancel()
		if err == nil {
			ob.version = v
			redirect = &topic.Redirect{ServiceURL: to.ServiceURL, ServiceURLTLS: to.ServiceURLTLS}
		} else {
			s.log.Warn("hand bundle over: unloading it instead", "bundle", b.String(), "to", to.ID, "err", err)
		}
	}
	s.closeTopics(ctx, func(n topicname.Name) bool {
		return n.Tenant+"/"+n.Namespace == b.Namespace && b.contains(topicHash(n))
	}, redirect)
	err := s.store.Delete(ctx, key, ob.version)
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
	s.log.Info("bundle released", "bundle", b.String(), "to", redirectID(to), "took", time.Since(start).Round(time.Millisecond))
	return err
}

func redirectID(to *BrokerInfo) string {
	if to == nil {
		return ""
	}
	return to.ID
}

// dropAll forgets every bundle (the session that bound their records is gone) and closes
// their topics in the background: their clients are disconnected at once, while closing
// their managed ledgers may wait for the store, which must not hold up the new session.
func (o *ownership) dropAll() {
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
	o.s.goBackground(time.Minute, o.s.unloadAll)
}

// closeTopics closes the loaded topics that match, sending their clients to redirect (nil:
// they look the topics up again), and waits until they stopped. Topics being loaded are
// waited for first (a load checks ownership once more when it completes).
func (s *Service) closeTopics(ctx context.Context, match func(topicname.Name) bool, redirect *topic.Redirect) {
	s.mu.Lock()
	var es []*topicEntry
	for _, e := range s.mu.topics {
		es = append(es, e)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-e.ready:
			case <-ctx.Done():
				return
			}
			if e.t == nil || !match(e.t.Name()) {
				return
			}
			var err error
			if redirect != nil {
				err = e.t.CloseTo(ctx, *redirect)
			} else {
				err = e.t.Close(ctx)
			}
			if err == nil {
				err = waitStopped(ctx, e.t)
			}
			if err != nil {
				s.log.Warn("unload topic", "topic", e.t.Name().String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// localDeadline is how long after the store last renewed the session the broker keeps
// serving without a renewal: two thirds of the ttl, so that it stops before the lease
// expires and another broker can take its bundles.
func (s *Service) localDeadline() time.Duration { return s.cfg.SessionTTL * 2 / 3 }

// waitSessionLost returns true when sess expired or was not renewed within the local
// deadline (then it is closed), false when the broker closes.
func (s *Service) waitSessionLost(sess metadata.Session) bool {
	r, renews := sess.(metadata.Renewer)
	for {
		var tick <-chan time.Time
		if renews {
			d := time.Until(r.Renewed().Add(s.localDeadline()))
			if d <= 0 {
				s.log.Warn("metadata session not renewed within its local deadline: giving it up",
					"deadline", s.localDeadline())
				go sess.Close() //nolint:errcheck // the lease expires on its own if etcd is away
				return true
			}
			t := time.NewTimer(d)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-s.ctx.Done():
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
	o      *ownership
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
		return d.o.s.info.ID, nil // not synced yet: take it
	}
	// The records from the store when it answers (the cache may lag behind a burst of
	// assignments), else from the cache.
	lctx, cancel := context.WithTimeout(ctx, storeFirstWait)
	owners, _, err := d.o.s.store.List(lctx, metadata.PrefixBundleOwners)
	cancel()
	if err != nil {
		owners = d.o.owners.List(metadata.PrefixBundleOwners)
	}
	for _, kv := range owners {
		var r ownerRecord
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
	b, err := parseBundleName(bundle)
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

// parseBundleName parses "tenant/ns/0x00000000_0x40000000".
func parseBundleName(s string) (Bundle, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Bundle{}, fmt.Errorf("%w: bundle %q", ErrInvalidArgument, s)
	}
	return parseBundle(s[:i], s[i+1:])
}

// liveBroker returns the record of live broker id.
func (o *ownership) liveBroker(ctx context.Context, id string) (BrokerInfo, error) {
	var bi BrokerInfo
	kv, err := o.brokers.Read(ctx, metadata.BrokerKey(id), storeWait)
	if errors.Is(err, metadata.ErrNotFound) {
		return bi, fmt.Errorf("%w: broker %s is not available", ErrServiceNotReady, id)
	}
	if err != nil {
		return bi, err
	}
	if err := json.Unmarshal(kv.Value, &bi); err != nil {
		return bi, fmt.Errorf("broker %s record: %w", id, err)
	}
	return bi, nil
}

// liveBrokers lists the live brokers' records, by id.
func (o *ownership) liveBrokers() []BrokerInfo {
	var out []BrokerInfo
	for _, kv := range o.brokers.List(metadata.PrefixBrokers) {
		var bi BrokerInfo
		if json.Unmarshal(kv.Value, &bi) == nil {
			out = append(out, bi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Service) selector() BrokerSelector {
	if s.cfg.BrokerSelector != nil {
		return s.cfg.BrokerSelector
	}
	if s.lm != nil {
		return s.lm
	}
	return s.own.sel
}

// partitions answers partitioned metadata from the watched cache (0: not partitioned).
func (s *Service) partitions(ctx context.Context, topic string) (int, error) {
	n, err := topicname.Parse(topic)
	if err != nil || n.IsPartition() {
		return 0, err
	}
	return s.cachedPartitions(ctx, n)
}

// handOverAll transfers every bundle this broker owns to other live brokers (a clean
// shutdown): the broker first withdraws its registration so that no one assigns it more,
// then hands each bundle to the broker the selector chooses (another one if it chooses this
// one; a plain unload if there is none).
func (s *Service) handOverAll(ctx context.Context) {
	o := s.own
	o.closing.Store(true)
	if err := s.store.Delete(ctx, metadata.BrokerKey(s.info.ID), metadata.AnyVersion); err != nil {
		s.log.Debug("withdraw broker registration", "err", err)
	}
	bs := o.ownedBundles()
	if len(bs) == 0 {
		return
	}
	s.log.Info("handing bundles over before shutdown", "bundles", len(bs))
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var to *BrokerInfo
			if bi, err := s.otherBroker(ctx, b); err == nil {
				to = &bi
			} else {
				s.log.Info("no broker to hand the bundle over to: unloading it", "bundle", b.String(), "err", err)
			}
			if err := o.release(ctx, b, to); err != nil {
				s.log.Warn("release bundle", "bundle", b.String(), "err", err)
			}
		}()
	}
	wg.Wait()
}

// otherBroker chooses a live broker other than this one for b.
func (s *Service) otherBroker(ctx context.Context, b Bundle) (BrokerInfo, error) {
	if id, err := s.selector().SelectBroker(ctx, b.String()); err == nil && id != s.info.ID {
		if bi, err := s.own.liveBroker(ctx, id); err == nil {
			return bi, nil
		}
	}
	counts := map[string]int{}
	for _, kv := range s.own.owners.List(metadata.PrefixBundleOwners) {
		var r ownerRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			counts[r.ID]++
		}
	}
	var best *BrokerInfo
	for _, bi := range s.own.liveBrokers() {
		if bi.ID != s.info.ID && (best == nil || counts[bi.ID] < counts[best.ID]) {
			best = &bi
		}
	}
	if best == nil {
		return BrokerInfo{}, fmt.Errorf("%w: no other live broker", ErrServiceNotReady)
	}
	return *best, nil
}

// forget deletes b's record without closing its topics (a split: its halves are owned
// here already).
func (o *ownership) forget(ctx context.Context, b Bundle) {
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
		if err := o.s.store.Delete(ctx, bundleKey(b), ob.version); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
			o.s.log.Warn("delete the split bundle's record", "bundle", b.String(), "err", err)
		}
	}
}
