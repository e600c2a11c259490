package ownership

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// The cluster API behind the admin layer's brokers, clusters and namespace-bundle
// resources (the broker's Service delegates to these): bundles, their unloading, hand-over
// and splitting, and the brokers.

// NamespaceBundles returns the bundles of namespace "tenant/ns".
func (o *Manager) NamespaceBundles(ctx context.Context, ns string) (api.BundlesData, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return api.BundlesData{}, err
	}
	if _, err := o.cfg.Namespaces.CachedPolicies(ctx, t, n); err != nil {
		return api.BundlesData{}, err
	}
	bs, err := o.BundlesOf(ctx, t, n)
	if err != nil {
		return api.BundlesData{}, err
	}
	out := api.BundlesData{NumBundles: len(bs)}
	for _, b := range bs {
		out.Boundaries = append(out.Boundaries, fmt.Sprintf("0x%08x", b.Lower))
	}
	out.Boundaries = append(out.Boundaries, fmt.Sprintf("0x%08x", uint32(LastBoundary)))
	return out, nil
}

// TopicBundle returns the range of the bundle topic belongs to ("0x00000000_0x40000000").
func (o *Manager) TopicBundle(ctx context.Context, topic string) (string, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return "", err
	}
	if _, err := o.cfg.Namespaces.CachedPolicies(ctx, n.Tenant, n.Namespace); err != nil {
		return "", err
	}
	b, err := o.BundleOf(ctx, n)
	return b.Range(), err
}

// NamespaceBundle resolves "tenant/ns" and a bundle range of it.
func (o *Manager) NamespaceBundle(ctx context.Context, ns, bundle string) (Bundle, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return Bundle{}, err
	}
	if _, err := o.cfg.Namespaces.CachedPolicies(ctx, t, n); err != nil {
		return Bundle{}, err
	}
	bs, err := o.BundlesOf(ctx, t, n)
	if err != nil {
		return Bundle{}, err
	}
	want, err := ParseBundle(t+"/"+n, bundle)
	if err != nil {
		return Bundle{}, err
	}
	for _, b := range bs {
		if b == want {
			return b, nil
		}
	}
	return Bundle{}, fmt.Errorf("%w: %s/%s", api.ErrBundleNotFound, ns, bundle)
}

// BundleOwner returns *api.NotOwnerError if another broker owns b, nil if this one does, and
// api.ErrBundleNotFound wrapped if nobody does.
func (o *Manager) BundleOwner(ctx context.Context, b Bundle) error {
	if o.Owned(b) != nil {
		return nil
	}
	r, _, err := o.OwnerOf(ctx, b)
	if err != nil {
		return err
	}
	if r == nil || r.ID == o.b.Info().ID {
		return fmt.Errorf("%w: bundle %s is not owned by any broker", api.ErrBundleNotFound, b)
	}
	return &api.NotOwnerError{Topic: b.String(), Owner: r.BrokerInfo}
}

// UnloadBundle unloads bundle ("0x00000000_0x40000000") of namespace ns from this broker,
// which must own it (*api.NotOwnerError names the owner). With destination (a broker id, or
// its service or web service URL or host:port) the bundle is handed over: the destination
// takes it as soon as it is released, and the clients are sent there directly. A bundle
// nobody owns is left as it is.
func (o *Manager) UnloadBundle(ctx context.Context, ns, bundle, destination string) error {
	b, err := o.NamespaceBundle(ctx, ns, bundle)
	if err != nil {
		return err
	}
	if err := o.BundleOwner(ctx, b); errors.Is(err, api.ErrBundleNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	var to *api.BrokerInfo
	if destination != "" {
		bi, err := o.FindBroker(destination)
		if err != nil {
			return err
		}
		if bi.ID == o.b.Info().ID {
			return nil // already there
		}
		to = &bi
	}
	return o.Release(ctx, b, to)
}

// FindBroker returns the live broker named by id, service URL, web service URL or their
// host:port.
func (o *Manager) FindBroker(name string) (api.BrokerInfo, error) {
	for _, bi := range o.LiveBrokers() {
		for _, v := range []string{bi.ID, bi.ServiceURL, bi.HTTPURL, bi.ServiceURLTLS, bi.HTTPURLTLS, hostPort(bi.ServiceURL), hostPort(bi.HTTPURL)} {
			if v != "" && v == name {
				return bi, nil
			}
		}
	}
	return api.BrokerInfo{}, fmt.Errorf("%w: broker %s is not available", api.ErrInvalidArgument, name)
}

func hostPort(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return ""
}

// UnloadNamespace unloads every bundle of namespace ns: those this broker owns here, the
// others by asking their owners with this broker's credentials (package ownership/peer), as
// Pulsar's broker does with its own admin client.
func (o *Manager) UnloadNamespace(ctx context.Context, ns string) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	if _, err := o.cfg.Namespaces.CachedPolicies(ctx, t, n); err != nil {
		return err
	}
	bs, err := o.BundlesOf(ctx, t, n)
	if err != nil {
		return err
	}
	for _, b := range bs {
		var no *api.NotOwnerError
		switch err := o.BundleOwner(ctx, b); {
		case err == nil:
			if err := o.Release(ctx, b, nil); err != nil {
				return err
			}
		case errors.As(err, &no):
			if err := o.cfg.Peers.BundleUnload(ctx, no.Owner.AdminURL(false), ns, b.Range(), ""); err != nil {
				return fmt.Errorf("unload %s/%s on %s: %w", ns, b.Range(), no.Owner.ID, err)
			}
		case !errors.Is(err, api.ErrBundleNotFound):
			return err
		}
	}
	return nil
}

