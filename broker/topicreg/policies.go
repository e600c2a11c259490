package topicreg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Policies (Pulsar's namespace and topic policies). Each policy is stored at two levels —
// the namespace record (metadata.NamespaceKey, Pulsar's Policies JSON keys) and the topic
// policy record (metadata.TopicFeaturePolicyKey, Pulsar's TopicPolicies JSON keys) — and
// resolved topic, then namespace, then the broker's configuration (policydefaults.go).
// Changes reach the loaded topics through a watch of both prefixes (policyapply.go).

// Checking bodies.

// Records.

// namespaceRecord returns a namespace's policies by Pulsar key.
func (reg *Registry) namespaceRecord(ctx context.Context, t, ns string) (policy.Record, error) {
	pol, err := reg.res.NamespacePolicies(ctx, t, ns)
	if err != nil {
		return nil, err
	}
	return policy.RecordOf(pol)
}

// updateNamespaceRecord changes a namespace's policies (by Pulsar key) with a
// compare-and-swap.
func (reg *Registry) updateNamespaceRecord(ctx context.Context, ns string, change func(policy.Record) error) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 10; attempt++ {
		r, err := reg.namespaceRecord(ctx, t, n)
		if err != nil {
			return err
		}
		if err := change(r); err != nil {
			return err
		}
		b, _ := json.Marshal(r)
		var pol api.NamespacePolicies
		if err := json.Unmarshal(b, &pol); err != nil {
			return err
		}
		err = reg.res.SetNamespaceSeen(ctx, ns, pol)
		if errors.Is(err, api.ErrServiceNotReady) {
			continue
		}
		return err
	}
	return fmt.Errorf("%w: namespace %s keeps changing", api.ErrServiceNotReady, ns)
}

// The exported API (the admin REST layer's PolicyService).

// NamespacePolicy returns a namespace's policy named by its REST path element (null: not
// set; the backlog quota: the map by type).
func (reg *Registry) NamespacePolicy(ctx context.Context, ns, path string) (json.RawMessage, error) {
	p, err := policy.Find(path, false)
	if err != nil {
		return nil, err
	}
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	r, err := reg.namespaceRecord(ctx, t, n)
	if err != nil {
		return nil, err
	}
	if v := r.Value(p, p.NSKey, reg.cfg.Cluster); v != nil {
		return v, nil
	}
	return policy.NullJSON(p), nil
}

// SetNamespacePolicy checks body and sets a namespace's policy (qualifier: the backlog quota
// type). A bad body or name is api.ErrInvalidArgument and changes nothing.
func (reg *Registry) SetNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte) error {
	return reg.changeNamespacePolicy(ctx, ns, path, qualifier, body, false)
}

// RemoveNamespacePolicy removes a namespace's policy (qualifier: the backlog quota type).
func (reg *Registry) RemoveNamespacePolicy(ctx context.Context, ns, path, qualifier string) error {
	return reg.changeNamespacePolicy(ctx, ns, path, qualifier, nil, true)
}

func (reg *Registry) changeNamespacePolicy(ctx context.Context, ns, path, qualifier string, body []byte, remove bool) error {
	p, v, q, err := policy.CheckChange(path, false, qualifier, body, remove, reg.cfg.Cluster)
	if err != nil {
		return err
	}
	if err := reg.updateNamespaceRecord(ctx, ns, func(r policy.Record) error { return r.Set(p, p.NSKey, q, v) }); err != nil {
		return err
	}
	reg.reapplyNamespace(ctx, ns)
	return nil
}

// TopicPolicy returns a topic's own policy named by its REST path element (null: not set)
// or, if applied, the one in force (topic, else namespace, else the broker's default).
func (reg *Registry) TopicPolicy(ctx context.Context, topic, path string, applied bool) (json.RawMessage, error) {
	p, err := policy.Find(path, true)
	if err != nil {
		return nil, err
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil, err
	}
	if err := reg.ownedElsewhere(ctx, n); err != nil {
		return nil, err
	}
	if !applied {
		r, err := reg.TopicRecord(ctx, n)
		if err != nil {
			return nil, err
		}
		if v := r.Value(p, p.TopicKey, ""); v != nil {
			return v, nil
		}
		return policy.NullJSON(p), nil
	}
	v, err := reg.appliedValue(ctx, n, p)
	if err != nil || v != nil {
		return v, err
	}
	return policy.NullJSON(p), nil
}

