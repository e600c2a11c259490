package pulsarclient

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// fakeBroker is a single in-memory broker speaking enough of the protocol (with our codec)
// to test the client: lookups answer Connect to itself, topics are lists of entries,
// subscriptions are Exclusive cursors that honour permits, producers are deduplicated by
// name and sequence id.
type fakeBroker struct {
	t   testing.TB
	ln  net.Listener
	url string
	wg  sync.WaitGroup

	mu           sync.Mutex
	conns        map[*fakeConn]struct{}
	topics       map[string]*fakeTopic
	partitions   map[string]int
	lastSeq      map[string]uint64 // producer name → highest persisted sequence id + 1
	nextName     int
	holdReceipts bool                                    // store but do not answer sends
	held         []heldReceipt                           // the receipts holdReceipts kept back
	dropAfter    int                                     // close the connection after this many SENDs (0: never)
	sends        int                                     // SEND frames seen
	acks         []*pb.CommandAck                        // every ACK
	flows        []uint32                                // every FLOW's permits
	terminated   map[string]bool                         // topics answering SEND_ERROR TopicTerminatedError
	prodTopic    map[uint64]string                       // producer id → topic
	cursors      map[string]int                          // "topic/subscription" → next entry, kept by closeConsumers
	seqEntry     map[string]int                          // "name/seq" → entry index, for duplicates
	subErr       map[string]pb.ServerError               // subscription → error for SUBSCRIBE
	onSend       func(fc *fakeConn, seq uint64)          // test hook
	onScalable   func(fc *fakeConn, cmd *pb.BaseCommand) // test hook: types 70..78
	connectFlags []*pb.FeatureFlags                      // every CONNECT's
	noScalable   bool                                    // CONNECTED without supports_scalable_topics
	// proxyThrough makes lookups answer as a proxy does: Connect to this broker URL with
	// proxy_through_service_url; proxyTo records every CONNECT's proxy_to_broker_url.
	proxyThrough string
	proxyTo      []string
}

type heldReceipt struct {
	fc *fakeConn
	r  *pb.CommandSendReceipt
}

// releaseReceipts answers, in order, every send held back so far, and stops holding.
func (b *fakeBroker) releaseReceipts() {
	b.mu.Lock()
	held := b.held
	b.holdReceipts, b.held = false, nil
	b.mu.Unlock()
	for _, h := range held {
		h.fc.write(pulsar.Wrap(h.r))
	}
}

type fakeTopic struct {
	entries [][]byte // headersAndPayload
	nmsgs   []int
	subs    []*fakeSub
}

type fakeSub struct {
	fc      *fakeConn
	id      uint64
	name    string
	next    int // next entry to deliver
	permits int
}

type fakeConn struct {
	b  *fakeBroker
	nc net.Conn
	mu sync.Mutex // serializes writes
}

func startFakeBroker(t testing.TB) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, url: "pulsar://" + ln.Addr().String(), conns: map[*fakeConn]struct{}{},
		topics: map[string]*fakeTopic{}, partitions: map[string]int{}, lastSeq: map[string]uint64{},
		terminated: map[string]bool{}, prodTopic: map[uint64]string{}, seqEntry: map[string]int{}, cursors: map[string]int{}, subErr: map[string]pb.ServerError{}}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(func() {
		ln.Close()
		b.dropAll()
		b.wg.Wait()
	})
	return b
}

func (b *fakeBroker) accept() {
	defer b.wg.Done()
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			return
		}
		fc := &fakeConn{b: b, nc: nc}
		b.mu.Lock()
		b.conns[fc] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go fc.serve()
	}
}

// dropAll closes every client connection.
func (b *fakeBroker) dropAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for fc := range b.conns {
		fc.nc.Close()
	}
}

func (b *fakeBroker) topic(name string) *fakeTopic {
	t := b.topics[name]
	if t == nil {
		t = &fakeTopic{}
		b.topics[name] = t
	}
	return t
}

func (fc *fakeConn) write(cmd *pb.BaseCommand) {
	out, err := pulsar.AppendCommand(nil, cmd)
	if err != nil {
		fc.b.t.Errorf("fake broker: encode %v: %v", cmd.GetType(), err)
		return
	}
	fc.mu.Lock()
	_, _ = fc.nc.Write(out)
	fc.mu.Unlock()
}

func (fc *fakeConn) serve() {
	b := fc.b
	defer b.wg.Done()
	defer func() {
		fc.nc.Close()
		b.mu.Lock()
		delete(b.conns, fc)
		for _, t := range b.topics {
			t.subs = slices.DeleteFunc(t.subs, func(s *fakeSub) bool { return s.fc == fc })
		}
		b.mu.Unlock()
	}()
	fr := pulsar.NewFrameReader(fc.nc, 0)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrUnexpectedEOF) {
				b.t.Logf("fake broker: read: %v", err)
			}
			return
		}
		if !fc.handle(&f) {
			return
		}
	}
}

