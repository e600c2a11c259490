package interop

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/itest"
)

// Tiered storage end to end: `magnetar standalone` (the built binary) offloading to a real
// S3 server (versitygw on 127.0.0.1, started here; see itest.StartS3), driven by
// pulsar-client-go and its pulsaradmin.

// offloadStandalone is a standalone process with the aws-s3 offload driver.
type offloadStandalone struct {
	proc            *itest.Proc
	s3              *itest.S3Server
	data, url, http string
}

// startOffloadStandalone starts versitygw and a standalone offloading to it, with infinite
// retention and the bookie's garbage collection every 2 s; extra are more flags.
func startOffloadStandalone(t *testing.T, extra ...string) *offloadStandalone {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary and an S3 server")
	}
	s3 := itest.StartS3(t)
	data := filepath.Join(t.TempDir(), "data")
	etcd, bk, brk, web := itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t), itest.FreeAddr(t)
	args := append([]string{"standalone", "--data-dir", data, "--etcd-listen", etcd, "--bookie-listen", bk,
		"--broker-listen", brk, "--http", web, "--gc-interval", "2s",
		"--default-retention-time", "-1ns", "--default-retention-size-mb", "-1"}, s3.StandaloneArgs()...)
	proc := itest.Start(t, "standalone", append(args, extra...)...)
	itest.WaitTCP(t, brk, 60*time.Second)
	itest.WaitTCP(t, web, 60*time.Second)
	st := &offloadStandalone{proc: proc, s3: s3, data: data, url: "pulsar://" + brk, http: "http://" + web}
	// The admin API is mounted, and public/default created, once the broker is up.
	a := st.admin(t)
	for deadline := time.Now().Add(time.Minute); ; {
		nss, err := a.Namespaces().GetNamespaces("public")
		if err == nil && slices.Contains(nss, "public/default") {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("no namespace public/default after a minute: %v, %v", nss, err)
		}
		time.Sleep(50 * time.Millisecond) // polled: the process says nothing when it is ready
	}
}

func (s *offloadStandalone) client(t *testing.T) pulsar.Client {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: s.url, OperationTimeout: 60 * time.Second, Logger: clientLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (s *offloadStandalone) admin(t *testing.T) pulsaradmin.Client {
	t.Helper()
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: s.http})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// metric returns the sum of the samples of name on the standalone's /metrics.
func (s *offloadStandalone) metric(t *testing.T, name string) float64 {
	t.Helper()
	v, _, err := itest.Metric(ctxT(t, 30*time.Second), s.http+"/metrics", name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// payloadPool is random bytes that message payloads are cut from (seqPayload).
var payloadPool = func() []byte {
	p := make([]byte, 4<<20)
	rand.NewChaCha8([32]byte{'m', 'a', 'g', 'n', 'e', 't', 'a', 'r'}).Read(p)
	return p
}()

// seqPayload fills p (8 bytes to 4 MiB) with message seq's payload: seq, big-endian, then
// random bytes from an offset of payloadPool that depends on seq. A consumer regenerates it
// and compares every byte, so no test keeps what it sent; a message delivered in another's
// place, or changed, differs.
func seqPayload(p []byte, seq uint64) {
	binary.BigEndian.PutUint64(p, seq)
	off := seq * 4099 % uint64(len(payloadPool)-len(p))
	copy(p[8:], payloadPool[off:])
}

// publishSeq publishes messages from..from+n-1 of size bytes, asynchronously, and returns
// the id of the last one once every send is acknowledged.
func publishSeq(t *testing.T, ctx context.Context, p pulsar.Producer, from, n uint64, size int) pulsar.MessageID {
	t.Helper()
	var mu sync.Mutex
	var last pulsar.MessageID
	var firstErr error
	for seq := from; seq < from+n; seq++ {
		payload := make([]byte, size)
		seqPayload(payload, seq)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("send %d: %w", seq, err)
			}
			if err == nil && seq == from+n-1 {
				last = id
			}
		})
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if last == nil {
		t.Fatalf("the last send (%d) was not acknowledged", from+n-1)
	}
	return last
}

// receiveSeq receives messages from..from+n-1 in order, each byte-identical to what
// publishSeq sent, and acknowledges them.
func receiveSeq(t *testing.T, ctx context.Context, c pulsar.Consumer, from, n uint64, size int) {
	t.Helper()
	want := make([]byte, size)
	for seq := from; seq < from+n; seq++ {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d: %v", seq, err)
		}
		checkSeq(t, m, seq, want)
		c.AckID(m.ID())
	}
}

