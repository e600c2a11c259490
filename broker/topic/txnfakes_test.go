package topic_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// Fakes for the tests of the transaction drivers (txnbuffer.go, pendingacks.go). Every test
// runs in a synctest bubble: the fakes block only on channels of the bubble, so
// synctest.Wait tells that the topic, its subscriptions and the drivers' goroutines have
// done everything they can, and time is virtual.

// storeCall is one write the memStore applied: a Commit's ops (a commit group), or a
// single Put or Delete.
type storeCall struct {
	kind string // "commit", "put", "delete"
	ops  []metadata.Op
}

// memStore is an in-memory metadata.Store that records its writes. Its hooks, if set, run
// before a Commit or Get (outside its lock: they may block or sleep) and fail it with
// their error. Safe for concurrent use.
type memStore struct {
	mu       sync.Mutex
	kvs      map[string]metadata.KV
	rev      int64
	calls    []storeCall
	onCommit func(ctx context.Context, ops []metadata.Op) error
	onGet    func(key string) error
}

var _ metadata.Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{kvs: map[string]metadata.KV{}} }

func (s *memStore) Get(_ context.Context, key string) (metadata.KV, error) {
	s.mu.Lock()
	hook := s.onGet
	s.mu.Unlock()
	if hook != nil {
		if err := hook(key); err != nil {
			return metadata.KV{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kv, ok := s.kvs[key]
	if !ok {
		return metadata.KV{}, metadata.ErrNotFound
	}
	return kv, nil
}

func (s *memStore) Put(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	vs, err := s.apply("put", []metadata.Op{{Key: key, Value: value, Expected: expected}})
	if err != nil {
		return 0, err
	}
	return vs[0], nil
}

func (s *memStore) Delete(ctx context.Context, key string, expected metadata.Version) error {
	_, err := s.apply("delete", []metadata.Op{{Key: key, Expected: expected, Delete: true}})
	return err
}

func (s *memStore) Commit(ctx context.Context, ops []metadata.Op) ([]metadata.Version, error) {
	s.mu.Lock()
	hook := s.onCommit
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, ops); err != nil {
			return nil, err
		}
	}
	return s.apply("commit", ops)
}

// apply applies ops atomically (a version mismatch fails them all).
func (s *memStore) apply(kind string, ops []metadata.Op) ([]metadata.Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		cur, ok := s.kvs[op.Key]
		switch {
		case op.Expected == metadata.AnyVersion:
		case op.Expected == metadata.NotExists && ok:
			return nil, metadata.ErrBadVersion
		case op.Expected != metadata.NotExists && (!ok || cur.Version != op.Expected):
			return nil, metadata.ErrBadVersion
		}
	}
	s.rev++
	vs := make([]metadata.Version, len(ops))
	for i, op := range ops {
		switch {
		case op.Check:
		case op.Delete:
			delete(s.kvs, op.Key)
		default:
			s.kvs[op.Key] = metadata.KV{Key: op.Key, Value: slices.Clone(op.Value), Version: metadata.Version(s.rev), Created: s.rev}
			vs[i] = metadata.Version(s.rev)
		}
	}
	s.calls = append(s.calls, storeCall{kind: kind, ops: slices.Clone(ops)})
	return vs, nil
}

func (s *memStore) List(_ context.Context, prefix string) ([]metadata.KV, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []metadata.KV
	for k, kv := range s.kvs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv)
		}
	}
	slices.SortFunc(out, func(a, b metadata.KV) int { return strings.Compare(a.Key, b.Key) })
	return out, s.rev, nil
}

func (s *memStore) Range(context.Context, string, string, int) ([]metadata.KV, error) {
	return nil, errors.New("memStore: Range not supported")
}

func (s *memStore) Watch(context.Context, string, int64) *metadata.Watch {
	panic("memStore: Watch not supported")
}

func (s *memStore) NewSession(context.Context, time.Duration) (metadata.Session, error) {
	return nil, errors.New("memStore: sessions not supported")
}

