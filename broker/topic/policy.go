package topic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/mledger"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// Policies are the policies in force on a topic, resolved by the broker (topic level, else
// namespace, else the broker's configuration). Zero values mean unlimited or off.
type Policies struct {
	MaxProducers                int
	MaxConsumers                int
	MaxConsumersPerSubscription int
	MaxSubscriptions            int
	// MaxUnackedPerConsumer and MaxUnackedPerSubscription stop dispatch at that many
	// unacknowledged messages until acknowledgements come.
	MaxUnackedPerConsumer     int
	MaxUnackedPerSubscription int
	// MaxMessageSize refuses larger SENDs with NotAllowedError.
	MaxMessageSize int
	// PublishRateMsgs and PublishRateBytes bound what the topic takes per second: beyond
	// them SENDs wait (their connections' pending budgets fill and reading stops).
	PublishRateMsgs, PublishRateBytes int64
	// DispatchRateMsgs and DispatchRateBytes bound what the topic's subscriptions together
	// dispatch per second, SubDispatchRateMsgs and SubDispatchRateBytes what each one does:
	// beyond them cursor reads wait (nothing is dropped).
	DispatchRateMsgs, DispatchRateBytes       int64
	SubDispatchRateMsgs, SubDispatchRateBytes int64
	// DispatchRelative and SubDispatchRelative (Pulsar's relativeToPublishRate): a set rate
	// (> 0) is the configured one plus the topic's publish rate, measured every second.
	DispatchRelative, SubDispatchRelative bool
	// NoAutoSubscriptionCreation refuses consumers of durable subscriptions that do not
	// exist (SubscriptionNotFound); NoDelayedDelivery delivers delayed messages at once.
	NoAutoSubscriptionCreation, NoDelayedDelivery bool
	// DelayedTickMs is the delayed-delivery tick time (tickTime): a delayed message due
	// within it is delivered now (0: exact). MaxDeliveryDelayMs refuses SENDs delayed by
	// more (maxDeliveryDelayInMillis, NotAllowedError; 0: any delay).
	DelayedTickMs, MaxDeliveryDelayMs int64
	// SubscribeRate subscribes per SubscribeRatePeriod are allowed per consumer (its
	// client host, name and id, as Pulsar's SubscribeRateLimiter keys them); beyond, a
	// subscribe is refused with NotAllowed (0: unlimited).
	SubscribeRate       int
	SubscribeRatePeriod time.Duration
	// Dedup, if set, turns message deduplication on or off on the live topic: enabling
	// starts from an empty state (as Pulsar's new deduplication cursor does), disabling
	// forgets it. DedupSnapshotInterval records a deduplication snapshot that often when
	// entries were stored since the last one (0: by entry count only).
	Dedup                 *bool
	DedupSnapshotInterval time.Duration
	// BacklogQuotaLimitSize (bytes) and BacklogQuotaLimitTime (seconds) are shown in the
	// statistics (-1: none); the broker's backlog-quota checker enforces them.
	BacklogQuotaLimitSize, BacklogQuotaLimitTime int64
}

// QuotaBlock is what an exceeded backlog quota does to the topic's producers.
type QuotaBlock uint8

// Backlog-quota blocks.
const (
	QuotaOK        QuotaBlock = iota // producers are admitted
	QuotaHold                        // producer_request_hold: producers are refused with ErrQuotaHold
	QuotaException                   // producer_exception: producers are refused with ErrQuotaException
)

// Backlog-quota errors (ProducerBlockedQuotaExceededError and
// ProducerBlockedQuotaExceededException: the Go and Java clients retry the first, holding
// their messages, and fail their pending messages on the second).
var (
	//lint:ignore ST1005 Pulsar's message
	ErrQuotaHold = errors.New("Cannot create producer on topic with backlog quota exceeded (producer_request_hold)")
	//lint:ignore ST1005 Pulsar's message
	ErrQuotaException = errors.New("Cannot create producer on topic with backlog quota exceeded (producer_exception)")
)

