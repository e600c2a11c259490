package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/loadmgr"
)

// TestBrokerConfig: the shared settings land in the same broker.Config fields for both
// commands, and the differences are the ones each command passes.
func TestBrokerConfig(t *testing.T) {
	dial := func(context.Context, string) (net.Conn, error) { return nil, nil }
	common := brokerSettings{listen: "127.0.0.1:6651", httpURL: "http://h:8080", httpsURL: "https://h:8443",
		cluster: "c1", maxMessageSize: 4096, noAutoCreate: true, noDedup: true, txn: true,
		auth: &authFlags{refresh: 7 * time.Second, proxyRoles: []string{"proxy"}}, tls: &tlsFlags{}, pol: &policyFlags{},
		bookieDial: dial}

	broker := common
	broker.ensemble, broker.writeQuorum, broker.ackQuorum, broker.txnCoordinators = 3, 2, 2, 16
	broker.executor = &loadmgr.Executor{}
	broker.advertise, broker.id, broker.sessionTTL, broker.defaultBundles = "adv:6650", "b1", 20*time.Second, 8
	standalone := common
	standalone.ensemble, standalone.writeQuorum, standalone.ackQuorum, standalone.txnCoordinators = 1, 1, 1, 1

	for name, s := range map[string]brokerSettings{"broker": broker, "standalone": standalone} {
		bc := brokerConfig(s)
		if bc.Listen != "127.0.0.1:6651" || bc.DisablePlain || bc.HTTPURL != "http://h:8080" || bc.HTTPURLTLS != "https://h:8443" ||
			bc.Cluster != "c1" || bc.MaxMessageSize != 4096 || !bc.DisableAutoTopicCreation || !bc.DisableDeduplication ||
			!bc.TransactionCoordinatorEnabled || bc.AuthRefreshInterval != 7*time.Second || len(bc.ProxyRoles) != 1 ||
			bc.BookieDial == nil || bc.Logger == nil || bc.TLS != nil {
			t.Errorf("%s: shared settings not applied: %+v", name, bc)
		}
		if bc.Ensemble != s.ensemble || bc.WriteQuorum != s.writeQuorum || bc.AckQuorum != s.ackQuorum ||
			bc.TransactionCoordinators != s.txnCoordinators || bc.LoadManager.Executor != s.executor ||
			bc.Advertise != s.advertise || bc.ID != s.id || bc.SessionTTL != s.sessionTTL ||
			bc.DefaultNumberOfNamespaceBundles != s.defaultBundles {
			t.Errorf("%s: per-command settings not applied: %+v", name, bc)
		}
	}
	common.listen = ""
	if bc := brokerConfig(common); !bc.DisablePlain {
		t.Error("an empty listen address does not disable the plain listener")
	}
}
