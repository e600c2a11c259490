package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/metadata/metadatatest"
)

// TestCoordinatorCollectsTogether: transactions ending together are collected by one commit;
// when one participant still holds its record, the commit is refused and each is tried
// alone: the others go, that one stays until its record is gone.
func TestCoordinatorCollectsTogether(t *testing.T) {
	st, c, ctx := startTestCoordinator(t, CoreConfig{TC: 7, GCDelayMs: 10})
	call := func(f func(done func(ID, error))) ID { return callCoordinator(t, f) }
	var ids []ID
	for i := 0; i < 3; i++ {
		id := call(func(d func(ID, error)) { c.NewTxn(time.Minute, d) })
		call(func(d func(ID, error)) { c.AddPartitions(id, []string{"t/a"}, d) })
		ids = append(ids, id)
	}
	record := func(id ID) string { return metadata.TxnOpenKey("t/a", id.Key()) }
	for _, id := range ids {
		if _, err := st.Get(ctx, record(id)); err != nil {
			t.Fatalf("record of %v after its add: %v", id, err)
		}
	}
	// The participant applied two of them; the third keeps its record.
	for _, id := range ids[:2] {
		if err := st.Delete(ctx, record(id), metadata.AnyVersion); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		call(func(d func(ID, error)) { c.End(id, true, d) })
	}
	gone := func(id ID) bool {
		_, err := st.Get(ctx, metadata.TxnHeaderKey(id.Most, id.Least))
		return errors.Is(err, metadata.ErrNotFound)
	}
	for !gone(ids[0]) || !gone(ids[1]) {
		if ctx.Err() != nil {
			t.Fatal("the headers of the applied transactions were not collected")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	if gone(ids[2]) {
		t.Fatal("a header was collected while its participant's record remains")
	}
	if err := st.Delete(ctx, record(ids[2]), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	for !gone(ids[2]) {
		if ctx.Err() != nil {
			t.Fatal("the last header was not collected once its record was gone")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}

// BenchmarkCoordinator measures one coordinator on an embedded etcd, without a broker: 64
// workers each run transactions (NEW_TXN, ADD of one partition, the participant's
// record deleted as its apply does, END commit) for 3 s, and, as the reference on the same
// store, plain puts for 3 s. It reports txn/s, put/s and their ratio (store writes per
// transaction are about 2 plus shared applies and collections), through the etcd client
// over TCP and through in-process calls (Embedded.OpenStore, as standalone does).
//
//	go test ./txn -run '^$' -bench Coordinator -benchtime 1x
func BenchmarkCoordinator(b *testing.B) {
	ctx := context.Background()
	e, err := metadata.StartEmbedded(ctx, metadata.EmbeddedConfig{Name: "bench", DataDir: b.TempDir(),
		ListenClient: "127.0.0.1:0", ListenPeer: "127.0.0.1:0", Fast: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	b.Run("tcp", func(b *testing.B) {
		benchCoordinator(b, metadatatest.NewStore(b, e.Endpoints()))
	})
	b.Run("in-process", func(b *testing.B) {
		st, err := e.OpenStore(ctx, metadata.Config{Namespace: metadatatest.RandomNamespace()})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchCoordinator(b, st)
	})
}

func benchCoordinator(b *testing.B, st metadata.Store) {
	ctx := context.Background()
	c, err := StartCoordinator(ctx, CoordinatorConfig{CoreConfig: CoreConfig{TC: 1}, Store: st,
		Canon: func(s string) (string, error) { return s, nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const workers, window = 64, 3 * time.Second
	call := func(f func(done func(ID, error))) (ID, error) {
		ch := make(chan struct{})
		var got ID
		var gerr error
		f(func(id ID, err error) { got, gerr = id, err; close(ch) })
		<-ch
		return got, gerr
	}
	run := func(op func(w int) error) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(window)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for time.Now().Before(end) {
					if err := op(w); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			}(w)
		}
		wg.Wait()
		return float64(n.Load()) / window.Seconds()
	}
	for i := 0; i < b.N; i++ {
		puts := run(func(w int) error {
			_, err := st.Put(ctx, fmt.Sprintf("/bench/put-%d", w), []byte("x"), metadata.AnyVersion)
			return err
		})
		var phase [4]atomic.Int64 // time spent in each step, summed
		timed := func(i int, f func() error) error {
			t0 := time.Now()
			err := f()
			phase[i].Add(int64(time.Since(t0)))
			return err
		}
		txns := run(func(w int) error {
			topic := fmt.Sprintf("t/%d", w)
			var id ID
			err := timed(0, func() (err error) {
				id, err = call(func(d func(ID, error)) { c.NewTxn(time.Minute, d) })
				return err
			})
			if err == nil {
				err = timed(1, func() error {
					_, err := call(func(d func(ID, error)) { c.AddPartitions(id, []string{topic}, d) })
					return err
				})
			}
			if err == nil {
				err = timed(2, func() error {
					return st.Delete(ctx, metadata.TxnOpenKey(topic, id.Key()), metadata.AnyVersion)
				})
			}
			if err == nil {
				err = timed(3, func() error {
					_, err := call(func(d func(ID, error)) { c.End(id, true, d) })
					return err
				})
			}
			return err
		})
		b.ReportMetric(puts, "put/s")
		b.ReportMetric(txns, "txn/s")
		b.ReportMetric(txns/puts, "txn-per-put")
		n := txns * window.Seconds()
		for i, name := range []string{"new", "add", "apply", "end"} {
			b.ReportMetric(float64(phase[i].Load())/n/1e6, name+"-ms")
		}
	}
}

// TestCoordinatorAddsManyPartitions: one ADD of 200 partitions (more operations than etcd's
// default limit per commit) creates the header and every participant's record.
func TestCoordinatorAddsManyPartitions(t *testing.T) {
	st, c, ctx := startTestCoordinator(t, CoreConfig{TC: 3})
	call := func(f func(done func(ID, error))) ID { return callCoordinator(t, f) }
	id := call(func(d func(ID, error)) { c.NewTxn(time.Minute, d) })
	topics := make([]string, 200)
	for i := range topics {
		topics[i] = fmt.Sprintf("t/%d", i)
	}
	call(func(d func(ID, error)) { c.AddPartitions(id, topics, d) })
	for _, tp := range topics {
		if _, err := st.Get(ctx, metadata.TxnOpenKey(tp, id.Key())); err != nil {
			t.Fatalf("record of %s: %v", tp, err)
		}
	}
}

// startTestCoordinator starts a coordinator on a fresh embedded etcd; it closes on cleanup.
func startTestCoordinator(t *testing.T, cfg CoreConfig) (metadata.Store, *Coordinator, context.Context) {
	t.Helper()
	st := metadatatest.NewStore(t, metadatatest.Embedded(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := StartCoordinator(ctx, CoordinatorConfig{CoreConfig: cfg, Store: st,
		Canon: func(s string) (string, error) { return s, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return st, c, ctx
}

// callCoordinator runs one request and waits for its answer, failing the test on an error.
func callCoordinator(t *testing.T, f func(done func(ID, error))) ID {
	t.Helper()
	ch := make(chan error, 1)
	var got ID
	f(func(id ID, err error) { got = id; ch <- err })
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	return got
}
