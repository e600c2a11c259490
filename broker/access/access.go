// Package access decides whether a role may do something on the broker's tenants,
// namespaces and topics: the binary protocol's commands (Topic, Namespace) and the admin
// API's requests (Admin). It reads the tenant's admin roles and the namespace's grants
// (Pulsar's auth_policies in the namespace record) through Records and asks
// auth.Authorizer for the verdict; a tenant or namespace that does not exist, or whose name
// is not valid, refuses everyone but superusers (so a role that may not act is told 403,
// never that the name it tried is malformed). The one exception is Pulsar's: an admin
// request naming a valid tenant that does not exist is answered api.ErrTenantNotFound (404
// "Tenant does not exist"), as Pulsar's tenant-admin check looks the tenant up first.
// Refusals are *Refusal errors, which wrap auth.ErrNotAuthorized (AuthorizationError, 403).
//
// A namespace's subscription_auth_roles (auth.Policies.Subscriptions) restrict who may
// consume through a subscription: when a subscription's list is set and not empty, only its
// roles (and superusers and the tenant's admins) may (Subscription).
//
// Audit (audit.go) writes the audit lines of refused authentications and authorizations,
// on the binary protocol and HTTP, rate-limited (package internal/ratelog).
package access

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Records is what access reads of the broker's records (package broker/resources).
type Records interface {
	Tenant(ctx context.Context, name string) (api.TenantInfo, error)
	NamespacePolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error)
}

// Checker checks roles against Authz (nil or disabled: Admin allows everything; Topic and
// Namespace are called only with authorization on) over Records.
type Checker struct {
	Authz   *auth.Authorizer
	Records Records
}

// Topic checks that role may perform act on topic n (a partition is checked as
// its partitioned topic, as Pulsar does). It reads the tenant's admin roles and the
// namespace's grants; a tenant or namespace that does not exist refuses everyone but
// superusers. The error wraps auth.ErrNotAuthorized (AuthorizationError, 403).
func (c Checker) Topic(ctx context.Context, role string, n topicname.Name, act auth.Action) error {
	a := c.Authz
	if a.IsSuperUser(role) {
		return nil
	}
	base := n.Base()
	admins, pol, err := c.grants(ctx, base.Tenant, base.Namespace)
	if err != nil {
		return refuseInvalid(err, role, string(act), base.String())
	}
	if !a.AllowTopic(role, admins, pol, base.String(), act) {
		return notAuthorized(role, string(act), base.String())
	}
	return nil
}

// Subscription checks that role may consume topic n through subscription sub (Topic with
// auth.ActionConsume, then the namespace's subscription_auth_roles): when sub's list of
// roles is set and not empty, a role outside it is refused unless it is a superuser or an
// admin of the tenant, as Pulsar's canConsume does.
func (c Checker) Subscription(ctx context.Context, role string, n topicname.Name, sub string) error {
	if err := c.Topic(ctx, role, n, auth.ActionConsume); err != nil {
		return err
	}
	a := c.Authz
	if a.IsSuperUser(role) || sub == "" {
		return nil
	}
	base := n.Base()
	admins, pol, err := c.grants(ctx, base.Tenant, base.Namespace)
	if err != nil {
		return refuseInvalid(err, role, "consume", base.String())
	}
	if roles := pol.Subscriptions[sub]; len(roles) > 0 && !a.IsTenantAdmin(role, admins) && !slices.Contains(roles, role) {
		return notAuthorized(role, "consume through subscription "+clip(sub, 256), base.String())
	}
	return nil
}

// Namespace checks that role may act on the namespace as a whole (list topics).
func (c Checker) Namespace(ctx context.Context, role, tenant, ns string) error {
	a := c.Authz
	if a.IsSuperUser(role) {
		return nil
	}
	admins, pol, err := c.grants(ctx, tenant, ns)
	if err != nil {
		return refuseInvalid(err, role, "list topics", tenant+"/"+ns)
	}
	if !a.AllowNamespace(role, admins, pol) {
		return notAuthorized(role, "list topics", tenant+"/"+ns)
	}
	return nil
}

