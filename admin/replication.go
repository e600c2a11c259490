package admin

import (
	"context"
	"net/http"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// ClusterAdminService is implemented by services that keep cluster records
// (*broker.Service does): Pulsar's clusters resource.
//
//	GET    /admin/v2/clusters                 ["a", "b"]
//	PUT    /admin/v2/clusters/{cluster}       create; body ClusterData (409 if it exists)
//	POST   /admin/v2/clusters/{cluster}       replace; body ClusterData (404 if none)
//	DELETE /admin/v2/clusters/{cluster}       412 "Cluster not empty" while in use
//	GET    /admin/v2/clusters/{cluster}/peers ["b"]
//	POST   /admin/v2/clusters/{cluster}/peers ["b"] (412 for itself or a missing cluster)
type ClusterAdminService interface {
	ClusterService
	Clusters(ctx context.Context) ([]string, error)
	CreateCluster(ctx context.Context, name string, cd api.ClusterData) error
	UpdateCluster(ctx context.Context, name string, cd api.ClusterData) error
	DeleteCluster(ctx context.Context, name string) error
	SetPeerClusters(ctx context.Context, name string, peers []string) error
}

// ReplicationService is implemented by services that keep replication clusters
// (*broker.Service does).
//
//	GET  /admin/v2/namespaces/{tenant}/{ns}/replication          ["a", "b"]
//	POST /admin/v2/namespaces/{tenant}/{ns}/replication          ["a", "b"]
//	GET  /admin/v2/persistent/{tenant}/{ns}/{topic}/replication  [?applied=true]
//	POST|DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/replication
type ReplicationService interface {
	NamespaceReplicationClusters(ctx context.Context, ns string) ([]string, error)
	SetNamespaceReplicationClusters(ctx context.Context, ns string, clusters []string) error
	TopicReplicationClusters(ctx context.Context, topic string, applied bool) ([]string, error)
	SetTopicReplicationClusters(ctx context.Context, topic string, clusters []string) error
	RemoveTopicReplicationClusters(ctx context.Context, topic string) error
}

// checkCluster validates the {cluster} of the path (Pulsar's 412 "Cluster name is not
// valid").
func checkCluster(r *http.Request) (string, error) {
	c := r.PathValue("cluster")
	if topicname.CheckTenant(c) != nil {
		return "", restErr(http.StatusPreconditionFailed, "Cluster name is not valid")
	}
	return c, nil
}

// clusterBody reads a required ClusterData body (400 "cluster data is required").
func clusterBody(r *http.Request) (api.ClusterData, error) {
	var cd api.ClusterData
	has, err := readJSON(r, &cd)
	if err != nil {
		return cd, err
	}
	if !has {
		return cd, restErr(http.StatusBadRequest, "cluster data is required")
	}
	return cd, nil
}

// clusterListBody reads a required JSON array of cluster names.
func clusterListBody(r *http.Request) ([]string, error) {
	var l []string
	has, err := readJSON(r, &l)
	if err != nil {
		return nil, err
	}
	if !has || l == nil {
		return nil, restErr(http.StatusPreconditionFailed, "ClusterIds should not be null or empty")
	}
	return l, nil
}

func (h *handler) replicationRoutes(route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	h.replicatedSubscriptionRoutes(route, topicScope) // replication_subs.go
	if cs, isCS := h.svc.(ClusterAdminService); isCS {
		clusterScope := func(r *http.Request) scope { return scope{cluster: r.PathValue("cluster")} }
		write := func(f func(ctx context.Context, name string, cd api.ClusterData) error) func(w http.ResponseWriter, r *http.Request) error {
			return func(w http.ResponseWriter, r *http.Request) error {
				name, err := checkCluster(r)
				if err != nil {
					return err
				}
				cd, err := clusterBody(r)
				if err != nil {
					return err
				}
				if err := f(r.Context(), name, cd); err != nil {
					return err
				}
				return noContent(w)
			}
		}
		route("PUT /admin/v2/clusters/{cluster}", write(cs.CreateCluster), clusterScope)
		route("POST /admin/v2/clusters/{cluster}", write(cs.UpdateCluster), clusterScope)
		route("DELETE /admin/v2/clusters/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
			name, err := checkCluster(r)
			if err != nil {
				return err
			}
			if err := cs.DeleteCluster(r.Context(), name); err != nil {
				return err
			}
			return noContent(w)
		}, clusterScope)
		route("GET /admin/v2/clusters/{cluster}/peers", func(w http.ResponseWriter, r *http.Request) error {
			name, err := checkCluster(r)
			if err != nil {
				return err
			}
			cd, err := cs.Cluster(r.Context(), name)
			if err != nil {
				return err
			}
			return ok(w, nonNil(cd.PeerClusterNames))
		}, clusterScope)
		route("POST /admin/v2/clusters/{cluster}/peers", func(w http.ResponseWriter, r *http.Request) error {
			name, err := checkCluster(r)
			if err != nil {
				return err
			}
			var peers []string
			if _, err := readJSON(r, &peers); err != nil {
				return err
			}
			if err := cs.SetPeerClusters(r.Context(), name, peers); err != nil {
				return err
			}
			return noContent(w)
		}, clusterScope)
	}
	rs, isRS := h.svc.(ReplicationService)
	if !isRS {
		return
	}
	const np = "/admin/v2/namespaces/{tenant}/{ns}/replication"
	route("GET "+np, func(w http.ResponseWriter, r *http.Request) error {
		ns, err := checkNamespace(r)
		if err != nil {
			return err
		}
		l, err := rs.NamespaceReplicationClusters(r.Context(), ns)
		if err != nil {
			return err
		}
		return ok(w, nonNil(l))
	}, nsScope)
	route("POST "+np, func(w http.ResponseWriter, r *http.Request) error {
		ns, err := checkNamespace(r)
		if err != nil {
			return err
		}
		l, err := clusterListBody(r)
		if err != nil {
			return err
		}
		if err := rs.SetNamespaceReplicationClusters(r.Context(), ns, l); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)
	const tp = "/admin/v2/persistent/{tenant}/{ns}/{topic}/replication"
	route("GET "+tp, func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		applied, err := boolQuery(r, "applied")
		if err != nil {
			return err
		}
		l, err := rs.TopicReplicationClusters(r.Context(), n.String(), applied)
		if err != nil {
			return err
		}
		return ok(w, l) // null: the topic has none of its own
	}, topicScope)
	route("POST "+tp, func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		l, err := clusterListBody(r)
		if err != nil {
			return err
		}
		if err := rs.SetTopicReplicationClusters(r.Context(), n.String(), l); err != nil {
			return err
		}
		return noContent(w)
	}, topicScope)
	route("DELETE "+tp, func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkTopic(r)
		if err != nil {
			return err
		}
		if err := rs.RemoveTopicReplicationClusters(r.Context(), n.String()); err != nil {
			return err
		}
		return noContent(w)
	}, topicScope)
}
