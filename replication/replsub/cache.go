package replsub

// Cache is the snapshots of one replicated subscription (Pulsar's
// ReplicatedSubscriptionSnapshotCache): the SNAPSHOT markers its dispatcher read, by local
// position, at most Max of them. When the subscription's mark-delete position reaches a
// snapshot's local position, the newest such snapshot becomes the subscription's UPDATE to
// the other clusters. Not safe for concurrent use: the subscription's owner goroutine
// holds it. The cache is memory only: after a restart the dispatcher reads again the
// SNAPSHOT markers after the mark-delete position.
//
// Invariant: snaps is in increasing order of Local, and len(snaps) <= max.
type Cache struct {
	max   int
	snaps []Snapshot
	mut   Mutation
}

// NewCache returns an empty cache of at most max snapshots (0: DefaultMaxCached).
func NewCache(max int, mut Mutation) *Cache {
	if max <= 0 {
		max = DefaultMaxCached
	}
	return &Cache{max: max, mut: mut}
}

// Len returns how many snapshots the cache holds.
func (c *Cache) Len() int { return len(c.snaps) }

// Add caches s (read from a SNAPSHOT marker). A snapshot at or before the newest cached one
// is ignored (a marker read again); when the cache is full the oldest is dropped (a later
// snapshot covers more: dropping the oldest only makes the next UPDATE wait for a later
// mark-delete position).
func (c *Cache) Add(s Snapshot) {
	if n := len(c.snaps); n > 0 && !c.snaps[n-1].Local.Less(s.Local) {
		return
	}
	if len(c.snaps) >= c.max {
		copy(c.snaps, c.snaps[1:])
		c.snaps = c.snaps[:len(c.snaps)-1]
	}
	c.snaps = append(c.snaps, s)
}

// Advanced tells the cache the subscription's mark-delete position is md: it drops every
// snapshot whose local position md reached and returns the newest of them (ok false: none).
func (c *Cache) Advanced(md Position) (s Snapshot, ok bool) {
	n := 0
	for n < len(c.snaps) && !md.Less(c.snaps[n].Local) {
		n++
	}
	if n == 0 {
		if c.mut.UpdateUncovered && len(c.snaps) > 0 {
			s = c.snaps[len(c.snaps)-1]
			c.snaps = c.snaps[:0]
			return s, true
		}
		return Snapshot{}, false
	}
	s = c.snaps[n-1]
	c.snaps = append(c.snaps[:0], c.snaps[n:]...)
	return s, true
}
