package broker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// adminServer serves the admin API of the broker stored in svc once it is set; its URL is
// known before the broker starts, so the broker can advertise it.
func adminServer(t *testing.T, svc *atomic.Pointer[broker.Service], auths *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer peer" {
			auths.Add(1)
		}
		s := svc.Load()
		if s == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		admin.Handler(s, admin.Options{}).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer peer")
	return b.next.RoundTrip(r)
}

// TestPartitionStatsAcrossBrokers: the partitioned stats asked of one broker include the
// partitions another broker serves, fetched there with the broker's peer credentials,
// instead of a redirect per partition (which a client following them would go round in a
// cycle, each broker redirecting for the partitions it does not own).
func TestPartitionStatsAcrossBrokers(t *testing.T) {
	eps := metadatatest.Embedded(t)
	mem := topictest.NewStore()
	var s1, s2 atomic.Pointer[broker.Service]
	var auths atomic.Int64
	h1, h2 := adminServer(t, &s1, &auths), adminServer(t, &s2, &auths)
	peerHTTP := &http.Client{Transport: bearer{next: http.DefaultTransport}, Timeout: 30 * time.Second}
	with := func(url string) func(*broker.Config) {
		return func(c *broker.Config) {
			c.HTTPURL, c.PeerHTTP = url, peerHTTP
			c.DefaultNumberOfNamespaceBundles = 16
		}
	}
	ns := metadatatest.RandomNamespace()
	b1 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b1", with(h1.URL))
	s1.Store(b1)
	b2 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b2", with(h2.URL))
	s2.Store(b2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const topic = "persistent://public/default/spread"
	if err := b1.CreatePartitionedTopic(ctx, topic, 8); err != nil {
		t.Fatal(err)
	}
	// Every partition is loaded by b2 first, so b2 owns their bundles.
	var onB2 []string
	for i := range 8 {
		p := topic + "-partition-" + strconv.Itoa(i)
		if _, err := b2.TopicStats(ctx, p); err != nil {
			t.Fatalf("load %s on b2: %v", p, err)
		}
		onB2 = append(onB2, p)
	}
	var no *broker.NotOwnerError
	if _, err := b1.TopicStats(ctx, onB2[0]); !errors.As(err, &no) || no.Owner.ID != "b2" {
		t.Fatalf("b1's own stats of %s: %v, want a NotOwnerError naming b2", onB2[0], err)
	}
	for _, p := range onB2 {
		st, err := b1.PartitionStats(ctx, p)
		if err != nil {
			t.Fatalf("b1's partition stats of %s (served by b2): %v", p, err)
		}
		if st.Subscriptions == nil {
			t.Fatalf("stats of %s: %+v, not decoded", p, st)
		}
	}
	if auths.Load() < int64(len(onB2)) {
		t.Fatalf("%d of %d peer requests carried the broker's credentials", auths.Load(), len(onB2))
	}
}
