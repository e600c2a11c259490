package scalablehost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/peer"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// fakeBroker is a broker with id and the live brokers of live.
type fakeBroker struct {
	id   string
	live map[string]api.BrokerInfo
}

func (b *fakeBroker) ID() string { return b.id }
func (b *fakeBroker) LiveBroker(_ context.Context, id string) (api.BrokerInfo, error) {
	if bi, ok := b.live[id]; ok {
		return bi, nil
	}
	return api.BrokerInfo{}, fmt.Errorf("broker %s: %w", id, metadata.ErrNotFound)
}
func (b *fakeBroker) Lookup(_ context.Context, topic string) (api.LookupResult, error) {
	return api.LookupResult{BrokerInfo: api.BrokerInfo{ID: b.id, ServiceURL: "pulsar://" + b.id}}, nil
}
func (b *fakeBroker) CheckNamespace(_ context.Context, tenant, ns string) error {
	if tenant+"/"+ns != "public/default" {
		return fmt.Errorf("%w: %s/%s", api.ErrNamespaceNotFound, tenant, ns)
	}
	return nil
}

// fakeSegments are segment topics in memory: those named in elsewhere are served by that
// broker (*api.NotOwnerError), the others here.
type fakeSegments struct {
	elsewhere map[string]api.BrokerInfo

	mu     sync.Mutex
	topics map[string]*fakeTopic
	resets []string // "segment sub ledger:entry"
}

type fakeTopic struct {
	terminated bool
	backlog    map[string]int64 // sub → backlog
	consumers  map[string][]*topic.Consumer
}

func newFakeSegments() *fakeSegments {
	return &fakeSegments{elsewhere: map[string]api.BrokerInfo{}, topics: map[string]*fakeTopic{}}
}

func (f *fakeSegments) get(name string) (*fakeTopic, error) {
	if bi, ok := f.elsewhere[name]; ok {
		return nil, &api.NotOwnerError{Topic: name, Owner: bi}
	}
	t := f.topics[name]
	if t == nil {
		return nil, fmt.Errorf("%w: %s", api.ErrTopicNotFound, name)
	}
	return t, nil
}

func (f *fakeSegments) CreateTopic(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(name); err == nil {
		return api.ErrAlreadyExists
	} else if !errors.Is(err, api.ErrTopicNotFound) {
		return err
	}
	f.topics[name] = &fakeTopic{backlog: map[string]int64{}, consumers: map[string][]*topic.Consumer{}}
	return nil
}

func (f *fakeSegments) DeleteTopic(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(name); err != nil {
		return err
	}
	delete(f.topics, name)
	return nil
}

func (f *fakeSegments) CreateSubscription(_ context.Context, name, sub string, _ api.MessageID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(name)
	if err != nil {
		return err
	}
	if _, ok := t.backlog[sub]; ok {
		return api.ErrAlreadyExists
	}
	t.backlog[sub] = 0
	return nil
}

func (f *fakeSegments) Terminate(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(name)
	if err == nil {
		t.terminated = true
	}
	return err
}

func (f *fakeSegments) TopicStats(_ context.Context, name string) (api.TopicStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.get(name)
	if err != nil {
		return api.TopicStats{}, err
	}
	st := api.TopicStats{Terminated: t.terminated, Subscriptions: map[string]api.SubscriptionStats{}}
	for sub, b := range t.backlog {
		st.Subscriptions[sub] = api.SubscriptionStats{MsgBacklog: b}
	}
	return st, nil
}

func (f *fakeSegments) ResetCursor(_ context.Context, name, sub string, to api.MessageID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(name); err != nil {
		return err
	}
	f.resets = append(f.resets, fmt.Sprintf("%s %s %d:%d", name, sub, to.LedgerID, to.EntryID))
	return nil
}

func (f *fakeSegments) Topic(_ context.Context, name string) (Topic, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(name); err != nil {
		return nil, err
	}
	return fakeTopicRef{f: f, name: name}, nil
}

type fakeTopicRef struct {
	f    *fakeSegments
	name string
}

