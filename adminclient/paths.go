package adminclient

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Path is a request's path and query below a broker's base URL: the one place the admin
// API's resource paths are built. Every segment is escaped. The zero Path is the root.
type Path struct {
	segs []string // escaped segments
	q    url.Values
}

// String is the escaped path with its query: "/admin/v2/tenants/t?force=true".
func (p Path) String() string {
	s := "/" + strings.Join(p.segs, "/")
	if len(p.q) > 0 {
		s += "?" + p.q.Encode()
	}
	return s
}

// Sub returns p with the segments appended (escaped).
func (p Path) Sub(segs ...string) Path {
	out := Path{segs: make([]string, 0, len(p.segs)+len(segs)), q: p.q}
	out.segs = append(out.segs, p.segs...)
	for _, s := range segs {
		out.segs = append(out.segs, url.PathEscape(s))
	}
	return out
}

// Query returns p with the query parameter k=v added.
func (p Path) Query(k, v string) Path {
	q := url.Values{}
	for key, vs := range p.q {
		q[key] = append([]string(nil), vs...)
	}
	q.Add(k, v)
	p.q = q
	return p
}

// raw returns p with segments appended as they are (already escaped).
func (p Path) raw(segs ...string) Path {
	out := Path{segs: append(append([]string(nil), p.segs...), segs...), q: p.q}
	return out
}

// V2Root is the root of the admin API's v2 resources, for display ("admin http://host:8080/admin/v2").
const V2Root = "/admin/v2"

func v2(segs ...string) Path { return Path{}.raw("admin", "v2").Sub(segs...) }

// The resources of the admin API. Names are checked: an invalid one is an error that
// errors.Is ErrInvalidName.

// TenantsPath is /admin/v2/tenants.
func TenantsPath() Path { return v2("tenants") }

// TenantPath is /admin/v2/tenants/{tenant}.
func TenantPath(tenant string) (Path, error) {
	if err := topicname.CheckTenant(tenant); err != nil {
		return Path{}, nameError(err)
	}
	return v2("tenants", tenant), nil
}

// NamespacesPath is /admin/v2/namespaces/{tenant}: a tenant's namespaces.
func NamespacesPath(tenant string) (Path, error) {
	if err := topicname.CheckTenant(tenant); err != nil {
		return Path{}, nameError(err)
	}
	return v2("namespaces", tenant), nil
}

// NamespacePath is /admin/v2/namespaces/{tenant}/{ns} for namespace "tenant/ns".
func NamespacePath(namespace string) (Path, error) {
	t, ns, err := topicname.ParseNamespace(namespace)
	if err != nil {
		return Path{}, nameError(err)
	}
	return v2("namespaces", t, ns), nil
}

// BundlePath is /admin/v2/namespaces/{tenant}/{ns}/{bundle}.
func BundlePath(namespace, bundle string) (Path, error) {
	p, err := NamespacePath(namespace)
	return p.Sub(bundle), err
}

// NamespaceTopicsPath is /admin/v2/persistent/{tenant}/{ns}: a namespace's persistent
// topics.
func NamespaceTopicsPath(namespace string) (Path, error) {
	t, ns, err := topicname.ParseNamespace(namespace)
	if err != nil {
		return Path{}, nameError(err)
	}
	return v2(topicname.Persistent, t, ns), nil
}

// parseTopic parses a topic name in any form.
func parseTopic(topic string) (topicname.Name, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return n, nameError(err)
	}
	return n, nil
}

// TopicPath is /admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic} for a topic name
// in any form.
func TopicPath(topic string) (Path, error) {
	n, err := parseTopic(topic)
	if err != nil {
		return Path{}, err
	}
	return v2(n.Domain, n.Tenant, n.Namespace, n.Local), nil
}

// SubscriptionPath is a topic's /subscription/{sub}.
func SubscriptionPath(topic, sub string) (Path, error) {
	p, err := TopicPath(topic)
	return p.Sub("subscription", sub), err
}

