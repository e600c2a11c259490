package interop

import (
	"net/http"
	"slices"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestAdminClientClustersAndReplication: pulsaradmin creates, reads, lists, updates and
// deletes a cluster record, allows a tenant on it, sets a namespace's and a topic's
// replication clusters and reads them back, and gets Pulsar's statuses for what is
// refused (an existing cluster, a bad URL, a list without the local cluster, an unknown
// cluster, the deletion of a cluster in use).
func TestAdminClientClustersAndReplication(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true, memLog: true})
	a := c.admin()
	west := utils.ClusterData{Name: "west", ServiceURL: "http://west:8080", BrokerServiceURL: "pulsar://west:6650",
		AuthenticationPlugin: "org.apache.pulsar.client.impl.auth.AuthenticationToken", AuthenticationParameters: "token:x",
		BrokerClientTrustCertsFilePath: "/ca.pem", BrokerClientTLSEnabled: true}
	if err := a.Clusters().Create(west); err != nil {
		t.Fatal(err)
	}
	if err := a.Clusters().Create(west); statusOf(err) != http.StatusConflict {
		t.Fatalf("second create: %v, want 409", err)
	}
	if err := a.Clusters().Create(utils.ClusterData{Name: "east", ServiceURL: "pulsar://east:6650"}); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("create with a bad service URL: %v, want 400", err)
	}
	got, err := a.Clusters().Get("west")
	if err != nil || got.BrokerServiceURL != west.BrokerServiceURL || got.AuthenticationParameters != "token:x" ||
		!got.BrokerClientTLSEnabled || got.BrokerClientTrustCertsFilePath != "/ca.pem" {
		t.Fatalf("Get(west) = %+v, %v", got, err)
	}
	if l, err := a.Clusters().List(); err != nil || !slices.Equal(l, []string{"standalone", "west"}) {
		t.Fatalf("List = %v, %v", l, err)
	}
	west.BrokerServiceURL = "pulsar://west2:6650"
	if err := a.Clusters().Update(west); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Clusters().Get("west"); err != nil || got.BrokerServiceURL != "pulsar://west2:6650" {
		t.Fatalf("Get after update = %+v, %v", got, err)
	}

	if err := a.Tenants().Create(utils.TenantData{Name: "geo", AllowedClusters: []string{"standalone", "mars"}}); statusOf(err) != http.StatusPreconditionFailed {
		t.Fatalf("tenant on an unknown cluster: %v, want 412", err)
	}
	if err := a.Tenants().Create(utils.TenantData{Name: "geo", AllowedClusters: []string{"standalone", "west"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().CreateNamespace("geo/ns"); err != nil {
		t.Fatal(err)
	}
	if l, err := a.Namespaces().GetNamespaceReplicationClusters("geo/ns"); err != nil || !slices.Equal(l, []string{"standalone"}) {
		t.Fatalf("a new namespace's replication clusters = %v, %v; want the local cluster", l, err)
	}
	if err := a.Namespaces().SetNamespaceReplicationClusters("geo/ns", []string{"standalone", "west"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().SetNamespaceReplicationClusters("geo/ns", []string{"west"}); statusOf(err) != http.StatusPreconditionFailed {
		t.Fatalf("a list without the local cluster: %v, want 412", err)
	}
	if err := a.Namespaces().SetNamespaceReplicationClusters("geo/ns", []string{"standalone", "mars"}); statusOf(err) != http.StatusForbidden {
		t.Fatalf("a list with an unknown cluster: %v, want 403", err)
	}
	if l, err := a.Namespaces().GetNamespaceReplicationClusters("geo/ns"); err != nil || !slices.Equal(l, []string{"standalone", "west"}) {
		t.Fatalf("replication clusters = %v, %v; want [standalone west]", l, err)
	}

	topic := mustTopic(t, "persistent://geo/ns/orders")
	if err := a.Topics().SetReplicationClusters(topic, []string{"standalone"}); err != nil {
		t.Fatal(err)
	}
	if l, err := a.Topics().GetReplicationClusters(topic); err != nil || !slices.Equal(l, []string{"standalone"}) {
		t.Fatalf("topic replication clusters = %v, %v", l, err)
	}
	if err := a.Topics().RemoveReplicationClusters(topic); err != nil {
		t.Fatal(err)
	}
	if l, err := a.Topics().GetReplicationClusters(topic); err != nil || len(l) != 0 {
		t.Fatalf("topic replication clusters after remove = %v, %v", l, err)
	}

	if err := a.Clusters().Delete("west"); statusOf(err) != http.StatusPreconditionFailed {
		t.Fatalf("delete of a cluster in use: %v, want 412", err)
	}
}
