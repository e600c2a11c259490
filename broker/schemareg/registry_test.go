package schemareg

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// memStore is an in-memory Store. conflictOnce, if set, makes the next create-only put of
// that key fail as if another broker had written it first (and writes other's value).
type memStore struct {
	mu           sync.Mutex
	rev          int64
	kvs          map[string]metadata.KV
	conflictOnce map[string][]byte
	puts         int
}

func newMemStore() *memStore {
	return &memStore{kvs: map[string]metadata.KV{}, conflictOnce: map[string][]byte{}}
}

func (m *memStore) List(_ context.Context, prefix string) ([]metadata.KV, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []metadata.KV
	for k, kv := range m.kvs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, m.rev, nil
}

func (m *memStore) Put(_ context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	if other, ok := m.conflictOnce[key]; ok {
		delete(m.conflictOnce, key)
		m.rev++
		m.kvs[key] = metadata.KV{Key: key, Value: other, Version: metadata.Version(m.rev)}
	}
	if _, ok := m.kvs[key]; ok && expected == metadata.NotExists {
		return 0, metadata.ErrBadVersion
	}
	m.rev++
	m.kvs[key] = metadata.KV{Key: key, Value: value, Version: metadata.Version(m.rev)}
	return metadata.Version(m.rev), nil
}

func (m *memStore) Delete(_ context.Context, key string, _ metadata.Version) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.kvs, key)
	return nil
}

// fakePolicies holds one namespace's policies and the topic records.
type fakePolicies struct {
	ns     api.NamespacePolicies
	mu     sync.Mutex
	topics map[string]policy.Record
}

func (p *fakePolicies) NamespacePolicies(_ context.Context, tenant, ns string) (api.NamespacePolicies, error) {
	if tenant+"/"+ns != "t/ns" {
		return api.NamespacePolicies{}, api.ErrNamespaceNotFound
	}
	return p.ns, nil
}

func (p *fakePolicies) TopicRecord(_ context.Context, n topicname.Name) (policy.Record, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := policy.Record{}
	for k, v := range p.topics[n.Base().String()] {
		r[k] = v
	}
	return r, nil
}

func (p *fakePolicies) UpdateTopicRecord(_ context.Context, n topicname.Name, change func(policy.Record) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := policy.Record{}
	for k, v := range p.topics[n.Base().String()] {
		r[k] = v
	}
	if err := change(r); err != nil {
		return err
	}
	p.topics[n.Base().String()] = r
	return nil
}

func newRegistry(defaultStrategy string) (*Registry, *memStore, *fakePolicies) {
	st := newMemStore()
	pols := &fakePolicies{topics: map[string]policy.Record{}}
	return New(Config{Store: st, Policies: pols, DefaultStrategy: defaultStrategy}), st, pols
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// avro returns an Avro record schema with the given fields ("name:type" or
// "name:type=default").
func avro(fields ...string) *pb.Schema {
	var fs []string
	for _, f := range fields {
		name, typ, _ := strings.Cut(f, ":")
		typ, def, hasDef := strings.Cut(typ, "=")
		s := `{"name":"` + name + `","type":"` + typ + `"`
		if hasDef {
			s += `,"default":` + def
		}
		fs = append(fs, s+"}")
	}
	t := pb.Schema_Avro
	name := "r"
	return &pb.Schema{Name: &name, Type: &t,
		SchemaData: []byte(`{"type":"record","name":"R","fields":[` + strings.Join(fs, ",") + `]}`)}
}

var topicA = topicname.MustParse("persistent://t/ns/a")

// version returns a function that decodes the version an Offer returned, failing the test
// on its error.
func version(t *testing.T) func(v []byte, err error) int64 {
	return func(v []byte, err error) int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return DecodeVersion(v)
	}
}

// A producer's schemas become versions 0, 1, ... when compatible; the same schema again is
// its existing version; an incompatible one is refused and stores nothing. Partitions share
// their topic's versions.
func TestProducerVersions(t *testing.T) {
	r, st, _ := newRegistry("")
	ctx := ctxT(t)
	v0 := avro("a:string")
	v1 := avro("a:string", "b:int=0") // FULL: a defaulted field may come and go
	if got := version(t)(r.Offer(ctx, topicA, v0, Produce)); got != 0 {
		t.Fatalf("first schema: version %d", got)
	}
	if got := version(t)(r.Offer(ctx, topicA.PartitionName(3), v1, Produce)); got != 1 {
		t.Fatalf("compatible schema on a partition: version %d", got)
	}
	if got := version(t)(r.Offer(ctx, topicA, v0, Produce)); got != 0 {
		t.Fatalf("known schema: version %d, want 0", got)
	}
	puts := st.puts
	_, err := r.Offer(ctx, topicA, avro("a:int"), Produce)
	if !errors.Is(err, api.ErrIncompatibleSchema) {
		t.Fatalf("a changed field type under FULL: %v", err)
	}
	if st.puts != puts {
		t.Fatal("a refused schema was written")
	}
	sc, ver, err := r.Proto(ctx, topicA, nil)
	if err != nil || DecodeVersion(ver) != 1 || string(sc.GetSchemaData()) != string(v1.GetSchemaData()) {
		t.Fatalf("latest: %v %v %v", sc, ver, err)
	}
}

