package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/itest"
)

// The harness of the geo-replication tests (geo_e2e_test.go, geo_bench_test.go,
// geo_standalone_test.go): clusters ("sites") that are either one-broker clusters in this
// process (newCluster, each with its own metadata namespace and bookie) or `magnetar
// standalone` processes (each with its own embedded etcd), connected the way an operator
// does it with pulsaradmin: every site holds the other sites' cluster records, tenant geo
// is allowed on all of them, and namespace geo/ns is replicated to all of them with
// deduplication on (and infinite retention, so that a test can read each log whole).
// Messages carry "<producer>/<sequence>/" payloads, which geoOrder checks for exactly-once
// delivery in per-producer order.

// geoNS is the replicated namespace of the geo tests.
const geoNS = "geo/ns"

// geoSite is one cluster of a geo test, reached by pulsar-client-go at url and by
// pulsaradmin at http.
type geoSite struct {
	t    *testing.T
	name string
	url  string      // pulsar://host:port of its broker
	http string      // http://host:port of its admin REST API
	c    *cluster    // the in-process cluster; nil for a process
	proc *itest.Proc // the standalone process; nil in process
	// record is what the other sites' cluster records say of this one (geoConnect).
	record geoRecord
}

// geoRecord is a cluster record, with Pulsar's JSON names (ClusterData).
type geoRecord struct {
	ServiceURL       string `json:"serviceUrl"`
	BrokerServiceURL string `json:"brokerServiceUrl"`
	ListenerName     string `json:"listenerName,omitempty"`
}

// geoInProcess starts a one-broker cluster named name in this process, on a real bookie and
// its own metadata namespace; tweak, if not nil, changes its broker's configuration.
func geoInProcess(t *testing.T, name string, tweak func(*broker.Config)) *geoSite {
	t.Helper()
	c := newCluster(t, clusterOpts{admin: true, tweak: func(cfg *broker.Config) {
		cfg.Cluster = name
		if tweak != nil {
			tweak(cfg)
		}
	}})
	s := &geoSite{t: t, name: name, url: c.url, http: c.http.URL, c: c}
	s.record = geoRecord{ServiceURL: s.http, BrokerServiceURL: s.url}
	return s
}

// geoStandalone starts `magnetar standalone --cluster name` on free ports with its own data
// directory and waits until its admin API serves public/default.
func geoStandalone(t *testing.T, name string, extra ...string) *geoSite {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	etcd, bk, brk, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	args := append([]string{"standalone", "--cluster", name, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", brk, "--http", web}, extra...)
	s := &geoSite{t: t, name: name, url: "pulsar://" + brk, http: "http://" + web,
		proc: itest.Start(t, "standalone-"+name, args...)}
	s.record = geoRecord{ServiceURL: s.http, BrokerServiceURL: s.url}
	s.waitUp(90 * time.Second)
	return s
}

// waitUp waits until the site's admin API answers with namespace public/default (a
// standalone creates it once its broker is up).
func (s *geoSite) waitUp(d time.Duration) {
	s.t.Helper()
	a := s.admin()
	var nss []string
	var err error
	waitEvery(s.t, d, 50*time.Millisecond, s.name+"'s admin API", func() bool {
		nss, err = a.Namespaces().GetNamespaces("public")
		return err == nil && slices.Contains(nss, "public/default")
	})
}

// admin returns a pulsaradmin client of the site.
func (s *geoSite) admin() pulsaradmin.Client {
	s.t.Helper()
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: s.http})
	if err != nil {
		s.t.Fatal(err)
	}
	return a
}

// client returns a pulsar-client-go client of the site, closed at cleanup.
func (s *geoSite) client() pulsar.Client {
	s.t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: s.url, OperationTimeout: 60 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		s.t.Fatalf("client of %s: %v", s.name, err)
	}
	s.t.Cleanup(cl.Close)
	return cl
}

