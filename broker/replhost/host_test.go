package replhost

import (
	"context"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
)

// TestUpdateNotReplicated: a loaded topic whose replication clusters name only the local
// cluster costs the host nothing (no entry, so no goroutine waiting for the topic to end,
// no snapshot controller), while its log loses a replication cursor left by a cluster
// removed while it was not loaded.
func TestUpdateNotReplicated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := topicname.MustParse("persistent://geo/ns/t")
	store := topictest.NewStore()
	log := store.Open(n.ManagedLedgerName())
	if _, err := log.OpenCursor(ctx, "pulsar.repl.west", mledger.Earliest); err != nil {
		t.Fatal(err)
	}
	tp, err := topic.Open(ctx, topic.Config{Name: n, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close(ctx)
	h := New(Config{LocalCluster: "east", ReplSubs: ReplSubs{Enabled: true}})
	for _, clusters := range [][]string{nil, {"east"}} {
		h.Update(ctx, tp, clusters, Settings{})
		count := 0
		h.Topics(func(*topic.Topic) { count++ })
		if count != 0 {
			t.Fatalf("clusters %v: the host keeps %d topics", clusters, count)
		}
	}
	cs, err := log.Cursors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c == "pulsar.repl.west" {
			t.Fatalf("the orphan replication cursor is still there: %v", cs)
		}
	}
}
