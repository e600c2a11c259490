package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/admin"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/config"
)

func init() { register(newBrokerCmd) }

const txnFlagUsage = "turn transactions on: coordinators, transaction buffers and pending acknowledgements (Pulsar's transactionCoordinatorEnabled)"

func newBrokerCmd() *cobra.Command {
	var (
		metaURL, listen, advertise, httpAddr, id, cluster, logLevel string
		ensemble, writeQuorum, ackQuorum, maxMessageSize            int
		noAutoCreate, noDedup, txnOn                                bool
		txnCoordinators                                             int
		sessionTTL                                                  time.Duration
		defaultBundles                                              int
		af                                                          authFlags
		tf                                                          tlsFlags
		bf                                                          bookieClientFlags
		pf                                                          policyFlags
		lf                                                          *loadmgr.Flags
		brokerAuth                                                  = clientSecurity{hostnameVerification: true}
		advf                                                        advertisedFlags
		of                                                          offloadFlags
		wf                                                          websocketFlags
		confURL                                                     string // --configuration-metadata-store-url
	)
	c := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker: serves Pulsar clients on topics stored on the bookies",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(logLevel); err != nil {
				return err
			}
			if ensemble < writeQuorum || writeQuorum < ackQuorum || ackQuorum < 1 {
				return usageError{fmt.Errorf("need --ensemble >= --write-quorum >= --ack-quorum >= 1, got %d/%d/%d",
					ensemble, writeQuorum, ackQuorum)}
			}
			if maxMessageSize < 1024 {
				return usageError{fmt.Errorf("--max-message-size must be at least 1024, got %d", maxMessageSize)}
			}
			if err := advf.check(); err != nil {
				return err
			}
			authn, err := af.service()
			if err != nil {
				return err
			}
			ts, err := tf.server()
			if err != nil {
				return err
			}
			bookieDial, err := bf.dial()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sd := newShutdown("broker", stop)
			defer sd.done()
			// The admin/metrics ports first: a port taken by another process on the host fails
			// here, before the broker registers, naming the flag.
			mux := http.NewServeMux()
			httpURL, httpsURL, err := serveWeb(ctx, httpAddr, tf.https, ts, mux)
			if err != nil {
				return err
			}
			store, err := openStore(ctx, metaURL)
			if err != nil {
				return err
			}
			defer store.Close()
			confStore, err := openConfigStore(ctx, metaURL, confURL)
			if err != nil {
				return err
			}
			if confStore != nil {
				defer confStore.Close()
			}
			// The load manager's transfers and splits: admin requests to the other brokers,
			// with the broker's own credentials (Pulsar's brokerClientAuthentication*).
			hc, err := brokerAuth.httpClient()
			if err != nil {
				return usageError{fmt.Errorf("--broker-client-auth-plugin/--broker-client-auth-params: %w", err)}
			}
			hc.Timeout = time.Minute
			offloader, offloadPolicy, closeOffloader, err := of.open(ctx, "")
			if err != nil {
				return err
			}
			defer closeOffloader()
			bc := brokerConfig(brokerSettings{store: store, configStore: confStore, listen: listen, httpURL: httpURL, httpsURL: httpsURL,
				offloader: offloader, offloadPolicy: offloadPolicy,
				cluster: cluster, maxMessageSize: maxMessageSize, noAutoCreate: noAutoCreate, noDedup: noDedup, txn: txnOn,
				authn: authn, auth: &af, ts: ts, tls: &tf, pol: &pf, lb: lf,
				ensemble: ensemble, writeQuorum: writeQuorum, ackQuorum: ackQuorum, txnCoordinators: txnCoordinators,
				bookieDial: bookieDial, executor: &loadmgr.Executor{Client: hc},
				advertise: advertise, adv: advf, id: id, sessionTTL: sessionTTL, defaultBundles: defaultBundles})
			svc, err := broker.Start(ctx, bc)
			if err != nil {
				if errors.Is(err, syscall.EADDRINUSE) {
					return listenError("--listen", listen, err)
				}
				return err
			}
			defer svc.Close()
			if err := of.registerMetrics(svc.Registry()); err != nil {
				return err
			}
			mux.Handle("/metrics", svc.MetricsHandler())
			mountPprof(mux, authn, af.superUsers)
			mux.Handle("/", withAuth(authn, admin.Handler(svc, admin.Options{Logger: slog.Default(), MaxPartitions: pf.maxPartitions,
				MaxTopicsPerNamespace: pf.d.MaxTopicsPerNamespace})))
			in := svc.Info()
			closeWS, err := wf.mount(mux, in.ServiceURL, authn, svc.Registry())
			if err != nil {
				return err
			}
			defer closeWS() // before the broker closes
			fmt.Fprintf(os.Stdout, "broker %s serving %s\n", in.ID, joinNonEmpty(in.ServiceURL, in.ServiceURLTLS, adminURL(httpURL), adminURL(httpsURL)))
			<-ctx.Done()
			sd.begin()
			return nil
		},
	}
	f := c.Flags()
	addMetadataFlag(c, &metaURL)
	addConfigStoreFlag(c, &confURL)
	f.StringVar(&listen, "listen", "127.0.0.1:6650", "Pulsar protocol listen address")
	f.StringVar(&advertise, "advertise", "", "host:port clients dial (default: the listen address)")
	f.StringVar(&httpAddr, "http", "127.0.0.1:8080", "admin REST and metrics HTTP address (empty disables)")
	f.StringVar(&id, "broker-id", "", "broker id in ownership records (default: the advertised address)")
	f.StringVar(&cluster, "cluster", "standalone", "cluster name")
	f.IntVar(&ensemble, "ensemble", 2, "bookies per ledger (E)")
	f.IntVar(&writeQuorum, "write-quorum", 2, "copies of each entry (WQ)")
	f.IntVar(&ackQuorum, "ack-quorum", 2, "acknowledgements before an entry is durable (AQ)")
	f.IntVar(&maxMessageSize, "max-message-size", 1<<20, "largest message (metadata and payload) accepted, bytes")
	f.BoolVar(&noAutoCreate, "disable-auto-topic-creation", false, "refuse producers and consumers of unknown topics")
	f.BoolVar(&noDedup, "disable-deduplication", false, "turn message deduplication off")
	f.BoolVar(&txnOn, "transaction-coordinator-enabled", false, txnFlagUsage)
	f.IntVar(&txnCoordinators, "transaction-coordinators", 16,
		"number of transaction coordinators (partitions of pulsar/system/transaction_coordinator_assign, fixed at first start)")
	f.DurationVar(&sessionTTL, "session-ttl", 10*time.Second, "metadata session TTL: how long a dead broker keeps its bundles")
	f.IntVar(&defaultBundles, "default-bundles", 4, "bundles of a namespace created without a bundle count")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	af.add(f)
	advf.add(f, "the bound host, or the host's name if bound to a wildcard address")
	tf.add(f, "listen-tls")
	bf.add(f)
	pf.add(f)
	of.add(f)
	wf.add(f, false)
	lf = loadmgr.AddFlags(f)
	f.StringVar(&brokerAuth.authPlugin, "broker-client-auth-plugin", "",
		"the broker's own authentication in its admin requests to other brokers (load manager): token or basic")
	f.StringVar(&brokerAuth.authParams, "broker-client-auth-params", "", "those credentials: token:JWT or file:///path (token); u:p (basic)")
	return withConfig(c, slices.Concat(brokerKeys, advertisedKeys, authKeys, tlsKeys("listen-tls"), bookieClientKeys, policyKeys, loadmgr.ConfigKeys, of.keys(),
		brokerClientKeys, websocketKeys), append(slices.Clone(authSecretFlags), "broker-client-auth-params")...)
}

