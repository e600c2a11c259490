package schemareg

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

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/schema"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Store is what the registry needs of the metadata store (metadata.Store).
type Store interface {
	List(ctx context.Context, prefix string) (kvs []metadata.KV, rev int64, err error)
	Put(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error)
	Delete(ctx context.Context, key string, expected metadata.Version) error
}

// Policies is what the registry needs of the broker's policy records. Safe for concurrent
// use.
type Policies interface {
	// NamespacePolicies returns namespace tenant/ns's policies (api.ErrNamespaceNotFound if
	// it does not exist).
	NamespacePolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error)
	// TopicRecord returns topic n's policy record (empty if it has none).
	TopicRecord(ctx context.Context, n topicname.Name) (policy.Record, error)
	// UpdateTopicRecord changes topic n's policy record with a compare-and-swap.
	UpdateTopicRecord(ctx context.Context, n topicname.Name, change func(policy.Record) error) error
}

// Config configures a Registry.
type Config struct {
	Store    Store
	Policies Policies
	// DefaultStrategy is the broker's compatibility strategy, for namespaces without one
	// ("": FULL).
	DefaultStrategy string
	// ValidationEnforced is the broker's schema validation enforcement, for namespaces
	// that do not set it.
	ValidationEnforced bool
}

// Registry is the schema registry. Safe for concurrent use.
type Registry struct {
	cfg Config
	mu  struct {
		sync.Mutex                     // leaf lock; guards the fields below
		cache      map[string][]Record // schema prefix → versions in order
	}
}

// Record is a stored schema version (the JSON at metadata.SchemaKey).
type Record struct {
	Version    int64             `json:"version"`
	Type       int32             `json:"type"`
	Name       string            `json:"name"`
	Data       []byte            `json:"data"`
	Properties map[string]string `json:"properties,omitempty"`
	Hash       string            `json:"hash"` // of type, data and properties (informational)
	Timestamp  int64             `json:"timestamp"`
	Deleted    bool              `json:"deleted,omitempty"`
}

// New returns a registry over cfg.Store.
func New(cfg Config) *Registry {
	r := &Registry{cfg: cfg}
	r.mu.cache = map[string][]Record{}
	return r
}

func prefixOf(n topicname.Name) string {
	b := n.Base()
	return metadata.SchemaPrefix(b.Tenant, b.Namespace, b.Local)
}

