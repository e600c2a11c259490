package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a run. Zero values take the defaults noted.
type Options struct {
	Magnetar    string        // the magnetar binary (required)
	Etcd        string        // the etcd binary (default "etcd": Debian's etcd-server)
	Dir         string        // where run directories go (default os.TempDir())
	Duration    time.Duration // how long producers produce (default 25 s)
	SessionTTL  time.Duration // brokers' and bookies' metadata session TTL (default 5 s)
	MinFaults   int           // default 2
	MaxFaults   int           // default 5
	Producers   int           // producers with dedup (default 3; the first batches; negative: none)
	Rate        int           // messages per second per producer (default 40)
	Partitions  int           // partitions of the topic (default 4; 2 with Clusters)
	Txn         bool          // brokers with transactions and a transactional producer (not with Clusters)
	Keep        bool          // keep the run directory even when the run passed
	Faults      []Fault       // a fixed schedule instead of one drawn from the seed
	Abandon     bool          // the transactional producer leaves its second transaction open and waits to be killed
	TxnAbortAll bool          // the transactional producer aborts every transaction
	// ReaderIdleEnd: the final reader takes a partition as read when HasNext stays true but no
	// message comes for this long (default 15 s; negative: wait, and call the run stuck).
	ReaderIdleEnd time.Duration
	Log           io.Writer // progress (default io.Discard)

	// Clusters > 1 runs that many geo-replicated Pulsar clusters (at most 3), each with its
	// own etcd, bookies and brokers, and the faults between them (geo.go); Producers then
	// counts per cluster (default 2).
	Clusters int
	// AllBrokersInRecords: the cluster records name every broker of their cluster
	// (pulsar://b0:6650,b1:6650, as Pulsar's clients take them), not only the first.
	AllBrokersInRecords bool
}

