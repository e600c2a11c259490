package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/schemareg"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// The schema registry is package broker/schemareg; the root gives it the policy records
// through schemaPolicies and holds it as Service.schemas.

// newSchemaRegistry returns the schema registry of s (s.res must be set).
func newSchemaRegistry(s *Service) *schemareg.Registry {
	return schemareg.New(schemareg.Config{Store: s.store, Policies: schemaPolicies{s},
		DefaultStrategy: s.cfg.SchemaCompatibilityStrategy, ValidationEnforced: s.cfg.SchemaValidationEnforced})
}

// schemaPolicies is the Service as the schema registry's Policies.
type schemaPolicies struct{ s *Service }

var _ schemareg.Policies = schemaPolicies{}

func (p schemaPolicies) NamespacePolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	return p.s.res.namespacePolicies(ctx, tenant, ns)
}

func (p schemaPolicies) TopicRecord(ctx context.Context, n topicname.Name) (policy.Record, error) {
	return p.s.TopicRecord(ctx, n)
}

func (p schemaPolicies) UpdateTopicRecord(ctx context.Context, n topicname.Name, change func(policy.Record) error) error {
	return p.s.UpdateTopicRecord(ctx, n, change)
}
