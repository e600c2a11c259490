package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Cluster records (Pulsar's /admin/clusters/{cluster}, ClusterData JSON) and the checks
// Pulsar's ClustersBase and TenantsBase make on them.

// clusterPrefix is the parent of the cluster records.
var clusterPrefix = metadata.ClusterKey("")

// Clusters lists the names of the cluster records in order (Pulsar's "global" left out).
func (r *Records) Clusters(ctx context.Context) ([]string, error) {
	names, err := r.childNames(ctx, clusterPrefix)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == api.GlobalCluster }), nil
}

// KnownClusters lists the clusters a tenant or a replication list may name: the cluster
// records and this broker's own cluster, which is known even when no record was written
// for it (a broker started without initialize-cluster-metadata), in order.
func (r *Records) KnownClusters(ctx context.Context) ([]string, error) {
	names, err := r.Clusters(ctx)
	if err != nil {
		return nil, err
	}
	if r.cluster != "" && !slices.Contains(names, r.cluster) {
		names = append(names, r.cluster)
		slices.Sort(names)
	}
	return names, nil
}

// LocalCluster is the cluster of the broker these records serve.
func (r *Records) LocalCluster() string { return r.cluster }

// CheckClusterData checks a cluster record as Pulsar's ClusterDataImpl.checkPropertiesIfPresent
// does: each URL that is set parses and has its scheme (serviceUrl http, serviceUrlTls https,
// brokerServiceUrl pulsar, brokerServiceUrlTls pulsar+ssl, proxyServiceUrl pulsar or
// pulsar+ssl) and a host; proxyProtocol is SNI if set. A bad record is
// api.ErrInvalidArgument with Pulsar's reason.
func CheckClusterData(cd api.ClusterData) error {
	for _, u := range []struct {
		v       string
		schemes []string
		reason  string
	}{
		{cd.ServiceURL, []string{"http"}, "Illegal service url, example: http://pulsar.example.com:8080"},
		{cd.ServiceURLTLS, []string{"https"}, "Illegal service tls url, example: https://pulsar.example.com:8443"},
		{cd.BrokerServiceURL, []string{"pulsar"}, "Illegal broker service url, example: pulsar://pulsar.example.com:6650"},
		{cd.BrokerServiceURLTLS, []string{"pulsar+ssl"}, "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651"},
		{cd.ProxyServiceURL, []string{"pulsar", "pulsar+ssl"},
			"Illegal proxy service url, example: pulsar+ssl://ats-proxy.example.com:4443 or pulsar://ats-proxy.example.com:4080"},
	} {
		if strings.TrimSpace(u.v) == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || !slices.Contains(u.schemes, p.Scheme) || p.Host == "" || p.Opaque != "" {
			return fmt.Errorf("%w: %s", api.ErrInvalidArgument, u.reason)
		}
	}
	if cd.ProxyProtocol != "" && cd.ProxyProtocol != "SNI" {
		return fmt.Errorf("%w: unknown proxyProtocol %q (SNI is the one)", api.ErrInvalidArgument, cd.ProxyProtocol)
	}
	return nil
}

func checkClusterName(name string) error {
	if err := topicname.CheckTenant(name); err != nil {
		return fmt.Errorf("%w: cluster name %q", api.ErrInvalidName, name)
	}
	return nil
}

// CreateCluster writes cluster name's record: api.ErrInvalidName for a bad name,
// api.ErrInvalidArgument for a bad record, api.ErrAlreadyExists if it has one.
func (r *Records) CreateCluster(ctx context.Context, name string, cd api.ClusterData) error {
	if err := checkClusterName(name); err != nil {
		return err
	}
	if err := CheckClusterData(cd); err != nil {
		return err
	}
	b, _ := json.Marshal(cd)
	_, err := r.store.Put(ctx, metadata.ClusterKey(name), b, metadata.NotExists)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: cluster %s", api.ErrAlreadyExists, name)
	}
	return err
}

