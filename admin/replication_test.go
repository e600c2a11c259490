package admin

import (
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
)

// TestClustersAndReplicationAdmin drives the cluster records and the namespace and topic
// replication clusters on a real broker (cluster "standalone", which has no record): the
// happy paths, and for every endpoint a refused request (bad URL or name, existing or
// missing cluster, cluster in use, unknown or disallowed cluster, missing local cluster,
// malformed body) that answers 4xx with a JSON reason and changes nothing.
func TestClustersAndReplicationAdmin(t *testing.T) {
	rb := startRealBroker(t)
	const c = "/admin/v2/clusters"
	const ns = "/admin/v2/namespaces/acme/geo"
	const tp = "/admin/v2/persistent/acme/geo/orders"
	runSteps(t, rb.http.URL, []step{
		{"GET", c, "", 200, `["standalone"]`},
		{"PUT", c + "/west", `{"serviceUrl":"http://west:8080","brokerServiceUrl":"pulsar://west:6650",` +
			`"authenticationPlugin":"token","authenticationParameters":"token:x","brokerClientTlsEnabled":true,` +
			`"brokerClientTrustCertsFilePath":"/ca.pem","peerClusterNames":null,"listenerName":"internal"}`, 204, ""},
		{"GET", c + "/west", "", 200, `"brokerServiceUrl":"pulsar://west:6650"`},
		{"GET", c + "/west", "", 200, `"brokerClientTlsEnabled":true`},
		{"GET", c, "", 200, `["standalone","west"]`},
		// Cluster creates and updates that are refused.
		{"PUT", c + "/west", `{"serviceUrl":"http://other:8080"}`, 409, "Cluster already exists"},
		{"PUT", c + "/east", `{"serviceUrl":"pulsar://east:6650"}`, 400, "Illegal service url"},
		{"PUT", c + "/east", `{"brokerServiceUrlTls":"pulsar://east:6651"}`, 400, "Illegal broker service tls url"},
		{"PUT", c + "/east", ``, 400, "cluster data is required"},
		{"PUT", c + "/east", `{"serviceUrl":`, 400, "invalid JSON body"},
		{"PUT", c + "/bad%20name", `{}`, 412, "Cluster name is not valid"},
		{"GET", c + "/east", "", 404, "Cluster does not exist"},
		{"POST", c + "/east", `{"serviceUrl":"http://east:8080"}`, 404, "Cluster does not exist"},
		{"POST", c + "/west", `{"brokerServiceUrl":"http://west:6650"}`, 400, "Illegal broker service url"},
		{"GET", c + "/west", "", 200, `"serviceUrl":"http://west:8080"`},
		{"POST", c + "/west", `{"serviceUrl":"http://west2:8080","brokerServiceUrl":"pulsar://west2:6650"}`, 204, ""},
		{"GET", c + "/west", "", 200, `"brokerServiceUrl":"pulsar://west2:6650"`},
		{"PUT", c + "/east", `{"serviceUrl":"http://east:8080"}`, 204, ""},
		{"POST", c + "/east/peers", `["east"]`, 412, "east itself can't be part of peer-list"},
		{"POST", c + "/east/peers", `["mars"]`, 412, "Peer cluster mars does not exist"},
		{"POST", c + "/mars/peers", `[]`, 404, "Cluster does not exist"},
		{"GET", c + "/east/peers", "", 200, `[]`},
		{"POST", c + "/east/peers", `["west"]`, 204, ""},
		{"GET", c + "/east/peers", "", 200, `["west"]`},
		{"GET", c + "/east", "", 200, `"peerClusterNames":["west"]`},

		// Tenants may allow only known clusters.
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone","mars"]}`, 412, "Clusters do not exist"},
		{"GET", "/admin/v2/tenants/acme", "", 404, "Tenant does not exist"},
		{"PUT", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone","west","east"]}`, 204, ""},
		{"POST", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone",""]}`, 412, "Clusters can not be empty"},
		{"GET", "/admin/v2/tenants/acme", "", 200, `"allowedClusters":["standalone","west","east"]`},

		// Namespace replication clusters.
		{"PUT", ns, "", 204, ""},
		{"GET", ns + "/replication", "", 200, `["standalone"]`},
		{"POST", ns + "/replication", `["standalone","west"]`, 204, ""},
		{"GET", ns + "/replication", "", 200, `["standalone","west"]`},
		{"GET", ns, "", 200, `"replication_clusters":["standalone","west"]`},
		{"POST", ns + "/replication", `["standalone","mars"]`, 403, "Invalid cluster id: mars"},
		{"POST", ns + "/replication", `["west"]`, 412, "Namespace missing local cluster name in clusters list"},
		{"POST", ns + "/replication", `["standalone","global"]`, 412, "Cannot specify global"},
		{"POST", ns + "/replication", `["standalone","west","east"]`, 409, "peer-clusters"},
		{"POST", ns + "/replication", `[]`, 412, "ClusterIds should not be null or empty"},
		{"POST", ns + "/replication", `"west"`, 400, "invalid JSON body"},
		{"POST", "/admin/v2/namespaces/acme/nope/replication", `["standalone"]`, 404, "Namespace does not exist"},
		{"GET", ns + "/replication", "", 200, `["standalone","west"]`},
		// The whole-policies POST keeps them if not given and checks them if changed.
		{"POST", ns, `{"deduplicationEnabled":true}`, 204, ""},
		{"GET", ns + "/replication", "", 200, `["standalone","west"]`},
		{"POST", ns, `{"replication_clusters":["west"]}`, 412, "missing local cluster"},
		{"GET", ns, "", 200, `"replication_clusters":["standalone","west"]`},
		{"GET", c + "/bad%20name", "", 412, "Cluster name is not valid"},

		// Topic replication clusters.
		{"GET", tp + "/replication", "", 200, "null"},
		{"GET", tp + "/replication?applied=true", "", 200, `["standalone","west"]`},
		{"POST", tp + "/replication", `["standalone"]`, 204, ""},
		{"GET", tp + "/replication", "", 200, `["standalone"]`},
		{"POST", tp + "/replication", `["standalone","mars"]`, 403, "Invalid cluster id: mars"},
		{"POST", tp + "/replication", `{"a":1}`, 400, "invalid JSON body"},
		{"GET", tp + "/replication?applied=true", "", 200, `["standalone"]`},
		{"DELETE", tp + "/replication", "", 204, ""},
		{"GET", tp + "/replication?applied=true", "", 200, `["standalone","west"]`},

		// A cluster a tenant or namespace uses is not deleted.
		{"DELETE", c + "/west", "", 412, "Cluster not empty"},
		{"POST", ns + "/replication", `["standalone"]`, 204, ""},
		{"POST", "/admin/v2/tenants/acme", `{"adminRoles":[],"allowedClusters":["standalone","east"]}`, 204, ""},
		{"DELETE", c + "/west", "", 204, ""},
		{"DELETE", c + "/west", "", 404, "Cluster does not exist"},
		{"GET", c, "", 200, `["east","standalone"]`},
		// A namespace created with replication clusters has them checked.
		{"PUT", "/admin/v2/namespaces/acme/geo2", `{"replication_clusters":["standalone","west"]}`, 403, "Invalid cluster id: west"},
		{"GET", "/admin/v2/namespaces/acme/geo2", "", 404, "Namespace does not exist"},
	})
}

// TestClusterRoutesNeedSuperuser: a cluster's record and its changes are for superusers
// (Pulsar's validateSuperUserAccess), the list for any authenticated role; replication
// clusters are the tenant admins'.
func TestClusterRoutesNeedSuperuser(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    api.AdminOp
	}{
		{"GET /admin/v2/clusters", api.OpAuthenticated},
		{"GET /admin/v2/clusters/{cluster}", api.OpSuperUser},
		{"PUT /admin/v2/clusters/{cluster}", api.OpSuperUser},
		{"POST /admin/v2/clusters/{cluster}", api.OpSuperUser},
		{"DELETE /admin/v2/clusters/{cluster}", api.OpSuperUser},
		{"POST /admin/v2/clusters/{cluster}/peers", api.OpSuperUser},
		{"POST /admin/v2/namespaces/{tenant}/{ns}/replication", api.OpTenantAdmin},
		{"POST /admin/v2/persistent/{tenant}/{ns}/{topic}/replication", api.OpTenantAdmin},
		{"DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/replication", api.OpTenantAdmin},
	} {
		if got := requiredOp(tc.pattern); got != tc.want {
			t.Errorf("requiredOp(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
}
