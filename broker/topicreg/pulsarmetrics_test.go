package topicreg_test

import (
	"testing"

	"github.com/magnetar-io/magnetar/broker/api"
	"github.com/magnetar-io/magnetar/broker/topicname"
)

// TestScrapeTopics: every loaded topic is reported with its statistics and the write
// quorum of its ledgers: the persistence policy's once one applies, 1 by default, 0 for a
// non-persistent topic.
func TestScrapeTopics(t *testing.T) {
	ctx := testCtx(t)
	rec, own := newFakeRecords(), &fakeOwner{}
	own.serving.Store(true)
	r := newRegistry(t, rec, own)
	p, np := topicname.MustParse("persistent://public/default/a"), topicname.MustParse("non-persistent://public/default/b")
	for _, n := range []topicname.Name{p, np} {
		if _, err := r.Topic(ctx, n, true, false); err != nil {
			t.Fatal(err)
		}
	}
	scrape := func() map[string]int {
		got := map[string]int{}
		r.ScrapeTopics(ctx, func(name string, wq int, st api.TopicStats) {
			if st.Subscriptions == nil {
				t.Errorf("%s: statistics without their subscriptions map", name)
			}
			got[name] = wq
		})
		return got
	}
	if got := scrape(); len(got) != 2 || got[p.String()] != 1 || got[np.String()] != 0 {
		t.Fatalf("scraped %v, want %s with write quorum 1 and %s with 0", got, p, np)
	}
	body := []byte(`{"bookkeeperEnsemble":3,"bookkeeperWriteQuorum":2,"bookkeeperAckQuorum":2,"managedLedgerMaxMarkDeleteRate":0}`)
	if err := r.SetTopicPolicy(ctx, p.String(), "persistence", "", body); err != nil {
		t.Fatal(err)
	}
	if got := scrape(); got[p.String()] != 2 {
		t.Fatalf("scraped %v after a persistence policy of write quorum 2", got)
	}
}
