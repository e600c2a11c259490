package offload

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// LedgerMetadata is what the index object records about the offloaded ledger: the fields of
// BookKeeper's LedgerMetadataFormat that a reader needs (the ledger is always CLOSED). The
// password is never written to the object store.
type LedgerMetadata struct {
	// LastEntryID is the ledger's last entry (-1: empty ledger).
	LastEntryID int64
	// Length is the sum of the entries' payload lengths.
	Length int64
	// EnsembleSize, WriteQuorum and AckQuorum are the ledger's replication settings when it
	// lived on bookies (informational).
	EnsembleSize, WriteQuorum, AckQuorum int32
	// Digest is the ledger's digest type as BookKeeper numbers it (1 CRC32, 2 HMAC,
	// 3 CRC32C); 0 leaves it out.
	Digest int32
	// CTime is the ledger's creation time in Unix milliseconds (0: unknown).
	CTime int64
	// Ensembles lists the bookies of each fragment (informational).
	Ensembles []Ensemble
	// Custom is the ledger's custom metadata.
	Custom map[string][]byte
}

// Ensemble is a fragment of the ledger: the bookies that stored entries FirstEntry and up.
type Ensemble struct {
	FirstEntry int64
	Bookies    []string
}

// Validate checks what the writer and reader rely on.
func (m *LedgerMetadata) Validate() error {
	if m.LastEntryID < -1 {
		return fmt.Errorf("%w: last entry id %d", ErrInvalidArgument, m.LastEntryID)
	}
	if m.Length < 0 {
		return fmt.Errorf("%w: length %d", ErrInvalidArgument, m.Length)
	}
	return nil
}

// Field numbers of BookKeeper's LedgerMetadataFormat (DataFormats.proto, proto2).
const (
	pbQuorumSize    = 1 // int32, required
	pbEnsembleSize  = 2 // int32, required
	pbLength        = 3 // int64, required
	pbLastEntryID   = 4 // int64
	pbState         = 5 // enum State, required; CLOSED = 3
	pbSegment       = 6 // repeated Segment {repeated string ensembleMember = 1; int64 firstEntryId = 2}
	pbDigestType    = 7 // enum DigestType
	pbAckQuorumSize = 9 // int32
	pbCTime         = 10
	pbCustom        = 11 // repeated {string key = 1; bytes value = 2}

	pbStateClosed = 3
)

// appendProto appends m as a LedgerMetadataFormat message (state CLOSED).
func (m *LedgerMetadata) appendProto(b []byte) []byte {
	b = protowire.AppendTag(b, pbQuorumSize, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(m.WriteQuorum)))
	b = protowire.AppendTag(b, pbEnsembleSize, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(m.EnsembleSize)))
	b = protowire.AppendTag(b, pbLength, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.Length))
	b = protowire.AppendTag(b, pbLastEntryID, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.LastEntryID))
	b = protowire.AppendTag(b, pbState, protowire.VarintType)
	b = protowire.AppendVarint(b, pbStateClosed)
	for _, e := range m.Ensembles {
		var seg []byte
		for _, bk := range e.Bookies {
			seg = protowire.AppendTag(seg, 1, protowire.BytesType)
			seg = protowire.AppendString(seg, bk)
		}
		seg = protowire.AppendTag(seg, 2, protowire.VarintType)
		seg = protowire.AppendVarint(seg, uint64(e.FirstEntry))
		b = protowire.AppendTag(b, pbSegment, protowire.BytesType)
		b = protowire.AppendBytes(b, seg)
	}
	if m.Digest != 0 {
		b = protowire.AppendTag(b, pbDigestType, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(m.Digest)))
	}
	b = protowire.AppendTag(b, pbAckQuorumSize, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(int64(m.AckQuorum)))
	if m.CTime != 0 {
		b = protowire.AppendTag(b, pbCTime, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.CTime))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Custom)) {
		var kv []byte
		kv = protowire.AppendTag(kv, 1, protowire.BytesType)
		kv = protowire.AppendString(kv, k)
		kv = protowire.AppendTag(kv, 2, protowire.BytesType)
		kv = protowire.AppendBytes(kv, m.Custom[k])
		b = protowire.AppendTag(b, pbCustom, protowire.BytesType)
		b = protowire.AppendBytes(b, kv)
	}
	return b
}

var errProto = errors.New("malformed protobuf")

// decodeMetadata parses a LedgerMetadataFormat message. It requires the state CLOSED and a
// last entry id; unknown fields are skipped.
func decodeMetadata(b []byte) (LedgerMetadata, error) {
	var m LedgerMetadata
	var state uint64
	haveLast := false
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == pbQuorumSize && typ == protowire.VarintType:
			m.WriteQuorum = int32(v)
		case num == pbEnsembleSize && typ == protowire.VarintType:
			m.EnsembleSize = int32(v)
		case num == pbLength && typ == protowire.VarintType:
			m.Length = int64(v)
		case num == pbLastEntryID && typ == protowire.VarintType:
			m.LastEntryID, haveLast = int64(v), true
		case num == pbState && typ == protowire.VarintType:
			state = v
		case num == pbDigestType && typ == protowire.VarintType:
			m.Digest = int32(v)
		case num == pbAckQuorumSize && typ == protowire.VarintType:
			m.AckQuorum = int32(v)
		case num == pbCTime && typ == protowire.VarintType:
			m.CTime = int64(v)
		case num == pbSegment && typ == protowire.BytesType:
			var e Ensemble
			err := eachField(raw, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Bookies = append(e.Bookies, string(raw))
				case num == 2 && typ == protowire.VarintType:
					e.FirstEntry = int64(v)
				}
				return nil
			})
			if err != nil {
				return err
			}
			m.Ensembles = append(m.Ensembles, e)
		case num == pbCustom && typ == protowire.BytesType:
			var k string
			var val []byte
			err := eachField(raw, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					k = string(raw)
				case num == 2 && typ == protowire.BytesType:
					val = append([]byte{}, raw...)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if m.Custom == nil {
				m.Custom = map[string][]byte{}
			}
			m.Custom[k] = val
		}
		return nil
	})
	if err != nil {
		return LedgerMetadata{}, err
	}
	switch {
	case state != pbStateClosed:
		return LedgerMetadata{}, fmt.Errorf("ledger state %d, want CLOSED (3)", state)
	case !haveLast:
		return LedgerMetadata{}, errors.New("no last entry id")
	}
	if err := m.Validate(); err != nil {
		return LedgerMetadata{}, err
	}
	return m, nil
}

// eachField calls fn for every field of the message b: its number, wire type, and the value
// (varint and fixed types) or the bytes (length-delimited).
func eachField(b []byte, fn func(protowire.Number, protowire.Type, uint64, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errProto
		}
		b = b[n:]
		var v uint64
		var raw []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v32 uint32
			v32, n = protowire.ConsumeFixed32(b)
			v = uint64(v32)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			raw, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errProto
		}
		b = b[n:]
		if err := fn(num, typ, v, raw); err != nil {
			return err
		}
	}
	return nil
}
