package bk

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Frame layout constants. Frozen: they are on the wire (see doc.go).
const (
	// FlagResponse is set in the flags byte of every response and of no request.
	FlagResponse uint8 = 0x80
	// LengthPrefixLen is the size of the u32 frame length that precedes every frame.
	LengthPrefixLen = 4
	// RequestHeaderLen is op, flags and request id.
	RequestHeaderLen = 1 + 1 + 8
	// ResponseHeaderLen is op, flags, request id and status.
	ResponseHeaderLen = RequestHeaderLen + 1
	// rangeLen is one encoded Range.
	rangeLen = 16
	// maxWireLen is the largest u32 length or count we accept: one with the top bit set is
	// negative to a peer reading it as a signed int32, so it is rejected.
	maxWireLen = 1<<31 - 1
)

// requestFlags are the flags each op accepts; any other bit makes the request malformed.
var requestFlags = [...]uint8{
	OpAddEntry:    FlagRecovery,
	OpReadEntry:   FlagFence,
	OpWriteLAC:    0,
	OpReadLAC:     0,
	OpLongPoll:    FlagPiggyback,
	OpForce:       0,
	OpListEntries: 0,
}

// AppendRequest appends r, encoded as a whole frame including its length prefix, to dst and
// returns the extended slice. Only the fields of r.Op are encoded. An undefined Op encodes as
// a frame with an empty body, which every decoder rejects. The caller keeps frames within
// MaxFrameLen (the peer rejects larger ones); AppendRequest does not check.
func AppendRequest(dst []byte, r *Request) []byte {
	start := len(dst)
	dst = slices.Grow(dst, LengthPrefixLen+RequestHeaderLen+requestBodyLen(r))
	dst = append(dst, 0, 0, 0, 0, byte(r.Op), r.Flags)
	dst = binary.BigEndian.AppendUint64(dst, r.RequestID)
	switch r.Op {
	case OpAddEntry:
		dst = appendI64(dst, r.LedgerID)
		dst = appendI64(dst, r.EntryID)
		dst = append(dst, r.MasterKey[:]...)
		dst = append(dst, byte(r.Digest))
		dst = appendBytes(dst, r.Body)
	case OpReadEntry:
		dst = appendI64(dst, r.LedgerID)
		dst = appendI64(dst, r.EntryID)
		dst = append(dst, r.MasterKey[:]...)
	case OpWriteLAC:
		dst = appendI64(dst, r.LedgerID)
		dst = appendI64(dst, r.LAC)
		dst = append(dst, r.MasterKey[:]...)
		dst = appendBytes(dst, r.Body)
	case OpLongPoll:
		dst = appendI64(dst, r.LedgerID)
		dst = appendI64(dst, r.PreviousLAC)
		dst = binary.BigEndian.AppendUint32(dst, r.TimeoutMs)
	case OpReadLAC, OpForce, OpListEntries:
		dst = appendI64(dst, r.LedgerID)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-LengthPrefixLen))
	return dst
}

// requestBodyLen is the encoded body length of r (after the request header).
func requestBodyLen(r *Request) int {
	switch r.Op {
	case OpAddEntry:
		return 8 + 8 + MasterKeyLen + 1 + 4 + len(r.Body)
	case OpReadEntry:
		return 8 + 8 + MasterKeyLen
	case OpWriteLAC:
		return 8 + 8 + MasterKeyLen + 4 + len(r.Body)
	case OpLongPoll:
		return 8 + 8 + 4
	case OpReadLAC, OpForce, OpListEntries:
		return 8
	}
	return 0
}

