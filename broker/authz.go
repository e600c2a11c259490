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
	ti, err := s.res.tenant(ctx, tenant)
	if isNotFound(err) {
		return nil, auth.Policies{}, nil
	}
	if err != nil {
		return nil, auth.Policies{}, err
	}
	np, err := s.res.namespacePolicies(ctx, tenant, ns)
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

// AdminOp is what an admin request needs.
type AdminOp int

const (
	// OpAuthenticated: any authenticated principal (cluster list, health).
	OpAuthenticated AdminOp = iota + 1
	// OpSuperUser: superusers only (tenant creation and deletion, tenant list).
	OpSuperUser
	// OpTenantAdmin: superusers and the tenant's admin roles (namespaces, topics,
	// permissions).
	OpTenantAdmin
	// OpLookup: also roles that may produce or consume the topic (lookup, stats).
	OpLookup
	// OpConsume: also roles that may consume the topic (subscription operations).
	OpConsume
)

// lookupAuthorized looks topic up for a client allowed to produce or consume it.
func (c *conn) lookupAuthorized(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	if err := c.authorizeName(ctx, topic, auth.ActionLookup); err != nil {
		return LookupResult{}, err
	}
	return c.s.lookupTopic(ctx, topic, authoritative)
}

// partitionsAuthorized answers PARTITIONED_METADATA for a client allowed to look topic up.
func (c *conn) partitionsAuthorized(ctx context.Context, topic string) (int, error) {
	if err := c.authorizeName(ctx, topic, auth.ActionLookup); err != nil {
		return 0, err
	}
	return c.s.partitionsAutoCreate(ctx, topic)
}

func (c *conn) authorizeName(ctx context.Context, topic string, act auth.Action) error {
	if !c.s.cfg.Authz.Enabled() {
		return nil
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	return c.authorize(ctx, n, act)
}

// authorize checks the connection's role for act on n; on a proxied connection (a proxy
// role forwarding an original principal) the proxy's own role must be allowed too, unless
// it is a superuser.
func (c *conn) authorize(ctx context.Context, n topicname.Name, act auth.Action) error {
	if err := c.s.authorizeTopic(ctx, c.auth.role, n, act); err != nil {
		return err
	}
	if c.auth.proxy != "" && !c.s.cfg.Authz.IsSuperUser(c.auth.proxy) {
		return c.s.authorizeTopic(ctx, c.auth.proxy, n, act)
	}
	return nil
}

// authorizeNamespace checks the connection's role (and proxy role) on a namespace.
func (c *conn) authorizeNamespace(ctx context.Context, tenant, ns string) error {
	if err := c.s.authorizeNamespace(ctx, c.auth.role, tenant, ns); err != nil {
		return err
	}
	if c.auth.proxy != "" && !c.s.cfg.Authz.IsSuperUser(c.auth.proxy) {
		return c.s.authorizeNamespace(ctx, c.auth.proxy, tenant, ns)
	}
	return nil
}

func isNotFound(err error) bool {
	return errors.Is(err, ErrTenantNotFound) || errors.Is(err, ErrNamespaceNotFound)
}