func (fc *fakeConn) handle(f *pulsar.Frame) bool {
	b := fc.b
	cmd := f.Cmd
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		b.mu.Lock()
		b.connectFlags = append(b.connectFlags, cmd.Connect.GetFeatureFlags())
		b.proxyTo = append(b.proxyTo, cmd.Connect.GetProxyToBrokerUrl())
		noScalable := b.noScalable
		b.mu.Unlock()
		fc.write(pulsar.Wrap(&pb.CommandConnected{ServerVersion: proto.String("fake"),
			ProtocolVersion: proto.Int32(pulsar.ProtocolVersion), MaxMessageSize: proto.Int32(pulsar.MaxMessageSizeDefault),
			FeatureFlags: &pb.FeatureFlags{SupportsScalableTopics: proto.Bool(!noScalable)}}))
	case pb.BaseCommand_SCALABLE_TOPIC_LOOKUP, pb.BaseCommand_SCALABLE_TOPIC_CLOSE, pb.BaseCommand_SCALABLE_TOPIC_SUBSCRIBE:
		if b.onScalable != nil {
			b.onScalable(fc, cmd)
		}
	case pb.BaseCommand_PARTITIONED_METADATA:
		b.mu.Lock()
		n := b.partitions[cmd.PartitionMetadata.GetTopic()]
		b.mu.Unlock()
		fc.write(pulsar.Wrap(&pb.CommandPartitionedTopicMetadataResponse{RequestId: cmd.PartitionMetadata.RequestId,
			Partitions: proto.Uint32(uint32(n)), Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}))
	case pb.BaseCommand_LOOKUP:
		b.mu.Lock()
		through := b.proxyThrough
		b.mu.Unlock()
		r := &pb.CommandLookupTopicResponse{RequestId: cmd.LookupTopic.RequestId,
			Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String(b.url),
			Authoritative: proto.Bool(true)}
		if through != "" {
			r.BrokerServiceUrl, r.ProxyThroughServiceUrl = proto.String(through), proto.Bool(true)
		}
		fc.write(pulsar.Wrap(r))
	case pb.BaseCommand_PRODUCER:
		b.mu.Lock()
		name := cmd.Producer.GetProducerName()
		if name == "" {
			name = "fake-" + string(rune('a'+b.nextName))
			b.nextName++
		}
		last := int64(b.lastSeq[name]) - 1
		b.prodTopic[cmd.Producer.GetProducerId()] = cmd.Producer.GetTopic()
		b.mu.Unlock()
		fc.write(pulsar.Wrap(&pb.CommandProducerSuccess{RequestId: cmd.Producer.RequestId, ProducerName: proto.String(name),
			LastSequenceId: proto.Int64(last)}))
	case pb.BaseCommand_SEND:
		return fc.onSend(f)
	case pb.BaseCommand_SUBSCRIBE:
		s := cmd.Subscribe
		b.mu.Lock()
		if code, ok := b.subErr[s.GetSubscription()]; ok {
			b.mu.Unlock()
			fc.write(pulsar.Wrap(&pb.CommandError{RequestId: s.RequestId, Error: code.Enum(), Message: proto.String("refused")}))
			return true
		}
		t := b.topic(s.GetTopic())
		sub := &fakeSub{fc: fc, id: s.GetConsumerId(), name: s.GetSubscription()}
		if next, ok := b.cursors[s.GetTopic()+"/"+sub.name]; ok {
			sub.next = next
		} else if s.GetInitialPosition() == pb.CommandSubscribe_Latest {
			sub.next = len(t.entries)
		}
		t.subs = append(t.subs, sub)
		b.mu.Unlock()
		fc.write(pulsar.Wrap(&pb.CommandSuccess{RequestId: s.RequestId}))
	case pb.BaseCommand_FLOW:
		b.mu.Lock()
		b.flows = append(b.flows, cmd.Flow.GetMessagePermits())
		for name, t := range b.topics {
			for _, s := range t.subs {
				if s.fc == fc && s.id == cmd.Flow.GetConsumerId() {
					s.permits += int(cmd.Flow.GetMessagePermits())
					b.deliverLocked(name, t)
				}
			}
		}
		b.mu.Unlock()
	case pb.BaseCommand_ACK:
		b.mu.Lock()
		b.acks = append(b.acks, cmd.Ack)
		b.mu.Unlock()
	case pb.BaseCommand_CLOSE_PRODUCER:
		fc.write(pulsar.Wrap(&pb.CommandSuccess{RequestId: cmd.CloseProducer.RequestId}))
	case pb.BaseCommand_CLOSE_CONSUMER, pb.BaseCommand_UNSUBSCRIBE:
		id, rid := cmd.GetCloseConsumer().GetConsumerId(), cmd.GetCloseConsumer().GetRequestId()
		if cmd.GetType() == pb.BaseCommand_UNSUBSCRIBE {
			id, rid = cmd.Unsubscribe.GetConsumerId(), cmd.Unsubscribe.GetRequestId()
		}
		b.mu.Lock()
		for _, t := range b.topics {
			t.subs = slices.DeleteFunc(t.subs, func(s *fakeSub) bool { return s.fc == fc && s.id == id })
		}
		b.mu.Unlock()
		fc.write(pulsar.Wrap(&pb.CommandSuccess{RequestId: proto.Uint64(rid)}))
	case pb.BaseCommand_PING:
		fc.write(pulsar.Wrap(&pb.CommandPong{}))
	}
	return true
}

