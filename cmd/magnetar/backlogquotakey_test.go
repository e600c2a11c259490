package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/config"
)

// TestBacklogQuotaDefaultLimitGBKey: Pulsar's deprecated backlogQuotaDefaultLimitGB (set by
// pulsar-client-go's integration-tests/conf/standalone.conf) becomes the default quota in
// bytes and, above 0, wins over backlogQuotaDefaultLimitBytes in either order, as Pulsar's
// broker resolves the two; 0 leaves the bytes key in force.
func TestBacklogQuotaDefaultLimitGBKey(t *testing.T) {
	for _, c := range []struct {
		conf string
		want int64
	}{
		{"", -1},
		{"backlogQuotaDefaultLimitGB=10\n", 10 << 30},
		{"backlogQuotaDefaultLimitGB=0.5\n", 1 << 29},
		{"backlogQuotaDefaultLimitGB=0\nbacklogQuotaDefaultLimitBytes=4096\n", 4096},
		{"backlogQuotaDefaultLimitBytes=4096\nbacklogQuotaDefaultLimitGB=2\n", 2 << 30},
		{"backlogQuotaDefaultLimitGB=2\nbacklogQuotaDefaultLimitBytes=4096\n", 2 << 30},
		{"backlogQuotaDefaultLimitBytes=4096\n", 4096},
	} {
		var p policyFlags
		fs := pflag.NewFlagSet("standalone", pflag.ContinueOnError)
		p.add(fs)
		es, err := config.Parse(strings.NewReader(c.conf))
		if err != nil {
			t.Fatal(err)
		}
		res, err := config.Apply(fs, "standalone.conf", es, policyKeys)
		if err != nil {
			t.Fatalf("%q: %v", c.conf, err)
		}
		if len(res.Ignored) != 0 {
			t.Fatalf("%q: ignored %v", c.conf, res.Ignored)
		}
		var bc broker.Config
		p.apply(&bc)
		if got := bc.Policies.BacklogQuotaDefaultLimitBytes; got != c.want {
			t.Errorf("%q: default quota %d bytes, want %d", c.conf, got, c.want)
		}
	}
	var p policyFlags
	fs := pflag.NewFlagSet("standalone", pflag.ContinueOnError)
	p.add(fs)
	es, _ := config.Parse(strings.NewReader("backlogQuotaDefaultLimitGB=lots\n"))
	if _, err := config.Apply(fs, "standalone.conf", es, policyKeys); err == nil || !strings.Contains(err.Error(), "backlogQuotaDefaultLimitGB") {
		t.Errorf("a bad value: %v", err)
	}
}
