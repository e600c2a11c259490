package replhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/pulsarclient"
	"github.com/magnetar-io/magnetar/replication"
)

// Remote is what a replicator needs of the remote cluster: a producer of one session on a
// topic there (pulsarclient.Client.CreateSessionProducer, with the cluster record's URL,
// credentials and TLS).
type Remote interface {
	CreateSessionProducer(ctx context.Context, o pulsarclient.SessionProducerOptions) (*pulsarclient.SessionProducer, error)
}

// replicator is the replication of one loaded topic (partition) to one remote cluster: one
// owner goroutine (run) over a replication.Core. It performs the core's Ready — the remote
// producer of each epoch, the sends, the replication cursor's reads and mark-delete writes,
// the timer — and every completion comes back to run as an event on its inbox, with the
// epoch, ticket or tag it was issued with (the core ignores stale ones).
type replicator struct {
	local, remote string
	topicName     string
	log           topic.Log
	rem           func(ctx context.Context) (Remote, error) // the remote cluster's client, asked at each connect
	// prepare runs before each connect (nil: nothing): the remote's partitioned metadata.
	prepare func(ctx context.Context) error
	logger  *slog.Logger
	cfg     replication.Config
	// subs is the topic's replicated subscriptions' controller (nil: off): it gets the
	// markers this replicator reads that came from its remote cluster, and its connection.
	subs *subsController

	ctx          context.Context // ends when the replicator stops: the helpers' calls give up
	cancel       context.CancelFunc
	in           *inbox.Queue[func()]
	stop         chan struct{} // closed by close: run closes the core and ends
	exited       chan struct{} // closed when run and its helpers have ended
	helpers      sync.WaitGroup
	deleteCursor atomic.Bool // on stop: delete the cursor (the cluster was removed)
	started      atomic.Bool // run was started (start succeeded)
	stopOnce     sync.Once

	// Owned by run.
	core      *replication.Core
	cur       topic.Cursor
	producers map[uint64]*pulsarclient.SessionProducer
	readStop  map[uint64]context.CancelFunc // the read in flight, by tag
	lastRead  replication.Position
	timer     *time.Timer
	timerAt   int64

	// Stats, written by run, read by Stats under mu.
	mu struct {
		sync.Mutex // guards the fields below
		st         Stats
		sample     rateSample
	}
}

// Stats are one replicator's statistics (the topic stats' replication section).
type Stats struct {
	Connected                  bool
	MsgsOut, BytesOut, Expired int64
	Backlog                    int64
	DelayMs                    int64
	ConnectedSince             time.Time
}

func newReplicator(local, remote, topicName string, log topic.Log, rem func(context.Context) (Remote, error), cfg replication.Config, logger *slog.Logger) *replicator {
	cfg.LocalCluster, cfg.RemoteCluster = local, remote
	ctx, cancel := context.WithCancel(context.Background())
	return &replicator{ctx: ctx, cancel: cancel, local: local, remote: remote, topicName: topicName, log: log, rem: rem, cfg: cfg,
		logger: logger.With("topic", topicName, "remote", remote), in: inbox.New[func()](),
		stop: make(chan struct{}), exited: make(chan struct{}),
		producers: map[uint64]*pulsarclient.SessionProducer{}, readStop: map[uint64]context.CancelFunc{}}
}

func nowMs() int64 { return time.Now().UnixMilli() }

// start opens the replication cursor (creating it at the earliest entry) and starts run.
func (r *replicator) start(ctx context.Context) error {
	cur, err := r.log.OpenCursor(ctx, replication.CursorName(r.remote), mledger.Earliest)
	if err != nil {
		return fmt.Errorf("open replication cursor %s: %w", replication.CursorName(r.remote), err)
	}
	md, err := cur.MarkDelete(ctx)
	if err != nil {
		_ = cur.Close(ctx)
		return err
	}
	r.cur = cur
	r.lastRead = replication.Position(md)
	r.core = replication.New(r.cfg, replication.Position(md))
	r.core.Start(nowMs())
	r.started.Store(true)
	go r.run()
	return nil
}

// close stops the replicator and waits for it; with deleteCursor the cursor is deleted.
func (r *replicator) close(deleteCursor bool) {
	if deleteCursor {
		r.deleteCursor.Store(true)
	}
	r.stopOnce.Do(func() { close(r.stop) })
	if r.started.Load() {
		<-r.exited
		return
	}
	r.cancel()
}

func (r *replicator) post(fn func()) bool { return r.in.Push(fn) }

// apply gives the replicator's core new settings (an event for run).
func (r *replicator) apply(set Settings) {
	r.post(func() {
		r.core.SetMessageTTL(set.MessageTTLMs)
		if set.RateMsgs != r.cfg.RateMsgs || set.RateBytes != r.cfg.RateBytes {
			r.cfg.RateMsgs, r.cfg.RateBytes = set.RateMsgs, set.RateBytes
			r.core.SetRate(set.RateMsgs, set.RateBytes)
		}
	})
}

