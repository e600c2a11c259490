package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/magnetar-io/magnetar/broker/topicname"
	"github.com/magnetar-io/magnetar/metadata"
)

// Exported cluster API (the admin layer's brokers, clusters and namespace-bundle
// resources): bundles, their unloading, hand-over and splitting, and the brokers.

// NamespaceBundles returns the bundles of namespace "tenant/ns".
func (s *Service) NamespaceBundles(ctx context.Context, ns string) (BundlesData, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return BundlesData{}, err
	}
	if _, err := s.cachedPolicies(ctx, t, n); err != nil {
		return BundlesData{}, err
	}
	bs, err := s.bundlesOf(ctx, t, n)
	if err != nil {
		return BundlesData{}, err
	}
	out := BundlesData{NumBundles: len(bs)}
	for _, b := range bs {
		out.Boundaries = append(out.Boundaries, fmt.Sprintf("0x%08x", b.Lower))
	}
	out.Boundaries = append(out.Boundaries, fmt.Sprintf("0x%08x", uint32(lastBoundary)))
	return out, nil
}

// TopicBundle returns the range of the bundle topic belongs to ("0x00000000_0x40000000").
func (s *Service) TopicBundle(ctx context.Context, topic string) (string, error) {
	n, err := topicname.Parse(topic)
	if err != nil {
		return "", err
	}
	if _, err := s.cachedPolicies(ctx, n.Tenant, n.Namespace); err != nil {
		return "", err
	}
	b, err := s.bundleOf(ctx, n)
	return b.Range(), err
}

// namespaceBundle resolves "tenant/ns" and a bundle range of it.
func (s *Service) namespaceBundle(ctx context.Context, ns, bundle string) (Bundle, error) {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return Bundle{}, err
	}
	if _, err := s.cachedPolicies(ctx, t, n); err != nil {
		return Bundle{}, err
	}
	bs, err := s.bundlesOf(ctx, t, n)
	if err != nil {
		return Bundle{}, err
	}
	want, err := parseBundle(t+"/"+n, bundle)
	if err != nil {
		return Bundle{}, err
	}
	for _, b := range bs {
		if b == want {
			return b, nil
		}
	}
	return Bundle{}, fmt.Errorf("%w: %s/%s", ErrBundleNotFound, ns, bundle)
}

// bundleOwner returns *NotOwnerError if another broker owns b, nil if this one does, and
// ErrBundleNotFound wrapped if nobody does.
func (s *Service) bundleOwner(ctx context.Context, b Bundle) error {
	if s.own.owned(b) != nil {
		return nil
	}
	r, _, err := s.own.ownerOf(ctx, b)
	if err != nil {
		return err
	}
	if r == nil || r.ID == s.info.ID {
		return fmt.Errorf("%w: bundle %s is not owned by any broker", ErrBundleNotFound, b)
	}
	return &NotOwnerError{Topic: b.String(), Owner: r.BrokerInfo}
}

