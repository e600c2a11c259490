package server_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/broker/topicname"
	mp "github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// TestHandshake: CONNECT is answered with CONNECTED (the server's version, the lower of
// the two protocol versions, the configured max message size, scalable topics supported),
// after which commands are served; the commands are counted by type.
func TestHandshake(t *testing.T) {
	ts := startServer(t, newFakeBackend(), server.Config{MaxMessageSize: 1 << 20})
	c, got := ts.connect(t, &pb.CommandConnect{ProtocolVersion: proto.Int32(mp.ProtocolVersion + 5)})
	cd := got.GetConnected()
	if got.GetType() != pb.BaseCommand_CONNECTED || cd.GetServerVersion() != "Magnetar-Pulsar-4.0" ||
		cd.GetProtocolVersion() != mp.ProtocolVersion || cd.GetMaxMessageSize() != 1<<20 ||
		!cd.GetFeatureFlags().GetSupportsScalableTopics() {
		t.Fatalf("CONNECTED: %v", got)
	}
	if _, got := ts.connect(t, &pb.CommandConnect{ProtocolVersion: proto.Int32(10)}); got.GetConnected().GetProtocolVersion() != 10 {
		t.Fatalf("an older client's protocol version: %v", got)
	}
	if got := c.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("PING: %v", got)
	}
	if n := ts.metric(t, "magnetar_broker_commands_total", "CONNECT"); n != 2 {
		t.Errorf("%v CONNECTs counted, want 2", n)
	}
	if n := ts.metric(t, "magnetar_broker_connections", ""); n != 2 {
		t.Errorf("%v connections counted, want 2", n)
	}
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func testToken(t *testing.T, sub string) string {
	t.Helper()
	s, err := auth.CreateToken(jwt.SigningMethodHS256, testSecret, sub, time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuthentication: with authentication on, a CONNECT with a bad credential is answered
// with AuthenticationError (request id -1, as Pulsar does) and the connection closes; a
// role forwarding an original principal must be a proxy role; with authorization on, both
// the original principal and the proxy are authorized, and a refusal is
// AuthorizationError.
func TestAuthentication(t *testing.T) {
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: base64.StdEncoding.EncodeToString(testSecret)}})
	if err != nil {
		t.Fatal(err)
	}
	b := newFakeBackend()
	b.allowed = map[string]bool{"alice": true, "proxy": true}
	ts := startServer(t, b, server.Config{Auth: a, AuthRefreshInterval: time.Hour, ProxyRoles: []string{"proxy"},
		Authz: auth.NewAuthorizer(true, nil)})
	connect := func(role, token, original string) (*client, *pb.BaseCommand) {
		cmd := &pb.CommandConnect{AuthMethodName: proto.String("token"), AuthData: []byte(token)}
		if role != "" {
			cmd.AuthData = []byte(testToken(t, role))
		}
		if original != "" {
			cmd.OriginalPrincipal = &original
		}
		return ts.connect(t, cmd)
	}
	c, got := connect("", "not a token", "")
	if e := got.GetError(); got.GetType() != pb.BaseCommand_ERROR || e.GetError() != pb.ServerError_AuthenticationError ||
		e.GetRequestId() != math.MaxUint64 || strings.Contains(e.GetMessage(), "not a token") {
		t.Fatalf("bad token: %v", got)
	}
	if !c.closedByServer() {
		t.Fatal("bad token: the connection stays open")
	}
	c, got = connect("mallory", "", "alice")
	if got.GetType() != pb.BaseCommand_ERROR || !strings.Contains(got.GetError().GetMessage(), "not a proxy role") || !c.closedByServer() {
		t.Fatalf("original principal from a non-proxy role: %v", got)
	}
	if n := ts.metric(t, "magnetar_broker_authentication_failures_total", ""); n != 2 {
		t.Errorf("%v authentication failures counted, want 2", n)
	}

	lookup := func(c *client) *pb.CommandLookupTopicResponse {
		return c.roundTrip(&pb.CommandLookupTopic{Topic: proto.String("persistent://public/default/a"), RequestId: c.nextID()}).GetLookupTopicResponse()
	}
	for _, tc := range []struct {
		role, original string
		want           pb.ServerError // -1: answered Connect
		authorized     []string
	}{
		{"alice", "", -1, []string{"alice"}},
		{"proxy", "alice", -1, []string{"alice", "proxy"}},
		{"proxy", "bob", pb.ServerError_AuthorizationError, []string{"bob"}},
		{"bob", "", pb.ServerError_AuthorizationError, []string{"bob"}},
	} {
		c, got := connect(tc.role, "", tc.original)
		if got.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("%s for %q: %v", tc.role, tc.original, got)
		}
		b.mu.Lock()
		b.mu.authz = nil
		b.mu.Unlock()
		r := lookup(c)
		e := r.GetError()
		if r.GetResponse() == pb.CommandLookupTopicResponse_Connect {
			e = -1
		}
		b.mu.Lock()
		var roles []string
		for _, call := range b.mu.authz {
			roles = append(roles, strings.Fields(call)[0])
		}
		b.mu.Unlock()
		if e != tc.want || !slices.Equal(roles, tc.authorized) {
			t.Errorf("%s for %q: lookup %v after authorizing %v, want %v after %v", tc.role, tc.original, e, roles, tc.want, tc.authorized)
		}
	}
}

