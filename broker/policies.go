package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Policies (Pulsar's namespace and topic policies). Each policy is stored at two levels —
// the namespace record (metadata.NamespaceKey, Pulsar's Policies JSON keys) and the topic
// policy record (metadata.TopicFeaturePolicyKey, Pulsar's TopicPolicies JSON keys) — and
// resolved topic, then namespace, then the broker's configuration (policydefaults.go).
// Changes reach the loaded topics through a watch of both prefixes (policyapply.go).

// Checking bodies.

// Records.

func (s *Service) topicRecord(ctx context.Context, n topicname.Name) (policy.Record, error) {
	b := n.Base()
	r := policy.Record{}
	kv, err := s.cfg.Store.Get(ctx, metadata.TopicFeaturePolicyKey(b.Tenant, b.Namespace, b.Local))
	if errors.Is(err, metadata.ErrNotFound) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, fmt.Errorf("topic policies of %s: %w", n, err)
	}
	return r, nil
}

// updateTopicRecord changes a topic's policy record with a compare-and-swap.
func (s *Service) updateTopicRecord(ctx context.Context, n topicname.Name, change func(policy.Record) error) error {
	n = n.Base()
	key := metadata.TopicFeaturePolicyKey(n.Tenant, n.Namespace, n.Local)
	for attempt := 0; attempt < 10; attempt++ {
		r := policy.Record{}
		ver := metadata.NotExists
		kv, err := s.cfg.Store.Get(ctx, key)
		switch {
		case err == nil:
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return fmt.Errorf("topic policies of %s: %w", n, err)
			}
			ver = kv.Version
		case !errors.Is(err, metadata.ErrNotFound):
			return err
		}
		if err := change(r); err != nil {
			return err
		}
		b, _ := json.Marshal(r)
		_, err = s.cfg.Store.Put(ctx, key, b, ver)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return err
	}
	return fmt.Errorf("%w: topic policies of %s keep changing", ErrServiceNotReady, n)
}

// namespaceRecord returns a namespace's policies by Pulsar key.
func (s *Service) namespaceRecord(ctx context.Context, t, ns string) (policy.Record, error) {
	pol, err := s.res.NamespacePolicies(ctx, t, ns)
	if err != nil {
		return nil, err
	}
	return policy.RecordOf(pol)
}

// updateNamespaceRecord changes a namespace's policies (by Pulsar key) with a
// compare-and-swap.
func (s *Service) updateNamespaceRecord(ctx context.Context, ns string, change func(policy.Record) error) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 10; attempt++ {
		r, err := s.namespaceRecord(ctx, t, n)
		if err != nil {
			return err
		}
		if err := change(r); err != nil {
			return err
		}
		b, _ := json.Marshal(r)
		var pol NamespacePolicies
		if err := json.Unmarshal(b, &pol); err != nil {
			return err
		}
		err = s.setNamespaceSeen(ctx, ns, pol)
		if errors.Is(err, ErrServiceNotReady) {
			continue
		}
		return err
	}
	return fmt.Errorf("%w: namespace %s keeps changing", ErrServiceNotReady, ns)
}

// The exported API (the admin REST layer's PolicyService).

// NamespacePolicy returns a namespace's policy named by its REST path element (null: not
// set; the backlog quota: the map by type).
func (s *Service) NamespacePolicy(ctx context.Context, ns, path string) (json.RawMessage, error) {
	p, err := policy.Find(path, false)
	if err != nil {
		return nil, err
	}
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	r, err := s.namespaceRecord(ctx, t, n)
	if err != nil {
		return nil, err
	}
	if v := r.Value(p, p.NSKey, s.cfg.Cluster); v != nil {
		return v, nil
	}
	return policy.NullJSON(p), nil
}

// SetNamespacePolicy checks body and sets a namespace's policy (qualifier: the backlog quota
// type). A bad body or name is ErrInvalidArgument and changes nothing.
func (s *Service) SetNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte) error {
	return s.changeNamespacePolicy(ctx, ns, path, qualifier, body, false)
}

// RemoveNamespacePolicy removes a namespace's policy (qualifier: the backlog quota type).
func (s *Service) RemoveNamespacePolicy(ctx context.Context, ns, path, qualifier string) error {
	return s.changeNamespacePolicy(ctx, ns, path, qualifier, nil, true)
}

