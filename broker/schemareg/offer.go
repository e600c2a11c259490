package schemareg

import (
	"context"
	"fmt"

	"github.com/magnetar-io/magnetar/broker/schema"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// topicPolicy is what decides whether a topic takes a new schema.
type topicPolicy struct {
	strategy   schema.Strategy
	autoUpdate bool // new schemas may be registered by producers and consumers
	enforced   bool // producers without a schema are refused on a topic with one
}

// policyOf resolves the schema policy of topic n: the topic-level strategy, else the
// namespace's (schema_compatibility_strategy, else the older
// schema_auto_update_compatibility_strategy), else Config.DefaultStrategy, else FULL; and
// validation enforcement: the topic-level schemaValidationEnforced, else the namespace's,
// else Config.ValidationEnforced.
func (r *Registry) policyOf(ctx context.Context, n topicname.Name) (topicPolicy, error) {
	pol := topicPolicy{autoUpdate: true}
	ns, err := r.cfg.Policies.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return pol, err
	}
	if ns.AllowAutoUpdateSchema != nil {
		pol.autoUpdate = *ns.AllowAutoUpdateSchema
	}
	if ns.SchemaValidationEnforced != nil {
		pol.enforced = *ns.SchemaValidationEnforced
	} else {
		pol.enforced = r.cfg.ValidationEnforced
	}
	tp, err := r.cfg.Policies.TopicRecord(ctx, n)
	if err != nil {
		return pol, err
	}
	if v := tp.SchemaValidationEnforced(); v != nil {
		pol.enforced = *v
	}
	legacy, _ := ns.Other["schema_auto_update_compatibility_strategy"].(string)
	for _, name := range []string{tp.SchemaStrategy(), ns.SchemaCompatibility, legacy, r.cfg.DefaultStrategy} {
		if st, err := schema.ParseStrategy(name); err == nil && st != schema.Undefined {
			pol.strategy = st
			return pol, nil
		}
	}
	pol.strategy = schema.Full
	return pol, nil
}

// Offer registers (or checks) schema sc for topic n under n's policy and returns its
// version (nil: none, as for a consumer's schema that is only checked). A nil schema is
// checked against schema validation enforcement (Produce only). A producer's new version
// is stored before Offer returns.
func (r *Registry) Offer(ctx context.Context, n topicname.Name, sc *pb.Schema, use Use) ([]byte, error) {
	if sc == nil {
		if use != Produce {
			return nil, nil
		}
		return nil, r.checkProducerWithout(ctx, n)
	}
	pol, err := r.policyOf(ctx, n)
	if err != nil {
		return nil, err
	}
	return r.getOrCreate(ctx, n, sc, pol, use)
}

// Proto returns topic n's schema of version (empty: the latest) in the protocol's form and
// its encoded version; a missing one wraps api.ErrSchemaNotFound. It answers from the
// cache when it can.
func (r *Registry) Proto(ctx context.Context, n topicname.Name, version []byte) (*pb.Schema, []byte, error) {
	rec, err := r.get(ctx, n, version, false)
	if err != nil {
		return nil, nil, err
	}
	return rec.toProto(), EncodeVersion(rec.Version), nil
}

// checkProducerWithout refuses a producer without a schema on a topic with schemas when
// the policy enforces schema validation. A topic without schemas (the common case, from the
// registry's cache) needs no policy.
func (r *Registry) checkProducerWithout(ctx context.Context, n topicname.Name) error {
	vs, err := r.versions(ctx, prefixOf(n), false)
	if err != nil || len(live(vs)) == 0 {
		return err
	}
	pol, err := r.policyOf(ctx, n)
	if err != nil || !pol.enforced {
		return err
	}
	return fmt.Errorf("%w: Producers cannot connect or send message without a schema to topics with a schema "+
		"if SchemaValidationEnforced is enabled", schema.ErrIncompatible)
}