// TestLookup: LOOKUP is answered Connect by the owner and Redirect (authoritative) by any
// other broker, or not authoritatively to the leader that assigns an unowned bundle; the
// TLS URL is given when there is one, and errors are a Failed answer with their code.
// PARTITIONED_METADATA answers the partition count or the error's code.
func TestLookup(t *testing.T) {
	b := newFakeBackend()
	other := api.BrokerInfo{ID: "other", ServiceURL: "pulsar://other:6650", ServiceURLTLS: "pulsar+ssl://other:6651"}
	var mu sync.Mutex
	var authoritative []bool
	b.lookup = func(topic string, auth bool) (api.LookupResult, error) {
		mu.Lock()
		authoritative = append(authoritative, auth)
		mu.Unlock()
		switch strings.TrimPrefix(topic, "persistent://public/default/") {
		case "mine":
			return api.LookupResult{BrokerInfo: api.BrokerInfo{ID: "self", ServiceURL: "pulsar://self:6650"}, Self: true}, nil
		case "theirs":
			return api.LookupResult{BrokerInfo: other}, nil
		case "unowned":
			return api.LookupResult{BrokerInfo: other, ToLeader: true}, nil
		case "moving":
			return api.LookupResult{}, &api.NotOwnerError{Topic: topic, Owner: other}
		}
		return api.LookupResult{}, fmt.Errorf("%w: %s", api.ErrTopicNotFound, topic)
	}
	b.partitions = func(topic string) (int, error) {
		if topic == "bad//name" {
			return 0, fmt.Errorf("%w: %s", api.ErrInvalidName, topic)
		}
		return 4, nil
	}
	ts := startServer(t, b, server.Config{})
	c := ts.connected(t)
	for _, tc := range []struct {
		topic         string
		authoritative bool
		want          pb.CommandLookupTopicResponse_LookupType
		url, urlTLS   string
		answerAuth    bool
		code          pb.ServerError
	}{
		{"mine", false, pb.CommandLookupTopicResponse_Connect, "pulsar://self:6650", "", true, 0},
		{"theirs", true, pb.CommandLookupTopicResponse_Redirect, other.ServiceURL, other.ServiceURLTLS, true, 0},
		{"unowned", false, pb.CommandLookupTopicResponse_Redirect, other.ServiceURL, other.ServiceURLTLS, false, 0},
		{"moving", false, pb.CommandLookupTopicResponse_Failed, "", "", false, pb.ServerError_ServiceNotReady},
		{"missing", false, pb.CommandLookupTopicResponse_Failed, "", "", false, pb.ServerError_TopicNotFound},
	} {
		rid := c.nextID()
		got := c.roundTrip(&pb.CommandLookupTopic{Topic: proto.String("persistent://public/default/" + tc.topic), RequestId: rid,
			Authoritative: &tc.authoritative})
		r := got.GetLookupTopicResponse()
		if got.GetType() != pb.BaseCommand_LOOKUP_RESPONSE || r.GetRequestId() != *rid || r.GetResponse() != tc.want ||
			r.GetBrokerServiceUrl() != tc.url || r.GetBrokerServiceUrlTls() != tc.urlTLS || r.GetAuthoritative() != tc.answerAuth ||
			r.GetError() != tc.code {
			t.Errorf("lookup of %s: %v", tc.topic, got)
		}
	}
	mu.Lock()
	if !slices.Equal(authoritative, []bool{false, true, false, false, false}) {
		t.Errorf("the backend was asked with authoritative %v", authoritative)
	}
	mu.Unlock()
	if n := ts.metric(t, "magnetar_broker_lookups_total", ""); n != 5 {
		t.Errorf("%v lookups counted, want 5", n)
	}

	r := c.roundTrip(&pb.CommandPartitionedTopicMetadata{Topic: proto.String("persistent://public/default/p"), RequestId: c.nextID()}).GetPartitionMetadataResponse()
	if r.GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Success || r.GetPartitions() != 4 {
		t.Errorf("partitioned metadata: %v", r)
	}
	r = c.roundTrip(&pb.CommandPartitionedTopicMetadata{Topic: proto.String("bad//name"), RequestId: c.nextID()}).GetPartitionMetadataResponse()
	if r.GetResponse() != pb.CommandPartitionedTopicMetadataResponse_Failed || r.GetError() != pb.ServerError_InvalidTopicName {
		t.Errorf("partitioned metadata of a bad name: %v", r)
	}
}

