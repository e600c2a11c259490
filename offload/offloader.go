package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Defaults of Options.
const (
	// DefaultMaxBlockSize is Pulsar's default managedLedgerOffloadMaxBlockSizeInBytes.
	DefaultMaxBlockSize = 64 << 20
	// DefaultReadConcurrency bounds the ranged GETs in flight per Offloader.
	DefaultReadConcurrency = 2
	// cleanupTimeout bounds the removal of a data object whose index could not be written.
	cleanupTimeout = 30 * time.Second
)

// Options configure an Offloader. Zero values take the defaults documented per field.
type Options struct {
	// MaxBlockSize is the size of a data block (Pulsar's
	// managedLedgerOffloadMaxBlockSizeInBytes); every block but the last, and but one
	// holding a single entry larger than a block, is exactly this long. Default
	// DefaultMaxBlockSize; at least MinBlockSize.
	MaxBlockSize int
	// PartSize is the buffer of the gocloud writer of a data object (GCS's chunk, Azure's
	// block). Default MaxBlockSize. An Offloader opened on S3 by Open uploads each block as
	// one multipart part instead.
	PartSize int
	// CacheSize bounds the bytes of data blocks the read cache holds. Default 2 ×
	// MaxBlockSize (one block being read and one read ahead).
	CacheSize int64
	// ReadAheadBlocks is how many blocks after the last one a read needs are fetched in the
	// background, as far as the cache has room. 0: none.
	ReadAheadBlocks int
	// ReadConcurrency bounds the ranged GETs in flight. Default DefaultReadConcurrency.
	ReadConcurrency int
	// OffloadBytesPerSecond bounds the rate at which the managed ledgers' offloads through
	// this Offloader (ManagedLedgerPort.Offload) read ledgers from the bookies, all of them
	// together (Pulsar's managedLedgerOffloadFlowPermitsPerSecond). <= 0: no bound.
	OffloadBytesPerSecond int64
	// UserMetadata is added to both objects' user metadata (keys are stored lowercased).
	UserMetadata map[string]string
	// Registerer receives the metrics; nil: not registered.
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxBlockSize == 0 {
		o.MaxBlockSize = DefaultMaxBlockSize
	}
	if o.MaxBlockSize < MinBlockSize {
		return o, fmt.Errorf("%w: block size %d below %d", ErrInvalidArgument, o.MaxBlockSize, MinBlockSize)
	}
	if o.PartSize == 0 {
		o.PartSize = o.MaxBlockSize
	}
	if o.CacheSize == 0 {
		o.CacheSize = 2 * int64(o.MaxBlockSize)
	}
	if o.ReadConcurrency == 0 {
		o.ReadConcurrency = DefaultReadConcurrency
	}
	if o.PartSize < 0 || o.CacheSize < 0 || o.ReadAheadBlocks < 0 || o.ReadConcurrency < 0 {
		return o, fmt.Errorf("%w: negative option", ErrInvalidArgument)
	}
	return o, nil
}

// state is an Offloader's lifecycle state.
type state uint8

const (
	// stateOpen: offloads and reads are accepted.
	stateOpen state = iota
	// stateClosed: every call fails with ErrClosed; no goroutine of the Offloader runs.
	stateClosed
)

