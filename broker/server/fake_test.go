package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend is a Backend without etcd or bookies: topics are broker/topic topics over
// topictest's in-memory logs, and everything else answers from its fields. Safe for
// concurrent use.
type fakeBackend struct {
	mem *topictest.Store

	mu struct {
		sync.Mutex
		topics   map[string]*topic.Topic
		existing map[string]bool // topics that exist without being loaded
		names    int
		authz    []string // AuthorizeTopic calls: "role act topic"
	}
	// lookup answers LOOKUP; partitions PARTITIONED_METADATA (nil: 0).
	lookup     func(topic string, authoritative bool) (api.LookupResult, error)
	partitions func(topic string) (int, error)
	// allowed are the roles AuthorizeTopic and AuthorizeNamespace let through; subRoles,
	// by subscription, the only roles AuthorizeSubscription lets through (none: every
	// allowed role).
	allowed  map[string]bool
	subRoles map[string][]string
	// namespaces are the namespaces that exist, with their persistent topics.
	namespaces map[string][]string
	// coordinator serves the transaction commands (nil: transactions are off).
	coordinator server.Coordinator
	// dagEpoch is the epoch of the one scalable topic's DAG (0: there is none). Each DAG
	// watch and namespace watch hands the test, on dagWatches and nsWatches, the channel
	// that feeds its ticks or topic lists.
	dagEpoch   atomic.Uint64
	dagWatches chan chan<- struct{}
	nsWatches  chan chan<- []string
	// gates hold the adds of the topics named (set before the topic loads): a publish
	// stays in flight until the test opens its gate.
	gates map[string]*addGate
}

// addGate holds a log's adds until it opens, then completes them in order. Safe for
// concurrent use.
type addGate struct {
	mu   sync.Mutex // also orders the adds: they reach the log under it
	open bool
	held []func()
	n    int // adds held so far
}

func newAddGate() *addGate { return &addGate{} }

// gatedLog is a log whose adds wait for its gate.
type gatedLog struct {
	topic.Log
	g *addGate
}

func (l gatedLog) AddAsync(data []byte, cb func(topic.Position, error)) {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	if !l.g.open {
		l.g.held = append(l.g.held, func() { l.Log.AddAsync(data, cb) })
		l.g.n++
		return
	}
	l.Log.AddAsync(data, cb)
}

// heldAdds returns how many adds the gate has held.
func (g *addGate) heldAdds() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// release opens the gate and completes the held adds.
func (g *addGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
	for _, add := range g.held {
		add()
	}
	g.held = nil
}

var _ server.Backend = (*fakeBackend)(nil)

func newFakeBackend() *fakeBackend {
	b := &fakeBackend{mem: topictest.NewStore(), namespaces: map[string][]string{"public/default": nil},
		dagWatches: make(chan chan<- struct{}, 10), nsWatches: make(chan chan<- []string, 10)}
	b.mu.topics = map[string]*topic.Topic{}
	b.mu.existing = map[string]bool{}
	return b
}

// closeTopics closes every loaded topic and waits for its goroutines.
func (b *fakeBackend) closeTopics(t *testing.T) {
	b.mu.Lock()
	ts := b.mu.topics
	b.mu.topics = map[string]*topic.Topic{}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tp := range ts {
		if err := tp.Close(ctx); err != nil {
			t.Errorf("close %s: %v", tp.Name(), err)
		}
		<-tp.Done()
	}
}

func (b *fakeBackend) loaded(name string) *topic.Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.topics[name]
}

func (b *fakeBackend) AuthorizeTopic(_ context.Context, role string, n topicname.Name, act auth.Action) error {
	b.mu.Lock()
	b.mu.authz = append(b.mu.authz, role+" "+string(act)+" "+n.String())
	b.mu.Unlock()
	if !b.allowed[role] {
		return fmt.Errorf("%w: role %s may not %s on %s", auth.ErrNotAuthorized, role, act, n)
	}
	return nil
}

func (b *fakeBackend) AuthorizeSubscription(ctx context.Context, role string, n topicname.Name, sub string) error {
	if err := b.AuthorizeTopic(ctx, role, n, auth.ActionConsume); err != nil {
		return err
	}
	if roles := b.subRoles[sub]; len(roles) > 0 && !slices.Contains(roles, role) {
		return fmt.Errorf("%w: role %s may not consume through %s", auth.ErrNotAuthorized, role, sub)
	}
	return nil
}

func (b *fakeBackend) AuthorizeNamespace(_ context.Context, role, tenant, ns string) error {
	if !b.allowed[role] {
		return fmt.Errorf("%w: role %s may not list %s/%s", auth.ErrNotAuthorized, role, tenant, ns)
	}
	return nil
}

