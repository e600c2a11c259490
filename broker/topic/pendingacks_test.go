package topic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/broker/topic/pendingack"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
	"github.com/magnetar-io/magnetar/txn"
)

// Tests of the pending acknowledgements' driver (pendingacks.go): the subscription
// goroutine's performance of the pending-ack core's replay (package pendingack), on fakes
// (txnfakes_test.go) in virtual time.

var errBookiesDown = errors.New("bookies unavailable")

// withPendingAckLog gives subscription sub a pending-ack log (a hookLog the test can fail)
// and returns it.
func (w *txnWorld) withPendingAckLog(sub string) *hookLog {
	name := topic.PendingAckLogName(w.key, sub)
	w.store.put(metadata.ManagedLedgerKey(name), nil)
	return &hookLog{Log: w.logs.Open(name)}
}

// TestPendingAckReplayBacksOffFromFailure: a transient failure to open or read the
// pending-ack log ends the replay attempt, and the next one starts no sooner than the
// backoff after the failure — not after the failed attempt's start, which a slow failure
// (a timeout) may have passed already (T5: no hot loop). The subscribe completes once the
// faults stop.
func TestPendingAckReplayBacksOffFromFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		paLog := w.withPendingAckLog("s")
		var mu sync.Mutex
		var starts, fails []time.Time
		// attempt records an attempt's start, and fails the first ones after 5 s.
		attempt := func() error {
			mu.Lock()
			starts = append(starts, time.Now())
			n := len(starts)
			mu.Unlock()
			if n > 3 {
				return nil
			}
			time.Sleep(5 * time.Second) // a slow failure: the fake models a timeout
			mu.Lock()
			fails = append(fails, time.Now())
			mu.Unlock()
			return fmt.Errorf("attempt %d: %w", n, errBookiesDown)
		}
		opens := 0
		w.openLog = func(ctx context.Context, name string, create bool) (topic.Log, error) {
			if name != topic.PendingAckLogName(w.key, "s") {
				return w.logs.Open(name), nil
			}
			mu.Lock()
			opens++
			first := opens == 1
			mu.Unlock()
			if first {
				if err := attempt(); err != nil {
					return nil, err
				}
			}
			return paLog, nil
		}
		paLog.stats = func(ctx context.Context) (mledger.Stats, error) {
			if err := attempt(); err != nil {
				return mledger.Stats{}, err
			}
			return paLog.Log.Stats(ctx)
		}
		w.open()
		_, ch := w.subscribe("s", 1, &txnConn{})
		if err := <-ch; err != nil {
			t.Fatalf("subscribe after the faults stopped: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(starts) != 4 || len(fails) != 3 {
			t.Fatalf("%d attempts, %d failed; want 4 and 3", len(starts), len(fails))
		}
		for k, failed := range fails {
			want := time.Duration(pendingack.RetryDelay(k+1)) * time.Millisecond
			if got := starts[k+1].Sub(failed); got < want {
				t.Errorf("attempt %d started %v after attempt %d failed, want at least %v", k+2, got, k+1, want)
			}
		}
	})
}

// TestPendingAckPermanentFailureFailsSubscribe: a pending-ack log that is gone (deleted
// after the subscription saw it) or a deleted ledger of it fails the handle at once: the
// subscribe waiting fails with an error naming the cause, and nothing is retried (T5).
func TestPendingAckPermanentFailureFailsSubscribe(t *testing.T) {
	for _, tc := range []struct {
		name             string
		openErr, readErr error
	}{
		{name: "log deleted", openErr: fmt.Errorf("open: %w", mledger.ErrNotFound)},
		{name: "ledger deleted", readErr: fmt.Errorf("read ledger 7: %w", ledger.ErrNoSuchLedger)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newTxnWorld(t)
				paLog := w.withPendingAckLog("s")
				var mu sync.Mutex
				opens, reads := 0, 0
				w.openLog = func(ctx context.Context, name string, create bool) (topic.Log, error) {
					if name != topic.PendingAckLogName(w.key, "s") {
						return w.logs.Open(name), nil
					}
					mu.Lock()
					opens++
					mu.Unlock()
					if tc.openErr != nil {
						return nil, tc.openErr
					}
					return paLog, nil
				}
				paLog.stats = func(ctx context.Context) (mledger.Stats, error) {
					mu.Lock()
					reads++
					mu.Unlock()
					if tc.readErr != nil {
						return mledger.Stats{}, tc.readErr
					}
					return paLog.Log.Stats(ctx)
				}
				w.open()
				_, ch := w.subscribe("s", 1, &txnConn{})
				synctest.Wait()
				var err error
				select {
				case err = <-ch:
				default:
					t.Fatal("the subscribe still waits: the permanent failure was taken for a transient one")
				}
				cause := tc.openErr
				if cause == nil {
					cause = tc.readErr
				}
				if !errors.Is(err, pendingack.ErrFailed) || !strings.Contains(err.Error(), cause.Error()) {
					t.Fatalf("subscribe: %v, want %v naming %q", err, pendingack.ErrFailed, cause)
				}
				time.Sleep(time.Minute) // virtual: any retry would come by now
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if opens != 1 || reads > 1 {
					t.Fatalf("%d opens and %d reads of a log that failed permanently, want 1 and at most 1", opens, reads)
				}
			})
		})
	}
}

