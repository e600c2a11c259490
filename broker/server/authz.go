package server

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Authorization of a connection's commands (Config.Authz on): the connection's role, and on
// a proxied connection the proxy's role too, are checked by the Backend's Authorizer.

// lookupAuthorized looks topic up for a client allowed to produce or consume it.
func (c *conn) lookupAuthorized(ctx context.Context, topic string, authoritative bool) (api.LookupResult, error) {
	if err := c.authorizeName(ctx, topic, auth.ActionLookup); err != nil {
		return api.LookupResult{}, err
	}
	return c.b.Lookup(ctx, topic, authoritative)
}

// partitionsAuthorized answers PARTITIONED_METADATA for a client allowed to look topic up.
func (c *conn) partitionsAuthorized(ctx context.Context, topic string) (int, error) {
	if err := c.authorizeName(ctx, topic, auth.ActionLookup); err != nil {
		return 0, err
	}
	return c.b.PartitionedMetadata(ctx, topic)
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
	return c.authorizeSub(ctx, n, act, "")
}

// authorizeSub is authorize, for a consumer (sub its subscription, act consume) with the
// namespace's subscription roles checked too (Authorizer.AuthorizeSubscription).
func (c *conn) authorizeSub(ctx context.Context, n topicname.Name, act auth.Action, sub string) error {
	if !c.s.cfg.Authz.Enabled() {
		return nil
	}
	check := func(role string) error {
		if sub != "" {
			return c.b.AuthorizeSubscription(ctx, role, n, sub)
		}
		return c.b.AuthorizeTopic(ctx, role, n, act)
	}
	if err := check(c.auth.role); err != nil {
		c.auditRefusal(c.auth.role, string(act), n.String(), err)
		return err
	}
	if c.auth.proxy != "" && !c.s.cfg.Authz.IsSuperUser(c.auth.proxy) {
		err := check(c.auth.proxy)
		c.auditRefusal(c.auth.proxy, string(act), n.String(), err)
		return err
	}
	return nil
}

// auditRefusal writes the audit line of an authorization refusal (err nil, or another
// error: nothing).
func (c *conn) auditRefusal(role, action, resource string, err error) {
	if errors.Is(err, auth.ErrNotAuthorized) {
		c.s.audit.AuthorizationRefused("binary", c.remote, role, action, resource, err)
	}
}

// authorizeNamespace checks the connection's role (and proxy role) on a namespace.
func (c *conn) authorizeNamespace(ctx context.Context, tenant, ns string) error {
	if !c.s.cfg.Authz.Enabled() {
		return nil
	}
	if err := c.b.AuthorizeNamespace(ctx, c.auth.role, tenant, ns); err != nil {
		c.auditRefusal(c.auth.role, "list topics", tenant+"/"+ns, err)
		return err
	}
	if c.auth.proxy != "" && !c.s.cfg.Authz.IsSuperUser(c.auth.proxy) {
		err := c.b.AuthorizeNamespace(ctx, c.auth.proxy, tenant, ns)
		c.auditRefusal(c.auth.proxy, "list topics", tenant+"/"+ns, err)
		return err
	}
	return nil
}
