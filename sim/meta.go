package sim

import (
	"errors"
	"slices"
)

// ErrBadVersion is returned by MetaStore.Put when the expected version does not match.
var ErrBadVersion = errors.New("sim: bad version")

// MetaGet asks a MetaStore node for a key.
type MetaGet struct{ Key string }

// MetaPut asks a MetaStore node for a compare-and-swap (Expected 0: must not exist).
type MetaPut struct {
	Key      string
	Value    []byte
	Expected int64
}

// MetaReply answers MetaGet and MetaPut. For a failed Put, Value and Version are the current
// ones.
type MetaReply struct {
	Value   []byte
	Version int64
	Found   bool
	Err     error
}

// MetaChange is one successful Put, as recorded in the store's history.
type MetaChange struct {
	Key                 string
	Old, New            []byte // Old nil: created
	OldVersion, Version int64
}

// MetaStore is a simulated metadata store with etcd-like versions: every successful Put gets
// the next store revision as the key's version; a Put succeeds only if the key's version equals
// Expected. It never loses a write. It is a Node (always up) and can also be used directly.
type MetaStore struct {
	rev int64
	kv  map[string]metaKV
	// OnChange, if set, sees every successful Put (used by invariant checkers).
	OnChange func(MetaChange)
}

type metaKV struct {
	value   []byte
	version int64
}

// NewMetaStore returns an empty store.
func NewMetaStore() *MetaStore { return &MetaStore{kv: map[string]metaKV{}} }

// Up implements Node.
func (m *MetaStore) Up() bool { return true }

// Get returns a key's value and version.
func (m *MetaStore) Get(key string) ([]byte, int64, bool) {
	e, ok := m.kv[key]
	return slices.Clone(e.value), e.version, ok
}

// Put stores value if the key's version is expected (0: absent) and returns the new version.
func (m *MetaStore) Put(key string, value []byte, expected int64) (int64, error) {
	cur := m.kv[key]
	if cur.version != expected {
		return cur.version, ErrBadVersion
	}
	m.rev++
	m.kv[key] = metaKV{value: slices.Clone(value), version: m.rev}
	if m.OnChange != nil {
		m.OnChange(MetaChange{Key: key, Old: cur.value, New: slices.Clone(value), OldVersion: cur.version, Version: m.rev})
	}
	return m.rev, nil
}

// Handle implements Node for MetaGet and MetaPut, answering MetaReply at once.
func (m *MetaStore) Handle(msg any, reply func(any)) {
	switch r := msg.(type) {
	case MetaGet:
		v, ver, ok := m.Get(r.Key)
		reply(MetaReply{Value: v, Version: ver, Found: ok})
	case MetaPut:
		ver, err := m.Put(r.Key, r.Value, r.Expected)
		if err != nil {
			v, cv, ok := m.Get(r.Key)
			reply(MetaReply{Value: v, Version: cv, Found: ok, Err: err})
			return
		}
		reply(MetaReply{Version: ver, Found: true})
	}
}
