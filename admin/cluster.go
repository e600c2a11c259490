package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
)

// BrokersService is implemented by services that share namespaces with other brokers
// (*broker.Service does): namespace bundles, their unloading, hand-over and splitting, and
// the brokers and their leader, as Pulsar's brokers, clusters and namespaces resources.
type BrokersService interface {
	LookupAuthoritative(ctx context.Context, topic string, authoritative bool) (api.LookupResult, error)
	TopicBundle(ctx context.Context, topic string) (string, error)
	NamespaceBundles(ctx context.Context, ns string) (api.BundlesData, error)
	UnloadBundle(ctx context.Context, ns, bundle, destination string) error
	UnloadNamespace(ctx context.Context, ns string) error
	SplitBundle(ctx context.Context, ns, bundle string, unload bool, algorithm string) error
	Brokers(ctx context.Context, cluster string) ([]string, error)
	LiveBroker(ctx context.Context, id string) (api.BrokerInfo, error)
	LeaderBroker(ctx context.Context) (api.BrokerInfo, error)
	OwnedNamespaces(ctx context.Context) map[string]api.NamespaceOwnership
	Healthy(ctx context.Context) error
}

// LoadReporter is implemented by services with a load manager (*broker.Service).
type LoadReporter interface {
	LoadReport(ctx context.Context) (*loadmgr.Report, error)
}

func (h *handler) clusterRoutes(cs BrokersService, route routeFunc, nsScope, topicScope func(r *http.Request) scope) {
	none := func(*http.Request) scope { return scope{} }
	route("GET /admin/v2/brokers/leaderBroker", func(w http.ResponseWriter, r *http.Request) error {
		bi, err := cs.LeaderBroker(r.Context())
		if err != nil {
			return err
		}
		return ok(w, map[string]string{"serviceUrl": bi.AdminURL(r.TLS != nil), "brokerId": bi.ID})
	}, none)
	if lr, isLM := cs.(LoadReporter); isLM {
		// Pulsar's broker-stats/load-report: this broker's last load report
		// (LocalBrokerData's JSON).
		route("GET /admin/v2/broker-stats/load-report", func(w http.ResponseWriter, r *http.Request) error {
			rep, err := lr.LoadReport(r.Context())
			if err != nil {
				return err
			}
			return ok(w, rep)
		}, none)
	}
	route("GET /admin/v2/brokers/ready", func(w http.ResponseWriter, r *http.Request) error {
		return h.health(w, r)
	}, none)
	route("GET /admin/v2/brokers", func(w http.ResponseWriter, r *http.Request) error {
		ids, err := cs.Brokers(r.Context(), "")
		if err != nil {
			return err
		}
		return ok(w, ids)
	}, none)
	route("GET /admin/v2/brokers/{cluster}", func(w http.ResponseWriter, r *http.Request) error {
		ids, err := cs.Brokers(r.Context(), r.PathValue("cluster"))
		if err != nil {
			return err
		}
		return ok(w, ids)
	}, none)
	route("GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("broker")
		self := h.svc.Info()
		if name != self.ID && name != hostOf(self.HTTPURL) && name != hostOf(self.ServiceURL) {
			bi, err := cs.LiveBroker(r.Context(), name)
			if err != nil {
				return restErr(http.StatusNotFound, "Broker %s not found", name)
			}
			return &api.NotOwnerError{Topic: name, Owner: bi} // 307 to that broker
		}
		return ok(w, cs.OwnedNamespaces(r.Context()))
	}, none)

	const ns = "/admin/v2/namespaces/{tenant}/{ns}"
	route("GET "+ns+"/bundles", func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkNamespace(r)
		if err != nil {
			return err
		}
		bd, err := cs.NamespaceBundles(r.Context(), n)
		if err != nil {
			return err
		}
		return ok(w, bd)
	}, nsScope)
	route("PUT "+ns+"/unload", func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkNamespace(r)
		if err != nil {
			return err
		}
		if err := cs.UnloadNamespace(r.Context(), n); err != nil { // the owners of the others asked by the broker
			return err
		}
		return noContent(w)
	}, nsScope)
	route("PUT "+ns+"/{bundle}/unload", func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkNamespace(r)
		if err != nil {
			return err
		}
		if err := cs.UnloadBundle(r.Context(), n, r.PathValue("bundle"), r.URL.Query().Get("destinationBroker")); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)
	route("PUT "+ns+"/{bundle}/split", func(w http.ResponseWriter, r *http.Request) error {
		n, err := checkNamespace(r)
		if err != nil {
			return err
		}
		unload, err := boolQuery(r, "unload")
		if err != nil {
			return err
		}
		if err := cs.SplitBundle(r.Context(), n, r.PathValue("bundle"), unload, r.URL.Query().Get("splitAlgorithmName")); err != nil {
			return err
		}
		return noContent(w)
	}, nsScope)

	for _, d := range []string{"persistent", "non-persistent"} {
		route("GET /lookup/v2/topic/"+d+"/{tenant}/{ns}/{topic}/bundle", func(w http.ResponseWriter, r *http.Request) error {
			n, err := checkTopic(r)
			if err != nil {
				return err
			}
			b, err := cs.TopicBundle(r.Context(), n.String())
			if err != nil {
				return err
			}
			w.Header().Set("Content-Type", "text/plain")
			_, err = fmt.Fprint(w, b)
			return err
		}, topicScope)
	}
}

func hostOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return ""
}

// lookupAssigned answers an HTTP lookup with the cluster service: a bundle assigned to
// another broker is redirected (307) there with authoritative=true, so that broker takes
// it; an unowned bundle the load manager's leader assigns, to the leader with
// authoritative=false; otherwise it is answered with the owner.
func (h *handler) lookupAssigned(cs BrokersService, w http.ResponseWriter, r *http.Request) error {
	n, err := checkTopic(r)
	if err != nil {
		return err
	}
	auth, err := boolQuery(r, "authoritative")
	if err != nil {
		return err
	}
	res, err := cs.LookupAuthoritative(r.Context(), n.String(), auth)
	if err != nil {
		return err
	}
	if res.BrokerInfo, err = res.BrokerInfo.ForListener(listenerName(r)); err != nil {
		return err
	}
	if to := res.AdminURL(r.TLS != nil); (res.Assigned || res.ToLeader) && to != "" {
		q := r.URL.Query()
		q.Set("authoritative", strconv.FormatBool(res.Assigned)) // the leader chooses the owner
		http.Redirect(w, r, strings.TrimSuffix(to, "/")+r.URL.Path+"?"+q.Encode(), http.StatusTemporaryRedirect)
		return nil
	}
	return ok(w, LookupData{BrokerURL: res.ServiceURL, BrokerURLTLS: res.ServiceURLTLS, HTTPURL: res.HTTPURL,
		HTTPURLTLS: res.HTTPURLTLS, NativeURL: res.ServiceURL})
}
