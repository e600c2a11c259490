package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

// txnTimeout is the transactional producer's transaction timeout: a transaction left open
// by a killed client is aborted by the coordinator after it.
const txnTimeout = 10 * time.Second

// clientEnv carries a ClientSpec (JSON) to a child process started by the harness.
const clientEnv = "MAGNETAR_CHAOS_CLIENT"

// Client roles.
const (
	roleSetup    = "setup"    // create the partitioned topic
	roleProducer = "producer" // produce with a fixed name and explicit sequence ids
	roleConsumer = "consumer" // consume a durable subscription, ack each message
	roleReader   = "reader"   // read every partition from the earliest message to the end
	roleTxn      = "txn"      // produce in transactions, commit or abort each
	roleStats    = "stats"    // write every partition's stats and internal stats (a stuck run's evidence)
	roleGeoSetup = "geosetup" // write the cluster records, tenant and replicated namespace, then setup
)

// ClientSpec is what one client process does. Each client is its own process in its own
// namespace, with its own pulsar-client-go client and connections.
type ClientSpec struct {
	Role       string
	ServiceURL string
	AdminURLs  []string
	Topic      string // persistent://public/default/NAME
	Partitions int
	Name       string // producer name
	Rate       int    // messages per second
	GoFile     string // holds the time to stop producing (unix ms); written once every producer is ready
	Batching   bool
	Rewind     int    // a restarted producer resends this many acknowledged sequence ids
	Out        string // record file
	TxnSize    int    // messages per transaction
	Abandon    bool   // leave the second transaction open after one message, and wait
	AbortAll   bool   // abort every transaction
	// IdleEnd ends a reader's partition when HasNext says there is more but nothing comes
	// for this long (0: wait for ever).
	IdleEnd time.Duration
	Seed    uint64
	// Cluster is the client's own cluster and Clusters every cluster's record (geosetup).
	Cluster  string          `json:",omitempty"`
	Clusters []ClusterRecord `json:",omitempty"`
	// Subscription is a consumer's subscription (default "chaos"); ReplicateState makes it a
	// replicated subscription (pulsar-client-go's ReplicateSubscriptionState).
	Subscription   string `json:",omitempty"`
	ReplicateState bool   `json:",omitempty"`
}

// RunClientIfChild runs the client role and exits if this process was started as a client
// by the harness; otherwise it returns. Call it first in main and TestMain.
func RunClientIfChild() {
	v := os.Getenv(clientEnv)
	if v == "" {
		return
	}
	var s ClientSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintln(os.Stderr, "chaos client:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runClient(ctx, s)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos client:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runClient(ctx context.Context, s ClientSpec) error {
	switch s.Role {
	case roleSetup:
		return setupTopic(ctx, s)
	case roleProducer:
		return produce(ctx, s)
	case roleConsumer:
		return consume(ctx, s)
	case roleReader:
		return readAll(ctx, s)
	case roleTxn:
		return produceTxn(ctx, s)
	case roleStats:
		return dumpStats(ctx, s)
	case roleGeoSetup:
		return setupGeo(ctx, s)
	}
	return fmt.Errorf("unknown role %q", s.Role)
}

func clientLogger() plog.Logger {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	return plog.NewLoggerWithLogrus(l)
}

func newPulsarClient(s ClientSpec) (pulsar.Client, error) {
	return pulsar.NewClient(pulsar.ClientOptions{URL: s.ServiceURL, OperationTimeout: 30 * time.Second,
		ConnectionTimeout: 5 * time.Second, Logger: clientLogger()})
}

// record appends lines to a client's record file; every line is one write(2), so a client
// killed with SIGKILL loses nothing it recorded.
type record struct {
	mu sync.Mutex
	f  *os.File
}

func openRecord(path string) (*record, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &record{f: f}, nil
}

func (r *record) line(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.f, format+"\n", a...)
}

func (r *record) close() { r.f.Close() }

func idFields(id pulsar.MessageID) string {
	return fmt.Sprintf("%d %d %d %d", id.LedgerID(), id.EntryID(), id.BatchIdx(), id.PartitionIdx())
}

