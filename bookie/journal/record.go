package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// RecordType identifies what a journal record describes. The numeric values are
// written to disk and are frozen.
type RecordType uint8

// Record types. Frozen: never renumber, only append.
const (
	// RecAddEntry is one ledger entry: Data holds the entry bytes as received.
	RecAddEntry RecordType = 1
	// RecFence marks a ledger fenced.
	RecFence RecordType = 2
	// RecMasterKey carries a ledger's master key: 20 key bytes and 1 digest-type byte.
	RecMasterKey RecordType = 3
	// RecExplicitLAC carries an explicit last-add-confirmed body.
	RecExplicitLAC RecordType = 4
	// RecDeleteLedger marks a ledger deleted.
	RecDeleteLedger RecordType = 5
)

// String returns the record type's name.
func (t RecordType) String() string {
	switch t {
	case RecAddEntry:
		return "AddEntry"
	case RecFence:
		return "Fence"
	case RecMasterKey:
		return "MasterKey"
	case RecExplicitLAC:
		return "ExplicitLAC"
	case RecDeleteLedger:
		return "DeleteLedger"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

func (t RecordType) valid() bool { return t >= RecAddEntry && t <= RecDeleteLedger }

// Record is one journal record. See doc.go for the on-disk layout.
type Record struct {
	Type     RecordType
	LedgerID int64
	EntryID  int64 // RecAddEntry only; 0 otherwise
	// Data is the payload: the entry bytes as received (RecAddEntry), a 20-byte key and
	// a digest-type byte (RecMasterKey), or the LAC body (RecExplicitLAC).
	Data []byte
}

// On-disk record layout constants. Frozen.
const (
	lengthSize = 4
	crcSize    = 4
	// bodyFixed is the fixed part covered by the length and the CRC: type, ledgerID,
	// entryID.
	bodyFixed = 1 + 8 + 8
	// HeaderSize is the number of bytes a record takes on disk besides its Data.
	HeaderSize = lengthSize + crcSize + bodyFixed
	// MaxDataSize is the largest Data a record may carry.
	MaxDataSize = math.MaxUint32 - bodyFixed
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors returned by Append through the done callback.
var (
	// ErrInvalidRecord is returned for a record with an unknown type.
	ErrInvalidRecord = errors.New("journal: invalid record")
	// ErrRecordTooLarge is returned for a record whose Data exceeds MaxDataSize.
	ErrRecordTooLarge = errors.New("journal: record too large")
)

// encodeHeader fills hdr with the length, CRC and fixed fields of a record. The CRC
// covers hdr[8:] followed by data. It takes the fields rather than a *Record so that
// nothing it touches escapes to the heap: crc32.Update goes through a function value,
// which would make hdr escape, so the 17 fixed bytes are folded in by hand.
func encodeHeader(hdr *[HeaderSize]byte, typ RecordType, ledgerID, entryID int64, data []byte) {
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(bodyFixed+len(data)))
	hdr[8] = byte(typ)
	binary.LittleEndian.PutUint64(hdr[9:17], uint64(ledgerID))
	binary.LittleEndian.PutUint64(hdr[17:25], uint64(entryID))
	crc := ^uint32(0)
	for _, c := range hdr[8:] {
		crc = castagnoli[byte(crc)^c] ^ (crc >> 8)
	}
	crc = crc32.Update(^crc, castagnoli, data)
	binary.LittleEndian.PutUint32(hdr[4:8], crc)
}

// AppendRecord appends the encoded form of r to dst and returns the extended slice.
func AppendRecord(dst []byte, r *Record) []byte {
	var hdr [HeaderSize]byte
	encodeHeader(&hdr, r.Type, r.LedgerID, r.EntryID, r.Data)
	dst = append(dst, hdr[:]...)
	return append(dst, r.Data...)
}

// parseStatus is the outcome of parsing the bytes at one offset.
type parseStatus uint8

const (
	// parseOK: a complete record with a matching CRC and a known type.
	parseOK parseStatus = iota
	// parseEnd: the end of the written part: no bytes left, or a zero length field.
	parseEnd
	// parseBad: a partial header, a length running past the end, a CRC mismatch, or a
	// length too small to be a record.
	parseBad
	// parseUnknownType: a complete record with a valid CRC but an unknown type.
	parseUnknownType
)

// parseRecord parses the record at the start of b. On parseOK it returns the record
// (Data aliases b) and its total size on disk.
func parseRecord(b []byte) (Record, int, parseStatus) {
	if len(b) < lengthSize {
		for _, c := range b {
			if c != 0 {
				return Record{}, 0, parseBad
			}
		}
		return Record{}, 0, parseEnd
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 {
		return Record{}, 0, parseEnd
	}
	if n < bodyFixed || uint64(len(b)) < lengthSize+crcSize+uint64(n) {
		return Record{}, 0, parseBad
	}
	size := lengthSize + crcSize + int(n)
	body := b[lengthSize+crcSize : size]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[lengthSize:]) {
		return Record{}, 0, parseBad
	}
	r := Record{
		Type:     RecordType(body[0]),
		LedgerID: int64(binary.LittleEndian.Uint64(body[1:9])),
		EntryID:  int64(binary.LittleEndian.Uint64(body[9:17])),
		Data:     body[bodyFixed:len(body):len(body)],
	}
	if !r.Type.valid() {
		return r, size, parseUnknownType
	}
	return r, size, parseOK
}

// findRecordAfter reports the first position p in [from, to) where a record with a
// valid CRC starts in b. It is used after a torn or end-of-data position to tell a
// torn tail (nothing valid follows) from corruption (acknowledged records follow).
// Only a position with a nonzero byte in its length field can start a record, so runs
// of zeros are skipped quickly, and no byte at or past to is read except by a
// candidate record's CRC check (the caller passes a hole as to, which must stay
// untouched, see validRecordAfter).
func findRecordAfter(b []byte, from, to int) (int, bool) {
	w := b[:min(to, len(b))]
	for p := from; p < len(w); {
		nz := nextNonZero(w, p)
		if nz < 0 {
			return 0, false
		}
		// Positions before nz-3 have only zeros in their length field.
		for q := max(p, nz-3); q <= nz; q++ {
			if _, _, st := parseRecord(b[q:]); st == parseOK || st == parseUnknownType {
				return q, true
			}
		}
		p = nz + 1
	}
	return 0, false
}

var zeroPage [4096]byte

// nextNonZero returns the index of the first nonzero byte in b at or after from, or -1.
func nextNonZero(b []byte, from int) int {
	i := from
	for ; i+len(zeroPage) <= len(b); i += len(zeroPage) {
		if string(b[i:i+len(zeroPage)]) != string(zeroPage[:]) {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}
