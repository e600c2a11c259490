package broker

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Lookup, as Pulsar's TopicLookupBase and NamespaceService.findBrokerServiceUrl: the owner
// of the topic's bundle answers for itself (Connect); another broker redirects to the owner
// (or, during a hand-over, to the destination); an unowned bundle goes to the broker the
// BrokerSelector chooses, which acquires it when the redirected (authoritative) lookup
// arrives. With the load manager, a broker other than its leader redirects the lookup of an
// unowned bundle to the leader (not authoritatively), which chooses: its placement then
// counts every assignment of a burst. Ownership records are read from the watched cache.

func (s *Service) lookup(ctx context.Context, topic string) (LookupResult, error) {
	return s.lookupTopic(ctx, topic, false)
}

// LookupAuthoritative is Lookup for a lookup redirected here (authoritative): an unowned
// bundle is taken by this broker.
func (s *Service) LookupAuthoritative(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	return s.lookupTopic(ctx, topic, authoritative)
}

// lookupTopic answers a lookup; authoritative is set on a lookup redirected here, which
// makes this broker take an unowned bundle.
func (s *Service) lookupTopic(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	r, err := s.lookupBundle(ctx, topic, authoritative)
	switch {
	case err != nil:
		s.own.m.answers.WithLabelValues("failed").Inc()
	case r.Self:
		s.own.m.answers.WithLabelValues("connect").Inc()
	default:
		s.own.m.answers.WithLabelValues("redirect").Inc()
	}
	return r, err
}

func (s *Service) lookupBundle(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return LookupResult{}, err
	}
	if _, err := s.cachedPolicies(ctx, n.Tenant, n.Namespace); err != nil {
		return LookupResult{}, err
	}
	b, err := s.bundleOf(ctx, n)
	if err != nil {
		return LookupResult{}, err
	}
	self := LookupResult{BrokerInfo: s.info, Self: true}
	if s.own.owned(b) != nil {
		return self, nil
	}
	r, _, err := s.own.ownerOf(ctx, b)
	if err != nil {
		return LookupResult{}, err
	}
	if r != nil && r.ID != s.info.ID {
		if r.TransferTo != nil {
			return LookupResult{BrokerInfo: *r.TransferTo, Self: r.TransferTo.ID == s.info.ID}, nil
		}
		return LookupResult{BrokerInfo: r.BrokerInfo}, nil
	}
	if r == nil && !authoritative {
		if ld, ok := s.assigningLeader(ctx); ok {
			return LookupResult{BrokerInfo: ld, ToLeader: true}, nil
		}
		id, err := s.selector().SelectBroker(ctx, b.String())
		if err != nil {
			return LookupResult{}, err
		}
		if id != s.info.ID {
			bi, err := s.own.liveBroker(ctx, id)
			if err != nil {
				return LookupResult{}, err
			}
			return LookupResult{BrokerInfo: bi, Assigned: true}, nil
		}
	}
	var no *NotOwnerError
	if _, err := s.own.acquire(ctx, b); errors.As(err, &no) {
		return LookupResult{BrokerInfo: no.Owner}, nil
	} else if err != nil {
		return LookupResult{}, err
	}
	return self, nil
}