// Disconnect drops sub's stale consumers.
func (r fakeTopicRef) Disconnect(_ context.Context, sub string, stale func(*topic.Consumer) bool) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	t := r.f.topics[r.name]
	cs, ok := t.consumers[sub]
	if !ok {
		return fmt.Errorf("%w: %s", api.ErrSubscriptionNotFound, sub)
	}
	t.consumers[sub] = slices.DeleteFunc(cs, stale)
	return nil
}

// fakePeers records the calls and answers err.
type fakePeers struct {
	err error

	mu    sync.Mutex
	calls []string
}

func (p *fakePeers) Segment(_ context.Context, ownerURL string, t layout.Topic, seg layout.Segment, op string, q url.Values, out any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("%s %s %s %s?%s", ownerURL, t.SegmentName(seg), "segment", op, q.Encode()))
	return p.err
}

func (p *fakePeers) Consumer(_ context.Context, leaderURL, method string, t layout.Topic, sub, consumer string, assignment bool, q url.Values, out any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("%s %s %s %s/%s assignment=%v?%s", leaderURL, method, t, sub, consumer, assignment, q.Encode()))
	return p.err
}

func (p *fakePeers) took() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// newBareHost is a Host whose goroutines do not run (no store): for the calls that need
// neither the records nor the controllers.
func newBareHost(t *testing.T, segs *fakeSegments, peers *fakePeers) *Host {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	h := &Host{cfg: Config{}.withDefaults(), env: Env{Broker: &fakeBroker{id: "b1"}, Segments: segs, Peers: peers, Logger: log},
		log: log, refusedLog: log, life: ctx, cancel: cancel}
	h.mu.ctls = map[layout.Topic]*scalableTopic{}
	return h
}

func TestLayoutKeyTopic(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{metadata.ScalableLayoutKey("t", "n", "x"), true},
		{metadata.ScalableControllerKey("t", "n", "x"), false},
		{metadata.PrefixScalableTopics + "t/n/layout", false},
		{metadata.PrefixScalableTopics + "t/n/x/y/layout", false},
		{"/other/t/n/x/layout", false},
	} {
		got, ok := layoutKeyTopic(tc.key)
		if ok != tc.ok || (ok && got != (layout.Topic{Tenant: "t", Namespace: "n", Name: "x"})) {
			t.Errorf("layoutKeyTopic(%q) = %v %v, want ok %v", tc.key, got, ok, tc.ok)
		}
	}
}

func TestSegmentMarks(t *testing.T) {
	var m segmentMarks
	if err := m.observe("s", 5); err != nil {
		t.Fatal(err)
	}
	if err := m.observe("s", 4); !errors.Is(err, errStaleTerm) || !errors.Is(err, api.ErrNotAllowed) {
		t.Fatalf("older term: %v", err)
	}
	if err := m.observe("s", 5); err != nil {
		t.Fatalf("same term again: %v", err)
	}
	m.raise("s", "sub", 10)
	m.raise("s", "sub", 7) // a fence never goes down
	if f := m.fence("s", "sub"); f != 10 {
		t.Fatalf("fence %d, want 10", f)
	}
	if f := m.fence("s", "other"); f != 0 {
		t.Fatalf("other sub's fence %d", f)
	}
	m.forget("s")
	if err := m.observe("s", 1); err != nil || m.fence("s", "sub") != 0 {
		t.Fatalf("after forget: %v, fence %d", err, m.fence("s", "sub"))
	}
}