// AppendResponse appends r, encoded as a whole frame including its length prefix, to dst and
// returns the extended slice. The flags byte is always FlagResponse. A non-OK status encodes
// only the ledger and entry ids; the op-specific fields are encoded for StatusOK only. An
// undefined Op encodes ids only, which every decoder rejects. As with AppendRequest, the
// caller keeps frames within MaxFrameLen.
func AppendResponse(dst []byte, r *Response) []byte {
	start := len(dst)
	dst = slices.Grow(dst, LengthPrefixLen+ResponseHeaderLen+responseBodyLen(r))
	dst = append(dst, 0, 0, 0, 0, byte(r.Op), FlagResponse)
	dst = binary.BigEndian.AppendUint64(dst, r.RequestID)
	dst = append(dst, byte(r.Status))
	dst = appendI64(dst, r.LedgerID)
	dst = appendI64(dst, r.EntryID)
	if r.Status == StatusOK {
		switch r.Op {
		case OpReadEntry, OpLongPoll:
			dst = appendI64(dst, r.MaxLAC)
			dst = appendBytes(dst, r.Body)
		case OpReadLAC:
			dst = appendBytes(dst, r.LACBody)
			dst = appendBytes(dst, r.Body)
		case OpListEntries:
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Ranges)))
			for _, rg := range r.Ranges {
				dst = appendI64(dst, rg.First)
				dst = appendI64(dst, rg.Last)
			}
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-LengthPrefixLen))
	return dst
}

// responseBodyLen is the encoded body length of r (after the response header).
func responseBodyLen(r *Response) int {
	n := 8 + 8
	if r.Status != StatusOK {
		return n
	}
	switch r.Op {
	case OpReadEntry, OpLongPoll:
		n += 8 + 4 + len(r.Body)
	case OpReadLAC:
		n += 4 + len(r.LACBody) + 4 + len(r.Body)
	case OpListEntries:
		n += 4 + rangeLen*len(r.Ranges)
	}
	return n
}

