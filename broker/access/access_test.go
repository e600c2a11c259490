package access_test

import (
	"context"
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/access"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// records: tenant t (admin role "admin") with namespace t/ns, where roles "consumer" and
// "reader" may consume every topic and role "producer" may produce on t/ns/x only;
// subscription "private" is restricted to role "consumer", "open" has an empty list.
type records struct{}

func (records) Tenant(_ context.Context, name string) (api.TenantInfo, error) {
	if name != "t" {
		return api.TenantInfo{}, api.ErrTenantNotFound
	}
	return api.TenantInfo{AdminRoles: []string{"admin"}}, nil
}

func (records) NamespacePolicies(_ context.Context, tenant, ns string) (api.NamespacePolicies, error) {
	if tenant != "t" || ns != "ns" {
		return api.NamespacePolicies{}, api.ErrNamespaceNotFound
	}
	return api.NamespacePolicies{Auth: auth.Policies{
		Namespace:     map[string][]auth.Action{"consumer": {auth.ActionConsume}, "reader": {auth.ActionConsume}},
		Topics:        map[string]map[string][]auth.Action{"persistent://t/ns/x": {"producer": {auth.ActionProduce}}},
		Subscriptions: map[string][]string{"private": {"consumer"}, "open": {}},
	}}, nil
}

func TestTopicAndNamespace(t *testing.T) {
	c := access.Checker{Authz: auth.NewAuthorizer(true, []string{"root"}), Records: records{}}
	x := topicname.MustParse("persistent://t/ns/x")
	for _, tc := range []struct {
		role  string
		topic topicname.Name
		act   auth.Action
		ok    bool
	}{
		{"root", topicname.MustParse("persistent://nope/nope/y"), auth.ActionProduce, true}, // superuser, even where nothing exists
		{"admin", x, auth.ActionProduce, true},                                              // the tenant's admin
		{"consumer", x, auth.ActionConsume, true},                                           // namespace grant
		{"consumer", x, auth.ActionProduce, false},
		{"producer", x, auth.ActionProduce, true},                                                      // topic grant
		{"producer", topicname.MustParse("persistent://t/ns/x-partition-2"), auth.ActionProduce, true}, // a partition as its topic
		{"producer", topicname.MustParse("persistent://t/ns/y"), auth.ActionProduce, false},
		{"consumer", topicname.MustParse("persistent://t/other/y"), auth.ActionConsume, false}, // no namespace: nothing granted
		{"", x, auth.ActionConsume, false},
	} {
		err := c.Topic(context.Background(), tc.role, tc.topic, tc.act)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, auth.ErrNotAuthorized)) {
			t.Errorf("%q %s on %s: %v, want allowed=%v", tc.role, tc.act, tc.topic, err, tc.ok)
		}
	}
	if err := c.Namespace(context.Background(), "consumer", "t", "ns"); err != nil {
		t.Errorf("consumer lists t/ns: %v", err)
	}
	if err := c.Namespace(context.Background(), "stranger", "t", "ns"); !errors.Is(err, auth.ErrNotAuthorized) {
		t.Errorf("stranger lists t/ns: %v, want ErrNotAuthorized", err)
	}
}

func TestAdmin(t *testing.T) {
	ctx := func(role string) context.Context {
		return auth.WithPrincipal(context.Background(), auth.Principal{Role: role})
	}
	if err := (access.Checker{Records: records{}}).Admin(ctx("anyone"), api.OpSuperUser, "", "", ""); err != nil {
		t.Fatalf("authorization off refused: %v", err)
	}
	c := access.Checker{Authz: auth.NewAuthorizer(true, []string{"root"}), Records: records{}}
	for _, tc := range []struct {
		role              string
		op                api.AdminOp
		tenant, ns, topic string
		ok                bool
	}{
		{"root", api.OpSuperUser, "", "", "", true},
		{"admin", api.OpSuperUser, "t", "", "", false},
		{"anyone", api.OpAuthenticated, "", "", "", true},
		{"admin", api.OpTenantAdmin, "t", "t/ns", "", true},
		{"consumer", api.OpTenantAdmin, "t", "t/ns", "", false},
		{"consumer", api.OpConsume, "t", "t/ns", "persistent://t/ns/x", true},
		{"producer", api.OpConsume, "t", "t/ns", "persistent://t/ns/x", false},
		{"producer", api.OpLookup, "t", "t/ns", "persistent://t/ns/x", true}, // produce implies lookup
		{"consumer", api.OpLookup, "t", "t/ns", "", false},                   // no topic: tenant admins only
		// A non-superuser asking about no tenant, or about a name that is not valid, is
		// refused (403), never told the name is malformed (412).
		{"admin", api.OpTenantAdmin, "", "/", "", false},
		{"admin", api.OpLookup, "", "/", "", false},
		{"consumer", api.OpTenantAdmin, "..", "../ns", "", false},
		{"consumer", api.OpLookup, "t", "t/ns", "persistent://t/ns/a\x00b", false},
		{"root", api.OpTenantAdmin, "", "/", "", true},
	} {
		err := c.Admin(ctx(tc.role), tc.op, tc.tenant, tc.ns, tc.topic)
		if (err == nil) != tc.ok {
			t.Errorf("%q op %v on %s/%s: %v, want allowed=%v", tc.role, tc.op, tc.ns, tc.topic, err, tc.ok)
		}
		var rf *access.Refusal
		if err != nil && (!errors.Is(err, auth.ErrNotAuthorized) || !errors.As(err, &rf) || rf.Role != tc.role) {
			t.Errorf("%q op %v on %s/%s: %v, want a Refusal of the role (403)", tc.role, tc.op, tc.ns, tc.topic, err)
		}
	}
}