func setupTopic(ctx context.Context, s ClientSpec) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	name := strings.TrimPrefix(s.Topic, "persistent://")
	var last error
	for i := 0; ; i++ {
		u := s.AdminURLs[i%len(s.AdminURLs)] + "/admin/v2/persistent/" + name + "/partitions"
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, u, strings.NewReader(strconv.Itoa(s.Partitions)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusConflict {
				return holdSubscription(ctx, s)
			}
			err = fmt.Errorf("%s: %s: %s", u, resp.Status, b)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w", s.Topic, last)
		case <-time.After(200 * time.Millisecond): // retry interval
		}
	}
}

// dumpStats writes to s.Out each partition's topic stats and internal stats, as the first
// admin URL that answers gives them (redirects to the owner are followed).
func dumpStats(ctx context.Context, s ClientSpec) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	f, err := os.Create(s.Out)
	if err != nil {
		return err
	}
	defer f.Close()
	name := strings.TrimPrefix(s.Topic, "persistent://")
	for i := range s.Partitions {
		for _, what := range []string{"stats", "internalStats"} {
			path := fmt.Sprintf("/admin/v2/persistent/%s-partition-%d/%s", name, i, what)
			fmt.Fprintf(f, "== %s\n", path)
			for _, u := range s.AdminURLs {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+path, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					fmt.Fprintf(f, "%s: %v\n", u, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				fmt.Fprintf(f, "%s: %s\n%s\n", u, resp.Status, b)
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
		}
	}
	return nil
}

// holdSubscription creates the durable subscription "hold" that nobody consumes: it keeps
// every ledger from being trimmed (no retention is configured), so that the final reader
// finds every stored message.
func holdSubscription(ctx context.Context, s ClientSpec) error {
	cl, err := newPulsarClient(s)
	if err != nil {
		return err
	}
	defer cl.Close()
	c, err := retry(ctx, func() (pulsar.Consumer, error) {
		return cl.Subscribe(pulsar.ConsumerOptions{Topic: s.Topic, SubscriptionName: "hold",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	})
	if err != nil {
		return fmt.Errorf("subscription hold: %w", err)
	}
	c.Close()
	return nil
}

// lastSeq reads a record for the highest sequence id in field i of its lines starting with
// verb: a producer's acknowledged ones ("ack", 1), a transactional producer's reserved ones
// ("begin", 3).
func lastSeq(path, verb string, i int) int64 {
	var top int64
	scanLines(path, func(fs []string) error {
		if len(fs) > i && fs[0] == verb {
			if v, err := strconv.ParseInt(fs[i], 10, 64); err == nil && v > top {
				top = v
			}
		}
		return nil
	})
	return top
}

// message is the message a producer sends for seq: the payload repeats the properties, so a
// reader can tell a message from a mangled one.
func message(name string, seq int64) *pulsar.ProducerMessage {
	return &pulsar.ProducerMessage{Payload: payload(name, seq), SequenceID: &seq,
		Properties: map[string]string{"p": name, "s": strconv.FormatInt(seq, 10)}}
}

func payload(name string, seq int64) []byte {
	p := fmt.Sprintf("%s:%d:", name, seq)
	return []byte(p + strings.Repeat("x", max(0, 100-len(p))))
}

func routeBySeq(m *pulsar.ProducerMessage, md pulsar.TopicMetadata) int {
	return int(uint64(*m.SequenceID) % uint64(md.NumPartitions()))
}

// createTimeout bounds how long a client tries to create its producer.
const createTimeout = 3 * time.Minute

// waitGo records that the producer is ready and waits for the harness's go file, which holds
// the time to stop producing; a restarted producer finds it at once. So a slow start (a
// loaded machine, the race detector) does not eat into the produce window.
func waitGo(ctx context.Context, s ClientSpec, rec *record) (time.Time, error) {
	rec.line("ready")
	for {
		if b, err := os.ReadFile(s.GoFile); err == nil {
			ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("go file %s: %w", s.GoFile, err)
			}
			return time.UnixMilli(ms), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond): // poll interval of the go file
		}
	}
}

// retry retries f every 500 ms until it succeeds or ctx ends.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond): // retry interval
		}
	}
}