func (o *Options) defaults() {
	if o.Clusters > 1 {
		o.Txn = false // replicated aborted transactions are not filtered yet (broker/replhost)
		if o.Producers == 0 {
			o.Producers = 2
		}
		if o.Partitions == 0 {
			o.Partitions = 2
		}
	}
	if o.Etcd == "" {
		o.Etcd = "etcd"
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Duration == 0 {
		o.Duration = 25 * time.Second
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = 5 * time.Second
	}
	if o.MinFaults == 0 {
		o.MinFaults = 2
	}
	if o.MaxFaults == 0 {
		o.MaxFaults = 5
	}
	if o.Producers == 0 {
		o.Producers = 3
	}
	if o.Rate == 0 {
		o.Rate = 40
	}
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.ReaderIdleEnd == 0 {
		o.ReaderIdleEnd = 15 * time.Second
	}
}

// Result is one run's outcome.
type Result struct {
	Seed    uint64
	Faults  []Fault
	Verdict Verdict
	Stuck   []string // clients that did not finish in time (a liveness failure, not a loss)
	Notes   []string // processes that exited by themselves, slow stops, fault errors
	Elapsed time.Duration
	// CatchUp is, with Clusters, how long after the producers finished every cluster's
	// subscription had every acknowledged message of every cluster (-1: never, in time).
	CatchUp time.Duration
	Dir     string // the run directory, kept if the run failed
	Err     error  // the harness could not run (setup failed): no verdict
}

// Status is PASS, FAIL (a safety check failed), STUCK (safe, but a client did not finish) or
// ERROR (no verdict).
func (r Result) Status() string {
	switch {
	case r.Err != nil:
		return "ERROR"
	case r.Verdict.Broken():
		return "FAIL"
	case len(r.Stuck) > 0:
		return "STUCK"
	}
	return "PASS"
}

// member is one server process with its node, proxy and (bookies) disk.
type member struct {
	proc  *Proc
	proxy *Proxy
	disk  *Disk
}

// cluster is everything one run runs: one site (a Pulsar cluster), or with
// Options.Clusters one site per Pulsar cluster on one network. Node names are unique across
// the run; members and clients are keyed by them.
type cluster struct {
	o       Options
	seed    uint64
	dir     string
	net     *Net
	nodes   map[string]*Node
	members map[string]*member // e0.., k0.., b0.. (a-e0.. with sites)
	clients map[string]*Proc   // p0.., t0, c0
	topo    Topology           // every site's nodes
	sites   []*site
	topic   string
	catchUp time.Duration
	proxies uint64 // proxies started
	// dumpBrokers: the teardown stops the brokers with SIGQUIT (their goroutines' stacks in
	// their logs), the evidence of a run whose subscriptions did not catch up.
	dumpBrokers bool
	log         func(format string, a ...any)

	mu struct {
		sync.Mutex
		notes []string
	}
}

func (c *cluster) note(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	c.mu.Lock()
	c.mu.notes = append(c.mu.notes, s)
	c.mu.Unlock()
	c.log("note: %s", s)
}

const (
	etcdPort, etcdBackend     = 2379, 12379
	etcdPeerPort              = 2380
	bookiePort, bookieBackend = 3181, 3182
	brokerPort, brokerBackend = 6650, 6651
	brokerHTTP                = 8080
	diskSize                  = 192 << 20
)

// Run runs one chaos run: a fresh cluster, the workload, the faults drawn from seed, the
// heal, the checks, and the teardown of everything it created (also when ctx ends early).
func Run(ctx context.Context, seed uint64, o Options) (res Result) {
	o.defaults()
	t0 := time.Now()
	res.Seed = seed
	c := &cluster{o: o, seed: seed, nodes: map[string]*Node{}, members: map[string]*member{}, clients: map[string]*Proc{},
		topic: "persistent://public/default/chaos"}
	c.log = func(format string, a ...any) {
		fmt.Fprintf(o.Log, "[seed %d %6.1fs] %s\n", seed, time.Since(t0).Seconds(), fmt.Sprintf(format, a...))
	}
	if o.Clusters > 1 {
		c.topic = geoTopic
		for i, t := range geoTopologies(o.Clusters, o.Producers) {
			c.sites = append(c.sites, &site{name: t.Cluster, prefix: t.Cluster + "-", base: 60 * i, topo: t})
			c.topo = mergeTopology(c.topo, t)
		}
	} else {
		c.topo = topology(o.Producers, o.Txn)
		c.sites = []*site{{topo: c.topo}}
	}
	res.Faults = o.Faults
	if res.Faults == nil {
		res.Faults = PlannedFaults(seed, o)
	}
	for _, f := range res.Faults {
		c.log("fault %s", f)
	}
	var err error
	c.dir, err = os.MkdirTemp(o.Dir, fmt.Sprintf("magnetar-chaos-%d-%d-", os.Getpid(), seed))
	if err != nil {
		res.Err = err
		return res
	}
	res.Dir = c.dir
	defer func() {
		c.teardown()
		res.Notes = append(res.Notes, c.mu.notes...)
		res.Elapsed = time.Since(t0)
		if res.Status() == "PASS" && !o.Keep {
			os.RemoveAll(c.dir)
			res.Dir = ""
		}
	}()
	if err := c.up(ctx); err != nil {
		res.Err = err
		return res
	}
	if o.Clusters > 1 {
		res.Verdict, res.Stuck, res.Err = c.geoWorkload(ctx, res.Faults)
		res.CatchUp = c.catchUp
		return res
	}
	res.Verdict, res.Stuck, res.Err = c.workload(ctx, res.Faults)
	return res
}

// site is one Pulsar cluster of a run: its own etcd, bookies, brokers and clients.
type site struct {
	name   string // the brokers' --cluster ("": their default, the single-cluster mode)
	prefix string // of its node names: "" or "a-"
	base   int    // its nodes' host numbers start above it
	topo   Topology
}

// siteOf is the site a node or client name belongs to.
func (c *cluster) siteOf(name string) *site {
	for _, s := range c.sites {
		if s.prefix != "" && strings.HasPrefix(name, s.prefix) {
			return s
		}
	}
	return c.sites[0]
}

func topology(producers int, txn bool) Topology {
	t := Topology{Etcd: []string{"e0", "e1", "e2"}, Bookies: []string{"k0", "k1", "k2", "k3"},
		Brokers: []string{"b0", "b1", "b2"}, Consumers: []string{"c0"}}
	for i := range max(producers, 0) {
		t.Producers = append(t.Producers, fmt.Sprintf("p%d", i))
	}
	if txn {
		t.Producers = append(t.Producers, "t0")
	}
	return t
}

// DefaultTopology is the nodes of a run with the default options (and a transactional
// producer if txn), for printing schedules.
func DefaultTopology(txn bool) Topology { return topology(3, txn) }

func (c *cluster) metaURL(s *site) string {
	var eps []string
	for _, e := range s.topo.Etcd {
		eps = append(eps, fmt.Sprintf("%s:%d", c.nodes[e].IP, etcdPort))
	}
	return "etcd://" + strings.Join(eps, ",")
}

func (c *cluster) serviceURL(s *site) string {
	var eps []string
	for _, b := range s.topo.Brokers {
		eps = append(eps, fmt.Sprintf("%s:%d", c.nodes[b].IP, brokerPort))
	}
	return "pulsar://" + strings.Join(eps, ",")
}

func (c *cluster) adminURLs(s *site) []string {
	var out []string
	for _, b := range s.topo.Brokers {
		out = append(out, fmt.Sprintf("http://%s:%d", c.nodes[b].IP, brokerHTTP))
	}
	return out
}

// up creates the namespaces, disks and proxies, and starts every site's etcd, bookies and
// brokers.
func (c *cluster) up(ctx context.Context) error {
	var err error
	if c.net, err = NewNet(); err != nil {
		return err
	}
	hosts := map[string]int{}
	if len(c.sites) == 1 && c.sites[0].prefix == "" {
		hosts = map[string]int{"e0": 11, "e1": 12, "e2": 13, "k0": 21, "k1": 22, "k2": 23, "k3": 24,
			"b0": 31, "b1": 32, "b2": 33, "t0": 49, "c0": 51, "r0": 52}
		for i, p := range c.topo.Producers {
			if p != "t0" {
				hosts[p] = 41 + i
			}
		}
	} else {
		for _, s := range c.sites {
			t := s.topo
			for _, g := range []struct {
				names []string
				first int
			}{{t.Etcd, 11}, {t.Bookies, 21}, {t.Brokers, 31}, {t.Producers, 41}, {t.Consumers, 51}, {[]string{s.prefix + "s0"}, 58}, {[]string{s.prefix + "r0"}, 59}} {
				for i, n := range g.names {
					hosts[n] = s.base + g.first + i
				}
			}
		}
	}
	for name, h := range hosts {
		nd, err := c.net.AddNode(name, h)
		if err != nil {
			return err
		}
		c.nodes[name] = nd
	}
	for _, s := range c.sites {
		if err := c.startSite(ctx, s); err != nil {
			return err
		}
	}
	c.log("cluster up")
	return nil
}

// addMember starts a server process behind its proxy (front: the proxy's port on the
// node's bridge address; back: the process's port on the node's loopback).
func (c *cluster) addMember(name string, front, back int, argv []string) error {
	nd := c.nodes[name]
	c.proxies++ // each proxy's loss draws: seed+1, seed+2, ... in start order
	px, err := StartProxy(nd, fmt.Sprintf("%s:%d", nd.IP, front), fmt.Sprintf("127.0.0.1:%d", back), c.seed+c.proxies)
	if err != nil {
		return err
	}
	m := c.members[name]
	if m == nil {
		m = &member{}
		c.members[name] = m
	}
	m.proxy = px
	m.proc = &Proc{Name: name, Node: nd, Argv: argv, Log: filepath.Join(c.dir, name+".log")}
	return m.proc.Start()
}

// startSite starts a site's etcd members, bookies and brokers, each once the ones before
// accept connections.
func (c *cluster) startSite(ctx context.Context, s *site) error {
	var cluster []string
	for _, e := range s.topo.Etcd {
		cluster = append(cluster, fmt.Sprintf("%s=http://%s:%d", e, c.nodes[e].IP, etcdPeerPort))
	}
	for _, e := range s.topo.Etcd {
		ip := c.nodes[e].IP
		argv := []string{c.o.Etcd, "--name", e, "--data-dir", filepath.Join(c.dir, e),
			"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdBackend),
			"--advertise-client-urls", fmt.Sprintf("http://%s:%d", ip, etcdPort),
			"--listen-peer-urls", fmt.Sprintf("http://%s:%d", ip, etcdPeerPort),
			"--initial-advertise-peer-urls", fmt.Sprintf("http://%s:%d", ip, etcdPeerPort),
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "chaos" + s.name}
		if err := c.addMember(e, etcdPort, etcdBackend, argv); err != nil {
			return err
		}
	}
	if err := c.waitBackends(ctx, s.topo.Etcd, etcdBackend); err != nil {
		return err
	}
	if err := c.waitEtcdHealthy(ctx, s.topo.Etcd); err != nil {
		return err
	}
	ttl := c.o.SessionTTL.String()
	for _, k := range s.topo.Bookies {
		d, err := MountDisk(filepath.Join(c.dir, k+"-disk"), diskSize)
		if err != nil {
			return err
		}
		c.members[k] = &member{disk: d}
		argv := []string{c.o.Magnetar, "bookie", "--metadata-url", c.metaURL(s), "--data-dir", filepath.Join(d.Dir, "data"),
			"--listen", fmt.Sprintf("127.0.0.1:%d", bookieBackend), "--advertise", fmt.Sprintf("%s:%d", c.nodes[k].IP, bookiePort),
			"--http", "127.0.0.1:8000", "--session-ttl", ttl, "--disk-check-interval", "1s",
			"--journal-file-size", fmt.Sprint(8 << 20)}
		if err := c.addMember(k, bookiePort, bookieBackend, argv); err != nil {
			return err
		}
	}
	if err := c.waitBackends(ctx, s.topo.Bookies, bookieBackend); err != nil {
		return err
	}
	for _, b := range s.topo.Brokers {
		ip := c.nodes[b].IP
		argv := []string{c.o.Magnetar, "broker", "--metadata-url", c.metaURL(s),
			"--listen", fmt.Sprintf("127.0.0.1:%d", brokerBackend), "--advertise", fmt.Sprintf("%s:%d", ip, brokerPort),
			"--http", fmt.Sprintf("%s:%d", ip, brokerHTTP), "--session-ttl", ttl}
		if s.name != "" {
			argv = append(argv, "--cluster", s.name)
		}
		if c.o.Txn {
			argv = append(argv, "--transaction-coordinator-enabled", "--transaction-coordinators", "4")
		}
		if err := c.addMember(b, brokerPort, brokerBackend, argv); err != nil {
			return err
		}
	}
	return c.waitBackends(ctx, s.topo.Brokers, brokerBackend)
}

// waitEtcdHealthy waits until every member answers /health with a leader elected (a loaded
// machine can take a while), so that the roles' first connection does not time out.
func (c *cluster) waitEtcdHealthy(ctx context.Context, members []string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, e := range members {
		nd := c.nodes[e]
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return nd.Dial(ctx, addr) }}}
		for {
			resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/health", etcdBackend))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"true"`) {
					break
				}
				err = fmt.Errorf("%s: %s", resp.Status, b)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("etcd %s not healthy: %v (log: %s)", e, err, c.members[e].proc.Log)
			case <-time.After(200 * time.Millisecond): // retry interval
			}
		}
		hc.CloseIdleConnections()
	}
	return nil
}

