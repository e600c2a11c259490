// Package backoff is the retry delay schedule of the owner loops and clients: exponential
// from a base, capped, optionally jittered.
//
// A Policy computes the delay before retry n (0-based) and keeps no state, for callers that
// count their own failures (a record's failure count, an attempt number):
//
//	p := backoff.Policy{Base: time.Second, Max: 5 * time.Minute}
//	retryAt := now.Add(p.Delay(failures - 1))
//
// A Retry walks a Policy for callers that only know "failed again" and "worked":
//
//	r := backoff.Retry{Policy: backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}}
//	for try() != nil {
//		wait(r.Next())
//	}
//	r.Reset()
//
// Jitter draws from the Policy's Rand, never from a global source, so that a simulation that
// passes a seeded generator stays deterministic.
//
// Goroutines: none. A Policy without Rand is a value safe for concurrent use; a Retry, and a
// Policy with Rand, belong to one goroutine (or to the owner of the generator).
package backoff
