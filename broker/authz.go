package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// authorizeTopic checks that role may perform act on topic n (a partition is checked as
// its partitioned topic, as Pulsar does). It reads the tenant's admin roles and the
// namespace's grants; a tenant or namespace that does not exist refuses everyone but
// superusers. The error wraps auth.ErrNotAuthorized (AuthorizationError, 403).
func (s *Service) authorizeTopic(ctx context.Context, role string, n topicname.Name, act auth.Action) error {
	a := s.cfg.Authz
	if a.IsSuperUser(role) {
		return nil
	}
	base := n.Base()
	admins, pol, err := s.grants(ctx, base.Tenant, base.Namespace)
	if err != nil {
		return err
	}
	if !a.AllowTopic(role, admins, pol, base.String(), act) {
		return notAuthorized(role, string(act), base.String())
	}
	return nil
}

// authorizeNamespace checks that role may act on the namespace as a whole (list topics).
func (s *Service) authorizeNamespace(ctx context.Context, role, tenant, ns string) error {
	a := s.cfg.Authz
	if a.IsSuperUser(role) {
		return nil
	}
	admins, pol, err := s.grants(ctx, tenant, ns)
	if err != nil {
		return err
	}
	if !a.AllowNamespace(role, admins, pol) {
		return notAuthorized(role, "list topics", tenant+"/"+ns)
	}
	return nil
}

// grants reads what authorization needs; a missing tenant or namespace grants nothing.
func (s *Service) grants(ctx context.Context, tenant, ns string) (admins []string, pol auth.Policies, err error) {
	ti, err := s.res.Tenant(ctx, tenant)
	if isNotFound(err) {
		return nil, auth.Policies{}, nil
	}
	if err != nil {
		return nil, auth.Policies{}, err
	}
	np, err := s.res.NamespacePolicies(ctx, tenant, ns)
	if isNotFound(err) {
		return ti.AdminRoles, auth.Policies{}, nil
	}
	if err != nil {
		return nil, auth.Policies{}, err
	}
	return ti.AdminRoles, np.Auth, nil
}

func notAuthorized(role, what, on string) error {
	if role == "" {
		role = "(anonymous)"
	}
	return fmt.Errorf("%w: role %s may not %s on %s", auth.ErrNotAuthorized, role, what, on)
}

// AuthorizeAdmin checks an admin request of the principal in ctx (auth.FromContext): op is
// what the request needs on tenant (and namespace "tenant/ns", and topic when given).
// With authorization off everything is allowed.
func (s *Service) AuthorizeAdmin(ctx context.Context, op AdminOp, tenant, ns, topic string) error {
	a := s.cfg.Authz
	if !a.Enabled() {
		return nil
	}
	p, _ := auth.FromContext(ctx)
	if a.IsSuperUser(p.Role) {
		return nil
	}
	switch op {
	case OpAuthenticated:
		return nil
	case OpSuperUser:
		return notAuthorized(p.Role, "do this (superusers only)", "the cluster")
	}
	admins, pol, err := s.grants(ctx, tenant, namespaceOf(ns))
	if err != nil {
		return err
	}
	if a.IsTenantAdmin(p.Role, admins) {
		return nil
	}
	if op == OpTenantAdmin || topic == "" {
		return notAuthorized(p.Role, "administer", "tenant "+tenant)
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	act := auth.ActionLookup
	if op == OpConsume {
		act = auth.ActionConsume
	}
	if !a.AllowTopic(p.Role, admins, pol, n.Base().String(), act) {
		return notAuthorized(p.Role, string(act), n.Base().String())
	}
	return nil
}

func namespaceOf(ns string) string {
	_, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return ""
	}
	return n
}

func isNotFound(err error) bool {
	return errors.Is(err, ErrTenantNotFound) || errors.Is(err, ErrNamespaceNotFound)
}
