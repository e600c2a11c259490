package mledger

import (
	"fmt"
	"time"
)

// The mark-delete rate (Pulsar's managedLedgerMaxMarkDeleteRate, throttleMarkDelete).
//
// A durable cursor's acknowledgements take effect in memory at once (reads, backlog,
// statistics); persisting its state (a cursor-ledger entry) is limited to Config.
// MaxMarkDeleteRate a second by a token bucket per cursor. A change that finds no token left
// is held: the newest state is persisted by the next change that gets a token, by the flush
// timer (every Config.CursorFlushInterval), by Flush, or when the cursor or the managed ledger
// closes. A crash may lose the acknowledgements of the last held window: they are delivered
// again (at-least-once, as in Pulsar); a graceful close loses none. Callers that need an ack
// durable (a transaction's commit) call Flush, which persists at once whatever the rate.

// persistHold is where a durable cursor's state is with respect to the mark-delete rate.
type persistHold uint8

const (
	// persistFree: every change is persisted as it comes (one write in flight, the changes
	// meanwhile coalesce into the next one, which takes a token).
	persistFree persistHold = iota
	// persistHeld: the state changed when no token was left; it waits for the next change
	// that gets one, the flush timer, Flush or close. heldSince is when it started waiting.
	persistHeld
	// persistForced: the flush timer wants the current state persisted at the next
	// opportunity (after the write in flight, if any), whatever the tokens.
	persistForced
)

var persistHoldNames = [...]string{"Free", "Held", "Forced"}

func (h persistHold) String() string {
	if int(h) < len(persistHoldNames) {
		return persistHoldNames[h]
	}
	return fmt.Sprintf("persistHold(%d)", uint8(h))
}

// becomeHeld: Free → Held (a held cursor stays held since its first held change).
func (c *core) cursorBecomeHeld(cur *cursor) {
	if cur.hold == persistFree {
		cur.hold, cur.heldSince = persistHeld, c.env.now()
	}
}

// becomeForced: Held → Forced.
func (c *core) cursorBecomeForced(cur *cursor) {
	if cur.hold == persistHeld {
		cur.hold = persistForced
	}
}

// becomeFree: any → Free, when a write of the newest state is issued.
func (cur *cursor) becomeFree() { cur.hold, cur.heldSince = persistFree, time.Time{} }

// mdTake takes a persist token from cur's bucket: rate tokens a second, at most max(1, rate)
// stored (a second's worth after an idle time), and a new bucket holds one token (Guava's
// SmoothBursty RateLimiter, which Pulsar uses, starts with no stored permits and lets the
// first acquire through). Rate <= 0 is unlimited.
func (c *core) mdTake(cur *cursor) bool {
	r := c.cfg.MaxMarkDeleteRate
	if r <= 0 || c.mut.ignoreMarkDeleteRate {
		return true
	}
	now, burst := c.env.now(), max(1, r)
	switch el := now.Sub(cur.tokensAt); {
	case cur.tokensAt.IsZero():
		cur.tokens = 1
	case el > 0:
		cur.tokens += r * el.Seconds()
	}
	cur.tokens, cur.tokensAt = min(cur.tokens, burst), now
	if cur.tokens < 1 {
		return false
	}
	cur.tokens--
	return true
}

// cursorPersist persists cur's changed state if the mark-delete rate allows it, and holds it
// otherwise. A write in flight (or a ledger being created) comes back here when it completes.
func (c *core) cursorPersist(cur *cursor) {
	if !cur.durable || cur.closed || !cur.dirty || c.state == StateFenced {
		return
	}
	if cur.appending || cur.lstate == cursorCreatingLedger {
		return
	}
	if cur.hold != persistForced && len(cur.flushWaiters) == 0 && !c.mdTake(cur) {
		c.cursorBecomeHeld(cur)
		return
	}
	cur.becomeFree()
	c.cursorFlush(cur)
}

// flushHeld persists every held cursor (the flush timer; a rate change to unlimited).
func (c *core) flushHeld() {
	if c.mut.flushTimerIdle {
		return
	}
	for _, cur := range c.sortedCursors() {
		if cur.hold == persistHeld && !cur.closed {
			c.cursorBecomeForced(cur)
			c.cursorPersist(cur)
		}
	}
}

// setMarkDeleteRate changes the rate of every cursor (r <= 0: unlimited, which persists the
// held states at once).
func (c *core) setMarkDeleteRate(r float64) {
	c.cfg.MaxMarkDeleteRate = max(r, 0)
	if r <= 0 {
		c.flushHeld()
	}
}
