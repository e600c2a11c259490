package topic_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeConn records what a topic sends to one client connection.
type fakeConn struct {
	t  *testing.T
	ch chan *pb.BaseCommand

	mu      sync.Mutex
	budget  int
	closedP []*topic.Producer
	closedC []*topic.Consumer
}

func newConn(t *testing.T) *fakeConn { return &fakeConn{t: t, ch: make(chan *pb.BaseCommand, 10000)} }

func (f *fakeConn) Send(cmd *pb.BaseCommand)                     { f.ch <- cmd }
func (f *fakeConn) SendMessage(cmd *pb.BaseCommand, data []byte) { f.ch <- cmd }
func (f *fakeConn) ProducerClosed(p *topic.Producer) {
	f.mu.Lock()
	f.closedP = append(f.closedP, p)
	f.mu.Unlock()
}
func (f *fakeConn) ConsumerClosed(c *topic.Consumer) {
	f.mu.Lock()
	f.closedC = append(f.closedC, c)
	f.mu.Unlock()
}
func (f *fakeConn) PublishDone() {
	f.mu.Lock()
	f.budget--
	f.mu.Unlock()
}
func (f *fakeConn) RemoteAddr() string    { return "test" }
func (f *fakeConn) ClientVersion() string { return "test" }

// next returns the next command sent, failing after 5 s.
func (f *fakeConn) next() *pb.BaseCommand {
	f.t.Helper()
	select {
	case c := <-f.ch:
		return c
	case <-time.After(5 * time.Second):
		f.t.Fatal("no command sent")
		return nil
	}
}

func (f *fakeConn) expect(typ pb.BaseCommand_Type) *pb.BaseCommand {
	f.t.Helper()
	c := f.next()
	if c.GetType() != typ {
		f.t.Fatalf("sent %v (%v), want %v", c.GetType(), pulsar.Body(c), typ)
	}
	return c
}

// quiet asserts nothing is sent for d.
func (f *fakeConn) quiet(d time.Duration) {
	f.t.Helper()
	select {
	case c := <-f.ch:
		f.t.Fatalf("unexpected %v: %v", c.GetType(), pulsar.Body(c))
	case <-time.After(d):
	}
}

// holdLog delays add completions until release.
type holdLog struct {
	topic.Log
	mu   sync.Mutex
	hold bool
	held []func()
}

func (h *holdLog) AddAsync(data []byte, cb func(topic.Position, error)) {
	h.mu.Lock()
	if h.hold {
		h.held = append(h.held, func() { h.Log.AddAsync(data, cb) })
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.Log.AddAsync(data, cb)
}

func (h *holdLog) release() {
	h.mu.Lock()
	held := h.held
	h.held, h.hold = nil, false
	h.mu.Unlock()
	for _, f := range held {
		f()
	}
}

func openTopic(t *testing.T, log topic.Log) *topic.Topic {
	t.Helper()
	tp, err := topic.Open(context.Background(), topic.Config{Name: topicname.MustParse("t"), Log: log, Dedup: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tp.Close(ctx)
		<-tp.Done()
	})
	return tp
}

type prodResult struct {
	ready  *topic.ProducerReady
	queued bool
	err    error
}

func addProducer(t *testing.T, tp *topic.Topic, p *topic.Producer) chan prodResult {
	ch := make(chan prodResult, 2)
	tp.AddProducer(p, topic.ProducerCallbacks{
		Queued: func() { ch <- prodResult{queued: true} },
		Ready:  func(r topic.ProducerReady) { ch <- prodResult{ready: &r} },
		Failed: func(err error) { ch <- prodResult{err: err} },
	})
	return ch
}

func result(t *testing.T, ch chan prodResult) prodResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no producer result")
		return prodResult{}
	}
}

