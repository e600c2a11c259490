package interop

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

// TestBenchOffload measures tiered storage's throughput on one standalone offloading to a
// real S3 server (versitygw) on this machine, with pulsar-client-go:
//
//   - drain: a new subscription from the earliest message reads a backlog of
//     MAGNETAR_BENCH_OFFLOAD MiB whose ledgers are only in S3 (offloaded, bookie copies
//     deleted), against the same backlog in another topic read from the bookie; three
//     alternating repetitions, medians (target: S3 ≥ 0.5 × bookie);
//   - publish: the same bytes published to a topic whose ledgers are offloaded as soon as
//     they close (topic offload policies: threshold 1 byte, deletion lag 1 ms), against a
//     topic with offload off; three alternating repetitions, medians (target: ≤ 10% slower),
//     and the rate of the offloads each publish with offload started.
//
// Run it without the race detector:
//
//	cd interop && MAGNETAR_BENCH_OFFLOAD=512 go test -count=1 -run TestBenchOffload -v .
//
// MAGNETAR_BENCH_OFFLOAD_PROFILE=<prefix> writes a CPU profile of the standalone taken
// from the start of every publish (MAGNETAR_BENCH_OFFLOAD_PROFILE_SECONDS long, default 3) to
// <prefix>-<topic>.pb (compare them with go tool pprof -diff_base). MAGNETAR_BENCH_OFFLOAD_MSG sets the message size (default 1024 bytes),
// MAGNETAR_BENCH_OFFLOAD_BLOCK the S3 block size (default 16 MiB; Pulsar's is 64 MiB),
// MAGNETAR_BENCH_OFFLOAD_RATE managedLedgerOffloadFlowPermitsPerSecond (bytes/s; default the
// broker's, offload.DefaultFlowPermitsPerSecond; -1: no bound). After each publish with offload
// the test waits for its offloads to end (so they do not run into the next measurement) and
// reports their rate: the offloaded bytes over the time from the publish's start.
// MAGNETAR_BENCH_OFFLOAD_ARGS adds standalone flags (space-separated; later flags win, e.g.
// "--gc-interval 1h" to keep the bookie from reclaiming deleted ledgers during the runs).
// Ledgers are an eighth of the backlog (at least 8 MB).
func TestBenchOffload(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("MAGNETAR_BENCH_OFFLOAD"))
	if mib <= 0 {
		t.Skip("set MAGNETAR_BENCH_OFFLOAD=<MiB> to run")
	}
	size := int(envBytes("MAGNETAR_BENCH_OFFLOAD_MSG", 1024))
	block := envBytes("MAGNETAR_BENCH_OFFLOAD_BLOCK", 16<<20)
	n := uint64(int64(mib) << 20 / int64(size))
	// Ledgers of an eighth of the backlog: offloads run while a publish run goes on.
	args := []string{"--managed-ledger-max-size-per-ledger-mbytes", fmt.Sprint(max(8, mib/8)),
		"--s3-managed-ledger-offload-max-block-size-in-bytes", fmt.Sprint(block)}
	if r := os.Getenv("MAGNETAR_BENCH_OFFLOAD_RATE"); r != "" {
		args = append(args, "--managed-ledger-offload-flow-permits-per-second", r)
	}
	args = append(args, strings.Fields(os.Getenv("MAGNETAR_BENCH_OFFLOAD_ARGS"))...)
	st := startOffloadStandalone(t, args...)
	a := st.admin(t)
	cl := st.client(t)
	ctx := ctxT(t, 60*time.Minute)
	offloadAsap := utils.OffloadPolicies{ManagedLedgerOffloadThresholdInBytes: 1, ManagedLedgerOffloadDeletionLagInMillis: 1}

	var offloadRates []float64 // MiB/s of the offloads of each publish with offload
	// publish sends messages 0..n-1 to topic (after setting its offload policies, if any) and
	// returns the rate in MiB/s.
	publish := func(topic string, pol *utils.OffloadPolicies) float64 {
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		if pol != nil {
			setTopicOffload(t, a, topic, *pol)
		}
		t0, cpuB, cpuS := time.Now(), st.proc.CPUTime(), st.s3.CPUTime()
		var profiled chan struct{}
		if prof := os.Getenv("MAGNETAR_BENCH_OFFLOAD_PROFILE"); prof != "" {
			// A CPU profile of the standalone while it publishes and offloads.
			prof += "-" + path.Base(topic) + ".pb"
			profiled = make(chan struct{})
			go func() {
				defer close(profiled)
				secs := cmp.Or(os.Getenv("MAGNETAR_BENCH_OFFLOAD_PROFILE_SECONDS"), "3")
				resp, err := http.Get(st.http + "/debug/pprof/profile?seconds=" + secs)
				if err != nil {
					t.Errorf("profile: %v", err)
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if err := os.WriteFile(prof, b, 0o644); err != nil {
					t.Errorf("profile: %v", err)
				}
			}()
		}
		publishSeq(t, ctx, prod, 0, n, size)
		d := time.Since(t0)
		if profiled != nil {
			<-profiled
		}
		t.Logf("  %s: %v; CPU: standalone %v, S3 server %v", topic, d.Round(time.Millisecond), st.proc.CPUTime()-cpuB, st.s3.CPUTime()-cpuS)
		if pol != nil {
			// The offloads the publish started run behind it (at most at the throttle's rate):
			// wait for them, so that they do not run into the next measurement, and report
			// their rate (the offloaded bytes over the time from the publish's start).
			tn, _ := utils.GetTopicName(topic)
			var bytes int64
			for deadline := time.Now().Add(30 * time.Minute); ; {
				ls := internalLedgers(t, a, *tn)
				done := true
				bytes = 0
				for _, l := range ls[:len(ls)-1] { // the last one is open
					done = done && l.Offloaded
					bytes += l.Size
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: the closed ledgers were not offloaded", topic)
				}
				time.Sleep(100 * time.Millisecond) // polled from the internal stats
			}
			od := time.Since(t0)
			offloadRates = append(offloadRates, float64(bytes)/(1<<20)/od.Seconds())
			t.Logf("  %s: %s offloaded %v after the publish's start (%.1f MiB/s); CPU since: standalone %v, S3 server %v",
				topic, mb(float64(bytes)), od.Round(time.Millisecond), offloadRates[len(offloadRates)-1], st.proc.CPUTime()-cpuB, st.s3.CPUTime()-cpuS)
		}
		return float64(n*uint64(size)) / (1 << 20) / d.Seconds()
	}
	// drain reads topic from the earliest message with a new subscription and returns the
	// rate in MiB/s.
	drainRun := 0
	drain := func(topic string) float64 {
		drainRun++
		t0, cpuB, cpuS := time.Now(), st.proc.CPUTime(), st.s3.CPUTime()
		c, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: fmt.Sprintf("drain-%d", drainRun),
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for seq := uint64(0); seq < n; seq++ {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := binary.BigEndian.Uint64(m.Payload()); got != seq {
				t.Fatalf("%s: message %d where %d was due", topic, got, seq)
			}
		}
		d := time.Since(t0)
		t.Logf("  drain of %s: %v; CPU: standalone %v, S3 server %v", topic, d.Round(time.Millisecond), st.proc.CPUTime()-cpuB, st.s3.CPUTime()-cpuS)
		return float64(n*uint64(size)) / (1 << 20) / d.Seconds()
	}

	// The backlogs: the same messages in a topic that stays on the bookie and in one that
	// goes to S3 entirely.
	const bkTopic, s3Topic = "persistent://public/default/bench-backlog-bookie", "persistent://public/default/bench-backlog-s3"
	publish(bkTopic, nil)
	publish(s3Topic, &offloadAsap)
	tn, _ := utils.GetTopicName(s3Topic)
	last, err := a.Topics().GetLastMessageID(*tn)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().Offload(*tn, last); err != nil {
		t.Fatal(err)
	}
	waitOffloadSuccess(t, a, *tn, 30*time.Minute)
	var offloaded int
	var offloadedBytes int64
	for _, l := range internalLedgers(t, a, *tn) {
		if l.Offloaded {
			offloaded++
			offloadedBytes += l.Size
		}
	}
	for deadline := time.Now().Add(5 * time.Minute); st.metric(t, "magnetar_ledgeroffloader_bookie_deleted_total") < float64(offloaded); {
		if time.Now().After(deadline) {
			t.Fatal("the offloaded ledgers' bookie copies were not deleted")
		}
		time.Sleep(100 * time.Millisecond) // polled from the metrics
	}
	t.Logf("backlog: %d messages of %d bytes; %d ledgers (%s) only in S3, the last one on the bookie", n, size, offloaded, mb(float64(offloadedBytes)))

	var fromBK, fromS3 []float64
	gets0 := st.metric(t, "magnetar_offload_block_gets_total")
	for i := range 3 {
		if i%2 == 0 {
			fromS3 = append(fromS3, drain(s3Topic))
			fromBK = append(fromBK, drain(bkTopic))
		} else {
			fromBK = append(fromBK, drain(bkTopic))
			fromS3 = append(fromS3, drain(s3Topic))
		}
		t.Logf("drain %d: bookie %.1f MiB/s, S3 %.1f MiB/s", i+1, fromBK[i], fromS3[i])
	}
	t.Logf("drain medians: bookie %.1f MiB/s, S3 %.1f MiB/s, S3 ÷ bookie %.2f (target ≥ 0.5); %v block GETs",
		median(fromBK), median(fromS3), median(fromS3)/median(fromBK), st.metric(t, "magnetar_offload_block_gets_total")-gets0)

	var off, on []float64
	for i := range 3 {
		offT, onT := fmt.Sprintf("persistent://public/default/bench-pub-off-%d", i), fmt.Sprintf("persistent://public/default/bench-pub-on-%d", i)
		ledgers0 := st.metric(t, "magnetar_offload_ledgers_total")
		if i%2 == 0 {
			off = append(off, publish(offT, nil))
			on = append(on, publish(onT, &offloadAsap))
		} else {
			on = append(on, publish(onT, &offloadAsap))
			off = append(off, publish(offT, nil))
		}
		t.Logf("publish %d: offload off %.1f MiB/s, on %.1f MiB/s (%v ledgers offloaded meanwhile)", i+1, off[i], on[i],
			st.metric(t, "magnetar_offload_ledgers_total")-ledgers0)
	}
	t.Logf("publish medians: offload off %.1f MiB/s, on %.1f MiB/s, on ÷ off %.2f (target ≥ 0.9); offload rates %.1f MiB/s",
		median(off), median(on), median(on)/median(off), offloadRates)
}

// setTopicOffload sets topic's offload policies with pulsaradmin.
func setTopicOffload(t *testing.T, a pulsaradmin.Client, topic string, p utils.OffloadPolicies) {
	t.Helper()
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().SetOffloadPolicies(*tn, p); err != nil {
		t.Fatal(err)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
