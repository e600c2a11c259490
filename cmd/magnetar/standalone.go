package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/bookie"
	bkclient "github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/metadata"
)

func init() { register(newStandaloneCmd) }

type standaloneFlags struct {
	dataDir, etcdAddr, bookieAddr, brokerAddr, httpAddr, logLevel, cluster string
	confURL                                                                string // --configuration-metadata-store-url
	journalPrepareRate                                                     int64
	journalGroupWait, journalSyncInterval, gcInterval                      time.Duration
	maxMessageSize                                                         int
	noAutoCreate, noDedup, txn                                             bool
	pol                                                                    policyFlags
	lb                                                                     *loadmgr.Flags
	auth                                                                   authFlags
	tls                                                                    tlsFlags
	adv                                                                    advertisedFlags
	off                                                                    offloadFlags
	ws                                                                     websocketFlags
}

func newStandaloneCmd() *cobra.Command {
	var fl standaloneFlags
	c := &cobra.Command{
		Use:   "standalone",
		Short: "Run a whole Magnetar cluster in one process: embedded etcd, a bookie, the broker and admin REST",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(fl.logLevel); err != nil {
				return err
			}
			if fl.journalPrepareRate < 0 {
				return usageError{fmt.Errorf("--journal-prepare-rate must not be negative")}
			}
			if fl.maxMessageSize < 1024 {
				return usageError{fmt.Errorf("--max-message-size must be at least 1024, got %d", fl.maxMessageSize)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sd := newShutdown("standalone", stop)
			defer sd.done()
			return runStandalone(ctx, fl, sd)
		},
	}
	f := c.Flags()
	f.StringVar(&fl.dataDir, "data-dir", "./data", "data directory for etcd and the bookie")
	f.StringVar(&fl.etcdAddr, "etcd-listen", "127.0.0.1:2379", "embedded etcd client address (loopback)")
	addConfigStoreFlag(c, &fl.confURL)
	f.StringVar(&fl.bookieAddr, "bookie-listen", "127.0.0.1:3181", "bookie protocol address")
	f.StringVar(&fl.brokerAddr, "broker-listen", "127.0.0.1:6650", "Pulsar protocol address")
	f.StringVar(&fl.httpAddr, "http", "127.0.0.1:8080", "admin REST and metrics HTTP address")
	f.StringVar(&fl.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.Int64Var(&fl.journalPrepareRate, "journal-prepare-rate", journal.DefaultPrepareRate,
		"zero-fill the next journal file ahead of use at this many bytes/s (0: fallocate only)")
	f.DurationVar(&fl.journalGroupWait, "journal-group-wait", journal.DefaultMaxGroupWait, groupWaitUsage)
	f.DurationVar(&fl.journalSyncInterval, "journal-sync-interval", journal.DefaultMinSyncInterval, syncIntervalUsage)
	f.DurationVar(&fl.gcInterval, "gc-interval", 10*time.Minute, "how often the bookie reclaims the disk of deleted ledgers")
	f.BoolVar(&fl.txn, "transaction-coordinator-enabled", false, txnFlagUsage)
	f.StringVar(&fl.cluster, "cluster", "standalone", "cluster name")
	f.IntVar(&fl.maxMessageSize, "max-message-size", 1<<20, "largest message (metadata and payload) accepted, bytes")
	f.BoolVar(&fl.noAutoCreate, "disable-auto-topic-creation", false, "refuse producers and consumers of unknown topics")
	f.BoolVar(&fl.noDedup, "disable-deduplication", false, "turn message deduplication off")
	fl.auth.add(f)
	fl.adv.add(f, "the bound host, or localhost if bound to a wildcard address (as Pulsar's standalone)")
	fl.tls.add(f, "broker-listen-tls")
	fl.pol.add(f)
	fl.off.add(f)
	fl.ws.add(f, true)
	fl.lb = loadmgr.AddFlags(f)
	return withConfig(c, slices.Concat(standaloneKeys, advertisedKeys, authKeys, tlsKeys("broker-listen-tls"), policyKeys, loadmgr.ConfigKeys, fl.off.keys(), websocketKeys),
		authSecretFlags...)
}

// standaloneKeys are the standalone.conf keys standalone has. The managed-ledger quorum keys
// must be 1: standalone runs one bookie.
var standaloneKeys = []config.Key{
	{Name: "bindAddress"},
	{Name: "brokerServicePort", Flag: "broker-listen", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "webServicePort", Flag: "http", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "clusterName", Flag: "cluster"},
	// An etcd configuration store; any other value (Pulsar's zk:, rocksdb:, memory:) names
	// Pulsar standalone's own store, which here is the embedded etcd.
	{Name: "configurationMetadataStoreUrl", Flag: "configuration-metadata-store-url", Map: etcdURLOrSkip},
	{Name: "configurationStoreServers", Flag: "configuration-metadata-store-url", Map: etcdURLOrSkip},
	{Name: "maxMessageSize", Flag: "max-message-size"},
	{Name: "allowAutoTopicCreation", Flag: "disable-auto-topic-creation", Map: config.Not},
	{Name: "brokerDeduplicationEnabled", Flag: "disable-deduplication", Map: config.Not},
	{Name: "transactionCoordinatorEnabled", Flag: "transaction-coordinator-enabled"},
	{Name: "gcWaitTime", Flag: "gc-interval", Map: config.Millis},
	{Name: "managedLedgerDefaultEnsembleSize", Map: only("1", "standalone runs one bookie")},
	{Name: "managedLedgerDefaultWriteQuorum", Map: only("1", "standalone runs one bookie")},
	{Name: "managedLedgerDefaultAckQuorum", Map: only("1", "standalone runs one bookie")},
}

func runStandalone(ctx context.Context, fl standaloneFlags, sd *shutdown) error {
	if err := fl.adv.check(); err != nil {
		return err
	}
	fl.adv.standaloneDefault(fl.brokerAddr, fl.tls.listen, fl.httpAddr, fl.tls.https)
	authn, err := fl.auth.service()
	if err != nil {
		return err
	}
	ts, err := fl.tls.server()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(fl.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// The HTTP(S) listeners first, so a second standalone on the host fails before it starts
	// anything, naming the flag, and the broker knows (and reports in lookups) their URLs; the
	// handlers are mounted once the broker is up.
	mux := http.NewServeMux()
	httpURL, httpsURL, err := serveWeb(ctx, fl.httpAddr, fl.tls.https, ts, mux)
	if err != nil {
		return err
	}
	etcd, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{
		Name: "standalone", DataDir: filepath.Join(abs, "etcd"), ListenClient: fl.etcdAddr,
		ListenPeer: "127.0.0.1:0", Logger: slog.Default(),
	})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return listenError("--etcd-listen", fl.etcdAddr, err)
		}
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer etcd.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	// In-process calls to the embedded etcd: no socket or gRPC framing per metadata operation.
	store, err := etcd.OpenStore(sctx, metadata.Config{Logger: slog.Default()})
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	confStore, err := openConfigStore(ctx, "etcd://"+fl.etcdAddr, fl.confURL)
	if err != nil {
		return err
	}
	if confStore != nil {
		defer confStore.Close()
	}
	b, err := bookie.Start(ctx, bookie.Config{
		Listen: fl.bookieAddr, DataDir: filepath.Join(abs, "bookie"), Store: store, Logger: slog.Default(), GCInterval: fl.gcInterval,
		Journal: journal.Options{PrepareRate: fl.journalPrepareRate, MaxGroupWait: journalZeroOff(fl.journalGroupWait),
			MinSyncInterval: journalZeroOff(fl.journalSyncInterval)},
	})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return listenError("--bookie-listen", fl.bookieAddr, err)
		}
		return err
	}
	defer b.Close()
	// Tiered storage: off unless a driver is configured; filesystem defaults under the data dir.
	offloader, offloadPolicy, closeOffloader, err := fl.off.open(ctx, abs)
	if err != nil {
		return err
	}
	defer closeOffloader()
	bc := brokerConfig(brokerSettings{store: store, configStore: confStore, listen: fl.brokerAddr, httpURL: httpURL, httpsURL: httpsURL,
		offloader: offloader, offloadPolicy: offloadPolicy,
		cluster: fl.cluster, maxMessageSize: fl.maxMessageSize, noAutoCreate: fl.noAutoCreate, noDedup: fl.noDedup, txn: fl.txn,
		authn: authn, auth: &fl.auth, ts: ts, tls: &fl.tls, pol: &fl.pol, lb: fl.lb,
		ensemble: 1, writeQuorum: 1, ackQuorum: 1, txnCoordinators: 1, adv: fl.adv,
		// The broker reaches its own bookie in process, as BookKeeper's local transport does.
		bookieDial: func(ctx context.Context, addr string) (net.Conn, error) {
			if addr == b.Addr() {
				return b.DialLocal()
			}
			return bkclient.DialTCP(ctx, addr)
		}})
	svc, err := broker.Start(ctx, bc)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return listenError("--broker-listen", fl.brokerAddr, err)
		}
		return err
	}
	defer svc.Close()
	in := svc.Info()
	// First start: the cluster record, tenants and namespaces initialize-cluster-metadata writes.
	created, err := broker.InitializeCluster(ctx, metadata.NewSplit(store, confStore), fl.cluster, broker.ClusterData{ServiceURL: in.HTTPURL,
		ServiceURLTLS: in.HTTPURLTLS, BrokerServiceURL: in.ServiceURL, BrokerServiceURLTLS: in.ServiceURLTLS})
	if err != nil {
		return fmt.Errorf("initialize cluster metadata: %w", err)
	}
	if created {
		slog.Info("cluster metadata initialized", "cluster", fl.cluster)
	}
	if err := fl.off.registerMetrics(svc.Registry()); err != nil {
		return err
	}
	mux.Handle("/metrics", svc.MetricsHandler())
	mountPprof(mux, authn, fl.auth.superUsers)
	mux.Handle("/metrics/bookie", b.MetricsHandler())
	mux.Handle("/", withAuth(authn, admin.Handler(svc, admin.Options{Logger: slog.Default(), MaxPartitions: fl.pol.maxPartitions,
		MaxTopicsPerNamespace: fl.pol.d.MaxTopicsPerNamespace})))
	closeWS, err := fl.ws.mount(mux, in.ServiceURL, authn, svc.Registry())
	if err != nil {
		return err
	}
	defer closeWS() // before the broker closes
	fmt.Printf("magnetar standalone is up (data in %s)\n", abs)
	fmt.Printf("  pulsar:          %s\n", joinNonEmpty(in.ServiceURL, in.ServiceURLTLS))
	web := httpURL
	if web == "" {
		web = httpsURL
	}
	fmt.Printf("  admin:           %s\n", joinNonEmpty(adminURL(httpURL), adminURL(httpsURL)))
	fmt.Printf("  metrics:         %s/metrics (bookie: %s/metrics/bookie)\n", web, web)
	fmt.Printf("  metadata (etcd): etcd://%s\n", hostPorts(etcd.Endpoints()))
	fmt.Printf("  bookie:          %s\n", b.Addr())
	var failed error
	select {
	case <-ctx.Done():
	case <-etcd.Done():
		failed = errors.New("embedded etcd stopped")
		slog.Error("embedded etcd stopped")
	case <-b.Done(): // a failed disk stopped the bookie (logged)
		failed = b.Err()
	}
	sd.begin()
	return failed
}

func hostPorts(eps []string) string {
	s := ""
	for i, e := range eps {
		if i > 0 {
			s += ","
		}
		for _, p := range []string{"http://", "https://"} {
			if len(e) > len(p) && e[:len(p)] == p {
				e = e[len(p):]
			}
		}
		s += e
	}
	return s
}
