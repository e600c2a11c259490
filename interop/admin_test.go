package interop

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/rest"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// The tests below use the real Pulsar Go client and the real Go admin client (pulsaradmin,
// as pulsarctl uses it) against our broker and our admin REST API together.

// admin returns a pulsaradmin client of the cluster's admin REST API (clusterOpts.admin).
func (c *cluster) admin() pulsaradmin.Client {
	c.t.Helper()
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: c.http.URL})
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

func mustTopic(t *testing.T, s string) utils.TopicName {
	t.Helper()
	tn, err := utils.GetTopicName(s)
	if err != nil {
		t.Fatal(err)
	}
	return *tn
}

// statusOf returns the HTTP status of a pulsaradmin error (0 if it is not one).
func statusOf(err error) int {
	var re rest.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

// TestAdminClientResources: pulsaradmin creates and lists tenants, namespaces, topics,
// partitioned topics and subscriptions, reads stats, and sees Pulsar's error codes.
func TestAdminClientResources(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	a := c.admin()
	tenants, err := a.Tenants().List()
	if err != nil || !slices.Contains(tenants, "public") {
		t.Fatalf("tenants %v %v", tenants, err)
	}
	if err := a.Tenants().Create(utils.TenantData{Name: "acme", AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Tenants().Create(utils.TenantData{Name: "acme"}); statusOf(err) != 409 {
		t.Fatalf("second tenant create: %v", err)
	}
	if err := a.Namespaces().CreateNamespace("acme/app"); err != nil {
		t.Fatal(err)
	}
	if nss, err := a.Namespaces().GetNamespaces("acme"); err != nil || !slices.Equal(nss, []string{"acme/app"}) {
		t.Fatalf("namespaces %v %v", nss, err)
	}
	if _, err := a.Namespaces().GetPolicies("acme/app"); err != nil {
		t.Fatal(err)
	}
	plain, parts := mustTopic(t, "persistent://acme/app/plain"), mustTopic(t, "persistent://acme/app/parts")
	if err := a.Topics().Create(plain, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().Create(parts, 3); err != nil {
		t.Fatal(err)
	}
	partitioned, nonPartitioned, err := a.Topics().List(*mustNS(t, "acme/app"))
	if err != nil || !slices.Contains(partitioned, parts.String()) || !slices.Contains(nonPartitioned, plain.String()) {
		t.Fatalf("list: partitioned %v, non-partitioned %v, %v", partitioned, nonPartitioned, err)
	}
	if md, err := a.Topics().GetMetadata(parts); err != nil || md.Partitions != 3 {
		t.Fatalf("metadata %+v %v", md, err)
	}
	if err := a.Topics().Update(parts, 4); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Create(plain, "sub", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	if subs, err := a.Subscriptions().List(plain); err != nil || !slices.Equal(subs, []string{"sub"}) {
		t.Fatalf("subscriptions %v %v", subs, err)
	}
	if _, err := a.Topics().GetStats(mustTopic(t, "persistent://acme/app/nope")); statusOf(err) != 404 {
		t.Fatalf("stats of a missing topic: %v", err)
	}
	if _, err := a.Topics().GetInternalStats(plain); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Delete(plain, "sub"); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().DeleteNamespace("acme/app"); statusOf(err) != 409 {
		t.Fatalf("delete of a namespace with topics: %v", err)
	}
	if err := a.Topics().Delete(parts, true, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().Delete(plain, true, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().DeleteNamespace("acme/app"); err != nil {
		t.Fatal(err)
	}
	if err := a.Tenants().Delete("acme"); err != nil {
		t.Fatal(err)
	}
}

func mustNS(t *testing.T, s string) *utils.NameSpaceName {
	t.Helper()
	ns, err := utils.GetNamespaceName(s)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestAdminWithClientTraffic: the Go client produces to a partitioned topic made over REST
// and consumes from a subscription made over REST; stats count it all; a reset-cursor by
// time makes the connected consumer receive everything again; terminate stops the producer.
func TestAdminWithClientTraffic(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	a := c.admin()
	ctx := ctxT(t, 2*time.Minute)
	name := topicName(t)
	tn := mustTopic(t, name)
	if err := a.Topics().Create(tn, 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Subscriptions().Create(tn, "audit", utils.Earliest); err != nil {
		t.Fatal(err)
	}
	cl := c.client()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: name})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i), Key: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := a.Topics().GetPartitionedStats(tn, true)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Metadata.Partitions != 2 || len(ps.Partitions) != 2 {
		t.Fatalf("partitioned stats: %+v", ps.Metadata)
	}
	var in int64
	for _, p := range ps.Partitions {
		in += p.MsgCounterIn
		if b := p.Subscriptions["audit"].MsgBacklog; b == 0 {
			t.Fatalf("partition without backlog for the REST-made subscription: %+v", p.Subscriptions)
		}
	}
	if in != n {
		t.Fatalf("msgInCounter over the partitions: %d, want %d", in, n)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: name, SubscriptionName: "audit", Type: pulsar.Shared,
		AckWithResponse: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	receiveAll := func() {
		seen := map[string]bool{}
		for len(seen) < n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("after %d: %v", len(seen), err)
			}
			seen[string(m.Payload())] = true
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	receiveAll()
	for i := range 2 {
		st, err := a.Topics().GetStats(mustTopic(t, fmt.Sprintf("%s-partition-%d", name, i)))
		if err != nil {
			t.Fatal(err)
		}
		if b := st.Subscriptions["audit"].MsgBacklog; b != 0 {
			t.Fatalf("partition %d backlog after acks: %d", i, b)
		}
	}
	// Reset by time: the broker disconnects the consumer, which reconnects and gets all again.
	if err := a.Subscriptions().ResetCursorToTimestamp(tn, "audit", 0); err != nil {
		t.Fatal(err)
	}
	receiveAll()

	plain := topicName(t)
	pp, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: plain})
	if err != nil {
		t.Fatal(err)
	}
	last, err := pp.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("last")})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Topics().Terminate(mustTopic(t, plain))
	if err != nil {
		t.Fatal(err)
	}
	if id.LedgerID != last.LedgerID() || id.EntryID != last.EntryID() {
		t.Fatalf("terminate answered %+v, the last message is %v", id, last)
	}
	// The topic refuses producers now. (A send on pp would race with the client's
	// reconnect after the broker disconnected it, as Pulsar does; pulsar-client-go v0.19.0
	// once panicked there with "send on closed channel". TestTerminate covers the send.)
	pp.Close()
	if _, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: plain}); err == nil ||
		!containsAny(err.Error(), "TopicTerminated", "terminated") {
		t.Fatalf("producer on a terminated topic: %v", err)
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestHTTPServiceURL: a Go client given the admin HTTP URL as its service URL looks topics
// up over /lookup/v2 and /admin/v2/.../partitions, then produces and consumes over the
// binary protocol.
func TestHTTPServiceURL(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	ctx := ctxT(t, time.Minute)
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.http.URL, OperationTimeout: 30 * time.Second,
		Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	name := topicName(t)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: name, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: name})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("over http lookup")}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil || string(m.Payload()) != "over http lookup" {
		t.Fatalf("%v %v", m, err)
	}
}
