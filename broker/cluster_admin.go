package broker

import (
	"context"
	"fmt"

	"github.com/magnetar-io/magnetar/metadata"
)

// Exported cluster API (the admin layer's brokers, clusters and namespace-bundle
// resources): bundles, their unloading, hand-over and splitting, and the brokers. Package
// broker/ownership does the work; these delegate.

// NamespaceBundles returns the bundles of namespace "tenant/ns".
func (s *Service) NamespaceBundles(ctx context.Context, ns string) (BundlesData, error) {
	return s.own.NamespaceBundles(ctx, ns)
}

// TopicBundle returns the range of the bundle topic belongs to ("0x00000000_0x40000000").
func (s *Service) TopicBundle(ctx context.Context, topic string) (string, error) {
	return s.own.TopicBundle(ctx, topic)
}

// UnloadBundle unloads bundle ("0x00000000_0x40000000") of namespace ns from this broker,
// which must own it (*NotOwnerError names the owner). With destination (a broker id, or
// its service or web service URL or host:port) the bundle is handed over: the destination
// takes it as soon as it is released, and the clients are sent there directly. A bundle
// nobody owns is left as it is.
func (s *Service) UnloadBundle(ctx context.Context, ns, bundle, destination string) error {
	return s.own.UnloadBundle(ctx, ns, bundle, destination)
}

// UnloadNamespace unloads every bundle of namespace ns: those this broker owns here, the
// others by asking their owners with this broker's credentials (package broker/peer), as
// Pulsar's broker does with its own admin client.
func (s *Service) UnloadNamespace(ctx context.Context, ns string) error {
	return s.own.UnloadNamespace(ctx, ns)
}

// SplitBundle splits bundle of namespace ns, which this broker must own, into two halves
// (algorithm range_equally_divide, the default; Pulsar's other algorithms are refused).
// The halves stay here, unless unload, which unloads them.
func (s *Service) SplitBundle(ctx context.Context, ns, bundle string, unload bool, algorithm string) error {
	return s.own.SplitBundle(ctx, ns, bundle, unload, algorithm)
}

// Brokers lists the ids of the live brokers of cluster ("" or this broker's cluster).
func (s *Service) Brokers(ctx context.Context, cluster string) ([]string, error) {
	if cluster != "" && cluster != s.info.Cluster {
		if _, err := s.Cluster(ctx, cluster); err != nil {
			return nil, err
		}
	}
	return s.own.Brokers(cluster), nil
}

// LiveBroker returns the record of live broker id (its id or URL, see UnloadBundle).
func (s *Service) LiveBroker(ctx context.Context, id string) (BrokerInfo, error) {
	return s.own.FindBroker(id)
}

// LeaderBroker returns the load manager's leader (metadata.LoadBalanceLeaderKey).
func (s *Service) LeaderBroker(ctx context.Context) (BrokerInfo, error) {
	return s.own.LeaderBroker(ctx)
}

// OwnedNamespaces returns the bundles this broker owns, as Pulsar's ownedNamespaces
// ("tenant/ns/0x00000000_0x40000000" → status).
func (s *Service) OwnedNamespaces(ctx context.Context) map[string]NamespaceOwnership {
	return s.own.OwnedNamespaces(ctx)
}

// Healthy reports whether the broker can serve: its metadata session is alive and the
// store answers.
func (s *Service) Healthy(ctx context.Context) error {
	select {
	case <-s.session().Done():
		return fmt.Errorf("%w: metadata session lost", ErrServiceNotReady)
	default:
	}
	if _, err := s.store.Get(ctx, metadata.BrokerKey(s.info.ID)); err != nil {
		return fmt.Errorf("%w: metadata store: %v", ErrServiceNotReady, err)
	}
	return nil
}