func (b *fakeBackend) Lookup(_ context.Context, topic string, authoritative bool) (api.LookupResult, error) {
	if b.lookup == nil {
		return api.LookupResult{BrokerInfo: api.BrokerInfo{ID: "self", ServiceURL: "pulsar://self:6650"}, Self: true}, nil
	}
	return b.lookup(topic, authoritative)
}

func (b *fakeBackend) PartitionedMetadata(_ context.Context, topic string) (int, error) {
	if b.partitions == nil {
		return 0, nil
	}
	return b.partitions(topic)
}

func (b *fakeBackend) CheckNamespace(_ context.Context, tenant, ns string) error {
	if _, ok := b.namespaces[tenant+"/"+ns]; !ok {
		return fmt.Errorf("%w: %s/%s", api.ErrNamespaceNotFound, tenant, ns)
	}
	return nil
}

func (b *fakeBackend) NamespaceTopics(_ context.Context, tenant, ns, domain string) ([]string, error) {
	if domain != topicname.Persistent {
		return nil, nil
	}
	return b.namespaces[tenant+"/"+ns], nil
}

// Topic loads topics over the in-memory logs; a topic that was never created is created
// only if create is set.
func (b *fakeBackend) Topic(ctx context.Context, n topicname.Name, create bool) (*topic.Topic, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := n.String()
	if t := b.mu.topics[key]; t != nil {
		return t, nil
	}
	if !create && !b.mu.existing[key] {
		return nil, fmt.Errorf("%w: %s", api.ErrTopicNotFound, n)
	}
	log := b.mem.Open(n.ManagedLedgerName())
	if g := b.gates[key]; g != nil {
		log = gatedLog{Log: log, g: g}
	}
	t, err := topic.Open(ctx, topic.Config{Name: n, Log: log, Dedup: true})
	if err != nil {
		return nil, err
	}
	b.mu.topics[key], b.mu.existing[key] = t, true
	return t, nil
}

func (b *fakeBackend) NewProducerName() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.names++
	return "fake-" + strconv.Itoa(b.mu.names-1)
}

func (b *fakeBackend) OfferSchema(_ context.Context, _ topicname.Name, sc *pb.Schema, _ server.SchemaUse) ([]byte, error) {
	if sc == nil {
		return nil, nil
	}
	return []byte{0, 0, 0, 0, 0, 0, 0, 0}, nil
}

func (b *fakeBackend) Schema(_ context.Context, n topicname.Name, _ []byte) (*pb.Schema, []byte, error) {
	return nil, nil, fmt.Errorf("%w: %s", api.ErrSchemaNotFound, n)
}

func (b *fakeBackend) TxnCoordinator(_ context.Context, tc uint64) (server.Coordinator, error) {
	switch {
	case b.coordinator == nil:
		return nil, topic.ErrTxnDisabled
	case tc != 0:
		return nil, fmt.Errorf("%w: %d", server.ErrNoCoordinator, tc)
	}
	return b.coordinator, nil
}

var errNoScalable = fmt.Errorf("%w: no scalable topics here", api.ErrTopicNotFound)

func (b *fakeBackend) ScalableDAG(context.Context, layout.Topic) (*pb.ScalableTopicDAG, error) {
	e := b.dagEpoch.Load()
	if e == 0 {
		return nil, errNoScalable
	}
	return &pb.ScalableTopicDAG{Epoch: &e}, nil
}

