package chaos

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestProxy checks the proxy's faults between two namespaces: a delay applies per direction,
// a stall holds bytes until removed (and loses none), a reset ends the connection, and a
// blackhole route cuts the path.
func TestProxy(t *testing.T) {
	needNetns(t)
	n, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, err := n.AddNode("a", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddNode("b", 3)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := a.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:9000"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo server on a's loopback
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	px, err := StartProxy(a, a.IP+":9001", "127.0.0.1:9000", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.Dial(ctx, a.IP+":9001")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(msg string, within time.Duration) (time.Duration, error) {
		t0 := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			return 0, err
		}
		c.SetReadDeadline(time.Now().Add(within))
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		if err == nil && string(buf) != msg {
			t.Fatalf("echo %q, want %q", buf, msg)
		}
		return time.Since(t0), err
	}
	if _, err := echo("plain", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	id := px.AddRule(Rule{Delay: [2]time.Duration{100 * time.Millisecond, 50 * time.Millisecond}})
	if d, err := echo("slow", 5*time.Second); err != nil || d < 150*time.Millisecond {
		t.Fatalf("delayed echo took %v (%v), want at least 150 ms", d, err)
	}
	px.RemoveRule(id)
	id = px.AddRule(Rule{Peers: []string{b.IP}, Stall: [2]bool{Out: true}})
	if _, err := echo("held", 300*time.Millisecond); err == nil {
		t.Fatal("echo arrived through a stalled direction")
	}
	px.RemoveRule(id)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after the stall: %q, %v; want the held bytes", buf, err)
	}
	if err := n.Block(b, a); err != nil {
		t.Fatal(err)
	}
	if _, err := echo("cut", 300*time.Millisecond); err == nil {
		t.Fatal("echo arrived across a blackhole route")
	}
	if err := n.Unblock(b, a); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf[:3]); err != nil || string(buf[:3]) != "cut" {
		t.Fatalf("after the route came back: %q, %v", buf[:3], err)
	}
	px.Reset()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("connection still open after a reset")
	}
}
