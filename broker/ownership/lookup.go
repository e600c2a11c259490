package ownership

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Lookup, as Pulsar's TopicLookupBase and NamespaceService.findBrokerServiceUrl: the owner
// of the topic's bundle answers for itself (Connect); another broker redirects to the owner
// (or, during a hand-over, to the destination); an unowned bundle goes to the broker the
// BrokerSelector chooses, which acquires it when the redirected (authoritative) lookup
// arrives. With the load manager, a broker other than its leader redirects the lookup of an
// unowned bundle to the leader (not authoritatively), which chooses: its placement then
// counts every assignment of a burst. Ownership records are read from the watched cache.

// Lookup answers a lookup of topic; authoritative is set on a lookup redirected here, which
// makes this broker take an unowned bundle.
func (o *Manager) Lookup(ctx context.Context, topic string, authoritative bool) (api.LookupResult, error) {
	r, err := o.lookupBundle(ctx, topic, authoritative)
	switch {
	case err != nil:
		o.m.answers.WithLabelValues("failed").Inc()
	case r.Self:
		o.m.answers.WithLabelValues("connect").Inc()
	default:
		o.m.answers.WithLabelValues("redirect").Inc()
	}
	return r, err
}

func (o *Manager) lookupBundle(ctx context.Context, topic string, authoritative bool) (api.LookupResult, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return api.LookupResult{}, err
	}
	if _, err := o.cfg.Namespaces.CachedPolicies(ctx, n.Tenant, n.Namespace); err != nil {
		return api.LookupResult{}, err
	}
	b, err := o.BundleOf(ctx, n)
	if err != nil {
		return api.LookupResult{}, err
	}
	self := api.LookupResult{BrokerInfo: o.b.Info(), Self: true}
	if o.Owned(b) != nil {
		return self, nil
	}
	r, _, err := o.OwnerOf(ctx, b)
	if err != nil {
		return api.LookupResult{}, err
	}
	if r != nil && r.ID != self.ID {
		if r.TransferTo != nil {
			return api.LookupResult{BrokerInfo: *r.TransferTo, Self: r.TransferTo.ID == self.ID}, nil
		}
		return api.LookupResult{BrokerInfo: r.BrokerInfo}, nil
	}
	if r == nil && !authoritative {
		if ld, ok := o.assigningLeader(ctx); ok {
			return api.LookupResult{BrokerInfo: ld, ToLeader: true}, nil
		}
		id, err := o.selector().SelectBroker(ctx, b.String())
		if err != nil {
			return api.LookupResult{}, err
		}
		if id != self.ID {
			bi, err := o.LiveBroker(ctx, id)
			if err != nil {
				return api.LookupResult{}, err
			}
			return api.LookupResult{BrokerInfo: bi, Assigned: true}, nil
		}
	}
	var no *api.NotOwnerError
	if _, err := o.Acquire(ctx, b); errors.As(err, &no) {
		return api.LookupResult{BrokerInfo: no.Owner}, nil
	} else if err != nil {
		return api.LookupResult{}, err
	}
	return self, nil
}

// assigningLeader returns the load manager's leader when it is another live broker: the
// lookup of an unowned bundle goes there (Pulsar's NamespaceService.searchForCandidateBroker
// with a centralized load manager). Without a live leader this broker decides.
func (o *Manager) assigningLeader(ctx context.Context) (api.BrokerInfo, bool) {
	if o.cfg.Placement == nil {
		return api.BrokerInfo{}, false
	}
	id, ok := o.cfg.Placement.Leader()
	if !ok || id == o.b.Info().ID {
		return api.BrokerInfo{}, false
	}
	bi, err := o.LiveBroker(ctx, id)
	if err != nil {
		return api.BrokerInfo{}, false
	}
	return bi, true
}
