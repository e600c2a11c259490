package broker

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// ErrSchemaNotFound: the topic has no schema (of that version).
var ErrSchemaNotFound = errors.New("broker: schema not found")

// schemaRegistry keeps the schema versions of topics in the metadata store
// (metadata.SchemaKey; partitions share their partitioned topic's schemas). Compatibility
// checking is "always compatible" for now: a schema not registered yet becomes the next
// version. Versions are 8-byte big-endian integers on the wire. Safe for concurrent use.
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
	Hash       string            `json:"hash"`
	Timestamp  int64             `json:"timestamp"`
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
	for _, kv := range s.GetProperties() {
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

// getOrCreate returns the version of schema s for topic n, registering it if it is new.
func (r *schemaRegistry) getOrCreate(ctx context.Context, n topicname.Name, s *pb.Schema) ([]byte, error) {
	prefix := schemaPrefix(n)
	hash := schemaHash(s)
	for attempt := 0; attempt < 10; attempt++ {
		vs, err := r.versions(ctx, prefix, attempt > 0)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if v.Hash == hash {
				return encodeSchemaVersion(v.Version), nil
			}
		}
		next := int64(0)
		if len(vs) > 0 {
			next = vs[len(vs)-1].Version + 1
		}
		props := map[string]string{}
		for _, kv := range s.GetProperties() {
			props[kv.GetKey()] = kv.GetValue()
		}
		rec := schemaRecord{Version: next, Type: int32(s.GetType()), Name: s.GetName(), Data: s.GetSchemaData(),
			Properties: props, Hash: hash, Timestamp: time.Now().UnixMilli()}
		b, _ := json.Marshal(rec)
		b0 := n.Base()
		_, err = r.store.Put(ctx, metadata.SchemaKey(b0.Tenant, b0.Namespace, b0.Local, next), b, metadata.NotExists)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue // someone registered a version meanwhile: look again
		}
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.mu.cache[prefix] = append(append([]schemaRecord(nil), vs...), rec)
		r.mu.Unlock()
		return encodeSchemaVersion(next), nil
	}
	return nil, fmt.Errorf("%w: schema registration of %s keeps conflicting", ErrServiceNotReady, n)
}

// get returns schema version v of topic n (nil or empty v: the latest).
func (r *schemaRegistry) get(ctx context.Context, n topicname.Name, v []byte) (*pb.Schema, []byte, error) {
	prefix := schemaPrefix(n)
	for fresh := false; ; fresh = true {
		vs, err := r.versions(ctx, prefix, fresh)
		if err != nil {
			return nil, nil, err
		}
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
			return rec.toProto(), encodeSchemaVersion(rec.Version), nil
		}
		if fresh {
			return nil, nil, fmt.Errorf("%w: topic %s version %x", ErrSchemaNotFound, n, v)
		}
	}
}

func (rec *schemaRecord) toProto() *pb.Schema {
	t := pb.Schema_Type(rec.Type)
	data := rec.Data
	if data == nil {
		data = []byte{}
	}
	s := &pb.Schema{Name: &rec.Name, Type: &t, SchemaData: data}
	for k, v := range rec.Properties {
		s.Properties = append(s.Properties, &pb.KeyValue{Key: &k, Value: &v})
	}
	return s
}

func encodeSchemaVersion(v int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v))
}
