package bk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bk"
)

var testKey = bk.MasterKey([]byte("secret"))

// sampleRequests holds one request per op (and per accepted flag), keyed by name. Only the
// fields of each op are set, so a round trip must reproduce them exactly.
func sampleRequests() map[string]bk.Request {
	entry := bk.AppendEntry(nil, 7, 3, 2, 300, bk.DigestCRC32C, []byte("payload"))
	return map[string]bk.Request{
		"add": {Op: bk.OpAddEntry, RequestID: 1, LedgerID: 7, EntryID: 3, MasterKey: testKey,
			Digest: bk.DigestCRC32C, Body: entry},
		"add/recovery": {Op: bk.OpAddEntry, Flags: bk.FlagRecovery, RequestID: 1<<64 - 1,
			LedgerID: 1<<63 - 1, EntryID: 0, Digest: bk.DigestNone, Body: []byte{}},
		"read": {Op: bk.OpReadEntry, RequestID: 2, LedgerID: 7, EntryID: 3},
		"read/last/fence": {Op: bk.OpReadEntry, Flags: bk.FlagFence, RequestID: 3, LedgerID: 7,
			EntryID: bk.LastEntry, MasterKey: testKey},
		"writelac": {Op: bk.OpWriteLAC, RequestID: 4, LedgerID: 7, LAC: 5, MasterKey: testKey,
			Body: bk.AppendLACBody(nil, 7, 5, bk.DigestCRC32C)},
		"readlac": {Op: bk.OpReadLAC, RequestID: 5, LedgerID: 7},
		"longpoll": {Op: bk.OpLongPoll, RequestID: 6, LedgerID: 7, PreviousLAC: -1,
			TimeoutMs: 1<<32 - 1},
		"longpoll/piggyback": {Op: bk.OpLongPoll, Flags: bk.FlagPiggyback, RequestID: 7,
			LedgerID: 7, PreviousLAC: 9, TimeoutMs: 500},
		"force":       {Op: bk.OpForce, RequestID: 8, LedgerID: 7},
		"listentries": {Op: bk.OpListEntries, RequestID: 9, LedgerID: 7},
	}
}

// sampleResponses holds OK and error responses of every op, keyed by name.
func sampleResponses() map[string]bk.Response {
	entry := bk.AppendEntry(nil, 7, 3, 2, 300, bk.DigestCRC32C, []byte("payload"))
	return map[string]bk.Response{
		"add":          {Op: bk.OpAddEntry, RequestID: 1, LedgerID: 7, EntryID: 3},
		"add/fenced":   {Op: bk.OpAddEntry, RequestID: 1, Status: bk.StatusFenced, LedgerID: 7, EntryID: 3},
		"read":         {Op: bk.OpReadEntry, RequestID: 2, LedgerID: 7, EntryID: 3, MaxLAC: 2, Body: entry},
		"read/nosuch":  {Op: bk.OpReadEntry, RequestID: 2, Status: bk.StatusNoSuchEntry, LedgerID: 7, EntryID: 4},
		"writelac":     {Op: bk.OpWriteLAC, RequestID: 4, LedgerID: 7, EntryID: -1},
		"readlac":      {Op: bk.OpReadLAC, RequestID: 5, LedgerID: 7, EntryID: -1, LACBody: bk.AppendLACBody(nil, 7, 5, bk.DigestCRC32C), Body: entry},
		"readlac/none": {Op: bk.OpReadLAC, RequestID: 5, LedgerID: 7, EntryID: -1},
		"longpoll":     {Op: bk.OpLongPoll, RequestID: 6, LedgerID: 7, EntryID: 3, MaxLAC: 3, Body: entry},
		"longpoll/timeout": {Op: bk.OpLongPoll, RequestID: 6, Status: bk.StatusTimeout,
			LedgerID: 7, EntryID: 3},
		"force":              {Op: bk.OpForce, RequestID: 8, LedgerID: 7, EntryID: -1},
		"force/shuttingdown": {Op: bk.OpForce, RequestID: 8, Status: bk.StatusShuttingDown, LedgerID: 7},
		"listentries": {Op: bk.OpListEntries, RequestID: 9, LedgerID: 7, EntryID: -1,
			Ranges: []bk.Range{{0, 9}, {11, 11}, {12, 1 << 40}}},
		"listentries/empty":    {Op: bk.OpListEntries, RequestID: 9, LedgerID: 7},
		"listentries/noledger": {Op: bk.OpListEntries, RequestID: 9, Status: bk.StatusNoSuchLedger, LedgerID: 7},
	}
}

