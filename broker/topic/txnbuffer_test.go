package topic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/txnbuf"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/txn"
)

// Tests of the transaction buffer's driver (txnbuffer.go): what the topic goroutine does
// with the decisions of the buffer's core (package txnbuf), on fakes (txnfakes_test.go).
// The core's simulation proves the decisions; these prove they are performed as decided.

var errStoreDown = errors.New("metadata store unavailable")

func jsonPos(t *testing.T, p topic.Position) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTxnCollectedHeader: the outcome of a transaction whose header is gone is read from
// the topic's aborted record of it — none: committed, and its entries stay readable (T1:
// unknown is never aborted); one (an apply of an earlier load landed): aborted.
func TestTxnCollectedHeader(t *testing.T) {
	for _, tc := range []struct {
		name          string
		abortedRecord bool
	}{{"no aborted record", false}, {"aborted record", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newTxnWorld(t)
				w.open()
				p := w.producer()
				id := w.begin(1, "")
				pos := w.send(p, 1, &id)
				if tc.abortedRecord {
					w.store.put(metadata.TxnAbortedKey(w.key, id.Key()), jsonPos(t, pos))
				}
				w.tracker.collect(id)
				synctest.Wait()

				if st := w.bufferStats(); st.Open != 0 || st.MaxRead != nil {
					t.Fatalf("the outcome is not applied: %+v", st)
				}
				_, aborted, err := w.tp.TxnInBuffer(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if aborted != tc.abortedRecord {
					t.Fatalf("a collected header with aborted record %v is taken for aborted=%v", tc.abortedRecord, aborted)
				}
				conn := &txnConn{}
				c, ch := w.subscribe("s", 1, conn)
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
				c.Flow(10)
				synctest.Wait()
				want := []uint64{uint64(pos.EntryID)}
				if tc.abortedRecord {
					want = nil
				}
				if got := conn.delivered(); !slices.Equal(got, want) {
					t.Fatalf("a reader from the earliest entry gets %v, want %v", got, want)
				}
			})
		})
	}
}

// TestTxnRecoveredOpenRecordPinsReads: an open record found at load (its transaction's
// outcome unknown) bounds reads at the stored watermark until the outcome is applied (T2).
func TestTxnRecoveredOpenRecordPinsReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		for i := range uint64(4) {
			w.log.Log.AddAsync(txnPayload(t, i), func(topic.Position, error) {})
		}
		id := w.begin(1, "")
		wm := topic.Position{LedgerID: 1, EntryID: 1}
		w.store.put(metadata.TxnWatermarkKey(w.key), jsonPos(t, wm))
		w.open()
		synctest.Wait()

		if p, ok := w.log.lastMaxRead(); !ok || p == nil || *p != wm {
			t.Fatalf("the log's read bound after the load is %v (set: %v), want the watermark %v", p, ok, wm)
		}
		if st := w.bufferStats(); st.MaxRead == nil || *st.MaxRead != wm {
			t.Fatalf("max read %v, want %v", st.MaxRead, wm)
		}
		conn := &txnConn{}
		c, ch := w.subscribe("s", 1, conn)
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
		c.Flow(10)
		synctest.Wait()
		if got := conn.delivered(); !slices.Equal(got, []uint64{0}) {
			t.Fatalf("while the recovered transaction is unresolved a reader gets %v, want [0]", got)
		}

		w.tracker.end(id, txn.Committed)
		synctest.Wait()
		if got := conn.delivered(); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
			t.Fatalf("after the outcome a reader gets %v, want [0 1 2 3]", got)
		}
	})
}

// TestTxnAbortedSetBeforeBound: when an abort is applied, the readers' aborted set holds the
// transaction before the read bound moves past its entries: a reader that reads at once
// (the topic goroutine is held right after the bound moved) skips them (T2).
func TestTxnAbortedSetBeforeBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		w.open()
		p := w.producer()
		conn := &txnConn{}
		c, ch := w.subscribe("s", 1, conn)
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
		c.Flow(10)
		id := w.begin(1, "")
		xpos := w.send(p, 1, &id)
		ppos := w.send(p, 2, nil)
		if got := conn.delivered(); len(got) != 0 {
			t.Fatalf("entries %v delivered behind an open transaction", got)
		}

		gate := make(chan struct{})
		w.log.mu.Lock()
		w.log.onSetMaxRead = func(b *topic.Position) {
			if b == nil || xpos.Less(*b) {
				<-gate
			}
		}
		w.log.mu.Unlock()
		w.tracker.end(id, txn.Aborted)
		synctest.Wait()
		if got := conn.delivered(); slices.Contains(got, uint64(xpos.EntryID)) {
			t.Fatalf("the aborted entry %v was delivered: the bound moved before the aborted set (delivered %v)", xpos, got)
		}
		close(gate)
		synctest.Wait()
		if got := conn.delivered(); !slices.Equal(got, []uint64{uint64(ppos.EntryID)}) {
			t.Fatalf("delivered %v, want only the plain entry %v", got, ppos)
		}
	})
}

