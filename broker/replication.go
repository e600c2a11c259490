package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
	"github.com/magnetar-io/magnetar/broker/replhost"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/replication"
)

// Geo-replication (package broker/replhost, over the core of package replication): every
// loaded persistent topic whose replication clusters (its own, else its namespace's) name
// other clusters has one replicator per remote cluster. The registry calls onPolicies
// when a topic loads and whenever its namespace's or its own policy record changes; the
// replicators stop with the topic. A remote cluster is reached with a client built from
// its cluster record (brokerServiceUrl, or brokerServiceUrlTls with
// brokerClientTlsEnabled; its authentication plugin and parameters; its trust
// certificates), made once per record version; a replicator asks for it at each connect,
// so an updated record applies at its next reconnect.

// remoteClients caches one Pulsar client per remote cluster, keyed by its record.
type remoteClients struct {
	mu      sync.Mutex // guards the fields below
	clients map[string]remoteClient
	retired []*pulsarclient.Client // built from an older record; closed with the broker
}

type remoteClient struct {
	record string // the cluster record it was built from (JSON)
	cl     *pulsarclient.Client
}

func (s *Service) newReplication() *replhost.Host {
	s.remotes.clients = map[string]remoteClient{}
	h := replhost.New(replhost.Config{LocalCluster: s.cfg.Cluster, Remote: s.remoteCluster,
		Core:   replication.Config{MaxPending: s.cfg.ReplicationProducerQueueSize},
		Logger: s.log})
	s.reg.MustRegister(h.Collector())
	return h
}

// onPolicies starts and stops loaded topic t's replicators after its policies changed
// (r: the policies in force), and gives them the message TTL and the replicator dispatch
// rate.
func (s *Service) onPolicies(ctx context.Context, t *topic.Topic, r policy.Resolved) {
	if s.repl == nil || !t.Name().IsPersistent() {
		return
	}
	set := replhost.Settings{MessageTTLMs: r.TTL * 1000}
	set.RateMsgs, set.RateBytes = s.replicatorRate(ctx, t)
	s.repl.Update(ctx, t, r.ReplicationClusters, set)
}

// replicatorRate resolves topic t's replicator dispatch rate (Pulsar's
// replicatorDispatchRate: the topic's, else this cluster's entry of the namespace's), per
// second; 0: off.
func (s *Service) replicatorRate(ctx context.Context, t *topic.Topic) (msgs, bytes int64) {
	n := t.Name()
	tr, err := s.TopicRecord(ctx, n)
	if err != nil {
		return 0, 0
	}
	np, err := s.res.NamespacePolicies(ctx, n.Tenant, n.Namespace)
	if err != nil {
		return 0, 0
	}
	nr, err := policy.RecordOf(np)
	if err != nil {
		return 0, 0
	}
	var dr api.DispatchRate
	if !s.pol.DecodeApplied(tr, nr, "replicatorDispatchRate", &dr) {
		return 0, 0
	}
	period := int64(max(dr.RatePeriodInSecond, 1))
	return max(dr.DispatchThrottlingRateInMsg, 0) / period, max(dr.DispatchThrottlingRateInByte, 0) / period
}

// remoteCluster returns the client of cluster name, from its record.
func (s *Service) remoteCluster(ctx context.Context, name string) (replhost.Remote, error) {
	cd, err := s.res.Cluster(ctx, name)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(cd)
	s.remotes.mu.Lock()
	defer s.remotes.mu.Unlock()
	if rc, ok := s.remotes.clients[name]; ok {
		if rc.record == string(b) {
			return rc.cl, nil
		}
		// The record changed: the next connects use a new client; the old one's sessions
		// run until they end.
		s.remotes.retired = append(s.remotes.retired, rc.cl)
	}
	cl, err := newRemoteClient(cd, s)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	s.remotes.clients[name] = remoteClient{record: string(b), cl: cl}
	return cl, nil
}

// closeRemotes closes the remote clients.
func (s *Service) closeRemotes() {
	s.remotes.mu.Lock()
	defer s.remotes.mu.Unlock()
	for n, rc := range s.remotes.clients {
		rc.cl.Close() //nolint:errcheck // closing
		delete(s.remotes.clients, n)
	}
	for _, cl := range s.remotes.retired {
		cl.Close() //nolint:errcheck // closing
	}
	s.remotes.retired = nil
}

func newRemoteClient(cd api.ClusterData, s *Service) (*pulsarclient.Client, error) {
	url := cd.BrokerServiceURL
	if cd.BrokerClientTLSEnabled && cd.BrokerServiceURLTLS != "" {
		url = cd.BrokerServiceURLTLS
	}
	if url == "" {
		return nil, errors.New("the cluster record has no broker service URL")
	}
	opts := pulsarclient.Options{URL: url, Logger: s.log}
	if strings.HasPrefix(url, "pulsar+ssl://") {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cd.TLSAllowInsecureConnection} //nolint:gosec // the record asks for it
		if f := cd.BrokerClientTrustCertsFilePath; f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("trust certificates: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("trust certificates %s: no PEM certificate", f)
			}
			tc.RootCAs = pool
		}
		if cd.BrokerClientCertificateFilePath != "" && cd.BrokerClientKeyFilePath != "" {
			cert, err := tls.LoadX509KeyPair(cd.BrokerClientCertificateFilePath, cd.BrokerClientKeyFilePath)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts.TLS = tc
	}
	a, err := clusterAuth(cd.AuthenticationPlugin, cd.AuthenticationParameters)
	if err != nil {
		return nil, err
	}
	opts.Auth = a
	return pulsarclient.New(opts)
}

// clusterAuth resolves a cluster record's authentication plugin and parameters (Pulsar's
// class names or token/basic; token:JWT, file:///path, a bare token; {"userId","password"}
// or user:password). An empty plugin: no credentials.
func clusterAuth(plugin, params string) (*pulsarclient.Authentication, error) {
	p := strings.TrimSpace(params)
	switch plugin {
	case "":
		return nil, nil
	case "org.apache.pulsar.client.impl.auth.AuthenticationToken", "token":
		if strings.HasPrefix(p, "file:") {
			path := strings.TrimPrefix(strings.TrimPrefix(p, "file://"), "file:")
			return &pulsarclient.Authentication{Method: auth.MethodToken, Data: func() ([]byte, error) {
				b, err := os.ReadFile(path)
				return []byte(strings.TrimSpace(string(b))), err
			}}, nil
		}
		tok := []byte(strings.TrimPrefix(p, "token:"))
		return &pulsarclient.Authentication{Method: auth.MethodToken, Data: func() ([]byte, error) { return tok, nil }}, nil
	case "org.apache.pulsar.client.impl.auth.AuthenticationBasic", "basic":
		var up struct {
			UserID   string `json:"userId"`
			Password string `json:"password"`
		}
		if strings.HasPrefix(p, "{") {
			if err := json.Unmarshal([]byte(p), &up); err != nil {
				return nil, fmt.Errorf("authentication parameters: %w", err)
			}
		} else {
			up.UserID, up.Password, _ = strings.Cut(p, ":")
		}
		b := []byte(up.UserID + ":" + up.Password)
		return &pulsarclient.Authentication{Method: auth.MethodBasic, Data: func() ([]byte, error) { return b, nil }}, nil
	}
	return nil, fmt.Errorf("authentication plugin %q is not supported for replication", plugin)
}
