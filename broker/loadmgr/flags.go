package loadmgr

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/config"
)

// Flags are the load manager's command-line flags, each set by a Pulsar broker.conf key
// (ConfigKeys).
type Flags struct {
	enabled, shedding, split                   bool
	reportThreshold, shedThreshold, overloaded float64
	reportMin, reportMax, shedInterval, grace  time.Duration
	maxTopics, maxSessions, maxBundles         int
	maxMsgRate, maxBandwidthMB, nicGbps        float64
	cpuW, memW, bwInW, bwOutW                  float64
}

// AddFlags registers the flags on f with Pulsar's defaults.
func AddFlags(f *pflag.FlagSet) *Flags {
	d := DefaultThresholds()
	v := &Flags{}
	f.BoolVar(&v.enabled, "load-balancer-enabled", true, "report load and balance bundles across brokers")
	f.Float64Var(&v.reportThreshold, "load-balancer-report-update-threshold-percentage", 10,
		"change in percent that makes a broker rewrite its load report")
	f.DurationVar(&v.reportMin, "load-balancer-report-update-min-interval", 5*time.Second,
		"how often a broker looks at its load")
	f.DurationVar(&v.reportMax, "load-balancer-report-update-max-interval", 15*time.Minute,
		"longest time between two load reports")
	f.BoolVar(&v.shedding, "load-balancer-shedding-enabled", d.SheddingEnabled, "move bundles off overloaded brokers")
	f.DurationVar(&v.shedInterval, "load-balancer-shedding-interval", time.Minute, "how often the leader sheds and splits")
	f.DurationVar(&v.grace, "load-balancer-shedding-grace-period", d.GracePeriod,
		"how long a moved or split bundle is left where it is")
	f.Float64Var(&v.shedThreshold, "load-balancer-broker-threshold-shedder-percentage", d.ThresholdPercent,
		"percentage points of usage above the average at which a broker sheds")
	f.Float64Var(&v.overloaded, "load-balancer-broker-overloaded-threshold-percentage", d.OverloadedPercent,
		"resource usage in percent above which a broker gets no new bundles")
	f.BoolVar(&v.split, "load-balancer-auto-bundle-split-enabled", d.AutoSplitEnabled, "split bundles over the thresholds")
	f.IntVar(&v.maxTopics, "load-balancer-namespace-bundle-max-topics", d.MaxBundleTopics, "topics above which a bundle is split")
	f.IntVar(&v.maxSessions, "load-balancer-namespace-bundle-max-sessions", d.MaxBundleSessions,
		"producers plus consumers above which a bundle is split")
	f.Float64Var(&v.maxMsgRate, "load-balancer-namespace-bundle-max-msg-rate", d.MaxBundleMsgRate,
		"msg/s (in+out) above which a bundle is split")
	f.Float64Var(&v.maxBandwidthMB, "load-balancer-namespace-bundle-max-bandwidth-mbytes", d.MaxBundleBandwidth/(1<<20),
		"MB/s (in+out) above which a bundle is split")
	f.IntVar(&v.maxBundles, "load-balancer-namespace-maximum-bundles", d.MaxBundles, "most bundles a split may leave a namespace with")
	f.Float64Var(&v.cpuW, "load-balancer-cpu-resource-weight", d.CPUWeight, "weight of CPU in a broker's usage")
	f.Float64Var(&v.memW, "load-balancer-memory-resource-weight", d.MemoryWeight, "weight of memory in a broker's usage")
	f.Float64Var(&v.bwInW, "load-balancer-bandwidth-in-resource-weight", d.BandwidthInWeight,
		"weight of inbound bandwidth in a broker's usage")
	f.Float64Var(&v.bwOutW, "load-balancer-bandwidth-out-resource-weight", d.BandwidthOutWeight,
		"weight of outbound bandwidth in a broker's usage")
	f.Float64Var(&v.nicGbps, "load-balancer-override-broker-nic-speed-gbps", 0,
		"network speed for the bandwidth usage (0: bandwidth not counted)")
	return v
}