// putCluster creates (or, if it exists, updates) the record of cluster name on the site.
func (s *geoSite) putCluster(name string, r geoRecord) {
	s.t.Helper()
	body, _ := json.Marshal(r)
	for _, method := range []string{http.MethodPut, http.MethodPost} {
		req, err := http.NewRequest(method, s.http+"/admin/v2/clusters/"+name, bytes.NewReader(body))
		if err != nil {
			s.t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.t.Fatalf("%s %s on %s: %v", method, name, s.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode/100 == 2:
			return
		case resp.StatusCode == http.StatusConflict && method == http.MethodPut:
			continue // it exists: update it
		}
		s.t.Fatalf("%s cluster %s on %s: %d %s", method, name, s.name, resp.StatusCode, b)
	}
}

// geoConnect sets the sites up as an operator does with separate configuration stores:
// on every site, the other sites' cluster records (their record field), tenant geo allowed
// on all of them, and namespace geo/ns replicated to all of them with deduplication on
// and infinite retention.
func geoConnect(t *testing.T, sites ...*geoSite) {
	t.Helper()
	var names []string
	for _, s := range sites {
		names = append(names, s.name)
	}
	for _, s := range sites {
		for _, o := range sites {
			if o != s {
				s.putCluster(o.name, o.record)
			}
		}
		a := s.admin()
		if err := a.Tenants().Create(utils.TenantData{Name: "geo", AllowedClusters: names}); err != nil {
			t.Fatalf("tenant geo on %s: %v", s.name, err)
		}
		if err := a.Namespaces().CreateNamespace(geoNS); err != nil {
			t.Fatalf("namespace on %s: %v", s.name, err)
		}
		if err := a.Namespaces().SetNamespaceReplicationClusters(geoNS, names); err != nil {
			t.Fatalf("replication clusters on %s: %v", s.name, err)
		}
		if err := a.Namespaces().SetDeduplicationStatus(geoNS, true); err != nil {
			t.Fatalf("deduplication on %s: %v", s.name, err)
		}
		// Infinite retention: the tests read each cluster's whole log at the end, also the
		// ledgers every cursor (the replicators' too) has passed.
		if err := a.Namespaces().SetRetention(geoNS, utils.RetentionPolicies{RetentionTimeInMinutes: -1, RetentionSizeInMB: -1}); err != nil {
			t.Fatalf("retention on %s: %v", s.name, err)
		}
	}
}

// replication returns the replication section of the topic's stats on the site.
func (s *geoSite) replication(topic string) (map[string]utils.ReplicatorStats, error) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return nil, err
	}
	st, err := s.admin().Topics().GetStats(*tn)
	if err != nil {
		return nil, err
	}
	return st.Replication, nil
}

