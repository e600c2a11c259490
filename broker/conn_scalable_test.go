package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// dialScalable connects a raw client whose CONNECT sets supports_scalable_topics.
func dialScalable(t *testing.T, svc *broker.Service) *rawClient {
	t.Helper()
	c, got := dialConnect(t, svc, &pb.CommandConnect{FeatureFlags: &pb.FeatureFlags{SupportsScalableTopics: proto.Bool(true)}})
	if got.GetType() != pb.BaseCommand_CONNECTED || !got.GetConnected().GetFeatureFlags().GetSupportsScalableTopics() {
		t.Fatalf("handshake: %v", got)
	}
	return c
}

// push writes body without waiting for an answer.
func (c *rawClient) push(body proto.Message) {
	c.t.Helper()
	b, err := mp.AppendCommand(nil, mp.Wrap(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// until reads commands (skipping PINGs) until ok accepts one, failing after d.
func (c *rawClient) until(what string, d time.Duration, ok func(*pb.BaseCommand) bool) *pb.BaseCommand {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(d))                 //nolint:errcheck // the deadline of this wait
	defer c.nc.SetReadDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // back to the test's bound
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING && ok(f.Cmd) {
			return f.Cmd
		}
	}
}

// quiet proves that nothing is queued for the client: a PING's PONG is the next command.
func (c *rawClient) quiet(what string) {
	c.t.Helper()
	if got := c.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
		c.t.Fatalf("%s: got %v before the PONG", what, got)
	}
}

// scalableBroker starts a broker with fast controllers and creates topic name with n
// segments and subscription sub (if set), waiting for its controller to lead.
func scalableBroker(t *testing.T, name string, n int, sub string) (*broker.Service, context.Context) {
	t.Helper()
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	svc := startServiceWith(t, store, topictest.NewStore(), "b1", func(c *broker.Config) {
		c.Scalable.TickInterval = 50 * time.Millisecond
	})
	ctx := testCtx(t)
	if err := svc.CreateScalableTopic(ctx, name, n); err != nil {
		t.Fatal(err)
	}
	if sub != "" {
		waitLeader(t, "subscribe", func() error { return svc.CreateScalableSubscription(ctx, name, sub) })
	}
	return svc, ctx
}