// grants reads what authorization needs; a missing tenant or namespace grants nothing.
func (c Checker) grants(ctx context.Context, tenant, ns string) (admins []string, pol auth.Policies, err error) {
	ti, err := c.Records.Tenant(ctx, tenant)
	if isNotFound(err) {
		return nil, auth.Policies{}, nil
	}
	if err != nil {
		return nil, auth.Policies{}, err
	}
	np, err := c.Records.NamespacePolicies(ctx, tenant, ns)
	if isNotFound(err) {
		return ti.AdminRoles, auth.Policies{}, nil
	}
	if err != nil {
		return nil, auth.Policies{}, err
	}
	return ti.AdminRoles, np.Auth, nil
}

// Refusal is an authorization refusal: Role may not do Action on Resource. It wraps
// auth.ErrNotAuthorized; its text names the three (never a credential).
type Refusal struct {
	Role     string // "(anonymous)" for a principal without a role
	Action   string // e.g. "produce", "administer", "list topics"
	Resource string // e.g. a topic's full name, "tenant t", "the cluster"
}

func (e *Refusal) Error() string {
	return fmt.Sprintf("%v: role %s may not %s on %s", auth.ErrNotAuthorized, e.Role, e.Action, e.Resource)
}

// Unwrap makes errors.Is(err, auth.ErrNotAuthorized) hold.
func (e *Refusal) Unwrap() error { return auth.ErrNotAuthorized }

func notAuthorized(role, what, on string) error {
	if role == "" {
		role = "(anonymous)"
	}
	return &Refusal{Role: clip(role, 256), Action: what, Resource: clip(on, 256)}
}

// refuseInvalid turns an invalid name met while reading a non-superuser's grants into a
// refusal (nothing can be granted on a name that cannot exist); other errors stay.
func refuseInvalid(err error, role, what, on string) error {
	if errors.Is(err, topicname.ErrInvalid) {
		return notAuthorized(role, what, on)
	}
	return err
}

// Admin checks an admin request of the principal in ctx (auth.FromContext): op is
// what the request needs on tenant (and namespace "tenant/ns", and topic when given).
// With authorization off everything is allowed.
func (c Checker) Admin(ctx context.Context, op api.AdminOp, tenant, ns, topic string) error {
	a := c.Authz
	if !a.Enabled() {
		return nil
	}
	p, _ := auth.FromContext(ctx)
	if a.IsSuperUser(p.Role) {
		return nil
	}
	switch {
	case op == api.OpAuthenticated:
		return nil
	case op == api.OpSuperUser, tenant == "": // a request about no tenant is the cluster's
		return notAuthorized(p.Role, "do this (superusers only)", "the cluster")
	}
	if _, err := c.Records.Tenant(ctx, tenant); errors.Is(err, api.ErrTenantNotFound) && topicname.CheckTenant(tenant) == nil {
		return fmt.Errorf("%w: %s", api.ErrTenantNotFound, tenant) // Pulsar's 404, before the role check
	}
	admins, pol, err := c.grants(ctx, tenant, namespaceOf(ns))
	if err != nil {
		return refuseInvalid(err, p.Role, "administer", "tenant "+tenant)
	}
	if a.IsTenantAdmin(p.Role, admins) {
		return nil
	}
	if op == api.OpTenantAdmin || topic == "" {
		return notAuthorized(p.Role, "administer", "tenant "+tenant)
	}
	n, err := topicname.Parse(topic)
	if err != nil {
		return notAuthorized(p.Role, "look up", "an invalid topic name")
	}
	act := auth.ActionLookup
	if op == api.OpConsume {
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
	return errors.Is(err, api.ErrTenantNotFound) || errors.Is(err, api.ErrNamespaceNotFound)
}