// TestProduce: a producer without a name gets the backend's, and each SEND is answered
// with a SEND_RECEIPT naming where it was stored, in order; a repeated sequence id is not
// stored again; a SEND whose metadata has no producer name is refused; a SEND for a closed
// producer is dropped.
func TestProduce(t *testing.T) {
	b := newFakeBackend()
	ts := startServer(t, b, server.Config{})
	c := ts.connected(t)
	const name = "persistent://public/default/produce"
	pid := uint64(3)
	got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(name), ProducerId: &pid, RequestId: c.nextID()})
	ps := got.GetProducerSuccess()
	if got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS || ps.GetProducerName() != "fake-0" || ps.GetLastSequenceId() != -1 ||
		!ps.GetProducerReady() {
		t.Fatalf("producer: %v", got)
	}
	for seq := uint64(0); seq < 3; seq++ {
		got := c.send(pid, seq, nil)
		r := got.GetSendReceipt()
		if got.GetType() != pb.BaseCommand_SEND_RECEIPT || r.GetProducerId() != pid || r.GetSequenceId() != seq ||
			r.GetMessageId().GetLedgerId() != 1 || r.GetMessageId().GetEntryId() != seq {
			t.Fatalf("send %d: %v", seq, got)
		}
	}
	if got := c.send(pid, 1, nil); got.GetType() != pb.BaseCommand_SEND_RECEIPT || got.GetSendReceipt().GetSequenceId() != 1 {
		t.Fatalf("repeated send: %v", got)
	}
	tp := b.loaded(name)
	last, err := tp.LastMessageID(context.Background())
	if err != nil || last.EntryID != 2 {
		t.Fatalf("last message %v %v after a repeated send, want entry 2", last, err)
	}
	got = c.send(pid, 3, &pb.MessageMetadata{ProducerName: proto.String(""), SequenceId: proto.Uint64(3), PublishTime: proto.Uint64(1)})
	if got.GetType() != pb.BaseCommand_SEND_ERROR || got.GetSendError().GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("send without a producer name: %v", got)
	}
	if got := c.roundTrip(&pb.CommandCloseProducer{ProducerId: &pid, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("close producer: %v", got)
	}
	// The SEND of the closed producer is dropped, on the reader goroutine, which then answers
	// the PING after it: nothing comes before the PONG.
	c.pushSend(pid, 4, nil)
	if got := c.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("after a send of a closed producer: %v", got)
	}
	got = c.roundTrip(&pb.CommandProducer{Topic: proto.String("persistent://bad"), ProducerId: proto.Uint64(4), RequestId: c.nextID()})
	if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_InvalidTopicName {
		t.Fatalf("producer on a bad name: %v", got)
	}
}