func (r *replicator) spawn(fn func()) {
	r.helpers.Add(1)
	go func() {
		defer r.helpers.Done()
		fn()
	}()
}

func (r *replicator) run() {
	defer close(r.exited)
	r.perform()
	var batch []func()
	for {
		select {
		case <-r.in.Signal():
			batch = r.in.Drain(batch)
			for i, fn := range batch {
				r.core.SetTime(nowMs())
				fn()
				batch[i] = nil
				r.perform()
			}
		case <-r.stop:
			r.shutdown()
			return
		}
	}
}

// shutdown closes the core, performs its last Ready (the last mark-delete write is waited
// for), closes the producers and the cursor, and waits for the helpers.
func (r *replicator) shutdown() {
	r.core.Close()
	rd := r.core.Ready()
	for _, e := range rd.CloseProducer {
		r.closeProducer(e)
	}
	for _, cancel := range r.readStop {
		cancel()
	}
	if rd.MarkDelete != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.writeMarkDelete(ctx, rd.MarkDelete.Pos)
		cancel()
	}
	for e := range r.producers {
		r.closeProducer(e)
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	r.in.Close()
	r.cancel()
	r.helpers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.cur.Close(ctx)
	if r.deleteCursor.Load() {
		if err := r.log.DeleteCursor(ctx, replication.CursorName(r.remote)); err != nil {
			r.logger.Warn("delete the replication cursor", "err", err)
		}
	}
	r.setStats(func(s *Stats) { s.Connected = false })
}

func (r *replicator) closeProducer(epoch uint64) {
	if p := r.producers[epoch]; p != nil {
		delete(r.producers, epoch)
		p.Close()
	}
}

// perform does what the core asked for, in the order replication.Ready gives.
func (r *replicator) perform() {
	rd := r.core.Ready()
	for _, e := range rd.CloseProducer {
		r.closeProducer(e)
	}
	if c := rd.Connect; c != nil {
		r.connect(*c)
	}
	for i := range rd.Sends {
		r.send(&rd.Sends[i])
	}
	if rd.CancelRead != 0 {
		if cancel := r.readStop[rd.CancelRead]; cancel != nil {
			cancel()
			delete(r.readStop, rd.CancelRead)
		}
	}
	if md := rd.MarkDelete; md != nil {
		tag, pos := md.Tag, md.Pos
		r.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.writeMarkDelete(ctx, pos)
			cancel()
			r.post(func() { r.core.MarkDeleteDone(tag, err) })
		})
	}
	if rs := rd.Reset; rs != nil {
		tag, to := rs.Tag, rs.To
		r.spawn(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.cur.Reset(ctx, after(to))
			cancel()
			r.post(func() {
				r.lastRead = to
				r.core.ResetDone(tag, err)
			})
		})
	}
	if rd.Read != nil {
		r.read(*rd.Read)
	}
	r.armTimer(rd.TimerAt)
	st := r.core.Stats()
	r.setStats(func(s *Stats) {
		if c := r.core.Connected(); c != s.Connected {
			s.Connected = c
			if c {
				s.ConnectedSince = time.Now()
			}
			if r.subs != nil {
				r.subs.setConnected(r.remote, c)
			}
		}
		s.Expired = st.Filtered[replication.FilteredExpired]
		s.DelayMs = r.core.Delay(nowMs())
	})
}

func after(p replication.Position) mledger.Position {
	return mledger.Position{LedgerID: p.LedgerID, EntryID: p.EntryID + 1}
}

