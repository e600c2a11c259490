package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// fakeBroker speaks just enough of the broker's side of the protocol: it answers CONNECT
// (unless silent), PING, LOOKUP (with lookup), PARTITIONED_METADATA (partitions) and SEND
// (a receipt), and records the CONNECTs it got.
type fakeBroker struct {
	t          *testing.T
	ln         net.Listener
	silent     bool
	partitions uint32
	lookup     func(*pb.CommandLookupTopic) *pb.CommandLookupTopicResponse

	accepted atomic.Int64
	connects chan *pb.CommandConnect

	mu    sync.Mutex
	conns []net.Conn
}

func newFakeBroker(t *testing.T) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{t: t, ln: ln, connects: make(chan *pb.CommandConnect, 64), partitions: 3}
	b.lookup = func(*pb.CommandLookupTopic) *pb.CommandLookupTopicResponse {
		return &pb.CommandLookupTopicResponse{Response: pb.CommandLookupTopicResponse_Connect.Enum(),
			BrokerServiceUrl: proto.String(b.url()), Authoritative: proto.Bool(true)}
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, nc)
			b.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.serve(nc)
			}()
		}
	}()
	return b
}

func (b *fakeBroker) addr() string { return b.ln.Addr().String() }
func (b *fakeBroker) url() string  { return "pulsar://" + b.addr() }

func (b *fakeBroker) serve(nc net.Conn) {
	defer nc.Close()
	fr := pulsar.NewFrameReader(nc, 0)
	f, err := fr.ReadFrame()
	if err != nil || f.Cmd.GetType() != pb.BaseCommand_CONNECT {
		return
	}
	b.connects <- f.Cmd.GetConnect()
	if b.silent {
		io.Copy(io.Discard, nc) //nolint:errcheck // until the proxy gives up
		return
	}
	send := func(cmd *pb.BaseCommand) { writeCmd(nc, cmd) } //nolint:errcheck // a test peer
	send(pulsar.Wrap(&pb.CommandConnected{ServerVersion: proto.String("fake"), MaxMessageSize: proto.Int32(1234)}))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f.Cmd.GetType() {
		case pb.BaseCommand_PING:
			send(pulsar.Wrap(&pb.CommandPong{}))
		case pb.BaseCommand_LOOKUP:
			l := f.Cmd.GetLookupTopic()
			r := b.lookup(l)
			r.RequestId = l.RequestId
			send(pulsar.Wrap(r))
		case pb.BaseCommand_PARTITIONED_METADATA:
			m := f.Cmd.GetPartitionMetadata()
			send(pulsar.Wrap(&pb.CommandPartitionedTopicMetadataResponse{RequestId: m.RequestId, Partitions: &b.partitions,
				Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}))
		case pb.BaseCommand_SEND:
			s := f.Cmd.GetSend()
			send(pulsar.Wrap(&pb.CommandSendReceipt{ProducerId: s.ProducerId, SequenceId: s.SequenceId,
				MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(s.GetSequenceId())}}))
		}
	}
}

// nextConnect returns the next CONNECT the broker got.
func (b *fakeBroker) nextConnect() *pb.CommandConnect {
	b.t.Helper()
	select {
	case c := <-b.connects:
		return c
	case <-time.After(5 * time.Second):
		b.t.Fatal("the broker got no CONNECT")
		return nil
	}
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func startProxy(t *testing.T, cfg Config) *Service {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testClient is a raw protocol client of the proxy.
type testClient struct {
	t  *testing.T
	nc net.Conn
	fr *pulsar.FrameReader
}

func dialProxy(t *testing.T, s *Service) *testClient {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &testClient{t: t, nc: nc, fr: pulsar.NewFrameReader(nc, 0)}
}

func (c *testClient) send(cmd *pb.BaseCommand) {
	c.t.Helper()
	if err := writeCmd(c.nc, cmd); err != nil {
		c.t.Fatal(err)
	}
}

func (c *testClient) raw(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

// recv returns the next command; it fails the test after 5 s.
func (c *testClient) recv() *pb.BaseCommand {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.t.Fatalf("reading from the proxy: %v", err)
	}
	return f.Cmd
}

// connect sends CONNECT (to proxyTo if not "") and returns the answer.
func (c *testClient) connect(proxyTo string, mod ...func(*pb.CommandConnect)) *pb.BaseCommand {
	c.t.Helper()
	cc := &pb.CommandConnect{ClientVersion: proto.String("test"), ProtocolVersion: proto.Int32(21),
		FeatureFlags: &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)}}
	if proxyTo != "" {
		cc.ProxyToBrokerUrl = &proxyTo
	}
	for _, m := range mod {
		m(cc)
	}
	c.send(pulsar.Wrap(cc))
	return c.recv()
}

// expectClosed waits for the proxy to close the connection (any frames before are
// skipped); it fails the test after 5 s.
func (c *testClient) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	for {
		_, err := c.fr.Next()
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("the proxy did not close the connection")
		}
		return
	}
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
