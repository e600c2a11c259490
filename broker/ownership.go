package broker

import (
	"context"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/ownership"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Bundle ownership (bundles, lookup, the broker selector, hand-over, the cluster API) is
// package broker/ownership; the root gives it the broker through ownHost and holds it as
// Service.own.

// BrokerSelector chooses the broker that gets an unowned bundle (ownership.BrokerSelector).
type BrokerSelector = ownership.BrokerSelector

// Bundle is one hash range of a namespace (ownership.Bundle).
type Bundle = ownership.Bundle

// storeWait bounds a metadata read the broker's caches cannot answer (resources.StoreWait).
const storeWait = resources.StoreWait

func newOwnership(s *Service) *ownership.Manager {
	return ownership.New(s.ctx, ownership.Config{Store: s.store, Registry: s.reg, Logger: s.log,
		DefaultBundles: s.cfg.DefaultNumberOfNamespaceBundles, SessionTTL: s.cfg.SessionTTL,
		Namespaces: s.res, Placement: ownHost{s}, Peers: s.peer}, ownHost{s})
}

// ownHost is the Service as ownership's Broker and Placement.
type ownHost struct{ s *Service }

var (
	_ ownership.Broker    = ownHost{}
	_ ownership.Placement = ownHost{}
)

func (h ownHost) Info() BrokerInfo          { return h.s.info }
func (h ownHost) Session() metadata.Session { return h.s.session() }
func (h ownHost) CloseTopics(ctx context.Context, match func(topicname.Name) bool, redirect *topic.Redirect) {
	h.s.closeTopics(ctx, match, redirect)
}

func (h ownHost) Selector() BrokerSelector {
	if h.s.cfg.BrokerSelector != nil {
		return h.s.cfg.BrokerSelector
	}
	if h.s.lm != nil {
		return h.s.lm
	}
	return nil
}

func (h ownHost) Leader() (string, bool) {
	if h.s.lm == nil {
		return "", false
	}
	ld, ok := h.s.lm.Leader()
	return ld.ID, ok
}

// cachedPolicies returns a namespace's policies from the watched cache (the store if the
// cache does not hold it).
func (s *Service) cachedPolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	return s.res.CachedPolicies(ctx, tenant, ns)
}

// cachedPartitions returns a topic's partition count (0: not partitioned): from the store
// (partition counts grow, and a client must not see a stale one), or from the watched
// cache if the store does not answer within resources.StoreFirstWait.
func (s *Service) cachedPartitions(ctx context.Context, n topicname.Name) (int, error) {
	if s.loadedTopic(n.String()) != nil {
		return 0, nil // served here as a non-partitioned topic (a partitioned one is not loaded)
	}
	return s.res.CachedPartitions(ctx, n)
}

// partitions answers partitioned metadata from the watched cache (0: not partitioned).
func (s *Service) partitions(ctx context.Context, topic string) (int, error) {
	n, err := topicname.Parse(topic)
	if err != nil || n.IsPartition() {
		return 0, err
	}
	return s.cachedPartitions(ctx, n)
}

// bundleOf returns the bundle of topic n.
func (s *Service) bundleOf(ctx context.Context, n topicname.Name) (Bundle, error) {
	return s.own.BundleOf(ctx, n)
}

// acquire makes this broker the owner of n's bundle, or returns *NotOwnerError.
func (s *Service) acquire(ctx context.Context, n topicname.Name) error {
	_, err := s.own.AcquireTopic(ctx, n)
	return err
}

// bundleOwner returns *NotOwnerError if another broker owns b, nil if this one does, and
// ErrBundleNotFound wrapped if nobody does.
func (s *Service) bundleOwner(ctx context.Context, b Bundle) error { return s.own.BundleOwner(ctx, b) }

func (s *Service) lookup(ctx context.Context, topic string) (LookupResult, error) {
	return s.own.Lookup(ctx, topic, false)
}

// lookupTopic answers a lookup; authoritative is set on a lookup redirected here, which
// makes this broker take an unowned bundle.
func (s *Service) lookupTopic(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	return s.own.Lookup(ctx, topic, authoritative)
}

// LookupAuthoritative is Lookup for a lookup redirected here (authoritative): an unowned
// bundle is taken by this broker.
func (s *Service) LookupAuthoritative(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	return s.own.Lookup(ctx, topic, authoritative)
}

// waitSessionLost returns true when sess expired or was not renewed within its local
// deadline (ownership.LocalDeadline), false when the broker closes.
func (s *Service) waitSessionLost(sess metadata.Session) bool { return s.own.WaitSessionLost(sess) }

// dropAll forgets every bundle (the session that bound their records is gone) and closes
// their topics in the background: their clients are disconnected at once, while closing
// their managed ledgers may wait for the store, which must not hold up the new session.
func (s *Service) dropAll() {
	s.own.DropAll()
	s.goBackground(time.Minute, s.unloadAll)
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
