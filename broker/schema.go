package broker

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/schema"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// schemaRegistry keeps the schema versions of topics in the metadata store
// (metadata.SchemaKey; partitions share their partitioned topic's schemas). A schema not
// registered yet is validated and checked against the live versions (those after the last
// deletion) under the topic's strategy (package schema) before it becomes the next version;
// a deletion is itself a version (a record with Deleted set), as in Pulsar, unless forced,
// which removes every version. Versions are 8-byte big-endian integers on the wire. Safe
// for concurrent use.
type schemaRegistry struct {
	store metadata.Store
	mu    struct {
		sync.Mutex                           // guards the fields below
		cache      map[string][]schemaRecord // schema prefix → versions in order
	}
}

type schemaRecord struct {
	Version    int64             `json:"version"`
	Type       int32             `json:"type"`
	Name       string            `json:"name"`
	Data       []byte            `json:"data"`
	Properties map[string]string `json:"properties,omitempty"`
	Hash       string            `json:"hash"` // of type, data and properties (informational)
	Timestamp  int64             `json:"timestamp"`
	Deleted    bool              `json:"deleted,omitempty"`
}

// schemaPolicy is what decides whether a topic takes a new schema.
type schemaPolicy struct {
	strategy   schema.Strategy
	autoUpdate bool // new schemas may be registered by producers and consumers
	enforced   bool // producers without a schema are refused on a topic with one
}

func newSchemaRegistry(store metadata.Store) *schemaRegistry {
	r := &schemaRegistry{store: store}
	r.mu.cache = map[string][]schemaRecord{}
	return r
}

func schemaPrefix(n topicname.Name) string {
	b := n.Base()
	return metadata.SchemaPrefix(b.Tenant, b.Namespace, b.Local)
}

func schemaHash(s *pb.Schema) string {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(int(s.GetType()))))
	h.Write([]byte{0})
	h.Write(s.GetSchemaData())
	kvs := slices.Clone(s.GetProperties())
	slices.SortFunc(kvs, func(a, b *pb.KeyValue) int { return strings.Compare(a.GetKey(), b.GetKey()) })
	for _, kv := range kvs {
		h.Write([]byte{0})
		h.Write([]byte(kv.GetKey() + "=" + kv.GetValue()))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// versions returns the schema versions of a topic, from the cache or the store.
func (r *schemaRegistry) versions(ctx context.Context, prefix string, fresh bool) ([]schemaRecord, error) {
	if !fresh {
		r.mu.Lock()
		vs, ok := r.mu.cache[prefix]
		r.mu.Unlock()
		if ok {
			return vs, nil
		}
	}
	kvs, _, err := r.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	vs := make([]schemaRecord, 0, len(kvs))
	for _, kv := range kvs {
		if strings.Contains(strings.TrimPrefix(kv.Key, prefix), "/") {
			continue
		}
		var rec schemaRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("schema record %s: %w", kv.Key, err)
		}
		vs = append(vs, rec)
	}
	r.mu.Lock()
	r.mu.cache[prefix] = vs
	r.mu.Unlock()
	return vs, nil
}

// live returns the versions after the last deletion.
func live(vs []schemaRecord) []schemaRecord {
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].Deleted {
			return vs[i+1:]
		}
	}
	return vs
}

// sameVersion returns the version of vs that is def (schema.Same).
func sameVersion(vs []schemaRecord, def schema.Definition) (int64, bool) {
	for _, v := range vs {
		if schema.Same(v.definition(), def) {
			return v.Version, true
		}
	}
	return 0, false
}

func definitions(vs []schemaRecord) []schema.Definition {
	ds := make([]schema.Definition, len(vs))
	for i, v := range vs {
		ds[i] = v.definition()
	}
	return ds
}

func (rec *schemaRecord) definition() schema.Definition {
	return schema.Definition{Type: pb.Schema_Type(rec.Type), Data: rec.Data, Properties: rec.Properties}
}

func protoDefinition(s *pb.Schema) schema.Definition {
	return schema.Definition{Type: s.GetType(), Data: s.GetSchemaData(), Properties: kvMap(s.GetProperties())}
}

// schemaOp says why a schema is offered to a topic.
type schemaOp int