// forward sends what in carries to a new channel until ctx ends.
func forward[T any](ctx context.Context, in <-chan T) <-chan T {
	out := make(chan T)
	go func() {
		defer close(out)
		for {
			select {
			case v := <-in:
				select {
				case out <- v:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (b *fakeBackend) WatchScalableTopic(ctx context.Context, _ layout.Topic) <-chan struct{} {
	in := make(chan struct{})
	b.dagWatches <- in
	return forward(ctx, in)
}

func (b *fakeBackend) WatchScalableTopics(ctx context.Context, _, _ string) <-chan []string {
	in := make(chan []string)
	b.nsWatches <- in
	return forward(ctx, in)
}

func (b *fakeBackend) RegisterStream(context.Context, string, string, string, uint64) (string, error) {
	return "", errNoScalable
}

func (b *fakeBackend) StreamAssignment(context.Context, string, string, string, string, uint64, time.Duration) (scalable.Assignment, error) {
	return scalable.Assignment{}, errNoScalable
}

func (b *fakeBackend) AssignmentProto(context.Context, layout.Topic, scalable.Assignment) (*pb.ScalableConsumerAssignment, error) {
	return nil, errNoScalable
}

func (b *fakeBackend) StreamLeader(context.Context, string) (string, error) { return "", errNoScalable }

func (b *fakeBackend) StreamEnded(string, string, string, string, uint64) {}

func (b *fakeBackend) CheckAttach(string, string, map[string]string) error { return nil }

// logBuffer collects a server's log lines (safe for concurrent use).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testServer is a server of a fake backend on a loopback listener.
type testServer struct {
	srv  *server.Server
	b    *fakeBackend
	reg  *prometheus.Registry // the server's metrics
	logs *logBuffer
	addr string
}

// startServer serves b with cfg (its defaults filled in) until the test ends; then it
// closes the listener and the connections, cancels the server's context, waits for its
// goroutines and closes b's topics.
func startServer(t *testing.T, b *fakeBackend, cfg server.Config) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{b: b, reg: prometheus.NewRegistry(), logs: &logBuffer{}, addr: ln.Addr().String()}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = 5 << 20
	}
	if cfg.MaxPendingPublishPerConnection == 0 {
		cfg.MaxPendingPublishPerConnection = 1000
	}
	if cfg.KeepAliveInterval == 0 {
		cfg.KeepAliveInterval = 30 * time.Second
	}
	cfg.Metrics = server.NewMetrics(ts.reg)
	cfg.Logger = slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	ts.srv = server.New(ctx, b, cfg)
	ts.srv.Serve(ln)
	t.Cleanup(func() {
		ln.Close()
		ts.srv.CloseConns("test over")
		cancel()
		ts.srv.Wait()
		b.closeTopics(t)
	})
	return ts
}

// metric returns the value of the server's counter or gauge name (with label value label,
// if not empty); 0 if it has none.
func (ts *testServer) metric(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// client speaks the Pulsar protocol to a server frame by frame.
type client struct {
	t   *testing.T
	nc  net.Conn
	fr  *mp.FrameReader
	rid uint64
}

// dial connects without a handshake.
func (ts *testServer) dial(t *testing.T) *client {
	t.Helper()
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(time.Minute)) //nolint:errcheck // bounds a test that hangs
	return &client{t: t, nc: nc, fr: mp.NewFrameReader(nc, 0)}
}

// connect dials and sends CONNECT (cmd, or an empty one), returning the answer.
func (ts *testServer) connect(t *testing.T, cmd *pb.CommandConnect) (*client, *pb.BaseCommand) {
	t.Helper()
	c := ts.dial(t)
	if cmd == nil {
		cmd = &pb.CommandConnect{}
	}
	if cmd.ClientVersion == nil {
		cmd.ClientVersion = proto.String("fake-test")
	}
	if cmd.ProtocolVersion == nil {
		cmd.ProtocolVersion = proto.Int32(20)
	}
	return c, c.roundTrip(cmd)
}

// connected is connect that must succeed.
func (ts *testServer) connected(t *testing.T) *client {
	t.Helper()
	c, got := ts.connect(t, nil)
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("handshake: %v", got)
	}
	return c
}

func (c *client) nextID() *uint64 {
	c.rid++
	id := c.rid
	return &id
}

// write sends raw bytes.
func (c *client) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// push sends body without waiting for an answer.
func (c *client) push(body proto.Message) {
	c.t.Helper()
	b, err := mp.AppendCommand(nil, mp.Wrap(body))
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

// next returns the next command from the server other than a PING.
func (c *client) next() *pb.BaseCommand {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading from the server: %v", err)
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			return f.Cmd
		}
	}
}

// roundTrip sends body and returns the next command from the server other than a PING.
func (c *client) roundTrip(body proto.Message) *pb.BaseCommand {
	c.t.Helper()
	c.push(body)
	return c.next()
}

// send sends one message of producer pid and returns the server's answer.
func (c *client) send(pid, seq uint64, meta *pb.MessageMetadata) *pb.BaseCommand {
	c.t.Helper()
	c.pushSend(pid, seq, meta)
	return c.next()
}

// pushSend sends one message of producer pid (meta nil: a valid one of its own).
func (c *client) pushSend(pid, seq uint64, meta *pb.MessageMetadata) {
	c.t.Helper()
	if meta == nil {
		meta = &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: &seq,
			PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
	}
	b, err := mp.AppendPayloadCommand(nil, mp.Wrap(&pb.CommandSend{ProducerId: &pid, SequenceId: &seq}), meta, []byte("payload-"+strconv.FormatUint(seq, 10)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

// closedByServer reports whether the server closed the connection (EOF before any frame
// other than a PING).
func (c *client) closedByServer() bool {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			return !errors.As(err, &ne) || !ne.Timeout()
		}
		if f.Cmd.GetType() != pb.BaseCommand_PING {
			c.t.Logf("unexpected frame %v", f.Cmd.GetType())
			return false
		}
	}
}