// entry builds a stored entry: headersAndPayload with the given metadata.
func entry(t *testing.T, seq uint64, key string, deliverAt int64) []byte {
	meta := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: &seq,
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
	if key != "" {
		meta.PartitionKey = &key
	}
	if deliverAt > 0 {
		meta.DeliverAtTime = &deliverAt
	}
	b, err := pulsar.AppendHeadersAndPayload(nil, meta, []byte(fmt.Sprintf("m%d", seq)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func publish(p *topic.Producer, t *testing.T, seq uint64, key string) {
	p.Publish(topic.Message{SequenceID: seq, HighestSequenceID: seq, NumMessages: 1, Data: entry(t, seq, key, 0)})
}

func TestReceiptsInOrderAndDedup(t *testing.T) {
	log := &holdLog{Log: topictest.NewStore().Open("t")}
	tp := openTopic(t, log)
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil || r.ready.LastSequenceID != -1 {
		t.Fatalf("producer: %+v", r)
	}
	for seq := uint64(0); seq < 10; seq++ {
		publish(p, t, seq, "")
	}
	for seq := uint64(0); seq < 10; seq++ {
		r := conn.expect(pb.BaseCommand_SEND_RECEIPT).GetSendReceipt()
		if r.GetSequenceId() != seq || r.GetMessageId().GetEntryId() != seq {
			t.Fatalf("receipt %v, want sequence and entry %d", r, seq)
		}
	}
	// A duplicate of a stored message is answered without being stored.
	publish(p, t, 5, "")
	if r := conn.expect(pb.BaseCommand_SEND_RECEIPT).GetSendReceipt(); r.GetSequenceId() != 5 ||
		int64(r.GetMessageId().GetEntryId()) != -1 {
		t.Fatalf("duplicate receipt %v", r)
	}
	// A duplicate of a message in flight, resent by the reconnected producer, is answered
	// when the original is stored.
	log.mu.Lock()
	log.hold = true
	log.mu.Unlock()
	publish(p, t, 10, "")
	conn.quiet(50 * time.Millisecond)
	done := make(chan struct{})
	p.Close(func() { close(done) })
	<-done
	conn2 := newConn(t)
	p2 := &topic.Producer{ID: 7, Name: "p", Conn: conn2, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p2)); r.ready == nil || r.ready.LastSequenceID != 9 {
		t.Fatalf("reconnected producer: %+v", r)
	}
	publish(p2, t, 10, "")
	publish(p2, t, 11, "")
	conn2.quiet(50 * time.Millisecond)
	log.release()
	for seq := uint64(10); seq < 12; seq++ {
		r := conn2.expect(pb.BaseCommand_SEND_RECEIPT).GetSendReceipt()
		if r.GetSequenceId() != seq || r.GetMessageId().GetEntryId() != seq {
			t.Fatalf("receipt %v, want sequence and entry %d", r, seq)
		}
	}
	if lc := log.LastConfirmed(); lc.EntryID != 11 {
		t.Fatalf("log holds up to %v, want 11 entries (no duplicate stored)", lc)
	}
}

func TestAccessModes(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	conn := newConn(t)
	mk := func(id uint64, mode pb.ProducerAccessMode) *topic.Producer {
		return &topic.Producer{ID: id, Name: fmt.Sprintf("p%d", id), Conn: conn, AccessMode: mode}
	}
	ex := mk(1, pb.ProducerAccessMode_Exclusive)
	r := result(t, addProducer(t, tp, ex))
	if r.ready == nil || r.ready.TopicEpoch != 1 {
		t.Fatalf("exclusive producer: %+v", r)
	}
	if r := result(t, addProducer(t, tp, mk(2, pb.ProducerAccessMode_Exclusive))); !errors.Is(r.err, topic.ErrProducerFenced) {
		t.Fatalf("second exclusive: %+v", r)
	}
	if r := result(t, addProducer(t, tp, mk(3, pb.ProducerAccessMode_Shared))); !errors.Is(r.err, topic.ErrProducerBusy) {
		t.Fatalf("shared beside exclusive: %+v", r)
	}
	w := mk(4, pb.ProducerAccessMode_WaitForExclusive)
	wch := addProducer(t, tp, w)
	if r := result(t, wch); !r.queued {
		t.Fatalf("wait-for-exclusive: %+v", r)
	}
	ex.Close(nil)
	if r := result(t, wch); r.ready == nil || r.ready.TopicEpoch != 2 {
		t.Fatalf("wait-for-exclusive after the exclusive left: %+v", r)
	}
	// An exclusive producer resuming an older epoch is fenced.
	old := uint64(1)
	stale := mk(5, pb.ProducerAccessMode_Exclusive)
	stale.TopicEpoch = &old
	w.Close(nil)
	if r := result(t, addProducer(t, tp, stale)); !errors.Is(r.err, topic.ErrProducerFenced) {
		t.Fatalf("stale epoch: %+v", r)
	}
}

func TestTerminate(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	result(t, addProducer(t, tp, p))
	publish(p, t, 0, "")
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	id, err := tp.Terminate(context.Background())
	if err != nil || id.EntryID != 0 {
		t.Fatalf("terminate: %v %v", id, err)
	}
	// The producer is disconnected; a new one is refused.
	conn.expect(pb.BaseCommand_CLOSE_PRODUCER)
	if r := result(t, addProducer(t, tp, &topic.Producer{ID: 2, Name: "q", Conn: conn})); !errors.Is(r.err, topic.ErrTerminated) {
		t.Fatalf("producer after terminate: %+v", r)
	}
}

func subscribe(t *testing.T, tp *topic.Topic, c *topic.Consumer, sub string) {
	t.Helper()
	ch := make(chan error, 1)
	tp.Subscribe(topic.SubscribeRequest{Consumer: c, Subscription: sub, Durable: true, Initial: mledger.Earliest},
		func(err error) { ch <- err })
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("subscribe %s: %v", c.Name, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("subscribe: no answer")
	}
}

func msgID(cmd *pb.BaseCommand) (uint64, *pb.MessageIdData) {
	m := cmd.GetMessage()
	return m.GetConsumerId(), m.GetMessageId()
}

func ackOf(c *topic.Consumer, ids ...*pb.MessageIdData) {
	cid := c.ID
	done := make(chan struct{})
	c.Ack(&pb.CommandAck{ConsumerId: &cid, AckType: pb.CommandAck_Individual.Enum(), MessageId: ids},
		func(error) { close(done) })
	<-done
}

// TestSharedPermits: a Shared subscription never sends a consumer more than its permits,
// and spreads entries round-robin.
func TestSharedPermits(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	pc := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: pc}
	result(t, addProducer(t, tp, p))
	for seq := uint64(0); seq < 10; seq++ {
		publish(p, t, seq, "")
		pc.expect(pb.BaseCommand_SEND_RECEIPT)
	}
	conn := newConn(t)
	c1 := &topic.Consumer{ID: 1, Name: "c1", Conn: conn, Type: pb.CommandSubscribe_Shared}
	c2 := &topic.Consumer{ID: 2, Name: "c2", Conn: conn, Type: pb.CommandSubscribe_Shared}
	subscribe(t, tp, c1, "s")
	subscribe(t, tp, c2, "s")
	c1.Flow(2)
	c2.Flow(3)
	got := map[uint64]int{}
	for i := 0; i < 5; i++ {
		cid, _ := msgID(conn.expect(pb.BaseCommand_MESSAGE))
		got[cid]++
	}
	conn.quiet(100 * time.Millisecond)
	if got[1] != 2 || got[2] != 3 {
		t.Fatalf("deliveries per consumer %v, want 2 and 3", got)
	}
	// A consumer closing returns its unacknowledged entries, with a redelivery count.
	c1.Close(nil)
	c2.Flow(10)
	redelivered := 0
	for i := 0; i < 7; i++ {
		cmd := conn.expect(pb.BaseCommand_MESSAGE)
		if cmd.GetMessage().GetRedeliveryCount() > 0 {
			redelivered++
		}
	}
	if redelivered != 2 {
		t.Fatalf("%d redelivered messages, want 2", redelivered)
	}
}

// TestKeySharedDrainsBeforeMoving: when a new consumer takes over a key's hash range, the
// key's new messages wait until the previous consumer acknowledged what it got of the key.
func TestKeySharedDrainsBeforeMoving(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	pc := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: pc}
	result(t, addProducer(t, tp, p))
	// After c2 joins, c1 keeps [0, 32767] and c2 takes [32768, 65535]: find a key of c2's half.
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); topic.StickyHash([]byte(k)) >= 32768 {
			key = k
		}
	}
	conn := newConn(t)
	c1 := &topic.Consumer{ID: 1, Name: "c1", Conn: conn, Type: pb.CommandSubscribe_Key_Shared}
	subscribe(t, tp, c1, "s")
	c1.Flow(100)
	publish(p, t, 0, key)
	pc.expect(pb.BaseCommand_SEND_RECEIPT)
	cid, first := msgID(conn.expect(pb.BaseCommand_MESSAGE))
	if cid != 1 {
		t.Fatalf("first message to consumer %d", cid)
	}
	c2 := &topic.Consumer{ID: 2, Name: "c2", Conn: conn, Type: pb.CommandSubscribe_Key_Shared}
	subscribe(t, tp, c2, "s")
	c2.Flow(100)
	publish(p, t, 1, key)
	pc.expect(pb.BaseCommand_SEND_RECEIPT)
	conn.quiet(100 * time.Millisecond) // c1 still holds message 0 of the key
	ackOf(c1, first)
	cid, second := msgID(conn.expect(pb.BaseCommand_MESSAGE))
	if cid != 2 || second.GetEntryId() != 1 {
		t.Fatalf("after the ack: message %v to consumer %d, want entry 1 to c2", second, cid)
	}
}

