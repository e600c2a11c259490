package resources_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestCheckClusterData: each URL that is set must parse with its scheme and a host, as
// Pulsar's checkPropertiesIfPresent; unset ones are fine.
func TestCheckClusterData(t *testing.T) {
	for _, tc := range []struct {
		name string
		cd   api.ClusterData
		bad  string // a substring of the error ("": valid)
	}{
		{"empty", api.ClusterData{}, ""},
		{"all", api.ClusterData{ServiceURL: "http://a:8080", ServiceURLTLS: "https://a:8443", BrokerServiceURL: "pulsar://a:6650",
			BrokerServiceURLTLS: "pulsar+ssl://a:6651", ProxyServiceURL: "pulsar+ssl://p:4443", ProxyProtocol: "SNI"}, ""},
		{"multi-host", api.ClusterData{BrokerServiceURL: "pulsar://a:6650,b:6650"}, ""},
		{"service scheme", api.ClusterData{ServiceURL: "pulsar://a:6650"}, "Illegal service url"},
		{"service no host", api.ClusterData{ServiceURL: "http://"}, "Illegal service url"},
		{"service opaque", api.ClusterData{ServiceURL: "http:a"}, "Illegal service url"},
		{"tls scheme", api.ClusterData{ServiceURLTLS: "http://a:8443"}, "Illegal service tls url"},
		{"broker scheme", api.ClusterData{BrokerServiceURL: "http://a:6650"}, "Illegal broker service url"},
		{"broker garbage", api.ClusterData{BrokerServiceURL: "::nope"}, "Illegal broker service url"},
		{"broker tls scheme", api.ClusterData{BrokerServiceURLTLS: "pulsar://a:6651"}, "Illegal broker service tls url"},
		{"proxy scheme", api.ClusterData{ProxyServiceURL: "http://p"}, "Illegal proxy service url"},
		{"proxy protocol", api.ClusterData{ProxyProtocol: "HTTP"}, "proxyProtocol"},
	} {
		err := resources.CheckClusterData(tc.cd)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.bad != "" && (!errors.Is(err, api.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: %v, want ErrInvalidArgument with %q", tc.name, err, tc.bad)
		}
	}
}

// TestClusterRecords: create, read, list, update and delete cluster records; a bad name or
// record, a second create, an update or delete of a missing one are refused and change
// nothing; tenants may allow only known clusters (the local one needs no record, "global"
// is accepted); a cluster a tenant or namespace uses is not deleted.
func TestClusterRecords(t *testing.T) {
	ctx := ctxT(t)
	r := resources.New(metadatatest.NewStore(t, metadatatest.Embedded(t)), "local", nil)
	if err := r.EnsureDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	west := api.ClusterData{ServiceURL: "http://west:8080", BrokerServiceURL: "pulsar://west:6650",
		AuthenticationPlugin: "token", AuthenticationParameters: "token:secret", PeerClusterNames: []string{"east"}}
	if err := r.CreateCluster(ctx, "west", west); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateCluster(ctx, "west", api.ClusterData{}); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want ErrAlreadyExists", err)
	}
	if err := r.CreateCluster(ctx, "bad/name", api.ClusterData{}); !errors.Is(err, api.ErrInvalidName) {
		t.Fatalf("bad name: %v, want ErrInvalidName", err)
	}
	if err := r.CreateCluster(ctx, "east", api.ClusterData{ServiceURL: "ftp://east"}); !errors.Is(err, api.ErrInvalidArgument) {
		t.Fatalf("bad URL: %v, want ErrInvalidArgument", err)
	}
	if err := r.UpdateCluster(ctx, "west", api.ClusterData{BrokerServiceURL: "west:6650"}); !errors.Is(err, api.ErrInvalidArgument) {
		t.Fatalf("bad update: %v, want ErrInvalidArgument", err)
	}
	if got, err := r.Cluster(ctx, "west"); err != nil || got.AuthenticationParameters != "token:secret" ||
		!slices.Equal(got.PeerClusterNames, []string{"east"}) {
		t.Fatalf("Cluster(west) = %+v, %v; want the record as created", got, err)
	}
	if err := r.UpdateCluster(ctx, "east", api.ClusterData{}); !errors.Is(err, api.ErrClusterNotFound) {
		t.Fatalf("update missing: %v, want ErrClusterNotFound", err)
	}
	// Peers: itself or a cluster without a record is refused and changes nothing.
	for _, peers := range [][]string{{"west"}, {"nowhere"}} {
		if err := r.SetPeerClusters(ctx, "west", peers); !errors.Is(err, api.ErrPreconditionFailed) {
			t.Fatalf("SetPeerClusters(%v): %v, want ErrPreconditionFailed", peers, err)
		}
	}
	if err := r.SetPeerClusters(ctx, "nowhere", nil); !errors.Is(err, api.ErrClusterNotFound) {
		t.Fatalf("SetPeerClusters of a missing cluster: %v", err)
	}
	if got, _ := r.Cluster(ctx, "west"); !slices.Equal(got.PeerClusterNames, []string{"east"}) {
		t.Fatalf("refused peer changes changed the record: %v", got.PeerClusterNames)
	}
	if cs, err := r.Clusters(ctx); err != nil || !slices.Equal(cs, []string{"west"}) {
		t.Fatalf("Clusters = %v, %v", cs, err)
	}
	if cs, err := r.KnownClusters(ctx); err != nil || !slices.Equal(cs, []string{"local", "west"}) {
		t.Fatalf("KnownClusters = %v, %v", cs, err)
	}

	// Tenants' allowed clusters.
	for _, tc := range []struct {
		clusters []string
		want     string
	}{
		{[]string{"local", "nowhere"}, "Clusters do not exist"},
		{[]string{"west", " "}, "Clusters can not be empty"},
	} {
		err := r.CreateTenant(ctx, "acme", api.TenantInfo{AllowedClusters: tc.clusters})
		if !errors.Is(err, api.ErrPreconditionFailed) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("CreateTenant %v: %v, want %q", tc.clusters, err, tc.want)
		}
	}
	if _, err := r.Tenant(ctx, "acme"); !errors.Is(err, api.ErrTenantNotFound) {
		t.Fatalf("a refused tenant exists: %v", err)
	}
	if err := r.CreateTenant(ctx, "acme", api.TenantInfo{AllowedClusters: []string{"local", "west", "global"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.UpdateTenant(ctx, "acme", api.TenantInfo{AllowedClusters: []string{"mars"}}); !errors.Is(err, api.ErrPreconditionFailed) {
		t.Fatalf("UpdateTenant to an unknown cluster: %v", err)
	}
	if ti, _ := r.Tenant(ctx, "acme"); !slices.Equal(ti.AllowedClusters, []string{"local", "west", "global"}) {
		t.Fatalf("a refused update changed the tenant: %+v", ti)
	}

	// Deletion of a cluster in use.
	if err := r.DeleteCluster(ctx, "west"); !errors.Is(err, api.ErrPreconditionFailed) || !strings.Contains(err.Error(), "tenant acme") {
		t.Fatalf("delete of an allowed cluster: %v, want Cluster not empty naming tenant acme", err)
	}
	if err := r.UpdateTenant(ctx, "acme", api.TenantInfo{AllowedClusters: []string{"local"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateNamespace(ctx, "public/geo", api.NamespacePolicies{ReplicationClusters: []string{"local", "west"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteCluster(ctx, "west"); !errors.Is(err, api.ErrPreconditionFailed) || !strings.Contains(err.Error(), "namespace public/geo") {
		t.Fatalf("delete of a replicated-to cluster: %v, want Cluster not empty naming public/geo", err)
	}
	if err := r.DeleteNamespace(ctx, "public", "geo"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteCluster(ctx, "west"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteCluster(ctx, "west"); !errors.Is(err, api.ErrClusterNotFound) {
		t.Fatalf("second delete: %v, want ErrClusterNotFound", err)
	}
}

// TestReplicationClusters: namespace and topic replication lists are checked as Pulsar
// checks them (each cluster known, allowed for the tenant or the namespace, no peer pair,
// no "global") and must hold the local cluster; a refused list changes nothing; a topic's
// applied list is its own, else its namespace's, else the local cluster.
func TestReplicationClusters(t *testing.T) {
	ctx := ctxT(t)
	r := resources.New(metadatatest.NewStore(t, metadatatest.Embedded(t)), "a", nil)
	for _, c := range []string{"b", "c", "d"} {
		cd := api.ClusterData{BrokerServiceURL: "pulsar://" + c + ":6650"}
		if c == "c" {
			cd.PeerClusterNames = []string{"d"}
		}
		if err := r.CreateCluster(ctx, c, cd); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.CreateTenant(ctx, "t", api.TenantInfo{AllowedClusters: []string{"a", "b", "c", "d"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateNamespace(ctx, "t/ns", api.NamespacePolicies{}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.NamespaceReplicationClusters(ctx, "t/ns"); err != nil || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("unset replication = %v, %v; want the local cluster", got, err)
	}
	if err := r.SetNamespaceReplicationClusters(ctx, "t/ns", []string{"a", "b", "a"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		clusters []string
		want     error
		reason   string
	}{
		{nil, api.ErrPreconditionFailed, "ClusterIds should not be null or empty"},
		{[]string{"a", "global"}, api.ErrPreconditionFailed, "Cannot specify global"},
		{[]string{"a", "zz"}, api.ErrClusterNotAllowed, "Invalid cluster id: zz"},
		{[]string{"a", "c", "d"}, api.ErrClusterConflict, "peer-clusters"},
		{[]string{"b"}, api.ErrPreconditionFailed, "missing local cluster"},
	} {
		err := r.SetNamespaceReplicationClusters(ctx, "t/ns", tc.clusters)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("set %v: %v, want %v %q", tc.clusters, err, tc.want, tc.reason)
		}
	}
	if got, _ := r.NamespaceReplicationClusters(ctx, "t/ns"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("replication after refused sets = %v, want [a b]", got)
	}
	// A cluster the tenant does not allow, then one the namespace's allowed_clusters lacks.
	if err := r.UpdateTenant(ctx, "t", api.TenantInfo{AllowedClusters: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetNamespaceReplicationClusters(ctx, "t/ns", []string{"a", "c"}); !errors.Is(err, api.ErrClusterNotAllowed) ||
		!strings.Contains(err.Error(), "allowed clusters list for tenant [t]") {
		t.Fatalf("set to a cluster the tenant does not allow: %v", err)
	}
	if err := r.UpdateNamespace(ctx, "t/ns", func(p *api.NamespacePolicies) { p.AllowedClusters = []string{"a"} }); err != nil {
		t.Fatal(err)
	}
	if err := r.SetNamespaceReplicationClusters(ctx, "t/ns", []string{"a", "b"}); !errors.Is(err, api.ErrClusterNotAllowed) ||
		!strings.Contains(err.Error(), "for namespace [t/ns]") {
		t.Fatalf("set outside the namespace's allowed clusters: %v", err)
	}
	if err := r.UpdateNamespace(ctx, "t/ns", func(p *api.NamespacePolicies) { p.AllowedClusters = nil }); err != nil {
		t.Fatal(err)
	}

	// Topic level.
	n, _ := topicname.Parse("persistent://t/ns/orders")
	for _, applied := range []bool{false, true} {
		got, err := r.TopicReplicationClusters(ctx, n, applied)
		want := []string(nil)
		if applied {
			want = []string{"a", "b"}
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("topic replication (applied=%v) = %v, %v; want %v", applied, got, err, want)
		}
	}
	if err := r.SetTopicReplicationClusters(ctx, n, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetTopicReplicationClusters(ctx, n, []string{"a", "c"}); !errors.Is(err, api.ErrClusterNotAllowed) {
		t.Fatalf("topic set to a cluster the tenant does not allow: %v", err)
	}
	if err := r.SetTopicReplicationClusters(ctx, n, []string{"b"}); !errors.Is(err, api.ErrPreconditionFailed) {
		t.Fatalf("topic set without the local cluster: %v", err)
	}
	if got, _ := r.TopicReplicationClusters(ctx, n, true); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("applied topic replication = %v, want its own [a]", got)
	}
	if err := r.RemoveTopicReplicationClusters(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.TopicReplicationClusters(ctx, n, true); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("applied topic replication after remove = %v, want the namespace's", got)
	}
	missing, _ := topicname.Parse("persistent://t/nope/x")
	if err := r.SetTopicReplicationClusters(ctx, missing, []string{"a"}); !errors.Is(err, api.ErrNamespaceNotFound) {
		t.Fatalf("topic of a missing namespace: %v", err)
	}
}
