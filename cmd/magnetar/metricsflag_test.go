package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/config"
)

// TestExposeTopicLevelMetricsKey: broker.conf's exposeTopicLevelMetricsInPrometheus (and its
// flag) decides whether the broker sums its pulsar_* metrics per namespace; Pulsar's
// default, true, exports them per topic.
func TestExposeTopicLevelMetricsKey(t *testing.T) {
	for conf, nsLevel := range map[string]bool{
		"": false, "exposeTopicLevelMetricsInPrometheus=true\n": false, "exposeTopicLevelMetricsInPrometheus=false\n": true,
		"expose-topic-level-metrics-in-prometheus=false\n": true,
	} {
		bc := policyConfig(t, conf)
		if bc.NamespaceLevelMetrics != nsLevel {
			t.Errorf("%q: NamespaceLevelMetrics %v, want %v", conf, bc.NamespaceLevelMetrics, nsLevel)
		}
	}
}

// policyConfig is the broker.Config the policy flags make of broker.conf text conf (every
// key known, none ignored).
func policyConfig(t *testing.T, conf string) broker.Config {
	t.Helper()
	var p policyFlags
	fs := pflag.NewFlagSet("broker", pflag.ContinueOnError)
	p.add(fs)
	es, err := config.Parse(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	res, err := config.Apply(fs, "broker.conf", es, policyKeys)
	if err != nil {
		t.Fatalf("%q: %v", conf, err)
	}
	if len(res.Ignored) != 0 {
		t.Fatalf("%q: ignored %v", conf, res.Ignored)
	}
	var bc broker.Config
	p.apply(&bc)
	return bc
}
