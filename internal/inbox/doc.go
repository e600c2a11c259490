// Package inbox is the event queue of an owner goroutine, and the helpers other goroutines
// use to call the owner and wait for its reply.
//
// An owner goroutine owns a component's state; every other goroutine talks to it through a
// Queue. Pushers never block (the queue is unbounded), so completions posted from other
// owners or from I/O callbacks cannot deadlock against the owner; the owner drains everything
// queued at once whenever Signal fires:
//
//	for range q.Signal() {
//		batch = q.Drain(batch)
//		for i, fn := range batch {
//			fn()
//			batch[i] = nil
//		}
//	}
//
// An Owner runs the owner loop on a goroutine that exists only while there is work, so an
// idle component costs no goroutine: the pushes of queues made with NewOwned (and direct
// Wake calls from timers) start it, it runs the component's step until a run found nothing
// new, waits for more for a linger period (a busy component keeps its goroutine, woken as a
// long-lived one would be), and ends; the next push starts another. Owner keeps "one owner
// at a time": it starts a goroutine only when none runs, and a goroutine gives up ownership
// under the lock that the next Wake takes, so each run of step happens after the previous
// one (the race detector sees the order) and sees everything pushed before the Wake that
// asked for it:
//
//	o := inbox.NewOwner(c.step, time.Second) // held: the creator sets c up
//	c.in = inbox.NewOwned[func()](o)
//	o.Release()                              // from now on, pushes run step
//
//	func (c *comp) step() {
//		c.batch = c.in.Drain(c.batch)
//		for i, fn := range c.batch { fn(); c.batch[i] = nil }
//	}
//
// The price is a goroutine start per burst of work that comes after a linger period, and a
// timer per linger; in exchange an idle component keeps no goroutine and no stack.
//
// Call and Call0 are the blocking side of a Queue of closures: they push a closure that
// receives a reply function, and wait for the reply, for the caller's ctx, or for the owner
// to stop.
//
// Goroutines: an Owner's, one at a time, while its component has work; Queue has none of
// its own. Queue is safe for concurrent use by any number of pushers and
// one owner (the only goroutine that calls Drain); its mutex is a leaf lock, never held while
// running anything. Call and Call0 run on the caller's goroutine and must not be called by
// the owner itself (it would wait for itself).
//
// Caller obligations:
//  1. Only the owner goroutine drains a queue.
//  2. The owner closes the stopped channel given to Call when it stops taking events, and
//     closes the queue (so that later pushes fail at once instead of waiting for stopped).
//  3. A reply function passed to a Call closure is called at most once that counts; further
//     calls are dropped, so the owner may reply from any path without tracking that.
package inbox