// SetTopicPolicy checks body and sets a topic's policy (qualifier: the backlog quota type).
func (reg *Registry) SetTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte) error {
	return reg.changeTopicPolicy(ctx, topic, path, qualifier, body, false)
}

// RemoveTopicPolicy removes a topic's policy, so that the namespace's applies.
func (reg *Registry) RemoveTopicPolicy(ctx context.Context, topic, path, qualifier string) error {
	return reg.changeTopicPolicy(ctx, topic, path, qualifier, nil, true)
}

func (reg *Registry) changeTopicPolicy(ctx context.Context, topic, path, qualifier string, body []byte, remove bool) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	p, v, q, err := policy.CheckChange(path, true, qualifier, body, remove, reg.cfg.Cluster)
	if err != nil {
		return err
	}
	if err := reg.res.CheckNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return err
	}
	if err := reg.ownedElsewhere(ctx, n); err != nil {
		return err
	}
	if err := reg.UpdateTopicRecord(ctx, n, func(r policy.Record) error { return r.Set(p, p.TopicKey, q, v) }); err != nil {
		return err
	}
	reg.reapplyTopic(ctx, n.Base())
	return nil
}

// ownedElsewhere returns *api.NotOwnerError if another broker owns topic n's bundle: a topic
// policy request is redirected there, as Pulsar's validateTopicOwnership does (a topic no
// broker owns is served here).
func (reg *Registry) ownedElsewhere(ctx context.Context, n topicname.Name) error {
	b, err := reg.own.BundleOf(ctx, n)
	if err != nil {
		return nil //nolint:nilerr // no bundle known: nothing to redirect to
	}
	err = reg.own.BundleOwner(ctx, b)
	if no := (*api.NotOwnerError)(nil); errors.As(err, &no) {
		no.Topic = n.String()
		return no
	}
	return nil
}

// appliedValue is the value of p in force on topic n: the topic's, else the namespace's,
// else the broker's default (nil: none).
func (reg *Registry) appliedValue(ctx context.Context, n topicname.Name, p *policy.Policy) (json.RawMessage, error) {
	tr, nr, err := reg.policyRecords(ctx, n)
	if err != nil {
		return nil, err
	}
	return reg.pol.Pick(tr, nr, p), nil
}

func (reg *Registry) policyRecords(ctx context.Context, n topicname.Name) (tr, nr policy.Record, err error) {
	if tr, err = reg.TopicRecord(ctx, n); err != nil {
		return nil, nil, err
	}
	nr, err = reg.namespaceRecord(ctx, n.Tenant, n.Namespace)
	return tr, nr, err
}

// resolve returns the policies in force on topic n (package policy resolves them from the
// topic's and the namespace's records).
func (reg *Registry) resolve(ctx context.Context, n topicname.Name) (policy.Resolved, error) {
	tr, nr, err := reg.policyRecords(ctx, n)
	if err != nil {
		return policy.Resolved{}, err
	}
	return reg.pol.Resolve(tr, nr, n), nil
}

// NamespacePolicyPaths and TopicPolicyPaths list the REST path elements of the policies at
// each level.
func NamespacePolicyPaths() []string { return policy.NamespacePaths() }

// TopicPolicyPaths: see NamespacePolicyPaths.
func TopicPolicyPaths() []string { return policy.TopicPaths() }

// ReplicatorRate resolves topic t's replicator dispatch rate (Pulsar's
// replicatorDispatchRate: the topic's, else this cluster's entry of the namespace's), per
// second; 0: off.
func (reg *Registry) ReplicatorRate(ctx context.Context, n topicname.Name) (msgs, bytes int64) {
	tr, err := reg.TopicRecord(ctx, n)
	if err != nil {
		return 0, 0
	}
	np, err := reg.res.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return 0, 0
	}
	nr, err := policy.RecordOf(np)
	if err != nil {
		return 0, 0
	}
	var dr api.DispatchRate
	if !reg.pol.DecodeApplied(tr, nr, "replicatorDispatchRate", &dr) {
		return 0, 0
	}
	period := int64(max(dr.RatePeriodInSecond, 1))
	return max(dr.DispatchThrottlingRateInMsg, 0) / period, max(dr.DispatchThrottlingRateInByte, 0) / period
}
