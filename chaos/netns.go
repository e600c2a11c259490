package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// nsPrefix starts the name of every network namespace the harness creates; the pid of the
// creating process follows it, so a leftover of a dead run can be told from a live one.
const nsPrefix = "mgchaos"

// subnet is the private /24 of the bridge. It exists only inside the harness's own namespaces:
// the host namespace has no interface or route to it.
const subnet = "10.213.0."

// rootNetNS is the host's network namespace, opened before any thread changes its own.
var rootNetNS = func() int {
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}()

// Net is a bridge in a hub namespace and one namespace per node, joined to it by a veth pair.
// Block and Unblock edit blackhole routes inside a node's namespace: packets from that node to
// the other are dropped, which cuts one direction at the IP level (no iptables needed).
type Net struct {
	prefix string // nsPrefix + pid + "-"
	hub    string

	mu struct {
		sync.Mutex
		nodes   []*Node
		blocked map[[2]string]int // (from, to) node names → overlapping faults holding it
	}
}

// Node is one host: a network namespace with one address on the bridge.
type Node struct {
	Name string // short name, e.g. "b0"
	NS   string // namespace name under /run/netns
	IP   string
}

// NewNet creates the hub namespace and its bridge.
func NewNet() (*Net, error) {
	if rootNetNS < 0 {
		return nil, fmt.Errorf("chaos: cannot open /proc/self/ns/net")
	}
	n := &Net{prefix: fmt.Sprintf("%s%d-", nsPrefix, os.Getpid())}
	n.mu.blocked = map[[2]string]int{}
	n.hub = n.prefix + "hub"
	if err := ip("netns", "add", n.hub); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"-n", n.hub, "link", "set", "lo", "up"},
		{"-n", n.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", n.hub, "link", "set", "br0", "up"},
	} {
		if err := ip(args...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// AddNode creates a namespace for a node with address subnet+host.
func (n *Net) AddNode(name string, host int) (*Node, error) {
	nd := &Node{Name: name, NS: n.prefix + name, IP: subnet + strconv.Itoa(host)}
	if err := ip("netns", "add", nd.NS); err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.mu.nodes = append(n.mu.nodes, nd)
	n.mu.Unlock()
	veth := "v" + name
	for _, args := range [][]string{
		{"-n", n.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", nd.NS},
		{"-n", n.hub, "link", "set", veth, "master", "br0", "up"},
		{"-n", nd.NS, "addr", "add", nd.IP + "/24", "dev", "eth0"},
		{"-n", nd.NS, "link", "set", "eth0", "up"},
		{"-n", nd.NS, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, err
		}
	}
	return nd, nil
}

// Block drops packets from one node to another (a blackhole route in from's namespace).
// Blocks nest: each Block needs its Unblock.
func (n *Net) Block(from, to *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]string{from.Name, to.Name}
	n.mu.blocked[k]++
	if n.mu.blocked[k] > 1 {
		return nil
	}
	return ip("-n", from.NS, "route", "add", "blackhole", to.IP+"/32")
}

// Unblock undoes one Block.
func (n *Net) Unblock(from, to *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]string{from.Name, to.Name}
	if n.mu.blocked[k] == 0 {
		return nil
	}
	n.mu.blocked[k]--
	if n.mu.blocked[k] > 0 {
		return nil
	}
	delete(n.mu.blocked, k)
	return ip("-n", from.NS, "route", "del", "blackhole", to.IP+"/32")
}

// UnblockAll removes every blackhole route.
func (n *Net) UnblockAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k := range n.mu.blocked {
		var from, to *Node
		for _, nd := range n.mu.nodes {
			if nd.Name == k[0] {
				from = nd
			}
			if nd.Name == k[1] {
				to = nd
			}
		}
		if from != nil && to != nil {
			ip("-n", from.NS, "route", "del", "blackhole", to.IP+"/32")
		}
		delete(n.mu.blocked, k)
	}
}

// Close kills every process left in the namespaces (by pid, as `ip netns pids` lists them)
// and deletes the namespaces; the veth pairs and the bridge go with them.
func (n *Net) Close() {
	n.mu.Lock()
	nodes := slices.Clone(n.mu.nodes)
	n.mu.Unlock()
	names := []string{n.hub}
	for _, nd := range nodes {
		names = append(names, nd.NS)
	}
	removeNamespaces(names)
}

func removeNamespaces(names []string) {
	for _, name := range names {
		killNamespacePids(name)
	}
	for _, name := range names {
		ip("netns", "del", name)
	}
}

func killNamespacePids(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// CleanStale removes the namespaces and bookie disks of harness runs whose process is gone (a
// run killed with SIGKILL cannot clean up itself). It returns what it removed.
func CleanStale() []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var stale []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		rest := strings.TrimPrefix(f[0], nsPrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil {
			continue
		}
		if pid != os.Getpid() && unix.Kill(pid, 0) == unix.ESRCH {
			stale = append(stale, f[0])
		}
	}
	removeNamespaces(stale)
	return append(stale, unmountStale()...)
}

// unmountStale unmounts the bookie disks (tmpfs under a magnetar-chaos-PID-… run directory)
// of runs whose process is gone.
func unmountStale() []string {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "tmpfs" {
			continue
		}
		_, rest, ok := strings.Cut(f[1], "/magnetar-chaos-")
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidStr); err == nil && pid != os.Getpid() && unix.Kill(pid, 0) == unix.ESRCH {
			if unix.Unmount(f[1], unix.MNT_DETACH) == nil {
				out = append(out, f[1])
			}
		}
	}
	return out
}

// Do runs f on an OS thread that has joined the node's network namespace: sockets f creates
// (listeners, dials) belong to that namespace for their whole life, whichever thread uses
// them later. The thread returns to the host namespace afterwards; if it cannot, it stays
// locked and exits with the goroutine.
func (nd *Node) Do(f func() error) error {
	runtime.LockOSThread()
	fd, err := unix.Open("/run/netns/"+nd.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", nd.NS, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", nd.NS, err)
	}
	ferr := f()
	if unix.Setns(rootNetNS, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return ferr
}

// Dial connects from inside the node's namespace.
func (nd *Node) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := nd.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// WaitTCP waits until addr accepts connections as seen from inside the node.
func (nd *Node) WaitTCP(ctx context.Context, addr string) error {
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := nd.Dial(dctx, addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not accepting connections: %w", nd.Name, addr, err)
		case <-time.After(50 * time.Millisecond): // retry interval of a connection attempt
		}
	}
}

// ip runs the ip(8) command.
func ip(args ...string) error {
	cmd := exec.Command("ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// NetnsAvailable reports whether this process can create network namespaces (root, ip(8)).
func NetnsAvailable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root")
	}
	name := fmt.Sprintf("%s%d-probe", nsPrefix, os.Getpid())
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	return ip("netns", "del", name)
}
