package interop

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to a backend. It can swallow what the backend sends
// (blackhole) and cut every connection, to make a client lose receipts and reconnect.
type proxy struct {
	t         *testing.T
	ln        net.Listener
	backend   atomic.Pointer[string]
	blackhole atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	go p.accept()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setBackend(addr string) { p.backend.Store(&addr) }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", *p.backend.Load())
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		go func() { io.Copy(b, c); b.Close() }() //nolint:errcheck
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := b.Read(buf)
				if n > 0 && !p.blackhole.Load() {
					if _, err := c.Write(buf[:n]); err != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
		}()
	}
}

// cut closes every proxied connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