// A consumer's new schema on a topic with schemas is checked, never registered; on a topic
// without schemas it is registered.
func TestConsumerSchemas(t *testing.T) {
	r, _, _ := newRegistry("")
	ctx := ctxT(t)
	if got := version(t)(r.Offer(ctx, topicA, avro("a:string"), Consume)); got != 0 {
		t.Fatalf("consumer on a topic without schemas: version %d", got)
	}
	v, err := r.Offer(ctx, topicA, avro("a:string", "b:int=0"), Consume)
	if err != nil || v != nil {
		t.Fatalf("compatible consumer schema: version %v, %v (want checked only: nil, nil)", v, err)
	}
	vs, err := r.SchemaVersions(ctx, "t/ns/a")
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions after consumers: %d, %v", len(vs), err)
	}
	if _, err := r.Offer(ctx, topicA, avro("a:int"), Consume); !errors.Is(err, api.ErrIncompatibleSchema) {
		t.Fatalf("incompatible consumer schema: %v", err)
	}
}

// The strategy is the topic's, else the namespace's, else the older namespace key, else
// the broker's, else FULL.
func TestStrategyResolution(t *testing.T) {
	r, _, pols := newRegistry("")
	ctx := ctxT(t)
	applied := func() string {
		t.Helper()
		s, err := r.TopicSchemaCompatibility(ctx, "t/ns/a", true)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := applied(); s != "FULL" {
		t.Fatalf("nothing set: %s", s)
	}
	r.cfg.DefaultStrategy = "BACKWARD"
	if s := applied(); s != "BACKWARD" {
		t.Fatalf("broker default: %s", s)
	}
	pols.ns.Other = map[string]any{"schema_auto_update_compatibility_strategy": "FORWARD"}
	if s := applied(); s != "FORWARD" {
		t.Fatalf("older namespace key: %s", s)
	}
	pols.ns.SchemaCompatibility = "ALWAYS_COMPATIBLE"
	if s := applied(); s != "ALWAYS_COMPATIBLE" {
		t.Fatalf("namespace: %s", s)
	}
	if err := r.SetTopicSchemaCompatibility(ctx, "t/ns/a-partition-1", "FULL_TRANSITIVE"); err != nil {
		t.Fatal(err)
	}
	if s := applied(); s != "FULL_TRANSITIVE" {
		t.Fatalf("topic (set through a partition): %s", s)
	}
	if s, err := r.TopicSchemaCompatibility(ctx, "t/ns/a", false); err != nil || s != "FULL_TRANSITIVE" {
		t.Fatalf("topic level: %q, %v", s, err)
	}
	if err := r.SetTopicSchemaCompatibility(ctx, "t/ns/a", ""); err != nil {
		t.Fatal(err)
	}
	if s := applied(); s != "ALWAYS_COMPATIBLE" {
		t.Fatalf("topic level removed: %s", s)
	}
	if err := r.SetTopicSchemaCompatibility(ctx, "t/ns/a", "SOMETIMES"); !errors.Is(err, api.ErrInvalidSchema) {
		t.Fatalf("unknown strategy: %v", err)
	}
	// The resolved strategy decides: ALWAYS_COMPATIBLE takes a changed type.
	version(t)(r.Offer(ctx, topicA, avro("a:string"), Produce))
	if got := version(t)(r.Offer(ctx, topicA, avro("a:int"), Produce)); got != 1 {
		t.Fatalf("ALWAYS_COMPATIBLE: version %d", got)
	}
}

// With auto-update off producers cannot add versions (the first schema is still taken)
// while the admin API can; with validation enforced a producer without a schema is refused
// once the topic has one.
func TestAutoUpdateAndEnforcement(t *testing.T) {
	r, _, pols := newRegistry("")
	ctx := ctxT(t)
	off, on := false, true
	pols.ns.AllowAutoUpdateSchema = &off
	if _, err := r.Offer(ctx, topicA, nil, Produce); err != nil {
		t.Fatalf("no schema on a topic without schemas: %v", err)
	}
	version(t)(r.Offer(ctx, topicA, avro("a:string"), Produce))
	next := avro("a:string", "b:int=0")
	if _, err := r.Offer(ctx, topicA, next, Produce); !errors.Is(err, api.ErrIncompatibleSchema) {
		t.Fatalf("producer's new schema with auto-update off: %v", err)
	}
	v, err := r.CreateSchema(ctx, "t/ns/a", api.SchemaInfo{Type: "AVRO", Data: next.GetSchemaData()})
	if err != nil || v != 1 {
		t.Fatalf("admin's new schema with auto-update off: %d, %v", v, err)
	}
	if _, err := r.Offer(ctx, topicA, nil, Produce); err != nil {
		t.Fatalf("no schema, validation not enforced: %v", err)
	}
	pols.ns.SchemaValidationEnforced = &on
	if _, err := r.Offer(ctx, topicA, nil, Produce); !errors.Is(err, api.ErrIncompatibleSchema) {
		t.Fatalf("no schema, validation enforced: %v", err)
	}
	if _, err := r.Offer(ctx, topicA, nil, Consume); err != nil {
		t.Fatalf("consumer without a schema: %v", err)
	}
	// The topic-level schemaValidationEnforced overrides the namespace's.
	pols.mu.Lock()
	pols.topics[topicA.Base().String()] = policy.Record{policy.KeySchemaValidationEnforced: []byte("false")}
	pols.mu.Unlock()
	if _, err := r.Offer(ctx, topicA, nil, Produce); err != nil {
		t.Fatalf("no schema, validation enforced by the namespace but not by the topic: %v", err)
	}
}

// A deletion is a version of its own: the versions before it are no longer live, and the
// next schema follows it; force removes every version, so numbering starts again.
func TestDeleteVersions(t *testing.T) {
	r, _, _ := newRegistry("")
	ctx := ctxT(t)
	version(t)(r.Offer(ctx, topicA, avro("a:string"), Produce))
	d, err := r.DeleteSchema(ctx, "t/ns/a", false)
	if err != nil || d != 1 {
		t.Fatalf("delete: version %d, %v", d, err)
	}
	if _, err := r.Schema(ctx, "t/ns/a", 0); !errors.Is(err, api.ErrSchemaNotFound) {
		t.Fatalf("a version before the deletion: %v", err)
	}
	if _, err := r.DeleteSchema(ctx, "t/ns/a", false); !errors.Is(err, api.ErrSchemaNotFound) {
		t.Fatalf("deleting a deleted schema: %v", err)
	}
	// An incompatible schema is taken after a deletion: nothing is live.
	if got := version(t)(r.Offer(ctx, topicA, avro("a:int"), Produce)); got != 2 {
		t.Fatalf("after the deletion: version %d, want 2", got)
	}
	if d, err := r.DeleteSchema(ctx, "t/ns/a", true); err != nil || d != 2 {
		t.Fatalf("forced delete: %d, %v", d, err)
	}
	if got := version(t)(r.Offer(ctx, topicA, avro("a:string"), Produce)); got != 0 {
		t.Fatalf("after a forced delete: version %d, want 0", got)
	}
}

// A registration that loses the create-only put to another broker looks again: the
// other's version is found when it is the same schema, and a new version follows it
// otherwise.
func TestRegistrationConflict(t *testing.T) {
	r, st, _ := newRegistry("ALWAYS_COMPATIBLE")
	ctx := ctxT(t)
	mine := avro("a:string")
	other := Record{Version: 0, Type: int32(pb.Schema_Avro), Data: avro("x:long").GetSchemaData()}
	st.conflictOnce[metadata.SchemaKey("t", "ns", "a", 0)] = mustJSON(t, other)
	if got := version(t)(r.Offer(ctx, topicA, mine, Produce)); got != 1 {
		t.Fatalf("after losing version 0: version %d, want 1", got)
	}
	vs, err := r.SchemaVersions(ctx, "t/ns/a")
	if err != nil || len(vs) != 2 {
		t.Fatalf("versions: %d, %v", len(vs), err)
	}
	if v, err := r.SchemaVersionOf(ctx, "t/ns/a", api.SchemaInfo{Type: "AVRO", Data: mine.GetSchemaData()}); err != nil || v != 1 {
		t.Fatalf("version of mine: %d, %v", v, err)
	}
}

func TestCompatibilityTest(t *testing.T) {
	r, _, _ := newRegistry("")
	ctx := ctxT(t)
	version(t)(r.Offer(ctx, topicA, avro("a:string"), Produce))
	ok, strategy, err := r.TestSchemaCompatibility(ctx, "t/ns/a", api.SchemaInfo{Type: "AVRO", Data: avro("a:int").GetSchemaData()})
	if err != nil || ok || strategy != "FULL" {
		t.Fatalf("incompatible: %v %s %v", ok, strategy, err)
	}
	ok, _, err = r.TestSchemaCompatibility(ctx, "t/ns/a", api.SchemaInfo{Type: "AVRO", Data: avro("a:string", "b:int=0").GetSchemaData()})
	if err != nil || !ok {
		t.Fatalf("compatible: %v %v", ok, err)
	}
	_, _, err = r.TestSchemaCompatibility(ctx, "t/ns/a", api.SchemaInfo{Type: "AVRO", Data: []byte("{not avro")})
	if !errors.Is(err, api.ErrInvalidSchema) {
		t.Fatalf("bad definition: %v", err)
	}
}

func TestVersionEncoding(t *testing.T) {
	for _, v := range []int64{0, 1, 255, 1 << 40} {
		if got := DecodeVersion(EncodeVersion(v)); got != v {
			t.Fatalf("%d round-trips to %d", v, got)
		}
	}
	if DecodeVersion([]byte{1, 2}) != -1 {
		t.Fatal("a short version decodes")
	}
}

func mustJSON(t *testing.T, rec Record) []byte {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