// TestSubscribeFlowDelivery: a consumer gets messages only for the permits its FLOWs gave,
// in order, with their payloads; its acknowledgement is answered; a subscription without a
// name, or on a topic that does not exist (without force_topic_creation, which defaults to
// true), is refused with the code the client acts on.
func TestSubscribeFlowDelivery(t *testing.T) {
	b := newFakeBackend()
	ts := startServer(t, b, server.Config{})
	c := ts.connected(t)
	const name = "persistent://public/default/consume"
	pid, cid := uint64(1), uint64(2)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(name), ProducerId: &pid, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	for seq := uint64(0); seq < 3; seq++ {
		if got := c.send(pid, seq, nil); got.GetType() != pb.BaseCommand_SEND_RECEIPT {
			t.Fatalf("send %d: %v", seq, got)
		}
	}
	got := c.roundTrip(&pb.CommandSubscribe{Topic: proto.String(name), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: &cid, RequestId: c.nextID(), InitialPosition: pb.CommandSubscribe_Earliest.Enum()})
	if got.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe: %v", got)
	}
	receive := func() (entry uint64, payload string) {
		t.Helper()
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if f.Cmd.GetType() == pb.BaseCommand_PING {
				continue
			}
			if f.Cmd.GetType() != pb.BaseCommand_MESSAGE || f.Cmd.GetMessage().GetConsumerId() != cid {
				t.Fatalf("want a MESSAGE, got %v", f.Cmd)
			}
			_, p, err := mp.ParseHeadersAndPayload(f.HeadersAndPayload)
			if err != nil {
				t.Fatal(err)
			}
			return f.Cmd.GetMessage().GetMessageId().GetEntryId(), string(p)
		}
	}
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(2)})
	for i := uint64(0); i < 2; i++ {
		if e, p := receive(); e != i || p != fmt.Sprintf("payload-%d", i) {
			t.Fatalf("message %d: entry %d %q", i, e, p)
		}
	}
	st, err := b.loaded(name).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cs := st.Subscriptions["s"].Consumers; len(cs) != 1 || cs[0].AvailablePermits != 0 || cs[0].UnackedMessages != 2 {
		t.Fatalf("consumer after 2 permits: %+v, want 0 permits left and 2 unacknowledged", cs)
	}
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(1)})
	if e, _ := receive(); e != 2 {
		t.Fatalf("third message: entry %d", e)
	}
	rid := c.nextID()
	got = c.roundTrip(&pb.CommandAck{ConsumerId: &cid, AckType: pb.CommandAck_Individual.Enum(), RequestId: rid,
		MessageId: []*pb.MessageIdData{{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(0)}}})
	if r := got.GetAckResponse(); got.GetType() != pb.BaseCommand_ACK_RESPONSE || r.GetRequestId() != *rid || r.Error != nil {
		t.Fatalf("ack: %v", got)
	}

	got = c.roundTrip(&pb.CommandSubscribe{Topic: proto.String(name), Subscription: proto.String(""), SubType: pb.CommandSubscribe_Shared.Enum(),
		ConsumerId: proto.Uint64(3), RequestId: c.nextID()})
	if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("subscribe without a name: %v", got)
	}
	got = c.roundTrip(&pb.CommandSubscribe{Topic: proto.String("persistent://public/default/absent"), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(4), RequestId: c.nextID(), ForceTopicCreation: proto.Bool(false)})
	if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_TopicNotFound {
		t.Fatalf("subscribe to a topic that does not exist: %v", got)
	}
}

// TestBadFrames: a malformed, oversized or out-of-order frame closes that connection only,
// with a logged reason and a count by reason; the other connections are served.
func TestBadFrames(t *testing.T) {
	const maxMessage = 64 << 10
	frame := func(total, cmdSize uint32, rest int) []byte {
		b := binary.BigEndian.AppendUint32(nil, total)
		b = binary.BigEndian.AppendUint32(b, cmdSize)
		return append(b, make([]byte, rest)...)
	}
	encode := func(body proto.Message) []byte {
		b, err := mp.AppendCommand(nil, mp.Wrap(body))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name, reason, err string
		handshake         bool
		bytes             []byte
	}{
		{"command size beyond the frame", "malformed", "command size 100 exceeds total size 8", true, frame(8, 100, 4)},
		{"oversized", "oversized", "frame too large", true, frame(maxMessage+mp.FramePadding+1, 4, 0)},
		{"before CONNECT", "protocol", "expected CONNECT, got PING", false, encode(&pb.CommandPing{})},
		{"second CONNECT", "protocol", "second CONNECT", true, encode(&pb.CommandConnect{ClientVersion: proto.String("x"), ProtocolVersion: proto.Int32(20)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), server.Config{MaxMessageSize: maxMessage})
			bystander := ts.connected(t)
			c := ts.dial(t)
			if tc.handshake {
				c, _ = ts.connect(t, nil)
			}
			c.write(tc.bytes)
			if !c.closedByServer() {
				t.Fatal("the connection stays open")
			}
			if got := bystander.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
				t.Fatalf("another connection: %v", got)
			}
			if n := ts.metric(t, "magnetar_broker_bad_frames_total", tc.reason); n != 1 {
				t.Errorf("%v bad frames counted as %s, want 1", n, tc.reason)
			}
			logs := ts.logs.String()
			var line string
			for l := range strings.Lines(logs) {
				if strings.Contains(l, "closing connection: bad frame") {
					line = l
				}
			}
			if !strings.Contains(line, "reason="+tc.reason) || !strings.Contains(line, tc.err) {
				t.Errorf("no bad-frame log line with reason %s and %q; logs:\n%s", tc.reason, tc.err, logs)
			}
		})
	}
}

