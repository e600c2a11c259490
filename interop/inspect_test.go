package interop

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// compressedCodecs are the codecs the compressed-batch tests produce with.
var compressedCodecs = []struct {
	name string
	ct   pulsar.CompressionType
}{{"LZ4", pulsar.LZ4}, {"ZSTD", pulsar.ZSTD}}

// createWithSub creates the non-partitioned topic tn and its subscription sub at the
// earliest message, with pulsaradmin.
func createWithSub(t *testing.T, adm pulsaradmin.Client, tn utils.TopicName, sub string) {
	t.Helper()
	if err := adm.Topics().Create(tn, 0); err != nil {
		t.Fatal(err)
	}
	if err := adm.Subscriptions().Create(tn, sub, utils.Earliest); err != nil {
		t.Fatal(err)
	}
}

// TestMessageInspection: pulsaradmin's peek, get-by-id and message-id-by-time, and the
// examinemessage path, return what pulsar-client-go produced (payloads, properties, keys,
// ids), batches split into their messages, without consuming anything.
func TestMessageInspection(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	cl := c.client()
	adm := c.admin()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	ctx := ctxT(t, time.Minute)
	createWithSub(t, adm, tn, "s")
	single := producer(t, cl, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	var ids []pulsar.MessageID
	for i := range 3 {
		id, err := single.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("a%d", i)), Key: fmt.Sprintf("k%d", i),
			Properties: map[string]string{"n": fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	batched := producer(t, cl, pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 5,
		BatchingMaxPublishDelay: time.Minute})
	done := make(chan error, 5)
	for i := range 5 {
		batched.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte{0, 1, byte(i)}, Properties: map[string]string{"b": fmt.Sprint(i)}},
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err == nil && id.BatchIdx() == 0 {
					ids = append(ids, id)
				}
				done <- err
			})
	}
	if err := batched.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	batchID := ids[3]

	msgs, err := adm.Subscriptions().PeekMessages(tn, "s", 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 8 { // pulsaradmin keeps whole batches: 3 singles + the batch of 5
		t.Fatalf("peek 6: %d messages, want 8", len(msgs))
	}
	for i := range 3 {
		m := msgs[i]
		if string(m.Payload) != fmt.Sprintf("a%d", i) || m.Properties["n"] != fmt.Sprint(i) ||
			m.MessageID.LedgerID != ids[i].LedgerID() || m.MessageID.EntryID != ids[i].EntryID() {
			t.Fatalf("peeked message %d: %+v", i, m)
		}
	}
	for i := range 5 {
		m := msgs[3+i]
		if string(m.Payload) != string([]byte{0, 1, byte(i)}) || m.MessageID.EntryID != batchID.EntryID() || m.MessageID.BatchIndex != i {
			t.Fatalf("peeked batch message %d: %+v", i, m)
		}
	}
	// Peeking consumed nothing; skipping one moves the backlog's start.
	if err := adm.Subscriptions().SkipMessages(tn, "s", 1); err != nil {
		t.Fatal(err)
	}
	first, err := adm.Subscriptions().PeekMessages(tn, "s", 1)
	if err != nil || len(first) != 1 || string(first[0].Payload) != "a1" {
		t.Fatalf("peek after skip: %+v, %v", first, err)
	}

	m, err := adm.Subscriptions().GetMessageByID(tn, ids[2].LedgerID(), ids[2].EntryID())
	if err != nil || string(m.Payload) != "a2" || m.Properties["n"] != "2" {
		t.Fatalf("get message by id: %+v, %v", m, err)
	}
	batch, err := adm.Subscriptions().GetMessagesByID(tn, batchID.LedgerID(), batchID.EntryID())
	if err != nil || len(batch) != 5 || batch[4].Payload[2] != 4 {
		t.Fatalf("get batch by id: %d messages, %v", len(batch), err)
	}
	if _, err := adm.Subscriptions().GetMessageByID(tn, batchID.LedgerID(), batchID.EntryID()+1); statusOf(err) != http.StatusNotFound {
		t.Fatalf("get a message past the end: %v, want 404", err)
	}

	// examinemessage: the earliest is a0, the latest is the batch.
	for _, tc := range []struct {
		query, wantID, wantBatch string
	}{
		{"initialPosition=earliest&messagePosition=1", fmt.Sprintf("%d:%d", ids[0].LedgerID(), ids[0].EntryID()), ""},
		{"initialPosition=latest&messagePosition=1", fmt.Sprintf("%d:%d", batchID.LedgerID(), batchID.EntryID()), "5"},
		{"initialPosition=latest&messagePosition=2", fmt.Sprintf("%d:%d", ids[2].LedgerID(), ids[2].EntryID()), ""},
	} {
		resp, err := http.Get(c.http.URL + "/admin/v2/" + tn.GetRestPath() + "/examinemessage?" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Pulsar-Message-ID") != tc.wantID ||
			resp.Header.Get("X-Pulsar-Num-Batch-Message") != tc.wantBatch || resp.Header.Get("X-Pulsar-Publish-Time") == "" {
			t.Fatalf("examine %s: %d %v %q", tc.query, resp.StatusCode, resp.Header, body)
		}
	}

	// Message id by time: the first message published at or after a message's publish time.
	r := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "r",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	var third pulsar.Message
	for range 3 {
		if third, err = r.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	id, err := adm.Topics().GetMessageID(tn, third.PublishTime().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	// Messages published in the same millisecond share the answer: the earliest of them.
	if id.LedgerID != ids[2].LedgerID() || id.EntryID > ids[2].EntryID() {
		t.Fatalf("message id at %v: %+v, want at most %v", third.PublishTime(), id, ids[2])
	}
	if _, err := adm.Topics().GetMessageID(tn, time.Now().Add(time.Hour).UnixMilli()); statusOf(err) != http.StatusNotFound {
		t.Fatalf("message id in the future: %v, want 404", err)
	}
}

// TestMessageInspectionCompressed: a batch (and a single message) that pulsar-client-go
// compressed with LZ4 or ZSTD is answered uncompressed, so pulsaradmin's peek and
// get-by-id split the batch into every one of its messages.
func TestMessageInspectionCompressed(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	cl := c.client()
	adm := c.admin()
	for _, codec := range compressedCodecs {
		t.Run(codec.name, func(t *testing.T) {
			topic := topicName(t)
			tn := mustTopic(t, topic)
			ctx := ctxT(t, time.Minute)
			createWithSub(t, adm, tn, "s")
			const n = 20
			payload := func(i int) string { return fmt.Sprintf("%s message %d %s", codec.name, i, strings.Repeat("x", 50*i)) }
			batched := producer(t, cl, pulsar.ProducerOptions{Topic: topic, CompressionType: codec.ct,
				BatchingMaxMessages: n, BatchingMaxPublishDelay: time.Minute})
			done := make(chan error, n)
			var batchID pulsar.MessageID
			for i := range n {
				batched.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(payload(i)), Key: fmt.Sprintf("k%d", i),
					Properties: map[string]string{"i": fmt.Sprint(i)}},
					func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err == nil && id.BatchIdx() == 0 {
							batchID = id
						}
						done <- err
					})
			}
			if err := batched.FlushWithCtx(ctx); err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			single := producer(t, cl, pulsar.ProducerOptions{Topic: topic, CompressionType: codec.ct, DisableBatching: true})
			big := strings.Repeat("compressible ", 500)
			singleID, err := single.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(big)})
			if err != nil {
				t.Fatal(err)
			}

			msgs, err := adm.Subscriptions().PeekMessages(tn, "s", 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != n {
				t.Fatalf("peek 1: %d messages, want the %d of the compressed batch", len(msgs), n)
			}
			for i, m := range msgs {
				if string(m.Payload) != payload(i) || m.MessageID.EntryID != batchID.EntryID() || m.MessageID.BatchIndex != i {
					t.Fatalf("peeked batch message %d: %q at %+v", i, m.Payload, m.MessageID)
				}
			}
			batch, err := adm.Subscriptions().GetMessagesByID(tn, batchID.LedgerID(), batchID.EntryID())
			if err != nil || len(batch) != n || string(batch[n-1].Payload) != payload(n-1) {
				t.Fatalf("get the batch by id: %d messages, %v", len(batch), err)
			}
			ms, err := adm.Subscriptions().GetMessagesByID(tn, singleID.LedgerID(), singleID.EntryID())
			if err != nil || len(ms) != 1 || string(ms[0].Payload) != big {
				t.Fatalf("get the compressed single message by id: %d messages, %v", len(ms), err)
			}
		})
	}
}
