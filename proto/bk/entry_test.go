package bk_test

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bk"
)

func TestEntryRoundTrip(t *testing.T) {
	for _, d := range []bk.DigestType{bk.DigestNone, bk.DigestCRC32C} {
		for _, payload := range [][]byte{nil, []byte("hello"), bytes.Repeat([]byte{0xab}, 4096)} {
			b := bk.AppendEntry(nil, 11, 22, 21, 1000, d, payload)
			dl, _ := bk.DigestLen(d)
			if len(b) != bk.EntryHeaderLen+dl+len(payload) {
				t.Fatalf("digest %d: len %d", d, len(b))
			}
			e, err := bk.DecodeEntry(b, d)
			if err != nil {
				t.Fatal(err)
			}
			if e.LedgerID != 11 || e.EntryID != 22 || e.LAC != 21 || e.Length != 1000 ||
				!bytes.Equal(e.Payload, payload) {
				t.Fatalf("decoded %+v", e)
			}
			if err := bk.VerifyEntry(b, d, 11, 22); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestEntryDigest: any flipped bit in the header, digest or payload of a CRC32C entry fails
// verification with ErrDigest.
func TestEntryDigest(t *testing.T) {
	b := bk.AppendEntry(nil, 11, 22, 21, 1000, bk.DigestCRC32C, []byte("some payload"))
	for i := range b {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if _, err := bk.DecodeEntry(c, bk.DigestCRC32C); !errors.Is(err, bk.ErrDigest) {
				t.Fatalf("flip byte %d bit %d: err = %v", i, bit, err)
			}
		}
	}
}

func TestVerifyEntryIDs(t *testing.T) {
	b := bk.AppendEntry(nil, 11, 22, 21, 1000, bk.DigestCRC32C, []byte("x"))
	for _, ids := range [][2]int64{{12, 22}, {11, 23}} {
		if err := bk.VerifyEntry(b, bk.DigestCRC32C, ids[0], ids[1]); !errors.Is(err, bk.ErrDigest) {
			t.Errorf("ids %v: err = %v", ids, err)
		}
	}
	// DigestNone still checks the ids.
	n := bk.AppendEntry(nil, 11, 22, 21, 1000, bk.DigestNone, []byte("x"))
	if err := bk.VerifyEntry(n, bk.DigestNone, 11, 21); !errors.Is(err, bk.ErrDigest) {
		t.Errorf("DigestNone id mismatch: err = %v", err)
	}
}

func TestEntryMalformed(t *testing.T) {
	b := bk.AppendEntry(nil, 11, 22, 21, 1000, bk.DigestCRC32C, nil)
	for _, c := range []struct {
		name string
		b    []byte
		d    bk.DigestType
	}{
		{"empty", nil, bk.DigestNone},
		{"short header", b[:31], bk.DigestNone},
		{"short digest", b[:35], bk.DigestCRC32C},
		{"unknown digest", b, 7},
	} {
		if _, err := bk.DecodeEntry(c.b, c.d); !errors.Is(err, bk.ErrMalformed) {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
}

func TestLACBody(t *testing.T) {
	for _, d := range []bk.DigestType{bk.DigestNone, bk.DigestCRC32C} {
		b := bk.AppendLACBody(nil, 5, -1, d)
		l, lac, err := bk.DecodeLACBody(b, d)
		if err != nil || l != 5 || lac != -1 {
			t.Fatalf("digest %d: %d %d %v", d, l, lac, err)
		}
		if _, _, err := bk.DecodeLACBody(append(b, 0), d); !errors.Is(err, bk.ErrMalformed) {
			t.Errorf("trailing byte: %v", err)
		}
		if _, _, err := bk.DecodeLACBody(b[:len(b)-1], d); !errors.Is(err, bk.ErrMalformed) {
			t.Errorf("short: %v", err)
		}
	}
	b := bk.AppendLACBody(nil, 5, 9, bk.DigestCRC32C)
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		if _, _, err := bk.DecodeLACBody(c, bk.DigestCRC32C); !errors.Is(err, bk.ErrDigest) {
			t.Fatalf("flip byte %d: err = %v", i, err)
		}
	}
}

func TestMasterKey(t *testing.T) {
	want := sha1.Sum([]byte("ledgerpw"))
	if bk.MasterKey([]byte("pw")) != want {
		t.Fatal("MasterKey != SHA-1(\"ledger\" || password)")
	}
	if bk.MasterKey(nil) != sha1.Sum([]byte("ledger")) {
		t.Fatal("MasterKey(nil)")
	}
}

func TestDigestLen(t *testing.T) {
	if n, err := bk.DigestLen(bk.DigestNone); n != 0 || err != nil {
		t.Error("DigestNone")
	}
	if n, err := bk.DigestLen(bk.DigestCRC32C); n != 4 || err != nil {
		t.Error("DigestCRC32C")
	}
	if _, err := bk.DigestLen(2); !errors.Is(err, bk.ErrMalformed) {
		t.Error("unknown digest")
	}
}
