package ownership

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// Namespace bundles, as Pulsar's NamespaceBundleFactory and NamespaceBundles: a namespace's
// 32-bit hash space is cut at its policies' bundles.boundaries ("0x00000000", ...,
// "0xffffffff"); a topic belongs to the bundle whose range holds the hash of its full name
// ("persistent://tenant/ns/local", partitions included). Pulsar hashes with Guava's
// Hashing.crc32() (NamespaceService builds its NamespaceBundleFactory with it), i.e. the
// IEEE CRC-32 of the name's UTF-8 bytes. Ranges are [lower, upper) except the last, which
// includes 0xffffffff.

const (
	firstBoundary = 0x00000000
	// LastBoundary is the upper end of the hash space, included in the last bundle.
	LastBoundary = 0xffffffff
	// DefaultBundles is Pulsar's defaultNumberOfNamespaceBundles.
	DefaultBundles = 4
)

// Bundle is one hash range of a namespace.
type Bundle struct {
	Namespace string // "tenant/ns"
	Lower     uint32
	Upper     uint32 // exclusive, except for the last bundle (Upper = 0xffffffff)
}

// Range is the bundle's name in Pulsar's form, "0x00000000_0x40000000".
func (b Bundle) Range() string { return fmt.Sprintf("0x%08x_0x%08x", b.Lower, b.Upper) }

// String is "tenant/ns/0x00000000_0x40000000", the form BrokerSelector takes.
func (b Bundle) String() string { return b.Namespace + "/" + b.Range() }

func (b Bundle) Contains(h uint32) bool {
	return h >= b.Lower && (h < b.Upper || b.Upper == LastBoundary)
}

// TopicHash is the hash Pulsar places a topic with.
func TopicHash(n topicname.Name) uint32 { return crc32.ChecksumIEEE([]byte(n.String())) }

// bundlesData is Pulsar's BundlesData ("bundles" in the namespace policies).
type bundlesData struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

// EvenBoundaries cuts the hash space into n equal bundles, as Pulsar's getBundles(n).
func EvenBoundaries(n int) []string {
	seg := (uint64(1) << 32) / uint64(n)
	out := []string{fmt.Sprintf("0x%08x", 0)}
	for i := 1; i < n; i++ {
		out = append(out, fmt.Sprintf("0x%08x", uint64(i)*seg))
	}
	return append(out, fmt.Sprintf("0x%08x", uint64(LastBoundary)))
}

// parseBoundaries validates boundaries: sorted, unique, from 0x00000000 to 0xffffffff.
func parseBoundaries(bs []string) ([]uint32, error) {
	out, err := parseHex(bs...)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	if len(out) < 2 || out[0] != firstBoundary || out[len(out)-1] != LastBoundary {
		return nil, fmt.Errorf("%w: bundles do not cover the whole hash range", api.ErrInvalidArgument)
	}
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("%w: duplicate bundle boundary 0x%08x", api.ErrInvalidArgument, out[i])
		}
	}
	return out, nil
}

// WithBundles returns p with its bundles set as Pulsar's createNamespace does: the given
// boundaries (validated), else numBundles equal bundles, else def equal bundles.
func WithBundles(p api.NamespacePolicies, def int) (api.NamespacePolicies, error) {
	var bd bundlesData
	if raw, ok := p.Other["bundles"]; ok && raw != nil {
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &bd); err != nil {
			return p, fmt.Errorf("%w: bundles: %v", api.ErrInvalidArgument, err)
		}
	}
	switch {
	case len(bd.Boundaries) > 0:
		vs, err := parseBoundaries(bd.Boundaries)
		if err != nil {
			return p, err
		}
		bd.Boundaries = formatBoundaries(vs)
	case bd.NumBundles > 0:
		bd.Boundaries = EvenBoundaries(bd.NumBundles)
	case bd.NumBundles < 0:
		return p, fmt.Errorf("%w: invalid number of bundles %d", api.ErrInvalidArgument, bd.NumBundles)
	default:
		bd.Boundaries = EvenBoundaries(def)
	}
	bd.NumBundles = len(bd.Boundaries) - 1
	other := make(map[string]any, len(p.Other)+1)
	for k, v := range p.Other {
		other[k] = v
	}
	other["bundles"] = bd
	p.Other = other
	return p, nil
}

func formatBoundaries(vs []uint32) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("0x%08x", v)
	}
	return out
}

// NamespaceBundles returns the bundles of namespace ns under policies p (a namespace
// without bundles data has def equal bundles, as Pulsar's default).
func NamespaceBundles(ns string, p api.NamespacePolicies, def int) ([]Bundle, error) {
	p, err := WithBundles(p, def)
	if err != nil {
		return nil, err
	}
	vs, err := parseBoundaries(p.Other["bundles"].(bundlesData).Boundaries)
	if err != nil {
		return nil, err
	}
	out := make([]Bundle, 0, len(vs)-1)
	for i := 0; i+1 < len(vs); i++ {
		out = append(out, Bundle{Namespace: ns, Lower: vs[i], Upper: vs[i+1]})
	}
	return out, nil
}

// FindBundle returns the bundle of bs holding hash h.
func FindBundle(bs []Bundle, h uint32) Bundle {
	i := sort.Search(len(bs), func(i int) bool { return bs[i].Upper > h || bs[i].Upper == LastBoundary })
	return bs[i]
}

// ParseBundle parses "0x00000000_0x40000000" of namespace ns.
func ParseBundle(ns, r string) (Bundle, error) {
	lo, hi, ok := strings.Cut(r, "_")
	if ok {
		if vs, err := parseHex(lo, hi); err == nil && vs[0] < vs[1] {
			return Bundle{Namespace: ns, Lower: vs[0], Upper: vs[1]}, nil
		}
	}
	return Bundle{}, fmt.Errorf("%w: invalid bundle range %q", api.ErrInvalidArgument, r)
}

// parseHex parses "0x…" 32-bit values.
func parseHex(ss ...string) ([]uint32, error) {
	out := make([]uint32, 0, len(ss))
	for _, s := range ss {
		s = strings.ToLower(s)
		v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
		if err != nil || !strings.HasPrefix(s, "0x") {
			return nil, fmt.Errorf("%w: bundle boundary %q", api.ErrInvalidArgument, s)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

// SplitBoundaries returns bs with bundle b cut in two equal halves (Pulsar's
// range_equally_divide).
func SplitBoundaries(bs []Bundle, b Bundle) ([]string, error) {
	if b.Upper-b.Lower < 2 {
		return nil, fmt.Errorf("%w: bundle %s can't be split further", api.ErrNotAllowed, b)
	}
	var vs []uint32
	found := false
	for _, x := range bs {
		vs = append(vs, x.Lower)
		if x == b {
			found = true
			vs = append(vs, x.Lower+(x.Upper-x.Lower)/2)
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: bundle %s", api.ErrBundleNotFound, b)
	}
	return formatBoundaries(append(vs, LastBoundary)), nil
}
