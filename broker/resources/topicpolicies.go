package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// TopicPolicies returns the policy record of topic n's base topic (Pulsar's TopicPolicies
// JSON, by key; empty if it has none). Package policy reads it as a policy.Record.
func (r *Records) TopicPolicies(ctx context.Context, n topicname.Name) (map[string]json.RawMessage, error) {
	b := n.Base()
	rec := map[string]json.RawMessage{}
	kv, err := r.store.Get(ctx, metadata.TopicFeaturePolicyKey(b.Tenant, b.Namespace, b.Local))
	if errors.Is(err, metadata.ErrNotFound) {
		return rec, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return nil, fmt.Errorf("topic policies of %s: %w", n, err)
	}
	return rec, nil
}

// UpdateTopicPolicies changes the policy record of topic n's base topic with a
// compare-and-swap: change edits the record in place (an error leaves it unchanged).
func (r *Records) UpdateTopicPolicies(ctx context.Context, n topicname.Name, change func(map[string]json.RawMessage) error) error {
	n = n.Base()
	key := metadata.TopicFeaturePolicyKey(n.Tenant, n.Namespace, n.Local)
	for attempt := 0; attempt < 10; attempt++ {
		rec := map[string]json.RawMessage{}
		ver := metadata.NotExists
		kv, err := r.store.Get(ctx, key)
		switch {
		case err == nil:
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				return fmt.Errorf("topic policies of %s: %w", n, err)
			}
			ver = kv.Version
		case !errors.Is(err, metadata.ErrNotFound):
			return err
		}
		if err := change(rec); err != nil {
			return err
		}
		b, _ := json.Marshal(rec)
		_, err = r.store.Put(ctx, key, b, ver)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return err
	}
	return fmt.Errorf("%w: topic policies of %s keep changing", api.ErrServiceNotReady, n)
}

// SetNamespaceSeen sets namespace ns's record and waits (at most StoreWait) until the
// watched copy of it shows the change: what the admin API sets, the broker's next lookup
// or topic creation reads (the writer reads its write). The change is stored even if the
// wait ends first.
func (r *Records) SetNamespaceSeen(ctx context.Context, ns string, p api.NamespacePolicies) error {
	v, err := r.SetNamespace(ctx, ns, p)
	if err != nil {
		return err
	}
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, StoreWait)
	defer cancel()
	_ = r.WaitNamespace(wctx, t, n, v)
	return nil
}