// Apply sets the flags' values in cfg.
func (v *Flags) Apply(cfg *Config) {
	th := DefaultThresholds()
	th.SheddingEnabled, th.GracePeriod, th.ThresholdPercent, th.OverloadedPercent = v.shedding, v.grace, v.shedThreshold, v.overloaded
	th.AutoSplitEnabled, th.MaxBundleTopics, th.MaxBundleSessions = v.split, v.maxTopics, v.maxSessions
	th.MaxBundleMsgRate, th.MaxBundleBandwidth, th.MaxBundles = v.maxMsgRate, v.maxBandwidthMB*(1<<20), v.maxBundles
	th.CPUWeight, th.MemoryWeight, th.BandwidthInWeight, th.BandwidthOutWeight = v.cpuW, v.memW, v.bwInW, v.bwOutW
	cfg.Thresholds = th
	cfg.Disabled = !v.enabled
	cfg.ReportThresholdPercent, cfg.ReportInterval, cfg.ReportMaxInterval = v.reportThreshold, v.reportMin, v.reportMax
	cfg.SheddingInterval, cfg.NICSpeedGbps = v.shedInterval, v.nicGbps
}

// ConfigKeys are the broker.conf keys of the flags.
var ConfigKeys = []config.Key{
	{Name: "loadBalancerEnabled", Flag: "load-balancer-enabled"},
	{Name: "loadBalancerReportUpdateThresholdPercentage", Flag: "load-balancer-report-update-threshold-percentage"},
	{Name: "loadBalancerReportUpdateMinIntervalMillis", Flag: "load-balancer-report-update-min-interval", Map: config.Millis},
	{Name: "loadBalancerReportUpdateMaxIntervalMinutes", Flag: "load-balancer-report-update-max-interval", Map: config.Minutes},
	{Name: "loadBalancerSheddingEnabled", Flag: "load-balancer-shedding-enabled"},
	{Name: "loadBalancerSheddingIntervalMinutes", Flag: "load-balancer-shedding-interval", Map: config.Minutes},
	{Name: "loadBalancerSheddingGracePeriodMinutes", Flag: "load-balancer-shedding-grace-period", Map: config.Minutes},
	{Name: "loadBalancerBrokerThresholdShedderPercentage", Flag: "load-balancer-broker-threshold-shedder-percentage"},
	{Name: "loadBalancerBrokerOverloadedThresholdPercentage", Flag: "load-balancer-broker-overloaded-threshold-percentage"},
	{Name: "loadBalancerAutoBundleSplitEnabled", Flag: "load-balancer-auto-bundle-split-enabled"},
	{Name: "loadBalancerNamespaceBundleMaxTopics", Flag: "load-balancer-namespace-bundle-max-topics"},
	{Name: "loadBalancerNamespaceBundleMaxSessions", Flag: "load-balancer-namespace-bundle-max-sessions"},
	{Name: "loadBalancerNamespaceBundleMaxMsgRate", Flag: "load-balancer-namespace-bundle-max-msg-rate"},
	{Name: "loadBalancerNamespaceBundleMaxBandwidthMbytes", Flag: "load-balancer-namespace-bundle-max-bandwidth-mbytes"},
	{Name: "loadBalancerNamespaceMaximumBundles", Flag: "load-balancer-namespace-maximum-bundles"},
	{Name: "loadBalancerCPUResourceWeight", Flag: "load-balancer-cpu-resource-weight"},
	{Name: "loadBalancerMemoryResourceWeight", Flag: "load-balancer-memory-resource-weight"},
	{Name: "loadBalancerBandwithInResourceWeight", Flag: "load-balancer-bandwidth-in-resource-weight"},
	{Name: "loadBalancerBandwithOutResourceWeight", Flag: "load-balancer-bandwidth-out-resource-weight"},
	{Name: "loadBalancerOverrideBrokerNicSpeedGbps", Flag: "load-balancer-override-broker-nic-speed-gbps"},
}
