package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

func npTopicName(t *testing.T) string {
	return "non-persistent://public/default/" + strings.TrimPrefix(topicName(t), "persistent://public/default/")
}

// subStats reads one subscription's stats of a topic over the admin REST API.
func subStats(t *testing.T, c *cluster, topic, sub string) map[string]any {
	t.Helper()
	tn := mustTopic(t, topic)
	resp, err := http.Get(c.http.URL + "/admin/v2/" + tn.GetRestPath() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st struct {
		Subscriptions map[string]map[string]any `json:"subscriptions"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("stats of %s: %d %s", topic, resp.StatusCode, b)
	}
	return st.Subscriptions[sub]
}

// TestNonPersistentDelivery: on a non-persistent topic, pulsar-client-go consumers get
// every message published while they are connected, in order; a subscription made later
// sees only what follows it; nothing is stored; the topic is listed as non-persistent only.
func TestNonPersistentDelivery(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	cl := c.client()
	adm := c.admin()
	topic := npTopicName(t)
	ctx := ctxT(t, time.Minute)
	a := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "a"})
	b := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "b", Type: pulsar.Shared})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 100
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cons := range []pulsar.Consumer{a, b} {
		for i := range n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Payload()) != fmt.Sprint(i) {
				t.Fatalf("%s: message %d is %q", cons.Subscription(), i, m.Payload())
			}
			cons.Ack(m)
		}
	}
	late := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "late",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if m, err := late.Receive(ctx); err != nil || string(m.Payload()) != "after" {
		t.Fatalf("late subscription got %v, %v; want only what follows it", m, err)
	}
	tn := mustTopic(t, topic)
	st, err := adm.Topics().GetStats(tn)
	if err != nil || st.StorageSize != 0 || st.MsgCounterIn != n+1 {
		t.Fatalf("stats: storage %d, in %d, %v", st.StorageSize, st.MsgCounterIn, err)
	}
	ns, _ := utils.GetNamespaceName("public/default")
	_, nonPartitioned, err := adm.Topics().List(*ns)
	if err != nil || !slices.Contains(nonPartitioned, topic) {
		t.Fatalf("topic list %v, %v; want %s", nonPartitioned, err, topic)
	}
	var onlyNP []string
	resp, err := http.Get(c.http.URL + "/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&onlyNP)
	resp.Body.Close()
	if !slices.Equal(onlyNP, []string{topic}) {
		t.Fatalf("mode=NON_PERSISTENT lists %v", onlyNP)
	}
	if ps, _, _ := adm.Topics().List(*ns); slices.Contains(ps, topic) {
		t.Fatal("the non-persistent topic is listed as partitioned")
	}
	plain, err := http.Get(c.http.URL + "/admin/v2/persistent/public/default")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(plain.Body)
	plain.Body.Close()
	if strings.Contains(string(body), "non-persistent") {
		t.Fatalf("persistent list holds the non-persistent topic: %s", body)
	}
	if _, err := adm.Topics().GetInternalStats(tn); err != nil {
		t.Fatalf("internal stats: %v", err)
	}
	if subs, err := adm.Subscriptions().List(tn); err != nil || !slices.Contains(subs, "late") {
		t.Fatalf("subscriptions %v, %v", subs, err)
	}
	// Clients left connected would reconnect after the unload and create the topic again.
	for _, cons := range []pulsar.Consumer{a, b, late} {
		cons.Close()
	}
	p.Close()
	if err := adm.Topics().Unload(tn); err != nil {
		t.Fatalf("unload: %v", err)
	}
	if err := adm.Topics().Delete(tn, true, true); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, nonPartitioned, err := adm.Topics().List(*ns); err != nil || slices.Contains(nonPartitioned, topic) {
		t.Fatalf("topic list after the deletion %v, %v", nonPartitioned, err)
	}
}

// TestNonPersistentSlowConsumer: a consumer that does not receive does not slow the
// producer: every send completes while it holds only its receiver queue; the messages it
// could not take are dropped and counted (msgDropped, msgDropRate), so that what it
// receives afterwards plus what was dropped is exactly what was published; a consumer that
// keeps receiving accounts for every message the same way.
func TestNonPersistentSlowConsumer(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	cl := c.client()
	topic := npTopicName(t)
	ctx := ctxT(t, 2*time.Minute)
	slow := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "slow", ReceiverQueueSize: 10})
	fast := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "fast"})
	const n = 5000
	got := make(chan []int, 1)
	go func() {
		var seen []int
		for {
			rctx, cancel := ctxWithin(ctx, 3*time.Second)
			m, err := fast.Receive(rctx)
			cancel()
			if err != nil {
				got <- seen
				return
			}
			var i int
			fmt.Sscan(string(m.Payload()), &i)
			seen = append(seen, i)
			fast.Ack(m)
		}
	}()
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 500})
	start := time.Now()
	produceIndexes(t, p, n)
	took := time.Since(start)
	slowStats := subStats(t, c, topic, "slow")
	dropped := int(slowStats["msgDropped"].(float64))
	if dropped < n-2000 || slowStats["msgDropRate"].(float64) <= 0 {
		t.Fatalf("slow subscription after %d messages: %v", n, slowStats)
	}
	for i := range n - dropped {
		m, err := slow.Receive(ctx)
		if err != nil {
			t.Fatalf("slow consumer message %d of %d: %v", i, n-dropped, err)
		}
		slow.Ack(m)
	}
	seen := <-got
	fastDropped := 0
	if v, ok := subStats(t, c, topic, "fast")["msgDropped"]; ok {
		fastDropped = int(v.(float64))
	}
	if len(seen)+fastDropped != n || !slices.IsSorted(seen) {
		t.Fatalf("fast consumer: %d received + %d dropped, want %d (sorted: %v)", len(seen), fastDropped, n, slices.IsSorted(seen))
	}
	t.Logf("%d messages sent in %v with a stalled consumer; it dropped %d, the live one %d", n, took, dropped, fastDropped)
}

// TestNonPersistentPartitioned: a partitioned non-persistent topic made with pulsaradmin
// spreads a producer's messages over its partitions and a consumer of the topic gets them
// all; its partitioned stats answer.
func TestNonPersistentPartitioned(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	cl := c.client()
	adm := c.admin()
	topic := npTopicName(t)
	tn := mustTopic(t, topic)
	if err := adm.Topics().Create(tn, 3); err != nil {
		t.Fatal(err)
	}
	if md, err := adm.Topics().GetMetadata(tn); err != nil || md.Partitions != 3 {
		t.Fatalf("metadata %+v, %v", md, err)
	}
	ctx := ctxT(t, time.Minute)
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 60
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	parts := map[string]int{}
	var seen []string
	for range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		parts[m.Topic()]++
		seen = append(seen, string(m.Payload()))
		cons.Ack(m)
	}
	slices.Sort(seen)
	if len(parts) != 3 || len(slices.Compact(seen)) != n {
		t.Fatalf("partitions used %v, %d distinct messages", parts, len(slices.Compact(seen)))
	}
	st, err := adm.Topics().GetPartitionedStats(tn, true)
	in := int64(0)
	for _, ps := range st.Partitions {
		in += ps.MsgCounterIn
	}
	if err != nil || in != n || len(st.Partitions) != 3 {
		t.Fatalf("partitioned stats: in %d, %d partitions, %v", in, len(st.Partitions), err)
	}
}

func ctxWithin(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// produceIndexes sends messages "0".."n-1" asynchronously and waits for every receipt.
func produceIndexes(t *testing.T, p pulsar.Producer, n int) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}
