// Package client is the ledger client's transport to bookies: a pipelined TCP connection
// (Conn) speaking the proto/bk protocol, and a Pool keeping one live Conn per bookie address.
//
// # Usage
//
//	pool := client.NewPool(client.Options{Logger: log})
//	defer pool.Close()
//	c, err := pool.Get(ctx, "10.0.0.7:3181")
//	if err != nil { ... }
//	req := bk.Request{Op: bk.OpAddEntry, LedgerID: l, EntryID: e, MasterKey: key,
//		Digest: bk.DigestCRC32C, Body: entry}
//	c.Send(&req, func(resp bk.Response, err error) {
//		// runs on c's reader goroutine: hand the result to the owner's event loop, don't block
//		results <- addResult{e, resp, err}
//	})
//	// Or, with many requests in flight: one long-lived Handler and a tag instead of a closure
//	// per request, and the entry packaged straight into the connection's write buffer.
//	c.SendEntry(&req, &bk.Entry{LedgerID: l, EntryID: e, LAC: lac, Length: n, Payload: p}, h, token)
//
// Caller obligations:
//  1. Callbacks and Handlers must not block and must not call Conn.Close or Pool.Close (those wait for
//     the callbacks). Calling Send or Pool.Get from a callback is fine.
//  2. Bound the number of outstanding requests: Send never blocks and the write queue is
//     unbounded.
//  3. Treat every error that matches ErrConnClosed as "outcome unknown": the bookie may or
//     may not have executed the request. Resend (bk.IsRetriable reports true) or replace
//     the bookie.
//  4. Do not Close a Conn obtained from a Pool; Pool.Get replaces dead connections.
//
// # Goroutines
//
// Each Conn runs two goroutines, started by Dial and waited for by Close:
//
//   - writer (Conn.writeLoop): owns the socket's write side. Send (SendTo, SendEntry)
//     encodes frames into the shared queue (Conn.mu.queue: 64 KiB chunks from a sync.Pool
//     shared by all connections, so a busy connection allocates nothing and an idle one pins
//     nothing) and signals the cap-1 channel wake; the writer takes the whole queue and
//     writes it in one writev, so requests queued during a write are batched into the next
//     one, and the queue is flushed as soon as it is non-empty. It exits when done is closed
//     or a write fails.
//   - reader (Conn.readLoop): owns the socket's read side and the FrameReader. It matches
//     each response to Conn.mu.pending by request id (a seqwin.Window: ids are allocated
//     consecutively, so no map), copies its byte slices (responses without any allocate
//     nothing) and calls the callback or Handler. On a read, decode or protocol error, or
//     after Close, it marks the connection dead and then fails every pending request (in id
//     order) with a *ConnError. So every callback after Send returns runs on this goroutine,
//     one at a time.
//
// Conn.mu is a leaf mutex guarding the id counter, the pending window, the queue and the
// terminal error; it is never held during I/O or callbacks. fail (first cause wins) sets the
// error, closes done and the socket, which stops both goroutines.
//
// A Pool runs one short-lived goroutine per in-flight dial (shared by concurrent Gets of the
// same address, bounded by Options.DialTimeout and Pool.Close) and one per dead connection it
// reaps; Pool.Close waits for them.
//
// # Invariants
//
//   - Each callback (or Handler call for a SendTo/SendEntry tag) is made exactly once.
//   - A request is in Conn.mu.pending from the moment its frame is queued until its response
//     arrives or the reader fails it; its frame is never written before it is in pending.
//   - Conn.mu.err != nil iff Done() is closed; once set, Send fails requests inline.
package client
