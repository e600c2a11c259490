package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/loadmgr"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/tlsconf"
)

// brokerSettings are what the broker and standalone commands give their broker: the same
// fields from the flags both have, and, marked below, those where the two differ on purpose.
type brokerSettings struct {
	store             metadata.Store
	configStore       metadata.Store // nil: store is the configuration store too
	listen            string         // Pulsar protocol address; empty disables the plain listener
	httpURL, httpsURL string         // the admin web service's URLs (lookups report them)
	cluster           string
	maxMessageSize    int
	noAutoCreate      bool
	noDedup           bool
	txn               bool
	authn             *auth.Service
	auth              *authFlags
	ts                *tlsconf.Server // nil without TLS
	tls               *tlsFlags
	pol               *policyFlags
	lb                *loadmgr.Flags
	adv               advertisedFlags // Pulsar's advertisedAddress, advertisedListeners, internalListenerName
	// offloader and offloadPolicy: tiered storage and ledger rollover (offloadFlags.open;
	// offloader nil: offload off).
	offloader     mledger.Offloader
	offloadPolicy ledgerSettings

	// Ensemble, write and ack quorum: the broker's flags; standalone 1/1/1 (one bookie).
	ensemble, writeQuorum, ackQuorum int
	// txnCoordinators: the broker's --transaction-coordinators (16 by default); standalone 1.
	txnCoordinators int
	// bookieDial: the broker's --bookie-client-* TLS dialer; standalone dials its own bookie
	// in process.
	bookieDial func(ctx context.Context, addr string) (net.Conn, error)
	// executor carries out the load manager's transfers and splits with the broker's own
	// credentials (--broker-client-auth-*); standalone has no such flags: nil, the load
	// manager's default (no credentials).
	executor *loadmgr.Executor

	// Only the broker has flags for these; standalone leaves them zero, which the broker
	// package defaults to the values the broker's flags default to (session TTL 10 s, 4
	// bundles, the advertised address as the id).
	advertise, id  string
	sessionTTL     time.Duration
	defaultBundles int
}

// brokerConfig builds the broker's configuration from s: the one place the commands' flags
// become a broker.Config.
func brokerConfig(s brokerSettings) broker.Config {
	bc := broker.Config{
		Store: s.store, ConfigStore: s.configStore, Listen: s.listen, DisablePlain: s.listen == "", Advertise: s.advertise,
		HTTPURL: s.httpURL, HTTPURLTLS: s.httpsURL, ID: s.id, Cluster: s.cluster,
		SessionTTL: s.sessionTTL, MaxMessageSize: s.maxMessageSize, DisableAutoTopicCreation: s.noAutoCreate,
		DisableDeduplication: s.noDedup, Ensemble: s.ensemble, WriteQuorum: s.writeQuorum, AckQuorum: s.ackQuorum,
		BookieDial: s.bookieDial, Auth: s.authn, Authz: s.auth.authorizer(), ProxyRoles: s.auth.proxyRoles,
		AuthRefreshInterval: s.auth.refresh, Logger: slog.Default(),
		TransactionCoordinatorEnabled: s.txn, TransactionCoordinators: s.txnCoordinators,
		DefaultNumberOfNamespaceBundles: s.defaultBundles,
	}
	s.adv.apply(&bc)
	if s.ts != nil && s.tls.listen != "" {
		bc.ListenTLS, bc.TLS = s.tls.listen, s.ts.Config()
	}
	s.pol.apply(&bc)
	bc.Offloader = s.offloader
	s.offloadPolicy.apply(&bc.ManagedLedger)
	if s.lb != nil {
		s.lb.Apply(&bc.LoadManager)
	}
	bc.LoadManager.Executor = s.executor
	if s.executor != nil {
		// Every call to a peer broker goes with the same credentials (package broker/peer).
		bc.PeerHTTP = s.executor.Client
	}
	return bc
}

// addConfigStoreFlag adds --configuration-metadata-store-url (Pulsar's
// configurationMetadataStoreUrl) to the commands that run a broker.
func addConfigStoreFlag(c *cobra.Command, dst *string) {
	c.Flags().StringVar(dst, "configuration-metadata-store-url", "",
		"configuration store shared between clusters (cluster records, tenants, namespaces, partitioned topics), "+
			"etcd://host:port[,host:port...] (default: the metadata store)")
}

// openConfigStore opens the configuration store named by confURL, or returns nil when it
// is the metadata store at metaURL (unset, or the same hosts).
func openConfigStore(ctx context.Context, metaURL, confURL string) (metadata.Store, error) {
	if confURL == "" {
		return nil, nil
	}
	ceps, err := metadata.ParseURL(confURL)
	if err != nil {
		return nil, usageError{fmt.Errorf("--configuration-metadata-store-url: %w", err)}
	}
	if meps, err := metadata.ParseURL(metaURL); err == nil && sameHosts(meps, ceps) {
		return nil, nil
	}
	return openStoreFlag(ctx, "--configuration-metadata-store-url", confURL)
}

// sameHosts reports whether two endpoint lists name the same hosts, in any order.
func sameHosts(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