// String names s.
func (s state) String() string {
	switch s {
	case stateOpen:
		return "open"
	case stateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// spareBlockBuffers is how many block buffers an Offloader keeps between offloads.
const spareBlockBuffers = 2

// Offloader writes ledgers to, reads them from, and deletes them from one bucket. It is safe
// for concurrent use. Close it when done.
type Offloader struct {
	// Immutable after New.
	bucket     *blob.Bucket
	ownsBucket bool
	s3         *s3Multipart // set when opened on S3: data objects go up as multipart uploads
	opts       Options
	m          *metrics
	ctx        context.Context // ends at Close; fetch goroutines run under it
	cancel     context.CancelFunc
	sem        chan struct{} // one token per ranged GET in flight
	throttle   *Throttle     // bounds the offloads' bookie reads (nil: no bound)
	// spareBlocks holds block buffers of finished offloads for the next ones: a fresh
	// MaxBlockSize buffer per ledger costs its page faults and zeroing again (≈ 15% of an
	// offload's CPU on a VM) and a GC cycle's worth of garbage. At most spareBlockBuffers.
	spareBlocks chan []byte
	wg          sync.WaitGroup

	// mu guards the fields below. It is a leaf lock: nothing else is locked under it.
	mu struct {
		sync.Mutex
		state state
		// cache holds decoded blocks. Invariant: cache.size <= opts.CacheSize.
		cache blockCache
		// inflight holds the fetches started and not finished, at most one per block.
		// Invariant: a key is never both in inflight and in cache.
		inflight map[blockKey]*fetch
	}
}

// New returns an Offloader over bucket, which the caller keeps and closes after the
// Offloader.
func New(bucket *blob.Bucket, opts Options) (*Offloader, error) {
	return newOffloader(bucket, false, opts)
}

func newOffloader(bucket *blob.Bucket, owns bool, opts Options) (*Offloader, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	o := &Offloader{bucket: bucket, ownsBucket: owns, opts: opts, m: m,
		sem: make(chan struct{}, opts.ReadConcurrency), spareBlocks: make(chan []byte, spareBlockBuffers)}
	if opts.OffloadBytesPerSecond > 0 {
		o.throttle = NewThrottle(opts.OffloadBytesPerSecond, time.Now())
	}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	o.mu.cache.init(opts.CacheSize, m.cacheBytes)
	o.mu.inflight = map[blockKey]*fetch{}
	return o, nil
}

// Bucket returns the bucket the Offloader uses.
func (o *Offloader) Bucket() *blob.Bucket { return o.bucket }

// Close stops the Offloader: it cancels the reads in flight, waits for its goroutines, and
// empties the cache; it closes the bucket if Open opened it. It is idempotent. Offloads in
// progress are not waited for: their callers' contexts govern them.
func (o *Offloader) Close() error {
	o.mu.Lock()
	if o.mu.state == stateClosed {
		o.mu.Unlock()
		return nil
	}
	o.mu.state = stateClosed
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
	o.mu.Lock()
	o.mu.cache.clear()
	o.mu.Unlock()
	if o.ownsBucket {
		return o.bucket.Close()
	}
	return nil
}

func (o *Offloader) closed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.state == stateClosed
}

// Entries is the source of a ledger's entries for Offload: ids 0, 1, … in order.
// Implementations need not be safe for concurrent use.
type Entries interface {
	// Next returns the next entry's id and payload, or io.EOF after the last entry. The
	// payload is read only until the following call to Next.
	Next(ctx context.Context) (entryID int64, payload []byte, err error)
}

// SliceEntries returns Entries over payloads (entry i is payloads[i]).
func SliceEntries(payloads [][]byte) Entries { return &sliceEntries{p: payloads} }

type sliceEntries struct {
	p [][]byte
	i int
}

func (s *sliceEntries) Next(context.Context) (int64, []byte, error) {
	if s.i >= len(s.p) {
		return 0, nil, io.EOF
	}
	s.i++
	return int64(s.i - 1), s.p[s.i-1], nil
}

// RangeEntries returns Entries that read entries 0..lastEntryID through read, batch entries
// at a time (batch >= 1). Memory: one batch.
func RangeEntries(read func(ctx context.Context, first, last int64) ([][]byte, error), lastEntryID int64, batch int) Entries {
	return &rangeEntries{read: read, last: lastEntryID, batch: max(1, int64(batch))}
}

type rangeEntries struct {
	read        func(ctx context.Context, first, last int64) ([][]byte, error)
	last, batch int64
	buf         [][]byte
	bufFirst    int64
	next        int64
}

func (r *rangeEntries) Next(ctx context.Context) (int64, []byte, error) {
	if r.next > r.last {
		return 0, nil, io.EOF
	}
	if r.next-r.bufFirst >= int64(len(r.buf)) {
		end := min(r.last, r.next+r.batch-1)
		b, err := r.read(ctx, r.next, end)
		if err != nil {
			return 0, nil, err
		}
		if int64(len(b)) != end-r.next+1 {
			return 0, nil, fmt.Errorf("%w: read of entries %d..%d returned %d", ErrSourceMismatch, r.next, end, len(b))
		}
		r.buf, r.bufFirst = b, r.next
	}
	id := r.next
	r.next++
	return id, r.buf[id-r.bufFirst], nil
}

// Result describes a completed offload.
type Result struct {
	DataKey, IndexKey string
	// DataObjectLen is the data object's length; Blocks its block count.
	DataObjectLen int64
	Blocks        int
	// Entries and Bytes are the ledger's entry count and payload bytes.
	Entries, Bytes int64
}

// Offload writes ledger ledgerID, described by md and read from src, as offload attempt
// attempt: first the data object, block by block (one block buffer of memory, plus the
// driver's part buffer), then the index object. The offload is complete only once Offload
// returns nil: a reader finds no index before then. attempt must be new for every attempt
// (a retried offload uses a fresh uuid, so it never overwrites a completed one).
//
// The entries must be 0..md.LastEntryID with md.Length payload bytes in all, or Offload
// fails with ErrSourceMismatch. On any failure the data object is aborted or removed
// (best effort: a failed removal leaves an orphan with no index, which Scan lists); errors
// of the object store wrap ErrUnavailable. An error of src is returned wrapped as it is.
func (o *Offloader) Offload(ctx context.Context, ledgerID int64, attempt uuid.UUID, md LedgerMetadata, src Entries) (Result, error) {
	if o.closed() {
		return Result{}, ErrClosed
	}
	if ledgerID < 0 {
		return Result{}, fmt.Errorf("%w: ledger id %d", ErrInvalidArgument, ledgerID)
	}
	if err := md.Validate(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	res, err := o.offload(ctx, ledgerID, attempt, md, src)
	if err != nil {
		o.m.offloadErrors.Inc()
		return Result{}, fmt.Errorf("offload ledger %d attempt %s: %w", ledgerID, attempt, err)
	}
	o.m.offloadLatency.Observe(time.Since(start).Seconds())
	o.m.offloadBytes.Add(float64(res.Bytes))
	o.m.offloadedLedgers.Inc()
	return res, nil
}

func (o *Offloader) objectMetadata(role string) map[string]string {
	md := maps.Clone(o.opts.UserMetadata)
	if md == nil {
		md = map[string]string{}
	}
	md[metaRole] = role
	md[metaFormatVersion] = FormatVersion
	return md
}

func (o *Offloader) offload(ctx context.Context, ledgerID int64, attempt uuid.UUID, md LedgerMetadata, src Entries) (Result, error) {
	res := Result{DataKey: DataKey(attempt, ledgerID), IndexKey: IndexKey(attempt, ledgerID)}
	w, err := o.newBlockWriter(ctx, res.DataKey)
	if err != nil {
		o.m.writeStorageError.Inc()
		return res, err
	}
	// fail discards the data object's upload.
	fail := func(err error) (Result, error) {
		w.abort()
		return res, err
	}
	x := &Index{Metadata: md}
	// The block buffer starts no larger than the whole ledger needs.
	initCap := int(min(int64(o.opts.MaxBlockSize), BlockHeaderLen+md.Length+EntryHeaderLen*(md.LastEntryID+1)))
	var bb blockBuilder
	select {
	case bb.buf = <-o.spareBlocks:
	default:
	}
	bb.reset(0, o.opts.MaxBlockSize, initCap)
	flush := func(last bool) error {
		blockLen := o.opts.MaxBlockSize
		if last || bb.size() > blockLen {
			blockLen = bb.size()
		}
		x.Blocks = append(x.Blocks, IndexEntry{FirstEntryID: bb.first, PartID: int32(len(x.Blocks) + 1), Offset: x.DataObjectLen})
		b := bb.finish(blockLen)
		if err := w.write(b); err != nil {
			o.m.writeStorageError.Inc()
			return err
		}
		x.DataObjectLen += int64(len(b))
		o.m.writeBytes.Add(float64(len(b)))
		return nil
	}
	for {
		id, p, err := src.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("read entry %d: %w", res.Entries, err))
		}
		if id != res.Entries || id > md.LastEntryID {
			return fail(fmt.Errorf("%w: entry %d, want %d (last %d)", ErrSourceMismatch, id, res.Entries, md.LastEntryID))
		}
		if bb.n > 0 && bb.size()+EntryHeaderLen+len(p) > o.opts.MaxBlockSize {
			if err := flush(false); err != nil {
				return fail(err)
			}
			bb.reset(id, o.opts.MaxBlockSize, initCap)
		}
		bb.add(id, p)
		res.Entries++
		res.Bytes += int64(len(p))
	}
	if res.Entries != md.LastEntryID+1 || res.Bytes != md.Length {
		return fail(fmt.Errorf("%w: %d entries of %d bytes, metadata says %d of %d",
			ErrSourceMismatch, res.Entries, res.Bytes, md.LastEntryID+1, md.Length))
	}
	if bb.n > 0 {
		if err := flush(true); err != nil {
			return fail(err)
		}
	}
	// Release the block buffer before the index upload: kept for the next offload when it
	// has a whole block's capacity (a small ledger's buffer is dropped), else dropped.
	if cap(bb.buf) == o.opts.MaxBlockSize {
		select {
		case o.spareBlocks <- bb.buf[:0]:
		default:
		}
	}
	bb = blockBuilder{}
	if err := w.commit(); err != nil {
		o.m.writeStorageError.Inc()
		return res, err
	}
	res.DataObjectLen, res.Blocks = x.DataObjectLen, len(x.Blocks)
	ib := x.AppendTo(nil)
	err = o.bucket.WriteAll(ctx, res.IndexKey, ib, &blob.WriterOptions{
		ContentType: "application/octet-stream",
		Metadata:    o.objectMetadata(metaRoleIndex),
	})
	if err != nil {
		o.m.writeStorageError.Inc()
		err = storeError(ctx, "write", res.IndexKey, err)
		// The index may or may not exist now (a timeout): remove both, index first, so
		// no reader ever finds an index without its data.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if derr := o.deleteObjects(cctx, res); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", derr))
		}
		return res, err
	}
	o.m.writeBytes.Add(float64(len(ib)))
	return res, nil
}

