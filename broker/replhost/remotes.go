package replhost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// Clusters reads cluster records (package broker/resources).
type Clusters interface {
	Cluster(ctx context.Context, name string) (api.ClusterData, error)
}

// Remotes caches one Pulsar client per remote cluster, built from its cluster record
// (service URL, TLS, credentials) and rebuilt when the record changes; its Remote method
// is Config.Remote. Safe for concurrent use.
type Remotes struct {
	clusters Clusters
	log      *slog.Logger

	mu struct {
		sync.Mutex // guards the fields below
		clients    map[string]remoteClient
		retired    []*pulsarclient.Client // built from an older record; closed by Close
		admins     map[string]remoteAdmin
	}
}

type remoteAdmin struct {
	record string
	admin  *adminClient
}

// NewRemotes returns the remote clusters' clients, built from the records of clusters.
func NewRemotes(clusters Clusters, log *slog.Logger) *Remotes {
	r := &Remotes{clusters: clusters, log: log}
	r.mu.clients = map[string]remoteClient{}
	r.mu.admins = map[string]remoteAdmin{}
	return r
}

type remoteClient struct {
	record string // the cluster record it was built from (JSON)
	cl     *pulsarclient.Client
}

// Remote returns the client of cluster name, from its record.
func (r *Remotes) Remote(ctx context.Context, name string) (Remote, error) {
	cd, err := r.clusters.Cluster(ctx, name)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(cd)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc, ok := r.mu.clients[name]; ok {
		if rc.record == string(b) {
			return rc.cl, nil
		}
		// The record changed: the next connects use a new client; the old one's sessions
		// run until they end.
		r.mu.retired = append(r.mu.retired, rc.cl)
	}
	cl, err := newRemoteClient(cd, r.log)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	r.mu.clients[name] = remoteClient{record: string(b), cl: cl}
	return cl, nil
}

// Close closes the remote clients.
func (r *Remotes) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, rc := range r.mu.clients {
		rc.cl.Close() //nolint:errcheck // closing
		delete(r.mu.clients, n)
	}
	for _, cl := range r.mu.retired {
		cl.Close() //nolint:errcheck // closing
	}
	r.mu.retired = nil
}

// Admin returns the admin API client of cluster name (its record's serviceUrl, or
// serviceUrlTls with brokerClientTlsEnabled; its credentials and TLS), rebuilt when the
// record changes.
func (r *Remotes) Admin(ctx context.Context, name string) (RemoteAdmin, error) {
	cd, err := r.clusters.Cluster(ctx, name)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(cd)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ra, ok := r.mu.admins[name]; ok && ra.record == string(b) {
		return ra.admin, nil
	}
	a, err := newAdminClient(cd)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	r.mu.admins[name] = remoteAdmin{record: string(b), admin: a}
	return a, nil
}

// clusterTLS is the TLS configuration toward a cluster, from its record.
func clusterTLS(cd api.ClusterData) (*tls.Config, error) {
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
	return tc, nil
}

func newRemoteClient(cd api.ClusterData, log *slog.Logger) (*pulsarclient.Client, error) {
	url := cd.BrokerServiceURL
	if cd.BrokerClientTLSEnabled && cd.BrokerServiceURLTLS != "" {
		url = cd.BrokerServiceURLTLS
	}
	if url == "" {
		return nil, errors.New("the cluster record has no broker service URL")
	}
	// The lookups answer the URLs of the record's advertised listener ("": the internal one).
	opts := pulsarclient.Options{URL: url, Logger: log, ListenerName: cd.ListenerName}
	if strings.HasPrefix(url, "pulsar+ssl://") {
		tc, err := clusterTLS(cd)
		if err != nil {
			return nil, err
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