// SplitBundle splits bundle of namespace ns, which this broker must own, into two halves
// (algorithm range_equally_divide, the default; Pulsar's other algorithms are refused).
// The halves stay here, unless unload, which unloads them.
func (o *Manager) SplitBundle(ctx context.Context, ns, bundle string, unload bool, algorithm string) error {
	if algorithm != "" && algorithm != "range_equally_divide" {
		return fmt.Errorf("%w: unsupported split algorithm %q (range_equally_divide is)", api.ErrInvalidArgument, algorithm)
	}
	b, err := o.NamespaceBundle(ctx, ns, bundle)
	if err != nil {
		return err
	}
	if err := o.BundleOwner(ctx, b); err != nil {
		if errors.Is(err, api.ErrBundleNotFound) { // nobody owns it: take it to split it
			if _, err := o.Acquire(ctx, b); err != nil {
				return err
			}
		} else {
			return err
		}
	}
	t, n, _ := topicname.ParseNamespace(ns)
	bs, err := o.BundlesOf(ctx, t, n)
	if err != nil {
		return err
	}
	if _, err := SplitBoundaries(bs, b); err != nil { // refused early: b is not splittable
		return err
	}
	mid := b.Lower + (b.Upper-b.Lower)/2
	halves := []Bundle{{Namespace: b.Namespace, Lower: b.Lower, Upper: mid}, {Namespace: b.Namespace, Lower: mid, Upper: b.Upper}}
	// The halves' records first, so that no other broker takes one once the policies
	// name them; then the policies; then the parent's record goes.
	for _, h := range halves {
		if _, err := o.Acquire(ctx, h); err != nil {
			return fmt.Errorf("split %s: acquire %s: %w", b, h, err)
		}
	}
	v, err := o.setBoundaries(ctx, t, n, func(bs []Bundle) ([]string, error) { return SplitBoundaries(bs, b) })
	if err != nil {
		for _, h := range halves {
			o.Release(ctx, h, nil) //nolint:errcheck // undoing
		}
		return err
	}
	// Our own lookups find the halves before the parent's record goes.
	if err := o.cfg.Namespaces.WaitBundles(ctx, t, n, v); err != nil {
		return err
	}
	o.Forget(ctx, b)
	o.log.Info("bundle split", "bundle", b.String(), "into", halves[0].Range()+" "+halves[1].Range())
	if unload {
		for _, h := range halves {
			if err := o.Release(ctx, h, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// setBoundaries rewrites the bundles of namespace t/n in this cluster (its local
// policies: Namespaces.SetBundles, a compare-and-swap): change computes the new boundaries
// from the bundles in force as read from the store (not from a cache: two splits of one
// namespace at once must both land).
func (o *Manager) setBoundaries(ctx context.Context, t, n string, change func([]Bundle) ([]string, error)) (metadata.Version, error) {
	return o.cfg.Namespaces.SetBundles(ctx, t, n, func(p api.NamespacePolicies) (any, error) {
		bs, err := NamespaceBundles(t+"/"+n, p, o.cfg.DefaultBundles)
		if err != nil {
			return nil, err
		}
		bounds, err := change(bs)
		if err != nil {
			return nil, err
		}
		return bundlesData{Boundaries: bounds, NumBundles: len(bounds) - 1}, nil
	})
}

// Brokers lists the ids of the live brokers of cluster ("": every one); a broker without
// a cluster belongs to every cluster.
func (o *Manager) Brokers(cluster string) []string {
	out := []string{}
	for _, bi := range o.LiveBrokers() {
		if cluster == "" || bi.Cluster == cluster || bi.Cluster == "" {
			out = append(out, bi.ID)
		}
	}
	return out
}

// LeaderBroker returns the load manager's leader (metadata.LoadBalanceLeaderKey).
func (o *Manager) LeaderBroker(ctx context.Context) (api.BrokerInfo, error) {
	kv, err := o.store.Get(ctx, metadata.LoadBalanceLeaderKey)
	return resources.Decode[api.BrokerInfo](kv, err, errNoLeader, "the load manager's leader")
}

// OwnedNamespaces returns the bundles this broker owns, as Pulsar's ownedNamespaces
// ("tenant/ns/0x00000000_0x40000000" → status).
func (o *Manager) OwnedNamespaces(ctx context.Context) map[string]api.NamespaceOwnership {
	out := map[string]api.NamespaceOwnership{}
	for _, b := range o.OwnedBundles() {
		out[b.String()] = api.NamespaceOwnership{BrokerAssignment: "shared", IsActive: true}
	}
	return out
}

var (
	errNoLeader          = fmt.Errorf("%w: no leader broker elected", api.ErrServiceNotReady)
	errBrokerUnavailable = fmt.Errorf("%w: no live record of", api.ErrServiceNotReady)
)
