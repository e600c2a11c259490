package interop

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// The fake broker below answers just enough of the protocol, with our codec, for a real
// client to produce and consume. Every frame the client sends is decoded by our codec and
// every frame the client receives is encoded by it.

const testLedger = 7

type event struct {
	frame mp.Frame // aliases raw
	raw   []byte
}

// delivery is a stored entry the broker sends, as MESSAGE, on the first FLOW.
type delivery struct {
	headersAndPayload []byte
	bem               *pb.BrokerEntryMetadata
}

type fakeBroker struct {
	t      *testing.T
	ln     net.Listener
	url    string
	events chan event

	mu         sync.Mutex
	conns      []net.Conn
	deliveries []delivery
	wg         sync.WaitGroup
}

func startBroker(t *testing.T, deliveries ...delivery) *fakeBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, url: "pulsar://" + ln.Addr().String(),
		events: make(chan event, 4096), deliveries: deliveries}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *fakeBroker) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(c)
	}
}

func (b *fakeBroker) serve(c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	fr := mp.NewFrameReader(c, mp.MaxFrameSizeDefault)
	var out []byte
	write := func(cmd *pb.BaseCommand) {
		var err error
		if out, err = mp.AppendCommand(out[:0], cmd); err != nil {
			b.t.Errorf("encode %v: %v", cmd.GetType(), err)
			return
		}
		_, _ = c.Write(out)
	}
	for {
		next, err := fr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrUnexpectedEOF) {
				b.t.Errorf("read frame: %v", err)
			}
			return
		}
		raw := slices.Clone(next)
		f, err := mp.DecodeFrame(raw)
		if err != nil {
			b.t.Errorf("decode client frame: %v", err)
			return
		}
		select {
		case b.events <- event{frame: f, raw: raw}:
		default:
			b.t.Error("event buffer full")
		}
		cmd := f.Cmd
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			write(mp.Wrap(&pb.CommandConnected{
				ServerVersion:   proto.String("magnetar-interop"),
				ProtocolVersion: proto.Int32(min(cmd.Connect.GetProtocolVersion(), mp.ProtocolVersion)),
				MaxMessageSize:  proto.Int32(mp.MaxMessageSizeDefault),
			}))
		case pb.BaseCommand_PARTITIONED_METADATA:
			write(mp.Wrap(&pb.CommandPartitionedTopicMetadataResponse{
				RequestId:  proto.Uint64(cmd.PartitionMetadata.GetRequestId()),
				Partitions: proto.Uint32(0),
				Response:   pb.CommandPartitionedTopicMetadataResponse_Success.Enum(),
			}))
		case pb.BaseCommand_LOOKUP:
			write(mp.Wrap(&pb.CommandLookupTopicResponse{
				RequestId:        proto.Uint64(cmd.LookupTopic.GetRequestId()),
				Response:         pb.CommandLookupTopicResponse_Connect.Enum(),
				BrokerServiceUrl: proto.String(b.url),
				Authoritative:    proto.Bool(true),
			}))
		case pb.BaseCommand_PRODUCER:
			name := cmd.Producer.GetProducerName()
			if name == "" {
				name = "magnetar-interop-0"
			}
			write(mp.Wrap(&pb.CommandProducerSuccess{
				RequestId:      proto.Uint64(cmd.Producer.GetRequestId()),
				ProducerName:   proto.String(name),
				LastSequenceId: proto.Int64(-1),
				ProducerReady:  proto.Bool(true),
			}))
		case pb.BaseCommand_SEND:
			write(mp.Wrap(&pb.CommandSendReceipt{
				ProducerId: proto.Uint64(cmd.Send.GetProducerId()),
				SequenceId: proto.Uint64(cmd.Send.GetSequenceId()),
				MessageId: &pb.MessageIdData{
					LedgerId: proto.Uint64(testLedger), EntryId: proto.Uint64(cmd.Send.GetSequenceId()),
				},
			}))
		case pb.BaseCommand_SUBSCRIBE:
			write(mp.Wrap(&pb.CommandSuccess{RequestId: proto.Uint64(cmd.Subscribe.GetRequestId())}))
		case pb.BaseCommand_FLOW:
			b.mu.Lock()
			ds := b.deliveries
			b.deliveries = nil
			b.mu.Unlock()
			for i, d := range ds {
				msg := mp.Wrap(&pb.CommandMessage{
					ConsumerId: proto.Uint64(cmd.Flow.GetConsumerId()),
					MessageId:  &pb.MessageIdData{LedgerId: proto.Uint64(testLedger), EntryId: proto.Uint64(uint64(i))},
				})
				if out, err = mp.AppendRawPayloadCommand(out[:0], msg, d.bem, d.headersAndPayload); err != nil {
					b.t.Errorf("encode MESSAGE: %v", err)
					return
				}
				_, _ = c.Write(out)
			}
		case pb.BaseCommand_ACK:
			if cmd.Ack.RequestId != nil {
				write(mp.Wrap(&pb.CommandAckResponse{
					ConsumerId: proto.Uint64(cmd.Ack.GetConsumerId()), RequestId: proto.Uint64(cmd.Ack.GetRequestId()),
				}))
			}
		case pb.BaseCommand_PING:
			write(mp.Wrap(&pb.CommandPong{}))
		case pb.BaseCommand_CLOSE_PRODUCER:
			write(mp.Wrap(&pb.CommandSuccess{RequestId: proto.Uint64(cmd.CloseProducer.GetRequestId())}))
		case pb.BaseCommand_CLOSE_CONSUMER:
			write(mp.Wrap(&pb.CommandSuccess{RequestId: proto.Uint64(cmd.CloseConsumer.GetRequestId())}))
		case pb.BaseCommand_UNSUBSCRIBE:
			write(mp.Wrap(&pb.CommandSuccess{RequestId: proto.Uint64(cmd.Unsubscribe.GetRequestId())}))
		}
	}
}