// normalize maps empty slices to nil so that an encoded-then-decoded message compares equal.
func normReq(r bk.Request) bk.Request {
	if len(r.Body) == 0 {
		r.Body = nil
	}
	return r
}

func normResp(r bk.Response) bk.Response {
	if len(r.Body) == 0 {
		r.Body = nil
	}
	if len(r.LACBody) == 0 {
		r.LACBody = nil
	}
	if len(r.Ranges) == 0 {
		r.Ranges = nil
	}
	return r
}

// body strips and checks the length prefix of an encoded frame.
func body(t testing.TB, frame []byte) []byte {
	t.Helper()
	if len(frame) < 4 || int(binary.BigEndian.Uint32(frame)) != len(frame)-4 {
		t.Fatalf("bad length prefix in % x", frame)
	}
	return frame[4:]
}

func TestRequestRoundTrip(t *testing.T) {
	for name, req := range sampleRequests() {
		t.Run(name, func(t *testing.T) {
			prefix := []byte("xyz")
			frame := bk.AppendRequest(prefix, &req)
			if !bytes.Equal(frame[:3], prefix) {
				t.Fatal("AppendRequest clobbered dst")
			}
			got, err := bk.DecodeRequest(body(t, frame[3:]))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normReq(got), normReq(req)) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, req)
			}
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for name, resp := range sampleResponses() {
		t.Run(name, func(t *testing.T) {
			got, err := bk.DecodeResponse(body(t, bk.AppendResponse(nil, &resp)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normResp(got), normResp(resp)) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, resp)
			}
		})
	}
}

// TestResponseErrorOmitsTail: op-specific fields of a non-OK response are not encoded.
func TestResponseErrorOmitsTail(t *testing.T) {
	r := bk.Response{Op: bk.OpReadEntry, Status: bk.StatusNoSuchEntry, LedgerID: 1, EntryID: 2,
		MaxLAC: 5, Body: []byte("x")}
	got, err := bk.DecodeResponse(body(t, bk.AppendResponse(nil, &r)))
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxLAC != 0 || got.Body != nil {
		t.Fatalf("error response carried a tail: %+v", got)
	}
}

// TestDecodedSlicesAreCapped: appending to a decoded slice must not overwrite the frame.
func TestDecodedSlicesAreCapped(t *testing.T) {
	r := bk.Response{Op: bk.OpReadLAC, LACBody: []byte("lac"), Body: []byte("entry")}
	frame := body(t, bk.AppendResponse(nil, &r))
	got, err := bk.DecodeResponse(frame)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got.LACBody, "XXXX"...)
	if again, err := bk.DecodeResponse(frame); err != nil || string(again.Body) != "entry" {
		t.Fatalf("frame overwritten: %+v, %v", again, err)
	}
}

// frame builds a raw frame body from parts (byte slices, u8, u32, i64 values).
func frame(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case []byte:
			b = append(b, v...)
		case string:
			b = append(b, v...)
		case uint8:
			b = append(b, v)
		case bk.Op:
			b = append(b, byte(v))
		case bk.Status:
			b = append(b, byte(v))
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case int64:
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		case int:
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		default:
			panic("frame: bad part")
		}
	}
	return b
}

var key20 = make([]byte, 20)