// TestOnOwner: an effect runs here when this broker serves the segment, else it is sent to
// the owner's admin API named by the *NotOwnerError; an owner without an admin URL, or a
// failed call, is an error.
func TestOnOwner(t *testing.T) {
	ctx := context.Background()
	tp := layout.Topic{Tenant: "public", Namespace: "default", Name: "x"}
	seg := layout.Initial(1, nil, 0).Segments[0]
	name := tp.SegmentName(seg)
	segs, peers := newFakeSegments(), &fakePeers{}
	h := newBareHost(t, segs, peers)
	fx := &segmentEffects{h: h}

	if err := fx.Create(ctx, tp, seg, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	if st, err := segs.TopicStats(ctx, name); err != nil || len(st.Subscriptions) != 1 || len(peers.took()) != 0 {
		t.Fatalf("local create: %+v %v, peer calls %v", st, err, peers.took())
	}
	if err := fx.Create(ctx, tp, seg, []string{"s"}); err != nil {
		t.Fatalf("create again (idempotent): %v", err)
	}

	segs.elsewhere[name] = api.BrokerInfo{ID: "b2", HTTPURL: "http://b2"}
	if err := fx.Seal(ctx, tp, seg); err != nil {
		t.Fatal(err)
	}
	if err := fx.Fence(ctx, tp, 3, "s", []layout.Segment{seg}, 9); err != nil {
		t.Fatal(err)
	}
	want := []string{"http://b2 " + name + " segment seal?", "http://b2 " + name + " segment fence?sub=s&term=3&version=9"}
	if got := peers.took(); !slices.Equal(got, want) {
		t.Fatalf("peer calls %q, want %q", got, want)
	}
	if st, _ := (&fakeSegments{topics: segs.topics, elsewhere: map[string]api.BrokerInfo{}}).TopicStats(ctx, name); st.Terminated {
		t.Fatal("the seal of a segment served elsewhere ran here")
	}

	peers.err = &peer.StatusError{Status: http.StatusForbidden}
	if err := fx.Seal(ctx, tp, seg); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("refused peer: %v, want ErrServiceNotReady", err)
	}
	segs.elsewhere[name] = api.BrokerInfo{ID: "b3"} // no admin URL: the redirect is the answer
	var no *api.NotOwnerError
	if err := fx.Seal(ctx, tp, seg); !errors.As(err, &no) || no.Owner.ID != "b3" {
		t.Fatalf("owner without admin URL: %v", err)
	}
}

// TestSegmentFence: a fence raises the segment's mark and detaches the consumers holding an
// older assignment; CheckAttach refuses them afterwards; an older controller term is
// refused by Fence and Reset; a fence or reset on a segment served elsewhere records
// nothing; deleting the segment forgets its marks.
func TestSegmentFence(t *testing.T) {
	ctx := context.Background()
	segs := newFakeSegments()
	h := newBareHost(t, segs, &fakePeers{})
	const seg = "segment://public/default/x/0000-ffff-0"
	if err := h.SegmentCreate(ctx, seg, []string{"s"}); err != nil {
		t.Fatal(err)
	}
	md := func(v string) map[string]string { return map[string]string{layout.AssignmentMetadataKey: v} }
	segs.topics[seg].consumers["s"] = []*topic.Consumer{{Name: "old", Metadata: md("5")}, {Name: "new", Metadata: md("10")}}

	if err := h.SegmentFence(ctx, seg, "s", 7, 10); err != nil {
		t.Fatal(err)
	}
	if cs := segs.topics[seg].consumers["s"]; len(cs) != 1 || cs[0].Name != "new" {
		t.Fatalf("consumers after the fence: %v", cs)
	}
	if err := h.CheckAttach(seg, "s", md("9")); !errors.Is(err, topic.ErrConsumerBusy) {
		t.Fatalf("attach below the fence: %v", err)
	}
	for _, tc := range []struct {
		topic, sub string
		md         map[string]string
	}{{seg, "s", md("10")}, {seg, "other", nil}, {"persistent://public/default/x", "s", nil}} {
		if err := h.CheckAttach(tc.topic, tc.sub, tc.md); err != nil {
			t.Errorf("CheckAttach(%s, %s, %v): %v", tc.topic, tc.sub, tc.md, err)
		}
	}
	if err := h.SegmentFence(ctx, seg, "nosub", 7, 3); err != nil {
		t.Errorf("fence of a subscription without consumers: %v", err)
	}
	if err := h.SegmentFence(ctx, seg, "s", 6, 20); !errors.Is(err, api.ErrNotAllowed) {
		t.Fatalf("fence of an older term: %v", err)
	}
	if err := h.SegmentReset(ctx, seg, "s", 6, api.Earliest); !errors.Is(err, api.ErrNotAllowed) {
		t.Fatalf("reset of an older term: %v", err)
	}
	if err := h.SegmentReset(ctx, seg, "s", 8, api.MessageID{LedgerID: 3, EntryID: 4}); err != nil {
		t.Fatal(err)
	}
	if want := []string{seg + " s 3:4"}; !slices.Equal(segs.resets, want) {
		t.Fatalf("resets %q, want %q", segs.resets, want)
	}

	const there = "segment://public/default/x/0000-ffff-1"
	segs.elsewhere[there] = api.BrokerInfo{ID: "b2"}
	var no *api.NotOwnerError
	if err := h.SegmentFence(ctx, there, "s", 100, 100); !errors.As(err, &no) {
		t.Fatalf("fence elsewhere: %v", err)
	}
	if err := h.SegmentReset(ctx, there, "s", 100, api.Earliest); !errors.As(err, &no) {
		t.Fatalf("reset elsewhere: %v", err)
	}
	if h.marks.fence(there, "s") != 0 || h.marks.observe(there, 1) != nil {
		t.Fatal("a segment served elsewhere got marks")
	}

	if err := h.SegmentDelete(ctx, seg); err != nil {
		t.Fatal(err)
	}
	if err := h.SegmentDelete(ctx, seg); err != nil {
		t.Fatalf("delete of a missing segment: %v", err)
	}
	if err := h.CheckAttach(seg, "s", md("1")); err != nil {
		t.Fatalf("attach after the segment was deleted: %v", err)
	}
	if err := h.SegmentSeal(ctx, "persistent://public/default/x"); !errors.Is(err, api.ErrInvalidName) {
		t.Fatalf("seal of a non-segment: %v", err)
	}
}

