package itest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/metadata"
)

var writerPassword = []byte("itest")

// writerPayload is the payload of the i-th entry the child writer appends.
func writerPayload(i int64) []byte {
	return []byte(fmt.Sprintf("entry-%08d-%s", i, strings.Repeat("p", int(i%200))))
}

// runChild runs a child role and returns its exit code.
func runChild(role string) int {
	switch role {
	case "writer":
		if err := childWriter(os.Getenv("MAGNETAR_ITEST_META")); err != nil {
			fmt.Printf("ERR %v\n", err)
			if errors.Is(err, ledger.ErrFenced) {
				return 3
			}
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
	return 2
}

// childWriter creates a ledger at E=3 WQ=2 AQ=2 and appends until an add fails, printing
// "LEDGER id" first and "ACK i" for every acknowledged entry (in order).
func childWriter(metaURL string) error {
	eps, err := metadata.ParseURL(metaURL)
	if err != nil {
		return err
	}
	ctx := context.Background()
	store, err := metadata.Open(ctx, metadata.Config{Endpoints: eps})
	if err != nil {
		return err
	}
	pool := client.NewPool(client.Options{})
	lc := ledger.NewClient(store, pool, ledger.Options{AddTimeout: 2 * time.Second, MaxPendingAdds: 64})
	h, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, Password: writerPassword})
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "LEDGER %d\n", h.ID())
	out.Flush()
	failed := make(chan error, 1)
	for i := int64(0); ; i++ {
		select {
		case err := <-failed:
			return err
		default:
		}
		h.AppendAsync(ctx, writerPayload(i), func(id int64, err error) {
			if err != nil {
				select {
				case failed <- fmt.Errorf("add %d: %w", i, err):
				default:
				}
				return
			}
			if id != i {
				select {
				case failed <- fmt.Errorf("entry %d acknowledged as id %d", i, id):
				default:
				}
				return
			}
			fmt.Fprintf(out, "ACK %d\n", id)
			out.Flush()
		})
	}
}

// writerProc is the child writer process and what it reported.
type writerProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	id   int64
	acks []int64
	errs []string
	news chan struct{} // pulsed on every line
	done chan struct{}
}

func startWriter(t *testing.T, metaURL string) *writerProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := &writerProc{id: -1, news: make(chan struct{}, 1), done: make(chan struct{})}
	w.cmd = exec.Command(exe, "-test.run=^$")
	w.cmd.Env = append(os.Environ(), "MAGNETAR_ITEST_CHILD=writer", "MAGNETAR_ITEST_META="+metaURL)
	w.cmd.Stderr = io.Discard
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 2)
			w.mu.Lock()
			switch f[0] {
			case "LEDGER":
				w.id, _ = strconv.ParseInt(f[1], 10, 64)
			case "ACK":
				n, _ := strconv.ParseInt(f[1], 10, 64)
				w.acks = append(w.acks, n)
			default:
				w.errs = append(w.errs, sc.Text())
			}
			w.mu.Unlock()
			select {
			case w.news <- struct{}{}:
			default:
			}
		}
		w.cmd.Wait()
	}()
	t.Cleanup(func() { w.cmd.Process.Kill(); <-w.done })
	return w
}

// waitFor waits until cond holds over the writer's reports, or fails after d.
func (w *writerProc) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-w.news:
		case <-w.done:
			w.mu.Lock()
			ok := cond()
			w.mu.Unlock()
			if !ok {
				t.Fatalf("writer exited before %s (errors: %v)", what, w.errs)
			}
			return
		case <-deadline:
			t.Fatalf("writer: %s not reached within %v", what, d)
		}
	}
}

// TestLedgerRecoveryAfterBookieAndWriterDeath: etcd + 4 bookie processes; a writer process at
// E=3 WQ=2 AQ=2; kill -9 one of its bookies mid-stream (the writer changes ensemble and goes
// on); then freeze the writer (SIGSTOP: to the cluster it is dead); a second client opens the
// ledger with recovery; every entry the writer saw acknowledged reads back in order, byte
// for byte; when the old writer is revived (SIGCONT) its adds fail as fenced and none is
// acknowledged beyond the recovered end; finally it is killed with SIGKILL.
func TestLedgerRecoveryAfterBookieAndWriterDeath(t *testing.T) {
	_, metaURL := StartEtcd(t)
	store := openStore(t, metaURL)
	procs := map[string]*Proc{}
	var addrs []string
	for i := 0; i < 4; i++ {
		addr := FreeAddr(t)
		addrs = append(addrs, addr)
		procs[addr] = startBookie(t, metaURL, filepath.Join(t.TempDir(), fmt.Sprint("b", i)), addr)
	}
	waitBookies(t, store, 30*time.Second, addrs...)

	w := startWriter(t, metaURL)
	w.waitFor(t, 60*time.Second, "1000 acks", func() bool { return len(w.acks) >= 1000 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	meta := func() *ledger.Metadata { return ledgerMeta(t, ctx, store, w.id) }
	victim := meta().Ensembles[0].Bookies[0]
	procs[victim].Kill()
	w.mu.Lock()
	atKill := len(w.acks)
	w.mu.Unlock()
	w.waitFor(t, 60*time.Second, "1000 acks after the bookie died", func() bool { return len(w.acks) >= atKill+1000 })

	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Let every ACK line the writer printed before it froze reach us.
	w.mu.Lock()
	acked := slices.Clone(w.acks)
	w.mu.Unlock()

	m := meta()
	if len(m.Ensembles) < 2 || slices.Contains(m.LastEnsemble().Bookies, victim) {
		t.Fatalf("no ensemble change away from killed bookie %s: %+v", victim, m.Ensembles)
	}

	rm := recoverAndCheck(t, ctx, store, w.id, acked)
	t.Logf("writer acknowledged %d entries (bookie %s killed after %d); recovery closed at %d with %d ensembles",
		len(acked), victim, atKill, rm.LastEntryID, len(rm.Ensembles))

	// Revive the old writer: it must be fenced, and nothing past the recovered end acked.
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		t.Fatal("revived writer did not stop on fencing")
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("revived writer exit code %d, want 3 (fenced); errors %v", code, w.errs)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := int64(len(w.acks) - 1); n > rm.LastEntryID {
		t.Fatalf("revived writer got entry %d acknowledged past the recovered end %d", n, rm.LastEntryID)
	}
}
