package topic

import (
	"context"
	"time"

	"github.com/magnetar-io/magnetar/internal/inbox"
)

// Load is a topic's traffic, the part of its statistics the load manager reports (Pulsar's
// NamespaceBundleStats per topic). Rates are per second over the last rate window.
type Load struct {
	MsgRateIn, MsgThroughputIn   float64
	MsgRateOut, MsgThroughputOut float64
	Producers, Consumers         int
}

// Load returns the topic's traffic. It is cheaper than Stats: it reads no managed-ledger or
// cursor state and opens no subscription.
func (t *Topic) Load(ctx context.Context) (Load, error) {
	type snap struct {
		l    Load
		subs []*Subscription
	}
	sn, err := inbox.Call(ctx, t.in, t.stopped, ErrClosed, func(reply func(snap, error)) {
		var l Load
		l.MsgRateIn, l.MsgThroughputIn = t.core.rateIn.rates(time.Now())
		l.Producers = len(t.core.producers)
		subs := make([]*Subscription, 0, len(t.subs))
		for _, s := range t.subs {
			subs = append(subs, s)
			l.Consumers += s.consumerCount()
		}
		reply(snap{l, subs}, nil)
	})
	if err != nil {
		return Load{}, err
	}
	l := sn.l
	for _, s := range sn.subs {
		type out struct{ msgs, bytes float64 }
		o, err := inbox.Call(ctx, s.in, s.stopped, ErrClosed, func(reply func(out, error)) {
			m, b := s.rateOut.rates(time.Now())
			reply(out{m, b}, nil)
		})
		if err == nil {
			l.MsgRateOut += o.msgs
			l.MsgThroughputOut += o.bytes
		}
	}
	return l, nil
}
