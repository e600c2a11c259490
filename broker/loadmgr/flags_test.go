package loadmgr

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/config"
)

func TestFlagsFromBrokerConf(t *testing.T) {
	fs := pflag.NewFlagSet("broker", pflag.ContinueOnError)
	fl := AddFlags(fs)
	var cfg Config
	fl.Apply(&cfg)
	if cfg.Thresholds != DefaultThresholds() || cfg.Disabled {
		t.Fatalf("defaults: %+v", cfg.Thresholds)
	}
	conf := `
loadBalancerEnabled=true
loadBalancerSheddingIntervalMinutes=2
loadBalancerSheddingGracePeriodMinutes=5
loadBalancerReportUpdateMaxIntervalMinutes=3
loadBalancerReportUpdateMinIntervalMillis=250
loadBalancerBrokerThresholdShedderPercentage=20
loadBalancerAutoBundleSplitEnabled=false
loadBalancerNamespaceBundleMaxMsgRate=5000
loadBalancerNamespaceBundleMaxBandwidthMbytes=10
loadBalancerNamespaceMaximumBundles=16
`
	es, err := config.Parse(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--load-balancer-shedding-enabled=false"}); err != nil {
		t.Fatal(err)
	}
	res, err := config.Apply(fs, "broker.conf", es, ConfigKeys)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ignored) != 0 {
		t.Fatalf("ignored keys %v", res.Ignored)
	}
	fl.Apply(&cfg)
	th := cfg.Thresholds
	if cfg.SheddingInterval != 2*time.Minute || th.GracePeriod != 5*time.Minute || cfg.ReportMaxInterval != 3*time.Minute ||
		cfg.ReportInterval != 250*time.Millisecond || th.ThresholdPercent != 20 || th.AutoSplitEnabled ||
		th.MaxBundleMsgRate != 5000 || th.MaxBundleBandwidth != 10<<20 || th.MaxBundles != 16 || th.SheddingEnabled {
		t.Fatalf("config %+v thresholds %+v", cfg, th)
	}
}