// SetPolicies applies p to the topic and its subscriptions (an event: it takes effect on the
// topic goroutine).
func (t *Topic) SetPolicies(p Policies) {
	t.post(func() {
		now := time.Now().UnixNano()
		t.core.setPolicies(p, now)
		t.dispatch.Lock()
		t.dispatch.rate.Set(p.DispatchRateMsgs, p.DispatchRateBytes, now)
		t.dispatch.on.Store(p.DispatchRateMsgs > 0 || p.DispatchRateBytes > 0)
		t.dispatch.Unlock()
		for _, s := range t.subs {
			s.setPolicies(p)
		}
		t.publishReleased() // before a deduplication change
		t.core.setDedupPolicy(p, now)
	})
}

// setPolicies puts p in force at now (Unix ns), but for deduplication (setDedupPolicy): the
// publish rate starts again from a full bucket and releases the held SENDs it allows, and a
// dispatch rate relative to the publish rate starts measuring it.
func (c *topicCore) setPolicies(p Policies, now int64) {
	c.pol = p
	c.msgLimit.Span, c.byteLimit.Span = publishSpan, publishSpan
	c.msgLimit.Set(p.PublishRateMsgs, now)
	c.byteLimit.Set(p.PublishRateBytes, now)
	c.releaseThrottled(now)
	c.armRelative(now)
}

// Dispatch rates relative to the publish rate.

// relativeEvery is how often a relative dispatch rate follows the publish rate.
const relativeEvery = time.Second

// relativeRate is a relative dispatch rate: the configured one plus the measured publish
// rate, or 0 (unlimited) when none is configured.
func relativeRate(configured int64, measured float64) float64 {
	if configured <= 0 {
		return 0
	}
	return float64(configured) + max(measured, 0)
}

// relativeOn reports whether p has a rate relative to the publish rate.
func relativeOn(p Policies) bool {
	return p.DispatchRelative && (p.DispatchRateMsgs > 0 || p.DispatchRateBytes > 0) ||
		p.SubDispatchRelative && (p.SubDispatchRateMsgs > 0 || p.SubDispatchRateBytes > 0)
}

// relativeRates is the publish rate a relative tick measured, at (Unix ns).
type relativeRates struct {
	msgs, bytes float64
	at          int64
}

// armRelative starts measuring the publish rate at now when a relative dispatch rate is
// set and no measurement runs (a tick stops it once none is set).
func (c *topicCore) armRelative(now int64) {
	if !relativeOn(c.pol) || c.timerAt[timerRelative] != 0 {
		return
	}
	c.relative.msgs, c.relative.bytes, c.relative.at = c.rateIn.msgs, c.rateIn.bytes, now
	c.askTimer(timerRelative, now+int64(relativeEvery))
}

// relativeTick measures the publish rate at now for the relative dispatch rates, which the
// owner sets (Ready.retune), and asks for the next tick.
func (c *topicCore) relativeTick(now int64) {
	if c.state == StateClosed || !relativeOn(c.pol) {
		return
	}
	if r, ok := c.measureRelative(now); ok {
		c.ready.retune = &r
	}
	c.askTimer(timerRelative, now+int64(relativeEvery))
}

// measureRelative returns the publish rate since the last measurement (false if no time
// passed) and starts the next one at now.
func (c *topicCore) measureRelative(now int64) (relativeRates, bool) {
	r := &c.relative
	el := float64(now-r.at) / 1e9
	if el <= 0 {
		return relativeRates{}, false
	}
	m := relativeRates{msgs: float64(c.rateIn.msgs-r.msgs) / el, bytes: float64(c.rateIn.bytes-r.bytes) / el, at: now}
	r.msgs, r.bytes, r.at = c.rateIn.msgs, c.rateIn.bytes, now
	return m, true
}

// relativeTick measures the publish rate since the last tick and sets the relative
// dispatch rates to the configured ones plus it.
func (t *Topic) relativeTick(now int64) {
	if r, ok := t.core.measureRelative(now); ok {
		t.retune(r)
	}
}

