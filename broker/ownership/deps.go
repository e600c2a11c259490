package ownership

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// What ownership needs from the broker it runs in, each interface as small as its use.

// Broker is the broker whose bundles the Manager keeps.
type Broker interface {
	// Info is the broker's record; its ID is set before the first acquisition.
	Info() api.BrokerInfo
	// Session is the broker's current metadata session (ownership records are bound to it).
	Session() metadata.Session
	// CloseTopics closes the loaded topics that match, sending their clients to redirect
	// (nil: they look the topics up again), and waits until they stopped.
	CloseTopics(ctx context.Context, match func(topicname.Name) bool, redirect *topic.Redirect)
}

// Namespaces reads namespace policies and keeps the bundles (package resources' Records).
type Namespaces interface {
	// CachedPolicies returns a namespace's policies from the watched cache (the store if
	// the cache does not hold it); api.ErrNamespaceNotFound wrapped if it has no record.
	CachedPolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error)
	// CachedBundlePolicies is CachedPolicies with the bundles in force in this cluster
	// (its splits', kept apart from the policies, which other clusters may share).
	CachedBundlePolicies(ctx context.Context, tenant, ns string) (api.NamespacePolicies, error)
	// SetBundles records the bundles change returns, given the policies with the bundles
	// in force read from the store (compare-and-swap), and returns the record's version.
	SetBundles(ctx context.Context, tenant, ns string, change func(api.NamespacePolicies) (any, error)) (metadata.Version, error)
	// WaitBundles waits until the watched cache holds version v of the bundles' record.
	WaitBundles(ctx context.Context, tenant, ns string, v metadata.Version) error
}

// Placement assigns unowned bundles: the load manager, or a selector configured in its place.
type Placement interface {
	// Selector returns the selector in force (nil: the Manager's own, the live broker owning
	// the fewest bundles).
	Selector() BrokerSelector
	// Leader returns the id of the broker that assigns unowned bundles, if one is elected
	// (ok false: every broker decides for itself).
	Leader() (id string, ok bool)
}

// Peers asks other brokers to unload their bundles (package broker/peer's Client).
type Peers interface {
	BundleUnload(ctx context.Context, ownerURL, ns, rng, dest string) error
}

// Config is what a Manager is built with.
type Config struct {
	Store    metadata.Store
	Registry prometheus.Registerer // its metrics (nil: not registered)
	Logger   *slog.Logger          // nil: slog.Default()
	// DefaultBundles is the number of bundles of a namespace without bundles in its
	// policies (0: DefaultBundles).
	DefaultBundles int
	// SessionTTL is the metadata session's ttl (LocalDeadline derives from it).
	SessionTTL time.Duration
	// AcquireWait bounds one acquisition of a bundle, including the wait for a bundle
	// handed over to this broker to be released by its owner (0: 10 s).
	AcquireWait time.Duration
	Namespaces  Namespaces
	Placement   Placement // nil: the Manager's own selector, no leader
	Peers       Peers
}
