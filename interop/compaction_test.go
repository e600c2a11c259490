package interop

import (
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/compaction"
	"github.com/magnetar-io/magnetar/metadata"
)

// compactNow triggers a compaction with pulsaradmin and waits for its outcome.
func compactNow(t *testing.T, c *cluster, tn utils.TopicName) utils.LongRunningProcessStatus {
	t.Helper()
	adm := c.admin()
	if err := adm.Topics().Compact(tn); err != nil {
		t.Fatalf("compact: %v", err)
	}
	var st utils.LongRunningProcessStatus
	waitFor(t, time.Minute, "compaction to end", func() bool {
		var err error
		st, err = adm.Topics().CompactStatus(tn)
		return err == nil && st.Status != utils.RUNNING
	})
	return st
}

// readUntil reads with r until the message "end"=marker and returns key → value (without
// "end") and how many messages other than markers came before it.
func readUntil(t *testing.T, r pulsar.Reader, marker string) (map[string]string, int) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	got := map[string]string{}
	n := 0
	for {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reader after %d messages: %v", n, err)
		}
		if m.Key() == "end" {
			if string(m.Payload()) == marker {
				return got, n
			}
			continue
		}
		n++
		if len(m.Payload()) == 0 {
			delete(got, m.Key())
		} else {
			got[m.Key()] = string(m.Payload())
		}
	}
}

func compactedReader(t *testing.T, cl pulsar.Client, topic string, compacted bool) pulsar.Reader {
	t.Helper()
	r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID(),
		ReadCompacted: compacted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// sendKV sends key=value messages (batched) and an "end"=marker message, and waits for
// them.
func sendKV(t *testing.T, p pulsar.Producer, kvs [][2]string, marker string) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	errs := make(chan error, len(kvs)+1)
	for _, kv := range append(kvs, [2]string{"end", marker}) {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Key: kv[0], Payload: []byte(kv[1])},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	for range len(kvs) + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompactionReadCompacted: after a compaction (pulsaradmin), a pulsar-client-go reader
// with ReadCompacted sees exactly the latest value of every key (deleted keys gone, batches
// and keyless messages as clients send them) and then the live topic; a plain reader sees
// every message. This holds across a broker restart, and across a compaction that crashes
// before its commit (the previous compacted state stays; the next compaction succeeds).
func TestCompactionReadCompacted(t *testing.T) {
	var crash atomic.Bool
	var c *cluster
	c = newCluster(t, clusterOpts{admin: true, tweak: func(cfg *broker.Config) {
		cfg.CompactionCheckInterval = -1
		cfg.CompactionBeforeCommit = func(compaction.State) error {
			if crash.Load() {
				return errors.New("injected crash before the commit")
			}
			return nil
		}
	}})
	cl := c.client()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 7})
	var kvs [][2]string
	want := map[string]string{}
	for round := range 5 {
		for k := range 10 {
			v := fmt.Sprintf("k%d-v%d", k, round)
			kvs = append(kvs, [2]string{fmt.Sprintf("k%d", k), v})
			want[fmt.Sprintf("k%d", k)] = v
		}
	}
	kvs = append(kvs, [2]string{"k3", ""}, [2]string{"", "keyless"})
	delete(want, "k3")
	sendKV(t, p, kvs, "1")
	if st := compactNow(t, c, tn); st.Status != utils.SUCCESS {
		t.Fatalf("compaction: %+v", st)
	}
	marker := "1"
	// check reads with a compacted reader up to the last marker: the latest value of every
	// key, and (wantN > 0) no more messages than keys.
	check := func(cl pulsar.Client, what string, wantN int) {
		t.Helper()
		got, n := readUntil(t, compactedReader(t, cl, topic, true), marker)
		if !maps.Equal(got, want) || (wantN > 0 && n != wantN) {
			t.Fatalf("%s: compacted reader saw %d messages %v, want %d: %v", what, n, got, wantN, want)
		}
	}
	check(cl, "after compaction", len(want))
	if _, n := readUntil(t, compactedReader(t, cl, topic, false), marker); n != len(kvs) {
		t.Fatalf("plain reader saw %d messages before the first marker, want %d", n, len(kvs))
	}

	c.restartBroker()
	cl = c.client()
	check(cl, "after a broker restart", len(want))

	// New values, then a compaction that crashes before its commit: compacted readers get
	// the previous compaction and the live messages after its horizon.
	p = producer(t, cl, pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 7})
	var more [][2]string
	for k := range 4 {
		v := fmt.Sprintf("k%d-new", k)
		more = append(more, [2]string{fmt.Sprintf("k%d", k), v})
		want[fmt.Sprintf("k%d", k)] = v
	}
	marker = "2"
	sendKV(t, p, more, marker)
	crash.Store(true)
	if st := compactNow(t, c, tn); st.Status != utils.ERROR {
		t.Fatalf("crashed compaction: %+v", st)
	}
	check(cl, "after a crashed compaction", 0)
	c.restartBroker()
	cl = c.client()
	check(cl, "after a crashed compaction and a restart", 0)
	crash.Store(false)
	if st := compactNow(t, c, tn); st.Status != utils.SUCCESS {
		t.Fatalf("compaction after the crash: %+v", st)
	}
	check(cl, "after the next compaction", len(want))

	// Deleting the topic deletes its compacted log.
	if err := c.admin().Topics().Delete(tn, true, true); err != nil {
		t.Fatal(err)
	}
	left, _, err := c.store.List(ctxT(t, time.Minute), metadata.PrefixManagedLedgers+"public/default/compacted/")
	if err != nil || len(left) != 0 {
		t.Fatalf("compacted logs left after the topic's deletion: %d, %v", len(left), err)
	}
}

