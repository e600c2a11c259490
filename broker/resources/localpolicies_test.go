package resources_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/resources"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// bundlesOf returns the "bundles" of p as Pulsar's BundlesData.
func bundlesOf(t *testing.T, p api.NamespacePolicies) api.BundlesData {
	t.Helper()
	bd, err := decodeBundles(p)
	if err != nil {
		t.Fatal(err)
	}
	return bd
}

func decodeBundles(p api.NamespacePolicies) (api.BundlesData, error) {
	var bd api.BundlesData
	b, err := json.Marshal(p.Other["bundles"])
	if err == nil {
		err = json.Unmarshal(b, &bd)
	}
	return bd, err
}

// TestLocalBundles: with the configuration store apart from two clusters' local stores,
// new bundles set in one cluster are its own (the namespace record, shared, keeps the
// bundles it was created with; the other cluster sees those); concurrent changes both
// land; and a namespace deleted and created again (through the other cluster) does not
// inherit the bundles of the old one.
func TestLocalBundles(t *testing.T) {
	ctx := ctxT(t)
	eps := metadatatest.Embedded(t)
	shared := metadatatest.NewStore(t, eps)
	localA, localB := metadatatest.NewStore(t, eps), metadatatest.NewStore(t, eps)
	a := resources.New(metadata.NewSplit(localA, shared), "a", nil)
	b := resources.New(metadata.NewSplit(localB, shared), "b", nil)
	for _, r := range []*resources.Records{a, b} {
		for _, c := range r.Caches() {
			var wg sync.WaitGroup
			cctx, cancel := context.WithCancel(ctx)
			wg.Add(1)
			go func() { defer wg.Done(); c.Run(cctx) }()
			t.Cleanup(func() { cancel(); wg.Wait() })
		}
	}
	if err := a.CreateTenant(ctx, "t", api.TenantInfo{AllowedClusters: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	created := api.NamespacePolicies{Other: map[string]any{"bundles": api.BundlesData{
		Boundaries: []string{"0x00000000", "0x80000000", "0xffffffff"}, NumBundles: 2}}}
	if err := a.CreateNamespace(ctx, "t/ns", created); err != nil {
		t.Fatal(err)
	}
	// Two changes in a at once (each adds a boundary to what it reads): both land.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, cut := range []string{"0x40000000", "0xc0000000"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v metadata.Version
			v, errs[i] = a.SetBundles(ctx, "t", "ns", func(p api.NamespacePolicies) (any, error) {
				bd, err := decodeBundles(p)
				if err != nil {
					return nil, err
				}
				bd.Boundaries = append(bd.Boundaries[:len(bd.Boundaries)-1], cut, "0xffffffff")
				bd.NumBundles++
				return bd, nil
			})
			if errs[i] == nil {
				errs[i] = a.WaitBundles(ctx, "t", "ns", v)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	pa, err := a.CachedBundlePolicies(ctx, "t", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if bd := bundlesOf(t, pa); bd.NumBundles != 4 {
		t.Fatalf("a's bundles %+v: want both changes (4 bundles)", bd)
	}
	pb, err := b.CachedBundlePolicies(ctx, "t", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if bd := bundlesOf(t, pb); bd.NumBundles != 2 {
		t.Fatalf("b's bundles %+v changed by a's split", bd)
	}
	if p, err := a.NamespacePolicies(ctx, "t", "ns"); err != nil || bundlesOf(t, p).NumBundles != 2 {
		t.Fatalf("the shared namespace record changed: %+v %v", p, err)
	}
	if _, err := shared.Get(ctx, metadata.LocalPoliciesKey("t", "ns")); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("local policies in the configuration store: %v", err)
	}

	// Deleted through b (a's local policies stay), created again: a starts from the new
	// namespace's bundles.
	if err := b.DeleteNamespace(ctx, "t", "ns"); err != nil {
		t.Fatal(err)
	}
	created.Other["bundles"] = api.BundlesData{Boundaries: []string{"0x00000000", "0xffffffff"}, NumBundles: 1}
	if err := b.CreateNamespace(ctx, "t/ns", created); err != nil {
		t.Fatal(err)
	}
	if _, err := localA.Get(ctx, metadata.LocalPoliciesKey("t", "ns")); err != nil {
		t.Fatalf("a's local policies: %v", err)
	}
	p, err := a.NamespacePolicies(ctx, "t", "ns")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := shared.Get(ctx, metadata.NamespaceKey("t", "ns"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitNamespace(ctx, "t", "ns", kv.Version); err != nil {
		t.Fatal(err)
	}
	pa, err = a.CachedBundlePolicies(ctx, "t", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if bd := bundlesOf(t, pa); bd.NumBundles != 1 || bundlesOf(t, p).NumBundles != 1 {
		t.Fatalf("a's bundles of the new namespace %+v: the old namespace's split survived", bd)
	}
}
