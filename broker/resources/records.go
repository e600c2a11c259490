package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Records reads and writes the broker's records in the metadata store: tenants,
// namespaces (their policies, permission grants included), topics and partitioned topics
// (key layout in metadata/keys.go), and keeps watched caches of the namespace and
// partitioned-topic records (Run). Safe for concurrent use; every update is a
// compare-and-swap.
type Records struct {
	store   metadata.Store
	cluster string
	// namespaces, partitioned and localPolicies mirror the namespace, partitioned-topic and
	// local-policy records.
	namespaces, partitioned, localPolicies *Cache
}

// New returns the records of store for a broker of cluster (the default allowed cluster of
// new tenants). store is the cluster's store: with a configuration store apart from the
// local store, a metadata.Split, which keeps the records of metadata.ConfigStorePrefixes
// (cluster records, tenants, namespaces, partitioned topics) in the configuration store
// and the rest (topics, local policies) in the local store. Run its caches before relying
// on them.
func New(store metadata.Store, cluster string, log *slog.Logger) *Records {
	return &Records{store: store, cluster: cluster,
		namespaces:    NewCache(store, metadata.PrefixNamespaces, log),
		partitioned:   NewCache(store, metadata.PrefixPartitionedTopics, log),
		localPolicies: NewCache(store, metadata.PrefixLocalPolicies, log)}
}

// Caches returns the watched caches of the namespace, partitioned-topic and local-policy
// records, for the caller to run (Cache.Run) until the broker closes.
func (r *Records) Caches() []*Cache { return []*Cache{r.namespaces, r.partitioned, r.localPolicies} }

type topicRecord struct {
	Created int64 `json:"created"` // Unix ms
}

// EnsureDefaults creates the default tenant and namespace (public/default) if they do not
// exist.
func (r *Records) EnsureDefaults(ctx context.Context) error {
	ti, _ := json.Marshal(api.TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{r.cluster}})
	if _, err := r.store.Put(ctx, metadata.TenantKey(topicname.DefaultTenant), ti, metadata.NotExists); err != nil &&
		!errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	np, _ := json.Marshal(api.NamespacePolicies{})
	if _, err := r.store.Put(ctx, metadata.NamespaceKey(topicname.DefaultTenant, topicname.DefaultNamespace), np,
		metadata.NotExists); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	return nil
}

// childNames lists the last path element of the keys under prefix that have no further '/'.
func (r *Records) childNames(ctx context.Context, prefix string) ([]string, error) {
	kvs, _, err := r.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		n := strings.TrimPrefix(kv.Key, prefix)
		if n != "" && !strings.Contains(n, "/") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Tenants.

// Tenants lists the tenants in order.
func (r *Records) Tenants(ctx context.Context) ([]string, error) {
	return r.childNames(ctx, metadata.PrefixTenants)
}

// Tenant returns tenant name's record (api.ErrTenantNotFound if there is none).
func (r *Records) Tenant(ctx context.Context, name string) (api.TenantInfo, error) {
	var ti api.TenantInfo
	if err := topicname.CheckTenant(name); err != nil {
		return ti, err
	}
	kv, err := r.store.Get(ctx, metadata.TenantKey(name))
	return Decode[api.TenantInfo](kv, err, api.ErrTenantNotFound, "tenant "+name)
}

// CreateTenant creates tenant name (api.ErrAlreadyExists if it exists); its allowed clusters
// default to the broker's, and each must be known (clusteradmin.go: checkAllowedClusters,
// api.ErrPreconditionFailed).
func (r *Records) CreateTenant(ctx context.Context, name string, ti api.TenantInfo) error {
	if err := topicname.CheckTenant(name); err != nil {
		return err
	}
	if ti.AdminRoles == nil {
		ti.AdminRoles = []string{}
	}
	if len(ti.AllowedClusters) == 0 {
		ti.AllowedClusters = []string{r.cluster}
	}
	if err := r.checkAllowedClusters(ctx, ti.AllowedClusters); err != nil {
		return err
	}
	b, _ := json.Marshal(ti)
	_, err := r.store.Put(ctx, metadata.TenantKey(name), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: tenant %s", api.ErrAlreadyExists, name)
	}
	return err
}

// UpdateTenant replaces tenant name's record (compare-and-swap: api.ErrServiceNotReady on a
// concurrent change); its allowed clusters default to the broker's and are checked as
// CreateTenant's.
func (r *Records) UpdateTenant(ctx context.Context, name string, ti api.TenantInfo) error {
	if err := topicname.CheckTenant(name); err != nil {
		return err
	}
	if len(ti.AllowedClusters) == 0 {
		ti.AllowedClusters = []string{r.cluster}
	}
	if err := r.checkAllowedClusters(ctx, ti.AllowedClusters); err != nil {
		return err
	}
	kv, err := r.store.Get(ctx, metadata.TenantKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %s", api.ErrTenantNotFound, name)
	}
	if err != nil {
		return err
	}
	if ti.AdminRoles == nil {
		ti.AdminRoles = []string{}
	}
	b, _ := json.Marshal(ti)
	_, err = r.store.Put(ctx, metadata.TenantKey(name), b, kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: tenant %s changed concurrently", api.ErrServiceNotReady, name)
	}
	return err
}

// DeleteTenant deletes tenant name, which must have no namespaces (api.ErrNotEmpty).
func (r *Records) DeleteTenant(ctx context.Context, name string) error {
	if _, err := r.Tenant(ctx, name); err != nil {
		return err
	}
	nss, err := r.childNames(ctx, metadata.NamespacePrefix(name))
	if err != nil {
		return err
	}
	if len(nss) > 0 {
		return fmt.Errorf("%w: tenant %s has %d namespaces", api.ErrNotEmpty, name, len(nss))
	}
	return r.store.Delete(ctx, metadata.TenantKey(name), metadata.AnyVersion)
}

// Namespaces.

// Namespaces lists tenant's namespaces ("tenant/ns") in order.
func (r *Records) Namespaces(ctx context.Context, tenant string) ([]string, error) {
	if _, err := r.Tenant(ctx, tenant); err != nil {
		return nil, err
	}
	names, err := r.childNames(ctx, metadata.NamespacePrefix(tenant))
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		names[i] = tenant + "/" + n
	}
	return names, nil
}