// UnloadBundle unloads bundle ("0x00000000_0x40000000") of namespace ns from this broker,
// which must own it (*NotOwnerError names the owner). With destination (a broker id, or
// its service or web service URL or host:port) the bundle is handed over: the destination
// takes it as soon as it is released, and the clients are sent there directly. A bundle
// nobody owns is left as it is.
func (s *Service) UnloadBundle(ctx context.Context, ns, bundle, destination string) error {
	b, err := s.namespaceBundle(ctx, ns, bundle)
	if err != nil {
		return err
	}
	if err := s.bundleOwner(ctx, b); errors.Is(err, ErrBundleNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	var to *BrokerInfo
	if destination != "" {
		bi, err := s.findBroker(destination)
		if err != nil {
			return err
		}
		if bi.ID == s.info.ID {
			return nil // already there
		}
		to = &bi
	}
	return s.own.release(ctx, b, to)
}

// findBroker returns the live broker named by id, service URL, web service URL or their
// host:port.
func (s *Service) findBroker(name string) (BrokerInfo, error) {
	for _, bi := range s.own.liveBrokers() {
		for _, v := range []string{bi.ID, bi.ServiceURL, bi.HTTPURL, bi.ServiceURLTLS, bi.HTTPURLTLS, hostPort(bi.ServiceURL), hostPort(bi.HTTPURL)} {
			if v != "" && v == name {
				return bi, nil
			}
		}
	}
	return BrokerInfo{}, fmt.Errorf("%w: broker %s is not available", ErrInvalidArgument, name)
}

func hostPort(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return ""
}

// UnloadNamespace unloads every bundle of namespace ns: those this broker owns here, the
// others by asking their owners with this broker's credentials (package broker/peer), as
// Pulsar's broker does with its own admin client.
func (s *Service) UnloadNamespace(ctx context.Context, ns string) error {
	t, n, err := topicname.ParseNamespace(ns)
	if err != nil {
		return err
	}
	if _, err := s.cachedPolicies(ctx, t, n); err != nil {
		return err
	}
	bs, err := s.bundlesOf(ctx, t, n)
	if err != nil {
		return err
	}
	for _, b := range bs {
		var no *NotOwnerError
		switch err := s.bundleOwner(ctx, b); {
		case err == nil:
			if err := s.own.release(ctx, b, nil); err != nil {
				return err
			}
		case errors.As(err, &no):
			if err := s.peer.BundleUnload(ctx, no.Owner.AdminURL(false), ns, b.Range(), ""); err != nil {
				return fmt.Errorf("unload %s/%s on %s: %w", ns, b.Range(), no.Owner.ID, err)
			}
		case !errors.Is(err, ErrBundleNotFound):
			return err
		}
	}
	return nil
}

// SplitBundle splits bundle of namespace ns, which this broker must own, into two halves
// (algorithm range_equally_divide, the default; Pulsar's other algorithms are refused).
// The halves stay here, unless unload, which unloads them.
func (s *Service) SplitBundle(ctx context.Context, ns, bundle string, unload bool, algorithm string) error {
	if algorithm != "" && algorithm != "range_equally_divide" {
		return fmt.Errorf("%w: unsupported split algorithm %q (range_equally_divide is)", ErrInvalidArgument, algorithm)
	}
	b, err := s.namespaceBundle(ctx, ns, bundle)
	if err != nil {
		return err
	}
	if err := s.bundleOwner(ctx, b); err != nil {
		if errors.Is(err, ErrBundleNotFound) { // nobody owns it: take it to split it
			if _, err := s.own.acquire(ctx, b); err != nil {
				return err
			}
		} else {
			return err
		}
	}
	t, n, _ := topicname.ParseNamespace(ns)
	bs, err := s.bundlesOf(ctx, t, n)
	if err != nil {
		return err
	}
	if _, err := splitBoundaries(bs, b); err != nil { // refused early: b is not splittable
		return err
	}
	mid := b.Lower + (b.Upper-b.Lower)/2
	halves := []Bundle{{Namespace: b.Namespace, Lower: b.Lower, Upper: mid}, {Namespace: b.Namespace, Lower: mid, Upper: b.Upper}}
	// The halves' records first, so that no other broker takes one once the policies
	// name them; then the policies; then the parent's record goes.
	for _, h := range halves {
		if _, err := s.own.acquire(ctx, h); err != nil {
			return fmt.Errorf("split %s: acquire %s: %w", b, h, err)
		}
	}
	v, err := s.setBoundaries(ctx, t, n, func(bs []Bundle) ([]string, error) { return splitBoundaries(bs, b) })
	if err != nil {
		for _, h := range halves {
			s.own.release(ctx, h, nil) //nolint:errcheck // undoing
		}
		return err
	}
	// Our own lookups find the halves before the parent's record goes.
	if err := s.res.WaitNamespace(ctx, t, n, v); err != nil {
		return err
	}
	s.own.forget(ctx, b)
	s.log.Info("bundle split", "bundle", b.String(), "into", halves[0].Range()+" "+halves[1].Range())
	if unload {
		for _, h := range halves {
			if err := s.own.release(ctx, h, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// setBoundaries rewrites the bundles of namespace t/n by compare-and-swap on its record:
// change computes the new boundaries from the bundles the record holds as read (not from a
// cache: two splits of one namespace at once must both land). A concurrent change is
// retried a few times.
func (s *Service) setBoundaries(ctx context.Context, t, n string, change func([]Bundle) ([]string, error)) (metadata.Version, error) {
	key := metadata.NamespaceKey(t, n)
	for attempt := 0; ; attempt++ {
		kv, err := s.store.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) {
			return 0, fmt.Errorf("%w: %s/%s", ErrNamespaceNotFound, t, n)
		}
		if err != nil {
			return 0, err
		}
		var p NamespacePolicies
		if len(kv.Value) > 0 {
			if err := json.Unmarshal(kv.Value, &p); err != nil {
				return 0, fmt.Errorf("namespace %s/%s record: %w", t, n, err)
			}
		}
		bs, err := namespaceBundles(t+"/"+n, p, s.cfg.DefaultNumberOfNamespaceBundles)
		if err != nil {
			return 0, err
		}
		bounds, err := change(bs)
		if err != nil {
			return 0, err
		}
		other := map[string]any{}
		for k, v := range p.Other {
			other[k] = v
		}
		other["bundles"] = bundlesData{Boundaries: bounds, NumBundles: len(bounds) - 1}
		p.Other = other
		b, err := json.Marshal(p)
		if err != nil {
			return 0, err
		}
		v, err := s.store.Put(ctx, key, b, kv.Version)
		if errors.Is(err, metadata.ErrBadVersion) {
			if attempt < 4 {
				continue
			}
			return 0, fmt.Errorf("%w: namespace %s/%s changed concurrently", ErrServiceNotReady, t, n)
		}
		return v, err
	}
}

// Brokers lists the ids of the live brokers of cluster ("" or this broker's cluster).
func (s *Service) Brokers(ctx context.Context, cluster string) ([]string, error) {
	if cluster != "" && cluster != s.info.Cluster {
		if _, err := s.Cluster(ctx, cluster); err != nil {
			return nil, err
		}
	}
	out := []string{}
	for _, bi := range s.own.liveBrokers() {
		if cluster == "" || bi.Cluster == cluster || bi.Cluster == "" {
			out = append(out, bi.ID)
		}
	}
	return out, nil
}

// LiveBroker returns the record of live broker id (its id or URL, see UnloadBundle).
func (s *Service) LiveBroker(ctx context.Context, id string) (BrokerInfo, error) {
	return s.findBroker(id)
}

// LeaderBroker returns the load manager's leader (metadata.LoadBalanceLeaderKey).
func (s *Service) LeaderBroker(ctx context.Context) (BrokerInfo, error) {
	var bi BrokerInfo
	kv, err := s.store.Get(ctx, metadata.LoadBalanceLeaderKey)
	if errors.Is(err, metadata.ErrNotFound) {
		return bi, fmt.Errorf("%w: no leader broker elected", ErrServiceNotReady)
	}
	if err != nil {
		return bi, err
	}
	if err := json.Unmarshal(kv.Value, &bi); err != nil {
		return bi, fmt.Errorf("leader record: %w", err)
	}
	return bi, nil
}

// OwnedNamespaces returns the bundles this broker owns, as Pulsar's ownedNamespaces
// ("tenant/ns/0x00000000_0x40000000" → status).
func (s *Service) OwnedNamespaces(ctx context.Context) map[string]NamespaceOwnership {
	out := map[string]NamespaceOwnership{}
	for _, b := range s.own.ownedBundles() {
		out[b.String()] = NamespaceOwnership{BrokerAssignment: "shared", IsActive: true}
	}
	return out
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
