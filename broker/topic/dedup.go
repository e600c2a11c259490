package topic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/mledger"
)

// dedup is a topic's message deduplication state (owned by the topic goroutine): per
// producer name, the highest sequence id stored (persisted) and the highest handed to the
// managed ledger (pushed). Invariant: persisted <= pushed.
//
// A snapshot of the persisted ids and the position it covers is recorded in the managed
// ledger's properties every DedupSnapshotEvery entries and on close; loading replays the
// entries after it.
type dedup struct {
	on            bool
	seqs          map[string]*dedupSeqs
	sinceSnapshot int
}

type dedupSeqs struct{ persisted, pushed int64 }

// dedupID is what deduplication keys a SEND on: a producer name and the SEND's first and
// highest sequence ids (topicCore.dedupID).
type dedupID struct {
	name    string
	seq, hi uint64
}

type dupKind uint8

const (
	dupNone      dupKind = iota
	dupPersisted         // already stored: answer at once
	dupInFlight          // its original is being stored: answer with it
)

type dedupSnapshot struct {
	Pos  Position         `json:"pos"`
	Seqs map[string]int64 `json:"seqs"`
}

func (d *dedup) init(on bool) {
	d.on = on
	d.seqs = map[string]*dedupSeqs{}
}

func (d *dedup) get(name string) *dedupSeqs {
	s := d.seqs[name]
	if s == nil {
		s = &dedupSeqs{persisted: -1, pushed: -1}
		d.seqs[name] = s
	}
	return s
}

// last is the highest sequence id stored for name (-1: none).
func (d *dedup) last(name string) int64 {
	if s := d.seqs[name]; s != nil {
		return s.persisted
	}
	return -1
}

func (d *dedup) check(id dedupID) dupKind {
	s := d.seqs[id.name]
	if s == nil {
		return dupNone
	}
	seq := int64(id.seq)
	switch {
	case seq <= s.persisted:
		return dupPersisted
	case seq <= s.pushed:
		return dupInFlight
	}
	return dupNone
}

func (d *dedup) pushed(id dedupID) {
	s := d.get(id.name)
	s.pushed = max(s.pushed, int64(id.hi))
}

func (d *dedup) persisted(id dedupID) {
	s := d.get(id.name)
	s.persisted = max(s.persisted, int64(id.hi))
	s.pushed = max(s.pushed, s.persisted)
}

// resetPushed forgets what was handed to the log and not stored (no add is in flight), so
// that the clients' resends are stored.
func (d *dedup) resetPushed() {
	for _, s := range d.seqs {
		s.pushed = s.persisted
	}
}

func (d *dedup) snapshot(pos Position) string {
	snap := dedupSnapshot{Pos: pos, Seqs: make(map[string]int64, len(d.seqs))}
	for n, s := range d.seqs {
		if s.persisted >= 0 {
			snap.Seqs[n] = s.persisted
		}
	}
	b, _ := json.Marshal(snap)
	return string(b)
}

// recover loads the snapshot and replays the entries stored after it. It returns the number
// of entries replayed.
func (d *dedup) recover(ctx context.Context, log entryReader, snap string, end Position) (int, error) {
	from := mledger.Earliest
	if snap != "" {
		var s dedupSnapshot
		if err := json.Unmarshal([]byte(snap), &s); err != nil {
			return 0, fmt.Errorf("decode snapshot: %w", err)
		}
		for n, seq := range s.Seqs {
			d.seqs[n] = &dedupSeqs{persisted: seq, pushed: seq}
		}
		from = Position{LedgerID: s.Pos.LedgerID, EntryID: s.Pos.EntryID + 1}
	}
	n := 0
	for end.EntryID >= 0 && !end.Less(from) {
		es, err := log.Read(ctx, from, 256)
		if errors.Is(err, mledger.ErrNoMoreEntries) {
			break
		}
		if err != nil {
			return n, err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if end.Less(e.Position) {
				return n, nil
			}
			n++
			m, err := parseMeta(e.Data)
			if err != nil || m.GetProducerName() == "" {
				continue
			}
			if m.ChunkId != nil && m.GetChunkId() != m.GetNumChunksFromMsg()-1 {
				continue
			}
			hi := max(m.GetSequenceId(), m.GetHighestSequenceId())
			s := d.get(m.GetProducerName())
			s.persisted = max(s.persisted, int64(hi))
			s.pushed = s.persisted
		}
		last := es[len(es)-1].Position
		if !last.Less(end) {
			break
		}
		from = Position{LedgerID: last.LedgerID, EntryID: last.EntryID + 1}
	}
	return n, nil
}

// lastEntry returns the position of the last entry of a log (EntryID -1: the log is empty),
// which LastConfirmed is not right after a ledger rollover.
func lastEntry(st mledger.Stats) Position {
	pos := st.LastConfirmed
	if pos.EntryID >= 0 {
		return pos
	}
	for i := len(st.Ledgers) - 1; i >= 0; i-- {
		if l := st.Ledgers[i]; l.Entries > 0 {
			return Position{LedgerID: l.ID, EntryID: l.Entries - 1}
		}
	}
	return pos
}