// NamespacePolicies reads namespace tenant/ns's record from the store
// (api.ErrNamespaceNotFound if there is none).
func (r *Records) NamespacePolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error) {
	kv, err := r.store.Get(ctx, metadata.NamespaceKey(tenant, ns))
	return decodePolicies(tenant, ns, kv, err)
}

// CheckNamespace returns api.ErrNamespaceNotFound if namespace tenant/ns has no record.
func (r *Records) CheckNamespace(ctx context.Context, tenant, ns string) error {
	_, err := r.NamespacePolicies(ctx, tenant, ns)
	return err
}

// Namespace reads namespace "tenant/ns"'s record from the store.
func (r *Records) Namespace(ctx context.Context, ns string) (api.NamespacePolicies, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return api.NamespacePolicies{}, err
	}
	return r.NamespacePolicies(ctx, t, n)
}

// CreateNamespace creates namespace "tenant/ns" with policies p (its tenant must exist).
func (r *Records) CreateNamespace(ctx context.Context, ns string, p api.NamespacePolicies) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	if _, err := r.Tenant(ctx, t); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("%w: %v", api.ErrInvalidArgument, err)
	}
	_, err = r.store.Put(ctx, metadata.NamespaceKey(t, n), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: namespace %s", api.ErrAlreadyExists, ns)
	}
	return err
}

// SetNamespace replaces namespace ns's record and returns its new version.
func (r *Records) SetNamespace(ctx context.Context, ns string, p api.NamespacePolicies) (metadata.Version, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return 0, err
	}
	kv, err := r.store.Get(ctx, metadata.NamespaceKey(t, n))
	if errors.Is(err, metadata.ErrNotFound) {
		return 0, fmt.Errorf("%w: %s", api.ErrNamespaceNotFound, ns)
	}
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", api.ErrInvalidArgument, err)
	}
	v, err := r.store.Put(ctx, metadata.NamespaceKey(t, n), b, kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return 0, fmt.Errorf("%w: namespace %s changed concurrently", api.ErrServiceNotReady, ns)
	}
	return v, err
}

// DeleteNamespace deletes namespace tenant/ns's record and this cluster's local policies
// of it.
func (r *Records) DeleteNamespace(ctx context.Context, tenant, ns string) error {
	if err := r.store.Delete(ctx, metadata.NamespaceKey(tenant, ns), metadata.AnyVersion); err != nil {
		return err
	}
	return r.store.Delete(ctx, metadata.LocalPoliciesKey(tenant, ns), metadata.AnyVersion)
}

// Topics.

// Topics lists the persistent topics of namespace "tenant/ns", partitions included, in order.
func (r *Records) Topics(ctx context.Context, ns string) ([]string, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := r.CheckNamespace(ctx, t, n); err != nil {
		return nil, err
	}
	return r.DomainTopics(ctx, t, n, topicname.Persistent)
}

// DomainTopics lists the topics of a domain stored under namespace t/n (none if it does not
// exist), partitions included, in order.
func (r *Records) DomainTopics(ctx context.Context, t, n, want string) ([]string, error) {
	return r.topicNames(ctx, metadata.TopicPrefix(t, n), t, n, want)
}

// PartitionedTopics lists the partitioned topics of namespace "tenant/ns" in order.
func (r *Records) PartitionedTopics(ctx context.Context, ns string) ([]string, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := r.CheckNamespace(ctx, t, n); err != nil {
		return nil, err
	}
	return r.topicNames(ctx, metadata.PartitionedTopicPrefix(t, n), t, n, "")
}