// TestTxnApplyIsOneCommit: each apply is one store commit — the aborted record, the
// watermark and the deletion of the open record together (T4: the watermark never passes
// an abort without its aborted record; a reload never sees one without the other).
func TestTxnApplyIsOneCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		w.open()
		p := w.producer()
		a, b := w.begin(1, ""), w.begin(2, "")
		w.send(p, 1, &a)
		w.send(p, 2, &b)
		w.send(p, 3, &a)
		w.tracker.end(a, txn.Aborted)
		synctest.Wait()
		w.tracker.end(b, txn.Committed)
		synctest.Wait()
		if st := w.bufferStats(); st.Open != 0 {
			t.Fatalf("not applied: %+v", st)
		}

		writes := w.store.writes()
		wmKey := metadata.TxnWatermarkKey(w.key)
		for _, x := range []struct {
			id      txn.ID
			aborted bool
		}{{a, true}, {b, false}} {
			openKey, abortedKey := metadata.TxnOpenKey(w.key, x.id.Key()), metadata.TxnAbortedKey(w.key, x.id.Key())
			var applies []storeCall
			for _, c := range writes {
				if len(c.touches(openKey)) > 0 {
					applies = append(applies, c)
				}
			}
			if len(applies) != 1 || applies[0].kind != "commit" {
				t.Fatalf("%v: the open record is written by %v, want one commit", x.id, applies)
			}
			apply := applies[0]
			if len(apply.touches(wmKey)) != 1 {
				t.Errorf("%v: the apply commit %v does not move the watermark", x.id, apply.ops)
			}
			if got := len(apply.touches(abortedKey)); got != map[bool]int{true: 1, false: 0}[x.aborted] {
				t.Errorf("%v (aborted %v): the apply commit %v puts its aborted record %d times", x.id, x.aborted, apply.ops, got)
			}
			for _, c := range writes {
				if len(c.touches(abortedKey)) > 0 && len(c.touches(openKey)) == 0 {
					t.Errorf("%v: its aborted record is written apart from its apply: %v", x.id, c)
				}
			}
		}
		for _, c := range writes {
			if len(c.touches(wmKey)) == 0 {
				continue
			}
			applied := false
			for _, op := range c.ops {
				applied = applied || op.Delete
			}
			if c.kind != "commit" || !applied {
				t.Errorf("the watermark is written apart from an apply: %v", c)
			}
		}
	})
}

// TestTxnEndedNoticeKeepsApplyingRecord: the coordinator's notice that a transaction ended
// may arrive before or after its outcome. It drops the open record of a transaction the
// buffer never knew, but never one whose apply is not durable yet (a reload would have
// nothing to learn the outcome from), nor one still open here.
func TestTxnEndedNoticeKeepsApplyingRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		w.open()
		p := w.producer()
		x := w.begin(1, "")
		w.send(p, 1, &x)
		y := w.begin(2, "") // added the topic, never wrote to it
		xKey, yKey := metadata.TxnOpenKey(w.key, x.Key()), metadata.TxnOpenKey(w.key, y.Key())

		w.tp.TxnEnded(x, "") // ahead of its outcome
		synctest.Wait()
		if !w.store.has(xKey) {
			t.Fatal("a notice ahead of the outcome dropped the open record of a transaction open here")
		}

		gate := make(chan struct{})
		w.store.hooks(hold(xKey, gate), nil)
		w.tracker.end(x, txn.Aborted)
		synctest.Wait() // the apply commit is held
		w.tp.TxnEnded(x, "")
		w.tp.TxnEnded(y, "")
		synctest.Wait()
		if !w.store.has(xKey) {
			t.Fatal("a notice dropped the open record of a transaction whose apply is in flight")
		}
		if w.store.has(yKey) {
			t.Fatal("the open record of a transaction that never wrote here was not dropped")
		}
		close(gate)
		synctest.Wait()
		if w.store.has(xKey) || !w.store.has(metadata.TxnAbortedKey(w.key, x.Key())) {
			t.Fatal("the apply did not delete the open record and put the aborted record")
		}
	})
}

// TestTxnRetriesBackOffFromFailure: a failed apply commit and a failed read of an aborted
// record are retried no sooner than txnbuf.RetryDelay after the failure was seen, also when
// the failure was slow (a timeout): the driver reports each failure with its own time.
func TestTxnRetriesBackOffFromFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		w.open()
		p := w.producer()
		a, b := w.begin(1, ""), w.begin(2, "")
		w.send(p, 1, &a)
		w.send(p, 2, &b)

		var mu sync.Mutex
		attempts := map[string][]time.Time{} // key: attempt starts
		failures := map[string][]time.Time{}
		// slowFail fails the first two attempts on key, each after 5 s.
		slowFail := func(key string) error {
			mu.Lock()
			attempts[key] = append(attempts[key], time.Now())
			n := len(attempts[key])
			mu.Unlock()
			if n > 2 {
				return nil
			}
			time.Sleep(5 * time.Second) // a slow failure: the fake models a timeout
			mu.Lock()
			failures[key] = append(failures[key], time.Now())
			mu.Unlock()
			return fmt.Errorf("attempt %d on %s: %w", n, key, errStoreDown)
		}
		aOpen, bAborted := metadata.TxnOpenKey(w.key, a.Key()), metadata.TxnAbortedKey(w.key, b.Key())
		w.store.hooks(func(_ context.Context, ops []metadata.Op) error {
			for _, op := range ops {
				if op.Key == aOpen {
					return slowFail(aOpen)
				}
			}
			return nil
		}, func(key string) error {
			if key == bAborted {
				return slowFail(bAborted)
			}
			return nil
		})
		w.tracker.end(a, txn.Committed)
		w.tracker.collect(b)
		for w.bufferStats().Open > 0 {
			time.Sleep(time.Second) // virtual: the retries take 5 s each
		}

		mu.Lock()
		defer mu.Unlock()
		for _, key := range []string{aOpen, bAborted} {
			if len(attempts[key]) != 3 || len(failures[key]) != 2 {
				t.Fatalf("%s: %d attempts, %d failed; want 3 and 2", key, len(attempts[key]), len(failures[key]))
			}
			for k, failed := range failures[key] {
				want := time.Duration(txnbuf.RetryDelay(k+1)) * time.Millisecond
				if got := attempts[key][k+1].Sub(failed); got < want {
					t.Errorf("%s: attempt %d started %v after attempt %d failed, want at least %v", key, k+2, got, k+1, want)
				}
			}
		}
	})
}
