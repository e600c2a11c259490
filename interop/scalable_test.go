package interop

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/scalable/layout"
	"github.com/magnetar-io/magnetar/scalable/scalabletest"
)

// TestScalableTopicControllerKill9: three brokers (child processes), producers on many keys
// and stream consumers on a scalable topic (through Magnetar's own client: no Go Pulsar
// client speaks scalable topics); the broker leading the topic's controller is killed with
// SIGKILL right after it was asked to split a segment, so the split is cut at whatever step
// it reached. A new leader completes it (or the retried request does), a further split and a
// merge follow, and every acknowledged message is consumed with each key's order kept.
func TestScalableTopicControllerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker: skipped with -short")
	}
	ttl := 3 * time.Second
	if raceOn {
		ttl = 6 * time.Second
	}
	m := newMultiBroker(t, 3, mbOpts{ttl: ttl, children: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const p = "/admin/v2/scalable/public/default/kill9"
	scalabletest.Call(t, m.nodes[0].httpURL, "PUT", p+"?segments=2")
	scalabletest.Call(t, m.nodes[1].httpURL, "PUT", p+"/subscription/s") // runs on the leader

	kv, err := m.store.Get(ctx, metadata.ScalableControllerKey("public", "default", "kill9"))
	if err != nil {
		t.Fatal(err)
	}
	var leader *mbNode
	var others []*mbNode
	for _, nd := range m.nodes {
		if nd.id == string(kv.Value) {
			leader = nd
		} else {
			others = append(others, nd)
		}
	}
	if leader == nil {
		t.Fatalf("leader %q is none of the brokers", kv.Value)
	}
	// The clients talk to the two brokers that survive.
	cl, err := pulsarclient.New(pulsarclient.Options{URL: others[0].url, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	admins := []string{others[0].httpURL, others[1].httpURL}
	ld := scalabletest.NewLoad(t, ctx, cl, "topic://public/default/kill9", admins)
	ld.AddConsumer("c0", 0)
	ld.AddConsumer("c1", 1)
	ld.Produce(3)
	ld.WaitSent(150)

	// Ask the leader to split segment 0 and kill it as soon as the split's intent is in the
	// record: its children are being created or the parent sealed, or (if the commit was that
	// quick) the split is done.
	key := metadata.ScalableLayoutKey("public", "default", "kill9")
	cur, err := m.store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	w := m.store.Watch(wctx, key, int64(cur.Version)+1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", leader.httpURL+p+"/split/0", strings.NewReader(""))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	intent := false
	for b := range w.C {
		for _, ev := range b.Events {
			if l, err := layout.Unmarshal(ev.KV.Value); err == nil && l.Pending != nil {
				intent = true
			}
		}
		if intent {
			break
		}
	}
	m.kill(leader)
	stopWatch()
	if !intent {
		t.Fatal("the split's intent was never written")
	}
	l := scalabletest.Layout(t, admins[0], p)
	pending := l.Pending != nil
	// Retry the split until segment 0 is sealed (by this request or by the new leader
	// completing the cut one): 400 means it is no longer active.
	deadline := time.Now().Add(time.Minute)
	for {
		l = scalabletest.Layout(t, admins[0], p)
		if s, _ := l.Segment(0); s.State == layout.StateSealed && l.Pending == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment 0 never split:\n%s", l.Tree())
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", admins[1]+p+"/split/0", strings.NewReader(""))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	t.Logf("after the kill: intent pending %v; layout:\n%s", pending, l.Tree())
	n := ld.Total()
	ld.WaitSent(n + 150)
	scalabletest.Call(t, admins[1], "POST", p+"/split/1")
	ld.WaitSent(n + 300)
	l = scalabletest.Layout(t, admins[0], p)
	act := l.Active()
	scalabletest.Call(t, admins[0], "POST", p+"/merge/"+strconv.FormatUint(uint64(act[0].ID), 10)+"/"+strconv.FormatUint(uint64(act[1].ID), 10))
	ld.WaitSent(n + 450)
	total := ld.Finish(func() string { return scalabletest.Layout(t, admins[0], p).Tree() })
	t.Logf("%d messages; layout:\n%s", total, scalabletest.Layout(t, admins[0], p).Tree())
}