// TestUnsupportedCommands: a command the server does not serve is answered with
// NotAllowedError if it is a request (so the client does not wait for its timeout) and
// ignored otherwise; a scalable-topic command from a client that did not announce them is
// refused. The connection stays open.
func TestUnsupportedCommands(t *testing.T) {
	ts := startServer(t, newFakeBackend(), server.Config{})
	c := ts.connected(t)
	rid := c.nextID()
	got := c.roundTrip(&pb.CommandWatchTopicList{RequestId: rid, WatcherId: proto.Uint64(1), Namespace: proto.String("public/default"),
		TopicsPattern: proto.String(".*")})
	if e := got.GetError(); got.GetType() != pb.BaseCommand_ERROR || e.GetRequestId() != *rid || e.GetError() != pb.ServerError_NotAllowedError ||
		!strings.Contains(e.GetMessage(), "WATCH_TOPIC_LIST is not supported") {
		t.Fatalf("unsupported request: %v", got)
	}
	c.push(&pb.CommandActiveConsumerChange{ConsumerId: proto.Uint64(1)})
	if got := c.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("after an unsupported command that is not a request: %v", got)
	}
	got = c.roundTrip(&pb.CommandScalableTopicLookup{SessionId: proto.Uint64(9), Topic: proto.String("topic://public/default/s")})
	if e := got.GetError(); got.GetType() != pb.BaseCommand_ERROR || e.GetRequestId() != 9 || e.GetError() != pb.ServerError_NotAllowedError ||
		!strings.Contains(e.GetMessage(), "supports_scalable_topics") {
		t.Fatalf("scalable-topic command without the feature flag: %v", got)
	}
	if got := c.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("after the refused commands: %v", got)
	}
}

// fakeCoordinator records the transaction commands and answers them from reply.
type fakeCoordinator struct {
	mu    sync.Mutex
	calls []string
	reply func(op string) (txn.ID, error)
}

func (f *fakeCoordinator) do(call string, done func(txn.ID, error)) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	done(f.reply(strings.Fields(call)[0]))
}

func (f *fakeCoordinator) NewTxn(ttl time.Duration, done func(txn.ID, error)) {
	f.do(fmt.Sprintf("new %v", ttl), done)
}

func (f *fakeCoordinator) AddPartitions(id txn.ID, ps []string, done func(txn.ID, error)) {
	f.do(fmt.Sprintf("partitions %d:%d %v", id.Most, id.Least, ps), done)
}

func (f *fakeCoordinator) AddSubscriptions(id txn.ID, subs []txn.SubRef, done func(txn.ID, error)) {
	f.do(fmt.Sprintf("subscriptions %d:%d %v", id.Most, id.Least, subs), done)
}

func (f *fakeCoordinator) End(id txn.ID, commit bool, done func(txn.ID, error)) {
	f.do(fmt.Sprintf("end %d:%d %v", id.Most, id.Least, commit), done)
}

