package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/internal/backoff"
	"github.com/magnetar-io/magnetar/metadata"
)

// Info is the value of a bookie's registration key.
type Info struct {
	ID      string    `json:"id"`
	Address string    `json:"address"`
	State   string    `json:"state"`
	Started time.Time `json:"started"`
}

// registrar owns the bookie's metadata session and registration key. Its goroutine (run)
// is the only writer of Bookie.state after Start: it checks disk usage on a ticker, moves the
// registration between the available and read-only prefixes, and re-creates the session if it
// expires (e.g. after a partition from etcd).
type registrar struct {
	b       *Bookie
	started time.Time
	sess    metadata.Session // owned by run after register returns
	done    chan struct{}
	// readOnlyForGood: a write failed on a full disk; the storage or the journal no longer
	// writes, so the bookie stays read-only until restarted. Owned by run.
	readOnlyForGood bool
}

func newRegistrar(b *Bookie) *registrar {
	return &registrar{b: b, started: time.Now(), done: make(chan struct{})}
}

func (r *registrar) key(s State) string {
	if s == StateReadOnly {
		return metadata.ReadOnlyBookieKey(r.b.id)
	}
	return metadata.AvailableBookieKey(r.b.id)
}

// register creates the session and the registration key for the initial state.
func (r *registrar) register(ctx context.Context) error {
	s := StateWritable
	if r.overThreshold(r.b.cfg.DiskThreshold) {
		s = StateReadOnly
	}
	sess, err := r.b.cfg.Store.NewSession(ctx, r.b.cfg.SessionTTL)
	if err != nil {
		return fmt.Errorf("bookie: metadata session: %w", err)
	}
	r.sess = sess
	if err := r.publish(ctx, s); err != nil {
		sess.Close()
		return err
	}
	return nil
}

// publish writes the registration key for state s through the current session and removes the
// other one. A key left by a previous incarnation (whose lease has not expired yet) is
// overwritten: the cookie guarantees no other live process owns this id.
func (r *registrar) publish(ctx context.Context, s State) error {
	// The state changes before the registration does, so anyone who sees the new
	// registration also sees the bookie behave accordingly (e.g. refuse adds when read-only).
	prev := State(r.b.state.Swap(uint32(s)))
	info := Info{ID: r.b.id, Address: r.b.addr, State: s.String(), Started: r.started}
	v, _ := json.Marshal(info)
	if _, err := r.sess.Put(ctx, r.key(s), v, metadata.AnyVersion); err != nil {
		return fmt.Errorf("bookie: register %s: %w", s, err)
	}
	other := StateReadOnly
	if s == StateReadOnly {
		other = StateWritable
	}
	if err := r.b.cfg.Store.Delete(ctx, r.key(other), metadata.AnyVersion); err != nil {
		return fmt.Errorf("bookie: unregister %s: %w", other, err)
	}
	if s == StateReadOnly {
		r.b.m.readOnly.Set(1)
	} else {
		r.b.m.readOnly.Set(0)
	}
	if prev != s {
		r.b.log.Info("bookie registered", "state", s.String(), "key", r.key(s))
	}
	return nil
}

func (r *registrar) overThreshold(th float64) bool {
	u, err := r.b.cfg.DiskUsage(r.b.cfg.DataDir)
	if err != nil {
		r.b.log.Warn("disk usage check failed", "err", err)
		return false
	}
	return u >= th
}

func (r *registrar) run() {
	defer r.b.wg.Done()
	defer close(r.done)
	ctx := r.b.ctx
	tick := time.NewTicker(r.b.cfg.DiskCheckInterval)
	defer tick.Stop()
	retry := backoff.Retry{Policy: renewBackoff}
	stFailed, jrFailed := r.b.st.Failed(), r.b.jr.Failed()
	for {
		var expired <-chan struct{}
		if r.sess != nil {
			expired = r.sess.Done()
		}
		select {
		case <-ctx.Done():
			return
		case <-stFailed:
			stFailed = nil
			r.onDiskFault("storage", r.b.st.Err())
			r.checkState(ctx)
		case <-jrFailed:
			jrFailed = nil
			r.onDiskFault("journal", r.b.jr.Err())
			r.checkState(ctx)
		case <-tick.C:
			if err := checkDataDir(r.b.cfg.DataDir); err != nil {
				// A full disk makes the bookie read-only for good (checkState below publishes
				// it, and retries a failed publish at every tick); any other fault stops it.
				r.onDiskFault("data directory", err)
			}
			if r.sess == nil {
				r.renew(ctx, &retry)
				continue
			}
			r.checkState(ctx)
		case <-expired:
			r.b.log.Warn("metadata session expired; registering again")
			r.sess = nil
			r.renew(ctx, &retry)
		}
	}
}

