package interop

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

const (
	avroV1 = `{"type":"record","name":"user","namespace":"test","fields":[{"name":"id","type":"int"}]}`
	// avroV2Bad adds a field without a default: the new schema cannot read v1 data.
	avroV2Bad = `{"type":"record","name":"user","namespace":"test","fields":[{"name":"id","type":"int"},` +
		`{"name":"email","type":"string"}]}`
	// avroV2Good adds a field with a default: FULL compatible with v1.
	avroV2Good = `{"type":"record","name":"user","namespace":"test","fields":[{"name":"id","type":"int"},` +
		`{"name":"email","type":"string","default":""}]}`
)

type userV1 struct {
	ID int32 `avro:"id"`
}

type userV2 struct {
	ID    int32  `avro:"id"`
	Email string `avro:"email"`
}

// TestSchemaCompatibilityAvro: with pulsar-client-go Avro producers, an incompatible schema
// is refused under BACKWARD (IncompatibleSchema) and accepted under ALWAYS_COMPATIBLE; a
// compatible one is accepted under BACKWARD; the admin API (pulsaradmin) lists the versions,
// tests compatibility, deletes the schema, and schema validation enforcement refuses a
// producer without a schema.
func TestSchemaCompatibilityAvro(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true})
	cl := c.client()
	adm := c.admin()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	ctx := ctxT(t, time.Minute)

	p1 := producer(t, cl, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(avroV1, nil)})
	if _, err := p1.Send(ctx, &pulsar.ProducerMessage{Value: &userV1{ID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := adm.Topics().SetSchemaCompatibilityStrategy(tn, utils.SchemaCompatibilityStrategyBackward); err != nil {
		t.Fatalf("set topic strategy: %v", err)
	}
	_, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(avroV2Bad, nil)})
	if err == nil || !strings.Contains(err.Error(), "IncompatibleSchema") {
		t.Fatalf("incompatible Avro producer under BACKWARD: %v, want IncompatibleSchema", err)
	}
	info := utils.SchemaInfo{Type: "AVRO", Schema: []byte(avroV2Bad), Properties: map[string]string{}}
	res, err := adm.Schemas().TestCompatibilityWithSchemaInfo(topic, info)
	if err != nil || res.IsCompatibility || res.SchemaCompatibilityStrategy != utils.SchemaCompatibilityStrategyBackward {
		t.Fatalf("test compatibility of the bad schema: %+v, %v", res, err)
	}
	good := producer(t, cl, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(avroV2Good, nil)})
	if _, err := good.Send(ctx, &pulsar.ProducerMessage{Value: &userV2{ID: 2, Email: "b@x"}}); err != nil {
		t.Fatal(err)
	}

	if err := adm.Topics().SetSchemaCompatibilityStrategy(tn, utils.SchemaCompatibilityStrategyAlwaysCompatible); err != nil {
		t.Fatal(err)
	}
	bad := producer(t, cl, pulsar.ProducerOptions{Topic: topic, Schema: pulsar.NewAvroSchema(avroV2Bad, nil)})
	if _, err := bad.Send(ctx, &pulsar.ProducerMessage{Value: &userV2{ID: 3, Email: "c@x"}}); err != nil {
		t.Fatal(err)
	}
	all, err := adm.Schemas().GetAllSchemas(topic)
	if err != nil || len(all) != 3 {
		t.Fatalf("schema versions: %d, %v; want 3", len(all), err)
	}
	for i, v := range all {
		if v.Version != int64(i) || v.SchemaInfo.Type != "AVRO" {
			t.Fatalf("version %d: %+v", i, v)
		}
	}
	if !strings.Contains(string(all[1].SchemaInfo.Schema), `"default":""`) {
		t.Fatalf("version 1 is %s", all[1].SchemaInfo.Schema)
	}
	if v, err := adm.Schemas().GetVersionBySchemaInfo(topic, utils.SchemaInfo{Type: "AVRO", Schema: []byte(avroV2Good)}); err != nil || v != 1 {
		t.Fatalf("version of v2good: %d, %v", v, err)
	}
	old, err := adm.Schemas().GetSchemaInfoByVersion(topic, 0)
	if err != nil || !strings.Contains(string(old.Schema), `"test.user"`) || strings.Contains(string(old.Schema), "email") {
		t.Fatalf("version 0: %+v, %v", old, err)
	}

	// Schema validation enforced: a producer without a schema is refused while the topic has
	// one, and accepted once the schema is deleted.
	ns, _ := utils.GetNamespaceName("public/default")
	if err := adm.Namespaces().SetSchemaValidationEnforced(*ns, true); err != nil {
		t.Fatal(err)
	}
	if on, err := adm.Namespaces().GetSchemaValidationEnforced(*ns); err != nil || !on {
		t.Fatalf("schemaValidationEnforced: %v, %v", on, err)
	}
	if _, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil ||
		!strings.Contains(err.Error(), "IncompatibleSchema") {
		t.Fatalf("producer without a schema under enforcement: %v", err)
	}
	if err := adm.Schemas().DeleteSchema(topic); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Schemas().GetSchemaInfo(topic); statusOf(err) != http.StatusNotFound {
		t.Fatalf("schema after delete: %v, want 404", err)
	}
	raw := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	if _, err := raw.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("raw")}); err != nil {
		t.Fatal(err)
	}
	// After the deletion the next schema is a new version, checked against nothing.
	if err := adm.Schemas().CreateSchemaBySchemaInfo(topic, utils.SchemaInfo{Type: "AVRO", Schema: []byte(avroV1)}); err != nil {
		t.Fatal(err)
	}
	if got, err := adm.Schemas().GetSchemaInfoWithVersion(topic); err != nil || got.Version != 4 {
		t.Fatalf("schema after re-creation: %+v, %v; want version 4", got, err)
	}
	// An invalid definition is refused with 422.
	err = adm.Schemas().CreateSchemaBySchemaInfo(topic, utils.SchemaInfo{Type: "AVRO", Schema: []byte(`{"type":"record"}`)})
	if statusOf(err) != http.StatusUnprocessableEntity {
		t.Fatalf("invalid definition: %v, want 422", err)
	}
}