func produce(ctx context.Context, s ClientSpec) error {
	rec, err := openRecord(s.Out)
	if err != nil {
		return err
	}
	defer rec.close()
	rec.line("name %s", s.Name)
	next := int64(1)
	if top := lastSeq(s.Out, "ack", 1); top > 0 {
		next = max(1, top-int64(s.Rewind)+1)
	}
	rec.line("start %d", next)
	cl, err := newPulsarClient(s)
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	p, err := retry(cctx, func() (pulsar.Producer, error) {
		return cl.CreateProducer(pulsar.ProducerOptions{Topic: s.Topic, Name: s.Name, DisableBatching: !s.Batching,
			BatchingMaxPublishDelay: 5 * time.Millisecond, MessageRouter: routeBySeq, SendTimeout: 30 * time.Second})
	})
	if err != nil {
		return fmt.Errorf("create producer: %w", err)
	}
	until, err := waitGo(ctx, s, rec)
	if err != nil {
		return err
	}
	tick := time.NewTicker(time.Second / time.Duration(max(1, s.Rate)))
	defer tick.Stop()
	var wg sync.WaitGroup
	for seq := next; time.Now().Before(until) && ctx.Err() == nil; seq++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			continue
		}
		sq := seq
		wg.Add(1)
		p.SendAsync(ctx, message(s.Name, sq),
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer wg.Done()
				if err != nil {
					rec.line("fail %d %s", sq, strings.ReplaceAll(err.Error(), "\n", " "))
					return
				}
				rec.line("ack %d %s", sq, idFields(id))
			})
	}
	p.FlushWithCtx(context.Background())
	wg.Wait()
	p.Close()
	rec.line("done")
	return nil
}

// parseMsg returns the producer and sequence id a message carries.
func parseMsg(m pulsar.Message) (string, int64, error) {
	name, seqStr := m.Properties()["p"], m.Properties()["s"]
	seq, err := strconv.ParseInt(seqStr, 10, 64)
	if name == "" || err != nil {
		return "", 0, fmt.Errorf("message %v without producer/sequence properties: %q", m.ID(), m.Payload())
	}
	if want := payload(name, seq); string(want) != string(m.Payload()) {
		return "", 0, fmt.Errorf("message %v: payload %q does not match %s:%d", m.ID(), m.Payload(), name, seq)
	}
	return name, seq, nil
}