// TestPendingAckEndedNoticeKeepsApplyingRecord: the coordinator's notice that a
// transaction ended may arrive before or after its outcome. It drops the pending-ack
// record of a transaction that never acknowledged on the subscription, but never the
// record of one still open here or being applied: a replay after a crash learns the
// outcome from the header that record keeps from being collected.
func TestPendingAckEndedNoticeKeepsApplyingRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTxnWorld(t)
		paLog := &hookLog{Log: w.logs.Open(topic.PendingAckLogName(w.key, "s"))}
		w.openLog = func(ctx context.Context, name string, create bool) (topic.Log, error) {
			if name == topic.PendingAckLogName(w.key, "s") {
				return paLog, nil
			}
			return w.logs.Open(name), nil
		}
		w.open()
		p := w.producer()
		pos := w.send(p, 1, nil)
		conn := &txnConn{}
		c, ch := w.subscribe("s", 1, conn)
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
		c.Flow(10)
		x, y := w.begin(1, "s"), w.begin(2, "s") // y added the subscription, never acknowledged
		xKey, yKey := metadata.TxnPendingAckKey(w.key, "s", x.Key()), metadata.TxnPendingAckKey(w.key, "s", y.Key())
		acked := make(chan error, 1)
		c.Ack(&pb.CommandAck{ConsumerId: proto.Uint64(c.ID), AckType: pb.CommandAck_Individual.Enum(),
			MessageId:     []*pb.MessageIdData{{LedgerId: proto.Uint64(uint64(pos.LedgerID)), EntryId: proto.Uint64(uint64(pos.EntryID))}},
			TxnidMostBits: proto.Uint64(x.Most), TxnidLeastBits: proto.Uint64(x.Least)}, func(err error) { acked <- err })
		if err := <-acked; err != nil {
			t.Fatalf("transactional ack: %v", err)
		}

		w.tp.TxnEnded(x, "s") // ahead of its outcome
		synctest.Wait()
		if !w.store.has(xKey) {
			t.Fatal("a notice ahead of the outcome dropped the record of a transaction open here")
		}

		gate := make(chan struct{})
		paLog.mu.Lock()
		paLog.onAdd = func(data []byte) chan struct{} {
			if strings.Contains(string(data), `"op":"commit"`) {
				return gate // the commit marker: the apply is not done
			}
			return nil
		}
		paLog.mu.Unlock()
		w.tracker.end(x, txn.Committed)
		synctest.Wait()
		w.tp.TxnEnded(x, "s")
		w.tp.TxnEnded(y, "s")
		synctest.Wait()
		if !w.store.has(xKey) {
			t.Fatal("a notice dropped the record of a transaction being applied")
		}
		if w.store.has(yKey) {
			t.Fatal("the record of a transaction that never acknowledged here was not dropped")
		}
		close(gate)
		synctest.Wait()
		if w.store.has(xKey) {
			t.Fatal("the apply did not delete the record")
		}
		st, err := c.Subscription().PendingAckStats(context.Background())
		if err != nil || st.Txns != 0 || st.State != pendingack.StateReady.String() {
			t.Fatalf("pending acks after the apply: %+v %v", st, err)
		}
	})
}
