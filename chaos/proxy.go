package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Direction is one half of a proxied TCP connection.
type Direction int

const (
	// In is from the connecting peer to the node behind the proxy.
	In Direction = iota
	// Out is from the node back to the peer.
	Out
)

func (d Direction) String() string {
	if d == In {
		return "in"
	}
	return "out"
}

// Rule shapes the traffic of some peers through a proxy. The proxy never drops bytes of a
// stream (TCP would not): loss is modelled as a retransmission pause, a blackhole as a stall
// that holds the bytes until the rule goes away.
type Rule struct {
	Peers  []string         // peer IPs; empty means every peer
	Delay  [2]time.Duration // added to every chunk, per direction
	Loss   [2]float64       // probability a chunk waits a retransmission pause (200 ms–1 s)
	Stall  [2]bool          // hold the direction entirely
	peerIn map[string]bool  // Peers as a set
}

func (r *Rule) matches(peer string) bool {
	return len(r.Peers) == 0 || r.peerIn[peer]
}

// Proxy listens on a node's bridge address and forwards each connection to a backend on the
// node's loopback, so every byte between two nodes passes through the harness: faults add
// Rules (delay, loss, one-way stall per peer) and Reset cuts connections.
type Proxy struct {
	node    *Node
	listen  string
	backend string
	ln      net.Listener

	mu struct {
		sync.Mutex
		rules   map[int]*Rule
		nextID  int
		conns   map[*proxyConn]struct{}
		changed chan struct{} // closed and replaced whenever rules change
		rng     *rand.Rand
		closed  bool
	}
	wg sync.WaitGroup
}

type proxyConn struct {
	peer     string
	client   net.Conn
	upstream net.Conn
	once     sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.upstream.Close()
	})
}

// StartProxy listens on listen inside the node and forwards to backend, dialed inside the
// node too.
func StartProxy(nd *Node, listen, backend string, seed uint64) (*Proxy, error) {
	p := &Proxy{node: nd, listen: listen, backend: backend}
	p.mu.rules = map[int]*Rule{}
	p.mu.conns = map[*proxyConn]struct{}{}
	p.mu.changed = make(chan struct{})
	p.mu.rng = rand.New(rand.NewPCG(seed, 0x9e3779b9))
	err := nd.Do(func() error {
		var err error
		p.ln, err = net.Listen("tcp", listen)
		return err
	})
	if err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	peer, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := p.node.Dial(ctx, p.backend)
	cancel()
	if err != nil {
		c.Close() // the process behind is down: the peer sees the connection end
		return
	}
	pc := &proxyConn{peer: peer, client: c, upstream: up}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		pc.close()
		return
	}
	p.mu.conns[pc] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(pc, In, c, up) }()
	go func() { defer wg.Done(); p.pump(pc, Out, up, c) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.mu.conns, pc)
	p.mu.Unlock()
}

type chunk struct {
	b  []byte
	at time.Time
}

// pump copies one direction: a reader goroutine queues chunks with their arrival time, this
// goroutine writes each once the rules let it (in order).
func (p *Proxy) pump(pc *proxyConn, d Direction, src, dst net.Conn) {
	defer pc.close()
	q := make(chan chunk, 256)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b: b[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		for range q { // let the reader finish after dst failed
		}
	}()
	for ch := range q {
		for {
			wait, changed := p.hold(pc.peer, d, ch.at)
			if wait == 0 {
				break
			}
			if wait < 0 { // stalled: re-evaluate when the rules change
				<-changed
				continue
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
			}
			break
		}
		if _, err := dst.Write(ch.b); err != nil {
			pc.close()
			return
		}
	}
}

// hold says how long a chunk that arrived at `at` must still wait: 0 to send it now, a
// negative value while the direction is stalled (wait for the returned channel).
func (p *Proxy) hold(peer string, d Direction, at time.Time) (time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var delay time.Duration
	for _, r := range p.mu.rules {
		if !r.matches(peer) {
			continue
		}
		if r.Stall[d] {
			return -1, p.mu.changed
		}
		delay = max(delay, r.Delay[d])
		if r.Loss[d] > 0 && p.mu.rng.Float64() < r.Loss[d] {
			delay = max(delay, time.Duration(200+p.mu.rng.IntN(800))*time.Millisecond)
		}
	}
	left := time.Until(at.Add(delay))
	if left <= 0 {
		return 0, nil
	}
	return left, p.mu.changed
}

// AddRule installs a rule and returns its id for RemoveRule.
func (p *Proxy) AddRule(r Rule) int {
	r.peerIn = map[string]bool{}
	for _, x := range r.Peers {
		r.peerIn[x] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.nextID++
	p.mu.rules[p.mu.nextID] = &r
	p.changedLocked()
	return p.mu.nextID
}

// RemoveRule removes a rule; held bytes flow again.
func (p *Proxy) RemoveRule(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mu.rules, id)
	p.changedLocked()
}

// ClearRules removes every rule.
func (p *Proxy) ClearRules() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.mu.rules)
	p.changedLocked()
}

func (p *Proxy) changedLocked() {
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

// Reset closes every current connection (as a middlebox reset would).
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.mu.conns))
	for c := range p.mu.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Reset()
	p.ClearRules()
	p.wg.Wait()
}