func (s *Service) changeNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte, remove bool) error {
	p, v, q, err := policy.CheckChange(path, false, qualifier, body, remove, s.cfg.Cluster)
	if err != nil {
		return err
	}
	if err := s.updateNamespaceRecord(ctx, ns, func(r policy.Record) error { return r.Set(p, p.NSKey, q, v) }); err != nil {
		return err
	}
	s.reapplyNamespace(ctx, ns)
	return nil
}

// TopicPolicy returns a topic's own policy named by its REST path element (null: not set)
// or, if applied, the one in force (topic, else namespace, else the broker's default).
func (s *Service) TopicPolicy(ctx context.Context, topic, path string, applied bool) (json.RawMessage, error) {
	p, err := policy.Find(path, true)
	if err != nil {
		return nil, err
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, err
	}
	if err := s.ownedElsewhere(ctx, n); err != nil {
		return nil, err
	}
	if !applied {
		r, err := s.topicRecord(ctx, n)
		if err != nil {
			return nil, err
		}
		if v := r.Value(p, p.TopicKey, ""); v != nil {
			return v, nil
		}
		return policy.NullJSON(p), nil
	}
	v, err := s.appliedValue(ctx, n, p)
	if err != nil || v != nil {
		return v, err
	}
	return policy.NullJSON(p), nil
}

// SetTopicPolicy checks body and sets a topic's policy (qualifier: the backlog quota type).
func (s *Service) SetTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte) error {
	return s.changeTopicPolicy(ctx, topic, path, qualifier, body, false)
}

// RemoveTopicPolicy removes a topic's policy, so that the namespace's applies.
func (s *Service) RemoveTopicPolicy(ctx context.Context, topic, path, qualifier string) error {
	return s.changeTopicPolicy(ctx, topic, path, qualifier, nil, true)
}

func (s *Service) changeTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte, remove bool) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	p, v, q, err := policy.CheckChange(path, true, qualifier, body, remove, s.cfg.Cluster)
	if err != nil {
		return err
	}
	if err := s.res.CheckNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return err
	}
	if err := s.ownedElsewhere(ctx, n); err != nil {
		return err
	}
	if err := s.updateTopicRecord(ctx, n, func(r policy.Record) error { return r.Set(p, p.TopicKey, q, v) }); err != nil {
		return err
	}
	s.reapplyTopic(ctx, n.Base())
	return nil
}

// ownedElsewhere returns *NotOwnerError if another broker owns topic n's bundle: a topic
// policy request is redirected there, as Pulsar's validateTopicOwnership does (a topic no
// broker owns is served here).
func (s *Service) ownedElsewhere(ctx context.Context, n topicname.Name) error {
	b, err := s.bundleOf(ctx, n)
	if err != nil {
		return nil //nolint:nilerr // no bundle known: nothing to redirect to
	}
	err = s.bundleOwner(ctx, b)
	if no := (*NotOwnerError)(nil); errors.As(err, &no) {
		no.Topic = n.String()
		return no
	}
	return nil
}

// appliedValue is the value of p in force on topic n: the topic's, else the namespace's,
// else the broker's default (nil: none).
func (s *Service) appliedValue(ctx context.Context, n topicname.Name, p *policy.Policy) (json.RawMessage, error) {
	tr, nr, err := s.policyRecords(ctx, n)
	if err != nil {
		return nil, err
	}
	return s.pol.Pick(tr, nr, p), nil
}

func (s *Service) policyRecords(ctx context.Context, n topicname.Name) (tr, nr policy.Record, err error) {
	if tr, err = s.topicRecord(ctx, n); err != nil {
		return nil, nil, err
	}
	nr, err = s.namespaceRecord(ctx, n.Tenant, n.Namespace)
	return tr, nr, err
}

// resolve returns the policies in force on topic n (package policy resolves them from the
// topic's and the namespace's records).
func (s *Service) resolve(ctx context.Context, n topicname.Name) (policy.Resolved, error) {
	tr, nr, err := s.policyRecords(ctx, n)
	if err != nil {
		return policy.Resolved{}, err
	}
	return s.pol.Resolve(tr, nr, n), nil
}

// NamespacePolicyPaths and TopicPolicyPaths list the REST path elements of the policies at
// each level.
func NamespacePolicyPaths() []string { return policy.NamespacePaths() }

// TopicPolicyPaths: see NamespacePolicyPaths.
func TopicPolicyPaths() []string { return policy.TopicPaths() }
