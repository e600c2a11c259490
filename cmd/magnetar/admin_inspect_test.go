package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// TestPeekMessagesPrints: peek-messages fetches backlog positions until it has N messages,
// splits a batch entry into its messages (ids ledger:entry:index, per-message properties
// and keys), prints text payloads as text and binary ones as hex, and stops at the end of
// the backlog (404) once it has some.
func TestPeekMessagesPrints(t *testing.T) {
	var batch []byte
	for i, p := range [][]byte{[]byte("hello"), {0, 1, 2, 0xff}} {
		var err error
		smm := &pb.SingleMessageMetadata{PartitionKey: proto.String("k" + string(rune('0'+i))),
			Properties: []*pb.KeyValue{{Key: proto.String("i"), Value: proto.String(string(rune('0' + i)))}}}
		if batch, err = pulsar.AppendBatchMessage(batch, smm, p); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/v2/persistent/public/default/t/subscription/s/position/1":
			w.Header().Set("X-Pulsar-Message-ID", "5:0")
			w.Header().Set("X-Pulsar-Property", `{"p":"v"}`)
			w.Header().Set("X-Pulsar-publish-time", "2026-01-01T00:00:00.000Z")
			w.Write([]byte("plain text"))
		case "/admin/v2/persistent/public/default/t/subscription/s/position/2":
			w.Header().Set("X-Pulsar-Message-ID", "5:1")
			w.Header().Set("X-Pulsar-num-batch-message", "2")
			w.Write(batch)
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"reason":"Message not found"}`))
		}
	}))
	defer srv.Close()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"admin", "--url", srv.URL, "topics", "peek-messages", "t", "-s", "s", "-n", "5"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"Message ID: 5:0\n", "Property: p=v\n", "Payload (text):\nplain text\n",
		"Message ID: 5:1:0\n", "Key: k0\n", "Property: i=0\n", "Payload (text):\nhello\n",
		"Message ID: 5:1:1\n", "Key: k1\n", "Payload (hex):\n00000000  00 01 02 ff"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
