package broker_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// rawClient speaks the Pulsar protocol to a broker frame by frame.
type rawClient struct {
	t   *testing.T
	nc  net.Conn
	fr  *mp.FrameReader
	rid uint64
}

func dialRaw(t *testing.T, svc *broker.Service) *rawClient {
	t.Helper()
	c, got := dialConnect(t, svc, &pb.CommandConnect{})
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("handshake: %v", got)
	}
	return c
}

// dialConnect connects, sends cmd (its client and protocol versions filled in) and returns
// the client and the broker's answer.
func dialConnect(t *testing.T, svc *broker.Service, cmd *pb.CommandConnect) (*rawClient, *pb.BaseCommand) {
	t.Helper()
	nc, err := net.Dial("tcp", svc.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // bounds a test that hangs
	c := &rawClient{t: t, nc: nc, fr: mp.NewFrameReader(nc, 0)}
	v, pv := "raw-test", int32(20)
	cmd.ClientVersion, cmd.ProtocolVersion = &v, &pv
	return c, c.roundTrip(cmd)
}

// nextID returns a fresh request id.
func (c *rawClient) nextID() *uint64 {
	c.rid++
	id := c.rid
	return &id
}

// roundTrip sends body and returns the next command from the broker other than a PING.
func (c *rawClient) roundTrip(body proto.Message) *pb.BaseCommand {
	c.t.Helper()
	b, err := mp.AppendCommand(nil, mp.Wrap(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading the answer to %T: %v", body, err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			return f.Cmd
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestProducerInitialSubscription: a PRODUCER naming initial_subscription_name (the
// clients' dead-letter producers do) gets that durable subscription created before its
// PRODUCER_SUCCESS, as in Pulsar; an empty name (the Go client always sends the field)
// creates none, and a subscription that exists is kept.
func TestProducerInitialSubscription(t *testing.T) {
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	svc := startService(t, store, topictest.NewStore(), "b1")
	ctx := testCtx(t)
	c := dialRaw(t, svc)
	produce := func(topic, sub string, pid uint64) {
		t.Helper()
		got := c.roundTrip(&pb.CommandProducer{Topic: &topic, ProducerId: &pid, RequestId: c.nextID(),
			InitialSubscriptionName: &sub})
		if got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("producer of %s: %v", topic, got)
		}
	}
	const t1, t2 = "persistent://public/default/with-init", "persistent://public/default/without-init"
	produce(t1, "init", 1)
	if subs, err := svc.Subscriptions(ctx, t1); err != nil || !slices.Equal(subs, []string{"init"}) {
		t.Fatalf("subscriptions after a producer with an initial subscription: %v %v", subs, err)
	}
	produce(t2, "", 2)
	if subs, err := svc.Subscriptions(ctx, t2); err != nil || len(subs) != 0 {
		t.Fatalf("subscriptions after a producer without one: %v %v", subs, err)
	}
	// A second producer naming the same subscription: it exists, and stays the only one.
	produce(t1, "init", 3)
	if subs, err := svc.Subscriptions(ctx, t1); err != nil || !slices.Equal(subs, []string{"init"}) {
		t.Fatalf("subscriptions after a second producer: %v %v", subs, err)
	}
}

// TestTopicsOfMissingNamespace: GET_TOPICS_OF_NAMESPACE of a namespace (or tenant) that does
// not exist is answered at once, as Pulsar answers it: in PERSISTENT mode (the Go client's)
// with an empty list, in NON_PERSISTENT and ALL modes with MetadataError. A namespace that
// exists lists its topics in every mode but NON_PERSISTENT.
func TestTopicsOfMissingNamespace(t *testing.T) {
	store := metadatatest.NewStore(t, metadatatest.Embedded(t))
	svc := startService(t, store, topictest.NewStore(), "b1")
	ctx := testCtx(t)
	if err := svc.CreateTopic(ctx, "public/default/listed"); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, svc)
	list := func(ns string, mode pb.CommandGetTopicsOfNamespace_Mode) *pb.BaseCommand {
		return c.roundTrip(&pb.CommandGetTopicsOfNamespace{RequestId: c.nextID(), Namespace: &ns, Mode: mode.Enum()})
	}
	for _, ns := range []string{"public/missing", "missing/missing"} {
		got := list(ns, pb.CommandGetTopicsOfNamespace_PERSISTENT)
		if got.GetType() != pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE || len(got.GetGetTopicsOfNamespaceResponse().GetTopics()) != 0 {
			t.Fatalf("%s, PERSISTENT: %v", ns, got)
		}
		for _, mode := range []pb.CommandGetTopicsOfNamespace_Mode{pb.CommandGetTopicsOfNamespace_NON_PERSISTENT, pb.CommandGetTopicsOfNamespace_ALL} {
			got := list(ns, mode)
			if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_MetadataError ||
				!strings.Contains(got.GetError().GetMessage(), ns) {
				t.Fatalf("%s, %v: %v", ns, mode, got)
			}
		}
	}
	want := []string{"persistent://public/default/listed"}
	for mode, n := range map[pb.CommandGetTopicsOfNamespace_Mode]int{pb.CommandGetTopicsOfNamespace_PERSISTENT: 1,
		pb.CommandGetTopicsOfNamespace_NON_PERSISTENT: 0, pb.CommandGetTopicsOfNamespace_ALL: 1} {
		got := list("public/default", mode)
		topics := got.GetGetTopicsOfNamespaceResponse().GetTopics()
		if got.GetType() != pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE || !slices.Equal(topics, want[:n]) {
			t.Fatalf("public/default, %v: %v", mode, got)
		}
	}
}

// schemaFailStore fails every Put of a schema version of public/default/schematic, without
// storing it, while fail is set.
type schemaFailStore struct {
	metadata.Store
	fail atomic.Bool
}

var errInjected = errors.New("injected schema store failure")

func (s *schemaFailStore) Put(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	if s.fail.Load() && strings.HasPrefix(key, metadata.SchemaPrefix("public", "default", "schematic")) {
		return 0, errInjected
	}
	return s.Store.Put(ctx, key, value, expected)
}

// TestProducerSchemaStoredFirst: a producer whose schema is new gets PRODUCER_SUCCESS (which
// names the schema version) only once that version is stored: while the store refuses it the
// producer is refused and no version exists; then the version is in the store when the
// success arrives.
func TestProducerSchemaStoredFirst(t *testing.T) {
	inner := metadatatest.NewStore(t, metadatatest.Embedded(t))
	store := &schemaFailStore{Store: inner}
	svc := startService(t, store, topictest.NewStore(), "b1")
	ctx := testCtx(t)
	c := dialRaw(t, svc)
	topic := "persistent://public/default/schematic"
	name, typ := "s", pb.Schema_Json
	schema := &pb.Schema{Name: &name, Type: &typ, SchemaData: []byte(`{"type":"record","name":"r","fields":[]}`)}
	prefix := metadata.SchemaPrefix("public", "default", "schematic")
	stored := func() int {
		kvs, _, err := inner.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return len(kvs)
	}

	store.fail.Store(true)
	pid := uint64(1)
	got := c.roundTrip(&pb.CommandProducer{Topic: &topic, ProducerId: &pid, RequestId: c.nextID(), Schema: schema})
	if got.GetType() != pb.BaseCommand_ERROR {
		t.Fatalf("producer whose schema could not be stored: %v", got)
	}
	if n := stored(); n != 0 {
		t.Fatalf("%d schema versions stored after a refused registration", n)
	}

	store.fail.Store(false)
	pid = 2
	got = c.roundTrip(&pb.CommandProducer{Topic: &topic, ProducerId: &pid, RequestId: c.nextID(), Schema: schema})
	if got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || len(got.GetProducerSuccess().GetSchemaVersion()) != 8 {
		t.Fatalf("producer with a schema: %v", got)
	}
	if n := stored(); n != 1 {
		t.Fatalf("%d schema versions stored when PRODUCER_SUCCESS arrived, want 1", n)
	}
}