// geoWaitDrained waits until every site's replicator of topic toward every other site is
// connected with an empty backlog: every message stored anywhere has been replicated.
func geoWaitDrained(t *testing.T, d time.Duration, topic string, sites ...*geoSite) {
	t.Helper()
	var last string
	deadline := time.Now().Add(d)
	for {
		last = ""
		for _, s := range sites {
			rs, err := s.replication(topic)
			if err != nil {
				last = fmt.Sprintf("%s: %v", s.name, err)
				break
			}
			for _, o := range sites {
				if r, ok := rs[o.name]; o != s && (!ok || !r.Connected || r.ReplicationBacklog != 0) {
					last = fmt.Sprintf("%s → %s: %+v", s.name, o.name, r)
				}
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replication of %s not drained after %v: %s", topic, d, last)
		}
		time.Sleep(100 * time.Millisecond) // polled: a statistic of other processes
	}
}

// geoPayload is message seq of producer, padded to size bytes: "<producer>/<seq>/…".
func geoPayload(producer string, seq, size int) []byte {
	b := fmt.Appendf(nil, "%s/%d/", producer, seq)
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

// parseGeoPayload returns the producer and sequence number of a geoPayload.
func parseGeoPayload(p []byte) (string, int, error) {
	f := strings.SplitN(string(p), "/", 3)
	if len(f) < 3 {
		return "", 0, fmt.Errorf("payload %.40q is not <producer>/<seq>/", p)
	}
	seq, err := strconv.Atoi(f[1])
	return f[0], seq, err
}

// geoOrder checks that payloads arrive exactly once in per-producer order: each producer's
// sequence numbers as 0, 1, 2, … with nothing repeated or skipped. It keeps the first
// violations. Not safe for concurrent use.
type geoOrder struct {
	next  map[string]int
	n     int
	dups  int // a sequence number below the next expected one: a duplicate (or a reorder)
	gaps  int // above it: a message missing (or a reorder)
	first []string
}

func newGeoOrder() *geoOrder { return &geoOrder{next: map[string]int{}} }

func (o *geoOrder) add(p []byte) {
	o.n++
	prod, seq, err := parseGeoPayload(p)
	if err != nil {
		o.fail(err.Error())
		return
	}
	switch next := o.next[prod]; {
	case seq == next:
		o.next[prod] = seq + 1
	case seq < next:
		o.dups++
		o.fail(fmt.Sprintf("%s/%d after %s/%d: a duplicate or a reorder", prod, seq, prod, next-1))
	default:
		o.gaps++
		o.fail(fmt.Sprintf("%s/%d after %s/%d: %d missing", prod, seq, prod, next-1, seq-next))
		o.next[prod] = seq + 1
	}
}

func (o *geoOrder) fail(s string) {
	if len(o.first) < 5 {
		o.first = append(o.first, s)
	}
}

// check reports an error unless every producer of want sent exactly want[producer]
// messages and they came exactly once each, in order.
func (o *geoOrder) check(want map[string]int) error {
	var errs []string
	if o.dups+o.gaps > 0 {
		errs = append(errs, fmt.Sprintf("%d duplicates or reorders, %d gaps; first: %s", o.dups, o.gaps, strings.Join(o.first, "; ")))
	}
	for p, n := range want {
		if o.next[p] != n {
			errs = append(errs, fmt.Sprintf("producer %s: %d messages, want %d", p, o.next[p], n))
		}
	}
	for p := range o.next {
		if _, ok := want[p]; !ok {
			errs = append(errs, "messages of an unexpected producer "+p)
		}
	}
	if total := sumValues(want); o.n != total {
		errs = append(errs, fmt.Sprintf("%d messages, want %d", o.n, total))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// geoSink is a consumer of a topic on a site (a durable subscription from the earliest
// message) that checks what it receives with a geoOrder and acknowledges it.
type geoSink struct {
	site  *geoSite
	topic string
	mu    struct {
		sync.Mutex // guards the fields below
		order      *geoOrder
		waiters    []geoWaiter
	}
	count atomic.Int64
	// lastAt is when the last message arrived (UnixNano); lag, if set, records receive time
	// minus publish time of every message.
	lastAt atomic.Int64
	lag    func(time.Duration)
}

type geoWaiter struct {
	n  int
	ch chan struct{}
}

// geoConsume subscribes to topic on s (subscription sub, from the earliest message) and
// feeds a geoSink until the test ends.
func geoConsume(t *testing.T, s *geoSite, cl pulsar.Client, topic, sub string, lag func(time.Duration)) *geoSink {
	t.Helper()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 2000})
	if err != nil {
		t.Fatalf("subscribe on %s: %v", s.name, err)
	}
	k := &geoSink{site: s, topic: topic, lag: lag}
	k.mu.order = newGeoOrder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cons.Close() })
	go func() {
		defer close(done)
		for {
			m, err := cons.Receive(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			if k.lag != nil {
				k.lag(now.Sub(m.PublishTime()))
			}
			cons.Ack(m) //nolint:errcheck // a lost ack is redelivered: geoOrder would see it
			k.add(m.Payload(), now)
		}
	}()
	return k
}

func (k *geoSink) add(p []byte, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.order.add(p)
	n := k.mu.order.n
	k.count.Store(int64(n))
	k.lastAt.Store(now.UnixNano())
	w := k.mu.waiters[:0]
	for _, x := range k.mu.waiters {
		if n >= x.n {
			close(x.ch)
		} else {
			w = append(w, x)
		}
	}
	k.mu.waiters = w
}

// reached returns a channel closed once the sink has received n messages.
func (k *geoSink) reached(n int) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := make(chan struct{})
	if k.mu.order.n >= n {
		close(ch)
	} else {
		k.mu.waiters = append(k.mu.waiters, geoWaiter{n: n, ch: ch})
	}
	return ch
}

// wait waits up to d for n messages; on a timeout it logs the topic's stats in every site
// of diag (where the messages are stuck).
func (k *geoSink) wait(t *testing.T, n int, d time.Duration, diag ...*geoSite) {
	t.Helper()
	select {
	case <-k.reached(n):
	case <-time.After(d):
		for _, s := range diag {
			s.logStats(k.topic)
		}
		t.Fatalf("%s's consumer received %d of %d messages in %v", k.site.name, k.count.Load(), n, d)
	}
}

// logStats logs the topic's stats and internal stats on the site.
func (s *geoSite) logStats(topic string) {
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		return
	}
	a := s.admin()
	st, err := a.Topics().GetStats(*tn)
	b, _ := json.Marshal(st)
	s.t.Logf("%s: stats of %s: %s %v", s.name, topic, b, err)
	is, err := a.Topics().GetInternalStats(*tn)
	b, _ = json.Marshal(is)
	s.t.Logf("%s: internal stats of %s: %s %v", s.name, topic, b, err)
}

// check checks what the sink received (geoOrder.check).
func (k *geoSink) check(want map[string]int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.order.check(want)
}

// geoReadLog reads topic on s from its earliest message to its last (a reader, HasNext)
// and checks it holds exactly want[producer] messages of each producer, each once, in
// order.
func geoReadLog(t *testing.T, s *geoSite, cl pulsar.Client, topic string, want map[string]int) error {
	t.Helper()
	r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(), ReceiverQueueSize: 2000})
	if err != nil {
		return fmt.Errorf("reader on %s: %w", s.name, err)
	}
	defer r.Close()
	ctx := ctxT(t, 5*time.Minute)
	o := newGeoOrder()
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			return fmt.Errorf("%s: reading after %d messages: %w", s.name, o.n, err)
		}
		o.add(m.Payload())
	}
	if err := o.check(want); err != nil {
		return fmt.Errorf("the log of %s in %s: %w", topic, s.name, err)
	}
	return nil
}

