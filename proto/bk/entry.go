package bk

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// LACBodyLen is the length of an explicit LAC body before its digest: ledger id and LAC.
const LACBodyLen = 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MasterKey derives a ledger's master key: SHA-1("ledger" || password), as BookKeeper's
// MacDigestManager.genDigest does.
func MasterKey(password []byte) [MasterKeyLen]byte {
	h := sha1.New()
	h.Write([]byte("ledger"))
	h.Write(password)
	var k [MasterKeyLen]byte
	h.Sum(k[:0])
	return k
}

// DigestLen returns the number of digest bytes of d, or an error wrapping ErrMalformed for an
// unknown digest type.
func DigestLen(d DigestType) (int, error) {
	switch d {
	case DigestNone:
		return 0, nil
	case DigestCRC32C:
		return 4, nil
	}
	return 0, fmt.Errorf("%w: unknown digest type %d", ErrMalformed, uint8(d))
}

// Entry is a decoded entry. Payload aliases the bytes it was decoded from.
type Entry struct {
	LedgerID int64
	EntryID  int64
	// LAC is the last add confirmed the writer knew when it sent the entry (piggybacked LAC).
	LAC int64
	// Length is the cumulative ledger length in bytes including this entry's payload.
	Length  int64
	Payload []byte
}

// AppendEntry appends the packaged entry (header, digest, payload; see doc.go) to dst. It
// panics on an unknown digest type, which is a programming error: digest types come from
// ledger metadata that was validated when it was read.
func AppendEntry(dst []byte, ledgerID, entryID, lac, length int64, d DigestType, payload []byte) []byte {
	dl, err := DigestLen(d)
	if err != nil {
		panic(err)
	}
	start := len(dst)
	dst = slices.Grow(dst, EntryHeaderLen+dl+len(payload))
	dst = binary.BigEndian.AppendUint64(dst, uint64(ledgerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(entryID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(lac))
	dst = binary.BigEndian.AppendUint64(dst, uint64(length))
	if d == DigestCRC32C {
		c := crc32.Update(0, castagnoli, dst[start:start+EntryHeaderLen])
		c = crc32.Update(c, castagnoli, payload)
		dst = binary.BigEndian.AppendUint32(dst, c)
	}
	return append(dst, payload...)
}

// DecodeEntry decodes and verifies a packaged entry. It returns an error wrapping
// ErrMalformed if b is too short or d is unknown, and one wrapping ErrDigest if the digest
// does not match. The Payload aliases b.
func DecodeEntry(b []byte, d DigestType) (Entry, error) {
	dl, err := DigestLen(d)
	if err != nil {
		return Entry{}, err
	}
	if len(b) < EntryHeaderLen+dl {
		return Entry{}, fmt.Errorf("%w: entry of %d bytes is shorter than header and digest (%d)",
			ErrMalformed, len(b), EntryHeaderLen+dl)
	}
	e := Entry{
		LedgerID: int64(binary.BigEndian.Uint64(b[0:])),
		EntryID:  int64(binary.BigEndian.Uint64(b[8:])),
		LAC:      int64(binary.BigEndian.Uint64(b[16:])),
		Length:   int64(binary.BigEndian.Uint64(b[24:])),
		Payload:  b[EntryHeaderLen+dl:],
	}
	if d == DigestCRC32C {
		c := crc32.Update(0, castagnoli, b[:EntryHeaderLen])
		c = crc32.Update(c, castagnoli, e.Payload)
		if got := binary.BigEndian.Uint32(b[EntryHeaderLen:]); got != c {
			return Entry{}, fmt.Errorf("%w: entry %d/%d crc32c %08x, computed %08x",
				ErrDigest, e.LedgerID, e.EntryID, got, c)
		}
	}
	return e, nil
}

// VerifyEntry checks that b is a well-formed entry of ledgerID/entryID whose digest matches.
// An id mismatch is reported as ErrDigest, as BookKeeper's verifyDigest does.
func VerifyEntry(b []byte, d DigestType, ledgerID, entryID int64) error {
	e, err := DecodeEntry(b, d)
	if err != nil {
		return err
	}
	if e.LedgerID != ledgerID || e.EntryID != entryID {
		return fmt.Errorf("%w: entry header says %d/%d, expected %d/%d",
			ErrDigest, e.LedgerID, e.EntryID, ledgerID, entryID)
	}
	return nil
}

// AppendLACBody appends an explicit LAC body (ledger id, lac, digest over both) to dst. It
// panics on an unknown digest type, as AppendEntry does.
func AppendLACBody(dst []byte, ledgerID, lac int64, d DigestType) []byte {
	dl, err := DigestLen(d)
	if err != nil {
		panic(err)
	}
	start := len(dst)
	dst = slices.Grow(dst, LACBodyLen+dl)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ledgerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(lac))
	if d == DigestCRC32C {
		dst = binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
	}
	return dst
}

// DecodeLACBody decodes and verifies an explicit LAC body. The body must be exactly
// LACBodyLen plus the digest length long (ErrMalformed otherwise); a digest mismatch is
// ErrDigest.
func DecodeLACBody(b []byte, d DigestType) (ledgerID, lac int64, err error) {
	dl, err := DigestLen(d)
	if err != nil {
		return 0, 0, err
	}
	if len(b) != LACBodyLen+dl {
		return 0, 0, fmt.Errorf("%w: LAC body of %d bytes, want %d", ErrMalformed, len(b), LACBodyLen+dl)
	}
	ledgerID = int64(binary.BigEndian.Uint64(b[0:]))
	lac = int64(binary.BigEndian.Uint64(b[8:]))
	if d == DigestCRC32C {
		c := crc32.Checksum(b[:LACBodyLen], castagnoli)
		if got := binary.BigEndian.Uint32(b[LACBodyLen:]); got != c {
			return 0, 0, fmt.Errorf("%w: LAC body of ledger %d crc32c %08x, computed %08x",
				ErrDigest, ledgerID, got, c)
		}
	}
	return ledgerID, lac, nil
}
