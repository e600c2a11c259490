package pulsarmetrics_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/pulsarmetrics"
)

// BenchmarkGather measures a scrape's cost in the collector (the topics' statistics are
// given; reading them from the topics is the source's cost): topics=N in 10 namespaces,
// two subscriptions each, per topic and per namespace.
func BenchmarkGather(b *testing.B) {
	for _, n := range []int{100, 1000} {
		var src fakeSource
		for i := range n {
			src = append(src, fakeTopic{name: fmt.Sprintf("persistent://t/ns%d/topic-%d", i%10, i), wq: 2,
				st: api.TopicStats{MsgRateIn: 1, StorageSize: 100, Subscriptions: map[string]api.SubscriptionStats{
					"a": {MsgBacklog: 1}, "b": {MsgBacklog: 2}}}})
		}
		for _, nsLevel := range []bool{false, true} {
			b.Run(fmt.Sprintf("topics=%d/namespaceLevel=%v", n, nsLevel), func(b *testing.B) {
				reg := prometheus.NewRegistry()
				reg.MustRegister(pulsarmetrics.New(pulsarmetrics.Config{Cluster: "c", NamespaceLevel: nsLevel, Source: src}))
				for b.Loop() {
					if _, err := reg.Gather(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
