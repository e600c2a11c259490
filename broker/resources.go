package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// resources reads and writes the broker's records in the metadata store: tenants,
// namespaces, topics and partitioned topics (key layout in metadata/keys.go). Safe for
// concurrent use; every update is a compare-and-swap.
type resources struct {
	store   metadata.Store
	cluster string
}

type topicRecord struct {
	Created int64 `json:"created"` // Unix ms
}

func (r *resources) ensureDefaults(ctx context.Context) error {
	ti, _ := json.Marshal(TenantInfo{AdminRoles: []string{}, AllowedClusters: []string{r.cluster}})
	if _, err := r.store.Put(ctx, metadata.TenantKey(topicname.DefaultTenant), ti, metadata.NotExists); err != nil &&
		!errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	np, _ := json.Marshal(NamespacePolicies{})
	if _, err := r.store.Put(ctx, metadata.NamespaceKey(topicname.DefaultTenant, topicname.DefaultNamespace), np,
		metadata.NotExists); err != nil && !errors.Is(err, metadata.ErrBadVersion) {
		return err
	}
	return nil
}

// childNames lists the last path element of the keys under prefix that have no further '/'.
func (r *resources) childNames(ctx context.Context, prefix string) ([]string, error) {
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

func (r *resources) tenants(ctx context.Context) ([]string, error) {
	return r.childNames(ctx, metadata.PrefixTenants)
}

func (r *resources) tenant(ctx context.Context, name string) (TenantInfo, error) {
	var ti TenantInfo
	if err := topicname.CheckTenant(name); err != nil {
		return ti, err
	}
	kv, err := r.store.Get(ctx, metadata.TenantKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return ti, fmt.Errorf("%w: %s", ErrTenantNotFound, name)
	}
	if err != nil {
		return ti, err
	}
	if err := json.Unmarshal(kv.Value, &ti); err != nil {
		return ti, fmt.Errorf("tenant %s record: %w", name, err)
	}
	return ti, nil
}

func (r *resources) createTenant(ctx context.Context, name string, ti TenantInfo) error {
	if err := topicname.CheckTenant(name); err != nil {
		return err
	}
	if ti.AdminRoles == nil {
		ti.AdminRoles = []string{}
	}
	if ti.AllowedClusters == nil {
		ti.AllowedClusters = []string{r.cluster}
	}
	b, _ := json.Marshal(ti)
	_, err := r.store.Put(ctx, metadata.TenantKey(name), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: tenant %s", ErrAlreadyExists, name)
	}
	return err
}

func (r *resources) updateTenant(ctx context.Context, name string, ti TenantInfo) error {
	if err := topicname.CheckTenant(name); err != nil {
		return err
	}
	kv, err := r.store.Get(ctx, metadata.TenantKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrTenantNotFound, name)
	}
	if err != nil {
		return err
	}
	if ti.AdminRoles == nil {
		ti.AdminRoles = []string{}
	}
	if ti.AllowedClusters == nil {
		ti.AllowedClusters = []string{}
	}
	b, _ := json.Marshal(ti)
	_, err = r.store.Put(ctx, metadata.TenantKey(name), b, kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: tenant %s changed concurrently", ErrServiceNotReady, name)
	}
	return err
}

func (r *resources) deleteTenant(ctx context.Context, name string) error {
	if _, err := r.tenant(ctx, name); err != nil {
		return err
	}
	nss, err := r.childNames(ctx, metadata.NamespacePrefix(name))
	if err != nil {
		return err
	}
	if len(nss) > 0 {
		return fmt.Errorf("%w: tenant %s has %d namespaces", ErrNotEmpty, name, len(nss))
	}
	return r.store.Delete(ctx, metadata.TenantKey(name), metadata.AnyVersion)
}

// Namespaces.

func (r *resources) namespaces(ctx context.Context, tenant string) ([]string, error) {
	if _, err := r.tenant(ctx, tenant); err != nil {
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

func (r *resources) namespacePolicies(ctx context.Context, tenant, ns string) (NamespacePolicies, error) {
	kv, err := r.store.Get(ctx, metadata.NamespaceKey(tenant, ns))
	return decodePolicies(tenant, ns, kv, err)
}

func (r *resources) checkNamespace(ctx context.Context, tenant, ns string) error {
	_, err := r.namespacePolicies(ctx, tenant, ns)
	return err
}

func (r *resources) namespace(ctx context.Context, ns string) (NamespacePolicies, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return NamespacePolicies{}, err
	}
	return r.namespacePolicies(ctx, t, n)
}

func (r *resources) createNamespace(ctx context.Context, ns string, p NamespacePolicies) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	if _, err := r.tenant(ctx, t); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	_, err = r.store.Put(ctx, metadata.NamespaceKey(t, n), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: namespace %s", ErrAlreadyExists, ns)
	}
	return err
}

// setNamespace replaces namespace ns's record and returns its new version.
func (r *resources) setNamespace(ctx context.Context, ns string, p NamespacePolicies) (metadata.Version, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return 0, err
	}
	kv, err := r.store.Get(ctx, metadata.NamespaceKey(t, n))
	if errors.Is(err, metadata.ErrNotFound) {
		return 0, fmt.Errorf("%w: %s", ErrNamespaceNotFound, ns)
	}
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	v, err := r.store.Put(ctx, metadata.NamespaceKey(t, n), b, kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return 0, fmt.Errorf("%w: namespace %s changed concurrently", ErrServiceNotReady, ns)
	}
	return v, err
}

