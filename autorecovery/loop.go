package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// loop is the real Env: one owner goroutine (run) executes every callback, in the order they
// were posted. Blocking work (metadata calls, dials) runs on short-lived helper goroutines
// that only post their callback; bookie answers are posted by the connection's callback.
type loop struct {
	store   metadata.Store
	pool    *client.Pool
	ttl     time.Duration
	timeout time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup          // run and the helpers
	rand   *rand.Rand              // owner only
	conns  map[string]*client.Conn // owner only: connections in use, from the pool

	in *inbox.Queue[func()] // callbacks for run
	mu struct {
		sync.Mutex // guards the fields below; a leaf lock
		sess       metadata.Session
	}
}

// errRequestTimeout is the error of a bookie request that got no answer in time.
var errRequestTimeout = errors.New("autorecovery: bookie request timed out")

func newLoop(store metadata.Store, pool *client.Pool, ttl, timeout time.Duration) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{store: store, pool: pool, ttl: ttl, timeout: timeout, ctx: ctx, cancel: cancel,
		rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), in: inbox.New[func()](),
		conns: map[string]*client.Conn{}}
	l.wg.Add(1)
	go l.run()
	return l
}

// post queues fn for the owner goroutine. It never blocks; after close it drops fn.
func (l *loop) post(fn func()) {
	if l.ctx.Err() != nil {
		return
	}
	l.in.Push(fn)
}

// do runs fn on the owner goroutine and waits for it, or for close (not from the owner
// itself).
func (l *loop) do(fn func()) {
	_ = inbox.Call0(context.Background(), l.in, l.ctx.Done(), context.Canceled, func(reply func(error)) {
		fn()
		reply(nil)
	})
}

func (l *loop) run() {
	defer l.wg.Done()
	defer l.in.Close()
	var batch []func()
	for {
		select {
		case <-l.in.Signal():
			batch = l.in.Drain(batch)
			for i, fn := range batch {
				if l.ctx.Err() != nil {
					return
				}
				fn()
				batch[i] = nil
			}
		case <-l.ctx.Done():
			return
		}
	}
}

// close stops the owner goroutine, waits for the helpers and revokes the session (deleting
// the ephemeral keys: locks, registration, election key). Idempotent.
func (l *loop) close() {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	s := l.mu.sess
	l.mu.sess = nil
	l.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// async runs f on a helper goroutine, bounded by the loop's life. Called on the owner
// goroutine only (so never after close's Wait).
func (l *loop) async(f func(ctx context.Context)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		if l.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
		defer cancel()
		f(ctx)
	}()
}

func (l *loop) Now() time.Time   { return time.Now() }
func (l *loop) Rand() *rand.Rand { return l.rand }

func (l *loop) After(d time.Duration, fn func()) {
	time.AfterFunc(d, func() { l.post(fn) }) // after close the post is dropped
}

func (l *loop) Get(key string, cb func(metadata.KV, error)) {
	l.async(func(ctx context.Context) {
		kv, err := l.store.Get(ctx, key)
		l.post(func() { cb(kv, err) })
	})
}

func (l *loop) Put(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	l.async(func(ctx context.Context) {
		v, err := l.store.Put(ctx, key, value, expected)
		l.post(func() { cb(v, err) })
	})
}

func (l *loop) PutEphemeral(key string, value []byte, expected metadata.Version, cb func(metadata.Version, error)) {
	l.async(func(ctx context.Context) {
		s, err := l.session(ctx)
		var v metadata.Version
		if err == nil {
			v, err = s.Put(ctx, key, value, expected)
		}
		l.post(func() { cb(v, err) })
	})
}

// session returns the loop's session, starting a new one if there is none or it expired.
func (l *loop) session(ctx context.Context) (metadata.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.mu.sess; s != nil {
		select {
		case <-s.Done():
		default:
			return s, nil
		}
	}
	s, err := l.store.NewSession(ctx, l.ttl)
	if err != nil {
		return nil, fmt.Errorf("autorecovery: session: %w", err)
	}
	l.mu.sess = s
	return s, nil
}

func (l *loop) Delete(key string, expected metadata.Version, cb func(error)) {
	l.async(func(ctx context.Context) {
		err := l.store.Delete(ctx, key, expected)
		l.post(func() { cb(err) })
	})
}

func (l *loop) List(prefix string, cb func([]metadata.KV, error)) {
	l.async(func(ctx context.Context) {
		kvs, _, err := l.store.List(ctx, prefix)
		l.post(func() { cb(kvs, err) })
	})
}

func (l *loop) Bookie(addr string, req *bk.Request, cb func(bk.Response, error)) {
	var once sync.Once
	deliver := func(resp bk.Response, err error) {
		once.Do(func() { l.post(func() { cb(resp, err) }) })
	}
	timer := time.AfterFunc(l.timeout, func() {
		deliver(bk.Response{}, fmt.Errorf("%w: %s", errRequestTimeout, addr))
	})
	send := func(conn *client.Conn) {
		conn.Send(req, func(resp bk.Response, err error) {
			timer.Stop()
			deliver(resp, err)
		})
	}
	// A live connection is used at once (Send never blocks); otherwise a helper gets one from
	// the pool (dialling) and the owner sends on it.
	if conn := l.conns[addr]; conn != nil && conn.Err() == nil {
		send(conn)
		return
	}
	delete(l.conns, addr)
	l.async(func(ctx context.Context) {
		conn, err := l.pool.Get(ctx, addr)
		if err != nil {
			timer.Stop()
			deliver(bk.Response{}, err)
			return
		}
		l.post(func() {
			l.conns[addr] = conn
			send(conn)
		})
	})
}