// waitLeader retries fn while the controller is not leading yet (ErrServiceNotReady).
func waitLeader(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if !errors.Is(err, broker.ErrServiceNotReady) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

func dagSegments(cmd *pb.BaseCommand) []uint64 {
	var ids []uint64
	for _, s := range cmd.GetScalableTopicUpdate().GetDag().GetSegments() {
		ids = append(ids, s.GetSegmentId())
	}
	return ids
}

// TestScalableCommandsNeedFeatureFlag: a client whose CONNECT lacks
// supports_scalable_topics (pulsar-client-go v0.19's) gets ERROR NotAllowedError, with the
// command's id as request_id, for every scalable-topic command, and is never sent one —
// not after its refused lookup, nor when the topic splits.
func TestScalableCommandsNeedFeatureFlag(t *testing.T) {
	const name = "topic://public/default/noflag"
	svc, ctx := scalableBroker(t, name, 1, "s")
	c := dialRaw(t, svc)
	topic, sub, cname := name, "s", "c1"
	for _, tc := range []struct {
		body proto.Message
		id   uint64
	}{
		{&pb.CommandScalableTopicLookup{SessionId: proto.Uint64(11), Topic: &topic}, 11},
		{&pb.CommandScalableTopicSubscribe{RequestId: proto.Uint64(12), Topic: &topic, Subscription: &sub,
			ConsumerName: &cname, ConsumerId: proto.Uint64(1)}, 12},
		{&pb.CommandWatchScalableTopics{WatchId: proto.Uint64(13), Namespace: proto.String("public/default")}, 13},
		{&pb.CommandScalableTopicClose{SessionId: proto.Uint64(11)}, 11},
		{&pb.CommandWatchScalableTopicsClose{WatchId: proto.Uint64(13)}, 13},
	} {
		got := c.roundTrip(tc.body)
		if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_NotAllowedError ||
			got.GetError().GetRequestId() != tc.id {
			t.Fatalf("%T from a client without the flag: %v", tc.body, got)
		}
	}
	waitLeader(t, "split", func() error { return svc.SplitScalableSegment(ctx, name, 0, 0) })
	c.quiet("after a split")
}

// TestScalableDAGWatch: a lookup opens a session answered with the DAG (segments, their
// broker, the controller); a split is pushed within a deadline; after CLOSE nothing more
// is pushed; a missing topic, a bad name and a reused session id are answered with errors
// and the connection stays up.
func TestScalableDAGWatch(t *testing.T) {
	const name = "topic://public/default/dag"
	svc, ctx := scalableBroker(t, name, 1, "")
	c := dialScalable(t, svc)
	topic := name
	c.push(&pb.CommandScalableTopicLookup{SessionId: proto.Uint64(7), Topic: &topic})
	// The controller's URL appears once it leads (maybe in a second update).
	first := c.until("the DAG with its controller", 20*time.Second, func(cmd *pb.BaseCommand) bool {
		if cmd.GetType() != pb.BaseCommand_SCALABLE_TOPIC_UPDATE || cmd.GetScalableTopicUpdate().GetSessionId() != 7 {
			t.Fatalf("unexpected %v", cmd)
		}
		return cmd.GetScalableTopicUpdate().GetDag().GetControllerBrokerUrl() != ""
	})
	u := first.GetScalableTopicUpdate()
	want := "pulsar://" + svc.Addr().String()
	if u.GetResolvedTopicName() != name || u.GetDag().GetControllerBrokerUrl() != want ||
		!slices.Equal(dagSegments(first), []uint64{0}) {
		t.Fatalf("first update: %v", u)
	}
	seg := u.GetDag().GetSegments()[0]
	if seg.GetState() != pb.SegmentState_ACTIVE || seg.GetHashStart() != 0 || seg.GetHashEnd() != 0xffff ||
		len(u.GetDag().GetSegmentBrokers()) != 1 || u.GetDag().GetSegmentBrokers()[0].GetBrokerUrl() != want {
		t.Fatalf("first DAG: %v", u.GetDag())
	}

	// A split is pushed: parent sealed, two active children.
	start := time.Now()
	waitLeader(t, "split", func() error { return svc.SplitScalableSegment(ctx, name, 0, 0) })
	split := c.until("the split", 10*time.Second, func(cmd *pb.BaseCommand) bool { return len(dagSegments(cmd)) == 3 })
	t.Logf("split pushed %v after the request", time.Since(start))
	dag := split.GetScalableTopicUpdate().GetDag()
	if dag.GetEpoch() <= u.GetDag().GetEpoch() || dag.GetSegments()[0].GetState() != pb.SegmentState_SEALED ||
		!slices.Equal(dag.GetSegments()[0].GetChildIds(), []uint64{1, 2}) {
		t.Fatalf("DAG after the split: %v", dag)
	}

	// Errors: a reused session id, a missing topic, a bad name.
	for _, tc := range []struct {
		id    uint64
		topic string
		code  pb.ServerError
	}{
		{7, name, pb.ServerError_NotAllowedError},
		{8, "topic://public/default/missing", pb.ServerError_TopicNotFound},
		{9, "topic://no-namespace", pb.ServerError_InvalidTopicName},
	} {
		c.push(&pb.CommandScalableTopicLookup{SessionId: &tc.id, Topic: &tc.topic})
		got := c.until("an error", 10*time.Second, func(cmd *pb.BaseCommand) bool { return true })
		if got.GetScalableTopicUpdate().GetSessionId() != tc.id || got.GetScalableTopicUpdate().GetError() != tc.code {
			t.Fatalf("lookup %d of %s: %v, want %v", tc.id, tc.topic, got, tc.code)
		}
	}

	// After CLOSE, a merge is not pushed.
	c.push(&pb.CommandScalableTopicClose{SessionId: proto.Uint64(7)})
	c.quiet("after CLOSE")
	if err := svc.MergeScalableSegments(ctx, name, 1, 2); err != nil {
		t.Fatal(err)
	}
	c.quiet("after a merge with the session closed")
}

// TestScalableStreamSubscribe: SUBSCRIBE is answered with the consumer's assignment (the
// segment's name and range), a split pushes ASSIGNMENT_UPDATE with the children, and bad
// subscribes are answered with errors.
func TestScalableStreamSubscribe(t *testing.T) {
	const name = "topic://public/default/stream"
	svc, ctx := scalableBroker(t, name, 1, "s")
	c := dialScalable(t, svc)
	topic, sub, cname := name, "s", "c1"
	got := c.roundTrip(&pb.CommandScalableTopicSubscribe{RequestId: proto.Uint64(3), Topic: &topic, Subscription: &sub,
		ConsumerName: &cname, ConsumerId: proto.Uint64(5)})
	r := got.GetScalableTopicSubscribeResponse()
	if got.GetType() != pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE_RESPONSE || r.GetRequestId() != 3 || r.Error != nil {
		t.Fatalf("subscribe: %v", got)
	}
	segs := r.GetAssignment().GetSegments()
	if len(segs) != 1 || segs[0].GetSegmentId() != 0 || segs[0].GetSegmentTopic() != "segment://public/default/stream/0000-ffff-0" ||
		segs[0].GetHashEnd() != 0xffff {
		t.Fatalf("first assignment: %v", r.GetAssignment())
	}
	waitLeader(t, "split", func() error { return svc.SplitScalableSegment(ctx, name, 0, 0) })
	upd := c.until("the children's assignment", 20*time.Second, func(cmd *pb.BaseCommand) bool {
		if cmd.GetType() != pb.BaseCommand_SCALABLE_TOPIC_ASSIGNMENT_UPDATE || cmd.GetScalableTopicAssignmentUpdate().GetConsumerId() != 5 {
			t.Fatalf("unexpected %v", cmd)
		}
		var ids []uint64
		for _, s := range cmd.GetScalableTopicAssignmentUpdate().GetAssignment().GetSegments() {
			ids = append(ids, s.GetSegmentId())
		}
		return slices.Contains(ids, 1) && slices.Contains(ids, 2)
	})
	t.Logf("assignment after the split: %v", upd.GetScalableTopicAssignmentUpdate().GetAssignment())

	for _, tc := range []struct {
		topic, sub, name string
		cid              uint64
		code             pb.ServerError
	}{
		{name, "s", "c2", 5, pb.ServerError_NotAllowedError}, // consumer id in use
		{"persistent://public/default/x", "s", "c2", 6, pb.ServerError_InvalidTopicName},
		{name, "", "c2", 7, pb.ServerError_UnknownError},
	} {
		got := c.roundTrip(&pb.CommandScalableTopicSubscribe{RequestId: proto.Uint64(tc.cid + 100), Topic: &tc.topic,
			Subscription: &tc.sub, ConsumerName: &tc.name, ConsumerId: &tc.cid})
		r := got.GetScalableTopicSubscribeResponse()
		if r.GetRequestId() != tc.cid+100 || r.Error == nil || (tc.code != pb.ServerError_UnknownError && r.GetError() != tc.code) {
			t.Fatalf("subscribe %+v: %v", tc, got)
		}
	}
}

// TestScalableNamespaceWatch: WATCH_SCALABLE_TOPICS answers a snapshot of the namespace's
// scalable topics, then a diff for a created and for a deleted one; after CLOSE nothing.
func TestScalableNamespaceWatch(t *testing.T) {
	const name = "topic://public/default/w1"
	svc, ctx := scalableBroker(t, name, 1, "")
	c := dialScalable(t, svc)
	got := c.roundTrip(&pb.CommandWatchScalableTopics{WatchId: proto.Uint64(4), Namespace: proto.String("public/default")})
	w := got.GetWatchScalableTopicsUpdate()
	if w.GetWatchId() != 4 || !slices.Equal(w.GetSnapshot().GetTopics(), []string{name}) {
		t.Fatalf("snapshot: %v", got)
	}
	const second = "topic://public/default/w2"
	if err := svc.CreateScalableTopic(ctx, second, 2); err != nil {
		t.Fatal(err)
	}
	got = c.until("the diff adding w2", 10*time.Second, func(*pb.BaseCommand) bool { return true })
	if d := got.GetWatchScalableTopicsUpdate().GetDiff(); !slices.Equal(d.GetAdded(), []string{second}) || len(d.GetRemoved()) != 0 {
		t.Fatalf("diff after a create: %v", got)
	}
	if err := svc.DeleteScalableTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	got = c.until("the diff removing w1", 10*time.Second, func(*pb.BaseCommand) bool { return true })
	if d := got.GetWatchScalableTopicsUpdate().GetDiff(); !slices.Equal(d.GetRemoved(), []string{name}) || len(d.GetAdded()) != 0 {
		t.Fatalf("diff after a delete: %v", got)
	}
	for _, tc := range []struct {
		ns   string
		code pb.ServerError
	}{{"public/missing", pb.ServerError_TopicNotFound}, {"bad", pb.ServerError_InvalidTopicName}} {
		got := c.roundTrip(&pb.CommandWatchScalableTopics{WatchId: proto.Uint64(9), Namespace: &tc.ns})
		if w := got.GetWatchScalableTopicsUpdate(); w.GetWatchId() != 9 || w.GetError() != tc.code {
			t.Fatalf("watch of %s: %v, want %v", tc.ns, got, tc.code)
		}
	}
	c.push(&pb.CommandWatchScalableTopicsClose{WatchId: proto.Uint64(4)})
	c.quiet("after CLOSE")
	if err := svc.DeleteScalableTopic(ctx, second); err != nil {
		t.Fatal(err)
	}
	c.quiet("after a delete with the watch closed")
}

// TestScalableMalformedCommandClosesConnection: a SCALABLE_TOPIC_SUBSCRIBE lacking a
// required field (consumer_name) is a malformed frame: the broker closes the connection.
func TestScalableMalformedCommandClosesConnection(t *testing.T) {
	const name = "topic://public/default/malformed"
	svc, _ := scalableBroker(t, name, 1, "")
	c := dialScalable(t, svc)
	topic, sub := name, "s"
	cmd := mp.Wrap(&pb.CommandScalableTopicSubscribe{RequestId: proto.Uint64(1), Topic: &topic, Subscription: &sub,
		ConsumerId: proto.Uint64(1)})
	body, err := proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(body)))
	if _, err := c.nc.Write(append(frame, body...)); err != nil {
		t.Fatal(err)
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // bounds the wait
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the connection stayed open after a malformed command")
			}
			return // closed
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			t.Fatalf("answer to a malformed command: %v", f.Cmd)
		}
	}
}