// next returns the next client command of type typ, skipping others.
func (b *fakeBroker) next(typ pb.BaseCommand_Type) event {
	b.t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case e := <-b.events:
			if e.frame.Cmd.GetType() == typ {
				return e
			}
		case <-timeout:
			b.t.Fatalf("no %v from the client", typ)
		}
	}
}

func newClient(t *testing.T, url string) pulsar.Client {
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: url, OperationTimeout: 15 * time.Second, ConnectionTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestWireProducerSend: the real client's handshake and SEND frames decode with our codec,
// their checksums verify, and metadata and payload are what the application sent.
func TestWireProducerSend(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batching    bool
		compression pulsar.CompressionType
	}{
		{"batched", true, pulsar.NoCompression},
		{"unbatched", false, pulsar.NoCompression},
		{"batched-zlib", true, pulsar.ZLib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t)
			client := newClient(t, b.url)
			const topic = "persistent://public/default/wire"
			producer, err := client.CreateProducer(pulsar.ProducerOptions{
				Topic: topic, DisableBatching: !tc.batching, CompressionType: tc.compression,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer producer.Close()

			connect := b.next(pb.BaseCommand_CONNECT).frame.Cmd.Connect
			if connect.GetProtocolVersion() != mp.ProtocolVersion || !connect.GetFeatureFlags().GetSupportsBrokerEntryMetadata() {
				t.Fatalf("CONNECT %v", connect)
			}
			prod := b.next(pb.BaseCommand_PRODUCER).frame.Cmd.Producer
			if prod.GetTopic() != topic {
				t.Fatalf("PRODUCER %v", prod)
			}

			payload := bytes.Repeat([]byte("hello magnetar "), 20)
			eventTime := time.UnixMilli(1764500000123)
			id, err := producer.Send(context.Background(), &pulsar.ProducerMessage{
				Payload: payload, Key: "k1", Properties: map[string]string{"a": "b"}, EventTime: eventTime,
			})
			if err != nil {
				t.Fatal(err)
			}
			if id.LedgerID() != testLedger || id.EntryID() != 0 {
				t.Fatalf("message id %v", id)
			}

			e := b.next(pb.BaseCommand_SEND)
			f := e.frame
			send := f.Cmd.Send
			if send.GetProducerId() != prod.GetProducerId() || send.GetSequenceId() != 0 || send.GetNumMessages() != 1 {
				t.Fatalf("SEND %v", send)
			}
			// DecodeFrame verified the checksum; check it independently too.
			hp := f.HeadersAndPayload
			if binary.BigEndian.Uint16(hp) != mp.MagicCRC32C || binary.BigEndian.Uint32(hp[2:]) != mp.Checksum(hp[6:]) {
				t.Fatal("checksum block does not verify")
			}
			meta := f.Metadata
			if meta.GetProducerName() != "magnetar-interop-0" || meta.GetSequenceId() != 0 ||
				time.Since(time.UnixMilli(int64(meta.GetPublishTime()))) > time.Minute {
				t.Fatalf("metadata %v", meta)
			}
			body := f.Payload
			if tc.compression == pulsar.ZLib {
				if meta.GetCompression() != pb.CompressionType_ZLIB {
					t.Fatalf("compression %v", meta.GetCompression())
				}
				zr, err := zlib.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
				if int(meta.GetUncompressedSize()) != len(body) {
					t.Fatalf("uncompressed_size %d, got %d bytes", meta.GetUncompressedSize(), len(body))
				}
			}
			key, props, evt := meta.GetPartitionKey(), meta.GetProperties(), meta.GetEventTime()
			if tc.batching {
				if !mp.IsBatch(meta) || mp.NumMessages(meta) != 1 {
					t.Fatalf("batched SEND with metadata %v", meta)
				}
				msgs, err := mp.ParseBatch(body, mp.NumMessages(meta))
				if err != nil {
					t.Fatal(err)
				}
				smm := msgs[0].Metadata
				body, key, props, evt = msgs[0].Payload, smm.GetPartitionKey(), smm.GetProperties(), smm.GetEventTime()
			} else if mp.IsBatch(meta) {
				t.Fatalf("unbatched SEND with metadata %v", meta)
			}
			if !bytes.Equal(body, payload) || key != "k1" || evt != uint64(eventTime.UnixMilli()) ||
				len(props) != 1 || props[0].GetKey() != "a" || props[0].GetValue() != "b" {
				t.Fatalf("message: payload %q key %q props %v event %d", body, key, props, evt)
			}

			// The same real frame with one payload bit flipped is reported as a checksum error.
			bad := slices.Clone(e.raw)
			bad[len(bad)-1] ^= 1
			if _, err := mp.DecodeFrame(bad); !errors.Is(err, mp.ErrChecksum) {
				t.Fatalf("corrupted client frame: %v", err)
			}
		})
	}
}

