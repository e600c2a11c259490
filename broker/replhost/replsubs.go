package replhost

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic"
	"github.com/magnetar-io/magnetar/internal/inbox"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/replication"
	"github.com/magnetar-io/magnetar/replication/replsub"
)

// ReplSubs configures replicated subscriptions (Pulsar's broker.conf keys).
type ReplSubs struct {
	// Enabled is enableReplicatedSubscriptions: the replicators forward the request,
	// response and update markers and every replicated topic runs a snapshot controller.
	Enabled bool
	// FrequencyMs is replicatedSubscriptionsSnapshotFrequencyMillis (0: 1000).
	FrequencyMs int64
	// TimeoutMs is replicatedSubscriptionsSnapshotTimeoutSeconds × 1000 (0: 30 s).
	TimeoutMs int64
	// MaxCached is replicatedSubscriptionsSnapshotMaxCachedPerSubscription (0: 10).
	MaxCached int
}

// subsController runs the replicated subscriptions' controller (replsub.Controller) of one
// topic: one owner goroutine (run) performs its Ready — marker writes on the topic, in
// order, by one writer goroutine; subscription acknowledgements from other clusters'
// updates; its timer — and takes its inputs as events: the markers the topic's replicators
// read from their remote clusters, the data they read, their connection changes, and the
// snapshots the topic's replicated subscriptions passed.
type subsController struct {
	t      *topic.Topic
	logger *slog.Logger
	in     *inbox.Queue[func()]
	writes *inbox.Queue[replsub.MarkerWrite]
	stop   chan struct{}
	exited chan struct{}
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// pending is the controller's snapshots in progress, for the metrics (written by run).
	pending atomic.Int64

	// Owned by run.
	ctl     *replsub.Controller
	timer   *time.Timer
	timerAt int64
}

func newSubsController(t *topic.Topic, local string, cfg ReplSubs, logger *slog.Logger) *subsController {
	ctx, cancel := context.WithCancel(context.Background())
	c := &subsController{t: t, logger: logger.With("topic", t.Name().String(), "part", "replicated-subscriptions"),
		in: inbox.New[func()](), writes: inbox.New[replsub.MarkerWrite](), stop: make(chan struct{}),
		exited: make(chan struct{}), ctx: ctx, cancel: cancel}
	c.ctl = replsub.NewController(replsub.Config{LocalCluster: local, FrequencyMs: cfg.FrequencyMs,
		TimeoutMs: cfg.TimeoutMs, NewID: newSnapshotID})
	t.SetReplicatedSubscriptions(cfg.MaxCached, func(sub string, s replsub.Snapshot) {
		c.post(func() { c.ctl.SubscriptionAdvanced(sub, s) })
	})
	c.ctl.Start(nowMs())
	c.wg.Add(1)
	go c.writer()
	go c.run()
	return c
}

// newSnapshotID returns a random UUID (version 4), as Pulsar's snapshot ids.
func newSnapshotID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (c *subsController) post(fn func()) bool { return c.in.Push(fn) }

func (c *subsController) run() {
	defer close(c.exited)
	c.perform()
	var batch []func()
	for {
		select {
		case <-c.in.Signal():
			batch = c.in.Drain(batch)
			for i, fn := range batch {
				fn()
				batch[i] = nil
				c.perform()
			}
		case <-c.stop:
			if c.timer != nil {
				c.timer.Stop()
			}
			c.in.Close()
			return
		}
	}
}

// perform does what the controller asks for.
func (c *subsController) perform() {
	r := c.ctl.Ready()
	c.pending.Store(int64(c.ctl.Pending()))
	for _, w := range r.Writes {
		c.writes.Push(w)
	}
	for _, a := range r.Acks {
		sub, pos := a.Subscription, a.Pos
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
			defer cancel()
			if err := c.t.AckReplicated(ctx, sub, mledger.Position(pos)); err != nil {
				c.logger.Warn("apply a replicated subscription's update", "sub", sub, "pos", pos, "err", err)
			}
		}()
	}
	if r.TimerAt != c.timerAt {
		c.timerAt = r.TimerAt
		if c.timer != nil {
			c.timer.Stop()
		}
		if at := r.TimerAt; at != 0 {
			c.timer = time.AfterFunc(time.Duration(max(at-nowMs(), 0))*time.Millisecond, func() {
				c.post(func() {
					if c.timerAt == at {
						c.timerAt = 0
					}
					c.ctl.Tick(nowMs())
				})
			})
		}
	}
}

// writer publishes the controller's markers on the topic, one after the other, and hands
// each outcome back to run.
func (c *subsController) writer() {
	defer c.wg.Done()
	var batch []replsub.MarkerWrite
	for {
		select {
		case <-c.writes.Signal():
		case <-c.ctx.Done():
			return
		}
		batch = c.writes.Drain(batch)
		for _, w := range batch {
			done := make(chan struct{})
			tag := w.Tag
			c.t.PublishMarker(c.ctx, w.Type, w.Payload, w.ReplicateTo, func(pos topic.Position, err error) {
				c.post(func() { c.ctl.Written(tag, replication.Position(pos), err) })
				close(done)
			})
			select {
			case <-done:
			case <-c.ctx.Done():
				return
			}
		}
	}
}

func (c *subsController) setRemotes(remotes []string) {
	c.post(func() { c.ctl.SetRemotes(remotes) })
}

func (c *subsController) setConnected(remote string, ok bool) {
	c.post(func() { c.ctl.SetConnected(remote, ok) })
}

// read hands the controller what a replicator to remote read: the markers that remote
// published (replicated here), and the data's publish times.
func (c *subsController) read(remote string, es []replication.Entry) {
	if len(es) == 0 {
		return
	}
	last := es[len(es)-1].Pos
	type marker struct {
		pos     replication.Position
		typ     int32
		payload []byte
	}
	var ms []marker
	var dataMs int64
	for _, e := range es {
		switch {
		case e.Meta.Marker && e.Meta.ReplicatedFrom == remote && replsub.Travels(e.Meta.MarkerType):
			if payload, ok := markerPayload(e.Data); ok {
				ms = append(ms, marker{e.Pos, e.Meta.MarkerType, payload})
			}
		case !e.Meta.Marker && !e.Meta.Corrupt:
			// The broker's clock, not the client's publish time: data read now was
			// published before now.
			dataMs = nowMs()
		}
	}
	if len(ms) == 0 && dataMs == 0 {
		return
	}
	c.post(func() {
		if dataMs > 0 {
			c.ctl.DataPublished(dataMs)
		}
		for _, m := range ms {
			c.ctl.MarkerRead(remote, m.pos, m.typ, m.payload, last)
		}
	})
}

// markerPayload returns the payload of a stored marker entry.
func markerPayload(data []byte) ([]byte, bool) {
	data, _, _ = topic.ClientEntry(data)
	_, payload, err := pulsar.ParseHeadersAndPayload(data)
	return payload, err == nil
}

// close stops the controller and waits for its goroutines.
func (c *subsController) close() {
	c.once.Do(func() {
		c.t.SetReplicatedSubscriptions(0, nil)
		close(c.stop)
		<-c.exited
		c.cancel()
		c.writes.Close()
		c.wg.Wait()
	})
}