// TestSeekDisconnectsBeforeSuccess: a seek resets the cursor, closes the subscription's
// consumers (CLOSE_CONSUMER) and only then reports success, and the next consumer gets the
// messages from the seek position.
func TestSeekDisconnectsBeforeSuccess(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	pc := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: pc}
	result(t, addProducer(t, tp, p))
	for seq := uint64(0); seq < 5; seq++ {
		publish(p, t, seq, "")
		pc.expect(pb.BaseCommand_SEND_RECEIPT)
	}
	conn := newConn(t)
	c := &topic.Consumer{ID: 1, Name: "c", Conn: conn, Type: pb.CommandSubscribe_Exclusive}
	subscribe(t, tp, c, "s")
	c.Flow(100)
	var ids []*pb.MessageIdData
	for i := 0; i < 5; i++ {
		_, id := msgID(conn.expect(pb.BaseCommand_MESSAGE))
		ids = append(ids, id)
	}
	ackOf(c, ids...)
	done := make(chan error, 1)
	c.Seek(&topic.MessageID{LedgerID: int64(ids[2].GetLedgerId()), EntryID: int64(ids[2].GetEntryId())}, 0,
		func(err error) {
			conn.ch <- pulsar.Wrap(&pb.CommandSuccess{RequestId: proto.Uint64(99)}) // marks when done ran
			done <- err
		})
	conn.expect(pb.BaseCommand_CLOSE_CONSUMER)
	conn.expect(pb.BaseCommand_SUCCESS)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c2 := &topic.Consumer{ID: 2, Name: "c", Conn: conn, Type: pb.CommandSubscribe_Exclusive}
	subscribe(t, tp, c2, "s")
	c2.Flow(100)
	for want := uint64(2); want < 5; want++ {
		if _, id := msgID(conn.expect(pb.BaseCommand_MESSAGE)); id.GetEntryId() != want {
			t.Fatalf("after seek: entry %d, want %d", id.GetEntryId(), want)
		}
	}
}

