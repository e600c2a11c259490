package interop

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/itest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// A multi-broker cluster: one metadata namespace, one bookie and n brokers, each broker
// with its admin REST API on its own HTTP port. Brokers run in the test process, or (for
// kill -9) as child processes of the test binary (brokerChildEnv). With newCluster
// (cluster_test.go, one broker, optionally on in-memory logs) it is the package's only way
// to start a cluster; the proxy tests put proxies in front of one.

// brokerChildEnv makes the test binary a broker process: its value is a childBroker JSON.
const brokerChildEnv = "MAGNETAR_INTEROP_BROKER"

// childBroker configures a broker child process.
type childBroker struct {
	Endpoints []string
	Namespace string
	ID        string
	Listen    string
	HTTP      string
	TTL       time.Duration
	Txn       bool // transactions on (4 coordinators)
}

// runBrokerChild runs a broker until the process is killed (or SIGTERM: a clean stop).
func runBrokerChild(arg string) int {
	var cb childBroker
	if err := json.Unmarshal([]byte(arg), &cb); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	store, err := metadata.Open(ctx, metadata.Config{Endpoints: cb.Endpoints, Namespace: cb.Namespace})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n := &mbNode{id: cb.ID, listen: cb.Listen, httpAddr: cb.HTTP}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := brokerConfig(store, cb.ID, cb.TTL, log)
	if cb.Txn {
		cfg.TransactionCoordinatorEnabled, cfg.TransactionCoordinators = true, 4
	}
	if err := n.startInProcess(ctx, cfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	n.stop()
	store.Close()
	return 0
}

func brokerConfig(store metadata.Store, id string, ttl time.Duration, log *slog.Logger) broker.Config {
	return broker.Config{Store: store, ID: id, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, SessionTTL: ttl,
		Logger: log, KeepAliveInterval: 30 * time.Second}
}

// mbNode is one broker of a multiBroker.
type mbNode struct {
	id               string
	listen, httpAddr string // reserved ports (itest.FreeAddr): a restart keeps its URLs
	svc              atomic.Pointer[broker.Service]
	web              *http.Server
	proc             *exec.Cmd // a child process; nil in process
	procDone         chan struct{}
	url, httpURL     string
	// relay, with mbOpts.relayed, is the TCP relay the broker advertises in front of its
	// listener: closing it makes the broker unreachable while it keeps its metadata session,
	// as a crashed broker does until its session expires.
	relay *proxy
	// sec, if set (mbOpts.secure), makes the node's listeners TLS-only and its admin API
	// authenticated.
	sec *mbSecure
}

// mbSecure makes a multiBroker's brokers serve TLS only: pulsar+ssl:// on the node's
// listen port, https:// admin on its HTTP port (both with tls), with the admin API behind
// auth's middleware.
type mbSecure struct {
	tls  *tls.Config
	auth *auth.Service
}

// startInProcess starts the node's HTTP server and broker in this process; redirects, if
// not nil, counts the 307s its admin API answers.
func (n *mbNode) startInProcess(ctx context.Context, cfg broker.Config, redirects *atomic.Int64) error {
	web, err := net.Listen("tcp", n.httpAddr)
	if err != nil {
		return err
	}
	cfg.Listen, cfg.HTTPURL = n.listen, "http://"+n.httpAddr
	if n.sec != nil {
		cfg.Listen, cfg.DisablePlain, cfg.ListenTLS, cfg.TLS = "", true, n.listen, n.sec.tls
		cfg.HTTPURL, cfg.HTTPURLTLS = "", "https://"+n.httpAddr
		web = tls.NewListener(web, n.sec.tls)
	}
	svc, err := broker.Start(ctx, cfg)
	if err != nil {
		web.Close()
		return err
	}
	n.svc.Store(svc)
	n.url, n.httpURL = "pulsar://"+n.listen, cfg.HTTPURL
	h := admin.Handler(svc, admin.Options{Logger: cfg.Logger})
	if n.sec != nil {
		n.url, n.httpURL = "pulsar+ssl://"+n.listen, cfg.HTTPURLTLS
		h = n.sec.auth.Middleware(h)
	}
	if redirects != nil {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w}
			inner.ServeHTTP(rec, r)
			if rec.code == http.StatusTemporaryRedirect {
				redirects.Add(1)
			}
		})
	}
	n.web = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go n.web.Serve(web) //nolint:errcheck // ends with Close
	return nil
}

// stop closes the node cleanly (its bundles are handed over).
func (n *mbNode) stop() {
	if n.proc != nil {
		n.proc.Process.Signal(syscall.SIGTERM) //nolint:errcheck // exits either way
		<-n.procDone
		n.proc = nil
		return
	}
	if svc := n.svc.Swap(nil); svc != nil {
		svc.Close()
		n.web.Close()
	}
}

