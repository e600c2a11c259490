package autorecovery

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
	"github.com/magnetar-io/magnetar/sim"
)

// Impossible states panic in this package's tests.
func init() { panicOnAssert = true }

// simEpoch is the wall-clock time of virtual time 0 (marks store Unix milliseconds).
var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simEnv is an Env on the simulation: metadata calls go to the "meta" node and bookie
// requests to the bookie nodes over the simulated network; callbacks run as simulation events.
// kill() makes it a dead process: its session expires (ephemeral keys vanish) and its
// callbacks are dropped.
type simEnv struct {
	name    string
	s       *sim.Sim
	net     *sim.Network
	store   *sim.MetaStore
	session int64
	dead    bool
	// onBookie, if set, sees every bookie request before it is sent (checkers).
	onBookie func(addr string, req *bk.Request)
}

func newSimEnv(name string, s *sim.Sim, net *sim.Network, store *sim.MetaStore) *simEnv {
	return &simEnv{name: name, s: s, net: net, store: store, session: store.NewSession()}
}

func (e *simEnv) kill() {
	if e.dead {
		return
	}
	e.dead = true
	e.s.Tracef("%s dies", e.name)
	e.store.ExpireSession(e.session)
}

func (e *simEnv) Now() time.Time   { return simEpoch.Add(e.s.Now()) }
func (e *simEnv) Rand() *rand.Rand { return e.s.Rand() }

func (e *simEnv) After(d time.Duration, fn func()) {
	e.s.After(d, "", func() {
		if !e.dead {
			fn()
		}
	})
}

// call sends a metadata request and delivers the reply (or the network error) unless dead.
func (e *simEnv) call(req any, cb func(sim.MetaReply, error)) {
	e.net.Call("meta", req, func(resp any, err error) {
		if e.dead {
			return
		}
		if err != nil {
			cb(sim.MetaReply{}, err)
			return
		}
		cb(resp.(sim.MetaReply), nil)
	})
}

func metaErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sim.ErrBadVersion):
		return fmt.Errorf("%w: %v", metadata.ErrBadVersion, err)
	case errors.Is(err, sim.ErrSessionExpired):
		return fmt.Errorf("%w: %v", metadata.ErrSessionExpired, err)
	}
	return err
}

func (e *simEnv) Get(key string, cb func(metadata.KV, error)) {
	e.call(sim.MetaGet{Key: key}, func(r sim.MetaReply, err error) {
		switch {
		case err != nil:
			cb(metadata.KV{}, err)
		case !r.Found:
			cb(metadata.KV{}, fmt.Errorf("%w: %s", metadata.ErrNotFound, key))
		default:
			cb(metadata.KV{Key: key, Value: r.Value, Version: metadata.Version(r.Version)}, nil)
		}
	})
}

func (e *simEnv) put(key string, value []byte, expected metadata.Version, session int64, cb func(metadata.Version, error)) {
	e.call(sim.MetaPut{Key: key, Value: value, Expected: int64(expected), Session: session}, func(r sim.MetaReply, err error) {
		if err == nil {
			err = metaErr(r.Err)
		}
		if err != nil {
			cb(0, err)
			return
		}
		cb(metadata.Version(r.Version), nil)
	})
}

func (e *simEnv) Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	e.put(key, value, expected, 0, cb)
}

func (e *simEnv) PutEphemeral(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	e.put(key, value, expected, e.session, cb)
}

func (e *simEnv) Delete(key string, expected metadata.Version, cb func(error)) {
	e.call(sim.MetaDelete{Key: key, Expected: int64(expected)}, func(r sim.MetaReply, err error) {
		if err == nil {
			err = metaErr(r.Err)
		}
		cb(err)
	})
}

func (e *simEnv) List(prefix string, cb func([]metadata.KV, error)) {
	e.call(sim.MetaList{Prefix: prefix}, func(r sim.MetaReply, err error) {
		if err != nil {
			cb(nil, err)
			return
		}
		out := make([]metadata.KV, len(r.KVs))
		for i, kv := range r.KVs {
			out[i] = metadata.KV{Key: kv.Key, Value: kv.Value, Version: metadata.Version(kv.Version), Lease: kv.Session}
		}
		cb(out, nil)
	})
}

func (e *simEnv) Bookie(addr string, req *bk.Request, cb func(bk.Response, error)) {
	if e.onBookie != nil {
		e.onBookie(addr, req)
	}
	e.net.Call(addr, req, func(resp any, err error) {
		if e.dead {
			return
		}
		if err != nil {
			cb(bk.Response{}, err)
			return
		}
		cb(*resp.(*bk.Response), nil)
	})
}

// send is a one-way bookie message (explicit LAC).
func (e *simEnv) send(addr string, req *bk.Request) {
	if !e.dead {
		e.net.Send(addr, req)
	}
}