func TestSegmentDrained(t *testing.T) {
	ctx := context.Background()
	segs := newFakeSegments()
	h := newBareHost(t, segs, &fakePeers{})
	const seg = "segment://public/default/x/0000-ffff-0"
	if err := h.SegmentCreate(ctx, seg, []string{"s", "t"}); err != nil {
		t.Fatal(err)
	}
	segs.topics[seg].backlog["t"] = 2
	check := func(sub string, want bool) {
		t.Helper()
		if got, err := h.SegmentDrained(ctx, seg, sub); err != nil || got != want {
			t.Fatalf("drained(%s) = %v %v, want %v", sub, got, err, want)
		}
	}
	check("s", false) // not sealed yet
	if err := h.SegmentSeal(ctx, seg); err != nil {
		t.Fatal(err)
	}
	check("s", true)
	check("t", false)       // backlog left
	check("missing", false) // no such subscription
}

// TestLeaderCalls: a stream consumer's calls to a leader on another broker go through the
// peer client; its 404 is ErrSubscriptionNotFound, any other failure ErrServiceNotReady.
func TestLeaderCalls(t *testing.T) {
	ctx := context.Background()
	peers := &fakePeers{}
	h := newBareHost(t, newFakeSegments(), peers)
	h.env.Broker = &fakeBroker{id: "b1", live: map[string]api.BrokerInfo{"b2": {ID: "b2", HTTPURL: "http://b2"}}}
	const name = "topic://public/default/x"
	if _, err := h.PollAssignment(ctx, "b2", name, "s", "c", 4, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := h.PollAssignment(ctx, "b9", name, "s", "c", 4, time.Second); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("leader not live: %v", err)
	}
	want := []string{"http://b2 GET topic://public/default/x s/c assignment=true?after=4&wait=1000"}
	if got := peers.took(); !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	peers.err = &peer.StatusError{Status: http.StatusNotFound, Body: "gone"}
	if _, err := h.PollAssignment(ctx, "b2", name, "s", "c", 4, time.Second); !errors.Is(err, api.ErrSubscriptionNotFound) {
		t.Fatalf("404: %v", err)
	}
	peers.err = &peer.StatusError{Status: http.StatusUnauthorized}
	if _, err := h.PollAssignment(ctx, "b2", name, "s", "c", 4, time.Second); !errors.Is(err, api.ErrServiceNotReady) {
		t.Fatalf("401: %v", err)
	}
}