// checkState moves the registration to the state the disk calls for: read-only over
// DiskThreshold (or for good after a full disk), writable again below DiskThreshold-0.05.
func (r *registrar) checkState(ctx context.Context) {
	if r.sess == nil || ctx.Err() != nil || r.b.Err() != nil {
		return // renew publishes the current state; a failed bookie is stopping
	}
	cur := r.b.State()
	want := cur
	switch {
	case r.readOnlyForGood:
		want = StateReadOnly
	case cur == StateWritable && r.overThreshold(r.b.cfg.DiskThreshold):
		want = StateReadOnly
	case cur == StateReadOnly && !r.overThreshold(r.b.cfg.DiskThreshold-0.05):
		want = StateWritable
	}
	if want != cur {
		if err := r.publish(ctx, want); err != nil {
			// Back to the registered state so the next tick tries again.
			r.b.state.Store(uint32(cur))
			r.b.log.Error("re-register failed", "state", want.String(), "err", err)
		}
	}
}

// renewBackoff is the delay schedule of renew's retries: 100 ms doubling to 5 s, from the
// start again after a success.
var renewBackoff = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

// renew creates a new session and re-publishes the current state, backing off on failure.
func (r *registrar) renew(ctx context.Context, retry *backoff.Retry) {
	for ctx.Err() == nil {
		sess, err := r.b.cfg.Store.NewSession(ctx, r.b.cfg.SessionTTL)
		if err == nil {
			r.sess = sess
			s := r.b.State()
			if r.readOnlyForGood {
				s = StateReadOnly
			} else if s != StateReadOnly {
				s = StateWritable
			}
			if err = r.publish(ctx, s); err == nil {
				retry.Reset()
				return
			}
			sess.Close()
			r.sess = nil
		}
		d := retry.Next()
		r.b.log.Warn("metadata session failed; retrying", "err", err, "backoff", d.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// close revokes the session (deleting the registration). Called after run has returned.
func (r *registrar) close() error {
	<-r.done
	if r.sess == nil {
		return nil
	}
	err := r.sess.Close()
	if err != nil && !errors.Is(err, metadata.ErrSessionExpired) {
		// Not a failed stop: the registration goes when its lease expires, as after a
		// crash (clients see the bookie as registered until then).
		r.b.log.Warn("could not revoke the registration's session; it expires on its own", "err", err)
	}
	return nil
}

// ListBookies returns the registered bookies, writable and read-only. With all, bookies known
// only from their cookies (not running) are included with state "down".
func ListBookies(ctx context.Context, store metadata.Store, all bool) ([]Info, error) {
	var out []Info
	seen := map[string]bool{}
	for _, p := range []string{metadata.PrefixAvailable, metadata.PrefixReadOnly} {
		kvs, _, err := store.List(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			var info Info
			if err := json.Unmarshal(kv.Value, &info); err != nil {
				return nil, fmt.Errorf("bookie registration %s: %w", kv.Key, err)
			}
			seen[info.ID] = true
			out = append(out, info)
		}
	}
	if all {
		kvs, _, err := store.List(ctx, metadata.PrefixCookies)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			var c Cookie
			if err := json.Unmarshal(kv.Value, &c); err != nil {
				return nil, fmt.Errorf("cookie %s: %w", kv.Key, err)
			}
			if !seen[c.BookieID] {
				out = append(out, Info{ID: c.BookieID, Address: c.BookieID, State: "down"})
			}
		}
	}
	return out, nil
}