func TestDelayedDelivery(t *testing.T) {
	tp := openTopic(t, topictest.NewStore().Open("t"))
	pc := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: pc}
	result(t, addProducer(t, tp, p))
	conn := newConn(t)
	c := &topic.Consumer{ID: 1, Name: "c", Conn: conn, Type: pb.CommandSubscribe_Shared}
	subscribe(t, tp, c, "s")
	c.Flow(10)
	at := time.UnixMilli(time.Now().Add(300 * time.Millisecond).UnixMilli()) // deliver_at_time is in ms
	p.Publish(topic.Message{SequenceID: 0, NumMessages: 1, Data: entry(t, 0, "", at.UnixMilli())})
	publish(p, t, 1, "")
	_, id := msgID(conn.expect(pb.BaseCommand_MESSAGE))
	if id.GetEntryId() != 1 {
		t.Fatalf("first delivered entry %d, want the undelayed 1", id.GetEntryId())
	}
	_, id = msgID(conn.expect(pb.BaseCommand_MESSAGE))
	if id.GetEntryId() != 0 || time.Now().Before(at) {
		t.Fatalf("delayed entry %d delivered at %v, due %v", id.GetEntryId(), time.Now(), at)
	}
}

// TestPublishBudget: a topic's pending-publish bytes are bounded; a publisher waits until
// the managed ledger completes earlier adds (a slow disk slows producers down).
func TestPublishBudget(t *testing.T) {
	log := &holdLog{Log: topictest.NewStore().Open("t"), hold: true}
	tp, err := topic.Open(context.Background(), topic.Config{Name: topicname.MustParse("t"), Log: log, MaxPendingBytes: 40})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tp.Close(context.Background())
		<-tp.Done()
	}()
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn}
	result(t, addProducer(t, tp, p))
	data := entry(t, 0, "", 0)
	if len(data) > 40 || 2*len(data) <= 40 {
		t.Fatalf("entry of %d bytes does not suit the test", len(data))
	}
	never := make(chan struct{})
	if !tp.AcquirePublish(len(data), never) {
		t.Fatal("first acquire refused")
	}
	p.Publish(topic.Message{SequenceID: 0, NumMessages: 1, Data: data})
	acquired := make(chan bool, 1)
	go func() { acquired <- tp.AcquirePublish(len(data), never) }()
	select {
	case <-acquired:
		t.Fatal("second publish admitted beyond the budget")
	case <-time.After(50 * time.Millisecond):
	}
	log.release()
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	select {
	case ok := <-acquired:
		if !ok {
			t.Fatal("acquire refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publish budget not released by the completion")
	}
	cancel := make(chan struct{})
	close(cancel)
	if tp.AcquirePublish(len(data), cancel) {
		t.Fatal("acquire beyond the budget with a closed cancel channel")
	}
}

