package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/adminclient"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/pulsarclient"
)

// logBuffer is a slog destination tests read while the broker writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// replicationRecord is one remote cluster's entry of a replication section, as the admin
// API's JSON has it.
type replicationRecord struct {
	MsgRateOut         float64 `json:"msgRateOut"`
	ReplicationBacklog int64   `json:"replicationBacklog"`
	Connected          bool    `json:"connected"`
}

type partitionedStatsJSON struct {
	Replication map[string]replicationRecord `json:"replication"`
	Partitions  map[string]struct {
		Replication map[string]replicationRecord `json:"replication"`
	} `json:"partitions"`
}

// TestGeoReplicationPartitioned: a partitioned topic created in east only replicates
// partition by partition: the first partition's replicator creates the partitioned topic
// in west with east's partition count (through west's admin API, the cluster record's
// serviceUrl, as Pulsar's createTopicToRemoteClusterForReplication), and each partition's
// messages arrive in the same partition in west, in order. East's partitioned stats sum
// the partitions' replication sections (perPartition lists each). A topic partitioned
// differently in the two clusters is not replicated: its replicators stay disconnected,
// log why, and its backlog stays in east.
func TestGeoReplicationPartitioned(t *testing.T) {
	logs := &logBuffer{}
	g := newGeoClusters(t, func(c *broker.Config) {
		if c.Cluster == "east" {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, parts, n = "persistent://geo/ns/parts", 3, 20
	if err := g.east.CreatePartitionedTopic(ctx, topic, parts); err != nil {
		t.Fatal(err)
	}
	part := func(base string, i int) string { return base + "-partition-" + strconv.Itoa(i) }
	produce := func(base string, i int) {
		t.Helper()
		p, err := client(t, g.east).CreateProducer(ctx, pulsarclient.ProducerOptions{Topic: part(base, i), DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if _, err := p.Send(ctx, &pulsarclient.ProducerMessage{Payload: []byte(fmt.Sprintf("%d-%d", i, j))}); err != nil {
				t.Fatal(err)
			}
		}
		_ = p.Close(ctx)
	}
	for i := range parts {
		produce(topic, i)
	}
	waitFor(ctx, t, "the partitioned topic in west", func() error {
		md, err := g.west.PartitionedTopicMetadata(ctx, topic)
		if err != nil {
			return err
		}
		if md.Partitions != parts {
			return fmt.Errorf("west has %d partitions", md.Partitions)
		}
		return nil
	})
	for i := range parts {
		c, err := client(t, g.west).Subscribe(ctx, pulsarclient.ConsumerOptions{Topic: part(topic, i), Subscription: "s",
			InitialPosition: pulsarclient.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			m, err := c.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d-%d", i, j); string(m.Payload) != want {
				t.Fatalf("west partition %d: got %q, want %q", i, m.Payload, want)
			}
			_ = c.Ack(m)
		}
		_ = c.Close(ctx)
	}

	ac, err := adminclient.New(adminclient.Options{URLs: []string{g.eastHTTP.URL}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "east's partitioned stats to show every partition replicated", func() error {
		var ps partitionedStatsJSON
		if err := ac.PartitionedTopicStats(ctx, topic, true, &ps); err != nil {
			return err
		}
		if r, ok := ps.Replication["west"]; !ok || !r.Connected || r.ReplicationBacklog != 0 {
			return fmt.Errorf("replication section %+v", ps.Replication)
		}
		if len(ps.Partitions) != parts {
			return fmt.Errorf("%d partitions listed", len(ps.Partitions))
		}
		for name, p := range ps.Partitions {
			if r := p.Replication["west"]; !r.Connected || r.ReplicationBacklog != 0 {
				return fmt.Errorf("partition %s: %+v", name, p.Replication)
			}
		}
		return nil
	})

	// Partitioned differently: 3 partitions in east, 2 in west.
	const other = "persistent://geo/ns/mismatch"
	if err := g.east.CreatePartitionedTopic(ctx, other, 3); err != nil {
		t.Fatal(err)
	}
	if err := g.west.CreatePartitionedTopic(ctx, other, 2); err != nil {
		t.Fatal(err)
	}
	produce(other, 0)
	waitFor(ctx, t, "east to log the mismatch", func() error {
		if l := logs.String(); !strings.Contains(l, "partitioned topic mismatch") || !strings.Contains(l, part(other, 0)) {
			return fmt.Errorf("no log of the mismatch yet")
		}
		return nil
	})
	var ps partitionedStatsJSON
	if err := ac.PartitionedTopicStats(ctx, other, true, &ps); err != nil {
		t.Fatal(err)
	}
	if r := ps.Partitions[part(other, 0)].Replication["west"]; r.Connected || r.ReplicationBacklog != n {
		t.Fatalf("replication of the mismatched topic's partition 0: %+v, want not connected with a backlog of %d", r, n)
	}
	if r := ps.Replication["west"]; r.Connected || r.ReplicationBacklog != n {
		t.Fatalf("replication of the mismatched topic: %+v, want not connected with a backlog of %d", r, n)
	}
	if md, err := g.west.PartitionedTopicMetadata(ctx, other); err != nil || md.Partitions != 2 {
		t.Fatalf("west's mismatched topic: %+v, %v", md, err)
	}
}
