package interop

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/topictest"
	"github.com/magnetar-io/magnetar/itest"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// The end-to-end tests below run the real Pulsar Go client against a broker started in the
// test process, on a real bookie and a real (embedded) etcd, over real TCP. One etcd serves
// the whole package; every test has its own namespace in it, its own bookie and broker.

var (
	etcdOnce sync.Once
	etcdEps  []string
	etcdErr  error
	etcdStop func()
)

func TestMain(m *testing.M) {
	if arg := os.Getenv(brokerChildEnv); arg != "" {
		os.Exit(runBrokerChild(arg)) // a broker of a multiBroker (multibroker_test.go)
	}
	if args := os.Getenv(transformerEnv); args != "" {
		os.Exit(runTransformer(args)) // a child process of TestTxnExactlyOnceKill9
	}
	code := m.Run()
	if etcdStop != nil {
		etcdStop()
	}
	os.Exit(code)
}

func sharedEtcd(t testing.TB) []string {
	t.Helper()
	etcdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "magnetar-interop-etcd-")
		if err != nil {
			etcdErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{Name: "interop",
			DataDir: filepath.Join(dir, "etcd"), ListenClient: "127.0.0.1:0", ListenPeer: "127.0.0.1:0", Fast: true})
		if err != nil {
			etcdErr = err
			return
		}
		etcdEps = e.Endpoints()
		etcdStop = func() { e.Close(); os.RemoveAll(dir) }
	})
	if etcdErr != nil {
		t.Fatalf("embedded etcd: %v", etcdErr)
	}
	return etcdEps
}

type clusterOpts struct {
	memLog bool // in-memory logs instead of bookies (protocol-only tests)
	admin  bool // the broker serves the admin REST API over HTTP (cluster.http)
	// bookie changes the bookie's configuration (e.g. TLS) before it starts.
	bookie func(*bookie.Config)
	tweak  func(*broker.Config)
}

// cluster is a metadata namespace, a bookie and a broker: the package's one-broker cluster
// (multiBroker, multibroker_test.go, is the other).
type cluster struct {
	t      *testing.T
	store  metadata.Store
	bookie *bookie.Bookie
	cfg    broker.Config
	broker *broker.Service
	url    string
	mem    *topictest.Store
	// http serves the broker's admin REST API (clusterOpts.admin; nil without), following
	// broker restarts.
	http *httptest.Server
	// bookieCfg restarts the bookie on the same address and data (stopBookie,
	// startBookie).
	bookieCfg bookie.Config
}

func testLogger(t testing.TB) *slog.Logger {
	switch os.Getenv("MAGNETAR_TEST_LOG") {
	case "":
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	case "info":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func newCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, store: metadatatest.NewStore(t, sharedEtcd(t))}
	log := testLogger(t)
	if o.admin {
		c.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			admin.Handler(c.broker, admin.Options{Logger: log}).ServeHTTP(w, r)
		}))
		t.Cleanup(c.http.Close) // after the broker's (cleanups run last-in first-out)
	}
	// Reserved ports (itest.FreeAddr), so that a restart listens on the same one again.
	c.cfg = broker.Config{Store: c.store, Listen: itest.FreeAddr(t), Ensemble: 1, WriteQuorum: 1, AckQuorum: 1,
		Logger: log, KeepAliveInterval: 30 * time.Second}
	if o.memLog {
		c.mem = topictest.NewStore()
		c.cfg.OpenLog = func(_ context.Context, name string) (topic.Log, error) { return c.mem.Open(name), nil }
	} else {
		c.bookieCfg = bookie.Config{Listen: itest.FreeAddr(t), DataDir: t.TempDir(), Store: c.store, Logger: log, GCInterval: -1}
		if o.bookie != nil {
			o.bookie(&c.bookieCfg)
		}
		c.startBookie()
		t.Cleanup(func() { c.bookie.Close() })
	}
	if c.http != nil {
		c.cfg.HTTPURL = c.http.URL
	}
	if o.tweak != nil {
		o.tweak(&c.cfg)
	}
	c.startBroker()
	// One cleanup for whichever broker runs last, registered before any client so that the
	// clients close first (a restarted broker must not be closed before them).
	t.Cleanup(func() { c.broker.Close() })
	return c
}

// startBookie starts the bookie (again: on its reserved address and the data directory it
// had).
func (c *cluster) startBookie() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bookie.Start(ctx, c.bookieCfg)
	if err != nil {
		c.t.Fatalf("bookie: %v", err)
	}
	c.bookie = b
}

func (c *cluster) startBroker() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Start(ctx, c.cfg)
	if err != nil {
		c.t.Fatalf("broker: %v", err)
	}
	c.broker = b
	c.url = "pulsar://" + b.Addr().String()
}

// restartBroker stops the broker (cleanly) and starts a new one on the same port.
func (c *cluster) restartBroker() {
	c.t.Helper()
	c.broker.Close()
	c.startBroker()
}

func clientLogger() plog.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("MAGNETAR_TEST_LOG") == "debug" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.InfoLevel)
	}
	return plog.NewLoggerWithLogrus(l)
}

// client returns a Pulsar client of the cluster, closed at cleanup.
func (c *cluster) client() pulsar.Client {
	c.t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.url, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		c.t.Fatalf("client: %v", err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

var topicSeq struct {
	sync.Mutex
	n int
}

// topicName returns a fresh topic name for the test.
func topicName(t testing.TB) string {
	topicSeq.Lock()
	defer topicSeq.Unlock()
	topicSeq.n++
	return fmt.Sprintf("persistent://public/default/%s-%d", sanitize(t.Name()), topicSeq.n)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