func TestMovedBand(t *testing.T) {
	s := func(in float64) scalable.LoadSample { return scalable.LoadSample{MsgRateIn: in} }
	for _, tc := range []struct {
		a, b float64
		want bool
	}{{0, 0.5, false}, {0, 1, true}, {100, 124, false}, {100, 126, true}, {100, 74, true}, {100, 76, false}} {
		if got := movedBand(s(tc.a), s(tc.b)); got != tc.want {
			t.Errorf("movedBand(%v→%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestControllerErr(t *testing.T) {
	for _, tc := range []struct{ in, want error }{
		{scalable.ErrNotLeading, api.ErrServiceNotReady},
		{scalable.ErrStopped, api.ErrServiceNotReady},
		{scalable.ErrUnknownSubscription, api.ErrTopicNotFound},
		{layout.ErrNotFound, api.ErrTopicNotFound},
		{layout.ErrNotActive, api.ErrInvalidArgument},
		{layout.ErrNotAdjacent, api.ErrInvalidArgument},
		{layout.ErrBadSplit, api.ErrInvalidArgument},
	} {
		if got := controllerErr(tc.in); !errors.Is(got, tc.want) {
			t.Errorf("controllerErr(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if controllerErr(nil) != nil {
		t.Error("controllerErr(nil) != nil")
	}
}

// TestTwoHosts: two hosts on one store (embedded etcd) run a controller each for a topic
// created through one of them; one leads, the other answers the leader's calls with
// *NotOwnerError naming it; the leader's stream consumer gets an assignment; when the
// leader closes the other takes over.
func TestTwoHosts(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	segs := newFakeSegments() // both brokers serve every segment (one shared map)
	infos := map[string]api.BrokerInfo{"b1": {ID: "b1", HTTPURL: "http://b1", ServiceURL: "pulsar://b1"},
		"b2": {ID: "b2", HTTPURL: "http://b2", ServiceURL: "pulsar://b2"}}
	hosts := map[string]*Host{}
	for _, id := range []string{"b1", "b2"} {
		hosts[id] = New(context.Background(), Config{TickInterval: 50 * time.Millisecond}, Env{
			Store: metadatatest.OpenStore(t, eps, ns), SessionTTL: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
			Broker: &fakeBroker{id: id, live: infos}, Segments: segs, Peers: &fakePeers{}})
	}
	defer func() {
		for _, h := range hosts {
			h.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "topic://public/default/two"
	if err := hosts["b1"].CreateScalableTopic(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	if err := hosts["b2"].CreateScalableTopic(ctx, name, 1); !errors.Is(err, api.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := hosts["b1"].CreateScalableTopic(ctx, "topic://public/nons/x", 1); !errors.Is(err, api.ErrNamespaceNotFound) {
		t.Fatalf("create in a missing namespace: %v", err)
	}
	if ts, err := hosts["b2"].ScalableTopics(ctx, "public/default"); err != nil || !slices.Equal(ts, []string{name}) {
		t.Fatalf("list: %v %v", ts, err)
	}
	segs.mu.Lock()
	n := len(segs.topics)
	segs.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d segment topics, want 2", n)
	}

	// leader waits until one host leads the topic and the other names it.
	leader := func(ids ...string) (string, string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			var lead, other string
			for _, id := range ids {
				err := hosts[id].CreateScalableSubscription(ctx, name, "probe-"+id)
				var no *api.NotOwnerError
				switch {
				case err == nil, errors.Is(err, api.ErrAlreadyExists):
					lead = id
				case errors.As(err, &no):
					other = no.Owner.ID
				case !errors.Is(err, api.ErrServiceNotReady):
					t.Fatalf("subscribe on %s: %v", id, err)
				}
			}
			if lead != "" && (len(ids) == 1 || other == lead) {
				return lead, other
			}
			if time.Now().After(deadline) {
				t.Fatalf("no single leader: lead %q, named %q", lead, other)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
	lead, _ := leader("b1", "b2")
	id, err := hosts["b1"].StreamLeader(ctx, name)
	if err != nil || id != lead {
		t.Fatalf("StreamLeader = %q %v, want %q", id, err, lead)
	}
	if got, err := hosts[lead].RegisterStream(ctx, name, "probe-"+lead, "c", 1); err != nil || got != lead {
		t.Fatalf("register on the leader: %q %v", got, err)
	}
	a, err := hosts[lead].PollAssignment(ctx, lead, name, "probe-"+lead, "c", 0, 10*time.Second)
	if err != nil || len(a.Segments) != 2 {
		t.Fatalf("assignment: %+v %v", a, err)
	}
	// The other broker forwards a registration to the leader's admin API.
	other := map[string]string{"b1": "b2", "b2": "b1"}[lead]
	if got, err := hosts[other].RegisterStream(ctx, name, "probe-"+lead, "d", 9); err != nil || got != lead {
		t.Fatalf("register on the other broker: %q %v", got, err)
	}
	want := []string{"http://" + lead + " PUT " + name + " probe-" + lead + "/d assignment=false?session=9"}
	if got := hosts[other].env.Peers.(*fakePeers).took(); !slices.Equal(got, want) {
		t.Fatalf("forwarded calls %q, want %q", got, want)
	}
	// A session's end on another broker, or of an older session, leaves the consumer
	// registered; its own end on the leader unregisters its polls at once.
	hosts[other].StreamEnded(lead, name, "probe-"+lead, "c", 1)
	hosts[lead].StreamEnded(lead, name, "probe-"+lead, "c", 0)
	if _, err := hosts[lead].StreamAssignment(ctx, name, "probe-"+lead, "c", a.Version-1); err != nil {
		t.Fatalf("poll after another session ended: %v", err)
	}
	hosts[lead].StreamEnded(lead, name, "probe-"+lead, "c", 1)
	if _, err := hosts[lead].StreamAssignment(ctx, name, "probe-"+lead, "c", 0); !errors.Is(err, api.ErrSubscriptionNotFound) {
		t.Fatalf("poll after the session ended: %v", err)
	}
	ap, err := hosts[lead].AssignmentProto(ctx, layout.Topic{Tenant: "public", Namespace: "default", Name: "two"}, a)
	if err != nil || len(ap.GetSegments()) != 2 || ap.GetAssignmentVersion() != a.Version {
		t.Fatalf("assignment proto: %v %v", ap, err)
	}
	dag, err := hosts[lead].ScalableDAG(ctx, layout.Topic{Tenant: "public", Namespace: "default", Name: "two"})
	if err != nil || len(dag.GetSegments()) != 2 || len(dag.GetSegmentBrokers()) != 2 || dag.GetControllerBrokerUrl() != "pulsar://"+lead {
		t.Fatalf("dag: %v %v", dag, err)
	}
	st, err := hosts["b2"].ScalableTopicStats(ctx, name)
	if err != nil || st.Active != 2 || len(st.Segments) != 2 || !slices.Equal(slices.Collect(maps.Keys(st.Backlog)), []string{"probe-" + lead}) {
		t.Fatalf("stats: %+v %v", st, err)
	}

	hosts[lead].Close() // resigns
	delete(hosts, lead)
	if got, _ := leader(other); got != other {
		t.Fatalf("after the leader closed: %q leads, want %q", got, other)
	}
	if err := hosts[other].DeleteScalableTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := hosts[other].ScalableLayout(ctx, name); !errors.Is(err, api.ErrTopicNotFound) {
		t.Fatalf("layout after delete: %v", err)
	}
	segs.mu.Lock()
	n = len(segs.topics)
	segs.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d segment topics left after delete", n)
	}
}
