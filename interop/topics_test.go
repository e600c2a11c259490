package interop

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestPartitionedTopic: a topic created with partitions is served as such: the producer
// spreads over the partitions (PARTITIONED_METADATA, one LOOKUP per "-partition-N") and one
// consumer gets everything.
func TestPartitionedTopic(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	if err := c.broker.CreatePartitionedTopic(ctxT(t, 10*time.Second), topic, 3); err != nil {
		t.Fatal(err)
	}
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	parts, err := cl.TopicPartitions(topic)
	if err != nil || len(parts) != 3 {
		t.Fatalf("partitions %v %v", parts, err)
	}
	const n = 30
	ctx := ctxT(t, time.Minute)
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprintf("msg-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	perPartition := map[string]int{}
	for len(seen) < n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[msgIndex(t, m)] = true
		perPartition[m.Topic()]++
		cons.Ack(m)
	}
	if len(perPartition) < 2 {
		t.Fatalf("messages all on one partition: %v", perPartition)
	}
}

// TestRegexSubscription: a pattern consumer finds the namespace's topics through
// GET_TOPICS_OF_NAMESPACE.
func TestRegexSubscription(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	base := topicName(t)
	for i := 0; i < 2; i++ {
		p := producer(t, cl, pulsar.ProducerOptions{Topic: fmt.Sprintf("%s-x%d", base, i)})
		if _, err := p.Send(ctxT(t, time.Minute), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("msg-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	cons := subscribe(t, cl, pulsar.ConsumerOptions{TopicsPattern: regexp.QuoteMeta(base) + "-x.*",
		SubscriptionName: "s"})
	got := map[int]bool{}
	ctx := ctxT(t, time.Minute)
	for len(got) < 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[msgIndex(t, m)] = true
		cons.Ack(m)
	}
}

// TestRegexSubscriptionMissingNamespace: a pattern consumer over a namespace (or tenant) that
// does not exist is created at once with no topics, as with Pulsar, which answers
// GET_TOPICS_OF_NAMESPACE for it with an empty list (an error makes the client retry until
// its 30 s operation timeout and fail).
func TestRegexSubscriptionMissingNamespace(t *testing.T) {
	c := newCluster(t, clusterOpts{memLog: true})
	cl := c.client()
	for _, pattern := range []string{"persistent://public/no-such-namespace/x.*", "persistent://no-such-tenant/ns/x.*"} {
		start := time.Now()
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{TopicsPattern: pattern, SubscriptionName: "s"})
		if err != nil {
			t.Fatalf("pattern %s: %v (after %v)", pattern, err, time.Since(start))
		}
		cons.Close()
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("pattern %s: subscribed after %v, want an answer at once", pattern, el)
		}
	}
}
