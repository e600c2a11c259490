package scalablehost

import (
	"context"
	"log/slog"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/scalable"
	"github.com/magnetar-io/magnetar/scalable/layout"
)

// Config tunes the scalable-topic controllers (the broker's Config.Scalable).
type Config struct {
	// TickInterval is the controllers' tick: drain polls, GC, auto-scale (default 1 s).
	TickInterval time.Duration
	// Retention is how long a drained sealed segment is kept (default 1 h).
	Retention time.Duration
	// ConsumerGrace is how long a stream consumer that stopped polling keeps its assignment
	// (default 60 s, as upstream).
	ConsumerGrace time.Duration
	// Policy is the auto-scale policy (scalable.DefaultPolicy, off, if zero).
	Policy scalable.Policy
	// SampleInterval is how often the leader samples its active segments' load for the
	// policy, when it is enabled (default 10 s).
	SampleInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.TickInterval <= 0 {
		c.TickInterval = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = time.Hour
	}
	if c.ConsumerGrace <= 0 {
		c.ConsumerGrace = time.Minute
	}
	if c.Policy == (scalable.Policy{}) {
		c.Policy = scalable.DefaultPolicy()
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = 10 * time.Second
	}
	return c
}

// Env is what a Host runs in: the store holding the records it owns, where its metrics and
// logs go, and the broker's views below. The broker root builds it.
type Env struct {
	// Store holds the layout and controller records (metadata.PrefixScalableTopics); the
	// controllers campaign and commit through it.
	Store metadata.Store
	// SessionTTL is the lease of the controllers' election sessions (0: 10 s).
	SessionTTL time.Duration
	Registry   prometheus.Registerer // the host's metrics (nil: not registered)
	Logger     *slog.Logger          // nil: slog.Default()
	Broker     Broker
	Segments   Segments
	Peers      Peers
}

// What the host needs of the broker it runs in, each interface as small as its use. The
// broker root implements them; every method is safe for concurrent use.

// Broker is the broker the host runs in and its view of the cluster.
type Broker interface {
	// ID is this broker's id: the value of the controller records it wins.
	ID() string
	// LiveBroker returns the record of live broker id (an error if it is not live).
	LiveBroker(ctx context.Context, id string) (api.BrokerInfo, error)
	// Lookup returns the broker serving topic (its owner's URLs; ServiceURL "" if unknown).
	Lookup(ctx context.Context, topic string) (api.LookupResult, error)
	// CheckNamespace returns api.ErrNamespaceNotFound (or api.ErrTenantNotFound) wrapped if
	// namespace tenant/ns does not exist.
	CheckNamespace(ctx context.Context, tenant, ns string) error
}

// Segments are the broker's operations on topics (here: segment topics), on this broker
// only: each answers *api.NotOwnerError if another broker serves the topic.
type Segments interface {
	// CreateTopic creates topic name (api.ErrAlreadyExists if it exists) and loads it.
	CreateTopic(ctx context.Context, name string) error
	// DeleteTopic deletes topic name and its data, disconnecting its clients
	// (api.ErrTopicNotFound if it does not exist).
	DeleteTopic(ctx context.Context, name string) error
	// CreateSubscription creates durable subscription sub of topic at at
	// (api.ErrAlreadyExists if it exists).
	CreateSubscription(ctx context.Context, topic, sub string, at api.MessageID) error
	// Terminate terminates topic name's log (idempotent): its producers get TopicTerminated.
	Terminate(ctx context.Context, name string) error
	// TopicStats returns topic name's statistics.
	TopicStats(ctx context.Context, name string) (api.TopicStats, error)
	// ResetCursor moves subscription sub of topic to to; its consumers reconnect.
	ResetCursor(ctx context.Context, topic, sub string, to api.MessageID) error
	// Topic returns topic name, loaded here (api.ErrTopicNotFound if it does not exist).
	Topic(ctx context.Context, name string) (Topic, error)
}

// Topic is a topic loaded here (*topic.Topic).
type Topic interface {
	// Disconnect detaches the consumers of subscription sub for which stale reports true
	// (api.ErrSubscriptionNotFound wrapped if sub does not exist).
	Disconnect(ctx context.Context, sub string, stale func(*topic.Consumer) bool) error
}

var _ Topic = (*topic.Topic)(nil)

// Peers calls other brokers' admin APIs with this broker's credentials (package
// broker/peer's Client; its errors are classified with peer.ErrRefused and
// *peer.StatusError).
type Peers interface {
	// Segment runs op on segment seg of topic t on its owner at ownerURL.
	Segment(ctx context.Context, ownerURL string, t layout.Topic, seg layout.Segment, op string, q url.Values, out any) error
	// Consumer calls the controller leader at leaderURL on a stream consumer's session (its
	// assignment if assignment is set).
	Consumer(ctx context.Context, leaderURL, method string, t layout.Topic, sub, consumer string, assignment bool, q url.Values, out any) error
}