const (
	opProduce schemaOp = iota // a producer's (or a message's) schema: registered if compatible
	opConsume                 // a consumer's schema: registered only on a topic without schemas
	opAdmin                   // posted through the admin API: registered if compatible, whatever autoUpdate says
)

// getOrCreate returns the version of schema s for topic n, registering it if it is new and
// the policy lets it in (errors wrap schema.ErrIncompatible or schema.ErrInvalid if not).
// A consumer's new schema on a topic with schemas is only checked (CheckConsumer); the
// answer is then nil.
func (r *schemaRegistry) getOrCreate(ctx context.Context, n topicname.Name, s *pb.Schema, pol schemaPolicy,
	op schemaOp) ([]byte, error) {
	prefix := schemaPrefix(n)
	hash := schemaHash(s)
	def := protoDefinition(s)
	for attempt := 0; attempt < 10; attempt++ {
		all, err := r.versions(ctx, prefix, attempt > 0 || op == opAdmin)
		if err != nil {
			return nil, err
		}
		vs := live(all)
		if v, ok := sameVersion(vs, def); ok {
			return encodeSchemaVersion(v), nil
		}
		if err := schema.Validate(def); err != nil {
			return nil, err
		}
		if op == opConsume && len(vs) > 0 {
			return nil, schema.CheckConsumer(definitions(vs), def, pol.strategy)
		}
		if op != opAdmin && !pol.autoUpdate && len(vs) > 0 {
			return nil, fmt.Errorf("%w: Schema not found and schema auto updating is disabled", schema.ErrIncompatible)
		}
		if err := schema.Check(definitions(vs), def, pol.strategy); err != nil {
			return nil, err
		}
		next := int64(0)
		if len(all) > 0 {
			next = all[len(all)-1].Version + 1
		}
		rec := schemaRecord{Version: next, Type: int32(s.GetType()), Name: s.GetName(), Data: s.GetSchemaData(),
			Properties: def.Properties, Hash: hash, Timestamp: time.Now().UnixMilli()}
		err = r.put(ctx, n, all, rec)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue // someone registered a version meanwhile: look again
		}
		if err != nil {
			return nil, err
		}
		return encodeSchemaVersion(next), nil
	}
	return nil, fmt.Errorf("%w: schema registration of %s keeps conflicting", ErrServiceNotReady, n)
}

// put stores rec as the version after all (metadata.ErrBadVersion if that version exists).
func (r *schemaRegistry) put(ctx context.Context, n topicname.Name, all []schemaRecord, rec schemaRecord) error {
	b, _ := json.Marshal(rec)
	b0 := n.Base()
	if _, err := r.store.Put(ctx, metadata.SchemaKey(b0.Tenant, b0.Namespace, b0.Local, rec.Version), b,
		metadata.NotExists); err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.cache[schemaPrefix(n)] = append(slices.Clone(all), rec)
	r.mu.Unlock()
	return nil
}

// get returns schema version v of topic n (nil or empty v: the latest). Deleted versions,
// and versions before the last deletion, are not found.
func (r *schemaRegistry) get(ctx context.Context, n topicname.Name, v []byte, fresh bool) (schemaRecord, error) {
	prefix := schemaPrefix(n)
	for ; ; fresh = true {
		all, err := r.versions(ctx, prefix, fresh)
		if err != nil {
			return schemaRecord{}, err
		}
		vs := live(all)
		var rec *schemaRecord
		if len(v) == 0 {
			if len(vs) > 0 {
				rec = &vs[len(vs)-1]
			}
		} else if len(v) == 8 {
			want := int64(binary.BigEndian.Uint64(v))
			for i := range vs {
				if vs[i].Version == want {
					rec = &vs[i]
				}
			}
		}
		if rec != nil {
			return *rec, nil
		}
		if fresh {
			return schemaRecord{}, fmt.Errorf("%w: topic %s version %x", ErrSchemaNotFound, n, v)
		}
	}
}