// TestWireConsumerReceives: MESSAGE frames built by our codec around stored
// headersAndPayload (plain, and batched with a broker-entry-metadata prefix) are accepted
// by the real consumer, which verifies the checksum and parses the batch.
func TestWireConsumerReceives(t *testing.T) {
	now := uint64(time.Now().UnixMilli())
	single, err := mp.AppendHeadersAndPayload(nil, &pb.MessageMetadata{
		ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(now),
		PartitionKey: proto.String("k0"),
		Properties:   []*pb.KeyValue{{Key: proto.String("x"), Value: proto.String("y")}},
	}, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	var batch []byte
	for i, s := range []string{"second", "third"} {
		smm := &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(1 + i)), PartitionKey: proto.String(s + "-key")}
		if batch, err = mp.AppendBatchMessage(batch, smm, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	batched, err := mp.AppendHeadersAndPayload(nil, &pb.MessageMetadata{
		ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(now),
		NumMessagesInBatch: proto.Int32(2),
	}, batch)
	if err != nil {
		t.Fatal(err)
	}
	brokerTime := time.UnixMilli(int64(now) + 5)
	b := startBroker(t,
		delivery{headersAndPayload: single},
		delivery{headersAndPayload: batched, bem: &pb.BrokerEntryMetadata{
			BrokerTimestamp: proto.Uint64(uint64(brokerTime.UnixMilli())), Index: proto.Uint64(41),
		}},
	)
	client := newClient(t, b.url)
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic: "persistent://public/default/wire-in", SubscriptionName: "s", Type: pulsar.Shared,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	if flow := b.next(pb.BaseCommand_FLOW).frame.Cmd.Flow; flow.GetMessagePermits() == 0 {
		t.Fatalf("FLOW %v", flow)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	want := []struct {
		payload, key string
		entry        int64
		batchIdx     int32
	}{{"first", "k0", 0, 0}, {"second", "second-key", 1, 0}, {"third", "third-key", 1, 1}}
	for i, w := range want {
		m, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		id := m.ID()
		if string(m.Payload()) != w.payload || m.Key() != w.key || id.LedgerID() != testLedger ||
			id.EntryID() != w.entry || (w.entry == 1 && id.BatchIdx() != w.batchIdx) {
			t.Fatalf("message %d: %q key %q id %v", i, m.Payload(), m.Key(), id)
		}
		switch i {
		case 0:
			if m.Properties()["x"] != "y" || m.BrokerPublishTime() != nil {
				t.Fatalf("message 0: properties %v, broker time %v", m.Properties(), m.BrokerPublishTime())
			}
		default:
			if bt := m.BrokerPublishTime(); bt == nil || !bt.Equal(brokerTime) {
				t.Fatalf("message %d: broker publish time %v", i, bt)
			}
			if idx := m.Index(); idx == nil || *idx != uint64(40+i-1) {
				t.Fatalf("message %d: index %v", i, idx)
			}
		}
		if err := consumer.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	// The acks (grouped by the client) decode with our codec; none reports a corrupt
	// message (a checksum failure would be acked with validation_error).
	acked := map[uint64]bool{}
	for len(acked) < 2 {
		ack := b.next(pb.BaseCommand_ACK).frame.Cmd.Ack
		if ack.ValidationError != nil {
			t.Fatalf("client rejected a message: %v", ack)
		}
		for _, id := range ack.GetMessageId() {
			acked[id.GetEntryId()] = true
		}
	}
}