func TestDecodeRequestMalformed(t *testing.T) {
	hdr := func(op bk.Op, flags uint8) []byte { return frame(op, flags, int64(42)) }
	cases := []struct {
		name, reason string
		frame        []byte
	}{
		{"empty", "short body: op", nil},
		{"short header", "short body: request id", []byte{1, 0, 0, 0}},
		{"unknown op 0", "unknown op 0", hdr(0, 0)},
		{"unknown op 8", "unknown op 8", frame(hdr(8, 0), int64(7))},
		{"response bit", "response bit set", frame(hdr(bk.OpReadLAC, 0x80), int64(7))},
		{"flag for other op", "unknown flags 0x02", frame(hdr(bk.OpAddEntry, bk.FlagFence), int64(7))},
		{"flag on flagless op", "unknown flags 0x01", frame(hdr(bk.OpForce, bk.FlagRecovery), int64(7))},
		{"add short key", "short body: master key", frame(hdr(bk.OpAddEntry, 0), int64(1), int64(2), key20[:5])},
		{"add unknown digest", "unknown digest type 9",
			frame(hdr(bk.OpAddEntry, 0), int64(1), int64(2), key20, uint8(9), uint32(0))},
		{"add negative length", "negative length",
			frame(hdr(bk.OpAddEntry, 0), int64(1), int64(2), key20, uint8(1), uint32(1<<31))},
		{"add short entry", "short body: entry needs 10 bytes, 3 left",
			frame(hdr(bk.OpAddEntry, 0), int64(1), int64(2), key20, uint8(1), uint32(10), "abc")},
		{"add missing length", "short body: entry length",
			frame(hdr(bk.OpAddEntry, 0), int64(1), int64(2), key20, uint8(1))},
		{"add trailing", "trailing bytes: 1",
			frame(hdr(bk.OpAddEntry, 0), int64(1), int64(2), key20, uint8(1), uint32(1), "ab")},
		{"read short", "short body: master key", frame(hdr(bk.OpReadEntry, 0), int64(1), int64(2))},
		{"writelac negative length", "negative length",
			frame(hdr(bk.OpWriteLAC, 0), int64(1), int64(2), key20, uint32(0xffffffff))},
		{"longpoll short timeout", "short body: timeout",
			frame(hdr(bk.OpLongPoll, 0), int64(1), int64(2), []byte{0, 0})},
		{"readlac trailing", "trailing bytes: 2", frame(hdr(bk.OpReadLAC, 0), int64(1), "xx")},
		{"force short", "short body: ledger id", frame(hdr(bk.OpForce, 0), []byte{1, 2, 3})},
		{"list trailing", "trailing bytes: 8", frame(hdr(bk.OpListEntries, 0), int64(1), int64(2))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := bk.DecodeRequest(c.frame)
			if !errors.Is(err, bk.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("err = %q, want reason %q", err, c.reason)
			}
			if !reflect.DeepEqual(r, bk.Request{}) {
				t.Fatalf("malformed decode returned %+v", r)
			}
		})
	}
}

