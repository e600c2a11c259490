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
// Call and Call0 are the blocking side of a Queue of closures: they push a closure that
// receives a reply function, and wait for the reply, for the caller's ctx, or for the owner
// to stop.
//
// Goroutines: none of its own. Queue is safe for concurrent use by any number of pushers and
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
