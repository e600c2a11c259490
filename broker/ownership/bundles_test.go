package ownership

import (
	"errors"
	"reflect"
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// TestTopicBundle checks topics land in the bundle Pulsar puts them in: the hashes below
// are the CRC-32 (IEEE, as Guava's Hashing.crc32()) of the full topic names, computed
// outside Go (Python's zlib.crc32), and the bundles are Pulsar's 4 default ones.
func TestTopicBundle(t *testing.T) {
	bs, err := NamespaceBundles("public/default", api.NamespacePolicies{}, DefaultBundles)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"}
	var got []string
	for _, b := range bs {
		got = append(got, b.Range())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bundles %v, want %v", got, want)
	}
	for _, c := range []struct {
		topic  string
		hash   uint32
		bundle string
	}{
		{"persistent://public/default/my-topic", 0x2bad45f7, want[0]},
		{"persistent://public/default/test", 0xaa2e30f5, want[2]},
		{"persistent://public/default/orders-partition-0", 0x5af6c8d5, want[1]},
		{"persistent://public/default/orders-partition-1", 0x2df1f843, want[0]},
		{"non-persistent://public/default/x", 0xc0a1d362, want[3]},
	} {
		n, err := topicname.Parse(c.topic)
		if err != nil {
			t.Fatal(err)
		}
		if h := TopicHash(n); h != c.hash {
			t.Errorf("%s: hash %#x, want %#x", c.topic, h, c.hash)
		}
		if b := FindBundle(bs, TopicHash(n)); b.Range() != c.bundle {
			t.Errorf("%s: bundle %s, want %s", c.topic, b.Range(), c.bundle)
		}
	}
	// The short form names the same topic.
	n, _ := topicname.Parse("my-topic")
	if TopicHash(n) != 0x2bad45f7 {
		t.Errorf("short name hashes to %#x", TopicHash(n))
	}
}

func TestBundlesData(t *testing.T) {
	// Pulsar's getBundles(n): equal segments of 2^32, the last ending at 0xffffffff.
	if got, want := EvenBoundaries(3), []string{"0x00000000", "0x55555555", "0xaaaaaaaa", "0xffffffff"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("3 bundles: %v, want %v", got, want)
	}
	p, err := WithBundles(api.NamespacePolicies{Other: map[string]any{"bundles": map[string]any{"numBundles": 16.0}}}, 4)
	if err != nil || len(p.Other["bundles"].(bundlesData).Boundaries) != 17 {
		t.Fatalf("numBundles 16: %+v %v", p.Other, err)
	}
	p, err = WithBundles(api.NamespacePolicies{Other: map[string]any{"bundles": map[string]any{
		"boundaries": []any{"0x00000000", "0x10000000", "0xffffffff"}}}}, 4)
	if err != nil || p.Other["bundles"].(bundlesData).NumBundles != 2 {
		t.Fatalf("boundaries: %+v %v", p.Other, err)
	}
	for _, bad := range [][]any{{"0x00000000", "0x10000000"}, {"0x00000001", "0xffffffff"}, {"0x0", "zz", "0xffffffff"}} {
		if _, err := WithBundles(api.NamespacePolicies{Other: map[string]any{"bundles": map[string]any{"boundaries": bad}}}, 4); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("boundaries %v: %v, want api.ErrInvalidArgument", bad, err)
		}
	}
	bs, _ := NamespaceBundles("t/n", api.NamespacePolicies{}, 2)
	got, err := SplitBoundaries(bs, bs[1])
	if want := []string{"0x00000000", "0x80000000", "0xbfffffff", "0xffffffff"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("split: %v %v, want %v", got, err, want)
	}
	if b, err := ParseBundle("t/n", "0x80000000_0xffffffff"); err != nil || b != bs[1] {
		t.Fatalf("parse: %v %v", b, err)
	}
	for _, bad := range []string{"0x1", "0x2_0x1", "1_2"} {
		if _, err := ParseBundle("t/n", bad); !errors.Is(err, api.ErrInvalidArgument) {
			t.Errorf("parse %q: %v", bad, err)
		}
	}
}