// TestCompactionThreshold: a topic-level compaction threshold (pulsaradmin) makes the broker
// compact the topic on its own once more bytes than that follow the horizon.
func TestCompactionThreshold(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true, tweak: func(cfg *broker.Config) { cfg.CompactionCheckInterval = 100 * time.Millisecond }})
	cl := c.client()
	adm := c.admin()
	topic := topicName(t)
	tn := mustTopic(t, topic)
	p := producer(t, cl, pulsar.ProducerOptions{Topic: topic})
	sendKV(t, p, [][2]string{{"a", "1"}}, "1")
	if err := adm.Topics().SetCompactionThreshold(tn, 1024); err != nil {
		t.Fatal(err)
	}
	if v, err := adm.Topics().GetCompactionThreshold(tn, false); err != nil || v != 1024 {
		t.Fatalf("threshold %d, %v", v, err)
	}
	if st, _ := adm.Topics().CompactStatus(tn); st.Status != utils.NOTRUN {
		t.Fatalf("status below the threshold: %+v", st)
	}
	var kvs [][2]string
	for i := range 100 {
		kvs = append(kvs, [2]string{"a", fmt.Sprintf("%d-%0100d", i, i)})
	}
	sendKV(t, p, kvs, "2")
	waitFor(t, time.Minute, "the threshold to trigger a compaction", func() bool {
		st, err := adm.Topics().CompactStatus(tn)
		return err == nil && st.Status == utils.SUCCESS
	})
}

// TestCompactionCompressed: batches that pulsar-client-go compressed with LZ4 or ZSTD are
// compacted by the keys of their messages: a compacted reader sees exactly the latest value
// of every key, one message per key; a plain reader still sees every message.
func TestCompactionCompressed(t *testing.T) {
	c := newCluster(t, clusterOpts{admin: true, tweak: func(cfg *broker.Config) { cfg.CompactionCheckInterval = -1 }})
	cl := c.client()
	for _, codec := range compressedCodecs {
		t.Run(codec.name, func(t *testing.T) {
			topic := topicName(t)
			tn := mustTopic(t, topic)
			p := producer(t, cl, pulsar.ProducerOptions{Topic: topic, CompressionType: codec.ct, BatchingMaxMessages: 7})
			var kvs [][2]string
			want := map[string]string{}
			for round := range 5 {
				for k := range 10 {
					v := fmt.Sprintf("k%d-v%d-%s", k, round, codec.name)
					kvs = append(kvs, [2]string{fmt.Sprintf("k%d", k), v})
					want[fmt.Sprintf("k%d", k)] = v
				}
			}
			kvs = append(kvs, [2]string{"k3", ""})
			delete(want, "k3")
			sendKV(t, p, kvs, "1")
			if st := compactNow(t, c, tn); st.Status != utils.SUCCESS {
				t.Fatalf("compaction: %+v", st)
			}
			got, n := readUntil(t, compactedReader(t, cl, topic, true), "1")
			if !maps.Equal(got, want) || n != len(want) {
				t.Fatalf("compacted reader saw %d messages %v, want %d: %v", n, got, len(want), want)
			}
			if _, n := readUntil(t, compactedReader(t, cl, topic, false), "1"); n != len(kvs) {
				t.Fatalf("plain reader saw %d messages, want %d", n, len(kvs))
			}
		})
	}
}
