package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble key prefixes. They are on disk: never reuse a byte (see doc.go).
const (
	prefixEntry   = 'e' // 'e' | ledgerID u64 | entryID u64 → location
	prefixMeta    = 'm' // 'm' | ledgerID u64 → LedgerMeta
	prefixCounter = 'c' // 'c' | logID u64 → live bytes | live entries (merge operands)
	keyFormat     = "vformat"

	formatValue  = "magnetar-storage-1"
	locationSize = 20 // logID u64 | offset u64 | length u32
	counterSize  = 16 // bytes i64 | entries i64
	metaVersion  = 1

	// counterMergerName is persisted in Pebble's OPTIONS file; keep it stable.
	counterMergerName = "magnetar.storage.counters.v1"
)

func entryKey(ledgerID, entryID int64) []byte {
	return appendEntryKey(make([]byte, 0, 17), ledgerID, entryID)
}

func appendEntryKey(dst []byte, ledgerID, entryID int64) []byte {
	dst = append(dst, prefixEntry)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ledgerID))
	return binary.BigEndian.AppendUint64(dst, uint64(entryID))
}

// ledgerEntryBounds returns [lower, upper) covering every entry key of ledgerID.
func ledgerEntryBounds(ledgerID int64) (lower, upper []byte) {
	lower = binary.BigEndian.AppendUint64([]byte{prefixEntry}, uint64(ledgerID))
	upper = binary.BigEndian.AppendUint64([]byte{prefixEntry}, uint64(ledgerID)+1)
	return lower, upper
}

func decodeEntryKey(k []byte) (ledgerID, entryID int64, ok bool) {
	if len(k) != 17 || k[0] != prefixEntry {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), int64(binary.BigEndian.Uint64(k[9:17])), true
}

func metaKey(ledgerID int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixMeta}, uint64(ledgerID))
}

func counterKey(logID uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixCounter}, logID)
}

// location is where an entry's record lives.
type location struct {
	log    uint64
	offset int64
	length uint32 // payload length; the record is recordHeaderSize longer
}

func (l location) recordSize() int64 { return recordHeaderSize + int64(l.length) }

func (l location) appendTo(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, l.log)
	dst = binary.BigEndian.AppendUint64(dst, uint64(l.offset))
	return binary.BigEndian.AppendUint32(dst, l.length)
}

func decodeLocation(b []byte) (location, error) {
	if len(b) != locationSize {
		return location{}, fmt.Errorf("location is %d bytes", len(b))
	}
	return location{
		log:    binary.BigEndian.Uint64(b[0:8]),
		offset: int64(binary.BigEndian.Uint64(b[8:16])),
		length: binary.BigEndian.Uint32(b[16:20]),
	}, nil
}

// LedgerMeta is the per-ledger state a bookie keeps beside the entries.
type LedgerMeta struct {
	MasterKey   [20]byte
	Digest      uint8 // digest type (bk.DigestType value)
	Fenced      bool
	ExplicitLAC []byte // last explicit LAC body written
}

const metaFlagFenced = 1 << 0

// AppendTo appends the on-disk encoding of m (see doc.go).
func (m LedgerMeta) AppendTo(dst []byte) []byte {
	var flags byte
	if m.Fenced {
		flags |= metaFlagFenced
	}
	dst = append(dst, metaVersion, flags, m.Digest)
	dst = append(dst, m.MasterKey[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(m.ExplicitLAC)))
	return append(dst, m.ExplicitLAC...)
}

// decodeMeta is the inverse of LedgerMeta.AppendTo. It copies out of b.
func decodeMeta(b []byte) (LedgerMeta, error) {
	var m LedgerMeta
	if len(b) < 3+20 {
		return m, errors.New("short ledger meta")
	}
	if b[0] != metaVersion {
		return m, fmt.Errorf("unknown ledger meta version %d", b[0])
	}
	if b[1]&^metaFlagFenced != 0 {
		return m, fmt.Errorf("unknown ledger meta flags %#x", b[1])
	}
	m.Fenced = b[1]&metaFlagFenced != 0
	m.Digest = b[2]
	copy(m.MasterKey[:], b[3:23])
	n, w := binary.Uvarint(b[23:])
	if w <= 0 || w != uvarintLen(n) || n != uint64(len(b)-23-w) {
		return m, errors.New("bad explicit LAC length")
	}
	if n > 0 {
		m.ExplicitLAC = append([]byte(nil), b[23+w:]...)
	}
	return m, nil
}

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

// counter is a (bytes, entries) pair; counter keys hold one as a sum of merge
// operands, so index changes and their accounting commit in one batch.
type counter struct{ bytes, entries int64 }

func (c counter) appendTo(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.bytes))
	return binary.BigEndian.AppendUint64(dst, uint64(c.entries))
}

func decodeCounter(b []byte) (counter, error) {
	if len(b) != counterSize {
		return counter{}, fmt.Errorf("counter is %d bytes", len(b))
	}
	return counter{int64(binary.BigEndian.Uint64(b[0:8])), int64(binary.BigEndian.Uint64(b[8:16]))}, nil
}

// counterMerger sums counter operands. Only counter keys are ever merged.
var counterMerger = &pebble.Merger{
	Name: counterMergerName,
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		m := &counterValueMerger{}
		return m, m.add(value)
	},
}

type counterValueMerger struct{ sum counter }

func (m *counterValueMerger) add(v []byte) error {
	c, err := decodeCounter(v)
	if err != nil {
		return err
	}
	m.sum.bytes += c.bytes
	m.sum.entries += c.entries
	return nil
}

func (m *counterValueMerger) MergeNewer(v []byte) error { return m.add(v) }
func (m *counterValueMerger) MergeOlder(v []byte) error { return m.add(v) }
func (m *counterValueMerger) Finish(bool) ([]byte, io.Closer, error) {
	return m.sum.appendTo(nil), nil, nil
}
