package broker

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/broker/ownership"
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
	h.s.CloseTopics(ctx, match, redirect)
}

func (h ownHost) Selector() BrokerSelector {
	if h.s.cfg.BrokerSelector != nil {
		return h.s.cfg.BrokerSelector
	}
	if h.s.loadBalancing() {
		return h.s.lm
	}
	return nil
}

func (h ownHost) Leader() (string, bool) {
	if !h.s.loadBalancing() {
		return "", false // elected for Pulsar's leaderBroker only: lookups are decided here
	}
	ld, ok := h.s.lm.Leader()
	return ld.ID, ok
}

// cachedPolicies returns a namespace's policies from the watched cache (the store if the
// cache does not hold it).
func (s *Service) cachedPolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	return s.res.CachedPolicies(ctx, tenant, ns)
}

// acquire makes this broker the owner of n's bundle, or returns *NotOwnerError.
func (s *Service) acquire(ctx context.Context, n topicname.Name) error {
	_, err := s.own.AcquireTopic(ctx, n)
	return err
}

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
	s.goBackground(time.Minute, s.UnloadAll)
}