// SchemaPath is /admin/v2/schemas/{tenant}/{ns}/{topic}: a topic's schemas (the domain is
// not part of it).
func SchemaPath(topic string) (Path, error) {
	n, err := parseTopic(topic)
	if err != nil {
		return Path{}, err
	}
	return v2("schemas", n.Tenant, n.Namespace, n.Local), nil
}

// LookupPath is /lookup/v2/topic/{domain}/{tenant}/{ns}/{topic}.
func LookupPath(topic string) (Path, error) {
	n, err := parseTopic(topic)
	if err != nil {
		return Path{}, err
	}
	return Path{}.raw("lookup", "v2", "topic").Sub(n.Domain, n.Tenant, n.Namespace, n.Local), nil
}

// ClustersPath is /admin/v2/clusters.
func ClustersPath() Path { return v2("clusters") }

// ClusterPath is /admin/v2/clusters/{cluster}.
func ClusterPath(cluster string) Path { return v2("clusters", cluster) }

// NamespaceReplicationPath is /admin/v2/namespaces/{tenant}/{ns}/replication: a namespace's
// replication clusters.
func NamespaceReplicationPath(namespace string) (Path, error) {
	p, err := NamespacePath(namespace)
	return p.Sub("replication"), err
}

// TopicReplicationPath is a topic's /replication: its own replication clusters.
func TopicReplicationPath(topic string) (Path, error) {
	p, err := TopicPath(topic)
	return p.Sub("replication"), err
}

// PeerClustersPath is /admin/v2/clusters/{cluster}/peers.
func PeerClustersPath(cluster string) Path { return ClusterPath(cluster).Sub("peers") }

// BrokersPath is /admin/v2/brokers.
func BrokersPath() Path { return v2("brokers") }

// TransactionsPath is /admin/v3/transactions/{op}.
func TransactionsPath(op string) Path { return Path{}.raw("admin", "v3", "transactions").Sub(op) }

// txnTopic appends a topic's segments as the transactions API takes them: tenant/ns/topic for
// a persistent topic, with the domain in front for a non-persistent one.
func txnTopic(p Path, topic string) (Path, error) {
	n, err := parseTopic(topic)
	if err != nil {
		return Path{}, err
	}
	if n.Domain != topicname.Persistent {
		p = p.Sub(n.Domain)
	}
	return p.Sub(n.Tenant, n.Namespace, n.Local), nil
}

// ScalablePath is /admin/v2/scalable/{tenant}/{ns}/{name} for topic://tenant/ns/name.
func ScalablePath(topic string) (Path, error) {
	t, err := layout.ParseTopic(topic)
	if err != nil {
		return Path{}, nameError(err)
	}
	return ScalableTopicPath(t), nil
}

// ScalableTopicPath is the admin path of scalable topic t.
func ScalableTopicPath(t layout.Topic) Path { return v2("scalable", t.Tenant, t.Namespace, t.Name) }

// ScalableNamespacePath is /admin/v2/scalable/{tenant}/{ns}: a namespace's scalable topics.
func ScalableNamespacePath(namespace string) (Path, error) {
	t, ns, err := topicname.ParseNamespace(namespace)
	if err != nil {
		return Path{}, nameError(err)
	}
	return v2("scalable", t, ns), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func btoa(b bool) string { return strconv.FormatBool(b) }

// TopicOffloadPath is a topic's /offload: PUT a MessageId to offload the ledgers before it,
// GET the OffloadProcessStatus.
func TopicOffloadPath(topic string) (Path, error) {
	p, err := TopicPath(topic)
	return p.Sub("offload"), err
}

// NamespaceRemoveOffloadPoliciesPath is Pulsar's DELETE path of a namespace's offload
// policies: /admin/v2/namespaces/{tenant}/{ns}/removeOffloadPolicies.
func NamespaceRemoveOffloadPoliciesPath(namespace string) (Path, error) {
	p, err := NamespacePath(namespace)
	return p.Sub("removeOffloadPolicies"), err
}
