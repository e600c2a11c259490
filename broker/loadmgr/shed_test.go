package loadmgr

import (
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// fakeCluster is the brokers' side of TestShedsThroughAdmin: which broker owns each bundle
// and its load; each broker's admin endpoint moves its bundles as told.
type fakeCluster struct {
	mu     sync.Mutex
	owner  map[string]string
	load   map[string]BundleLoad
	moves  map[string]int
	errors []string
}

func (c *fakeCluster) stats(id string) func() map[string]BundleLoad {
	return func() map[string]BundleLoad {
		c.mu.Lock()
		defer c.mu.Unlock()
		out := map[string]BundleLoad{}
		for b, o := range c.owner {
			if o == id {
				out[b] = c.load[b]
			}
		}
		return out
	}
}

func (c *fakeCluster) rates(ids []string) []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := make([]float64, len(ids))
	for b, o := range c.owner {
		for i, id := range ids {
			if id == o {
				rs[i] += c.load[b].MsgRate()
			}
		}
	}
	return rs
}

// admin serves PUT /admin/v2/namespaces/{t}/{ns}/{range}/unload?destinationBroker= for id.
func (c *fakeCluster) admin(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		rest, ok := strings.CutPrefix(r.URL.Path, "/admin/v2/namespaces/")
		parts := strings.Split(rest, "/")
		if !ok || r.Method != http.MethodPut || len(parts) != 4 || parts[3] != "unload" {
			c.errors = append(c.errors, fmt.Sprintf("%s: unexpected %s %s", id, r.Method, r.URL))
			http.NotFound(w, r)
			return
		}
		bundle := strings.Join(parts[:3], "/")
		if c.owner[bundle] != id {
			c.errors = append(c.errors, fmt.Sprintf("%s: unload of %s owned by %s", id, bundle, c.owner[bundle]))
			http.Error(w, "not the owner", http.StatusConflict)
			return
		}
		c.owner[bundle] = r.URL.Query().Get("destinationBroker")
		c.moves[bundle]++
		w.WriteHeader(http.StatusNoContent)
	})
}

// TestShedsThroughAdmin runs three Managers on real etcd against fake brokers: all load
// starts on one broker; the leader's unloads, sent to the owners' admin endpoints, spread it
// so that no broker carries more than 1.5× the mean message rate, each bundle moving once.
func TestShedsThroughAdmin(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	ids := []string{"b1", "b2", "b3"}
	c := &fakeCluster{owner: map[string]string{}, load: map[string]BundleLoad{}, moves: map[string]int{}}
	rnd := rand.New(rand.NewSource(1))
	for n := range 3 {
		for j := range 4 {
			b := fmt.Sprintf("tenant/ns%d/0x%08x_0x%08x", n, j<<30, (j+1)<<30-1)
			rate := 200 + 800*rnd.Float64()
			c.owner[b], c.load[b] = "b1", BundleLoad{MsgRateIn: rate / 2, MsgRateOut: rate / 2, Topics: 2}
		}
	}
	changed := make(chan struct{}, 1)
	start := time.Now()
	// The brokers register first (a broker registers before it starts its Manager); a broker
	// joining while the others rebalance gets only what is not in its grace period.
	selves := map[string]Broker{}
	for _, id := range ids {
		srv := httptest.NewServer(c.admin(id))
		t.Cleanup(srv.Close)
		selves[id] = Broker{ID: id, ServiceURL: "pulsar://" + id + ":6650", WebServiceURL: srv.URL}
		registerBroker(t, metadatatest.OpenStore(t, eps, ns), selves[id])
	}
	for _, id := range ids {
		store := metadatatest.OpenStore(t, eps, ns)
		self := selves[id]
		startManager(t, Config{Store: store, Self: self, ReportInterval: 20 * time.Millisecond,
			SheddingInterval: 100 * time.Millisecond, BundleStats: c.stats(id), Resources: fixedResources,
			changed: changed})
	}
	waitUntil(t, changed, "balance within 1.5× the mean", func() bool {
		mean, mx := meanAndMax(c.rates(ids))
		return mx <= 1.5*mean
	})
	rates := c.rates(ids)
	mean, mx := meanAndMax(rates)
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("balanced in %v: rates %.0f (max %.2f× mean), %d bundles moved", time.Since(start), rates, mx/mean, len(c.moves))
	for b, n := range c.moves {
		if n > 1 {
			t.Errorf("bundle %s moved %d times within its grace period", b, n)
		}
	}
	for _, e := range c.errors {
		t.Error(e)
	}
}