// TestAdminMissingTenant: an admin request naming a valid tenant that does not exist is
// answered "Tenant does not exist" (404) before the role is checked, as Pulsar does; an
// invalid tenant name is still refused (403).
func TestAdminMissingTenant(t *testing.T) {
	c := access.Checker{Authz: auth.NewAuthorizer(true, []string{"root"}), Records: records{}}
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Role: "consumer"})
	for _, op := range []api.AdminOp{api.OpTenantAdmin, api.OpLookup, api.OpConsume} {
		err := c.Admin(ctx, op, "nope", "nope/ns", "persistent://nope/ns/x")
		if !errors.Is(err, api.ErrTenantNotFound) || errors.Is(err, auth.ErrNotAuthorized) {
			t.Errorf("op %v in a missing tenant: %v, want ErrTenantNotFound", op, err)
		}
	}
	if err := c.Admin(ctx, api.OpSuperUser, "nope", "nope/ns", ""); !errors.Is(err, auth.ErrNotAuthorized) {
		t.Errorf("a superuser operation in a missing tenant: %v, want a refusal", err)
	}
	if err := c.Admin(ctx, api.OpTenantAdmin, "a b", "a b/ns", ""); !errors.Is(err, auth.ErrNotAuthorized) {
		t.Errorf("an invalid tenant name: %v, want a refusal", err)
	}
}

// TestSubscription: a subscription whose roles list is set admits only those roles (and
// superusers and tenant admins); an empty or missing list admits every consumer.
func TestSubscription(t *testing.T) {
	c := access.Checker{Authz: auth.NewAuthorizer(true, []string{"root"}), Records: records{}}
	x := topicname.MustParse("persistent://t/ns/x-partition-1")
	for _, tc := range []struct {
		role, sub string
		ok        bool
	}{
		{"consumer", "private", true},
		{"reader", "private", false},
		{"reader", "open", true},
		{"reader", "other", true},
		{"admin", "private", true},
		{"root", "private", true},
		{"producer", "other", false}, // no consume grant at all
		{"", "private", false},
	} {
		err := c.Subscription(context.Background(), tc.role, x, tc.sub)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, auth.ErrNotAuthorized)) {
			t.Errorf("%q through %q: %v, want allowed=%v", tc.role, tc.sub, err, tc.ok)
		}
	}
}

// invalidRecords answers as the broker's records do for a name that is not valid.
type invalidRecords struct{ records }

func (invalidRecords) Tenant(_ context.Context, name string) (api.TenantInfo, error) {
	if err := topicname.CheckTenant(name); err != nil {
		return api.TenantInfo{}, err
	}
	return records{}.Tenant(context.Background(), name)
}

func TestInvalidNamesRefused(t *testing.T) {
	c := access.Checker{Authz: auth.NewAuthorizer(true, []string{"root"}), Records: invalidRecords{}}
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Role: "admin"})
	for _, tenant := range []string{"..", "a b", ""} {
		if err := c.Admin(ctx, api.OpTenantAdmin, tenant, tenant+"/ns", ""); !errors.Is(err, auth.ErrNotAuthorized) {
			t.Errorf("tenant %q: %v, want ErrNotAuthorized", tenant, err)
		}
	}
	if err := c.Topic(context.Background(), "admin", topicname.Name{Domain: "persistent", Tenant: "..", Namespace: "ns", Local: "x", Partition: -1},
		auth.ActionProduce); !errors.Is(err, auth.ErrNotAuthorized) {
		t.Errorf("topic in tenant ..: %v, want ErrNotAuthorized", err)
	}
}
