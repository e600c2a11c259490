package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestLookupThroughLeader: a broker that is not the load manager's leader sends the lookup of
// an unowned bundle to the leader (not authoritatively); the leader assigns it; the owner's
// load report lists the bundle.
func TestLookupThroughLeader(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	mem := topictest.NewStore()
	fast := func(cfg *broker.Config) {
		cfg.LoadManager = loadmgr.Config{ReportInterval: 100 * time.Millisecond}
	}
	b1 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b1", fast)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitUntil(t, "b1 leading", func() bool {
		ld, err := b1.LeaderBroker(ctx)
		return err == nil && ld.ID == "b1"
	})
	b2 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b2", fast)
	var r broker.LookupResult
	waitUntil(t, "b2 sending the lookup to the leader", func() bool {
		var err error
		r, err = b2.Lookup(ctx, "persistent://public/default/unowned")
		return err == nil && r.ToLeader
	})
	if r.ID != "b1" || r.Self || r.Assigned {
		t.Fatalf("lookup on b2: %+v, want a redirect to the leader b1", r)
	}
	r, err := b1.Lookup(ctx, "persistent://public/default/unowned")
	if err != nil || r.ToLeader || !(r.Self || r.Assigned) {
		t.Fatalf("lookup on the leader: %+v %v, want its assignment", r, err)
	}
	owner := b1
	if !r.Self {
		owner = b2
		if r, err = b2.LookupAuthoritative(ctx, "persistent://public/default/unowned", true); err != nil || !r.Self {
			t.Fatalf("authoritative lookup on the assigned broker: %+v %v", r, err)
		}
	}
	bundle, err := owner.TopicBundle(ctx, "persistent://public/default/unowned")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the owner's load report listing the bundle", func() bool {
		rep, err := owner.LoadReport(ctx)
		if err != nil {
			return false
		}
		_, ok := rep.Bundles["public/default/"+bundle]
		return ok
	})
	// A broker without a load manager: no report, lookups decided where they arrive.
	off := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b3", func(cfg *broker.Config) {
		cfg.LoadManager.Disabled = true
	})
	if _, err := off.LoadReport(ctx); err == nil {
		t.Error("load report of a broker without a load manager")
	}
	if r, err := off.Lookup(ctx, "persistent://public/default/other"); err != nil || r.ToLeader {
		t.Errorf("lookup on a broker without a load manager: %+v %v", r, err)
	}
}

// waitUntil polls cond until it holds, for at most 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}