// checkSeq checks that m is message seq, byte for byte; buf is scratch of the payload size.
func checkSeq(t *testing.T, m pulsar.Message, seq uint64, buf []byte) {
	t.Helper()
	got := m.Payload()
	if len(got) >= 8 && binary.BigEndian.Uint64(got) != seq {
		t.Fatalf("received message %d (id %v) where %d was due", binary.BigEndian.Uint64(got), m.ID(), seq)
	}
	seqPayload(buf, seq)
	if !bytes.Equal(got, buf) {
		t.Fatalf("message %d (id %v): %d bytes that differ from the %d sent", seq, m.ID(), len(got), len(buf))
	}
}

// internalLedgers returns the topic's ledgers from its internal stats.
func internalLedgers(t *testing.T, a pulsaradmin.Client, tn utils.TopicName) []utils.LedgerInfo {
	t.Helper()
	st, err := a.Topics().GetInternalStats(tn)
	if err != nil {
		t.Fatal(err)
	}
	return st.Ledgers
}

// waitOffloadSuccess polls pulsaradmin's OffloadStatus until SUCCESS (fails on ERROR).
func waitOffloadSuccess(t *testing.T, a pulsaradmin.Client, tn utils.TopicName, d time.Duration) utils.OffloadProcessStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, err := a.Topics().OffloadStatus(tn)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case st.Status == utils.SUCCESS:
			return st
		case st.Status == utils.ERROR:
			t.Fatalf("offload failed: %+v", st)
		case time.Now().After(deadline):
			t.Fatalf("offload not done after %v: %+v", d, st)
		}
		time.Sleep(200 * time.Millisecond) // the status is polled, as pulsar-admin's offload-status -w does
	}
}

func envBytes(name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		panic(fmt.Sprintf("%s=%q: want a positive number of bytes", name, v))
	}
	return n
}

func mb(n float64) string { return fmt.Sprintf("%.1f MiB", n/(1<<20)) }

