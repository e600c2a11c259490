package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// stopBound is the longest a role may take to stop after SIGTERM: the magnetar command's
// stopTimeout (30 s, then it exits anyway) plus process exit.
const stopBound = 35 * time.Second

// TestSIGTERMStopsEveryRoleInTime stops every role with SIGTERM (bookie, broker, autorecovery,
// standalone) while the cluster is healthy, while etcd is frozen (SIGSTOP: a partition from
// the metadata store), and the bookie also after its data directory was removed; each must
// exit within stopBound. The times are logged (docs/BENCHMARKS-RESULTS.md).
func TestSIGTERMStopsEveryRoleInTime(t *testing.T) {
	for _, state := range []string{"healthy", "etcd-frozen", "bookie-disk-gone"} {
		t.Run(state, func(t *testing.T) {
			etcd, metaURL := StartEtcd(t)
			store := openStore(t, metaURL)
			bdir := filepath.Join(t.TempDir(), "b")
			baddr := FreeAddr(t)
			bk := Start(t, "bookie", "bookie", "--metadata-url", metaURL, "--data-dir", bdir, "--listen", baddr,
				"--http", "", "--session-ttl", "2s")
			waitBookies(t, store, 30*time.Second, baddr)
			braddr := FreeAddr(t)
			br := Start(t, "broker", "broker", "--metadata-url", metaURL, "--listen", braddr, "--http", FreeAddr(t),
				"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1", "--session-ttl", "2s")
			waitKeys(t, store, "/brokers/available/", 1, 30*time.Second)
			ar := Start(t, "autorecovery", "autorecovery", "--metadata-url", metaURL, "--http", "", "--session-ttl", "2s")
			sa := startStandalone(t)
			// A topic with a producer on each broker, so the stop has something to unload.
			for _, url := range []string{"pulsar://" + braddr, sa.pulsarURL} {
				if out, errs, code := runTool(t, "produce", "--url", url, "persistent://public/default/stop-"+state, "-m", "x"); code != 0 {
					t.Fatalf("produce %s: %s%s", url, out, errs)
				}
			}
			procs := []*Proc{bk, br, ar, sa.proc}
			switch state {
			case "etcd-frozen":
				if err := etcd.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				defer etcd.cmd.Process.Signal(syscall.SIGCONT)
			case "bookie-disk-gone":
				if err := os.RemoveAll(bdir); err != nil {
					t.Fatal(err)
				}
				procs = procs[:1]
			}
			type result struct {
				name string
				took time.Duration
				err  error
			}
			results := make(chan result, len(procs))
			for _, p := range procs {
				go func() {
					start := time.Now()
					var err error
					if p.Exited() {
						err = fmt.Errorf("already exited: %v", p.err)
					} else {
						err = p.Stop(stopBound)
					}
					results <- result{p.Name, time.Since(start), err}
				}()
			}
			for range procs {
				r := <-results
				t.Logf("%s: %s stopped in %v (exit: %v)", state, r.name, r.took.Round(time.Millisecond), r.err)
				if r.took >= stopBound {
					t.Errorf("%s: %s took %v to stop", state, r.name, r.took)
				}
			}
		})
	}
}