func TestDecodeResponseMalformed(t *testing.T) {
	hdr := func(op bk.Op, flags uint8, st bk.Status) []byte {
		return frame(op, flags, int64(42), st, int64(7), int64(3))
	}
	cases := []struct {
		name, reason string
		frame        []byte
	}{
		{"empty", "short body: op", nil},
		{"short status", "short body: status", frame(bk.OpAddEntry, uint8(0x80), int64(1))},
		{"short ids", "short body: entry id", frame(bk.OpAddEntry, uint8(0x80), int64(1), uint8(0), int64(7))},
		{"unknown op", "unknown op 200", hdr(200, 0x80, 0)},
		{"response bit missing", "response bit missing", hdr(bk.OpAddEntry, 0, 0)},
		{"request flag on response", "response bit missing", hdr(bk.OpReadEntry, bk.FlagFence, 0)},
		{"extra flags", "unknown flags 0x01", hdr(bk.OpAddEntry, 0x81, 0)},
		{"unknown status", "unknown status 12", hdr(bk.OpAddEntry, 0x80, 12)},
		{"add trailing", "trailing bytes: 1", frame(hdr(bk.OpAddEntry, 0x80, 0), "x")},
		{"error with tail", "trailing bytes: 12",
			frame(hdr(bk.OpReadEntry, 0x80, bk.StatusNoSuchEntry), int64(2), uint32(0))},
		{"read missing tail", "short body: max lac", hdr(bk.OpReadEntry, 0x80, 0)},
		{"read short entry", "short body: entry needs 5 bytes, 1 left",
			frame(hdr(bk.OpReadEntry, 0x80, 0), int64(2), uint32(5), "x")},
		{"longpoll negative length", "negative length",
			frame(hdr(bk.OpLongPoll, 0x80, 0), int64(2), uint32(0x80000000))},
		{"readlac negative lac body", "negative length",
			frame(hdr(bk.OpReadLAC, 0x80, 0), uint32(0x90000000))},
		{"readlac missing entry", "short body: last entry length",
			frame(hdr(bk.OpReadLAC, 0x80, 0), uint32(1), "x")},
		{"list negative count", "negative length",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(0xffffffff))},
		{"list short", "short body: 1000 ranges",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(1000), int64(0), int64(1))},
		{"list negative first", "negative first entry",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(1), int64(-1), int64(1))},
		{"list inverted", "first 5 > last 4",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(1), int64(5), int64(4))},
		{"list overlapping", "not sorted or overlapping",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(2), int64(0), int64(4), int64(4), int64(6))},
		{"list unsorted", "not sorted or overlapping",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(2), int64(5), int64(6), int64(0), int64(1))},
		{"list trailing", "trailing bytes: 3",
			frame(hdr(bk.OpListEntries, 0x80, 0), uint32(0), "abc")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := bk.DecodeResponse(c.frame)
			if !errors.Is(err, bk.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("err = %q, want reason %q", err, c.reason)
			}
			if !reflect.DeepEqual(r, bk.Response{}) {
				t.Fatalf("malformed decode returned %+v", r)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	retriable := map[bk.Status]bool{
		bk.StatusReadOnly: true, bk.StatusTimeout: true, bk.StatusServerError: true,
		bk.StatusShuttingDown: true,
	}
	seen := map[error]bool{}
	for s := bk.StatusOK; s <= bk.StatusShuttingDown; s++ {
		err := s.Err()
		if s == bk.StatusOK {
			if err != nil {
				t.Fatalf("StatusOK.Err() = %v", err)
			}
			continue
		}
		if err == nil || seen[err] {
			t.Fatalf("%v.Err() = %v: want a distinct sentinel", s, err)
		}
		seen[err] = true
		if got := bk.IsRetriable(fmtWrap(err)); got != retriable[s] {
			t.Errorf("IsRetriable(%v) = %v", s, got)
		}
		if strings.HasPrefix(s.String(), "Status(") {
			t.Errorf("%d has no name", s)
		}
	}
	if bk.StatusDigestMismatch.Err() != bk.ErrDigest {
		t.Error("StatusDigestMismatch must map to ErrDigest")
	}
	if bk.Status(99).String() != "Status(99)" || bk.Status(99).Err() == nil || bk.IsRetriable(bk.Status(99).Err()) {
		t.Error("undefined status handling")
	}
	if bk.IsRetriable(nil) || bk.IsRetriable(bk.ErrMalformed) {
		t.Error("IsRetriable of nil/ErrMalformed")
	}
	if !bk.IsRetriable(retriableErr{}) {
		t.Error("IsRetriable ignores Retriable() method")
	}
	if bk.OpListEntries.String() != "ListEntries" || bk.Op(0).String() != "Op(0)" {
		t.Error("Op.String")
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("context"), err) }

type retriableErr struct{}

func (retriableErr) Error() string   { return "retriable" }
func (retriableErr) Retriable() bool { return true }

// loopReader reads b over and over, without end.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.b[l.off:])
		n += c
		l.off = (l.off + c) % len(l.b)
	}
	return n, nil
}

// BenchmarkAdd1KiB measures encoding and decoding of an AddEntry request with a 1 KiB entry.
func BenchmarkAdd1KiB(b *testing.B) {
	entry := bk.AppendEntry(nil, 7, 3, 2, 300, bk.DigestCRC32C, make([]byte, 1024))
	req := bk.Request{Op: bk.OpAddEntry, RequestID: 1, LedgerID: 7, EntryID: 3, MasterKey: testKey,
		Digest: bk.DigestCRC32C, Body: entry}
	buf := bk.AppendRequest(nil, &req)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			buf = bk.AppendRequest(buf[:0], &req)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bk.DecodeRequest(buf[4:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("frame/read", func(b *testing.B) {
		// An endless stream of the same frame: Next allocates nothing per frame.
		fr := bk.NewFrameReader(&loopReader{b: buf}, 0)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fr.Next(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("entry/package", func(b *testing.B) {
		payload := make([]byte, 1024)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			entry = bk.AppendEntry(entry[:0], 7, 3, 2, 300, bk.DigestCRC32C, payload)
		}
	})
	b.Run("entry/verify", func(b *testing.B) {
		b.SetBytes(int64(len(entry)))
		b.ReportAllocs()
		for b.Loop() {
			if err := bk.VerifyEntry(entry, bk.DigestCRC32C, 7, 3); err != nil {
				b.Fatal(err)
			}
		}
	})
}