// retune sets the dispatch rates relative to the publish rate to the configured ones plus
// the measured r: the topic's here, the subscriptions' on their goroutines.
func (t *Topic) retune(r relativeRates) {
	p := t.core.pol
	if p.DispatchRelative {
		t.dispatch.Lock()
		t.dispatch.rate.Msgs.Retune(relativeRate(p.DispatchRateMsgs, r.msgs), r.at)
		t.dispatch.rate.Bytes.Retune(relativeRate(p.DispatchRateBytes, r.bytes), r.at)
		t.dispatch.Unlock()
	}
	if p.SubDispatchRelative {
		for _, s := range t.subs {
			s.post(func() {
				s.d.RetuneRate(relativeRate(p.SubDispatchRateMsgs, r.msgs), relativeRate(p.SubDispatchRateBytes, r.bytes))
				s.flush()
			})
		}
	}
}

// setDedupPolicy applies p's deduplication switch and snapshot interval at now.
func (c *topicCore) setDedupPolicy(p Policies, now int64) {
	if p.Dedup != nil {
		c.setDedup(*p.Dedup)
	}
	d := p.DedupSnapshotInterval
	if d == c.dedupInterval {
		return
	}
	c.dedupInterval = d
	c.timerAt[timerDedup] = 0 // the timer of the old interval is stale
	if d > 0 {
		c.askTimer(timerDedup, now+int64(d))
	}
}

// dedupTick takes a timed deduplication snapshot if entries were stored since the last
// one, and asks for the next tick.
func (c *topicCore) dedupTick(now int64) {
	if c.state == StateClosed || c.dedupInterval <= 0 {
		return
	}
	c.snapshotDedupNow()
	c.askTimer(timerDedup, now+int64(c.dedupInterval))
}

// armTimer performs the core's timer request: at its time it feeds timerFired.
func (t *Topic) armTimer(ct coreTimer) {
	if old := t.timers[ct.kind]; old != nil {
		old.Stop()
	}
	t.timers[ct.kind] = time.AfterFunc(time.Until(time.Unix(0, ct.at)), func() {
		t.post(func() { t.core.timerFired(ct.kind, ct.at, time.Now().UnixNano()) })
	})
}

// SetQuotaBlock sets what the backlog quota does to producers. Entering a block closes the
// producers connected (CLOSE_PRODUCER: they reconnect and are refused until it lifts).
func (t *Topic) SetQuotaBlock(b QuotaBlock) {
	t.post(func() { t.core.setQuota(b) })
}

// setQuota sets what the backlog quota does to producers; entering a block closes them.
func (c *topicCore) setQuota(b QuotaBlock) {
	if b != QuotaOK && c.quota != b {
		c.m.quotaBlocks.Inc()
		for _, p := range sortedProducers(c.producers) {
			c.removeProducer(p, true)
		}
	}
	c.quota = b
}

// Log returns the topic's log (the broker applies log-level policies such as retention).
func (t *Topic) Log() Log { return t.log }

// admitProducer refuses a producer p a policy does not allow (nil: admitted). A replicator
// producer is not held to max producers (as Pulsar exempts remote producers).
func (c *topicCore) admitProducer(p *Producer) error {
	switch c.quota {
	case QuotaHold:
		return fmt.Errorf("%w: topic %s", ErrQuotaHold, c.name)
	case QuotaException:
		return fmt.Errorf("%w: topic %s", ErrQuotaException, c.name)
	}
	if c.pol.MaxProducers > 0 && len(c.producers)+len(c.waiting) >= c.pol.MaxProducers && !isReplicator(p.Name) {
		return fmt.Errorf("%w: Topic '%s' reached max producers limit", ErrProducerBusy, c.name)
	}
	return nil
}

// admitSubscribe refuses a consumer the topic's limits do not allow (nil: admitted); it
// runs on the topic goroutine.
func (t *Topic) admitSubscribe(sub string, c *Consumer) error {
	if err := t.core.subscribeRateAdmits(keyOf(c), time.Now().UnixNano()); err != nil {
		return err
	}
	if t.core.pol.MaxConsumers > 0 {
		n := 0
		for _, s := range t.subs {
			n += s.consumerCount()
		}
		if n >= t.core.pol.MaxConsumers {
			return fmt.Errorf("%w: Topic reached max consumers limit", ErrConsumerBusy)
		}
	}
	if _, open := t.subs[sub]; !open && t.core.pol.MaxSubscriptions > 0 {
		if _, opening := t.opening[sub]; !opening && len(t.subs)+len(t.opening) >= t.core.pol.MaxSubscriptions {
			return fmt.Errorf("%w: Exceed the maximum number of subscriptions of the topic: %s", ErrNotAllowed, t.name)
		}
	}
	return nil
}