// topicNames lists the full names of the topic records under prefix (keys
// "<prefix><domain>/<local>") of namespace t/n, in order: those of domain want, or of any
// domain if want is "".
func (r *Records) topicNames(ctx context.Context, prefix, t, n, want string) ([]string, error) {
	kvs, _, err := r.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, kv := range kvs {
		domain, local, ok := strings.Cut(strings.TrimPrefix(kv.Key, prefix), "/")
		if ok && (want == "" || domain == want) {
			out = append(out, domain+"://"+t+"/"+n+"/"+local)
		}
	}
	sort.Strings(out)
	return out, nil
}

func topicKey(n topicname.Name) string {
	return metadata.TopicKey(n.Tenant, n.Namespace, n.Domain, n.Local)
}

func partitionedKey(n topicname.Name) string {
	b := n.Base()
	return metadata.PartitionedTopicKey(b.Tenant, b.Namespace, b.Domain, b.Local)
}

// TopicExists reports whether topic n (a non-partitioned topic or a partition) has a record.
func (r *Records) TopicExists(ctx context.Context, n topicname.Name) (bool, error) {
	_, err := r.store.Get(ctx, topicKey(n))
	if errors.Is(err, metadata.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// CreateTopicRecord creates topic n's record (api.ErrAlreadyExists if it exists).
func (r *Records) CreateTopicRecord(ctx context.Context, n topicname.Name) error {
	b, _ := json.Marshal(topicRecord{Created: time.Now().UnixMilli()})
	_, err := r.store.Put(ctx, topicKey(n), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: topic %s", api.ErrAlreadyExists, n)
	}
	return err
}

// DeleteTopicRecord deletes topic n's record.
func (r *Records) DeleteTopicRecord(ctx context.Context, n topicname.Name) error {
	return r.store.Delete(ctx, topicKey(n), metadata.AnyVersion)
}

// PartitionCount returns the partition count of n's partitioned topic (0: not partitioned).
func (r *Records) PartitionCount(ctx context.Context, n topicname.Name) (int, error) {
	kv, err := r.store.Get(ctx, partitionedKey(n))
	return partitionsOf(n, kv, err)
}

// partitionsOf decodes the partition count from the result of reading n's partitioned-topic
// record (0 if there is none).
func partitionsOf(n topicname.Name, kv metadata.KV, err error) (int, error) {
	if errors.Is(err, metadata.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var pm api.PartitionedTopicMetadata
	if err := json.Unmarshal(kv.Value, &pm); err != nil {
		return 0, fmt.Errorf("partitioned topic %s record: %w", n, err)
	}
	return pm.Partitions, nil
}

// CreatePartitioned creates partitioned topic topic with parts partitions, and a record per
// partition.
func (r *Records) CreatePartitioned(ctx context.Context, topic string, parts int) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	if parts < 1 {
		return fmt.Errorf("%w: %d partitions", api.ErrInvalidArgument, parts)
	}
	if n.IsPartition() {
		return fmt.Errorf("%w: %s is a partition name", api.ErrInvalidArgument, n)
	}
	if err := r.CheckNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return err
	}
	if exists, err := r.TopicExists(ctx, n); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("%w: non-partitioned topic %s", api.ErrAlreadyExists, n)
	}
	b, _ := json.Marshal(api.PartitionedTopicMetadata{Partitions: parts})
	if _, err := r.store.Put(ctx, partitionedKey(n), b, metadata.NotExists); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: partitioned topic %s", api.ErrAlreadyExists, n)
		}
		return err
	}
	return r.createPartitionRecords(ctx, n, 0, parts)
}

func (r *Records) createPartitionRecords(ctx context.Context, n topicname.Name, from, to int) error {
	for i := from; i < to; i++ {
		if err := r.CreateTopicRecord(ctx, n.PartitionName(i)); err != nil && !errors.Is(err, api.ErrAlreadyExists) {
			return err
		}
	}
	return nil
}

// UpdatePartitioned grows partitioned topic topic to parts partitions (compare-and-swap).
func (r *Records) UpdatePartitioned(ctx context.Context, topic string, parts int) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	kv, err := r.store.Get(ctx, partitionedKey(n))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: partitioned topic %s", api.ErrTopicNotFound, n)
	}
	if err != nil {
		return err
	}
	var pm api.PartitionedTopicMetadata
	if err := json.Unmarshal(kv.Value, &pm); err != nil {
		return err
	}
	if parts <= pm.Partitions {
		return fmt.Errorf("%w: %s has %d partitions; it can only grow", api.ErrInvalidArgument, n, pm.Partitions)
	}
	b, _ := json.Marshal(api.PartitionedTopicMetadata{Partitions: parts})
	if _, err := r.store.Put(ctx, partitionedKey(n), b, kv.Version); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: %s changed concurrently", api.ErrServiceNotReady, n)
		}
		return err
	}
	return r.createPartitionRecords(ctx, n.Base(), pm.Partitions, parts)
}

// DeletePartitioned deletes the partitioned-topic record of n.
func (r *Records) DeletePartitioned(ctx context.Context, n topicname.Name) error {
	return r.store.Delete(ctx, partitionedKey(n), metadata.AnyVersion)
}
