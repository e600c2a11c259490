package interop

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type recA struct {
	A int `json:"a"`
}

type recB struct {
	A int    `json:"a"`
	B string `json:"b"`
}

const (
	schemaA = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"int"}]}`
	schemaB = `{"type":"record","name":"rec","namespace":"test","fields":[{"name":"a","type":"int"},` +
		`{"name":"b","type":"string","default":""}]}`
)

// TestSchemas: a producer's schema is registered as version 0 (PRODUCER), a message with
// another schema registers version 1 (GET_OR_CREATE_SCHEMA), and a consumer decodes each
// message with the schema of its version (GET_SCHEMA). Version 1 adds a field with a default,
// so it passes the broker's default strategy (FULL).
func TestSchemas(t *testing.T) {
	c := newCluster(t, devOpts)
	cl := c.client()
	topic := topicName(t)
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(schemaA, nil)})
	ctx := ctxT(t, time.Minute)
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: &recA{A: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: &recB{A: 2, B: "two"},
		Schema: pulsar.NewJSONSchema(schemaB, nil)}); err != nil {
		t.Fatal(err)
	}
	cons := subscribe(t, cl, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		Schema: pulsar.NewJSONSchema(schemaA, nil)})
	m1, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var a recA
	if err := m1.GetSchemaValue(&a); err != nil || a.A != 1 {
		t.Fatalf("first message: %+v, %v", a, err)
	}
	if v := m1.SchemaVersion(); len(v) != 8 || binary.BigEndian.Uint64(v) != 0 {
		t.Fatalf("first message schema version %x, want 0", v)
	}
	m2, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b recB
	if err := m2.GetSchemaValue(&b); err != nil || b.A != 2 || b.B != "two" {
		t.Fatalf("second message: %+v, %v", b, err)
	}
	if v := m2.SchemaVersion(); len(v) != 8 || binary.BigEndian.Uint64(v) != 1 {
		t.Fatalf("second message schema version %x, want 1", v)
	}
	// A second producer with schema A gets the same version; the registry survives a restart.
	c.restartBroker()
	cl2 := c.client()
	p2 := producer(t, cl2, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewJSONSchema(schemaA, nil)})
	if _, err := p2.Send(ctx, &pulsar.ProducerMessage{Value: &recA{A: 3}}); err != nil {
		t.Fatal(err)
	}
	cons2 := subscribe(t, cl2, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s2",
		Schema: pulsar.NewJSONSchema(schemaA, nil)})
	for i := 0; i < 3; i++ {
		m, err := cons2.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if i == 1 {
			want = 1
		}
		if v := m.SchemaVersion(); len(v) != 8 || binary.BigEndian.Uint64(v) != want {
			t.Fatalf("message %d: schema version %x, want %d", i, v, want)
		}
	}
}