// TestTxnCommands: the coordinator commands reach the backend's coordinator (a new
// transaction's timeout in milliseconds, three hours if none) and are answered in their
// own response types with the coordinator's error codes; with transactions off they are
// NotAllowedError, and a coordinator served elsewhere TransactionCoordinatorNotFound.
func TestTxnCommands(t *testing.T) {
	off := startServer(t, newFakeBackend(), server.Config{}).connected(t)
	got := off.roundTrip(&pb.CommandTcClientConnectRequest{RequestId: off.nextID(), TcId: proto.Uint64(0)})
	if r := got.GetTcClientConnectResponse(); got.GetType() != pb.BaseCommand_TC_CLIENT_CONNECT_RESPONSE || r.GetError() != pb.ServerError_NotAllowedError ||
		r.GetMessage() != "Transactions are not enabled." {
		t.Fatalf("transactions off: %v", got)
	}

	coord := &fakeCoordinator{reply: func(op string) (txn.ID, error) {
		switch op {
		case "new":
			return txn.ID{Most: 0, Least: 7}, nil
		case "end":
			return txn.ID{}, fmt.Errorf("%w: 0:7", txn.ErrNotFound)
		}
		return txn.ID{}, nil
	}}
	b := newFakeBackend()
	b.coordinator = coord
	c := startServer(t, b, server.Config{}).connected(t)
	got = c.roundTrip(&pb.CommandNewTxn{RequestId: c.nextID(), TcId: proto.Uint64(0)})
	if r := got.GetNewTxnResponse(); got.GetType() != pb.BaseCommand_NEW_TXN_RESPONSE || r.GetTxnidLeastBits() != 7 || r.Error != nil {
		t.Fatalf("new txn: %v", got)
	}
	c.roundTrip(&pb.CommandNewTxn{RequestId: c.nextID(), TcId: proto.Uint64(0), TxnTtlSeconds: proto.Uint64(1500)})
	got = c.roundTrip(&pb.CommandAddPartitionToTxn{RequestId: c.nextID(), TxnidMostBits: proto.Uint64(0), TxnidLeastBits: proto.Uint64(7),
		Partitions: []string{"persistent://public/default/t"}})
	if r := got.GetAddPartitionToTxnResponse(); r.GetTxnidLeastBits() != 7 || r.Error != nil {
		t.Fatalf("add partition: %v", got)
	}
	got = c.roundTrip(&pb.CommandEndTxn{RequestId: c.nextID(), TxnidMostBits: proto.Uint64(0), TxnidLeastBits: proto.Uint64(7),
		TxnAction: pb.TxnAction_COMMIT.Enum()})
	if r := got.GetEndTxnResponse(); r.GetError() != pb.ServerError_TransactionNotFound || r.GetTxnidLeastBits() != 7 {
		t.Fatalf("end of an unknown transaction: %v", got)
	}
	got = c.roundTrip(&pb.CommandNewTxn{RequestId: c.nextID(), TcId: proto.Uint64(3)})
	if r := got.GetNewTxnResponse(); r.GetError() != pb.ServerError_TransactionCoordinatorNotFound || r.GetTxnidMostBits() != 3 {
		t.Fatalf("new txn on a coordinator served elsewhere: %v", got)
	}
	coord.mu.Lock()
	defer coord.mu.Unlock()
	want := []string{"new 3h0m0s", "new 1.5s", "partitions 0:7 [persistent://public/default/t]", "end 0:7 true"}
	if !slices.Equal(coord.calls, want) {
		t.Fatalf("coordinator calls %q, want %q", coord.calls, want)
	}
}

// TestCloseConns: CloseConns closes every connection; after Refuse a new connection is
// closed at once, before its CONNECT is answered.
func TestCloseConns(t *testing.T) {
	ts := startServer(t, newFakeBackend(), server.Config{})
	c1, c2 := ts.connected(t), ts.connected(t)
	ts.srv.Refuse()
	late := ts.dial(t)
	late.push(&pb.CommandConnect{ClientVersion: proto.String("late"), ProtocolVersion: proto.Int32(20)})
	if !late.closedByServer() {
		t.Fatal("a connection accepted after Refuse was served")
	}
	ts.srv.CloseConns("shutting down")
	for i, c := range []*client{c1, c2} {
		if !c.closedByServer() {
			t.Fatalf("connection %d stays open after CloseConns", i+1)
		}
	}
}

// TestListen: Listen binds what the configuration asks for and refuses a configuration
// without a listener or with TLS but no certificate; the advertised address defaults to
// the bound one.
func TestListen(t *testing.T) {
	for _, cfg := range []server.ListenConfig{{DisablePlain: true}, {Listen: "127.0.0.1:0", ListenTLS: "127.0.0.1:0"}} {
		if _, err := server.Listen(cfg); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("Listen(%+v): %v, want ErrInvalidArgument", cfg, err)
		}
	}
	ls, err := server.Listen(server.ListenConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Plain.Close()
	if ls.TLS != nil || ls.Advertise != ls.Plain.Addr().String() || ls.AdvertiseTLS != "" {
		t.Fatalf("listeners %+v", ls)
	}
	ls2, err := server.Listen(server.ListenConfig{Listen: "127.0.0.1:0", Advertise: "broker.example:6650"})
	if err != nil {
		t.Fatal(err)
	}
	defer ls2.Plain.Close()
	if ls2.Advertise != "broker.example:6650" {
		t.Fatalf("advertised %q", ls2.Advertise)
	}
}

