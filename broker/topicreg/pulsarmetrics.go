package topicreg

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/policy"
)

// scrapeTopicTimeout bounds the reading of one topic's statistics in ScrapeTopics.
const scrapeTopicTimeout = 2 * time.Second

// ScrapeTopics calls fn, on the caller's goroutine, with every loaded topic's name, the
// write quorum of its ledgers (0 for a non-persistent topic) and its statistics (the
// Pulsar-named metrics of package broker/pulsarmetrics read them at scrape time). A topic
// whose statistics are not read within scrapeTopicTimeout, or before ctx ends, is left out.
func (reg *Registry) ScrapeTopics(ctx context.Context, fn func(name string, writeQuorum int, st api.TopicStats)) {
	for _, t := range reg.LoadedTopics() {
		if ctx.Err() != nil {
			return
		}
		tctx, cancel := context.WithTimeout(ctx, scrapeTopicTimeout)
		st, err := t.Stats(tctx)
		cancel()
		if err != nil {
			continue // closing, or too slow
		}
		wq := 0
		if t.Name().IsPersistent() {
			cfg := reg.cfg.ManagedLedger
			if v, ok := reg.applied.Load(t.Name().String()); ok {
				cfg = reg.managedLedgerConfig(v.(policy.Resolved))
			}
			wq = max(cfg.WriteQuorum, 1)
		}
		fn(t.Name().String(), wq, st)
	}
}
