package offload

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"gocloud.dev/blob/memblob"

	"github.com/magnetar-io/magnetar/mledger"
)

type readerFunc func(ctx context.Context, first, last int64) ([][]byte, error)

func (f readerFunc) ReadEntries(ctx context.Context, first, last int64) ([][]byte, error) {
	return f(ctx, first, last)
}

// The managed ledger's port round-trips a ledger, keeps one read handle per ledger, and
// deletes idempotently.
func TestManagedLedgerPort(t *testing.T) {
	ctx := context.Background()
	inner := memblob.OpenBucket(nil)
	b, fb := newFaultBucket(inner)
	o := newTestOffloader(t, b, Options{MaxBlockSize: 2048, CacheSize: 1 << 20})
	p := NewManagedLedgerPort(o, "aws-s3")
	if p.Driver() != "aws-s3" {
		t.Fatal(p.Driver())
	}
	payloads := randomPayloads(40, 120, 400)
	md := metadataOf(payloads)
	var maxBatch int64
	src := readerFunc(func(_ context.Context, first, last int64) ([][]byte, error) {
		maxBatch = max(maxBatch, last-first+1)
		return payloads[first : last+1], nil
	})
	req := mledger.OffloadRequest{ManagedLedger: "t/n/persistent/x", LedgerID: 40, UUID: uuid.NewString(), Entries: md.LastEntryID + 1, Size: md.Length}
	if _, err := p.Offload(ctx, req, src); err != nil {
		t.Fatal(err)
	}
	// About one block's worth of entries per read (a block is smaller than offloadReadBytes
	// here): 2048 / (average 200 bytes) ≈ 10.
	if maxBatch < 5 || maxBatch > 20 {
		t.Fatalf("entries read in batches of up to %d", maxBatch)
	}
	l := mledger.OffloadedLedger{ManagedLedger: req.ManagedLedger, LedgerID: 40, UUID: req.UUID}
	fb.resetGets()
	for i := range payloads {
		got, err := p.ReadOffloaded(ctx, l, int64(i), int64(i))
		if err != nil || !bytes.Equal(got[0], payloads[i]) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	indexGets := 0
	for _, g := range fb.gets() {
		switch g.key {
		case IndexKey(uuid.MustParse(req.UUID), 40):
			indexGets++
		case DataKey(uuid.MustParse(req.UUID), 40):
		default:
			t.Fatalf("GET of %s", g.key)
		}
	}
	if indexGets != 1 {
		t.Fatalf("the index was read %d times for %d reads", indexGets, len(payloads))
	}
	h, err := o.OpenLedger(ctx, 40, uuid.MustParse(req.UUID))
	if err != nil || string(h.Metadata().Custom["ManagedLedgerName"]) != req.ManagedLedger {
		t.Fatalf("metadata %+v, %v", h.Metadata(), err)
	}
	for range 2 {
		if err := p.DeleteOffloaded(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if k := keys(t, inner); len(k) != 0 {
		t.Fatalf("left after DeleteOffloaded: %v", k)
	}
	if _, err := p.ReadOffloaded(ctx, l, 0, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read after delete: %v", err)
	}
	bad := req
	bad.UUID = "attempt-1"
	if _, err := p.Offload(ctx, bad, src); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("non-UUID attempt: %v", err)
	}
	bad = req
	bad.Entries = 0
	if _, err := p.Offload(ctx, bad, src); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty ledger: %v", err)
	}
}

// With blocks larger than offloadReadBytes, an offload reads the bookies in batches of about
// offloadReadBytes, not a block's worth.
func TestManagedLedgerPortReadBatchCapped(t *testing.T) {
	ctx := context.Background()
	o := newTestOffloader(t, memblob.OpenBucket(nil), Options{MaxBlockSize: 16 << 20})
	p := NewManagedLedgerPort(o, "aws-s3")
	payloads := randomPayloads(41, 400, 64<<10) // about 32 KiB each, 12.5 MiB in all
	md := metadataOf(payloads)
	var maxBytes int
	src := readerFunc(func(_ context.Context, first, last int64) ([][]byte, error) {
		n := 0
		for _, e := range payloads[first : last+1] {
			n += len(e)
		}
		maxBytes = max(maxBytes, n)
		return payloads[first : last+1], nil
	})
	req := mledger.OffloadRequest{LedgerID: 41, UUID: uuid.NewString(), Entries: md.LastEntryID + 1, Size: md.Length}
	if _, err := p.Offload(ctx, req, src); err != nil {
		t.Fatal(err)
	}
	if maxBytes > 2*offloadReadBytes {
		t.Fatalf("a read of %d bytes from the bookies; want about %d", maxBytes, offloadReadBytes)
	}
}
