package broker

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/auth"
	"github.com/magnetar-io/magnetar/broker/schemareg"
	"github.com/magnetar-io/magnetar/broker/server"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/broker/txnhost"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// The protocol server's view of the Service (package broker/server): backend implements
// server.Backend by delegating to the Service's parts; the scalable-topic methods are in
// backend_scalable.go (each delegates to the scalable-topic host).

// backend is the Service as the protocol server's Backend.
type backend struct{ s *Service }

var _ server.Backend = backend{}

// newServer returns the protocol server of s, with the connection metrics registered in
// s.reg; Start gives it the listeners once the broker is up, and Close stops it.
func (s *Service) newServer() *server.Server {
	cfg := s.cfg
	return server.New(s.ctx, backend{s}, server.Config{
		MaxMessageSize: cfg.MaxMessageSize, MaxPendingPublishPerConnection: cfg.MaxPendingPublishPerConnection,
		KeepAliveInterval: cfg.KeepAliveInterval, Auth: cfg.Auth, AuthRefreshInterval: cfg.AuthRefreshInterval,
		ProxyRoles: cfg.ProxyRoles, Authz: cfg.Authz, Logger: s.log, Metrics: server.NewMetrics(s.reg),
	})
}

func (b backend) AuthorizeTopic(ctx context.Context, role string, n topicname.Name, act auth.Action) error {
	return b.s.access.Topic(ctx, role, n, act)
}

func (b backend) AuthorizeSubscription(ctx context.Context, role string, n topicname.Name, sub string) error {
	return b.s.access.Subscription(ctx, role, n, sub)
}

func (b backend) AuthorizeNamespace(ctx context.Context, role, tenant, ns string) error {
	return b.s.access.Namespace(ctx, role, tenant, ns)
}

func (b backend) Lookup(ctx context.Context, topic string, authoritative bool) (LookupResult, error) {
	return b.s.lookupTopic(ctx, topic, authoritative)
}

func (b backend) PartitionedMetadata(ctx context.Context, topic string) (int, error) {
	return b.s.ClientPartitions(ctx, topic)
}

func (b backend) CheckNamespace(ctx context.Context, tenant, ns string) error {
	return b.s.res.CheckNamespace(ctx, tenant, ns)
}

func (b backend) NamespaceTopics(ctx context.Context, tenant, ns, domain string) ([]string, error) {
	return b.s.res.DomainTopics(ctx, tenant, ns, domain)
}

func (b backend) Topic(ctx context.Context, n topicname.Name, create bool) (*topic.Topic, error) {
	return b.s.Topic(ctx, n, create, false)
}

func (b backend) NewProducerName() string { return b.s.newProducerName() }

func (b backend) OfferSchema(ctx context.Context, n topicname.Name, sc *pb.Schema, use server.SchemaUse) ([]byte, error) {
	u := schemareg.Produce
	if use == server.SchemaConsume {
		u = schemareg.Consume
	}
	return b.s.schemas.Offer(ctx, n, sc, u)
}

func (b backend) Schema(ctx context.Context, n topicname.Name, version []byte) (*pb.Schema, []byte, error) {
	return b.s.schemas.Proto(ctx, n, version)
}

func (b backend) TxnCoordinator(ctx context.Context, tc uint64) (server.Coordinator, error) {
	c, err := b.s.txn.Coordinator(ctx, tc)
	if errors.Is(err, txnhost.ErrNoCoordinator) {
		return nil, markedError{err: err, mark: server.ErrNoCoordinator}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// markedError is err, with its message, that also matches mark (errors.Is).
type markedError struct{ err, mark error }

func (e markedError) Error() string   { return e.err.Error() }
func (e markedError) Unwrap() []error { return []error{e.err, e.mark} }
