package loadmgr

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// BundleLoad is the load of one namespace bundle on its owner, the per-bundle part of a
// report (Pulsar's NamespaceBundleStats JSON). Rates are per second, averaged by the broker
// over its stats window.
type BundleLoad struct {
	MsgRateIn        float64 `json:"msgRateIn"`
	MsgThroughputIn  float64 `json:"msgThroughputIn"` // bytes/s
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputOut float64 `json:"msgThroughputOut"` // bytes/s
	Topics           int     `json:"topics"`
	Producers        int     `json:"producerCount"`
	Consumers        int     `json:"consumerCount"`
}

// MsgRate is the bundle's message rate in plus out.
func (b BundleLoad) MsgRate() float64 { return b.MsgRateIn + b.MsgRateOut }

// Throughput is the bundle's bytes per second in plus out.
func (b BundleLoad) Throughput() float64 { return b.MsgThroughputIn + b.MsgThroughputOut }

// Usage is a resource's use against its limit (Pulsar's ResourceUsage JSON). Limit 0 means
// unknown: the resource is left out of the broker's usage.
type Usage struct {
	Usage float64 `json:"usage"`
	Limit float64 `json:"limit"`
}

// Fraction is Usage/Limit, 0 if the limit is unknown.
func (u Usage) Fraction() float64 {
	if u.Limit <= 0 {
		return 0
	}
	return u.Usage / u.Limit
}

// Report is one broker's load report, the value of metadata.LoadReportKey(id): JSON in the
// shape of Pulsar's LocalBrokerData, so Pulsar tools reading /loadbalance/brokers see the
// fields they know. The totals are the sums over Bundles.
type Report struct {
	BrokerID         string  `json:"brokerId"`
	ServiceURL       string  `json:"pulsarServiceUrl"`
	ServiceURLTLS    string  `json:"pulsarServiceUrlTls,omitempty"`
	WebServiceURL    string  `json:"webServiceUrl"`
	WebServiceURLTLS string  `json:"webServiceUrlTls,omitempty"`
	CPU              Usage   `json:"cpu"`    // percent of the cores the process may use
	Memory           Usage   `json:"memory"` // MB resident / MB limit
	BandwidthIn      Usage   `json:"bandwidthIn"`
	BandwidthOut     Usage   `json:"bandwidthOut"`
	MsgRateIn        float64 `json:"msgRateIn"`
	MsgRateOut       float64 `json:"msgRateOut"`
	MsgThroughputIn  float64 `json:"msgThroughputIn"`
	MsgThroughputOut float64 `json:"msgThroughputOut"`
	Topics           int     `json:"numTopics"`
	BundleCount      int     `json:"numBundles"`
	Consumers        int     `json:"numConsumers"`
	Producers        int     `json:"numProducers"`
	// Bundles is the broker's bundles and their loads (Pulsar's lastStats).
	Bundles map[string]BundleLoad `json:"lastStats"`
	// LastUpdate is when the report was made (Unix ms).
	LastUpdate int64 `json:"lastUpdate"`
}

// MsgRate is the broker's message rate in plus out.
func (r *Report) MsgRate() float64 { return r.MsgRateIn + r.MsgRateOut }

// fillTotals sets the totals from Bundles.
func (r *Report) fillTotals() {
	r.MsgRateIn, r.MsgRateOut, r.MsgThroughputIn, r.MsgThroughputOut = 0, 0, 0, 0
	r.Topics, r.Consumers, r.Producers = 0, 0, 0
	for _, b := range r.Bundles {
		r.MsgRateIn += b.MsgRateIn
		r.MsgRateOut += b.MsgRateOut
		r.MsgThroughputIn += b.MsgThroughputIn
		r.MsgThroughputOut += b.MsgThroughputOut
		r.Topics += b.Topics
		r.Consumers += b.Consumers
		r.Producers += b.Producers
	}
	r.BundleCount = len(r.Bundles)
}

