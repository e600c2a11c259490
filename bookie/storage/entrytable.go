package storage

import "slices"

// maxDenseGap is how far past the end of an entryTable's dense run an entry ID may be and
// still extend the run (the IDs in between stay empty); farther ones go to the sparse map.
const maxDenseGap = 64

// entryTable maps a ledger's entry IDs to their slots in a write-cache generation. A writer
// adds entries in ID order, so the IDs of one generation are nearly always one consecutive
// run: those live in a slice indexed by ID (no hashing on put or get, and the flusher reads
// them in order without sorting); the few others (an entry re-added below the run, a
// recovery writing from elsewhere) live in a map.
type entryTable struct {
	base   int64          // entry ID of dense[0], when dense is not empty
	dense  []slot         // dense[i] holds entry base+i if its used is set
	sparse map[int64]slot // entries outside the dense run; nil when none
}

// get returns the entry's slot.
func (t *entryTable) get(id int64) (slot, bool) {
	if i := id - t.base; len(t.dense) > 0 && i >= 0 && i < int64(len(t.dense)) && t.dense[i].used {
		return t.dense[i], true
	}
	s, ok := t.sparse[id]
	return s, ok
}

// set stores the entry's slot, replacing any.
func (t *entryTable) set(id int64, s slot) {
	s.used = true
	if len(t.dense) == 0 && len(t.sparse) == 0 {
		t.base = id
	}
	if i := id - t.base; i >= 0 && i < int64(len(t.dense))+maxDenseGap {
		if i >= int64(len(t.dense)) {
			t.dense = slices.Grow(t.dense, int(i)+1-len(t.dense))[:i+1]
		}
		t.dense[i] = s
		if t.sparse != nil {
			delete(t.sparse, id) // put there before the dense run reached it
		}
		return
	}
	if t.sparse == nil {
		t.sparse = make(map[int64]slot)
	}
	t.sparse[id] = s
}

// appendIDs appends the entry IDs held, in ascending order.
func (t *entryTable) appendIDs(dst []int64) []int64 {
	start := len(dst)
	for i, s := range t.dense {
		if s.used {
			dst = append(dst, t.base+int64(i))
		}
	}
	if len(t.sparse) > 0 {
		for id := range t.sparse {
			dst = append(dst, id)
		}
		slices.Sort(dst[start:])
	}
	return dst
}

// ascend calls f for each entry in ascending ID order, stopping at f's first error. ids is
// scratch space, used only when the table has sparse entries (to sort them in).
func (t *entryTable) ascend(ids *[]int64, f func(id int64, s slot) error) error {
	if len(t.sparse) == 0 {
		for i, s := range t.dense {
			if !s.used {
				continue
			}
			if err := f(t.base+int64(i), s); err != nil {
				return err
			}
		}
		return nil
	}
	*ids = t.appendIDs((*ids)[:0])
	for _, id := range *ids {
		s, _ := t.get(id)
		if err := f(id, s); err != nil {
			return err
		}
	}
	return nil
}

// reset empties the table, keeping its dense capacity for reuse.
func (t *entryTable) reset() {
	clear(t.dense)
	t.dense = t.dense[:0]
	t.sparse = nil
}