// Delete removes the index and then the data object of ledger ledgerID's offload attempt.
// Objects already missing are not an error, so Delete may be repeated.
func (o *Offloader) Delete(ctx context.Context, ledgerID int64, attempt uuid.UUID) error {
	if o.closed() {
		return ErrClosed
	}
	err := o.deleteObjects(ctx, Result{DataKey: DataKey(attempt, ledgerID), IndexKey: IndexKey(attempt, ledgerID)})
	if err != nil {
		o.m.deleteErrors.Inc()
	}
	return err
}

// deleteObjects deletes the index, then the data object, then (on S3) any multipart upload
// of the data object left open.
func (o *Offloader) deleteObjects(ctx context.Context, r Result) error {
	for _, key := range []string{r.IndexKey, r.DataKey} {
		if err := o.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return storeError(ctx, "delete", key, err)
		}
	}
	if o.s3 != nil {
		return o.s3.abortUploads(ctx, r.DataKey)
	}
	return nil
}

// ObjectInfo describes an object Scan found.
type ObjectInfo struct {
	Key      string
	Attempt  uuid.UUID
	LedgerID int64
	Index    bool // the index object (else the data object)
	Size     int64
	ModTime  time.Time
}

// Scan calls fn for every object of the bucket whose key this package writes (others are
// skipped), in key order, until fn returns an error (which Scan returns). Orphan cleanup
// uses it: a data object without an index is an offload that never completed.
func (o *Offloader) Scan(ctx context.Context, fn func(ObjectInfo) error) error {
	it := o.bucket.List(nil)
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return storeError(ctx, "list", "", err)
		}
		id, ledgerID, index, ok := ParseKey(obj.Key)
		if !ok || obj.IsDir {
			continue
		}
		if err := fn(ObjectInfo{Key: obj.Key, Attempt: id, LedgerID: ledgerID, Index: index, Size: obj.Size, ModTime: obj.ModTime}); err != nil {
			return err
		}
	}
}
