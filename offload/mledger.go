package offload

import (
	"container/list"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/magnetar-io/magnetar/mledger"
)

// offloadReadBytes is about how many bytes of entries an offload reads from the bookies at
// a time.
const offloadReadBytes = 1 << 20

// maxOpenHandles bounds the read handles (each holds one ledger's index) a ManagedLedgerPort
// keeps open.
const maxOpenHandles = 1024

// ManagedLedgerPort is the managed ledger's Offloader port (mledger.Offloader) on an
// Offloader. It keeps the read handles of recently read ledgers (bounded), so a backlog drain
// reads each index once. It is safe for concurrent use.
type ManagedLedgerPort struct {
	o      *Offloader
	driver string

	// mu guards the handle cache. Leaf lock.
	mu struct {
		sync.Mutex
		lru     list.List // of *ReadHandle, most recently used at the front
		handles map[handleKey]*list.Element
	}
}

type handleKey struct {
	ledger  int64
	attempt uuid.UUID
}

var _ mledger.Offloader = (*ManagedLedgerPort)(nil)

// NewManagedLedgerPort returns the port on o; driver is the configured
// managedLedgerOffloadDriver (recorded in each ledger's offload context).
func NewManagedLedgerPort(o *Offloader, driver string) *ManagedLedgerPort {
	p := &ManagedLedgerPort{o: o, driver: driver}
	p.mu.handles = map[handleKey]*list.Element{}
	return p
}

// Driver implements mledger.Offloader.
func (p *ManagedLedgerPort) Driver() string { return p.driver }

// Offload implements mledger.Offloader: it offloads entries 0..req.Entries-1 read through r
// in batches of about a block's worth (at most offloadReadBytes), and returns no driver metadata (the objects are
// named by the ledger id and attempt alone).
func (p *ManagedLedgerPort) Offload(ctx context.Context, req mledger.OffloadRequest, r mledger.EntryReader) (map[string]string, error) {
	id, err := parseAttempt(req.UUID)
	if err != nil {
		return nil, err
	}
	if req.Entries <= 0 || req.Size < 0 {
		return nil, fmt.Errorf("%w: ledger %d with %d entries of %d bytes", ErrInvalidArgument, req.LedgerID, req.Entries, req.Size)
	}
	md := LedgerMetadata{LastEntryID: req.Entries - 1, Length: req.Size}
	if req.ManagedLedger != "" {
		md.Custom = map[string][]byte{"ManagedLedgerName": []byte(req.ManagedLedger)}
	}
	// Reads of a block's worth, at most offloadReadBytes: each read batch is held in memory
	// beside the block buffer, and its response shares the bookie connection with the adds of
	// the topic's current ledger (a large one holds their acknowledgements back).
	avg := max(1, req.Size/req.Entries)
	batch := int(min(1000, max(1, min(int64(p.o.opts.MaxBlockSize), offloadReadBytes)/avg)))
	// Each read first waits for the Offloader's throttle (Options.OffloadBytesPerSecond), charged
	// with the batch's estimated bytes, as Pulsar charges managedLedgerOffloadFlowPermitsPerSecond:
	// reading, building blocks, checksumming and uploading then all run at most at its rate,
	// and leave the CPU to the publish path.
	read := func(ctx context.Context, first, last int64) ([][]byte, error) {
		if err := p.o.throttle.Wait(ctx, (last-first+1)*avg); err != nil {
			return nil, err
		}
		return r.ReadEntries(ctx, first, last)
	}
	_, err = p.o.Offload(ctx, req.LedgerID, id, md, RangeEntries(read, req.Entries-1, batch))
	return nil, err
}

// ReadOffloaded implements mledger.Offloader.
func (p *ManagedLedgerPort) ReadOffloaded(ctx context.Context, l mledger.OffloadedLedger, first, last int64) ([][]byte, error) {
	h, err := p.handle(ctx, l)
	if err != nil {
		return nil, err
	}
	return h.Read(ctx, first, last)
}

// DeleteOffloaded implements mledger.Offloader: it deletes both objects and any multipart
// upload of the attempt left open; missing objects are fine.
func (p *ManagedLedgerPort) DeleteOffloaded(ctx context.Context, l mledger.OffloadedLedger) error {
	id, err := parseAttempt(l.UUID)
	if err != nil {
		return err
	}
	k := handleKey{l.LedgerID, id}
	p.mu.Lock()
	if e := p.mu.handles[k]; e != nil {
		p.mu.lru.Remove(e)
		delete(p.mu.handles, k)
	}
	p.mu.Unlock()
	return p.o.Delete(ctx, l.LedgerID, id)
}

// handle returns the read handle of l, opening it (one GET of the index) if it is not kept.
func (p *ManagedLedgerPort) handle(ctx context.Context, l mledger.OffloadedLedger) (*ReadHandle, error) {
	id, err := parseAttempt(l.UUID)
	if err != nil {
		return nil, err
	}
	k := handleKey{l.LedgerID, id}
	p.mu.Lock()
	if e := p.mu.handles[k]; e != nil {
		p.mu.lru.MoveToFront(e)
		h := e.Value.(*ReadHandle)
		p.mu.Unlock()
		return h, nil
	}
	p.mu.Unlock()
	h, err := p.o.OpenLedger(ctx, l.LedgerID, id)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.mu.handles[k]; e != nil { // opened concurrently: keep the first
		return e.Value.(*ReadHandle), nil
	}
	p.mu.handles[k] = p.mu.lru.PushFront(h)
	for p.mu.lru.Len() > maxOpenHandles {
		e := p.mu.lru.Back()
		old := e.Value.(*ReadHandle)
		p.mu.lru.Remove(e)
		delete(p.mu.handles, handleKey{old.ledgerID, old.attempt})
	}
	return h, nil
}

func parseAttempt(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || id.String() != strings.ToLower(s) {
		return uuid.UUID{}, fmt.Errorf("%w: attempt %q is not a UUID", ErrInvalidArgument, s)
	}
	return id, nil
}