// brokerClientKeys are broker.conf's keys of the broker's credentials towards the other
// brokers.
var brokerClientKeys = []config.Key{
	{Name: "brokerClientAuthenticationPlugin", Flag: "broker-client-auth-plugin"},
	{Name: "brokerClientAuthenticationParameters", Flag: "broker-client-auth-params", Secret: true},
}

// brokerKeys are the broker.conf keys the broker has.
var brokerKeys = []config.Key{
	{Name: "metadataStoreUrl", Flag: "metadata-url", Map: etcdURL},
	{Name: "configurationMetadataStoreUrl", Flag: "configuration-metadata-store-url", Map: etcdURL},
	{Name: "configurationStoreServers", Flag: "configuration-metadata-store-url", Map: etcdURL},
	{Name: "bindAddress"},
	{Name: "brokerServicePort", Flag: "listen", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "webServicePort", Flag: "http", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "clusterName", Flag: "cluster"},
	{Name: "defaultNumberOfNamespaceBundles", Flag: "default-bundles"},
	{Name: "managedLedgerDefaultEnsembleSize", Flag: "ensemble"},
	{Name: "managedLedgerDefaultWriteQuorum", Flag: "write-quorum"},
	{Name: "managedLedgerDefaultAckQuorum", Flag: "ack-quorum"},
	{Name: "maxMessageSize", Flag: "max-message-size"},
	{Name: "allowAutoTopicCreation", Flag: "disable-auto-topic-creation", Map: config.Not},
	{Name: "brokerDeduplicationEnabled", Flag: "disable-deduplication", Map: config.Not},
	{Name: "metadataStoreSessionTimeoutMillis", Flag: "session-ttl", Map: config.Millis},
	{Name: "zooKeeperSessionTimeoutMillis", Flag: "session-ttl", Map: config.Millis},
	{Name: "transactionCoordinatorEnabled", Flag: "transaction-coordinator-enabled"},
}