func appendI64(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

func appendBytes(dst, b []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// DecodeRequest decodes a request frame: the bytes after the length prefix, as returned by
// FrameReader.Next. Request.Body aliases frame. Any structural defect (short body, trailing
// bytes, unknown op, a flag the op does not accept, the response bit, a length with the top
// bit set, an unknown digest type) yields the zero Request and an error wrapping ErrMalformed
// that names the reason. Semantic checks (ids, master key, entry digest) are the bookie's.
func DecodeRequest(frame []byte) (Request, error) {
	d := decoder{b: frame, kind: "request"}
	var r Request
	r.Op = Op(d.u8("op"))
	d.op = r.Op
	r.Flags = d.u8("flags")
	r.RequestID = d.u64("request id")
	switch {
	case d.err != nil:
	case !r.Op.Valid():
		d.fail("unknown op %d", uint8(r.Op))
	case r.Flags&FlagResponse != 0:
		d.fail("response bit set in request flags 0x%02x", r.Flags)
	case r.Flags&^requestFlags[r.Op] != 0:
		d.fail("unknown flags 0x%02x for %v", r.Flags&^requestFlags[r.Op], r.Op)
	}
	switch r.Op {
	case OpAddEntry:
		r.LedgerID = d.i64("ledger id")
		r.EntryID = d.i64("entry id")
		d.fixed(r.MasterKey[:], "master key")
		r.Digest = DigestType(d.u8("digest type"))
		if d.err == nil {
			if _, err := DigestLen(r.Digest); err != nil {
				d.fail("unknown digest type %d", uint8(r.Digest))
			}
		}
		r.Body = d.bytes("entry")
	case OpReadEntry:
		r.LedgerID = d.i64("ledger id")
		r.EntryID = d.i64("entry id")
		d.fixed(r.MasterKey[:], "master key")
	case OpWriteLAC:
		r.LedgerID = d.i64("ledger id")
		r.LAC = d.i64("lac")
		d.fixed(r.MasterKey[:], "master key")
		r.Body = d.bytes("lac body")
	case OpLongPoll:
		r.LedgerID = d.i64("ledger id")
		r.PreviousLAC = d.i64("previous lac")
		r.TimeoutMs = d.u32("timeout")
	case OpReadLAC, OpForce, OpListEntries:
		r.LedgerID = d.i64("ledger id")
	}
	if err := d.finish(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// DecodeResponse decodes a response frame: the bytes after the length prefix. Response.Body
// and Response.LACBody alias frame; Ranges is freshly allocated. Defects are reported as in
// DecodeRequest; in addition the flags byte must be exactly FlagResponse, the status must be
// defined, and ranges must be non-negative, non-empty, sorted and non-overlapping. A non-OK
// response carries only the ledger and entry ids.
func DecodeResponse(frame []byte) (Response, error) {
	d := decoder{b: frame, kind: "response"}
	var r Response
	r.Op = Op(d.u8("op"))
	d.op = r.Op
	flags := d.u8("flags")
	r.RequestID = d.u64("request id")
	r.Status = Status(d.u8("status"))
	switch {
	case d.err != nil:
	case !r.Op.Valid():
		d.fail("unknown op %d", uint8(r.Op))
	case flags&FlagResponse == 0:
		d.fail("response bit missing in flags 0x%02x", flags)
	case flags != FlagResponse:
		d.fail("unknown flags 0x%02x", flags&^FlagResponse)
	case !r.Status.Valid():
		d.fail("unknown status %d", uint8(r.Status))
	}
	r.LedgerID = d.i64("ledger id")
	r.EntryID = d.i64("entry id")
	if r.Status == StatusOK {
		switch r.Op {
		case OpReadEntry, OpLongPoll:
			r.MaxLAC = d.i64("max lac")
			r.Body = d.bytes("entry")
		case OpReadLAC:
			r.LACBody = d.bytes("lac body")
			r.Body = d.bytes("last entry")
		case OpListEntries:
			r.Ranges = d.ranges()
		}
	}
	if err := d.finish(); err != nil {
		return Response{}, err
	}
	return r, nil
}

// decoder is a sticky-error reader over one frame: after the first failure every read returns
// zero values, and the error is checked once, by finish.
type decoder struct {
	b    []byte
	off  int
	err  error
	kind string // "request" or "response"
	op   Op
}

// fail records the first error, wrapping ErrMalformed with the reason and the offset.
func (d *decoder) fail(format string, args ...any) {
	if d.err != nil {
		return
	}
	d.err = fmt.Errorf("%w: %v %s at offset %d: %s", ErrMalformed, d.op, d.kind, d.off,
		fmt.Sprintf(format, args...))
}

// take returns the next n bytes, or nil after recording a short body.
func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b)-d.off < n {
		d.fail("short body: %s needs %d bytes, %d left", what, n, len(d.b)-d.off)
		return nil
	}
	b := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

func (d *decoder) u8(what string) uint8 {
	if b := d.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if b := d.take(4, what); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if b := d.take(8, what); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) i64(what string) int64 { return int64(d.u64(what)) }

func (d *decoder) fixed(dst []byte, what string) { copy(dst, d.take(len(dst), what)) }

// length reads a u32 length or count, rejecting values with the top bit set.
func (d *decoder) length(what string) int {
	if d.err == nil && len(d.b)-d.off < 4 {
		d.fail("short body: %s length needs 4 bytes, %d left", what, len(d.b)-d.off)
	}
	if d.err != nil {
		return 0
	}
	n := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	if n > maxWireLen {
		d.fail("negative length %d for %s", int32(n), what)
		return 0
	}
	return int(n)
}

// bytes reads a u32-length-prefixed byte string, aliasing the frame.
func (d *decoder) bytes(what string) []byte {
	n := d.length(what)
	return d.take(n, what)
}

// ranges reads a u32 count and that many (first, last) pairs.
func (d *decoder) ranges() []Range {
	n := d.length("range count")
	if d.err == nil && n > (len(d.b)-d.off)/rangeLen {
		// Checked before multiplying and allocating: the frame bounds the allocation.
		d.fail("short body: %d ranges need %d bytes, %d left", n, uint64(n)*rangeLen, len(d.b)-d.off)
	}
	raw := d.take(n*rangeLen, "ranges")
	if raw == nil || n == 0 {
		return nil
	}
	rs := make([]Range, n)
	for i := range rs {
		rs[i].First = int64(binary.BigEndian.Uint64(raw[i*rangeLen:]))
		rs[i].Last = int64(binary.BigEndian.Uint64(raw[i*rangeLen+8:]))
		switch {
		case rs[i].First < 0:
			d.fail("range %d: negative first entry %d", i, rs[i].First)
		case rs[i].First > rs[i].Last:
			d.fail("range %d: first %d > last %d", i, rs[i].First, rs[i].Last)
		case i > 0 && rs[i].First <= rs[i-1].Last:
			d.fail("range %d: ranges not sorted or overlapping (first %d <= previous last %d)",
				i, rs[i].First, rs[i-1].Last)
		}
	}
	return rs
}

// finish returns the sticky error, or a trailing-bytes error if input remains.
func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("trailing bytes: %d after the body", len(d.b)-d.off)
	}
	return d.err
}