// subscribeRateAdmits counts a subscribe of consumer k at now (Unix ns) in its rate window;
// an error if the window is full.
func (c *topicCore) subscribeRateAdmits(k consumerKey, now int64) error {
	if c.pol.SubscribeRate <= 0 {
		return nil
	}
	if !c.subscribeRate.takeWith(k, c.pol.SubscribeRate, c.pol.SubscribeRatePeriod, time.Unix(0, now), c.mut) {
		c.m.subscribeRateLimited.Inc()
		return fmt.Errorf("%w: %w", ErrNotAllowed, errSubscribeRate)
	}
	return nil
}

//lint:ignore ST1005 Pulsar's message
var errSubscribeRate = errors.New("Subscribe limited by subscribe rate limit per consumer.")

// subscribeWindows counts each consumer's subscribes in its current rate period (owned by
// the topic goroutine).
type subscribeWindows map[consumerKey]*subscribeWindow

// consumerKey identifies a consumer across reconnections as Pulsar's ConsumerIdentifier
// does: client host, consumer name and id.
type consumerKey struct {
	host, name string
	id         uint64
}

type subscribeWindow struct {
	start time.Time
	n     int
}

func keyOf(c *Consumer) consumerKey {
	host := c.Conn.RemoteAddr()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return consumerKey{host: host, name: c.Name, id: c.ID}
}

// take counts a subscribe of consumer k; false if it already made rate subscribes in its
// current period (at least a second).
func (w *subscribeWindows) take(k consumerKey, rate int, period time.Duration, now time.Time) bool {
	return w.takeWith(k, rate, period, now, coreMutation{})
}

// takeWith is take, broken as mut says (tests only).
func (w *subscribeWindows) takeWith(k consumerKey, rate int, period time.Duration, now time.Time, mut coreMutation) bool {
	if *w == nil {
		*w = subscribeWindows{}
	}
	period = max(period, time.Second)
	if len(*w) > 256 { // forget the consumers whose period ended
		for k, win := range *w {
			if now.Sub(win.start) >= period {
				delete(*w, k)
			}
		}
	}
	win := (*w)[k]
	if win == nil || now.Sub(win.start) >= period {
		win = &subscribeWindow{start: now}
		(*w)[k] = win
	}
	if mut.subscribeWindowSlides {
		win.start = now
	}
	if win.n >= rate {
		return false
	}
	if !mut.subscribeUncounted {
		win.n++
	}
	return true
}

// setPolicies applies the subscription's part of p (an event for its goroutine).
func (s *Subscription) setPolicies(p Policies) {
	s.post(func() {
		s.d.SetRate(p.SubDispatchRateMsgs, p.SubDispatchRateBytes)
		s.maxConsumers, s.noDelay = p.MaxConsumersPerSubscription, p.NoDelayedDelivery
		s.d.SetUnackedLimits(p.MaxUnackedPerConsumer, p.MaxUnackedPerSubscription)
		s.d.SetDelayedTick(p.DelayedTickMs)
		s.flush()
	})
}

// Publish throttling.

// heldSend is a SEND waiting for the publish rate to allow it.
type heldSend struct {
	p *Producer
	m Message
}

// publishSpan is the publish rate's bucket: a second's worth, one rate period, as Pulsar's
// publish rate limiter keeps. With a tenth of a second, a release of the held SENDs that
// the scheduler delays by more than 100 ms (a loaded machine) loses the tokens of the delay
// beyond it, and the topic falls short of its rate; with a second it catches up. (The
// dispatch rates keep a tenth: a held read is released by its own timer, and a second's
// burst would let a consumer far past the rate at once.)
const publishSpan = 1.0

