package websocket_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	mws "github.com/magnetar-io/magnetar/websocket"
)

// TestProduceConsume: a producer socket publishes 10,000 messages with random payloads,
// properties, keys and contexts while a consumer socket receives and acknowledges them: every
// receipt is ok, in order, with its context and a message id (base64 MessageIdData) that the
// consumer sees on the same message; the consumer gets every message once, in order,
// byte-identical, with its properties and key.
func TestProduceConsume(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	const n = 10000
	cons := w.dial(ctx, "/ws/v2/consumer/persistent/public/default/pc/sub?receiverQueueSize=500", nil)
	prod := w.dial(ctx, "/ws/v2/producer/persistent/public/default/pc?maxPendingMessages=200", nil)

	rng := rand.New(rand.NewPCG(1, 2))
	type sent struct {
		payload []byte
		props   map[string]string
		key     string
	}
	msgs := make([]sent, n)
	for i := range msgs {
		p := make([]byte, rng.IntN(300))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		msgs[i] = sent{payload: p, props: map[string]string{"i": strconv.Itoa(i), "r": strconv.Itoa(rng.IntN(1000))},
			key: fmt.Sprintf("k%d", rng.IntN(10))}
	}
	writeErr := make(chan error, 1)
	go func() {
		for i, m := range msgs {
			b, _ := json.Marshal(map[string]any{"payload": base64.StdEncoding.EncodeToString(m.payload),
				"properties": m.props, "key": m.key, "context": "c" + strconv.Itoa(i)})
			if err := prod.Write(ctx, websocket.MessageText, b); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()
	ids := make(chan string, n)
	acksDone := make(chan error, 1)
	go func() {
		defer close(ids)
		for i := range n {
			_, b, err := prod.Read(ctx)
			if err != nil {
				acksDone <- err
				return
			}
			var a ack
			if err := json.Unmarshal(b, &a); err != nil || a.Result != "ok" || a.Context != "c"+strconv.Itoa(i) {
				acksDone <- fmt.Errorf("receipt %d: %s (%v)", i, b, err)
				return
			}
			ids <- a.MessageID
		}
		acksDone <- nil
	}()
	for i := range n {
		m := readMessage(t, ctx, cons)
		got, err := base64.StdEncoding.DecodeString(m.Payload)
		if err != nil || string(got) != string(msgs[i].payload) {
			t.Fatalf("message %d: payload differs (%v)", i, err)
		}
		if fmt.Sprint(m.Properties) != fmt.Sprint(msgs[i].props) || m.Key != msgs[i].key {
			t.Fatalf("message %d: properties %v key %q, sent %v %q", i, m.Properties, m.Key, msgs[i].props, msgs[i].key)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", m.PublishTime); err != nil {
			t.Fatalf("message %d: publishTime %q: %v", i, m.PublishTime, err)
		}
		id, ok := <-ids
		if !ok {
			t.Fatalf("receipts ended before message %d: %v", i, <-acksDone)
		}
		if id != m.MessageID {
			t.Fatalf("message %d: consumer id %s, producer receipt %s", i, m.MessageID, id)
		}
		writeJSON(t, ctx, cons, map[string]string{"messageId": m.MessageID})
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if err := <-acksDone; err != nil {
		t.Fatal(err)
	}
	last := w.produce(ctx, "/ws/v2/producer/persistent/public/default/pc", "last")[0]
	var d pb.MessageIdData
	raw, _ := base64.StdEncoding.DecodeString(last)
	if err := proto.Unmarshal(raw, &d); err != nil || d.LedgerId == nil || d.EntryId == nil {
		t.Fatalf("message id is not a MessageIdData: %v %v", &d, err)
	}
	if got := w.counter("magnetar_websocket_messages_in_total", nil); got != n+1 {
		t.Fatalf("messages in: %v", got)
	}
	if m := readMessage(t, ctx, cons); unb64(t, m.Payload) != "last" || m.MessageID != last {
		t.Fatalf("last message %+v, receipt id %s", m, last)
	}
	if got := w.counter("magnetar_websocket_messages_out_total", map[string]string{"kind": "consumer"}); got != n+1 {
		t.Fatalf("messages out: %v", got)
	}
	if got := w.counter("magnetar_websocket_sessions", map[string]string{"kind": "consumer"}); got != 1 {
		t.Fatalf("open consumer sockets: %v", got)
	}
}

// TestNegativeAck: a negatively acknowledged message comes back after
// negativeAckRedeliveryDelay with a higher redelivery count, and an acknowledged one does not.
func TestNegativeAck(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	cons := w.dial(ctx, "/ws/v2/consumer/persistent/public/default/nack/sub?subscriptionType=Shared&negativeAckRedeliveryDelay=100", nil)
	w.produce(ctx, "/ws/v2/producer/persistent/public/default/nack", "a", "b")
	a, b := readMessage(t, ctx, cons), readMessage(t, ctx, cons)
	if unb64(t, a.Payload) != "a" || unb64(t, b.Payload) != "b" || a.RedeliveryCount != 0 {
		t.Fatalf("first deliveries %+v %+v", a, b)
	}
	writeJSON(t, ctx, cons, map[string]string{"messageId": b.MessageID})
	writeJSON(t, ctx, cons, map[string]string{"type": "negativeAcknowledge", "messageId": a.MessageID})
	again := readMessage(t, ctx, cons)
	if unb64(t, again.Payload) != "a" || again.MessageID != a.MessageID || again.RedeliveryCount != 1 {
		t.Fatalf("redelivery %+v, want a with count 1", again)
	}
	writeJSON(t, ctx, cons, map[string]string{"messageId": again.MessageID})
	// Nothing else comes back: the next frame is the answer to isEndOfTopic.
	writeJSON(t, ctx, cons, map[string]string{"type": "isEndOfTopic"})
	if m := readMessage(t, ctx, cons); m.EndOfTopic == nil || *m.EndOfTopic {
		t.Fatalf("after the acks: %+v, want endOfTopic false", m)
	}
}

// TestPullMode: with pullMode=true the socket gets exactly as many messages as the permits
// ask for. Ten messages are in the topic before the consumer subscribes from the earliest;
// after a permit of 3, three messages come, then (a round trip later, with seven more
// available all along) the answer to isEndOfTopic and not a fourth message; the service has
// written exactly 3. A permit of 7 brings the rest, and again nothing after them.
func TestPullMode(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	var payloads []string
	for i := range 10 {
		payloads = append(payloads, fmt.Sprintf("m%d", i))
	}
	w.produce(ctx, "/ws/v2/producer/persistent/public/default/pull", payloads...)
	cons := w.dial(ctx, "/ws/v2/consumer/persistent/public/default/pull/sub?pullMode=true&subscriptionInitialPosition=Earliest", nil)
	barrier := func(wantOut float64) {
		t.Helper()
		writeJSON(t, ctx, cons, map[string]string{"type": "isEndOfTopic"})
		if m := readMessage(t, ctx, cons); m.EndOfTopic == nil {
			t.Fatalf("a message beyond the permits: %+v", m)
		}
		if got := w.counter("magnetar_websocket_messages_out_total", map[string]string{"kind": "consumer"}); got != wantOut {
			t.Fatalf("messages written %v, permitted %v", got, wantOut)
		}
	}
	barrier(0)
	next := 0
	for _, permits := range []int{3, 7} {
		writeJSON(t, ctx, cons, map[string]any{"type": "permit", "permitMessages": permits})
		for range permits {
			m := readMessage(t, ctx, cons)
			if unb64(t, m.Payload) != payloads[next] {
				t.Fatalf("message %d: %+v", next, m)
			}
			writeJSON(t, ctx, cons, map[string]string{"messageId": m.MessageID}) // acks grant nothing in pull mode
			next++
		}
		barrier(float64(next))
	}
}

// TestReader: a reader from earliest reads every message in order; a reader from a message
// id reads the ones after it; a reader from latest (the default) only new ones.
func TestReader(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	ids := w.produce(ctx, "/ws/v2/producer/persistent/public/default/rd", "r0", "r1", "r2", "r3")
	r := w.dial(ctx, "/ws/v2/reader/persistent/public/default/rd?messageId=earliest", nil)
	for i := range 4 {
		m := readMessage(t, ctx, r)
		if unb64(t, m.Payload) != fmt.Sprintf("r%d", i) || m.MessageID != ids[i] {
			t.Fatalf("reader message %d: %+v", i, m)
		}
		writeJSON(t, ctx, r, map[string]string{"messageId": m.MessageID})
	}
	from := w.dial(ctx, "/ws/v2/reader/persistent/public/default/rd?messageId="+url.QueryEscape(ids[1]), nil)
	for i := 2; i < 4; i++ {
		if m := readMessage(t, ctx, from); unb64(t, m.Payload) != fmt.Sprintf("r%d", i) {
			t.Fatalf("reader from r1: message %+v, want r%d", m, i)
		}
	}
	latest := w.dial(ctx, "/ws/v2/reader/persistent/public/default/rd", nil)
	w.produce(ctx, "/ws/v2/producer/persistent/public/default/rd", "r4")
	if m := readMessage(t, ctx, latest); unb64(t, m.Payload) != "r4" {
		t.Fatalf("reader from latest: %+v", m)
	}
}

// TestEndOfTopic: isEndOfTopic is false while the topic is open, and becomes true once the
// topic is terminated and the consumer acknowledged everything (for a reader: read
// everything).
func TestEndOfTopic(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	const tp = "persistent://public/default/eot"
	cons := w.dial(ctx, "/ws/v2/consumer/persistent/public/default/eot/sub", nil)
	reader := w.dial(ctx, "/ws/v2/reader/persistent/public/default/eot?messageId=earliest", nil)
	w.produce(ctx, "/ws/v2/producer/persistent/public/default/eot", "e0", "e1")
	isEnd := func(c *websocket.Conn) bool {
		t.Helper()
		writeJSON(t, ctx, c, map[string]string{"type": "isEndOfTopic"})
		m := readMessage(t, ctx, c)
		if m.EndOfTopic == nil {
			t.Fatalf("answer to isEndOfTopic: %+v", m)
		}
		return *m.EndOfTopic
	}
	var last message
	for i := range 2 {
		last = readMessage(t, ctx, cons)
		if i == 0 {
			writeJSON(t, ctx, cons, map[string]string{"messageId": last.MessageID})
		}
		readMessage(t, ctx, reader)
	}
	if isEnd(cons) || isEnd(reader) {
		t.Fatal("end of topic before termination")
	}
	if _, err := w.broker.Terminate(ctx, tp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reader reaches the end of the terminated topic", func() bool { return isEnd(reader) })
	// The consumer has not acknowledged e1 yet: not at the end.
	if isEnd(cons) {
		t.Fatal("end of topic with a message unacknowledged")
	}
	writeJSON(t, ctx, cons, map[string]string{"messageId": last.MessageID})
	waitFor(t, "the consumer reaches the end once everything is acknowledged", func() bool { return isEnd(cons) })
}

// TestBadFrames: a producer answers a message it cannot read with a send-error result (3:
// bad JSON, 7: bad payload) and stays open; a consumer answers a command it cannot read (bad
// JSON, an unknown type, a bad message id, a permit without a count) with a JSON error and
// closes the socket with 4000 + Pulsar's code.
func TestBadFrames(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	prod := w.dial(ctx, "/ws/v2/producer/persistent/public/default/bad", nil)
	for _, tc := range []struct{ frame, result, context string }{
		{`{"payload":`, "send-error:3", ""},
		{`{"payload":"!!not base64!!","context":"x"}`, "send-error:7", "x"},
		{`{"context":"y"}`, "send-error:7", "y"},
		{`{"payload":"aGk=","eventTime":"yesterday","context":"z"}`, "send-error:7", "z"},
	} {
		writeText(t, ctx, prod, tc.frame)
		if a := readAck(t, ctx, prod); a.Result != tc.result || a.Context != tc.context || a.ErrorMsg == "" || a.MessageID != "" {
			t.Fatalf("frame %s: %+v, want %s", tc.frame, a, tc.result)
		}
	}
	writeText(t, ctx, prod, `{"payload":"aGk","context":"ok"}`) // unpadded base64 is accepted, as by Java
	if a := readAck(t, ctx, prod); a.Result != "ok" || a.Context != "ok" {
		t.Fatalf("a good message after bad ones: %+v", a)
	}
	for i, tc := range []struct{ name, frame string }{
		{"bad JSON", `{"messageId":`},
		{"unknown type", `{"type":"rewind"}`},
		{"bad message id", `{"messageId":"%%%"}`},
		{"not an id", `{"messageId":"` + b64("garbage!") + `"}`},
		{"permit without a count", `{"type":"permit"}`},
	} {
		name, frame := tc.name, tc.frame
		cons := w.dial(ctx, fmt.Sprintf("/ws/v2/consumer/persistent/public/default/bad/s%d", i), nil)
		writeText(t, ctx, cons, frame)
		m := readJSON(t, ctx, cons)
		if m["result"] != "error" || m["errorCode"] != float64(3) || m["errorMsg"] == "" {
			t.Fatalf("%s: answer %v", name, m)
		}
		_, _, err := cons.Read(ctx)
		if got := websocket.CloseStatus(err); got != 4003 {
			t.Fatalf("%s: close status %v (%v), want 4003", name, got, err)
		}
	}
	if got := w.counter("magnetar_websocket_errors_total", map[string]string{"reason": "frame"}); got < 9 {
		t.Fatalf("frame errors counted: %v", got)
	}
	// Paths and parameters the service refuses before the upgrade.
	for path, want := range map[string]int{
		"/ws/v2/producer/persistent/public/default":                           http.StatusBadRequest,
		"/ws/v2/producer/durable/public/default/t":                            http.StatusBadRequest,
		"/ws/v2/consumer/persistent/public/default/t/s?subscriptionType=Any":  http.StatusBadRequest,
		"/ws/v2/consumer/persistent/public/default/t/s?deadLetterTopic=d":     http.StatusBadRequest,
		"/ws/v2/reader/persistent/public/default/t?messageId=xyz":             http.StatusBadRequest,
		"/ws/v2/producer/persistent/public/default/t?maxPendingMessages=lots": http.StatusBadRequest,
		"/ws/v2/elsewhere/persistent/public/default/t":                        http.StatusNotFound,
		"/ws/v3/consumer/persistent/public/default/t/s":                       http.StatusNotFound,
	} {
		if got := w.refused(ctx, path, nil); got != want {
			t.Errorf("%s: %d, want %d", path, got, want)
		}
	}
}

// TestPingPong: /ws/v2/pingpong answers pings.
func TestPingPong(t *testing.T) {
	w := newWorld(t, nil, nil)
	ctx := testCtx(t)
	c := w.dial(ctx, "/ws/v2/pingpong", nil)
	go func() { c.Read(ctx) }() //nolint:errcheck // reads until the socket closes, which answers pongs
	for range 3 {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
}

var secret = []byte("websocket test secret of 32 byte")

func token(t *testing.T, role string) string {
	t.Helper()
	s, err := auth.CreateToken(jwt.SigningMethodHS256, secret, role, time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuth: with token authentication and authorization on, an upgrade without credentials
// (or with a bad token) is refused with 401; a role without the permission with 403, for
// producing and consuming alike; a role granted produce may produce (token in the query or
// in the Authorization header) but not consume; a superuser may do both. The broker decides
// the permissions, as for binary-protocol clients.
func TestAuth(t *testing.T) {
	a, err := auth.New(auth.Config{Enabled: true, Providers: []string{"token"},
		Token: auth.TokenConfig{SecretKey: "data:;base64," + base64.StdEncoding.EncodeToString(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, func(c *broker.Config) {
		c.Auth, c.Authz = a, auth.NewAuthorizer(true, []string{"admin"})
	}, func(c *mws.Config) { c.Auth = a })
	ctx := testCtx(t)
	if err := w.broker.GrantNamespacePermission(ctx, "public/default", "writer", []auth.Action{auth.ActionProduce}); err != nil {
		t.Fatal(err)
	}
	const prodPath = "/ws/v2/producer/persistent/public/default/secure"
	const consPath = "/ws/v2/consumer/persistent/public/default/secure/sub"
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	for name, tc := range map[string]struct {
		path string
		hdr  http.Header
		want int
	}{
		"no credentials":         {prodPath, nil, http.StatusUnauthorized},
		"bad token":              {prodPath + "?token=xyz", nil, http.StatusUnauthorized},
		"bad header":             {consPath, bearer("xyz"), http.StatusUnauthorized},
		"no permission, produce": {prodPath + "?token=" + token(t, "nobody"), nil, http.StatusForbidden},
		"no permission, consume": {consPath, bearer(token(t, "nobody")), http.StatusForbidden},
		"writer consumes":        {consPath + "?token=" + token(t, "writer"), nil, http.StatusForbidden},
		"writer reads":           {"/ws/v2/reader/persistent/public/default/secure?token=" + token(t, "writer"), nil, http.StatusForbidden},
	} {
		if got := w.refused(ctx, tc.path, tc.hdr); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
	admin := w.dial(ctx, consPath+"?token="+token(t, "admin"), nil)
	p := w.dial(ctx, prodPath+"?token="+token(t, "writer"), nil)
	ph := w.dial(ctx, prodPath, bearer(token(t, "writer")))
	for i, c := range []*websocket.Conn{p, ph} {
		writeJSON(t, ctx, c, map[string]string{"payload": b64(fmt.Sprint("s", i))})
		if a := readAck(t, ctx, c); a.Result != "ok" {
			t.Fatalf("writer's producer %d: %+v", i, a)
		}
	}
	for i := range 2 {
		if m := readMessage(t, ctx, admin); unb64(t, m.Payload) != fmt.Sprint("s", i) {
			t.Fatalf("superuser's consumer: %+v", m)
		}
	}
	if got := w.counter("magnetar_websocket_errors_total", map[string]string{"reason": "authorization"}); got != 4 {
		t.Fatalf("authorization refusals counted: %v", got)
	}
}