// UpdateCluster replaces cluster name's record, as Pulsar's update does (the whole record:
// fields not given are cleared): api.ErrClusterNotFound if it has none.
func (r *Records) UpdateCluster(ctx context.Context, name string, cd api.ClusterData) error {
	if err := checkClusterName(name); err != nil {
		return err
	}
	if err := CheckClusterData(cd); err != nil {
		return err
	}
	kv, err := r.store.Get(ctx, metadata.ClusterKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %s", api.ErrClusterNotFound, name)
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(cd)
	_, err = r.store.Put(ctx, metadata.ClusterKey(name), b, kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: cluster %s changed concurrently", api.ErrServiceNotReady, name)
	}
	return err
}

// DeleteCluster deletes cluster name's record: api.ErrClusterNotFound if it has none,
// api.ErrPreconditionFailed ("Cluster not empty") while a tenant allows it or a namespace
// replicates to it or allows it (ClusterUsers).
func (r *Records) DeleteCluster(ctx context.Context, name string) error {
	if err := checkClusterName(name); err != nil {
		return err
	}
	kv, err := r.store.Get(ctx, metadata.ClusterKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %s", api.ErrClusterNotFound, name)
	}
	if err != nil {
		return err
	}
	users, err := r.ClusterUsers(ctx, name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: Cluster not empty: used by %s", api.ErrPreconditionFailed, strings.Join(users, ", "))
	}
	err = r.store.Delete(ctx, metadata.ClusterKey(name), kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: cluster %s changed concurrently", api.ErrServiceNotReady, name)
	}
	return err
}

// ClusterUsers names the records that refer to cluster: "tenant t" for a tenant that
// allows it, "namespace t/ns" for a namespace that replicates to it or allows it, in
// order.
func (r *Records) ClusterUsers(ctx context.Context, cluster string) ([]string, error) {
	var users []string
	tenants, err := r.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tenants {
		ti, err := r.Tenant(ctx, t)
		if errors.Is(err, api.ErrTenantNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(ti.AllowedClusters, cluster) {
			users = append(users, "tenant "+t)
		}
	}
	kvs, _, err := r.store.List(ctx, metadata.PrefixNamespaces)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		var p api.NamespacePolicies
		if len(kv.Value) == 0 || json.Unmarshal(kv.Value, &p) != nil {
			continue
		}
		if slices.Contains(p.ReplicationClusters, cluster) || slices.Contains(p.AllowedClusters, cluster) {
			users = append(users, "namespace "+strings.TrimPrefix(kv.Key, metadata.PrefixNamespaces))
		}
	}
	return users, nil
}

// checkAllowedClusters checks a tenant's allowed clusters as Pulsar's TenantsBase does:
// none, or a blank one, is "Clusters can not be empty"; one that is neither known
// (KnownClusters) nor "global" is "Clusters do not exist" (both
// api.ErrPreconditionFailed).
func (r *Records) checkAllowedClusters(ctx context.Context, clusters []string) error {
	if len(clusters) == 0 || slices.ContainsFunc(clusters, func(c string) bool { return strings.TrimSpace(c) == "" }) {
		return fmt.Errorf("%w: Clusters can not be empty", api.ErrPreconditionFailed)
	}
	known, err := r.KnownClusters(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range clusters {
		if c != api.GlobalCluster && !slices.Contains(known, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: Clusters do not exist: %s", api.ErrPreconditionFailed, strings.Join(missing, ", "))
	}
	return nil
}

// SetPeerClusters sets cluster name's peer clusters (PIP-8) as Pulsar's setPeerClusterNames
// does: the cluster itself or a cluster without a record among them is
// api.ErrPreconditionFailed and changes nothing; api.ErrClusterNotFound if name has no
// record.
func (r *Records) SetPeerClusters(ctx context.Context, name string, peers []string) error {
	if err := checkClusterName(name); err != nil {
		return err
	}
	var list []string
	for _, p := range peers {
		if strings.EqualFold(p, name) {
			return fmt.Errorf("%w: %s itself can't be part of peer-list", api.ErrPreconditionFailed, name)
		}
		if _, err := r.Cluster(ctx, p); errors.Is(err, api.ErrClusterNotFound) {
			return fmt.Errorf("%w: Peer cluster %s does not exist", api.ErrPreconditionFailed, p)
		} else if err != nil {
			return err
		}
		if !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	kv, err := r.store.Get(ctx, metadata.ClusterKey(name))
	cd, err := Decode[api.ClusterData](kv, err, api.ErrClusterNotFound, "cluster "+name)
	if err != nil {
		return err
	}
	cd.PeerClusterNames = list
	b, _ := json.Marshal(cd)
	_, err = r.store.Put(ctx, metadata.ClusterKey(name), b, kv.Version)
	if errors.Is(err, metadata.ErrBadVersion) {
		return fmt.Errorf("%w: cluster %s changed concurrently", api.ErrServiceNotReady, name)
	}
	return err
}