// TestScalableDAGWatchFollowsController: a DAG watch on one broker pushes the controller's
// new URL when leadership moves to it from a broker that closes.
func TestScalableDAGWatchFollowsController(t *testing.T) {
	eps := metadatatest.Embedded(t)
	ns := metadatatest.RandomNamespace()
	mem := topictest.NewStore()
	fast := func(c *broker.Config) { c.Scalable.TickInterval = 50 * time.Millisecond }
	b1 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b1", fast)
	ctx := testCtx(t)
	const name = "topic://public/default/moving"
	if err := b1.CreateScalableTopic(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	// Succeeds only on the leader: b1 leads.
	waitLeader(t, "subscribe on b1", func() error { return b1.CreateScalableSubscription(ctx, name, "s") })
	b2 := startServiceWith(t, metadatatest.OpenStore(t, eps, ns), mem, "b2", fast)
	c := dialScalable(t, b2)
	topic := name
	c.push(&pb.CommandScalableTopicLookup{SessionId: proto.Uint64(1), Topic: &topic})
	url1, url2 := "pulsar://"+b1.Addr().String(), "pulsar://"+b2.Addr().String()
	c.until("b1 as the controller", 10*time.Second, func(cmd *pb.BaseCommand) bool {
		return cmd.GetScalableTopicUpdate().GetDag().GetControllerBrokerUrl() == url1
	})
	b1.Close()
	start := time.Now()
	c.until("b2 as the controller", 20*time.Second, func(cmd *pb.BaseCommand) bool {
		return cmd.GetScalableTopicUpdate().GetDag().GetControllerBrokerUrl() == url2
	})
	t.Logf("new controller pushed %v after the old one closed", time.Since(start))
}

// TestScalableStreamConsumerConnectionLost: two stream consumers share a 2-segment topic;
// when one's connection ends, the controller learns it at once (not after its polls are
// found stale) and, after the grace period, pushes both segments to the other.
func TestScalableStreamConsumerConnectionLost(t *testing.T) {
	const name = "topic://public/default/lost"
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	svc := startServiceWith(t, store, topictest.NewStore(), "b1", func(c *broker.Config) {
		c.Scalable.TickInterval = 50 * time.Millisecond
		c.Scalable.ConsumerGrace = 200 * time.Millisecond
	})
	ctx := testCtx(t)
	if err := svc.CreateScalableTopic(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, "subscribe", func() error { return svc.CreateScalableSubscription(ctx, name, "s") })
	topic, sub := name, "s"
	subscribe := func(c *rawClient, cname string, cid uint64) int {
		t.Helper()
		got := c.roundTrip(&pb.CommandScalableTopicSubscribe{RequestId: proto.Uint64(cid), Topic: &topic, Subscription: &sub,
			ConsumerName: &cname, ConsumerId: &cid})
		r := got.GetScalableTopicSubscribeResponse()
		if r == nil || r.Error != nil {
			t.Fatalf("subscribe %s: %v", cname, got)
		}
		return len(r.GetAssignment().GetSegments())
	}
	segs := func(cmd *pb.BaseCommand) int {
		return len(cmd.GetScalableTopicAssignmentUpdate().GetAssignment().GetSegments())
	}
	c1, c2 := dialScalable(t, svc), dialScalable(t, svc)
	subscribe(c1, "a", 1)
	if subscribe(c2, "b", 2) != 1 {
		c2.until("one segment for b", 10*time.Second, func(cmd *pb.BaseCommand) bool { return segs(cmd) == 1 })
	}
	c1.nc.Close()
	start := time.Now()
	c2.until("both segments for b", 5*time.Second, func(cmd *pb.BaseCommand) bool { return segs(cmd) == 2 })
	t.Logf("b got both segments %v after a's connection closed", time.Since(start))
}