func (c *cluster) waitBackends(ctx context.Context, names []string, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, n := range names {
		if err := c.nodes[n].WaitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			return fmt.Errorf("%w (log: %s)", err, c.members[n].proc.Log)
		}
	}
	return nil
}

func (c *cluster) client(name string, s ClientSpec) (*Proc, error) {
	// The harness's own executable through /proc: the same program even if the file was
	// replaced since (a rebuilt binary must not be mixed with a running harness).
	self := fmt.Sprintf("/proc/%d/exe", os.Getpid())
	st := c.siteOf(name)
	s.ServiceURL, s.AdminURLs, s.Topic, s.Partitions = c.serviceURL(st), c.adminURLs(st), c.topic, c.o.Partitions
	if s.Out == "" {
		s.Out = filepath.Join(c.dir, name+".rec")
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	nd := c.nodes[name]
	if nd == nil {
		nd = c.nodes[st.prefix+"r0"]
	}
	return &Proc{Name: name, Node: nd, Argv: []string{self}, Env: []string{clientEnv + "=" + string(b)},
		Log: filepath.Join(c.dir, name+".log")}, nil
}

// runClient runs a client to its end within d.
func (c *cluster) runClientOnce(ctx context.Context, name string, s ClientSpec, d time.Duration) (*Proc, error) {
	p, err := c.client(name, s)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	select {
	case <-p.Done():
	case <-time.After(d):
		p.Kill()
		return p, fmt.Errorf("%s did not finish within %v (log: %s)", name, d, p.Log)
	case <-ctx.Done():
		p.Kill()
		return p, ctx.Err()
	}
	if ex := p.Exits(); len(ex) > 0 && ex[len(ex)-1] != "exit 0" {
		return p, fmt.Errorf("%s: %s (log: %s)", name, ex[len(ex)-1], p.Log)
	}
	return p, nil
}

// workload creates the topic, runs consumer and producers through the faults, heals, waits
// for the clients and checks.
func (c *cluster) workload(ctx context.Context, faults []Fault) (Verdict, []string, error) {
	if _, err := c.runClientOnce(ctx, "setup", ClientSpec{Role: roleSetup}, 120*time.Second); err != nil {
		return Verdict{}, nil, err
	}
	goFile := filepath.Join(c.dir, "go")
	var producerFiles, txnFiles []string
	for i, p := range c.topo.Producers {
		s := ClientSpec{Role: roleProducer, Name: p, Rate: c.o.Rate, GoFile: goFile, Batching: i == 0, Rewind: 20, Seed: c.seed}
		if p == "t0" {
			s.Role, s.TxnSize, s.Rate, s.Batching, s.Abandon = roleTxn, 5, 4, false, c.o.Abandon
			s.AbortAll = c.o.TxnAbortAll
		}
		proc, err := c.client(p, s)
		if err != nil {
			return Verdict{}, nil, err
		}
		c.clients[p] = proc
		if p == "t0" {
			txnFiles = append(txnFiles, filepath.Join(c.dir, p+".rec"))
		} else {
			producerFiles = append(producerFiles, filepath.Join(c.dir, p+".rec"))
		}
	}
	cons, err := c.client("c0", ClientSpec{Role: roleConsumer})
	if err != nil {
		return Verdict{}, nil, err
	}
	c.clients["c0"] = cons
	for _, p := range c.clients {
		if err := p.Start(); err != nil {
			return Verdict{}, nil, err
		}
	}
	// The produce window and the fault clock start when every producer is ready.
	ready := time.Now().Add(2 * time.Minute)
	for _, f := range slices.Concat(producerFiles, txnFiles) {
		for lastReady(f) == 0 && time.Now().Before(ready) {
			select {
			case <-ctx.Done():
				return Verdict{}, nil, ctx.Err()
			case <-time.After(100 * time.Millisecond): // poll interval of the producers' records
			}
		}
	}
	start := time.Now()
	if err := writeFileAtomic(goFile, fmt.Sprint(start.Add(c.o.Duration).UnixMilli())); err != nil {
		return Verdict{}, nil, err
	}
	c.log("workload started")
	var wg sync.WaitGroup
	for _, f := range faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.inject(ctx, start, f)
		}()
	}
	wg.Wait()
	c.healAll()
	c.log("faults over, healed")
	var stuck []string
	deadline := start.Add(c.o.Duration + 90*time.Second)
	for _, p := range c.topo.Producers {
		proc := c.clients[p]
		select {
		case <-proc.Done():
		case <-time.After(time.Until(deadline)):
			stuck = append(stuck, p)
			proc.Kill()
		case <-ctx.Done():
			return Verdict{}, stuck, ctx.Err()
		}
	}
	c.log("producers done")
	// The subscription catches up with every acknowledged message (or we give up).
	consumerFile := filepath.Join(c.dir, "c0.rec")
	catchUp := time.Now().Add(60 * time.Second)
	for {
		v, err := CheckFiles(producerFiles, nil, consumerFile, consumerFile, 0)
		if err == nil && v.Lost == 0 {
			break
		}
		if time.Now().After(catchUp) {
			stuck = append(stuck, "c0")
			// The evidence of where delivery stopped, taken while the consumer is connected.
			statsFile := filepath.Join(c.dir, "stats.txt")
			if _, err := c.runClientOnce(ctx, "stats", ClientSpec{Role: roleStats, Out: statsFile}, 90*time.Second); err != nil {
				c.note("stats: %v", err)
			}
			break
		}
		select {
		case <-ctx.Done():
			return Verdict{}, stuck, ctx.Err()
		case <-time.After(500 * time.Millisecond): // poll interval of the consumer's record
		}
	}
	cons.Term(10 * time.Second)
	c.log("consumer done")
	readerFile := filepath.Join(c.dir, "r0.rec")
	if _, err := c.runClientOnce(ctx, "r0", ClientSpec{Role: roleReader, Out: readerFile, IdleEnd: c.o.ReaderIdleEnd}, 90*time.Second); err != nil {
		if errors.Is(err, context.Canceled) {
			return Verdict{}, stuck, err
		}
		stuck = append(stuck, "r0")
		c.note("reader: %v", err)
	}
	v, err := CheckFiles(producerFiles, txnFiles, consumerFile, readerFile, c.o.Partitions)
	if v.Unverified > 0 && !slices.Contains(stuck, "r0") {
		stuck = append(stuck, "r0")
	}
	return v, stuck, err
}