// TestOffloadS3EndToEnd: a topic with infinite retention receives MAGNETAR_OFFLOAD_E2E_BYTES
// (default 1 GiB) from pulsar-client-go in 48 KiB messages; the namespace's offload
// threshold (pulsaradmin) offloads its closed ledgers to S3 while it is written;
// pulsaradmin's Offload and OffloadStatus offload the rest; lowering the namespace's
// deletion lag from an hour to a second deletes the bookie copies and the bookie's ledger
// storage shrinks (bytes before and after in the log); a new subscription from the earliest
// message then reads every message in order, byte-identical, from the object store; the
// offloader's metrics show the offloads and the reads.
func TestOffloadS3EndToEnd(t *testing.T) {
	total := envBytes("MAGNETAR_OFFLOAD_E2E_BYTES", 1<<30)
	const size = 48 << 10
	n := uint64(max(1, total/size))
	ledgerMB := max(1, total/16>>20) // about 16 ledgers
	st := startOffloadStandalone(t, "--managed-ledger-max-size-per-ledger-mbytes", fmt.Sprint(ledgerMB),
		"--s3-managed-ledger-offload-max-block-size-in-bytes", fmt.Sprint(8<<20))
	a := st.admin(t)
	ns, err := utils.GetNamespaceName("public/default")
	if err != nil {
		t.Fatal(err)
	}
	threshold := total / 4 // at most a quarter of the topic stays on the bookies
	if err := a.Namespaces().SetOffloadThreshold(*ns, threshold); err != nil {
		t.Fatal(err)
	}
	lag := time.Hour.Milliseconds()
	if err := a.Namespaces().SetOffloadDeleteLag(*ns, lag); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Namespaces().GetOffloadThreshold(*ns); err != nil || v != threshold {
		t.Fatalf("offload threshold %d, %v; want %d", v, err, threshold)
	}
	if v, err := a.Namespaces().GetOffloadDeleteLag(*ns); err != nil || v != lag {
		t.Fatalf("offload deletion lag %d, %v; want %d", v, err, lag)
	}

	const topic = "persistent://public/default/offload-e2e"
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Minute)
	cl := st.client(t)
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t0, cpuS0, cpuT0 := time.Now(), st.proc.CPUTime(), itest.SelfCPUTime()
	last := publishSeq(t, ctx, prod, 0, n, size)
	pub := time.Since(t0)
	t.Logf("published %d messages of %d bytes (%s) in %v: %s/s (CPU: standalone %v, this test %v)", n, size, mb(float64(n*size)),
		pub.Round(time.Millisecond), mb(float64(n*size)/pub.Seconds()), st.proc.CPUTime()-cpuS0, itest.SelfCPUTime()-cpuT0)
	prod.Close()

	// The threshold offloaded closed ledgers with no request.
	ledgers := internalLedgers(t, a, *tn)
	byPolicy := 0
	for _, l := range ledgers {
		if l.Offloaded {
			byPolicy++
		}
	}
	if len(ledgers) > 5 && byPolicy == 0 {
		t.Fatalf("no ledger offloaded by the threshold of %d bytes: %+v", threshold, ledgers)
	}
	if st, err := a.Topics().OffloadStatus(*tn); err != nil || st.Status != utils.NOTRUN {
		t.Fatalf("offload status before a request: %+v, %v", st, err)
	}

	// pulsaradmin offloads the rest, up to the last message's ledger.
	lastID, err := a.Topics().GetLastMessageID(*tn)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if err := a.Topics().Offload(*tn, lastID); err != nil {
		t.Fatal(err)
	}
	ost := waitOffloadSuccess(t, a, *tn, 10*time.Minute)
	if ost.FirstUnOffloadedMessage.LedgerID != lastID.LedgerID {
		t.Fatalf("first unoffloaded %+v, want in ledger %d (last message %v)", ost.FirstUnOffloadedMessage, lastID.LedgerID, last)
	}
	ledgers = internalLedgers(t, a, *tn)
	var offloaded int
	var offloadedBytes int64
	for _, l := range ledgers {
		if l.Offloaded {
			offloaded++
			offloadedBytes += l.Size
		} else if l.LedgerID < lastID.LedgerID && l.Entries > 0 {
			t.Fatalf("ledger %d not offloaded after SUCCESS: %+v", l.LedgerID, ledgers)
		}
	}
	t.Logf("%d of %d ledgers offloaded (%d by the threshold while publishing), %s; the request took %v",
		offloaded, len(ledgers), byPolicy, mb(float64(offloadedBytes)), time.Since(t1).Round(time.Millisecond))

	// The bookie copies go once the deletion lag is down to a second, and the bookie's
	// garbage collection (every 2 s) frees their entry logs.
	// The bookie's ledger storage holds every entry once its write cache is flushed (at
	// the latest at its checkpoint, every 30 s).
	dir := itest.BookieLedgerDir(st.data)
	var before int64
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if before = itest.DiskUsage(dir); before >= int64(n*size) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bookie's ledger storage holds %d bytes after 2 min, want the %d published", before, n*size)
		}
		time.Sleep(500 * time.Millisecond) // polled: the flush is the bookie's own
	}
	if err := a.Namespaces().SetOffloadDeleteLag(*ns, 1000); err != nil {
		t.Fatal(err)
	}
	// The bookie frees disk by whole entry logs (512 MiB) of deleted ledgers only: the
	// current log is kept. So at least the offloaded bytes beyond one log are freed.
	wantFreed := max(0, offloadedBytes-512<<20)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		deleted := st.metric(t, "magnetar_ledgeroffloader_bookie_deleted_total")
		after := itest.DiskUsage(dir)
		if int(deleted) >= offloaded && (wantFreed == 0 || before-after >= wantFreed) {
			t.Logf("bookie ledger storage %s before the deletion lag passed, %s after (%d bookie copies deleted; the bookie frees whole entry logs of 512 MiB but its current one)",
				mb(float64(before)), mb(float64(after)), int(deleted))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 min: %v of %d bookie copies deleted; ledger storage %d bytes before, %d now (want %d freed)",
				deleted, offloaded, before, after, wantFreed)
		}
		time.Sleep(500 * time.Millisecond) // the bookie's GC runs every 2 s
	}

	// A new subscription reads everything back: all but the last ledger from S3.
	reads0 := st.metric(t, "magnetar_offload_read_entries_total")
	t2 := time.Now()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "from-earliest",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	cpuS0, cpuT0 = st.proc.CPUTime(), itest.SelfCPUTime()
	receiveSeq(t, ctx, cons, 0, n, size)
	drain := time.Since(t2)
	t.Logf("a new subscription read %d messages (%s) back in %v: %s/s (CPU: standalone %v, this test %v)", n, mb(float64(n*size)),
		drain.Round(time.Millisecond), mb(float64(n*size)/drain.Seconds()), st.proc.CPUTime()-cpuS0, itest.SelfCPUTime()-cpuT0)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if m, err := cons.Receive(cctx); err == nil {
		t.Fatalf("a message after the last one: %v", m.ID())
	}
	cancel()

	for _, c := range []struct {
		name string
		min  float64
	}{
		{"magnetar_offload_ledgers_total", float64(offloaded)},
		{"pulsar_ledgeroffloader_offload_rate", float64(offloadedBytes)},
		{"magnetar_offload_latency_seconds_count", float64(offloaded)},
		{"magnetar_offload_read_entries_total", reads0 + 1},
		{"magnetar_offload_read_bytes_total", float64(offloadedBytes) / 2},
		{"magnetar_offload_read_latency_seconds_count", 1},
		{"pulsar_storage_offloaded_size", float64(offloadedBytes)},
	} {
		if v := st.metric(t, c.name); v < c.min {
			t.Errorf("%s = %v, want at least %v", c.name, v, c.min)
		}
	}
	if v := st.metric(t, "magnetar_offload_errors_total") + st.metric(t, "magnetar_offload_read_errors_total"); v != 0 {
		t.Errorf("%v offload or read errors", v)
	}
}