type mbOpts struct {
	ttl      time.Duration
	children bool      // brokers run as child processes
	txn      bool      // transactions on (4 coordinators)
	relayed  bool      // each broker (in process) advertises a TCP relay in front of its listener: mbNode.relay
	secure   *mbSecure // TLS-only listeners and an authenticated admin API (in process)
	eps      []string
	tweak    func(*broker.Config)
}

type multiBroker struct {
	t      *testing.T
	o      mbOpts
	eps    []string
	ns     string
	store  *metadata.EtcdStore
	bookie *bookie.Bookie
	nodes  []*mbNode
	logDir string
	// redirects counts the 307s the in-process brokers' admin APIs answered.
	redirects atomic.Int64
}

func newMultiBroker(t *testing.T, n int, o mbOpts) *multiBroker {
	t.Helper()
	if o.ttl == 0 {
		o.ttl = 10 * time.Second
	}
	if o.eps == nil {
		o.eps = sharedEtcd(t)
	}
	m := &multiBroker{t: t, o: o, eps: o.eps, ns: metadatatest.RandomNamespace(), logDir: os.Getenv("MAGNETAR_TEST_LOGDIR")}
	if m.logDir == "" {
		m.logDir = t.TempDir()
	}
	m.store = metadatatest.OpenStore(t, m.eps, m.ns)
	ctx := ctxT(t, 30*time.Second)
	b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: m.store,
		Logger: testLogger(t), GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	m.bookie = b
	t.Cleanup(func() { b.Close() })
	for range n {
		m.addBroker()
	}
	t.Cleanup(func() {
		for _, nd := range m.nodes {
			nd.stop()
		}
	})
	return m
}

// addBroker starts one more broker in the cluster.
func (m *multiBroker) addBroker() *mbNode {
	m.t.Helper()
	nd := &mbNode{id: fmt.Sprintf("broker-%d", len(m.nodes)+1), listen: itest.FreeAddr(m.t), httpAddr: itest.FreeAddr(m.t)}
	m.nodes = append(m.nodes, nd)
	m.start(nd)
	return nd
}

// start (re)starts nd.
func (m *multiBroker) start(nd *mbNode) {
	m.t.Helper()
	if !m.o.children {
		cfg := brokerConfig(m.store, nd.id, m.o.ttl, testLogger(m.t))
		if m.o.txn {
			cfg.TransactionCoordinatorEnabled, cfg.TransactionCoordinators = true, 4
		}
		nd.sec = m.o.secure
		if m.o.relayed {
			if nd.relay == nil {
				nd.relay = newProxy(m.t)
				nd.relay.setBackend(nd.listen)
			}
			cfg.Advertise = nd.relay.addr()
		}
		if m.o.tweak != nil {
			m.o.tweak(&cfg)
		}
		if err := nd.startInProcess(ctxT(m.t, 30*time.Second), cfg, &m.redirects); err != nil {
			m.t.Fatalf("broker %s: %v", nd.id, err)
		}
		return
	}
	if m.o.relayed || m.o.secure != nil {
		m.t.Fatal("mbOpts: relayed and secure brokers run in process")
	}
	arg, _ := json.Marshal(childBroker{Endpoints: m.eps, Namespace: m.ns, ID: nd.id, Listen: nd.listen, HTTP: nd.httpAddr, TTL: m.o.ttl,
		Txn: m.o.txn})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), brokerChildEnv+"="+string(arg))
	logf, err := os.OpenFile(filepath.Join(m.logDir, nd.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	done := make(chan struct{})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		io.Copy(io.Discard, out) //nolint:errcheck // drain
		cmd.Wait()               //nolint:errcheck // killed or stopped
		logf.Close()
		close(done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			b, _ := os.ReadFile(logf.Name())
			m.t.Fatalf("broker %s did not start:\n%s", nd.id, tailStr(string(b), 3000))
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill() //nolint:errcheck // giving up
		m.t.Fatalf("broker %s did not start in time", nd.id)
	}
	nd.proc, nd.procDone = cmd, done
	nd.url, nd.httpURL = "pulsar://"+nd.listen, "http://"+nd.httpAddr
}

// kill kills nd's process with SIGKILL.
func (m *multiBroker) kill(nd *mbNode) {
	nd.proc.Process.Kill() //nolint:errcheck // it exits
	<-nd.procDone
	nd.proc = nil
}

func tailStr(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// serviceURL lists every broker in one service URL, as Pulsar clients accept it.
func (m *multiBroker) serviceURL() string {
	var hosts []string
	for _, nd := range m.nodes {
		hosts = append(hosts, strings.TrimPrefix(nd.url, "pulsar://"))
	}
	return "pulsar://" + strings.Join(hosts, ",")
}

func (m *multiBroker) clientOf(url string) pulsar.Client {
	m.t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		m.t.Fatalf("client: %v", err)
	}
	m.t.Cleanup(cl.Close)
	return cl
}

// httpDo sends an admin request to node nd and returns the status and body (redirects are
// not followed).
func httpDo(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusTemporaryRedirect {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(b)
}