// onSend takes a SEND: the core refuses it, holds it for the publish rate, or admits it.
func (t *Topic) onSend(p *Producer, m Message) {
	if t.core.send(p, m, time.Now().UnixNano()) {
		t.onPublish(p, m)
	}
}

// send takes a SEND at now (Unix ns): refused if it is too large or delayed too long
// (outRefused), held while the publish rate is exceeded (behind the SENDs already held, in
// order), else admitted: true tells the owner to publish it now. Without policies it is a
// few comparisons.
func (c *topicCore) send(p *Producer, m Message, now int64) bool {
	if c.pol.MaxMessageSize > 0 && len(m.Data) > c.pol.MaxMessageSize {
		c.refuse(p, m, pb.ServerError_NotAllowedError, "Exceed maximum message size")
		return false
	}
	if c.pol.MaxDeliveryDelayMs > 0 && !c.pol.NoDelayedDelivery && c.tooDelayed(m) {
		c.refuse(p, m, pb.ServerError_NotAllowedError,
			fmt.Sprintf("Exceeds max allowed delivery delay of %d milliseconds", c.pol.MaxDeliveryDelayMs))
		return false
	}
	if c.msgLimit.Rate == 0 && c.byteLimit.Rate == 0 && len(c.throttled) == 0 {
		return true
	}
	if (len(c.throttled) == 0 || c.mut.overtakeHeld) && c.admitRate(m, now) {
		return true
	}
	if len(c.throttled) == 0 {
		c.rateLimited++
		c.m.publishRateLimited.Inc()
	}
	c.throttled = append(c.throttled, heldSend{p, m})
	c.armThrottle(now)
	return false
}

// refuse answers a SEND the policies refuse.
func (c *topicCore) refuse(p *Producer, m Message, code pb.ServerError, msg string) {
	c.emit(output{kind: outRefused, p: p, seq: m.SequenceID, code: code, msg: msg, size: len(m.Data)})
	c.refused(p)
}

// tooDelayed reports whether m is to be delivered later after its publish time than the
// max delivery delay allows (as Pulsar's isExceedMaximumDeliveryDelay).
func (c *topicCore) tooDelayed(m Message) bool {
	publish, deliverAt := metaTimes(m.Data)
	return deliverAt > 0 && deliverAt-publish > c.pol.MaxDeliveryDelayMs
}

// admitRate takes m's messages and bytes from the buckets if both have tokens at now.
func (c *topicCore) admitRate(m Message, now int64) bool {
	if c.msgLimit.Rate > 0 {
		c.msgLimit.Refill(now)
		if c.msgLimit.Tokens <= 0 {
			return false
		}
	}
	if c.byteLimit.Rate > 0 {
		c.byteLimit.Refill(now)
		if c.byteLimit.Tokens <= 0 {
			return false
		}
	}
	c.msgLimit.Spend(float64(max(m.NumMessages, 1)))
	c.byteLimit.Spend(float64(len(m.Data)))
	return true
}

// armThrottle asks for a timer at the time the buckets have tokens again (at least a
// millisecond from now), if SENDs are held and none is asked for yet.
func (c *topicCore) armThrottle(now int64) {
	if c.timerAt[timerPublish] != 0 || len(c.throttled) == 0 || c.mut.publishNoWake {
		return
	}
	d := max(time.Duration(c.msgLimit.Wait()), time.Duration(c.byteLimit.Wait()), time.Millisecond)
	c.askTimer(timerPublish, now+int64(d))
}

// releaseThrottled releases the held SENDs the rate allows at now (all of them if the limits are
// off or the topic is no longer active), in order, and waits for the rest.
func (c *topicCore) releaseThrottled(now int64) {
	i := 0
	for ; i < len(c.throttled); i++ {
		h := c.throttled[i]
		free := c.state != StateActive || (c.msgLimit.Rate == 0 && c.byteLimit.Rate == 0) || c.mut.releaseEarly
		if !free && !c.admitRate(h.m, now) {
			break
		}
		c.throttled[i] = heldSend{}
		c.ready.released = append(c.ready.released, h)
	}
	c.throttled = c.throttled[i:]
	if len(c.throttled) == 0 {
		c.throttled = nil
	}
	c.armThrottle(now)
}

