package interop

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/mledger"
)

// memOffloader is an in-memory mledger.Offloader: the object store's side is tested in
// package offload; here only the admin API over it matters.
type memOffloader struct {
	mu      sync.Mutex
	ledgers map[string][][]byte // by attempt uuid
}

func (m *memOffloader) Driver() string { return "filesystem" }

func (m *memOffloader) Offload(ctx context.Context, req mledger.OffloadRequest, r mledger.EntryReader) (map[string]string, error) {
	es, err := r.ReadEntries(ctx, 0, req.Entries-1)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ledgers[req.UUID] = es
	return nil, nil
}

func (m *memOffloader) ReadOffloaded(_ context.Context, l mledger.OffloadedLedger, first, last int64) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	es, ok := m.ledgers[l.UUID]
	if !ok || last >= int64(len(es)) {
		return nil, fmt.Errorf("ledger %d attempt %s: no entries %d..%d", l.LedgerID, l.UUID, first, last)
	}
	return es[first : last+1], nil
}

func (m *memOffloader) DeleteOffloaded(_ context.Context, l mledger.OffloadedLedger) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ledgers, l.UUID)
	return nil
}

// TestOffloadPulsarAdmin: pulsar-client-go's pulsaradmin offload calls against a broker with an
// offloader: the namespace thresholds and deletion lag (defaults, Pulsar's 400 for a negative
// age), the topic offload policies (this pulsaradmin has no namespace ones), and a triggered offload followed to SUCCESS
// after which a consumer from earliest reads every message.
func TestOffloadPulsarAdmin(t *testing.T) {
	off := &memOffloader{ledgers: map[string][][]byte{}}
	c, topic, tn := policyTopic(t, func(cfg *broker.Config) {
		cfg.Offloader = off
		cfg.ManagedLedger.MaxEntriesPerLedger = 5
		cfg.ManagedLedger.RetentionTime, cfg.ManagedLedger.RetentionSize = -1, -1
	})
	a := c.admin()
	ns, err := utils.GetNamespaceName(tn.GetTenant() + "/" + tn.GetNamespace())
	if err != nil {
		t.Fatal(err)
	}
	nsa := a.Namespaces()
	if v, err := nsa.GetOffloadThreshold(*ns); err != nil || v != -1 {
		t.Fatalf("default offload threshold %d, %v; want -1", v, err)
	}
	if err := nsa.SetOffloadThresholdInSeconds(*ns, -60); err == nil {
		t.Fatal("a negative offloadThresholdInSeconds was accepted")
	}
	for _, v := range []int64{0, 60} {
		if err := nsa.SetOffloadThresholdInSeconds(*ns, v); err != nil {
			t.Fatalf("offloadThresholdInSeconds %d: %v", v, err)
		}
		if got, err := nsa.GetOffloadThresholdInSeconds(*ns); err != nil || got != v {
			t.Fatalf("offloadThresholdInSeconds %d read back %d, %v", v, got, err)
		}
	}
	if err := nsa.SetOffloadThresholdInSeconds(*ns, -1); err != nil { // back to off
		t.Fatal(err)
	}
	if err := nsa.SetOffloadThreshold(*ns, 1<<30); err != nil {
		t.Fatal(err)
	}
	if v, err := nsa.GetOffloadThreshold(*ns); err != nil || v != 1<<30 {
		t.Fatalf("offload threshold %d, %v", v, err)
	}
	for _, lag := range []int64{-1, 0, 1000} {
		if err := nsa.SetOffloadDeleteLag(*ns, lag); err != nil {
			t.Fatal(err)
		}
		if got, err := nsa.GetOffloadDeleteLag(*ns); err != nil || got != lag {
			t.Fatalf("deletion lag %d read back %d, %v", lag, got, err)
		}
	}
	if err := nsa.ClearOffloadDeleteLag(*ns); err != nil {
		t.Fatal(err)
	}
	if got, err := nsa.GetOffloadDeleteLag(*ns); err != nil || got != -1 {
		t.Fatalf("cleared deletion lag read back %d, %v; want -1 (unset)", got, err)
	}
	ta := a.Topics()
	if err := ta.SetOffloadPolicies(tn, utils.OffloadPolicies{ManagedLedgerOffloadThresholdInBytes: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	if p, err := ta.GetOffloadPolicies(tn); err != nil || p == nil || p.ManagedLedgerOffloadThresholdInBytes != 1<<40 {
		t.Fatalf("topic offload policies: %+v, %v", p, err)
	}
	if err := ta.RemoveOffloadPolicies(tn); err != nil {
		t.Fatal(err)
	}
	if p, err := ta.GetOffloadPolicies(tn); err != nil || p != nil {
		t.Fatalf("removed topic offload policies: %+v, %v", p, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := c.client()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 23
	for i := range n {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := ta.OffloadStatus(tn); err != nil || st.Status != utils.NOTRUN {
		t.Fatalf("status before: %+v, %v", st, err)
	}
	last, err := ta.GetLastMessageID(tn)
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Offload(tn, last); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, err := ta.OffloadStatus(tn)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == utils.SUCCESS {
			if st.FirstUnOffloadedMessage.LedgerID != last.LedgerID {
				t.Fatalf("first unoffloaded %+v, want in ledger %d", st.FirstUnOffloadedMessage, last.LedgerID)
			}
			break
		}
		if st.Status == utils.ERROR || time.Now().After(deadline) {
			t.Fatalf("offload: %+v", st)
		}
	}
	off.mu.Lock()
	copies := len(off.ledgers)
	off.mu.Unlock()
	if copies < 4 {
		t.Fatalf("%d ledgers offloaded, want the 4 closed before the last message's", copies)
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "all", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("m-%02d", i); string(m.Payload()) != want {
			t.Fatalf("message %d: %q, want %q", i, m.Payload(), want)
		}
	}
}