// blockLog blocks the first property write until unblock is closed.
type blockLog struct {
	topic.Log
	once    sync.Once
	entered chan struct{}
	unblock chan struct{}
}

func (b *blockLog) SetProperty(ctx context.Context, k, v string) error {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.entered)
		<-b.unblock
	}
	return b.Log.SetProperty(ctx, k, v)
}

// TestCloseWaitsForHelpers: Close and Done wait for the topic's helper goroutines — here a
// deduplication snapshot write still blocked in the log.
func TestCloseWaitsForHelpers(t *testing.T) {
	log := &blockLog{Log: topictest.NewStore().Open("t"), entered: make(chan struct{}), unblock: make(chan struct{})}
	tp, err := topic.Open(context.Background(), topic.Config{Name: topicname.MustParse("t"), Log: log, Dedup: true,
		DedupSnapshotEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	conn := newConn(t)
	p := &topic.Producer{ID: 1, Name: "p", Conn: conn, AccessMode: pb.ProducerAccessMode_Shared}
	if r := result(t, addProducer(t, tp, p)); r.ready == nil {
		t.Fatalf("producer: %+v", r)
	}
	publish(p, t, 0, "")
	conn.expect(pb.BaseCommand_SEND_RECEIPT)
	select {
	case <-log.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no deduplication snapshot written")
	}
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- tp.Close(ctx)
	}()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a property write was in flight", err)
	case <-tp.Done():
		t.Fatal("Done closed while a property write was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(log.unblock)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the write completed")
	}
	select {
	case <-tp.Done():
	default:
		t.Fatal("Close returned before Done")
	}
}
