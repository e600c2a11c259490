package ledger

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/ledger/quorum"
	"github.com/magnetar-io/magnetar/proto/bk"
)

// State is the lifecycle state of a ledger as recorded in its metadata. The only legal
// transitions are OPEN→IN_RECOVERY, OPEN→CLOSED and IN_RECOVERY→CLOSED; CLOSED is final.
// Every transition is a compare-and-swap on the metadata record (invariant L3).
type State uint8

// Metadata states. Values are part of the JSON record only through their names.
const (
	// StateOpen: a writer may be adding entries; the end of the ledger is unknown.
	StateOpen State = iota + 1
	// StateInRecovery: a client is fencing and recovering the ledger; a writer that sees this
	// state fails with ErrFenced.
	StateInRecovery
	// StateClosed: LastEntryID and Length are final. No entry will ever be added.
	StateClosed
)

var stateNames = map[State]string{StateOpen: "OPEN", StateInRecovery: "IN_RECOVERY", StateClosed: "CLOSED"}

// String returns the JSON name of s.
func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	if _, ok := stateNames[s]; !ok {
		return nil, fmt.Errorf("%w: state %d", ErrBadMetadata, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) error {
	for k, n := range stateNames {
		if n == string(b) {
			*s = k
			return nil
		}
	}
	return fmt.Errorf("%w: state %q", ErrBadMetadata, b)
}

// Digest is how entries of a ledger are protected. The zero value is CRC32C, the default.
// (The JSON record stores names; Wire gives the wire value.)
type Digest uint8

// Digests.
const (
	// DigestCRC32C: a 4-byte CRC32C over header and payload (the default).
	DigestCRC32C Digest = iota
	// DigestNone: no digest.
	DigestNone
)

// Wire returns the wire digest type.
func (d Digest) Wire() bk.DigestType {
	if d == DigestNone {
		return bk.DigestNone
	}
	return bk.DigestCRC32C
}

// String returns the JSON name of d.
func (d Digest) String() string {
	switch d {
	case DigestNone:
		return "NONE"
	case DigestCRC32C:
		return "CRC32C"
	}
	return fmt.Sprintf("Digest(%d)", uint8(d))
}

// MarshalText implements encoding.TextMarshaler.
func (d Digest) MarshalText() ([]byte, error) {
	if d != DigestNone && d != DigestCRC32C {
		return nil, fmt.Errorf("%w: digest %d", ErrBadMetadata, uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Digest) UnmarshalText(b []byte) error {
	switch string(b) {
	case "NONE":
		*d = DigestNone
	case "CRC32C":
		*d = DigestCRC32C
	default:
		return fmt.Errorf("%w: digest %q", ErrBadMetadata, b)
	}
	return nil
}

// Ensemble is the set of bookies that stores entries FirstEntry and up, until the next
// ensemble's FirstEntry. Bookies are identified by their host:port address.
type Ensemble struct {
	FirstEntry int64    `json:"firstEntry"`
	Bookies    []string `json:"bookies"`
}

// Metadata is a ledger's record at metadata.LedgerKey(LedgerID), stored as JSON and only ever
// changed by compare-and-swap on its version. A Metadata value is treated as immutable once
// published: mutate a Clone.
type Metadata struct {
	LedgerID     int64  `json:"ledgerId"`
	State        State  `json:"state"`
	EnsembleSize int    `json:"ensembleSize"`
	WriteQuorum  int    `json:"writeQuorum"`
	AckQuorum    int    `json:"ackQuorum"`
	Digest       Digest `json:"digest"`
	// Password is the ledger password (JSON: base64). The bookies' master key is
	// bk.MasterKey(Password).
	Password []byte `json:"password"`
	// Ensembles is sorted by FirstEntry, strictly increasing, the first at entry 0.
	// Invariant: every ensemble has EnsembleSize distinct bookies.
	Ensembles []Ensemble `json:"ensembles"`
	// LastEntryID is the last entry of a CLOSED ledger (-1: empty); -1 while not CLOSED.
	LastEntryID int64 `json:"lastEntryId"`
	// Length is the total payload bytes of a CLOSED ledger; 0 while not CLOSED.
	Length int64 `json:"length"`
	// CTime is the creation time in Unix milliseconds.
	CTime int64 `json:"ctime"`
}

// Validate checks the record's internal consistency.
func (m *Metadata) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ledger %d: %s", ErrBadMetadata, m.LedgerID, fmt.Sprintf(format, args...))
	}
	if m.LedgerID < 0 {
		return bad("negative ledger id")
	}
	if _, ok := stateNames[m.State]; !ok {
		return bad("state %d", m.State)
	}
	if err := quorum.Valid(m.EnsembleSize, m.WriteQuorum, m.AckQuorum); err != nil {
		return bad("%v", err)
	}
	if m.Digest != DigestNone && m.Digest != DigestCRC32C {
		return bad("digest %d", m.Digest)
	}
	if len(m.Ensembles) == 0 {
		return bad("no ensembles")
	}
	for i, en := range m.Ensembles {
		if i == 0 && en.FirstEntry != 0 {
			return bad("first ensemble starts at %d", en.FirstEntry)
		}
		if i > 0 && en.FirstEntry <= m.Ensembles[i-1].FirstEntry {
			return bad("ensembles not sorted at %d", i)
		}
		if len(en.Bookies) != m.EnsembleSize {
			return bad("ensemble %d has %d bookies, want %d", en.FirstEntry, len(en.Bookies), m.EnsembleSize)
		}
		for j, b := range en.Bookies {
			if b == "" {
				return bad("ensemble %d: empty bookie", en.FirstEntry)
			}
			if slices.Contains(en.Bookies[:j], b) {
				return bad("ensemble %d: bookie %s twice", en.FirstEntry, b)
			}
		}
	}
	if m.State == StateClosed {
		if m.LastEntryID < -1 || m.Length < 0 {
			return bad("closed at entry %d length %d", m.LastEntryID, m.Length)
		}
		if last := m.LastEnsemble(); last.FirstEntry > m.LastEntryID+1 {
			return bad("ensemble at %d beyond last entry %d", last.FirstEntry, m.LastEntryID)
		}
	} else if m.LastEntryID != -1 || m.Length != 0 {
		return bad("%v ledger with last entry %d length %d", m.State, m.LastEntryID, m.Length)
	}
	return nil
}

// EnsembleAt returns the bookies that store entry: those of the ensemble with the greatest
// FirstEntry <= entry. entry must be >= 0.
func (m *Metadata) EnsembleAt(entry int64) []string {
	i, _ := slices.BinarySearchFunc(m.Ensembles, entry, func(en Ensemble, e int64) int {
		switch {
		case en.FirstEntry < e:
			return -1
		case en.FirstEntry > e:
			return 1
		}
		return 0
	})
	// i is the first ensemble with FirstEntry >= entry.
	if i < len(m.Ensembles) && m.Ensembles[i].FirstEntry == entry {
		return m.Ensembles[i].Bookies
	}
	return m.Ensembles[i-1].Bookies
}

// WriteSet returns the bookies that store entry, in slot order.
func (m *Metadata) WriteSet(entry int64) []string {
	ens := m.EnsembleAt(entry)
	out := make([]string, m.WriteQuorum)
	for w := range out {
		out[w] = ens[quorum.Index(entry, w, m.EnsembleSize)]
	}
	return out
}

// LastEnsemble returns the ensemble in force for new entries.
func (m *Metadata) LastEnsemble() Ensemble { return m.Ensembles[len(m.Ensembles)-1] }

// Clone returns a deep copy.
func (m *Metadata) Clone() *Metadata {
	c := *m
	c.Password = slices.Clone(m.Password)
	c.Ensembles = make([]Ensemble, len(m.Ensembles))
	for i, en := range m.Ensembles {
		c.Ensembles[i] = Ensemble{FirstEntry: en.FirstEntry, Bookies: slices.Clone(en.Bookies)}
	}
	return &c
}

// Equal reports whether two records are identical.
func (m *Metadata) Equal(o *Metadata) bool {
	if m.LedgerID != o.LedgerID || m.State != o.State || m.EnsembleSize != o.EnsembleSize ||
		m.WriteQuorum != o.WriteQuorum || m.AckQuorum != o.AckQuorum || m.Digest != o.Digest ||
		m.LastEntryID != o.LastEntryID || m.Length != o.Length || m.CTime != o.CTime ||
		!slices.Equal(m.Password, o.Password) || len(m.Ensembles) != len(o.Ensembles) {
		return false
	}
	for i := range m.Ensembles {
		if m.Ensembles[i].FirstEntry != o.Ensembles[i].FirstEntry ||
			!slices.Equal(m.Ensembles[i].Bookies, o.Ensembles[i].Bookies) {
			return false
		}
	}
	return true
}

// withEnsemble returns a copy of m whose ensemble for entries >= first is bookies: the last
// ensemble is replaced when it starts at first, otherwise a new one is appended. first must be
// >= the last ensemble's FirstEntry.
func (m *Metadata) withEnsemble(first int64, bookies []string) *Metadata {
	c := m.Clone()
	en := Ensemble{FirstEntry: first, Bookies: slices.Clone(bookies)}
	if last := &c.Ensembles[len(c.Ensembles)-1]; last.FirstEntry == first {
		*last = en
	} else {
		c.Ensembles = append(c.Ensembles, en)
	}
	return c
}

// Marshal encodes a valid record as JSON.
func (m *Metadata) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// UnmarshalMetadata decodes and validates a JSON record.
func UnmarshalMetadata(b []byte) (*Metadata, error) {
	m := new(Metadata)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMetadata, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}
