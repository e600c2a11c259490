package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/auth"
)

// Permission grants live in the namespace record's auth_policies (package resources).

// NamespacePermissions returns the roles granted actions on namespace "tenant/ns".
func (s *Service) NamespacePermissions(ctx context.Context, ns string) (map[string][]auth.Action, error) {
	return s.res.NamespacePermissions(ctx, ns)
}

// GrantNamespacePermission sets role's actions on namespace "tenant/ns" (replacing any).
func (s *Service) GrantNamespacePermission(ctx context.Context, ns, role string, acts []auth.Action) error {
	return s.res.GrantNamespacePermission(ctx, ns, role, acts)
}

// RevokeNamespacePermission removes role's grant on namespace "tenant/ns".
func (s *Service) RevokeNamespacePermission(ctx context.Context, ns, role string) error {
	return s.res.RevokeNamespacePermission(ctx, ns, role)
}

// TopicPermissions returns the roles granted actions on topic: its namespace's grants and
// its own, merged (as Pulsar's topic permissions answer).
func (s *Service) TopicPermissions(ctx context.Context, topic string) (map[string][]auth.Action, error) {
	return s.res.TopicPermissions(ctx, topic)
}

// GrantTopicPermission sets role's actions on topic (a partitioned topic's grant covers its
// partitions).
func (s *Service) GrantTopicPermission(ctx context.Context, topic, role string, acts []auth.Action) error {
	return s.res.GrantTopicPermission(ctx, topic, role, acts)
}

// RevokeTopicPermission removes role's grant on topic (its namespace grant stays).
func (s *Service) RevokeTopicPermission(ctx context.Context, topic, role string) error {
	return s.res.RevokeTopicPermission(ctx, topic, role)
}

// SubscriptionPermissions returns the roles of namespace "tenant/ns"'s subscriptions
// (Pulsar's subscription_auth_roles).
func (s *Service) SubscriptionPermissions(ctx context.Context, ns string) (map[string][]string, error) {
	return s.res.SubscriptionPermissions(ctx, ns)
}

// GrantSubscriptionPermission adds roles to subscription sub's roles in namespace
// "tenant/ns": once set, only they (and superusers and tenant admins) may consume through
// sub (package broker/access).
func (s *Service) GrantSubscriptionPermission(ctx context.Context, ns, sub string, roles []string) error {
	return s.res.GrantSubscriptionPermission(ctx, ns, sub, roles)
}

// RevokeSubscriptionPermission removes role from subscription sub's roles.
func (s *Service) RevokeSubscriptionPermission(ctx context.Context, ns, sub, role string) error {
	return s.res.RevokeSubscriptionPermission(ctx, ns, sub, role)
}

// AuthorizeAdmin checks an admin request of the principal in ctx (auth.FromContext): op is
// what the request needs on tenant (and namespace "tenant/ns", and topic when given).
// With authorization off everything is allowed (package broker/access).
func (s *Service) AuthorizeAdmin(ctx context.Context, op AdminOp, tenant, ns, topic string) error {
	return s.access.Admin(ctx, op, tenant, ns, topic)
}
