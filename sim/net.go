package sim

import (
	"errors"
	"time"
)

// Errors a caller of Network.Call can receive.
var (
	// ErrTimeout: no answer within NetConfig.Timeout (request or response lost, or the node
	// crashed before answering).
	ErrTimeout = errors.New("sim: timeout")
	// ErrUnreachable: the node was down when the request arrived (connection refused).
	ErrUnreachable = errors.New("sim: unreachable")
)

// NetConfig describes the simulated network.
type NetConfig struct {
	// Each message takes a uniform delay in [MinDelay, MaxDelay]; independent delays reorder
	// messages.
	MinDelay, MaxDelay time.Duration
	// With probability SlowRate a message instead takes a uniform delay in
	// [MaxDelay, SlowDelay], which may exceed Timeout: the caller gives up, yet the request
	// is still processed later (a "ghost").
	SlowRate  float64
	SlowDelay time.Duration
	// DropRate is the probability that a request, or a response, is lost.
	DropRate float64
	// Timeout is when a caller gives up on an answer.
	Timeout time.Duration
}

// Node is something reachable on the network.
type Node interface {
	// Up reports whether the node accepts requests.
	Up() bool
	// Handle processes a request and calls reply at most once, possibly later. Replies made
	// after the node crashed are discarded by the node itself.
	Handle(req any, reply func(resp any))
}

// Network delivers request/response calls between named nodes with seeded delays, reordering
// and loss. Every Call's callback runs exactly once: with the response, ErrUnreachable or
// ErrTimeout.
type Network struct {
	s     *Sim
	Cfg   NetConfig
	nodes map[string]Node
}

// NewNetwork returns a network on s.
func NewNetwork(s *Sim, cfg NetConfig) *Network {
	return &Network{s: s, Cfg: cfg, nodes: map[string]Node{}}
}

// Add registers a node under name.
func (n *Network) Add(name string, node Node) { n.nodes[name] = node }

// Call sends req to the node named to and calls cb once with its response or an error.
func (n *Network) Call(to string, req any, cb func(resp any, err error)) {
	done := false
	finish := func(resp any, err error) {
		if done {
			return
		}
		done = true
		cb(resp, err)
	}
	n.s.After(n.Cfg.Timeout, "", func() { finish(nil, ErrTimeout) })
	if n.s.Chance(n.Cfg.DropRate) {
		return // request lost
	}
	n.s.After(n.delay(), "", func() {
		node := n.nodes[to]
		if node == nil || !node.Up() {
			n.s.After(n.s.Between(n.Cfg.MinDelay, n.Cfg.MaxDelay), "", func() { finish(nil, ErrUnreachable) })
			return
		}
		node.Handle(req, func(resp any) {
			if n.s.Chance(n.Cfg.DropRate) {
				return // response lost
			}
			n.s.After(n.delay(), "", func() { finish(resp, nil) })
		})
	})
}

// Send delivers a one-way message (no answer expected).
func (n *Network) Send(to string, req any) {
	if n.s.Chance(n.Cfg.DropRate) {
		return
	}
	n.s.After(n.delay(), "", func() {
		if node := n.nodes[to]; node != nil && node.Up() {
			node.Handle(req, func(any) {})
		}
	})
}

func (n *Network) delay() time.Duration {
	if n.s.Chance(n.Cfg.SlowRate) {
		return n.s.Between(n.Cfg.MaxDelay, n.Cfg.SlowDelay)
	}
	return n.s.Between(n.Cfg.MinDelay, n.Cfg.MaxDelay)
}