// TestTopicNames: the backend is asked for the topic by its parsed name, and only to
// create it for a producer or a consumer with force_topic_creation.
func TestTopicNames(t *testing.T) {
	b := newFakeBackend()
	ts := startServer(t, b, server.Config{})
	c := ts.connected(t)
	got := c.roundTrip(&pb.CommandSubscribe{Topic: proto.String("public/default/forced"), Subscription: proto.String("s"),
		SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: proto.Uint64(1), RequestId: c.nextID(), ForceTopicCreation: proto.Bool(true)})
	if got.GetType() != pb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe with force_topic_creation: %v", got)
	}
	if b.loaded(topicname.MustParse("public/default/forced").String()) == nil {
		t.Fatal("the topic was not created under its full name")
	}
}

// TestScalableSessions: for a client that announced scalable topics, a DAG watch sends the
// DAG at the first tick of the backend's watch and again only when it changed, and ends
// with a TopicNotFound update when there is no DAG; a namespace watch sends a snapshot,
// then only the differences; a namespace that does not exist and a stream consumer the
// backend refuses are answered in their own response types.
func TestScalableSessions(t *testing.T) {
	b := newFakeBackend()
	ts := startServer(t, b, server.Config{})
	c, got := ts.connect(t, &pb.CommandConnect{FeatureFlags: &pb.FeatureFlags{SupportsScalableTopics: proto.Bool(true)}})
	if got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatal(got)
	}
	const name = "topic://public/default/s"
	c.push(&pb.CommandScalableTopicLookup{SessionId: proto.Uint64(1), Topic: proto.String(name)})
	(<-b.dagWatches) <- struct{}{}
	got = c.next()
	if u := got.GetScalableTopicUpdate(); u.GetSessionId() != 1 || u.GetError() != pb.ServerError_TopicNotFound {
		t.Fatalf("DAG watch of a topic without a DAG: %v", got)
	}

	b.dagEpoch.Store(3)
	c.push(&pb.CommandScalableTopicLookup{SessionId: proto.Uint64(2), Topic: proto.String(name)})
	dag := <-b.dagWatches
	dag <- struct{}{}
	got = c.next()
	if u := got.GetScalableTopicUpdate(); u.GetSessionId() != 2 || u.GetDag().GetEpoch() != 3 || u.GetResolvedTopicName() != name || u.Error != nil {
		t.Fatalf("DAG watch: %v", got)
	}
	// Ticks without a change: once the third is taken, the session has handled the first
	// (the backend's channels are unbuffered), and sent nothing for it.
	for range 3 {
		dag <- struct{}{}
	}
	if got := c.roundTrip(&pb.CommandPing{}); got.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("a DAG watch tick without a change sent %v", got)
	}
	b.dagEpoch.Store(4)
	dag <- struct{}{}
	if got := c.next(); got.GetScalableTopicUpdate().GetDag().GetEpoch() != 4 {
		t.Fatalf("DAG watch after a change: %v", got)
	}
	c.push(&pb.CommandScalableTopicClose{SessionId: proto.Uint64(2)})

	c.push(&pb.CommandWatchScalableTopics{WatchId: proto.Uint64(5), Namespace: proto.String("public/default")})
	ns := <-b.nsWatches
	ns <- []string{"topic://public/default/b", "topic://public/default/a"}
	got = c.next()
	if u := got.GetWatchScalableTopicsUpdate(); u.GetWatchId() != 5 ||
		!slices.Equal(u.GetSnapshot().GetTopics(), []string{"topic://public/default/a", "topic://public/default/b"}) {
		t.Fatalf("namespace watch snapshot: %v", got)
	}
	ns <- []string{"topic://public/default/a", "topic://public/default/c"}
	got = c.next()
	if d := got.GetWatchScalableTopicsUpdate().GetDiff(); !slices.Equal(d.GetAdded(), []string{"topic://public/default/c"}) ||
		!slices.Equal(d.GetRemoved(), []string{"topic://public/default/b"}) {
		t.Fatalf("namespace watch diff: %v", got)
	}
	ns <- []string{"topic://public/default/c", "topic://public/default/a"} // no change: nothing sent
	ns <- []string{"topic://public/default/c"}
	got = c.next()
	if d := got.GetWatchScalableTopicsUpdate().GetDiff(); len(d.GetAdded()) != 0 || !slices.Equal(d.GetRemoved(), []string{"topic://public/default/a"}) {
		t.Fatalf("namespace watch diff after an unchanged list: %v", got)
	}

	got = c.roundTrip(&pb.CommandWatchScalableTopics{WatchId: proto.Uint64(6), Namespace: proto.String("public/missing")})
	if u := got.GetWatchScalableTopicsUpdate(); u.GetWatchId() != 6 || u.GetError() != pb.ServerError_TopicNotFound {
		t.Fatalf("namespace watch of a missing namespace: %v", got)
	}
	rid := c.nextID()
	got = c.roundTrip(&pb.CommandScalableTopicSubscribe{RequestId: rid, Topic: proto.String(name), Subscription: proto.String("sub"),
		ConsumerName: proto.String("c1"), ConsumerId: proto.Uint64(1), ConsumerType: pb.ScalableConsumerType_STREAM.Enum()})
	if r := got.GetScalableTopicSubscribeResponse(); r.GetRequestId() != *rid || r.GetError() != pb.ServerError_TopicNotFound {
		t.Fatalf("stream consumer the backend refuses: %v", got)
	}
	got = c.roundTrip(&pb.CommandScalableTopicSubscribe{RequestId: c.nextID(), Topic: proto.String(name), Subscription: proto.String("sub"),
		ConsumerName: proto.String(""), ConsumerId: proto.Uint64(2), ConsumerType: pb.ScalableConsumerType_STREAM.Enum()})
	if r := got.GetScalableTopicSubscribeResponse(); r.GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("stream consumer without a name: %v", got)
	}
}