func consume(ctx context.Context, s ClientSpec) error {
	rec, err := openRecord(s.Out)
	if err != nil {
		return err
	}
	defer rec.close()
	cl, err := newPulsarClient(s)
	if err != nil {
		return err
	}
	defer cl.Close()
	sub := cmp.Or(s.Subscription, "chaos")
	c, err := retry(ctx, func() (pulsar.Consumer, error) {
		return cl.Subscribe(pulsar.ConsumerOptions{Topic: s.Topic, SubscriptionName: sub, Type: pulsar.Failover,
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, ReplicateSubscriptionState: s.ReplicateState})
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer c.Close()
	for {
		m, err := c.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		name, seq, perr := parseMsg(m)
		if perr != nil {
			rec.line("bad %s", perr)
		} else {
			rec.line("msg %s %d %s", name, seq, idFields(m.ID()))
		}
		c.Ack(m)
	}
}

func readAll(ctx context.Context, s ClientSpec) error {
	rec, err := openRecord(s.Out)
	if err != nil {
		return err
	}
	defer rec.close()
	cl, err := newPulsarClient(s)
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := range s.Partitions {
		t := fmt.Sprintf("%s-partition-%d", s.Topic, i)
		r, err := retry(ctx, func() (pulsar.Reader, error) {
			return cl.CreateReader(pulsar.ReaderOptions{Topic: t, StartMessageID: pulsar.EarliestMessageID()})
		})
		if err != nil {
			return fmt.Errorf("reader %s: %w", t, err)
		}
		end := "end %d"
		for r.HasNext() {
			nctx, cancel := ctx, context.CancelFunc(func() {})
			if s.IdleEnd > 0 {
				nctx, cancel = context.WithTimeout(ctx, s.IdleEnd)
			}
			m, err := r.Next(nctx)
			cancel()
			if err != nil && ctx.Err() == nil && nctx.Err() != nil {
				// HasNext said there is more, but nothing came: the last message id the
				// broker reported is not a message (a transaction marker, say).
				end = "end %d idle"
				break
			}
			if err != nil {
				r.Close()
				return fmt.Errorf("read %s: %w", t, err)
			}
			name, seq, perr := parseMsg(m)
			if perr != nil {
				rec.line("bad %s", perr)
				continue
			}
			id := m.ID() // a reader of one partition reports partition -1 or 0: put the index back
			rec.line("msg %s %d %d %d %d %d", name, seq, id.LedgerID(), id.EntryID(), id.BatchIdx(), i)
		}
		r.Close()
		rec.line(end, i)
	}
	return nil
}

// produceTxn produces TxnSize messages per transaction under its own producer name, with
// sequence ids, and commits or aborts each (decided by the seed). Its record has, per
// transaction, "begin ID FIRST LAST" before the first send (the ids it reserves), "txn ID
// commit|abort FIRST LAST" before ending it, then "outcome ID committed|aborted|unknown".
func produceTxn(ctx context.Context, s ClientSpec) error {
	rec, err := openRecord(s.Out)
	if err != nil {
		return err
	}
	defer rec.close()
	rec.line("name %s", s.Name)
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	// With transactions on, the client connects to every coordinator when it is created:
	// retry that too (a broker may be down).
	cl, err := retry(cctx, func() (pulsar.Client, error) {
		return pulsar.NewClient(pulsar.ClientOptions{URL: s.ServiceURL, OperationTimeout: 30 * time.Second,
			ConnectionTimeout: 5 * time.Second, Logger: clientLogger(), EnableTransaction: true})
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := retry(cctx, func() (pulsar.Producer, error) {
		return cl.CreateProducer(pulsar.ProducerOptions{Topic: s.Topic, Name: s.Name, DisableBatching: true,
			MessageRouter: routeBySeq, SendTimeout: 30 * time.Second})
	})
	if err != nil {
		return fmt.Errorf("create producer: %w", err)
	}
	defer p.Close()
	until, err := waitGo(ctx, s, rec)
	if err != nil {
		return err
	}
	seq := lastSeq(s.Out, "begin", 3) + 1
	rng := newRand(s.Seed)
	for n := 0; time.Now().Before(until) && ctx.Err() == nil; n++ {
		txn, err := cl.NewTransaction(txnTimeout)
		if err != nil {
			rec.line("newtxn-fail %s", strings.ReplaceAll(err.Error(), "\n", " "))
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond): // retry interval
			}
			continue
		}
		id := txn.GetTxnID()
		tid := fmt.Sprintf("%d:%d", id.MostSigBits, id.LeastSigBits)
		commit := rng.IntN(4) != 0 && !s.AbortAll
		first := seq
		rec.line("begin %s %d %d", tid, first, first+int64(s.TxnSize)-1)
		if s.Abandon && n == 1 {
			m := message(s.Name, seq)
			m.Transaction = txn
			_, err := p.Send(ctx, m)
			rec.line("abandoned %s %v", tid, err)
			<-ctx.Done() // until killed
			return nil
		}
		failed := false
		for range s.TxnSize {
			m := message(s.Name, seq)
			m.Transaction = txn
			seq++
			_, err := p.Send(ctx, m)
			if err != nil {
				failed = true
				break
			}
		}
		last := seq - 1
		if failed {
			commit = false
		}
		verb := "abort"
		if commit {
			verb = "commit"
		}
		rec.line("txn %s %s %d %d", tid, verb, first, last)
		if commit {
			err = txn.Commit(ctx)
		} else {
			err = txn.Abort(ctx)
		}
		switch {
		case err == nil && commit:
			rec.line("outcome %s committed", tid)
		case err == nil:
			rec.line("outcome %s aborted", tid)
		default:
			rec.line("outcome %s unknown %s", tid, strings.ReplaceAll(err.Error(), "\n", " "))
		}
		select {
		case <-time.After(time.Second / time.Duration(max(1, s.Rate))):
		case <-ctx.Done():
		}
	}
	rec.line("done")
	return nil
}
