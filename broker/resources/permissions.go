package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Permission grants live in the namespace record's auth_policies (Pulsar's layout): the
// namespace's grants by role, and each topic's grants by full (partitioned) topic name.

// NamespacePermissions returns the roles granted actions on namespace "tenant/ns".
func (r *Records) NamespacePermissions(ctx context.Context, ns string) (map[string][]auth.Action, error) {
	p, err := r.Namespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	return nonNil(p.Auth.Namespace), nil
}

// GrantNamespacePermission sets role's actions on namespace "tenant/ns" (replacing any).
func (r *Records) GrantNamespacePermission(ctx context.Context, ns, role string, acts []auth.Action) error {
	if role == "" {
		return fmt.Errorf("%w: empty role", api.ErrInvalidArgument)
	}
	return r.UpdateNamespace(ctx, ns, func(p *api.NamespacePolicies) {
		if p.Auth.Namespace == nil {
			p.Auth.Namespace = map[string][]auth.Action{}
		}
		p.Auth.Namespace[role] = slices.Clone(acts)
	})
}

// RevokeNamespacePermission removes role's grant on namespace "tenant/ns".
func (r *Records) RevokeNamespacePermission(ctx context.Context, ns, role string) error {
	return r.UpdateNamespace(ctx, ns, func(p *api.NamespacePolicies) { delete(p.Auth.Namespace, role) })
}

// TopicPermissions returns the roles granted actions on topic: its namespace's grants and
// its own, merged (as Pulsar's topic permissions answer).
func (r *Records) TopicPermissions(ctx context.Context, topic string) (map[string][]auth.Action, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, err
	}
	p, err := r.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return nil, err
	}
	out := maps.Clone(nonNil(p.Auth.Namespace))
	for role, acts := range p.Auth.Topics[n.Base().String()] {
		merged := slices.Clone(out[role])
		for _, a := range acts {
			if !slices.Contains(merged, a) {
				merged = append(merged, a)
			}
		}
		slices.Sort(merged)
		out[role] = merged
	}
	return out, nil
}

// GrantTopicPermission sets role's actions on topic (a partitioned topic's grant covers its
// partitions).
func (r *Records) GrantTopicPermission(ctx context.Context, topic, role string, acts []auth.Action) error {
	if role == "" {
		return fmt.Errorf("%w: empty role", api.ErrInvalidArgument)
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	key := n.Base().String()
	return r.UpdateNamespace(ctx, n.NamespaceName(), func(p *api.NamespacePolicies) {
		if p.Auth.Topics == nil {
			p.Auth.Topics = map[string]map[string][]auth.Action{}
		}
		if p.Auth.Topics[key] == nil {
			p.Auth.Topics[key] = map[string][]auth.Action{}
		}
		p.Auth.Topics[key][role] = slices.Clone(acts)
	})
}

// RevokeTopicPermission removes role's grant on topic (its namespace grant stays).
func (r *Records) RevokeTopicPermission(ctx context.Context, topic, role string) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	key := n.Base().String()
	return r.UpdateNamespace(ctx, n.NamespaceName(), func(p *api.NamespacePolicies) {
		delete(p.Auth.Topics[key], role)
		if len(p.Auth.Topics[key]) == 0 {
			delete(p.Auth.Topics, key)
		}
	})
}

// SubscriptionPermissions returns the roles of namespace "tenant/ns"'s subscriptions
// (Pulsar's subscription_auth_roles).
func (r *Records) SubscriptionPermissions(ctx context.Context, ns string) (map[string][]string, error) {
	p, err := r.Namespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	if p.Auth.Subscriptions == nil {
		return map[string][]string{}, nil
	}
	return p.Auth.Subscriptions, nil
}

// GrantSubscriptionPermission adds roles to subscription sub's roles in namespace
// "tenant/ns": once the list is set, only its roles may consume through sub.
func (r *Records) GrantSubscriptionPermission(ctx context.Context, ns, sub string, roles []string) error {
	if sub == "" || slices.Contains(roles, "") {
		return fmt.Errorf("%w: empty subscription or role", api.ErrInvalidArgument)
	}
	return r.UpdateNamespace(ctx, ns, func(p *api.NamespacePolicies) {
		if p.Auth.Subscriptions == nil {
			p.Auth.Subscriptions = map[string][]string{}
		}
		merged := append(slices.Clone(p.Auth.Subscriptions[sub]), roles...)
		slices.Sort(merged)
		p.Auth.Subscriptions[sub] = slices.Compact(merged)
	})
}

// RevokeSubscriptionPermission removes role from subscription sub's roles in namespace
// "tenant/ns" (the subscription keeps its entry, possibly empty: no restriction).
func (r *Records) RevokeSubscriptionPermission(ctx context.Context, ns, sub, role string) error {
	return r.UpdateNamespace(ctx, ns, func(p *api.NamespacePolicies) {
		if roles, has := p.Auth.Subscriptions[sub]; has {
			p.Auth.Subscriptions[sub] = slices.DeleteFunc(slices.Clone(roles), func(x string) bool { return x == role })
		}
	})
}

func nonNil(m map[string][]auth.Action) map[string][]auth.Action {
	if m == nil {
		return map[string][]auth.Action{}
	}
	return m
}

// UpdateNamespace applies fn to namespace ns's policies atomically (compare-and-swap on the
// record's version, retried on a concurrent change; api.ErrServiceNotReady after ten).
func (r *Records) UpdateNamespace(ctx context.Context, ns string, fn func(*api.NamespacePolicies)) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 10; attempt++ {
		kv, err := r.store.Get(ctx, metadata.NamespaceKey(t, n))
		if errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("%w: %s", api.ErrNamespaceNotFound, ns)
		}
		if err != nil {
			return err
		}
		var p api.NamespacePolicies
		if len(kv.Value) > 0 {
			if err := json.Unmarshal(kv.Value, &p); err != nil {
				return fmt.Errorf("namespace %s record: %w", ns, err)
			}
		}
		fn(&p)
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("%w: %v", api.ErrInvalidArgument, err)
		}
		_, err = r.store.Put(ctx, metadata.NamespaceKey(t, n), b, kv.Version)
		if !errors.Is(err, metadata.ErrBadVersion) {
			return err
		}
	}
	return fmt.Errorf("%w: namespace %s keeps changing", api.ErrServiceNotReady, ns)
}