// TestResubscribeRestartsConsumer: a SUBSCRIBE repeating a Ready consumer id on the same
// connection (pulsar-client-go sends one when it reconnects a consumer the broker kept,
// having dropped what it had prefetched) is answered with success once the consumer is
// restarted: its unacknowledged messages come again first, and its permits count from the
// next FLOW.
func TestResubscribeRestartsConsumer(t *testing.T) {
	b := newFakeBackend()
	c := startServer(t, b, server.Config{}).connected(t)
	const name = "persistent://public/default/resubscribe"
	pid, cid := uint64(1), uint64(7)
	if got := c.roundTrip(&pb.CommandProducer{Topic: proto.String(name), ProducerId: &pid, RequestId: c.nextID()}); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", got)
	}
	subscribe := func() {
		t.Helper()
		got := c.roundTrip(&pb.CommandSubscribe{Topic: proto.String(name), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Failover.Enum(),
			ConsumerId: &cid, RequestId: c.nextID(), InitialPosition: pb.CommandSubscribe_Earliest.Enum()})
		if got.GetType() != pb.BaseCommand_SUCCESS {
			t.Fatalf("subscribe: %v", got)
		}
	}
	subscribe()
	for seq := uint64(0); seq < 3; seq++ {
		if got := c.send(pid, seq, nil); got.GetType() != pb.BaseCommand_SEND_RECEIPT {
			t.Fatalf("send %d: %v", seq, got)
		}
	}
	receive := func(n int) []uint64 {
		t.Helper()
		var entries []uint64
		for len(entries) < n {
			got := c.next()
			if got.GetType() == pb.BaseCommand_ACTIVE_CONSUMER_CHANGE { // Failover tells the active consumer
				continue
			}
			if got.GetType() != pb.BaseCommand_MESSAGE {
				t.Fatalf("want a MESSAGE, got %v", got)
			}
			entries = append(entries, got.GetMessage().GetMessageId().GetEntryId())
		}
		return entries
	}
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(10)})
	if first := receive(3); !slices.Equal(first, []uint64{0, 1, 2}) {
		t.Fatalf("first delivery: entries %v", first)
	}
	subscribe()
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(2)})
	if again := receive(2); !slices.Equal(again, []uint64{0, 1}) {
		t.Fatalf("after subscribing again: entries %v, want 0 and 1 redelivered", again)
	}
	st, err := b.loaded(name).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cs := st.Subscriptions["s"].Consumers; len(cs) != 1 || cs[0].AvailablePermits != 0 || cs[0].UnackedMessages != 2 {
		t.Fatalf("consumers after the second FLOW: %+v, want one with 0 permits and 2 unacknowledged", cs)
	}
	c.push(&pb.CommandFlow{ConsumerId: &cid, MessagePermits: proto.Uint32(1)})
	if last := receive(1); last[0] != 2 {
		t.Fatalf("third entry %v, want 2", last)
	}
}
