package itest

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

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// killPayload is message seq's payload of size bytes: seq, big-endian, then a ChaCha8
// stream keyed by seq (a reader regenerates it to compare every byte).
func killPayload(seq uint64, size int) []byte {
	p := make([]byte, size)
	binary.BigEndian.PutUint64(p, seq)
	var key [32]byte
	binary.BigEndian.PutUint64(key[:], seq)
	copy(key[8:], "magnetar offload kill -9")
	rand.NewChaCha8(key).Read(p[8:])
	return p
}

// bucketState is what a kill left in the object store.
type bucketState struct {
	data, index map[string]bool // object keys
	uploads     int             // multipart uploads left open
}

func listBucket(t *testing.T, ctx context.Context, c *s3.Client, bucket string) bucketState {
	t.Helper()
	st := bucketState{data: map[string]bool{}, index: map[string]bool{}}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if strings.HasSuffix(k, "-index") {
				st.index[k] = true
			} else {
				st.data[k] = true
			}
		}
	}
	ups, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	st.uploads = len(ups.Uploads)
	return st
}

func (s *S3Server) client(t *testing.T) *s3.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(s.Access, s.Secret, "")))
	if err != nil {
		t.Fatal(err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint())
		o.UsePathStyle = true
	})
}

// mlInfo is the managed ledger's record from GET …/internal-info.
type mlInfo struct {
	Ledgers []struct {
		LedgerID             int64  `json:"ledgerId"`
		Entries              int64  `json:"entries"`
		Size                 int64  `json:"size"`
		IsOffloaded          bool   `json:"isOffloaded"`
		OffloadedContextUUID string `json:"offloadedContextUuid"`
	} `json:"ledgers"`
}