// The topic dispatch rate.

// topicDispatch is the topic's dispatch rate, which its subscriptions' dispatcher cores
// draw on together (dispatch.Limiter): a leaf structure shared by their goroutines, set and
// retuned by the topic goroutine.
type topicDispatch struct {
	sync.Mutex               // guards rate
	rate       dispatch.Rate // the topic's dispatch rate, in messages and bytes
	on         atomic.Bool   // a rate is set (read without the mutex)
}

var _ dispatch.Limiter = (*topicDispatch)(nil)

// Allow is how many entries the rate allows at now (Unix ns) and, if none, how long until
// it does.
func (r *topicDispatch) Allow(now int64) (int, int64) {
	if !r.on.Load() {
		return dispatch.Unlimited, 0
	}
	r.Lock()
	defer r.Unlock()
	return r.rate.Allow(now)
}

// Spend charges what a read brought.
func (r *topicDispatch) Spend(msgs, bytes float64) {
	if !r.on.Load() {
		return
	}
	r.Lock()
	r.rate.Spend(msgs, bytes)
	r.Unlock()
}

// Message expiry.

// ExpireMessages acknowledges, on subscription name, every entry published before ms
// (Unix ms); the cursor never moves back. It returns whether anything was expired.
func (t *Topic) ExpireMessages(ctx context.Context, name string, ms int64) (bool, error) {
	s, err := t.sub(ctx, name)
	if err != nil {
		return false, err
	}
	i, x, err := searchPublishTime(ctx, t.log, ms)
	if err != nil || i == 0 {
		return false, err
	}
	last := x.at(i - 1)
	md, err := s.cur.MarkDelete(ctx)
	if err != nil {
		return false, err
	}
	if md != mledger.Earliest && !md.Less(last) {
		return false, nil
	}
	if err := ackWait(func(done func(error)) { s.cur.AckCumulative(last, done) }); err != nil {
		return false, err
	}
	t.m.expired.Inc()
	return true, nil
}

// OldestBacklogPublishTime returns the publish time (Unix ms) of subscription name's oldest
// unacknowledged entry (0: no backlog).
func (t *Topic) OldestBacklogPublishTime(ctx context.Context, name string) (int64, error) {
	e, err := t.PeekBacklog(ctx, name, 1)
	if errors.Is(err, ErrMessageNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	m, err := parseMeta(e.Data)
	if err != nil {
		return 0, err
	}
	return int64(m.GetPublishTime()), nil
}

// backlogBytes estimates the bytes stored after mark-delete position md.
func backlogBytes(st mledger.Stats, md Position) int64 {
	var n int64
	for _, l := range st.Ledgers {
		switch {
		case l.ID > md.LedgerID:
			n += l.Size
		case l.ID == md.LedgerID && l.Entries > 0 && md.EntryID+1 < l.Entries:
			n += l.Size * (l.Entries - 1 - md.EntryID) / l.Entries
		}
	}
	return n
}

// policyStats fills the topic statistics' policy fields.
func (t *Topic) policyStats(st *Stats) {
	st.BacklogQuotaLimitSize, st.BacklogQuotaLimitTime = t.core.pol.BacklogQuotaLimitSize, t.core.pol.BacklogQuotaLimitTime
	st.PublishRateLimitedTimes = t.core.rateLimited
	st.ThrottledPublishes = len(t.core.throttled)
	switch t.core.quota {
	case QuotaHold:
		st.BacklogQuotaBlock = "producer_request_hold"
	case QuotaException:
		st.BacklogQuotaBlock = "producer_exception"
	}
}

// flushThrottled publishes every held SEND (the topic is closing: they are answered).
func (t *Topic) flushThrottled() {
	t.core.releaseThrottled(time.Now().UnixNano())
	t.publishReleased()
}

// publishReleased publishes the SENDs the core's publish rate released, in order.
func (t *Topic) publishReleased() {
	for _, h := range t.core.takeReleased() {
		t.onPublish(h.p, h.m)
	}
}
