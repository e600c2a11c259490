// Package layout is the model of a scalable topic (upstream PIP-460): a
// topic topic://tenant/ns/name is a DAG of segments, each an ordinary persistent topic with
// its own managed ledger, named segment://tenant/ns/name/<hexStart>-<hexEnd>-<id>. The
// active segments partition the 16-bit key-hash space [0x0000, 0xFFFF] (S1); a split seals
// one segment and adds two children covering its range, a merge seals two adjacent ones and
// adds one child covering both.
//
// The whole layout — epoch, segments (id, inclusive hash range, state, parents, children,
// created and sealed epochs and times), subscriptions, the operation in progress and the
// pruned segments whose topics are still to delete — is one metadata record, changed only by
// a compare-and-swap of the whole record at the version it was read at. Layout is a value:
// its methods are pure and return a new Layout (Plan*, Commit, Prune, Deleted); Validate
// checks S1 and the DAG's structure; Marshal and Unmarshal give the JSON record form; Tree
// renders the DAG for people; KeyHash places a key (producers route it with FindActive).
//
// # Record form (JSON)
//
//	{"epoch":3,"nextSegmentId":3,
//	 "segments":[
//	   {"id":0,"range":{"start":0,"end":65535},"state":"sealed","children":[1,2],
//	    "createdAtEpoch":1,"sealedAtEpoch":2,"createdAtMs":1000,"sealedAtMs":2000},
//	   {"id":1,"range":{"start":0,"end":32767},"state":"active","parents":[0],
//	    "createdAtEpoch":2,"createdAtMs":2000}, ...],
//	 "subscriptions":["sub-a"],
//	 "pending":{"kind":"split","parents":[1],"children":[...],"atMs":3000},
//	 "deleting":[{"id":7,"range":{...},"state":"sealed"}]}
//
// Ranges are inclusive at both ends, as upstream's HashRange and segment names
// (0000-7fff-1, 8000-ffff-2). Split at hash h gives [start, h-1] and [h, end]; the midpoint
// split gives upstream's [start, mid] and [mid+1, end].
//
// # Invariants
//
//   - S1: the active segments partition the key-hash space (Validate);
//   - edges are symmetric and point to segments in the layout; active segments are leaves;
//   - an operation is recorded (Pending) before any of its effects, and Commit applies it in
//     the same compare-and-swap that makes its children active and its parents sealed;
//   - S3: Prune takes only a sealed segment with no parent left in the layout.
//
// Layout values are safe to share between goroutines as long as nobody mutates their slices
// (the methods never do). The package starts no goroutines.
package layout
