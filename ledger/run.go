package ledger

import (
	"time"

	"github.com/magnetar-io/magnetar/internal/seqwin"
)

// runState is what a writer handle's owner keeps between runs of step. It is owned by the
// owner (Handle.step); inbox.Owner orders every run after the previous one.
type runState struct {
	// callbacks holds the callback of every pending append by entry id (ids are consecutive
	// and complete in order).
	callbacks    seqwin.Window[func(int64, error)]
	closeWaiters []chan CloseResult
	appends      []appendReq        // taken from h.appends, reused
	results      []event            // drained from t.in, reused
	evs          []event            // for the core, reused
	closes       []chan CloseResult // drained from h.closeq, reused
	lastExpire   time.Time          // when t.expire last ran
	tickArmed    bool               // h.tick is armed (or fired and not yet seen)
	stopCtx      func() bool        // stops the wake-up on the end of h.ctx
	ended        bool               // the owner has ended: later runs do nothing
}

// step is the writer's owner loop body, run by h.owner whenever appends, close requests,
// bookie or metadata results, a tick or the end of the client arrive (never twice at once:
// see inbox.Owner). It takes everything queued (results, then appends, then a close) and
// only then asks the core for a Ready, so a burst of appends goes out as one batch of
// requests per bookie; it performs each Ready, calls completion callbacks, hands the Ready
// back and publishes a snapshot under h.mu. It ends the owner once the close finished (or
// the client closed). Between runs the handle has no goroutine; the tick timer is armed
// only while the writer wants ticks (an explicit LAC to send) or a request may time out.
func (h *Handle) step() {
	r := &h.run
	if r.ended {
		return
	}
	w, t := h.w, h.t
	if h.ctx.Err() != nil { // the client closed
		for id, cb := range r.callbacks.All() {
			cb(int64(id), ErrStopped)
		}
		for _, rq := range h.appends.stop() {
			rq.cb(-1, h.stoppedErr())
		}
		for _, d := range r.closeWaiters {
			d <- CloseResult{Err: ErrStopped}
		}
		h.end()
		return
	}
	evs := r.evs[:0]
	closing := false
	r.closes = h.closeq.Drain(r.closes)
	for _, d := range r.closes {
		r.closeWaiters = append(r.closeWaiters, d)
		closing = closing || len(r.closeWaiters) == 1
	}
	if h.tickDue.Swap(false) {
		r.tickArmed = false
		now := time.Now()
		w.Tick()
		if now.Sub(r.lastExpire) >= min(h.c.opts.AddTimeout, h.c.opts.ReadTimeout)/4 {
			r.lastExpire = now
			evs = t.expire(now, evs)
		}
	}
	// Results first: the acks they carry may move the LAC the new entries piggyback.
	r.results = t.in.Drain(r.results)
	for _, ev := range r.results {
		evs = t.handle(ev, evs)
	}
	for _, ev := range evs {
		if ev.other != nil {
			w.Step(ev.other)
		} else {
			w.Step(ev.add) // no allocation: Step does not retain its message
		}
	}
	clear(evs)
	r.evs = evs[:0]
	// Then every append queued, including those queued before a Close taken in this run
	// (the caller's append happened before its Close).
	r.appends = h.appends.q.Drain(r.appends)
	released := 0
	for _, rq := range r.appends {
		id, err := w.Append(rq.payload)
		if err != nil {
			rq.cb(-1, err)
			released++
		} else {
			r.callbacks.Put(uint64(id), rq.cb)
		}
	}
	if closing {
		w.Close()
	}
	for w.HasReady() {
		rd := w.Ready()
		t.perform(&rd)
		// The LAC first: a caller whose add completes below must see it in LAC().
		h.mu.Lock()
		h.mu.lac = max(h.mu.lac, w.LAC())
		h.mu.Unlock()
		for _, c := range rd.Completions {
			if cb, ok := r.callbacks.Delete(uint64(c.EntryID)); ok {
				released++
				if c.Err != nil {
					cb(-1, c.Err)
				} else {
					cb(c.EntryID, nil)
				}
			}
		}
		closed := rd.Closed
		w.Advance(&rd)
		meta, v := w.Metadata()
		h.mu.Lock()
		h.mu.meta, h.mu.version, h.mu.lac = meta, v, max(h.mu.lac, w.LAC())
		if closed != nil {
			h.mu.closeRes = closed
		}
		h.mu.Unlock()
		if closed != nil {
			h.appends.release(released)
			for _, rq := range h.appends.stop() {
				rq.cb(-1, h.stoppedErr())
			}
			for _, d := range r.closeWaiters {
				d <- *closed
			}
			h.end()
			return
		}
	}
	h.appends.release(released)
	switch {
	case r.tickArmed:
	case w.WantsTick() || t.deadlines.Len() > 0:
		r.tickArmed = true
		h.tick.Reset(h.c.opts.LACFlushInterval)
	default:
		h.compact()
	}
}

// compact drops what an idle writer keeps for reuse between bursts: it runs once nothing
// is in flight and the LAC is published (the tick timer stops), so a burst of appends
// costs its buffers again only after such a pause.
func (h *Handle) compact() {
	r := &h.run
	r.callbacks.Release()
	h.t.deadlines.Release()
	h.w.Compact()
	r.appends, r.results, r.evs, r.closes = nil, nil, nil, nil
	if len(r.closeWaiters) == 0 {
		r.closeWaiters = nil
	}
	h.appends.q.Compact()
	h.t.in.Compact()
	h.closeq.Compact()
}

// end ends the owner: no timer or context wakes it any more, results still arriving are
// refused, close requests not taken are answered, and the transport's helper goroutines
// are waited for before stopped closes.
func (h *Handle) end() {
	h.run.ended = true
	h.owner.Stop()
	h.tick.Stop()
	h.run.stopCtx()
	h.t.in.Close()
	for _, d := range h.closeq.Close() {
		d <- CloseResult{Err: h.stoppedErr()}
	}
	h.cancel()
	h.t.wg.Wait()
	close(h.stopped)
}