// delete marks the schema of topic n deleted (a deletion version) or, if force, removes
// every version. It returns the deletion's version (force: the last version removed).
func (r *schemaRegistry) delete(ctx context.Context, n topicname.Name, force bool) (int64, error) {
	prefix := schemaPrefix(n)
	for attempt := 0; attempt < 10; attempt++ {
		all, err := r.versions(ctx, prefix, true)
		if err != nil {
			return 0, err
		}
		if len(live(all)) == 0 && !(force && len(all) > 0) {
			return 0, fmt.Errorf("%w: topic %s", ErrSchemaNotFound, n)
		}
		last := all[len(all)-1].Version
		if force {
			b := n.Base()
			for _, rec := range all {
				if err := r.store.Delete(ctx, metadata.SchemaKey(b.Tenant, b.Namespace, b.Local, rec.Version),
					metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
					return 0, err
				}
			}
			r.mu.Lock()
			delete(r.mu.cache, prefix)
			r.mu.Unlock()
			return last, nil
		}
		rec := schemaRecord{Version: last + 1, Type: int32(pb.Schema_None), Deleted: true, Timestamp: time.Now().UnixMilli()}
		err = r.put(ctx, n, all, rec)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return rec.Version, err
	}
	return 0, fmt.Errorf("%w: schema deletion of %s keeps conflicting", ErrServiceNotReady, n)
}

func (rec *schemaRecord) toProto() *pb.Schema {
	t := pb.Schema_Type(rec.Type)
	data := rec.Data
	if data == nil {
		data = []byte{}
	}
	s := &pb.Schema{Name: &rec.Name, Type: &t, SchemaData: data}
	for _, k := range slices.Sorted(maps.Keys(rec.Properties)) {
		v := rec.Properties[k]
		s.Properties = append(s.Properties, &pb.KeyValue{Key: &k, Value: &v})
	}
	return s
}

func encodeSchemaVersion(v int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v))
}

// schemaPolicy resolves the schema policy of topic n: the topic-level strategy, else the
// namespace's (schema_compatibility_strategy, else the older
// schema_auto_update_compatibility_strategy), else Config.SchemaCompatibilityStrategy.
func (s *Service) schemaPolicy(ctx context.Context, n topicname.Name) (schemaPolicy, error) {
	pol := schemaPolicy{autoUpdate: true}
	ns, err := s.res.namespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return pol, err
	}
	if ns.AllowAutoUpdateSchema != nil {
		pol.autoUpdate = *ns.AllowAutoUpdateSchema
	}
	if ns.SchemaValidationEnforced != nil {
		pol.enforced = *ns.SchemaValidationEnforced
	} else {
		pol.enforced = s.cfg.SchemaValidationEnforced
	}
	tp, err := s.topicRecord(ctx, n)
	if err != nil {
		return pol, err
	}
	legacy, _ := ns.Other["schema_auto_update_compatibility_strategy"].(string)
	for _, name := range []string{tp.SchemaStrategy(), ns.SchemaCompatibility, legacy, s.cfg.SchemaCompatibilityStrategy} {
		if st, err := schema.ParseStrategy(name); err == nil && st != schema.Undefined {
			pol.strategy = st
			return pol, nil
		}
	}
	pol.strategy = schema.Full
	return pol, nil
}

// offerSchema registers (or checks) schema sc for topic n under n's policy; a nil schema
// is checked against schema validation enforcement (op opProduce only).
func (s *Service) offerSchema(ctx context.Context, n topicname.Name, sc *pb.Schema, op schemaOp) ([]byte, error) {
	if sc == nil {
		if op != opProduce {
			return nil, nil
		}
		return nil, s.checkProducerWithout(ctx, n)
	}
	pol, err := s.schemaPolicy(ctx, n)
	if err != nil {
		return nil, err
	}
	return s.schemas.getOrCreate(ctx, n, sc, pol, op)
}

// checkProducerWithout refuses a producer without a schema on a topic with schemas when
// the policy enforces schema validation. A topic without schemas (the common case, from the
// registry's cache) needs no policy.
func (s *Service) checkProducerWithout(ctx context.Context, n topicname.Name) error {
	vs, err := s.schemas.versions(ctx, schemaPrefix(n), false)
	if err != nil || len(live(vs)) == 0 {
		return err
	}
	pol, err := s.schemaPolicy(ctx, n)
	if err != nil || !pol.enforced {
		return err
	}
	return fmt.Errorf("%w: Producers cannot connect or send message without a schema to topics with a schema "+
		"if SchemaValidationEnforced is enabled", schema.ErrIncompatible)
}
