package interop

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/itest"
)

// transformerEnv makes the test binary a consume-transform-produce client:
// "<service url>,<topic A>,<topic B>".
const transformerEnv = "MAGNETAR_TXN_TRANSFORMER"

// runTransformer receives from A, sends "t-<payload>" to B and acknowledges on A in one
// transaction, one message at a time, forever (until killed). A failed transaction is
// aborted and the message retried, unless its acknowledgement says it was acknowledged
// before (its output is committed already): then it is skipped.
func runTransformer(args string) int {
	parts := strings.Split(args, ",")
	url, a, b := parts[0], parts[1], parts[2]
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, EnableTransaction: true, Logger: clientLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: a, SubscriptionName: "transform", Type: pulsar.Failover,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "subscribe:", err)
		return 1
	}
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: b, DisableBatching: true, SendTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		return 1
	}
	ctx := context.Background()
	failures := 0
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "receive:", err)
			return 1
		}
		for {
			err := func() error {
				octx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				tx, err := cl.NewTransaction(3 * time.Second)
				if err != nil {
					return err
				}
				if _, err = prod.Send(octx, &pulsar.ProducerMessage{Payload: append([]byte("t-"), m.Payload()...), Transaction: tx}); err == nil {
					err = cons.AckWithTxn(m, tx)
				}
				if err == nil {
					err = tx.Commit(octx)
				}
				if err != nil {
					_ = tx.Abort(octx)
				}
				return err
			}()
			if err == nil || strings.Contains(err.Error(), "acknowledged before") {
				break
			}
			// What keeps failing shows in the test's output (the first and every 25th).
			if failures++; failures%25 == 1 {
				fmt.Fprintf(os.Stderr, "transformer: attempt %d on %v failed: %v\n", failures, m.ID(), err)
			}
			// Retry the same message: its acknowledgement may be held by a transaction of a
			// killed predecessor until that one times out.
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestTxnExactlyOnceKill9 is #15's acceptance run: a consume-transform-produce client
// (its own process) moves every message of A to B in transactions while the client and then
// `magnetar standalone` are killed with SIGKILL and restarted. B ends up with every message
// of A exactly once, in A's order, as seen live (so nothing uncommitted was ever delivered;
// a redelivery of the same message id, its plain ack lost with the kill, is not a second
// message) and by a subscription created from the earliest position after the restarts.
func TestTxnExactlyOnceKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary and kills processes")
	}
	etcd, bk, brk, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	sa := itest.Start(t, "standalone", "standalone", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-listen", etcd, "--bookie-listen", bk, "--broker-listen", brk, "--http", web,
		"--transaction-coordinator-enabled",
		// A mark-delete rate far below the ack rate: plain acks are held (a kill redelivers
		// them), a commit's acks must be durable anyway (the pending-ack log's Flush).
		"--managed-ledger-default-mark-delete-rate-limit", "0.05")
	itest.WaitTCP(t, brk, 60*time.Second)
	url := "pulsar://" + brk
	a, b := "persistent://public/default/txn-a", "persistent://public/default/txn-b"
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	live, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: b, SubscriptionName: "live",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	// Keeps B's data for the subscription created at the end.
	keeper, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: b, SubscriptionName: "keeper",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReceiverQueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	const n = 300
	pa, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: a, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := pa.Send(ctxT(t, time.Minute), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%04d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	pa.Close()

	var (
		mu   sync.Mutex
		got  []string
		seen = map[string]bool{} // message ids: an ack lost with the kill redelivers one
	)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := live.Receive(ctxT(t, 4*time.Minute))
			if err != nil {
				return
			}
			live.Ack(m) //nolint:errcheck
			mu.Lock()
			if id := m.ID().String(); seen[id] {
				mu.Unlock()
				continue
			} else {
				seen[id] = true
			}
			got = append(got, string(m.Payload()))
			full := len(got) >= n
			mu.Unlock()
			if full {
				return
			}
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	waitFor := func(k int) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for count() < k {
			if time.Now().After(deadline) {
				dumpTxnState(t, web, b)
				t.Fatalf("B reached only %d of %d messages", count(), k)
			}
			select {
			case <-recvDone:
				if count() < k {
					t.Fatalf("live consumer stopped at %d messages", count())
				}
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	startTransformer := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), transformerEnv+"="+url+","+a+","+b)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	tr := startTransformer()
	waitFor(n / 4)
	kill(tr) // the client dies mid-transaction
	tr = startTransformer()
	defer func() { kill(tr) }()
	waitFor(n / 2)
	sa.Kill() // the broker, bookie and etcd die with transactions open
	sa.Restart()
	itest.WaitTCP(t, brk, 60*time.Second)
	waitFor(n)
	<-recvDone

	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("t-%04d", i)
	}
	mu.Lock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("live consumer of B got %d messages, not A's %d in order exactly once:\n%v", len(got), n, got)
	}
	mu.Unlock()
	after, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: b, SubscriptionName: "after",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(t, after, n, 2*time.Second); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("new subscription of B got %d messages, not A's %d in order exactly once:\n%v", len(got), n, got)
	}
}

// dumpTxnState logs what the broker at web knows of its coordinators and of topic's
// transaction buffer (a stalled run's state).
func dumpTxnState(t *testing.T, web, topic string) {
	t.Helper()
	for _, path := range []string{"/admin/v3/transactions/coordinatorStats",
		"/admin/v3/transactions/transactionBufferStats/" + strings.TrimPrefix(topic, "persistent://"),
		"/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/internalStats"} {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s: %s %s", path, resp.Status, body)
	}
}
