package client

import (
	"context"
	"errors"
	"sync"
)

// ErrPoolClosed is returned by Pool.Get after Pool.Close.
var ErrPoolClosed = errors.New("client: pool closed")

// Pool keeps one live Conn per bookie address. It is safe for concurrent use.
type Pool struct {
	opts   Options
	ctx    context.Context // cancelled by Close; bounds every dial
	cancel context.CancelFunc
	wg     sync.WaitGroup // dial and reap goroutines; Add only under mu while !mu.closed

	mu struct {
		sync.Mutex // guards all fields below; leaf lock
		conns      map[string]*Conn
		dialing    map[string]*dialCall
		closed     bool
	}
}

// dialCall is one in-flight dial that concurrent Gets of the same address share.
type dialCall struct {
	done chan struct{} // closed when conn/err are set
	conn *Conn
	err  error
}

// NewPool returns an empty pool whose connections use opts.
func NewPool(opts Options) *Pool {
	p := &Pool{opts: opts.withDefaults()}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.conns = make(map[string]*Conn)
	p.mu.dialing = make(map[string]*dialCall)
	return p
}

// Get returns the live connection to addr, dialling one if there is none or the previous one
// failed (concurrent Gets share one dial). The dial runs on its own goroutine bounded by
// Options.DialTimeout and Close, so a caller whose ctx ends stops waiting without aborting
// the dial for the others. The returned Conn belongs to the pool: do not Close it (a closed
// or failed Conn is replaced on the next Get).
func (p *Pool) Get(ctx context.Context, addr string) (*Conn, error) {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil, ErrPoolClosed
	}
	if c := p.mu.conns[addr]; c != nil {
		select {
		case <-c.Done():
			// Reap its goroutines off this goroutine: Get may run inside one of c's callbacks,
			// and Close waits for them.
			delete(p.mu.conns, addr)
			p.wg.Add(1)
			go func() { defer p.wg.Done(); _ = c.Close() }()
		default:
			p.mu.Unlock()
			return c, nil
		}
	}
	call := p.mu.dialing[addr]
	if call == nil {
		call = &dialCall{done: make(chan struct{})}
		p.mu.dialing[addr] = call
		p.wg.Add(1)
		go p.dial(addr, call)
	}
	p.mu.Unlock()
	select {
	case <-call.done:
		return call.conn, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial runs on a goroutine per dialCall and publishes the result.
func (p *Pool) dial(addr string, call *dialCall) {
	defer p.wg.Done()
	c, err := Dial(p.ctx, addr, p.opts)
	p.mu.Lock()
	delete(p.mu.dialing, addr)
	closed := p.mu.closed
	if err == nil && !closed {
		p.mu.conns[addr] = c
	}
	p.mu.Unlock()
	if err == nil && closed {
		_ = c.Close()
		c, err = nil, ErrPoolClosed
	}
	call.conn, call.err = c, err
	close(call.done)
}

// Close closes every connection (failing their pending requests), aborts in-flight dials
// and waits for all of it. Get fails with ErrPoolClosed afterwards. Close is idempotent and
// must not be called from a connection callback (it waits for the callbacks to return).
func (p *Pool) Close() error {
	p.mu.Lock()
	p.mu.closed = true
	conns := p.mu.conns
	p.mu.conns = map[string]*Conn{}
	p.mu.Unlock()
	p.cancel()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
	return nil
}