func (s *memStore) NextID(context.Context, string) (int64, error) {
	return 0, errors.New("memStore: NextID not supported")
}

func (s *memStore) Close() error { return nil }

// has reports whether key exists.
func (s *memStore) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.kvs[key]
	return ok
}

// put stores key unconditionally (setup; not recorded).
func (s *memStore) put(key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	s.kvs[key] = metadata.KV{Key: key, Value: value, Version: metadata.Version(s.rev), Created: s.rev}
}

// writes returns the writes applied so far.
func (s *memStore) writes() []storeCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// hooks sets the hooks.
func (s *memStore) hooks(onCommit func(ctx context.Context, ops []metadata.Op) error, onGet func(key string) error) {
	s.mu.Lock()
	s.onCommit, s.onGet = onCommit, onGet
	s.mu.Unlock()
}

// hold returns a commit hook that holds every commit touching key until gate closes.
func hold(key string, gate chan struct{}) func(ctx context.Context, ops []metadata.Op) error {
	return func(ctx context.Context, ops []metadata.Op) error {
		for _, op := range ops {
			if op.Key == key {
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
}

// touches returns the ops of c on key.
func (c storeCall) touches(key string) []metadata.Op {
	var out []metadata.Op
	for _, op := range c.ops {
		if op.Key == key {
			out = append(out, op)
		}
	}
	return out
}

// fakeTracker is a coordinator's headers as the drivers see them (topic.TxnTracker): the
// test opens, ends and collects transactions and decides when their outcome reaches the
// participants. Safe for concurrent use.
type fakeTracker struct {
	mu      sync.Mutex
	headers map[txn.ID]txn.Header
	waits   map[txn.ID][]func(txn.Status)
}

var _ topic.TxnTracker = (*fakeTracker)(nil)

func newFakeTracker() *fakeTracker {
	return &fakeTracker{headers: map[txn.ID]txn.Header{}, waits: map[txn.ID][]func(txn.Status){}}
}

func (f *fakeTracker) Header(_ context.Context, id txn.ID) (txn.Header, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.headers[id]
	return h, ok, nil
}

// Await calls fn at once (on its own goroutine, as the tracker's check does) if id has
// ended or its header is gone; else when end or collect is called.
func (f *fakeTracker) Await(id txn.ID, fn func(txn.Status)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.headers[id]
	switch {
	case !ok:
		go fn(0)
	case h.Status.Ended():
		go fn(h.Status)
	default:
		f.waits[id] = append(f.waits[id], fn)
	}
	return func() {}
}

// open creates id's header listing partitions and subscriptions.
func (f *fakeTracker) open(id txn.ID, partitions []string, subs []txn.SubRef) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.headers[id] = txn.Header{Status: txn.Open, Partitions: partitions, Subscriptions: subs}
}

// end ends id with s and tells the participants awaiting it.
func (f *fakeTracker) end(id txn.ID, s txn.Status) {
	f.mu.Lock()
	h := f.headers[id]
	h.Status = s
	f.headers[id] = h
	ws := f.waits[id]
	delete(f.waits, id)
	f.mu.Unlock()
	for _, fn := range ws {
		fn(s)
	}
}

// collect deletes id's header without telling its outcome: the participants awaiting it
// hear 0.
func (f *fakeTracker) collect(id txn.ID) {
	f.mu.Lock()
	delete(f.headers, id)
	ws := f.waits[id]
	delete(f.waits, id)
	f.mu.Unlock()
	for _, fn := range ws {
		fn(0)
	}
}

// hookLog wraps a topic.Log: onSetMaxRead, if set, runs after each SetMaxRead took effect
// (on the caller's goroutine, the topic's); onAdd, if set, may hold an add until the
// channel it returns closes; stats and read, if set, replace Stats and Read.
type hookLog struct {
	topic.Log
	mu           sync.Mutex
	maxReads     []*topic.Position
	onSetMaxRead func(p *topic.Position)
	onAdd        func(data []byte) chan struct{}
	stats        func(ctx context.Context) (mledger.Stats, error)
	read         func(ctx context.Context, from topic.Position, n int) ([]topic.Entry, error)
}

func (h *hookLog) SetMaxRead(p *topic.Position) {
	h.Log.SetMaxRead(p)
	h.mu.Lock()
	if p != nil {
		q := *p
		p = &q
	}
	h.maxReads = append(h.maxReads, p)
	fn := h.onSetMaxRead
	h.mu.Unlock()
	if fn != nil {
		fn(p)
	}
}

func (h *hookLog) AddAsync(data []byte, cb func(topic.Position, error)) {
	h.mu.Lock()
	fn := h.onAdd
	h.mu.Unlock()
	if fn != nil {
		if gate := fn(data); gate != nil {
			go func() {
				<-gate
				h.Log.AddAsync(data, cb)
			}()
			return
		}
	}
	h.Log.AddAsync(data, cb)
}

func (h *hookLog) Stats(ctx context.Context) (mledger.Stats, error) {
	if h.stats != nil {
		return h.stats(ctx)
	}
	return h.Log.Stats(ctx)
}

func (h *hookLog) Read(ctx context.Context, from topic.Position, n int) ([]topic.Entry, error) {
	if h.read != nil {
		return h.read(ctx, from, n)
	}
	return h.Log.Read(ctx, from, n)
}

// lastMaxRead returns the last bound set (ok false: none was set).
func (h *hookLog) lastMaxRead() (p *topic.Position, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.maxReads) == 0 {
		return nil, false
	}
	return h.maxReads[len(h.maxReads)-1], true
}

// txnConn is a client connection that keeps every command (never blocks).
type txnConn struct {
	mu   sync.Mutex
	cmds []*pb.BaseCommand
}

func (c *txnConn) Send(cmd *pb.BaseCommand) {
	c.mu.Lock()
	c.cmds = append(c.cmds, cmd)
	c.mu.Unlock()
}
func (c *txnConn) SendMessage(cmd *pb.BaseCommand, _ []byte) { c.Send(cmd) }
func (c *txnConn) ProducerClosed(*topic.Producer)            {}
func (c *txnConn) ConsumerClosed(*topic.Consumer)            {}
func (c *txnConn) PublishDone()                              {}
func (c *txnConn) RemoteAddr() string                        { return "test" }
func (c *txnConn) ClientVersion() string                     { return "test" }

// of returns the commands of type typ received so far.
func (c *txnConn) of(typ pb.BaseCommand_Type) []*pb.BaseCommand {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*pb.BaseCommand
	for _, cmd := range c.cmds {
		if cmd.GetType() == typ {
			out = append(out, cmd)
		}
	}
	return out
}

// delivered returns the entry ids of the MESSAGEs received so far.
func (c *txnConn) delivered() []uint64 {
	var out []uint64
	for _, cmd := range c.of(pb.BaseCommand_MESSAGE) {
		out = append(out, cmd.GetMessage().GetMessageId().GetEntryId())
	}
	return out
}

// txnWorld is a topic with transactions on, on fakes: its log (an in-memory log behind a
// hookLog), the metadata store, the tracker, and the pending-ack logs (openLog, if set,
// replaces their opening).
type txnWorld struct {
	t       *testing.T
	name    topicname.Name
	key     string // the topic's participant key
	logs    *topictest.Store
	log     *hookLog
	store   *memStore
	tracker *fakeTracker
	openLog func(ctx context.Context, name string, create bool) (topic.Log, error)
	tp      *topic.Topic
	conn    *txnConn
}

func newTxnWorld(t *testing.T) *txnWorld {
	name := topicname.MustParse("txn-topic")
	logs := topictest.NewStore()
	w := &txnWorld{t: t, name: name, key: name.ManagedLedgerName(), logs: logs, store: newMemStore(),
		tracker: newFakeTracker(), conn: &txnConn{}}
	w.log = &hookLog{Log: logs.Open(w.key)}
	return w
}

// open loads the topic; it closes when the test ends.
func (w *txnWorld) open() {
	w.t.Helper()
	cfg := &topic.TxnConfig{Store: w.store, Tracker: w.tracker, OpenLog: func(ctx context.Context, name string, create bool) (topic.Log, error) {
		if w.openLog != nil {
			return w.openLog(ctx, name, create)
		}
		return w.logs.Open(name), nil
	}}
	tp, err := topic.Open(context.Background(), topic.Config{Name: w.name, Log: w.log, Txn: cfg})
	if err != nil {
		w.t.Fatal(err)
	}
	w.tp = tp
	w.t.Cleanup(func() {
		_ = tp.Close(context.Background())
		<-tp.Done()
	})
}

// begin opens transaction n's header, listing this topic as a partition and subscription
// sub (if not ""), with the participants' records, as the coordinator creates them.
func (w *txnWorld) begin(n uint64, sub string) txn.ID {
	id := txn.ID{Most: 1, Least: n}
	var subs []txn.SubRef
	w.store.put(metadata.TxnOpenKey(w.key, id.Key()), nil)
	if sub != "" {
		subs = []txn.SubRef{{Topic: w.key, Subscription: sub}}
		w.store.put(metadata.TxnPendingAckKey(w.key, sub, id.Key()), nil)
	}
	w.tracker.open(id, []string{w.key}, subs)
	return id
}

// producer attaches a producer and returns it once ready.
func (w *txnWorld) producer() *topic.Producer {
	w.t.Helper()
	p := &topic.Producer{ID: 1, Name: "p", Conn: w.conn}
	ready := make(chan error, 1)
	w.tp.AddProducer(p, topic.ProducerCallbacks{Queued: func() {}, Ready: func(topic.ProducerReady) { ready <- nil },
		Failed: func(err error) { ready <- err }})
	if err := <-ready; err != nil {
		w.t.Fatalf("producer: %v", err)
	}
	return p
}

// send publishes entry seq (of id, if not nil) and waits until everything settled; it
// returns the entry's position from its receipt.
func (w *txnWorld) send(p *topic.Producer, seq uint64, id *txn.ID) topic.Position {
	w.t.Helper()
	p.Publish(topic.Message{SequenceID: seq, HighestSequenceID: seq, NumMessages: 1, Data: txnPayload(w.t, seq), Txn: id})
	synctest.Wait()
	for _, cmd := range w.conn.of(pb.BaseCommand_SEND_RECEIPT) {
		if r := cmd.GetSendReceipt(); r.GetSequenceId() == seq {
			return topic.Position{LedgerID: int64(r.GetMessageId().GetLedgerId()), EntryID: int64(r.GetMessageId().GetEntryId())}
		}
	}
	w.t.Fatalf("send %d (txn %v): no receipt; errors %v", seq, id, w.conn.of(pb.BaseCommand_SEND_ERROR))
	return topic.Position{}
}

// txnPayload builds the entry of message seq as a client sends it (headersAndPayload).
func txnPayload(t *testing.T, seq uint64) []byte {
	meta := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: &seq, PublishTime: proto.Uint64(1)}
	b, err := pulsar.AppendHeadersAndPayload(nil, meta, []byte(fmt.Sprintf("m%d", seq)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bufferStats returns the transaction buffer's statistics.
func (w *txnWorld) bufferStats() topic.TxnBufferStats {
	w.t.Helper()
	st, err := w.tp.TxnBufferStats(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// subscribe subscribes consumer id on sub, durable from the earliest entry, and returns
// the channel its answer arrives on.
func (w *txnWorld) subscribe(sub string, id uint64, conn topic.Conn) (*topic.Consumer, chan error) {
	c := &topic.Consumer{ID: id, Name: fmt.Sprintf("c%d", id), Conn: conn, Type: pb.CommandSubscribe_Shared}
	ch := make(chan error, 1)
	w.tp.Subscribe(topic.SubscribeRequest{Consumer: c, Subscription: sub, Durable: true, Initial: mledger.Earliest},
		func(err error) { ch <- err })
	return c, ch
}
