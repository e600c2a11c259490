package autorecovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/autorecovery"
	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServiceReplicatesLostBookie runs the real driver (Env loop, etcd, bookies in this
// process): two services (auditor + worker each) on four bookies; a closed ledger and an open
// one with a live writer; one bookie is stopped for good. The elected auditor marks the
// ledgers, the workers re-replicate, the marks go away, and every entry is on its write set.
func TestServiceReplicatesLostBookie(t *testing.T) {
	eps := metadatatest.Embedded(t)
	store := metadatatest.NewStore(t, eps)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var bks []*bookie.Bookie
	for i := 0; i < 4; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := bookie.Start(ctx, bookie.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Store: store,
			Logger: quiet, SessionTTL: time.Second, GCInterval: -1})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		bks = append(bks, b)
	}
	closed := map[*bookie.Bookie]bool{}
	defer func() {
		for _, b := range bks {
			if !closed[b] {
				b.Close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := client.NewPool(client.Options{})
	defer pool.Close()
	lc := ledger.NewClient(store, pool, ledger.Options{AddTimeout: time.Second})
	defer lc.Close()
	pw := []byte("pw")
	payload := func(l, e int64) []byte { return []byte(fmt.Sprintf("%d/%d", l, e)) }
	write := func(h *ledger.Handle, from, n int64) {
		for e := from; e < from+n; e++ {
			if _, err := h.Append(ctx, payload(h.ID(), e)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h1, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	write(h1, 0, 30)
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	victim := h1.Metadata().Ensembles[0].Bookies[0]
	h2, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	write(h2, 0, 30)

	var svcs []*autorecovery.Service
	for i := 0; i < 2; i++ {
		s, err := autorecovery.Start(autorecovery.Config{Store: store, ID: fmt.Sprint("ar-", i), RunAuditor: true, RunWorker: true,
			SessionTTL: time.Second, RequestTimeout: 2 * time.Second, Logger: quiet,
			Auditor: autorecovery.AuditorConfig{Interval: 50 * time.Millisecond, LostBookieDelay: 100 * time.Millisecond, CheckInterval: -1},
			Worker:  autorecovery.WorkerConfig{PollInterval: 50 * time.Millisecond, OpenLedgerGrace: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, s)
	}
	defer func() {
		for _, s := range svcs {
			s.Close()
		}
	}()
	for _, b := range bks {
		if b.ID() == victim {
			b.Close()
			closed[b] = true
		}
	}
	write(h2, 30, 30) // the live writer changes ensemble away from the victim

	// Wait (on a watch of the whole namespace) until no ledger references the victim and
	// nothing is marked.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch := store.Watch(wctx, "/", 0)
	for {
		st, err := autorecovery.ReadStatus(ctx, store)
		if err != nil {
			t.Fatal(err)
		}
		refs := 0
		for _, h := range []*ledger.Handle{h1, h2} {
			kv, err := store.Get(ctx, metadata.LedgerKey(h.ID()))
			if err != nil {
				t.Fatal(err)
			}
			m, _ := ledger.UnmarshalMetadata(kv.Value)
			for _, en := range m.Ensembles {
				if slices.Contains(en.Bookies, victim) {
					refs++
				}
			}
		}
		if refs == 0 && len(st.Ledgers) == 0 {
			if st.Auditor == nil || len(st.Workers) != 2 {
				t.Fatalf("status %+v", st)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not re-replicated: %d references, status %+v", refs, st)
		case _, ok := <-watch.C:
			if !ok {
				t.Fatalf("watch ended: %v", watch.Err())
			}
		}
	}
	if err := h2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*ledger.Handle{h1, h2} {
		r, err := lc.Open(ctx, h.ID(), ledger.OpenOptions{Password: pw})
		if err != nil {
			t.Fatal(err)
		}
		m := r.Metadata()
		es, err := r.Read(ctx, 0, m.LastEntryID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if !bytes.Equal(e.Payload, payload(h.ID(), e.EntryID)) {
				t.Fatalf("ledger %d entry %d differs", h.ID(), e.EntryID)
			}
		}
	}
	// Progress is a metric: some service counted the replicated ledgers and copied bytes.
	var metrics bytes.Buffer
	for _, s := range svcs {
		rec := httptest.NewRecorder()
		s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		metrics.Write(rec.Body.Bytes())
	}
	for _, want := range []string{`magnetar_autorecovery_attempts_total{outcome="replicated"}`, "magnetar_autorecovery_bytes_copied_total",
		"magnetar_autorecovery_auditor_leader 1", "magnetar_autorecovery_ledgers_marked_total"} {
		if !strings.Contains(metrics.String(), want) {
			t.Fatalf("metrics lack %q:\n%s", want, metrics.String())
		}
	}
	if err := autorecovery.RunDecommission(ctx, store, victim, 50*time.Millisecond, nil); err != nil {
		t.Fatalf("decommission after re-replication: %v", err)
	}
	err = autorecovery.RunDecommission(ctx, store, bks[1].ID(), 50*time.Millisecond, nil)
	if bks[1].ID() != victim && !errors.Is(err, autorecovery.ErrBookieUp) {
		t.Fatalf("decommission of a live bookie: %v", err)
	}
}