func (r *resources) deleteNamespace(ctx context.Context, tenant, ns string) error {
	return r.store.Delete(ctx, metadata.NamespaceKey(tenant, ns), metadata.AnyVersion)
}

// Topics.

func (r *resources) topics(ctx context.Context, ns string) ([]string, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := r.checkNamespace(ctx, t, n); err != nil {
		return nil, err
	}
	return r.domainTopics(ctx, t, n, topicname.Persistent)
}

// domainTopics lists the topics of a domain stored under namespace t/n (none if it does not
// exist), partitions included, in order.
func (r *resources) domainTopics(ctx context.Context, t, n, want string) ([]string, error) {
	prefix := metadata.TopicPrefix(t, n)
	kvs, _, err := r.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, prefix)
		domain, local, ok := strings.Cut(rest, "/")
		if !ok || domain != want {
			continue
		}
		out = append(out, domain+"://"+t+"/"+n+"/"+local)
	}
	sort.Strings(out)
	return out, nil
}

func (r *resources) partitionedTopics(ctx context.Context, ns string) ([]string, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return nil, err
	}
	if err := r.checkNamespace(ctx, t, n); err != nil {
		return nil, err
	}
	prefix := metadata.PartitionedTopicPrefix(t, n)
	kvs, _, err := r.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, kv := range kvs {
		domain, local, ok := strings.Cut(strings.TrimPrefix(kv.Key, prefix), "/")
		if ok {
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

func (r *resources) topicExists(ctx context.Context, n topicname.Name) (bool, error) {
	_, err := r.store.Get(ctx, topicKey(n))
	if errors.Is(err, metadata.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (r *resources) createTopicRecord(ctx context.Context, n topicname.Name) error {
	b, _ := json.Marshal(topicRecord{Created: time.Now().UnixMilli()})
	_, err := r.store.Put(ctx, topicKey(n), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: topic %s", ErrAlreadyExists, n)
	}
	return err
}

func (r *resources) deleteTopicRecord(ctx context.Context, n topicname.Name) error {
	return r.store.Delete(ctx, topicKey(n), metadata.AnyVersion)
}

// partitionCount returns the partition count of n's partitioned topic (0: not partitioned).
func (r *resources) partitionCount(ctx context.Context, n topicname.Name) (int, error) {
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
	var pm PartitionedTopicMetadata
	if err := json.Unmarshal(kv.Value, &pm); err != nil {
		return 0, fmt.Errorf("partitioned topic %s record: %w", n, err)
	}
	return pm.Partitions, nil
}

// partitions answers PARTITIONED_METADATA: the partition count, 0 for a partition, a
// non-partitioned or an unknown topic.

func (r *resources) createPartitioned(ctx context.Context, topic string, parts int) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	if parts < 1 {
		return fmt.Errorf("%w: %d partitions", ErrInvalidArgument, parts)
	}
	if n.IsPartition() {
		return fmt.Errorf("%w: %s is a partition name", ErrInvalidArgument, n)
	}
	if err := r.checkNamespace(ctx, n.Tenant, n.Namespace); err != nil {
		return err
	}
	if exists, err := r.topicExists(ctx, n); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("%w: non-partitioned topic %s", ErrAlreadyExists, n)
	}
	b, _ := json.Marshal(PartitionedTopicMetadata{Partitions: parts})
	if _, err := r.store.Put(ctx, partitionedKey(n), b, metadata.NotExists); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: partitioned topic %s", ErrAlreadyExists, n)
		}
		return err
	}
	return r.createPartitionRecords(ctx, n, 0, parts)
}

func (r *resources) createPartitionRecords(ctx context.Context, n topicname.Name, from, to int) error {
	for i := from; i < to; i++ {
		if err := r.createTopicRecord(ctx, n.PartitionName(i)); err != nil && !errors.Is(err, ErrAlreadyExists) {
			return err
		}
	}
	return nil
}

func (r *resources) updatePartitioned(ctx context.Context, topic string, parts int) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	kv, err := r.store.Get(ctx, partitionedKey(n))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: partitioned topic %s", ErrTopicNotFound, n)
	}
	if err != nil {
		return err
	}
	var pm PartitionedTopicMetadata
	if err := json.Unmarshal(kv.Value, &pm); err != nil {
		return err
	}
	if parts <= pm.Partitions {
		return fmt.Errorf("%w: %s has %d partitions; it can only grow", ErrInvalidArgument, n, pm.Partitions)
	}
	b, _ := json.Marshal(PartitionedTopicMetadata{Partitions: parts})
	if _, err := r.store.Put(ctx, partitionedKey(n), b, kv.Version); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: %s changed concurrently", ErrServiceNotReady, n)
		}
		return err
	}
	return r.createPartitionRecords(ctx, n.Base(), pm.Partitions, parts)
}

func (r *resources) deletePartitioned(ctx context.Context, n topicname.Name) error {
	return r.store.Delete(ctx, partitionedKey(n), metadata.AnyVersion)
}
