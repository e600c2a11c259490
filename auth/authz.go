package auth

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Action is a permission granted on a namespace or topic (Pulsar's AuthAction).
type Action string

// The actions. Lookup is not grantable: it is allowed to whoever may produce or consume.
const (
	ActionProduce   Action = "produce"
	ActionConsume   Action = "consume"
	ActionFunctions Action = "functions"
	ActionSources   Action = "sources"
	ActionSinks     Action = "sinks"
	ActionPackages  Action = "packages"
	ActionLookup    Action = "lookup"
)

// ParseActions validates a grant's actions.
func ParseActions(ss []string) ([]Action, error) {
	var out []Action
	for _, s := range ss {
		switch a := Action(s); a {
		case ActionProduce, ActionConsume, ActionFunctions, ActionSources, ActionSinks, ActionPackages:
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		default:
			return nil, fmt.Errorf("unknown action %q (want produce, consume, functions, sources, sinks or packages)", s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no action")
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// Policies are a namespace's grants (Pulsar's auth_policies).
type Policies struct {
	// Namespace maps a role to the actions it has on every topic of the namespace.
	Namespace map[string][]Action `json:"namespace_auth"`
	// Topics maps a full topic name to its roles' actions.
	Topics map[string]map[string][]Action `json:"destination_auth"`
	// Subscriptions maps a subscription to the roles allowed on it (recorded, not enforced).
	Subscriptions map[string][]string `json:"subscription_auth_roles"`
}

// ErrNotAuthorized marks a refused action (AuthorizationError on the binary protocol, 403
// over HTTP).
var ErrNotAuthorized = errors.New("not authorized")

// Authorizer decides what a principal may do (Pulsar's authorizationEnabled and
// superUserRoles). A nil *Authorizer allows everything. It is immutable and safe for
// concurrent use.
type Authorizer struct {
	superUsers map[string]bool
}

// NewAuthorizer returns an authorizer with the given superuser roles; nil if !enabled.
func NewAuthorizer(enabled bool, superUsers []string) *Authorizer {
	if !enabled {
		return nil
	}
	a := &Authorizer{superUsers: map[string]bool{}}
	for _, r := range superUsers {
		if r != "" {
			a.superUsers[r] = true
		}
	}
	return a
}

// Enabled reports whether authorization is on.
func (a *Authorizer) Enabled() bool { return a != nil }

// IsSuperUser reports whether role is a superuser (every role is, with authorization off).
func (a *Authorizer) IsSuperUser(role string) bool {
	return a == nil || (role != "" && a.superUsers[role])
}

// IsTenantAdmin reports whether role may administer a tenant whose admin roles are admins
// (superusers may administer every tenant).
func (a *Authorizer) IsTenantAdmin(role string, admins []string) bool {
	return a.IsSuperUser(role) || (role != "" && slices.Contains(admins, role))
}

// AllowTopic reports whether role may perform act on topic (a full name) given its
// tenant's admin roles and its namespace's grants: superusers and tenant admins may do
// everything; others need a grant of act on the namespace or the topic (lookup: of produce
// or consume).
func (a *Authorizer) AllowTopic(role string, admins []string, p Policies, topic string, act Action) bool {
	if a.IsTenantAdmin(role, admins) {
		return true
	}
	if role == "" {
		return false
	}
	has := func(acts []Action) bool {
		if act == ActionLookup {
			return slices.Contains(acts, ActionProduce) || slices.Contains(acts, ActionConsume)
		}
		return slices.Contains(acts, act)
	}
	return has(p.Namespace[role]) || has(p.Topics[topic][role])
}

// AllowNamespace reports whether role may act in the namespace as a whole (list its topics):
// superusers, tenant admins, and roles with any namespace grant.
func (a *Authorizer) AllowNamespace(role string, admins []string, p Policies) bool {
	return a.IsTenantAdmin(role, admins) || (role != "" && len(p.Namespace[role]) > 0)
}

// WithEmpty returns p with nil maps made empty (Pulsar writes {} for no grants).
func (p Policies) WithEmpty() Policies {
	if p.Namespace == nil {
		p.Namespace = map[string][]Action{}
	}
	if p.Topics == nil {
		p.Topics = map[string]map[string][]Action{}
	}
	if p.Subscriptions == nil {
		p.Subscriptions = map[string][]string{}
	}
	return p
}
