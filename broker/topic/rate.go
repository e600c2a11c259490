package topic

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsar"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

func wrap(body proto.Message) *pb.BaseCommand { return pulsar.Wrap(body) }

// rate estimates events and bytes per second over the last sampling window (at least
// rateWindow). Owned by one goroutine.
type rate struct {
	msgs, bytes         int64 // totals
	lastMsgs, lastBytes int64
	lastAt              time.Time
	msgRate, byteRate   float64
}

const rateWindow = 5 * time.Second

func (r *rate) add(msgs, bytes int64) {
	r.msgs += msgs
	r.bytes += bytes
}

// rates returns the current estimates, starting a new window when the last one is over.
func (r *rate) rates(now time.Time) (msgRate, byteRate float64) {
	if r.lastAt.IsZero() { // the first window starts now: what came before is not in it
		r.lastAt, r.lastMsgs, r.lastBytes = now, r.msgs, r.bytes
		return 0, 0
	}
	if d := now.Sub(r.lastAt); d >= rateWindow || (r.msgRate == 0 && d >= time.Second) {
		s := d.Seconds()
		r.msgRate = float64(r.msgs-r.lastMsgs) / s
		r.byteRate = float64(r.bytes-r.lastBytes) / s
		r.lastMsgs, r.lastBytes, r.lastAt = r.msgs, r.bytes, now
	}
	return r.msgRate, r.byteRate
}