func (fc *fakeConn) onSend(f *pulsar.Frame) bool {
	b := fc.b
	s := f.Cmd.Send
	b.mu.Lock()
	b.sends++
	if b.dropAfter > 0 && b.sends >= b.dropAfter {
		b.dropAfter = 0
		b.mu.Unlock()
		return false // drop the connection without storing or answering
	}
	hook := b.onSend
	if b.terminated[b.prodTopic[s.GetProducerId()]] {
		b.mu.Unlock()
		fc.write(pulsar.Wrap(&pb.CommandSendError{ProducerId: s.ProducerId, SequenceId: s.SequenceId,
			Error: pb.ServerError_TopicTerminatedError.Enum(), Message: proto.String("terminated")}))
		return true
	}
	b.mu.Unlock()
	if hook != nil {
		hook(fc, s.GetSequenceId())
	}
	return fc.store(f)
}

// store appends the entry to its producer's topic, or answers a duplicate with a receipt.
func (fc *fakeConn) store(f *pulsar.Frame) bool {
	b := fc.b
	s := f.Cmd.Send
	name := f.Metadata.GetProducerName()
	b.mu.Lock()
	defer b.mu.Unlock()
	topic := b.prodTopic[s.GetProducerId()]
	t := b.topic(topic)
	seq := s.GetSequenceId()
	var entry int
	key := fmt.Sprintf("%s/%d", name, seq)
	if seq < b.lastSeq[name] { // duplicate: answer with the original's position
		entry = b.seqEntry[key]
	} else {
		b.seqEntry[key] = len(t.entries)
		t.entries = append(t.entries, slices.Clone(f.HeadersAndPayload))
		t.nmsgs = append(t.nmsgs, int(s.GetNumMessages()))
		entry = len(t.entries) - 1
		b.lastSeq[name] = seq + uint64(s.GetNumMessages())
	}
	r := &pb.CommandSendReceipt{ProducerId: s.ProducerId, SequenceId: s.SequenceId,
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(uint64(entry))}}
	if b.holdReceipts {
		b.held = append(b.held, heldReceipt{fc, r})
	} else {
		fc.write(pulsar.Wrap(r))
	}
	b.deliverLocked(topic, t)
	return true
}

// deliverLocked sends each subscription the entries its permits allow.
func (b *fakeBroker) deliverLocked(name string, t *fakeTopic) {
	for _, s := range t.subs {
		for s.permits > 0 && s.next < len(t.entries) {
			i := s.next
			s.next++
			s.permits -= t.nmsgs[i]
			out, err := pulsar.AppendRawPayloadCommand(nil, pulsar.Wrap(&pb.CommandMessage{ConsumerId: proto.Uint64(s.id),
				MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(uint64(i))}}), nil, t.entries[i])
			if err != nil {
				b.t.Errorf("fake broker: encode MESSAGE: %v", err)
				return
			}
			s.fc.mu.Lock()
			_, _ = s.fc.nc.Write(out)
			s.fc.mu.Unlock()
		}
	}
}

// closeConsumers sends CLOSE_CONSUMER to every consumer of topic; their subscriptions
// resume where delivery stopped.
func (b *fakeBroker) closeConsumers(topic string) {
	b.mu.Lock()
	t := b.topic(topic)
	subs := t.subs
	t.subs = nil
	b.mu.Unlock()
	for _, s := range subs {
		b.mu.Lock()
		b.cursors[topic+"/"+s.name] = s.next
		b.mu.Unlock()
		s.fc.write(pulsar.Wrap(&pb.CommandCloseConsumer{ConsumerId: proto.Uint64(s.id), RequestId: proto.Uint64(0)}))
	}
}