// TestOffloadKill9: `magnetar standalone` offloading to a real S3 server (versitygw) is
// killed with SIGKILL 20 times while it offloads, each time at a different point: round by
// round, a batch of messages fills three or more ledgers of 6 MB (two blocks of 5 MiB each
// in S3) with the namespace's offload threshold off; the threshold is then set to 0, which
// starts offloading them (upload, index, record, deletion of the bookie copy with a lag of
// 0), and the process is killed after a delay drawn from the round's own twentieth of the
// time an uninterrupted round took (round 0), so the kills sweep the whole offload. After
// each restart the offload resumes and completes (every closed ledger offloaded and its
// bookie copy deleted), and the messages of this round and the one before read back
// byte-identical and in order. At the end the bucket holds exactly the objects the record
// names (orphans of killed uploads cleaned up, no multipart upload left open) and a new
// subscription reads every message of every round.
//
// MAGNETAR_OFFLOAD_KILLS sets the number of kills (default 20), MAGNETAR_OFFLOAD_KILL_SEED
// the seed of the delays (default 1).
func TestOffloadKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a real process 20 times")
	}
	kills := 20
	if n, err := strconv.Atoi(os.Getenv("MAGNETAR_OFFLOAD_KILLS")); err == nil && n > 0 {
		kills = n
	}
	seed := uint64(1)
	if n, err := strconv.ParseUint(os.Getenv("MAGNETAR_OFFLOAD_KILL_SEED"), 10, 64); err == nil {
		seed = n
	}
	t.Logf("kills %d, seed %d (MAGNETAR_OFFLOAD_KILLS, MAGNETAR_OFFLOAD_KILL_SEED)", kills, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c))

	srv := StartS3(t)
	sc := srv.client(t)
	data := filepath.Join(t.TempDir(), "data")
	etcd, bk, brk, web := FreeAddr(t), FreeAddr(t), FreeAddr(t), FreeAddr(t)
	args := append([]string{"standalone", "--data-dir", data, "--etcd-listen", etcd, "--bookie-listen", bk,
		"--broker-listen", brk, "--http", web,
		"--default-retention-time", "-1ns", "--default-retention-size-mb", "-1",
		"--managed-ledger-max-size-per-ledger-mbytes", "6", "--managed-ledger-offload-deletion-lag-ms", "0",
		"--s3-managed-ledger-offload-max-block-size-in-bytes", strconv.Itoa(5 << 20)}, srv.StandaloneArgs()...)
	proc := Start(t, "standalone", args...)
	httpURL := "http://" + web
	up := func() {
		WaitTCP(t, brk, 60*time.Second)
		WaitAdmin(t, httpURL, 60*time.Second)
	}
	up()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ac, err := adminclient.New(adminclient.Options{URLs: []string{httpURL}})
	if err != nil {
		t.Fatal(err)
	}
	ns := adminclient.PolicyTarget{Namespace: "public/default"}
	const topic = "persistent://public/default/offload-kill"
	const size = 8 << 10
	const perRound = 2400 // 19.7 MB: three ledgers of 6 MB closed, and more in the current one

	var firstOfRound []pulsarclient.MessageID
	var seq uint64
	publish := func() {
		cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + brk})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		prod, err := cl.CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var first pulsarclient.MessageID
		var sendErr error
		start := seq
		for range perRound {
			s := seq
			err := prod.SendAsync(ctx, &pulsarclient.ProducerMessage{Payload: killPayload(s, size)}, func(id pulsarclient.MessageID, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && sendErr == nil {
					sendErr = fmt.Errorf("send %d: %w", s, err)
				}
				if s == start {
					first = id
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			seq++
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if sendErr != nil {
			t.Fatal(sendErr)
		}
		firstOfRound = append(firstOfRound, first)
		prod.Close(ctx)
	}
	setThreshold := func(n int64) {
		if err := ac.SetPolicy(ctx, ns, "offloadThreshold", nil, n); err != nil {
			t.Fatalf("offload threshold %d: %v", n, err)
		}
	}
	info := func() mlInfo {
		var in mlInfo
		getJSON(t, httpURL+"/admin/v2/persistent/public/default/offload-kill/internal-info", &in)
		return in
	}
	// settled waits until every closed ledger is offloaded and its bookie copy deleted.
	settled := func(d time.Duration) mlInfo {
		deadline := time.Now().Add(d)
		for {
			in := info()
			pending := 0
			offloaded := map[int64]bool{}
			for i, l := range in.Ledgers {
				if l.IsOffloaded {
					offloaded[l.LedgerID] = true
				} else if i < len(in.Ledgers)-1 && l.Entries > 0 {
					pending++
				}
			}
			if pending == 0 {
				var list []struct {
					LedgerID int64 `json:"ledgerId"`
				}
				runJSON(t, &list, "ledger", "list", "--metadata-url", "etcd://"+etcd, "-o", "json")
				for _, l := range list {
					if offloaded[l.LedgerID] {
						pending++
					}
				}
				if pending == 0 {
					return in
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("offloads not done after %v: %d closed ledgers not offloaded or still on the bookie: %+v", d, pending, in.Ledgers)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(100 * time.Millisecond): // the record and the ledger list are read from the process
			}
		}
	}
	// verify reads messages from..to-1 back, from round from's first message.
	verify := func(round int, from, to uint64) {
		cl, err := pulsarclient.New(pulsarclient.Options{URL: "pulsar://" + brk})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		opts := pulsarclient.ConsumerOptions{Topic: topic, Subscription: fmt.Sprintf("verify-%d", round),
			InitialPosition: pulsarclient.Earliest}
		if from > 0 {
			opts.NonDurable, opts.StartMessageID, opts.StartInclusive = true, &firstOfRound[from/perRound], true
		}
		c, err := cl.Subscribe(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		for s := from; s < to; s++ {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatalf("round %d: receive %d: %v", round, s, err)
			}
			if got := binary.BigEndian.Uint64(m.Payload); got != s {
				t.Fatalf("round %d: received message %d where %d was due", round, got, s)
			}
			if !bytes.Equal(m.Payload, killPayload(s, size)) {
				t.Fatalf("round %d: message %d changed", round, s)
			}
		}
	}

	// Round 0 runs uninterrupted: its duration spans the window the kills sweep.
	setThreshold(-1)
	publish()
	t0 := time.Now()
	setThreshold(0)
	in := settled(2 * time.Minute)
	span := time.Since(t0)
	t.Logf("round 0: %d ledgers, offloaded and deleted from the bookie in %v", len(in.Ledgers), span.Round(time.Millisecond))

	type killRecord struct {
		delay           time.Duration
		newIndexes      int
		orphanData      int
		uploads         int
		recoveredIn     time.Duration
		offloadedLedger int
	}
	var recs []killRecord
	prev := listBucket(t, ctx, sc, srv.Bucket)
	for k := 1; k <= kills; k++ {
		setThreshold(-1)
		publish()
		// A delay in the k-th twentieth of the span, so the kills sweep it.
		delay := time.Duration((float64(k-1) + rng.Float64()) / float64(kills) * float64(span))
		setThreshold(0)
		time.Sleep(delay) // the kill point: the delay is what the test varies
		proc.Kill()
		bs := listBucket(t, ctx, sc, srv.Bucket)
		r := killRecord{delay: delay, uploads: bs.uploads}
		for key := range bs.index {
			if !prev.index[key] {
				r.newIndexes++
			}
		}
		for key := range bs.data {
			if !bs.index[key+"-index"] {
				r.orphanData++
			}
		}
		t1 := time.Now()
		proc.Restart()
		up()
		in := settled(2 * time.Minute)
		r.recoveredIn = time.Since(t1)
		for _, l := range in.Ledgers {
			if l.IsOffloaded {
				r.offloadedLedger++
			}
		}
		recs = append(recs, r)
		verify(k, uint64(k-1)*perRound, seq)
		prev = listBucket(t, ctx, sc, srv.Bucket)
	}

	var b strings.Builder
	midUpload, midSequence := 0, 0
	for k, r := range recs {
		fmt.Fprintf(&b, "  kill %2d at %6.1f ms (%3.0f%% of the span): %d of the round's indexes written, %d data objects without an index, %d multipart uploads open; offload complete %v after the restart (%d ledgers offloaded)\n",
			k+1, float64(r.delay.Microseconds())/1000, 100*r.delay.Seconds()/span.Seconds(), r.newIndexes, r.orphanData, r.uploads,
			r.recoveredIn.Round(time.Millisecond), r.offloadedLedger)
		if r.uploads > 0 {
			midUpload++
		}
		if r.newIndexes > 0 && r.newIndexes < 3 {
			midSequence++
		}
	}
	t.Logf("kill points (span %v):\n%s", span.Round(time.Millisecond), b.String())
	if midUpload == 0 {
		t.Errorf("no kill landed while a data object was being uploaded (an open multipart upload)")
	}
	t.Logf("%d kills during an upload, %d between the offloads of two ledgers of a round", midUpload, midSequence)

	// The bucket holds exactly the objects of the complete offloads the record names.
	in = settled(2 * time.Minute)
	want := map[string]bool{}
	for _, l := range in.Ledgers {
		if l.IsOffloaded {
			want[fmt.Sprintf("%s-ledger-%d", l.OffloadedContextUUID, l.LedgerID)] = true
		}
	}
	bs := listBucket(t, ctx, sc, srv.Bucket)
	var stray []string
	for key := range bs.data {
		if !want[key] {
			stray = append(stray, key)
		}
	}
	for key := range bs.index {
		if !want[strings.TrimSuffix(key, "-index")] {
			stray = append(stray, key)
		}
	}
	for key := range want {
		if !bs.data[key] || !bs.index[key+"-index"] {
			t.Errorf("offloaded ledger's objects missing: %s", key)
		}
	}
	slices.Sort(stray)
	if len(stray) > 0 || bs.uploads > 0 {
		t.Errorf("%d objects the record does not name (orphans not cleaned up): %v; %d multipart uploads open", len(stray), stray, bs.uploads)
	}
	verify(kills+1, 0, seq)
	t.Logf("%d messages of %d rounds read back byte-identical; %d ledgers in S3", seq, kills+1, len(want))
}