// lastReady counts the "ready" lines of a producer's record.
func lastReady(path string) int {
	n := 0
	scanLines(path, func(fs []string) error {
		if fs[0] == "ready" {
			n++
		}
		return nil
	})
	return n
}

func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// inject applies a fault at its time and heals it after its duration.
func (c *cluster) inject(ctx context.Context, start time.Time, f Fault) {
	select {
	case <-time.After(time.Until(start.Add(f.At))):
	case <-ctx.Done():
		return
	}
	heal, err := c.apply(f)
	if err != nil {
		c.note("fault %s: %v", f, err)
		return
	}
	c.log("apply %s", f)
	if heal == nil {
		return
	}
	select {
	case <-time.After(f.For):
	case <-ctx.Done():
	}
	heal()
	c.log("heal  %s", f)
}

func (c *cluster) proc(name string) *Proc {
	if m := c.members[name]; m != nil {
		return m.proc
	}
	return c.clients[name]
}

// apply starts a fault and returns what heals it (nil for an instant fault).
func (c *cluster) apply(f Fault) (func(), error) {
	nd := c.nodes[f.Target]
	m := c.members[f.Target]
	blockBoth := func(peers []string) func() {
		for _, p := range peers {
			c.net.Block(nd, c.nodes[p])
			c.net.Block(c.nodes[p], nd)
		}
		return func() {
			for _, p := range peers {
				c.net.Unblock(nd, c.nodes[p])
				c.net.Unblock(c.nodes[p], nd)
			}
		}
	}
	switch f.Kind {
	case FaultKill:
		p := c.proc(f.Target)
		p.Kill()
		if f.For < 0 {
			return nil, nil // stays dead (a client that never comes back)
		}
		return func() {
			if err := p.Start(); err != nil {
				c.note("restart %s: %v", p.Name, err)
			}
		}, nil
	case FaultPause:
		p := c.proc(f.Target)
		p.Pause()
		return p.Resume, nil
	case FaultEtcdCut:
		return blockBoth(c.siteOf(f.Target).topo.Etcd), nil
	case FaultBookieCut:
		return blockBoth(c.siteOf(f.Target).topo.Brokers), nil
	case FaultEtcdAlone:
		var others []string
		for n := range c.nodes {
			if n != f.Target {
				others = append(others, n)
			}
		}
		return blockBoth(others), nil
	case FaultOneWay:
		peer := c.nodes[f.Peer]
		if err := c.net.Block(nd, peer); err != nil {
			return nil, err
		}
		return func() { c.net.Unblock(nd, peer) }, nil
	case FaultDelay, FaultLoss, FaultStall:
		r := Rule{}
		switch f.Kind {
		case FaultDelay:
			r.Delay = [2]time.Duration{f.Delay, f.Delay}
		case FaultLoss:
			r.Loss = [2]float64{f.Loss, f.Loss}
		default:
			r.Stall[f.Dir] = true
		}
		id := m.proxy.AddRule(r)
		return func() { m.proxy.RemoveRule(id) }, nil
	case FaultReset:
		m.proxy.Reset()
		return nil, nil
	case FaultDiskFull:
		if err := m.disk.Fill(); err != nil {
			return nil, err
		}
		return m.disk.Free, nil
	}
	return c.applyGeo(f)
}

