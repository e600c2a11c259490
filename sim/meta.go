package sim

import (
	"errors"
	"maps"
	"slices"
	"strings"
)

// ErrBadVersion is returned by MetaStore.Put when the expected version does not match.
var ErrBadVersion = errors.New("sim: bad version")

// MetaGet asks a MetaStore node for a key.
type MetaGet struct{ Key string }

// AnyVersion as MetaPut.Expected or MetaDelete.Expected makes the operation unconditional.
const AnyVersion int64 = -1

// MetaPut asks a MetaStore node for a compare-and-swap (Expected 0: must not exist;
// AnyVersion: unconditional). A non-zero Session makes the key ephemeral: it vanishes when the
// session expires (ExpireSession); a Put through an expired session fails ErrSessionExpired.
type MetaPut struct {
	Key      string
	Value    []byte
	Expected int64
	Session  int64
}

// MetaDelete asks a MetaStore node to delete a key at the expected version (AnyVersion:
// always; a missing key is then not an error).
type MetaDelete struct {
	Key      string
	Expected int64
}

// MetaList asks a MetaStore node for every key with a prefix, in key order.
type MetaList struct{ Prefix string }

// MetaKV is one key of a MetaList answer.
type MetaKV struct {
	Key     string
	Value   []byte
	Version int64
	Session int64 // 0: persistent
}

// MetaReply answers MetaGet and MetaPut. For a failed Put, Value and Version are the current
// ones.
type MetaReply struct {
	Value   []byte
	Version int64
	Found   bool
	Err     error
	// KVs answers MetaList.
	KVs []MetaKV
}

// ErrSessionExpired is returned by an ephemeral Put through an expired session.
var ErrSessionExpired = errors.New("sim: session expired")

// MetaChange is one successful Put or Delete, as recorded in the store's history.
type MetaChange struct {
	Key                 string
	Old, New            []byte // Old nil: created; New nil: deleted
	OldVersion, Version int64
}

// MetaStore is a simulated metadata store with etcd-like versions: every successful Put gets
// the next store revision as the key's version; a Put succeeds only if the key's version equals
// Expected. It never loses a write. It is a Node (always up) and can also be used directly.
type MetaStore struct {
	rev int64
	kv  map[string]metaKV
	// sessions: id → live. Ids are handed out from 1.
	sessions    map[int64]bool
	nextSession int64
	// OnChange, if set, sees every successful Put and Delete (used by invariant checkers).
	OnChange func(MetaChange)
}

type metaKV struct {
	value   []byte
	version int64
	session int64
}

// NewMetaStore returns an empty store.
func NewMetaStore() *MetaStore {
	return &MetaStore{kv: map[string]metaKV{}, sessions: map[int64]bool{}}
}

// NewSession starts a session for ephemeral keys and returns its id.
func (m *MetaStore) NewSession() int64 {
	m.nextSession++
	m.sessions[m.nextSession] = true
	return m.nextSession
}

// SessionLive reports whether the session exists and has not expired.
func (m *MetaStore) SessionLive(id int64) bool { return m.sessions[id] }

// ExpireSession ends a session and deletes its ephemeral keys (in key order), as etcd does
// when a lease expires.
func (m *MetaStore) ExpireSession(id int64) {
	if !m.sessions[id] {
		return
	}
	delete(m.sessions, id)
	for _, k := range slices.Sorted(maps.Keys(m.kv)) {
		if m.kv[k].session == id {
			_ = m.Delete(k, AnyVersion)
		}
	}
}

// Up implements Node.
func (m *MetaStore) Up() bool { return true }

// Get returns a key's value and version.
func (m *MetaStore) Get(key string) ([]byte, int64, bool) {
	e, ok := m.kv[key]
	return slices.Clone(e.value), e.version, ok
}

// Put stores value if the key's version is expected (0: absent; AnyVersion: always) and
// returns the new version.
func (m *MetaStore) Put(key string, value []byte, expected int64) (int64, error) {
	return m.PutEphemeral(key, value, expected, 0)
}

// PutEphemeral is Put bound to a session (0: a persistent key).
func (m *MetaStore) PutEphemeral(key string, value []byte, expected, session int64) (int64, error) {
	cur := m.kv[key]
	if expected != AnyVersion && cur.version != expected {
		return cur.version, ErrBadVersion
	}
	if session != 0 && !m.sessions[session] {
		return cur.version, ErrSessionExpired
	}
	m.rev++
	m.kv[key] = metaKV{value: slices.Clone(value), version: m.rev, session: session}
	if m.OnChange != nil {
		m.OnChange(MetaChange{Key: key, Old: cur.value, New: slices.Clone(value), OldVersion: cur.version, Version: m.rev})
	}
	return m.rev, nil
}

// Delete removes the key if its version is expected (AnyVersion: always; a missing key is
// then not an error).
func (m *MetaStore) Delete(key string, expected int64) error {
	cur, ok := m.kv[key]
	if expected != AnyVersion && cur.version != expected {
		return ErrBadVersion
	}
	if !ok {
		return nil
	}
	delete(m.kv, key)
	m.rev++
	if m.OnChange != nil {
		m.OnChange(MetaChange{Key: key, Old: cur.value, OldVersion: cur.version, Version: m.rev})
	}
	return nil
}

// List returns every key with the prefix, in key order.
func (m *MetaStore) List(prefix string) []MetaKV {
	var out []MetaKV
	for _, k := range slices.Sorted(maps.Keys(m.kv)) {
		if strings.HasPrefix(k, prefix) {
			e := m.kv[k]
			out = append(out, MetaKV{Key: k, Value: slices.Clone(e.value), Version: e.version, Session: e.session})
		}
	}
	return out
}

// Handle implements Node for MetaGet, MetaPut, MetaDelete and MetaList, answering MetaReply
// at once.
func (m *MetaStore) Handle(msg any, reply func(any)) {
	switch r := msg.(type) {
	case MetaGet:
		v, ver, ok := m.Get(r.Key)
		reply(MetaReply{Value: v, Version: ver, Found: ok})
	case MetaList:
		reply(MetaReply{KVs: m.List(r.Prefix)})
	case MetaDelete:
		if err := m.Delete(r.Key, r.Expected); err != nil {
			v, cv, ok := m.Get(r.Key)
			reply(MetaReply{Value: v, Version: cv, Found: ok, Err: err})
			return
		}
		reply(MetaReply{})
	case MetaPut:
		ver, err := m.PutEphemeral(r.Key, r.Value, r.Expected, r.Session)
		if err != nil {
			v, cv, ok := m.Get(r.Key)
			reply(MetaReply{Value: v, Version: cv, Found: ok, Err: err})
			return
		}
		reply(MetaReply{Version: ver, Found: true})
	}
}