// TestOffloadS3StoreOutage: a consumer drains a backlog whose ledgers are only in S3 (their
// bookie copies deleted); the S3 server is killed mid-drain. The consumer stalls once what
// was already read is delivered; the broker logs why (a read from tiered storage failed),
// rate-limited; the standalone uses under 5% of a core while stalled; once the server is
// back the consumer receives the rest, every message in order and byte-identical.
func TestOffloadS3StoreOutage(t *testing.T) {
	const size, n = 10 << 10, 6000 // 60 MB in ledgers of 8 MB, blocks of 5 MiB
	st := startOffloadStandalone(t, "--managed-ledger-max-size-per-ledger-mbytes", "8",
		"--managed-ledger-offload-deletion-lag-ms", "0", "--s3-managed-ledger-offload-max-block-size-in-bytes", fmt.Sprint(5<<20))
	a := st.admin(t)
	const topic = "persistent://public/default/offload-outage"
	tn, err := utils.GetTopicName(topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 5*time.Minute)
	cl := st.client(t)
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	publishSeq(t, ctx, prod, 0, n, size)
	prod.Close()
	lastID, err := a.Topics().GetLastMessageID(*tn)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Topics().Offload(*tn, lastID); err != nil {
		t.Fatal(err)
	}
	waitOffloadSuccess(t, a, *tn, 2*time.Minute)
	var offloaded int
	for _, l := range internalLedgers(t, a, *tn) {
		if l.Offloaded {
			offloaded++
		}
	}
	if offloaded < 5 {
		t.Fatalf("%d ledgers offloaded, want at least 5", offloaded)
	}
	for deadline := time.Now().Add(time.Minute); st.metric(t, "magnetar_ledgeroffloader_bookie_deleted_total") < float64(offloaded); {
		if time.Now().After(deadline) {
			t.Fatal("the offloaded ledgers' bookie copies were not deleted (deletion lag 0)")
		}
		time.Sleep(100 * time.Millisecond) // polled from the metrics
	}

	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "drain", ReceiverQueueSize: 100,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	const early = 1000
	receiveSeq(t, ctx, cons, 0, early, size)
	st.s3.Stop()
	t.Logf("S3 server stopped after %d of %d messages", early, n)

	// The consumer gets what the broker had read; then nothing.
	buf := make([]byte, size)
	next := uint64(early)
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		checkSeq(t, m, next, buf)
		cons.AckID(m.ID())
		next++
	}
	if next >= n-100 {
		t.Fatalf("received %d of %d messages with the object store down: the drain did not depend on it", next, n)
	}
	logLines := func() (all, reasons int) {
		b, _ := os.ReadFile(st.proc.Log)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "cursor read failed") {
				all++
				if strings.Contains(l, "read from tiered storage failed") {
					reasons++
				}
			}
		}
		return all, reasons
	}
	lines0, _ := logLines()
	cpu0, t0 := st.proc.CPUTime(), time.Now()
	const window = 12 * time.Second
	rctx, cancel := context.WithTimeout(ctx, window)
	m, err := cons.Receive(rctx)
	cancel()
	if err == nil {
		t.Fatalf("message %v received with the object store down", m.ID())
	}
	cpu, elapsed := st.proc.CPUTime()-cpu0, time.Since(t0)
	lines1, reasons := logLines()
	t.Logf("stalled at message %d: %v of CPU in %v (%.2f%% of a core); %d log lines of failed reads in the window, %d in all naming tiered storage",
		next, cpu, elapsed.Round(time.Millisecond), 100*cpu.Seconds()/elapsed.Seconds(), lines1-lines0, reasons)
	if cpu.Seconds() > 0.05*elapsed.Seconds() {
		t.Errorf("the stalled standalone used %v of CPU in %v: more than 5%% of a core", cpu, elapsed)
	}
	if reasons == 0 {
		t.Error("no log line says a read from tiered storage failed")
	}
	// The logger passes a kind of line at most every 10 s: two in a 12 s window, and one
	// more at its edges.
	if lines1-lines0 > 3 {
		t.Errorf("%d log lines of failed reads in %v: not rate-limited", lines1-lines0, window)
	}

	st.s3.Start()
	t1 := time.Now()
	rctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	receiveSeq(t, rctx, cons, next, n-next, size)
	t.Logf("resumed: the remaining %d messages in %v after the S3 server came back", n-next, time.Since(t1).Round(time.Millisecond))
}