func hashOf(s *pb.Schema) string {
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

// versions returns the schema versions of a topic, from the cache or (fresh) the store.
func (r *Registry) versions(ctx context.Context, prefix string, fresh bool) ([]Record, error) {
	if !fresh {
		r.mu.Lock()
		vs, ok := r.mu.cache[prefix]
		r.mu.Unlock()
		if ok {
			return vs, nil
		}
	}
	kvs, _, err := r.cfg.Store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	vs := make([]Record, 0, len(kvs))
	for _, kv := range kvs {
		if strings.Contains(strings.TrimPrefix(kv.Key, prefix), "/") {
			continue
		}
		var rec Record
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
func live(vs []Record) []Record {
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].Deleted {
			return vs[i+1:]
		}
	}
	return vs
}

// sameVersion returns the version of vs that is def (schema.Same).
func sameVersion(vs []Record, def schema.Definition) (int64, bool) {
	for _, v := range vs {
		if schema.Same(v.definition(), def) {
			return v.Version, true
		}
	}
	return 0, false
}

func definitions(vs []Record) []schema.Definition {
	ds := make([]schema.Definition, len(vs))
	for i, v := range vs {
		ds[i] = v.definition()
	}
	return ds
}

func (rec *Record) definition() schema.Definition {
	return schema.Definition{Type: pb.Schema_Type(rec.Type), Data: rec.Data, Properties: rec.Properties}
}

func protoDefinition(s *pb.Schema) schema.Definition {
	return schema.Definition{Type: s.GetType(), Data: s.GetSchemaData(), Properties: kvMap(s.GetProperties())}
}

// kvMap converts the protocol's key-value list (nil for none).
func kvMap(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

// Use says why a schema is offered to a topic.
type Use int

const (
	// Produce is a producer's (or a message's) schema: registered if compatible.
	Produce Use = iota
	// Consume is a consumer's schema: registered only on a topic without schemas.
	Consume
	// admin is a schema posted through the admin API: registered if compatible, whatever
	// the auto-update policy says.
	admin
)

// getOrCreate returns the version of schema s for topic n, registering it if it is new and
// the policy lets it in (errors wrap schema.ErrIncompatible or schema.ErrInvalid if not).
// A consumer's new schema on a topic with schemas is only checked (CheckConsumer); the
// answer is then nil.
func (r *Registry) getOrCreate(ctx context.Context, n topicname.Name, s *pb.Schema, pol topicPolicy, use Use) ([]byte, error) {
	prefix := prefixOf(n)
	hash := hashOf(s)
	def := protoDefinition(s)
	for attempt := 0; attempt < 10; attempt++ {
		all, err := r.versions(ctx, prefix, attempt > 0 || use == admin)
		if err != nil {
			return nil, err
		}
		vs := live(all)
		if v, ok := sameVersion(vs, def); ok {
			return EncodeVersion(v), nil
		}
		if err := schema.Validate(def); err != nil {
			return nil, err
		}
		if use == Consume && len(vs) > 0 {
			return nil, schema.CheckConsumer(definitions(vs), def, pol.strategy)
		}
		if use != admin && !pol.autoUpdate && len(vs) > 0 {
			return nil, fmt.Errorf("%w: Schema not found and schema auto updating is disabled", schema.ErrIncompatible)
		}
		if err := schema.Check(definitions(vs), def, pol.strategy); err != nil {
			return nil, err
		}
		next := int64(0)
		if len(all) > 0 {
			next = all[len(all)-1].Version + 1
		}
		rec := Record{Version: next, Type: int32(s.GetType()), Name: s.GetName(), Data: s.GetSchemaData(),
			Properties: def.Properties, Hash: hash, Timestamp: time.Now().UnixMilli()}
		err = r.put(ctx, n, all, rec)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue // someone registered a version meanwhile: look again
		}
		if err != nil {
			return nil, err
		}
		return EncodeVersion(next), nil
	}
	return nil, fmt.Errorf("%w: schema registration of %s keeps conflicting", api.ErrServiceNotReady, n)
}

// put stores rec as the version after all (metadata.ErrBadVersion if that version exists).
func (r *Registry) put(ctx context.Context, n topicname.Name, all []Record, rec Record) error {
	b, _ := json.Marshal(rec)
	b0 := n.Base()
	if _, err := r.cfg.Store.Put(ctx, metadata.SchemaKey(b0.Tenant, b0.Namespace, b0.Local, rec.Version), b,
		metadata.NotExists); err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.cache[prefixOf(n)] = append(slices.Clone(all), rec)
	r.mu.Unlock()
	return nil
}

// get returns schema version v of topic n (nil or empty v: the latest). Deleted versions,
// and versions before the last deletion, are not found.
func (r *Registry) get(ctx context.Context, n topicname.Name, v []byte, fresh bool) (Record, error) {
	prefix := prefixOf(n)
	for ; ; fresh = true {
		all, err := r.versions(ctx, prefix, fresh)
		if err != nil {
			return Record{}, err
		}
		vs := live(all)
		var rec *Record
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
			return Record{}, fmt.Errorf("%w: topic %s version %x", api.ErrSchemaNotFound, n, v)
		}
	}
}

// delete marks the schema of topic n deleted (a deletion version) or, if force, removes
// every version. It returns the deletion's version (force: the last version removed).
func (r *Registry) delete(ctx context.Context, n topicname.Name, force bool) (int64, error) {
	prefix := prefixOf(n)
	for attempt := 0; attempt < 10; attempt++ {
		all, err := r.versions(ctx, prefix, true)
		if err != nil {
			return 0, err
		}
		if len(live(all)) == 0 && !(force && len(all) > 0) {
			return 0, fmt.Errorf("%w: topic %s", api.ErrSchemaNotFound, n)
		}
		last := all[len(all)-1].Version
		if force {
			b := n.Base()
			for _, rec := range all {
				if err := r.cfg.Store.Delete(ctx, metadata.SchemaKey(b.Tenant, b.Namespace, b.Local, rec.Version),
					metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
					return 0, err
				}
			}
			r.mu.Lock()
			delete(r.mu.cache, prefix)
			r.mu.Unlock()
			return last, nil
		}
		rec := Record{Version: last + 1, Type: int32(pb.Schema_None), Deleted: true, Timestamp: time.Now().UnixMilli()}
		err = r.put(ctx, n, all, rec)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return rec.Version, err
	}
	return 0, fmt.Errorf("%w: schema deletion of %s keeps conflicting", api.ErrServiceNotReady, n)
}

func (rec *Record) toProto() *pb.Schema {
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

// EncodeVersion is version v on the wire (8 bytes, big-endian).
func EncodeVersion(v int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v))
}

// DecodeVersion is the version encoded in v (-1 if v is not 8 bytes).
func DecodeVersion(v []byte) int64 {
	if len(v) != 8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(v))
}