// healAll undoes whatever a fault may have left: routes, proxy rules, full disks, paused
// processes, and restarts servers that exited (noting the ones that exited by themselves).
func (c *cluster) healAll() {
	c.net.UnblockAll()
	for name, m := range c.members {
		m.proxy.ClearRules()
		if m.disk != nil {
			m.disk.Free()
		}
		switch m.proc.State() {
		case Paused:
			m.proc.Resume()
		case Exited:
			c.note("%s had exited by itself (%s): restarted", name, strings.Join(m.proc.Exits(), "; "))
			if err := m.proc.Start(); err != nil {
				c.note("restart %s: %v", name, err)
			}
		}
	}
}

// teardown stops every process (SIGTERM, then SIGKILL after 20 s), closes the proxies,
// deletes the namespaces and unmounts the disks. It is safe on a half-built cluster.
func (c *cluster) teardown() {
	var wg sync.WaitGroup
	stop := func(p *Proc) {
		defer wg.Done()
		if p == nil || p.State() == Exited {
			return
		}
		d, clean := p.Term(20 * time.Second)
		if !clean {
			c.note("%s did not stop within 20 s of SIGTERM", p.Name)
		} else if d > 10*time.Second {
			c.note("%s took %.1f s to stop", p.Name, d.Seconds())
		}
	}
	for _, p := range c.clients {
		wg.Add(1)
		go stop(p)
	}
	wg.Wait()
	if c.dumpBrokers {
		for _, n := range c.topo.Brokers {
			if m := c.members[n]; m != nil && m.proc.State() != Exited {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m.proc.Dump(20 * time.Second)
				}()
			}
		}
		wg.Wait()
	}
	for _, group := range [][]string{c.topo.Brokers, c.topo.Bookies, c.topo.Etcd} {
		for _, n := range group {
			if m := c.members[n]; m != nil {
				wg.Add(1)
				go stop(m.proc)
			}
		}
		wg.Wait()
	}
	for _, m := range c.members {
		if m.proxy != nil {
			m.proxy.Close()
		}
	}
	if c.net != nil {
		c.net.Close()
	}
	for _, m := range c.members {
		if m.disk != nil {
			if err := m.disk.Unmount(); err != nil {
				c.note("unmount %s: %v", m.disk.Dir, err)
			}
		}
	}
}
