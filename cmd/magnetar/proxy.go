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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/config"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/proxy"
)

func init() { register(newProxyCmd) }

func newProxyCmd() *cobra.Command {
	var (
		metaURL, listen, httpAddr, logLevel string
		serviceURLs, webURLs                []string
		maxLookups, maxConns                int
		forwardCreds                        bool
		brokerAuth                          clientSecurity
		af                                  authFlags
		tf                                  tlsFlags
		wf                                  websocketFlags
	)
	c := &cobra.Command{
		Use:   "proxy",
		Short: "Run a Pulsar proxy: one address for clients that cannot reach the brokers",
		Long: `Run a Pulsar proxy (as Pulsar's pulsar-proxy). Clients use the proxy's pulsar:// URL;
lookups answer the owning broker with proxy_through_service_url, and the client's connections
to that broker go through the proxy. The admin and lookup REST API (/admin/v2, /admin/v3,
/lookup/v2) on --http is forwarded to the brokers, following redirects to the topic's owner.
Brokers are found in the metadata store (--metadata-url) or given (--broker-service-url,
--broker-web-service-url). The proxy keeps no state: run as many as you like.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := setupLogging(logLevel); err != nil {
				return err
			}
			if metaURL == "" && len(serviceURLs) == 0 {
				return usageError{errors.New("need --metadata-url or --broker-service-url to find the brokers")}
			}
			if listen == "" && tf.listen == "" {
				return usageError{errors.New("need --listen or --listen-tls")}
			}
			for _, u := range serviceURLs {
				if _, err := proxy.ServiceHosts(u); err != nil {
					return usageError{fmt.Errorf("--broker-service-url: %w", err)}
				}
			}
			if maxLookups < 1 {
				return usageError{fmt.Errorf("--max-concurrent-lookup-requests must be at least 1, got %d", maxLookups)}
			}
			if maxConns < 0 {
				return usageError{fmt.Errorf("--max-concurrent-inbound-connections must not be negative, got %d", maxConns)}
			}
			if af.authz || len(af.proxyRoles) > 0 || len(af.superUsers) > 0 {
				return usageError{errors.New("--authorization-enabled, --superuser-roles and --proxy-roles are the brokers': the proxy forwards the client's role and the brokers authorize it")}
			}
			authn, err := af.service()
			if err != nil {
				return err
			}
			method, data, _, _, err := brokerAuth.credentials()
			if err != nil {
				return usageError{fmt.Errorf("--broker-client-auth-plugin/--broker-client-auth-params: %w", err)}
			}
			if method == auth.MethodTLS {
				return usageError{errors.New("--broker-client-auth-plugin tls needs TLS to the brokers, which the proxy does not do yet")}
			}
			ts, err := tf.server()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sd := newShutdown("proxy", stop)
			defer sd.done()
			var store metadata.Store
			if metaURL != "" {
				if store, err = openStore(ctx, metaURL); err != nil {
					return err
				}
				defer store.Close()
			}
			reg := prometheus.NewRegistry() // the proxy's metrics and the WebSocket API's
			pc := proxy.Config{Store: store, BrokerServiceURLs: serviceURLs, BrokerWebServiceURLs: webURLs,
				Listen: listen, Auth: authn, BrokerAuthMethod: method, BrokerAuthData: data,
				ForwardAuthorizationCredentials: forwardCreds, MaxConcurrentLookups: maxLookups,
				MaxConnections: maxConns, Logger: slog.Default(), Registerer: reg}
			if ts != nil && tf.listen != "" {
				pc.ListenTLS, pc.TLS = tf.listen, ts.Config()
			}
			// The HTTP ports first (a taken port fails here naming its flag), then the
			// protocol listeners.
			mux := http.NewServeMux()
			var svc *proxy.Service
			mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			mountPprof(mux, authn, nil) // the proxy has no superusers: with authentication on, nobody
			mux.Handle("/", withAuth(authn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				svc.HTTPHandler().ServeHTTP(w, r)
			})))
			started := make(chan struct{})
			gate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-started
				mux.ServeHTTP(w, r)
			})
			httpURL, httpsURL, err := serveWeb(ctx, httpAddr, tf.https, ts, gate)
			if err != nil {
				return err
			}
			svc, err = proxy.Start(ctx, pc)
			if err != nil {
				if errors.Is(err, syscall.EADDRINUSE) {
					if pc.Listen != "" {
						return listenError("--listen", listen, err)
					}
					return listenError("--listen-tls", tf.listen, err)
				}
				return err
			}
			defer svc.Close()
			var wsURL string // the WebSocket API connects to the proxy's own listener
			if a := svc.Addr(); a != nil {
				wsURL = "pulsar://" + a.String()
			}
			closeWS, err := wf.mount(mux, wsURL, authn, reg)
			if err != nil {
				return err
			}
			defer closeWS() // before the proxy closes
			close(started)
			var urls []string
			if a := svc.Addr(); a != nil {
				urls = append(urls, "pulsar://"+a.String())
			}
			if a := svc.AddrTLS(); a != nil {
				urls = append(urls, "pulsar+ssl://"+a.String())
			}
			fmt.Fprintf(os.Stdout, "proxy serving %s\n", joinNonEmpty(append(urls, adminURL(httpURL), adminURL(httpsURL))...))
			<-ctx.Done()
			sd.begin()
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&metaURL, "metadata-url", "", "metadata store the brokers register in, etcd://host:port[,host:port...]")
	f.StringSliceVar(&serviceURLs, "broker-service-url", nil, "brokers' pulsar://host:port[,host:port...] (with no metadata store, or while it lists none)")
	f.StringSliceVar(&webURLs, "broker-web-service-url", nil, "brokers' admin http://host:port[,host:port...] (with no metadata store, or while it lists none)")
	f.StringVar(&listen, "listen", "127.0.0.1:6650", "Pulsar protocol listen address (empty: none)")
	f.StringVar(&httpAddr, "http", "127.0.0.1:8080", "admin/lookup REST and metrics HTTP address (empty disables)")
	f.IntVar(&maxLookups, "max-concurrent-lookup-requests", 50000, "lookup and metadata requests in flight; past it clients get TooManyRequests")
	f.IntVar(&maxConns, "max-concurrent-inbound-connections", 10000, "client connections; past it new ones are refused (0: no limit)")
	f.BoolVar(&forwardCreds, "forward-authorization-credentials", false, "send the client's credentials to the brokers besides its role (authentication on)")
	f.StringVar(&brokerAuth.authPlugin, "broker-client-auth-plugin", "", "the proxy's own authentication to the brokers: token or basic")
	f.StringVar(&brokerAuth.authParams, "broker-client-auth-params", "", "the proxy's credentials: token:JWT or file:///path (token); u:p (basic)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	af.add(f)
	for _, n := range []string{"authorization-enabled", "superuser-roles", "proxy-roles"} {
		f.MarkHidden(n) //nolint:errcheck // the flags exist
	}
	tf.add(f, "listen-tls")
	wf.add(f, false)
	return withConfig(c, slices.Concat(proxyKeys, brokerClientKeys, proxyAuthKeys(), proxyTLSKeys(), websocketKeys),
		append(slices.Clone(authSecretFlags), "broker-client-auth-params")...)
}

// proxyKeys are the proxy.conf keys the proxy has.
var proxyKeys = []config.Key{
	{Name: "metadataStoreUrl", Flag: "metadata-url", Map: etcdURL},
	{Name: "brokerServiceURL", Flag: "broker-service-url"},
	{Name: "brokerWebServiceURL", Flag: "broker-web-service-url"},
	{Name: "bindAddress"},
	{Name: "servicePort", Flag: "listen", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "servicePortTls", Flag: "listen-tls", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "webServicePort", Flag: "http", Map: portOn("bindAddress", "0.0.0.0", true)},
	{Name: "maxConcurrentLookupRequests", Flag: "max-concurrent-lookup-requests"},
	{Name: "maxConcurrentInboundConnections", Flag: "max-concurrent-inbound-connections"},
	{Name: "forwardAuthorizationCredentials", Flag: "forward-authorization-credentials"},
}

// proxyAuthKeys are the authentication keys the proxy shares with the broker (not its
// authorization keys: the brokers authorize).
func proxyAuthKeys() []config.Key {
	return slices.DeleteFunc(slices.Clone(authKeys), func(k config.Key) bool {
		return k.Flag == "authorization-enabled" || k.Flag == "superuser-roles" || k.Flag == "proxy-roles"
	})
}

// proxyTLSKeys are the TLS keys the proxy shares with the broker (its TLS port is
// servicePortTls, in proxyKeys).
func proxyTLSKeys() []config.Key {
	return slices.DeleteFunc(tlsKeys("listen-tls"), func(k config.Key) bool { return k.Name == "brokerServicePortTls" })
}