// reportChanged reports whether cur differs from the last written report prev by more than
// thresholdPct percent in any of its resources or rates, or in its set of bundles (Pulsar's
// ModularLoadManagerImpl.needBrokerDataUpdate). A nil prev always differs.
func reportChanged(prev, cur *Report, thresholdPct float64) bool {
	if prev == nil {
		return true
	}
	if len(prev.Bundles) != len(cur.Bundles) {
		return true
	}
	for b := range cur.Bundles {
		if _, ok := prev.Bundles[b]; !ok {
			return true
		}
	}
	// Each pair with the least absolute change that counts, so an idle broker's noise (0.1
	// to 0.2 msg/s is +100%) does not rewrite its report every interval.
	pairs := [][3]float64{
		{prev.MsgRateIn, cur.MsgRateIn, 1}, {prev.MsgRateOut, cur.MsgRateOut, 1},
		{prev.MsgThroughputIn, cur.MsgThroughputIn, 1024}, {prev.MsgThroughputOut, cur.MsgThroughputOut, 1024},
		{float64(prev.Topics), float64(cur.Topics), 1},
	}
	for _, p := range pairs {
		if math.Abs(p[1]-p[0]) >= p[2] && percentChange(p[0], p[1]) > thresholdPct {
			return true
		}
	}
	// Resource usages change in percentage points (of the limit), as Pulsar compares them.
	for _, p := range [][2]Usage{{prev.CPU, cur.CPU}, {prev.Memory, cur.Memory},
		{prev.BandwidthIn, cur.BandwidthIn}, {prev.BandwidthOut, cur.BandwidthOut}} {
		if 100*math.Abs(p[1].Fraction()-p[0].Fraction()) > thresholdPct {
			return true
		}
	}
	return false
}

// percentChange is |cur-prev| in percent of prev (Pulsar's percentChange: from 0 to
// anything but 0 is a change of 100%).
func percentChange(prev, cur float64) float64 {
	if prev == cur {
		return 0
	}
	if prev == 0 {
		return 100
	}
	return 100 * math.Abs(cur-prev) / math.Abs(prev)
}

// Bundle names are "<tenant>/<ns>/0x<lower>_0x<upper>": the namespace and the hash range
// [lower, upper) in 8 hex digits each (Pulsar's NamespaceBundle.toString; the last bundle's
// upper bound 0xffffffff is inclusive).

// splitBundleName returns a bundle's namespace ("tenant/ns") and range ("0x…_0x…").
func splitBundleName(bundle string) (namespace, rng string, err error) {
	i := strings.LastIndexByte(bundle, '/')
	if i <= 0 || strings.Count(bundle, "/") != 2 {
		return "", "", fmt.Errorf("loadmgr: bundle %q is not tenant/ns/0xLOWER_0xUPPER", bundle)
	}
	namespace, rng = bundle[:i], bundle[i+1:]
	lo, hi, ok := strings.Cut(rng, "_")
	if !ok {
		return "", "", fmt.Errorf("loadmgr: bundle %q: range %q has no '_'", bundle, rng)
	}
	l, err1 := parseHex32(lo)
	h, err2 := parseHex32(hi)
	if err1 != nil || err2 != nil || l >= h {
		return "", "", fmt.Errorf("loadmgr: bundle %q: bad range %q", bundle, rng)
	}
	return namespace, rng, nil
}

func parseHex32(s string) (uint64, error) {
	if !strings.HasPrefix(s, "0x") {
		return 0, fmt.Errorf("no 0x prefix")
	}
	return strconv.ParseUint(s[2:], 16, 32)
}

// BundleNamespace returns the namespace "tenant/ns" of a bundle name, or "" if the name is
// not a bundle's.
func BundleNamespace(bundle string) string {
	ns, _, err := splitBundleName(bundle)
	if err != nil {
		return ""
	}
	return ns
}