func (r *replicator) writeMarkDelete(ctx context.Context, pos replication.Position) error {
	done := make(chan error, 1)
	r.cur.AckCumulative(mledger.Position(pos), func(err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.cur.Flush(ctx)
}

func (r *replicator) armTimer(at int64) {
	if at == r.timerAt {
		return
	}
	r.timerAt = at
	if r.timer != nil {
		r.timer.Stop()
	}
	if at == 0 {
		return
	}
	r.timer = time.AfterFunc(time.Duration(max(at-nowMs(), 0))*time.Millisecond, func() {
		r.post(func() {
			if r.timerAt == at {
				r.timerAt = 0
			}
			r.core.Tick(nowMs())
		})
	})
}

func (r *replicator) connect(c replication.Connect) {
	epoch := c.Epoch
	r.spawn(func() {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		defer cancel()
		var p *pulsarclient.SessionProducer
		rem, err := r.rem(ctx)
		if err == nil && r.prepare != nil {
			err = r.prepare(ctx)
		}
		if err == nil {
			p, err = rem.CreateSessionProducer(ctx, pulsarclient.SessionProducerOptions{Topic: r.topicName, Name: c.ProducerName,
				OnEnd: func(err error) {
					r.post(func() {
						if r.producers[epoch] != nil {
							r.logger.Warn("replicator disconnected from the remote cluster (reconnecting; unacknowledged sends go again)", "err", err)
						}
						r.core.Disconnected(epoch, err)
					})
				}})
		}
		if !r.post(func() {
			if err != nil {
				r.logger.Warn("replicator not connected: the connect to the remote cluster failed (retried with backoff; the backlog grows)", "err", err)
				r.core.ConnectFailed(epoch, err)
				return
			}
			r.producers[epoch] = p
			r.core.ProducerConnected(epoch)
		}) && p != nil {
			p.Close()
		}
	})
}

// send publishes one entry with its original metadata, replicated_from set and the
// transaction ids cleared.
func (r *replicator) send(s *replication.Send) {
	p := r.producers[s.Ticket.Epoch]
	t := s.Ticket
	// A send that fails here fails as an event, like every other answer: called inside
	// perform, the core's next Ready (its reconnect timer among others) would wait for an
	// unrelated event to be performed, and with nothing else in flight it never comes.
	if p == nil {
		r.post(func() { r.core.SendFailed(t, errors.New("replhost: no producer for the epoch")) })
		return
	}
	data, _, _ := topic.ClientEntry(s.Entry.Data)
	meta, payload, err := pulsar.ParseHeadersAndPayload(data)
	if err != nil {
		r.post(func() { r.core.SendFailed(t, err) })
		return
	}
	meta.ReplicatedFrom = proto.String(r.local)
	meta.TxnidLeastBits, meta.TxnidMostBits = nil, nil
	n := int64(max(s.Entry.Meta.NumMessages, 1))
	size := int64(len(payload))
	p.Send(meta, payload, s.Marker, func(id pulsarclient.MessageID, err error) {
		r.post(func() {
			if err != nil {
				if r.producers[t.Epoch] != nil {
					r.logger.Warn("replicator send refused by the remote cluster (reconnecting; the window goes again)", "err", err)
				}
				r.core.SendFailed(t, err)
				return
			}
			r.setStats(func(st *Stats) {
				st.MsgsOut += n
				st.BytesOut += size
			})
			r.core.SendAcked(t, id.EntryID < 0)
		})
	})
}

func (r *replicator) read(rd replication.Read) {
	if rd.After != r.lastRead {
		// The cursor reads on from the last entry it returned; the core goes back only to
		// the position the cursor was opened at or reset to (replication doc.go, obligation 4).
		r.logger.Error("replication read does not follow the last one", "after", rd.After, "last", r.lastRead)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.readStop[rd.Tag] = cancel
	tag, n := rd.Tag, rd.N
	r.spawn(func() {
		es, err := r.cur.Read(ctx, n)
		out := make([]replication.Entry, 0, len(es))
		for _, e := range es {
			out = append(out, replication.Entry{Pos: replication.Position(e.Position), Meta: entryMeta(e.Data), Data: e.Data})
		}
		r.post(func() {
			if cancel := r.readStop[tag]; cancel != nil {
				cancel()
				delete(r.readStop, tag)
			}
			if len(out) > 0 {
				r.lastRead = out[len(out)-1].Pos
			}
			if ctx.Err() != nil && err != nil {
				return // cancelled: the core dropped the read
			}
			if r.subs != nil {
				r.subs.read(r.remote, out)
			}
			if err := r.core.ReadDone(tag, out, err); err != nil {
				r.logger.Error("replication read", "err", err)
			}
		})
	})
}

// entryMeta decodes what the core needs of a stored entry's metadata.
func entryMeta(data []byte) replication.Meta {
	data, _, _ = topic.ClientEntry(data)
	m, _, err := pulsar.ParseHeadersAndPayload(data)
	if err != nil {
		return replication.Meta{Corrupt: true}
	}
	seq := m.GetSequenceId()
	return replication.Meta{ProducerName: m.GetProducerName(), SequenceID: seq,
		HighestSequenceID: max(seq, m.GetHighestSequenceId()), PublishTime: int64(m.GetPublishTime()),
		NumMessages: int(max(m.GetNumMessagesInBatch(), 1)), ReplicatedFrom: m.GetReplicatedFrom(),
		ReplicateTo: m.GetReplicateTo(), Marker: m.MarkerType != nil, MarkerType: m.GetMarkerType()}
}

func (r *replicator) setStats(fn func(*Stats)) {
	r.mu.Lock()
	fn(&r.mu.st)
	r.mu.Unlock()
}

// stats returns the statistics, with the cursor's backlog.
func (r *replicator) stats(ctx context.Context) Stats {
	r.mu.Lock()
	st := r.mu.st
	r.mu.Unlock()
	if r.started.Load() { // cur is set before started
		if info, err := r.cur.Info(ctx); err == nil {
			st.Backlog = info.Backlog
		}
	}
	return st
}