// geoPublisher publishes geoPayloads of one producer with SendAsync, at a rate (messages
// a second; 0: as fast as the client takes them), and counts the receipts.
type geoPublisher struct {
	p       pulsar.Producer
	name    string
	size    int
	sent    int // the next sequence number (the publishing goroutine's)
	acked   atomic.Int64
	failed  atomic.Int64
	lastErr atomic.Pointer[error]
	wg      sync.WaitGroup
}

func newGeoPublisher(p pulsar.Producer, name string, size int) *geoPublisher {
	return &geoPublisher{p: p, name: name, size: size}
}

// run publishes until ctx ends or n messages in all were sent (n 0: no bound), at most rate
// a second (rate 0: no pacing). It does not wait for the receipts (drain does).
func (g *geoPublisher) run(ctx context.Context, rate, n int) {
	const tick = 10 * time.Millisecond
	start := time.Now()
	for ctx.Err() == nil && (n == 0 || g.sent < n) {
		if rate > 0 {
			// Sent so far may not run ahead of the rate since start.
			due := int(time.Since(start) * time.Duration(rate) / time.Second)
			if g.sent >= due {
				select {
				case <-ctx.Done():
				case <-time.After(tick):
				}
				continue
			}
		}
		g.wg.Add(1)
		// Not ctx: its end stops the loop, it fails no send.
		g.p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: geoPayload(g.name, g.sent, g.size)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					g.failed.Add(1)
					g.lastErr.Store(&err)
				} else {
					g.acked.Add(1)
				}
				g.wg.Done()
			})
		g.sent++
	}
}

// drain flushes the producer and waits up to d for every receipt; it returns an error if
// a send failed.
func (g *geoPublisher) drain(t *testing.T, d time.Duration) error {
	t.Helper()
	done := make(chan struct{})
	go func() { g.p.Flush(); g.wg.Wait(); close(done) }() //nolint:errcheck // the receipts say
	select {
	case <-done:
	case <-time.After(d):
		return fmt.Errorf("%s: %d of %d receipts after %v", g.name, g.acked.Load()+g.failed.Load(), g.sent, d)
	}
	if f := g.failed.Load(); f > 0 {
		return fmt.Errorf("%s: %d of %d sends failed, the last: %v", g.name, f, g.sent, *g.lastErr.Load())
	}
	return nil
}

// geoLink is a TCP relay the test controls between a replicator and the remote cluster:
// cut refuses new connections (accepted, then closed at once) and drops the open ones,
// heal lets connections through again.
type geoLink struct {
	ln       net.Listener
	accepted atomic.Int64 // connections relayed
	mu       struct {
		sync.Mutex // guards the fields below
		backend    string
		down       bool
		conns      map[net.Conn]struct{}
	}
}

func newGeoLink(t *testing.T) *geoLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &geoLink{ln: ln}
	l.mu.conns = map[net.Conn]struct{}{}
	done := make(chan struct{})
	go func() { defer close(done); l.accept() }()
	t.Cleanup(func() { ln.Close(); <-done; l.cut() })
	return l
}

func (l *geoLink) addr() string { return l.ln.Addr().String() }

// setBackend sets the address the link relays to.
func (l *geoLink) setBackend(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.backend = addr
}

func (l *geoLink) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down, backend := l.mu.down, l.mu.backend
		l.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		b, err := net.Dial("tcp", backend)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		if l.mu.down { // cut while dialling
			l.mu.Unlock()
			c.Close()
			b.Close()
			continue
		}
		l.mu.conns[c], l.mu.conns[b] = struct{}{}, struct{}{}
		l.mu.Unlock()
		l.accepted.Add(1)
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src) //nolint:errcheck // ends when either side closes
			dst.Close()
			src.Close()
			l.mu.Lock()
			delete(l.mu.conns, dst)
			delete(l.mu.conns, src)
			l.mu.Unlock()
		}
		go pipe(b, c)
		go pipe(c, b)
	}
}

// cut refuses new connections and closes the open ones.
func (l *geoLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.down = true
	for c := range l.mu.conns {
		c.Close()
	}
	clear(l.mu.conns)
}

// heal lets new connections through again.
func (l *geoLink) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.down = false
}

// loadAvg returns the 1-minute load average of the machine ("" if unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
