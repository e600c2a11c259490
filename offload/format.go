package offload

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"

	"github.com/google/uuid"
)

// Format constants. They are part of the stored format (see the package doc): never change
// them.
const (
	// BlockMagic starts every data block.
	BlockMagic uint32 = 0xFBDBABCB
	// BlockHeaderLen is the length of a data block's header.
	BlockHeaderLen = 128
	// EntryHeaderLen is the length of an entry's header in a block: length int32, id int64.
	EntryHeaderLen = 12
	// IndexMagic starts the index object.
	IndexMagic uint32 = 0xDE47DE47
	// IndexHeaderLen is the fixed part of the index object before the ledger metadata.
	IndexHeaderLen = 32
	// IndexEntryLen is one block's record in the index: first entry id int64, part id int32,
	// block offset int64.
	IndexEntryLen = 20
	// ExtMagic marks Magnetar's checksum extension: in a block header at offset 28 (followed
	// by the CRC32C of the block's body), and in the index's 8-byte trailer (followed by the
	// CRC32C of everything before it). Readers of Pulsar's layout never look at either.
	ExtMagic uint32 = 0x4D474E31 // "MGN1"
	// extTrailerLen is the index trailer: ExtMagic, CRC32C.
	extTrailerLen = 8
	// FormatVersion is the value of the format-version user metadata key on both objects.
	FormatVersion = "1"
	// MinBlockSize is the smallest block that holds an entry: a header and one empty entry.
	MinBlockSize = BlockHeaderLen + EntryHeaderLen
)

// User metadata keys and values set on both objects (gocloud stores keys lowercased).
const (
	metaRole          = "role"
	metaRoleData      = "data"
	metaRoleIndex     = "index"
	metaFormatVersion = "s3managedledgeroffloaderformatversion"
)

// blockPadding is the byte pattern repeated from the end of a block's last entry to the end
// of the block.
var blockPadding = [4]byte{0xFE, 0xDC, 0xDE, 0xAD}

// paddingWord is blockPadding read as a big-endian int32: negative, so it can never be
// taken for an entry length.
const paddingWord = int32(-0x01232153) // 0xFEDCDEAD

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// DataKey returns the key of the data object of ledger ledgerID offloaded by attempt id:
// "<uuid>-ledger-<ledgerId>".
func DataKey(id uuid.UUID, ledgerID int64) string {
	return id.String() + "-ledger-" + strconv.FormatInt(ledgerID, 10)
}

// IndexKey returns the key of the index object: DataKey + "-index".
func IndexKey(id uuid.UUID, ledgerID int64) string {
	return DataKey(id, ledgerID) + "-index"
}

// ParseKey splits an object key written by this package into its attempt id and ledger id,
// and says whether it is the index. ok is false for any other key.
func ParseKey(key string) (id uuid.UUID, ledgerID int64, index bool, ok bool) {
	const uuidLen = 36
	const mid = "-ledger-"
	if len(key) < uuidLen+len(mid)+1 || key[uuidLen:uuidLen+len(mid)] != mid {
		return uuid.UUID{}, 0, false, false
	}
	id, err := uuid.Parse(key[:uuidLen])
	if err != nil || id.String() != key[:uuidLen] {
		return uuid.UUID{}, 0, false, false
	}
	rest := key[uuidLen+len(mid):]
	if n := len(rest) - len("-index"); n > 0 && rest[n:] == "-index" {
		rest, index = rest[:n], true
	}
	ledgerID, err = strconv.ParseInt(rest, 10, 64)
	if err != nil || ledgerID < 0 || strconv.FormatInt(ledgerID, 10) != rest {
		return uuid.UUID{}, 0, false, false
	}
	return id, ledgerID, index, true
}

// blockBuilder accumulates one data block. It is thread-unsafe.
//
// Invariant: len(buf) >= BlockHeaderLen once reset; buf[BlockHeaderLen:] holds n encoded
// entries with consecutive ids from first.
type blockBuilder struct {
	buf   []byte
	first int64
	n     int
}

// reset starts an empty block whose first entry will be first. It keeps buf's storage when
// it is no larger than keepCap, so one oversized entry does not pin its size; a new buffer
// starts with capacity initCap (<= keepCap).
func (b *blockBuilder) reset(first int64, keepCap, initCap int) {
	if cap(b.buf) > keepCap {
		b.buf = nil
	}
	if b.buf == nil {
		b.buf = make([]byte, 0, max(initCap, BlockHeaderLen))
	}
	b.buf = append(b.buf[:0], make([]byte, BlockHeaderLen)...)
	b.first, b.n = first, 0
}

// size is the block's length so far, without padding.
func (b *blockBuilder) size() int { return len(b.buf) }

// add appends entry id (which must be first+n) with payload.
func (b *blockBuilder) add(id int64, payload []byte) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(len(payload)))
	b.buf = binary.BigEndian.AppendUint64(b.buf, uint64(id))
	b.buf = append(b.buf, payload...)
	b.n++
}

// finish pads the block to blockLen (>= size()), fills in its header and returns it. The
// returned slice aliases the builder until the next reset.
func (b *blockBuilder) finish(blockLen int) []byte {
	for i := 0; len(b.buf) < blockLen; i++ {
		b.buf = append(b.buf, blockPadding[i%4])
	}
	h := b.buf[:BlockHeaderLen]
	binary.BigEndian.PutUint32(h[0:], BlockMagic)
	binary.BigEndian.PutUint64(h[4:], BlockHeaderLen)
	binary.BigEndian.PutUint64(h[12:], uint64(blockLen))
	binary.BigEndian.PutUint64(h[20:], uint64(b.first))
	binary.BigEndian.PutUint32(h[28:], ExtMagic)
	binary.BigEndian.PutUint32(h[32:], crc32.Checksum(b.buf[BlockHeaderLen:], castagnoli))
	return b.buf
}

// Block is a decoded data block.
type Block struct {
	// FirstEntryID is the id of Entries[0].
	FirstEntryID int64
	// Entries are the payloads of entries FirstEntryID, FirstEntryID+1, …; they alias the
	// bytes given to DecodeBlock.
	Entries [][]byte
	// Checksummed is true when the block carried Magnetar's CRC32C extension (and it
	// matched).
	Checksummed bool
}

// decbuf is a big-endian reader with a sticky error: the first short read sets err and
// every later read returns zero. Check err once, after a group of reads.
type decbuf struct {
	b   []byte
	off int
	err error
	key string
}

func (d *decbuf) fail(reason string, args ...any) {
	if d.err == nil {
		d.err = &CorruptionError{Key: d.key, Offset: int64(d.off), Reason: fmt.Sprintf(reason, args...)}
	}
}

func (d *decbuf) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b)-d.off < n {
		d.fail("truncated: need %d bytes, have %d", n, len(d.b)-d.off)
		return false
	}
	return true
}

func (d *decbuf) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decbuf) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decbuf) bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	v := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return v
}

// DecodeBlock decodes one whole data block. It checks the magic, the header and block
// lengths (the block must be exactly len(b) bytes), that the entries have consecutive ids
// from the header's first entry id and end exactly where the padding starts, the padding
// bytes, and the CRC32C when the block carries one. A block holds at least one entry.
// Errors wrap ErrCorrupt (a *CorruptionError whose Key is empty).
func DecodeBlock(b []byte) (Block, error) { return decodeBlock(b, "") }

func decodeBlock(b []byte, key string) (Block, error) {
	d := &decbuf{b: b, key: key}
	magic := d.u32()
	headerLen := d.u64()
	blockLen := d.u64()
	first := int64(d.u64())
	ext := d.u32()
	sum := d.u32()
	if d.err != nil {
		return Block{}, d.err
	}
	switch {
	case magic != BlockMagic:
		d.off = 0
		d.fail("block magic %#x, want %#x", magic, BlockMagic)
	case headerLen != BlockHeaderLen:
		d.off = 4
		d.fail("block header length %d, want %d", headerLen, BlockHeaderLen)
	case blockLen != uint64(len(b)):
		d.off = 12
		d.fail("block length %d, have %d bytes", blockLen, len(b))
	case first < 0:
		d.off = 20
		d.fail("negative first entry id %d", first)
	}
	if d.err != nil {
		return Block{}, d.err
	}
	blk := Block{FirstEntryID: first}
	if ext == ExtMagic {
		if got := crc32.Checksum(b[BlockHeaderLen:], castagnoli); got != sum {
			d.off = 32
			d.fail("block checksum %#x, computed %#x", sum, got)
			return Block{}, d.err
		}
		blk.Checksummed = true
	}
	d.off = BlockHeaderLen
	for len(b)-d.off >= EntryHeaderLen {
		at := d.off
		n := int32(d.u32())
		if n == paddingWord {
			d.off = at
			break
		}
		id := int64(d.u64())
		if n < 0 {
			d.off = at
			d.fail("negative entry length %d", n)
			return Block{}, d.err
		}
		if want := first + int64(len(blk.Entries)); id != want {
			d.off = at + 4
			d.fail("entry id %d, want %d", id, want)
			return Block{}, d.err
		}
		p := d.bytes(int(n))
		if d.err != nil {
			return Block{}, d.err
		}
		blk.Entries = append(blk.Entries, p)
	}
	if len(blk.Entries) == 0 {
		d.fail("block holds no entry")
		return Block{}, d.err
	}
	for i := d.off; i < len(b); i++ {
		if b[i] != blockPadding[(i-d.off)%4] {
			d.off = i
			d.fail("bad padding byte %#x", b[i])
			return Block{}, d.err
		}
	}
	return blk, nil
}

// Index is a decoded index object: where each block of the data object starts, and the
// ledger's metadata.
//
// Invariants (checked by DecodeIndex): Blocks is non-empty iff the ledger has entries;
// Blocks[0] starts at entry 0 and offset 0; first entry ids and offsets strictly increase,
// part ids are 1, 2, …; every block is at least MinBlockSize bytes and ends within
// DataObjectLen; the last block's first entry is at most Metadata.LastEntryID.
type Index struct {
	// DataObjectLen is the data object's length in bytes.
	DataObjectLen int64
	// Blocks lists the data object's blocks in order.
	Blocks []IndexEntry
	// Metadata is the ledger's metadata at offload.
	Metadata LedgerMetadata
	// Checksummed is true when the index carried Magnetar's CRC32C trailer.
	Checksummed bool
}

// IndexEntry locates one data block.
type IndexEntry struct {
	FirstEntryID int64 // id of the block's first entry
	PartID       int32 // the block's ordinal, from 1
	Offset       int64 // the block's first byte in the data object
}

// blockOf returns the index of the block holding entry id (0 <= id <= LastEntryID).
func (x *Index) blockOf(id int64) int {
	i, found := slices.BinarySearchFunc(x.Blocks, id, func(e IndexEntry, id int64) int {
		switch {
		case e.FirstEntryID < id:
			return -1
		case e.FirstEntryID > id:
			return 1
		}
		return 0
	})
	if found {
		return i
	}
	return i - 1
}

// blockSpan returns block i's byte offset and length in the data object.
func (x *Index) blockSpan(i int) (off, n int64) {
	off = x.Blocks[i].Offset
	if i+1 < len(x.Blocks) {
		return off, x.Blocks[i+1].Offset - off
	}
	return off, x.DataObjectLen - off
}

// blockEntries returns the first and last entry id of block i.
func (x *Index) blockEntries(i int) (first, last int64) {
	first = x.Blocks[i].FirstEntryID
	if i+1 < len(x.Blocks) {
		return first, x.Blocks[i+1].FirstEntryID - 1
	}
	return first, x.Metadata.LastEntryID
}

// AppendTo appends the encoded index (with the checksum trailer) to dst.
func (x *Index) AppendTo(dst []byte) []byte {
	start := len(dst)
	md := x.Metadata.appendProto(nil)
	total := IndexHeaderLen + len(md) + IndexEntryLen*len(x.Blocks) + extTrailerLen
	dst = binary.BigEndian.AppendUint32(dst, IndexMagic)
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint64(dst, uint64(x.DataObjectLen))
	dst = binary.BigEndian.AppendUint64(dst, BlockHeaderLen)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(x.Blocks)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(md)))
	dst = append(dst, md...)
	for _, e := range x.Blocks {
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.FirstEntryID))
		dst = binary.BigEndian.AppendUint32(dst, uint32(e.PartID))
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.Offset))
	}
	sum := crc32.Checksum(dst[start:], castagnoli)
	dst = binary.BigEndian.AppendUint32(dst, ExtMagic)
	return binary.BigEndian.AppendUint32(dst, sum)
}

// DecodeIndex decodes an index object and checks its invariants (see Index). An index
// without Magnetar's trailer (as Pulsar writes it) is accepted, unchecksummed. Errors wrap
// ErrCorrupt.
func DecodeIndex(b []byte) (*Index, error) { return decodeIndex(b, "") }

func decodeIndex(b []byte, key string) (*Index, error) {
	d := &decbuf{b: b, key: key}
	magic := d.u32()
	total := d.u32()
	dataLen := int64(d.u64())
	headerLen := d.u64()
	count := d.u32()
	mdLen := d.u32()
	if d.err != nil {
		return nil, d.err
	}
	switch {
	case magic != IndexMagic:
		d.off = 0
		d.fail("index magic %#x, want %#x", magic, IndexMagic)
	case uint64(total) != uint64(len(b)):
		d.off = 4
		d.fail("index length %d, have %d bytes", total, len(b))
	case dataLen < 0:
		d.off = 8
		d.fail("negative data object length %d", dataLen)
	case headerLen != BlockHeaderLen:
		d.off = 16
		d.fail("data block header length %d, want %d", headerLen, BlockHeaderLen)
	}
	if d.err != nil {
		return nil, d.err
	}
	body := uint64(IndexHeaderLen) + uint64(mdLen) + uint64(count)*IndexEntryLen
	x := &Index{DataObjectLen: dataLen}
	switch uint64(len(b)) {
	case body:
	case body + extTrailerLen:
		t := b[len(b)-extTrailerLen:]
		if binary.BigEndian.Uint32(t) != ExtMagic {
			d.off = len(b) - extTrailerLen
			d.fail("index trailer magic %#x, want %#x", binary.BigEndian.Uint32(t), ExtMagic)
			return nil, d.err
		}
		if got, want := crc32.Checksum(b[:len(b)-extTrailerLen], castagnoli), binary.BigEndian.Uint32(t[4:]); got != want {
			d.off = len(b) - 4
			d.fail("index checksum %#x, computed %#x", want, got)
			return nil, d.err
		}
		x.Checksummed = true
	default:
		d.off = 24
		d.fail("%d blocks and %d metadata bytes do not fill an index of %d bytes", count, mdLen, len(b))
		return nil, d.err
	}
	md, err := decodeMetadata(d.bytes(int(mdLen)))
	if d.err != nil {
		return nil, d.err
	}
	if err != nil {
		d.fail("ledger metadata: %v", err)
		return nil, d.err
	}
	x.Metadata = md
	x.Blocks = make([]IndexEntry, 0, count)
	for i := range int(count) {
		at := d.off
		e := IndexEntry{FirstEntryID: int64(d.u64()), PartID: int32(d.u32()), Offset: int64(d.u64())}
		if d.err != nil {
			return nil, d.err
		}
		d.off = at
		switch {
		case e.PartID != int32(i+1):
			d.fail("block %d has part id %d", i, e.PartID)
		case i == 0 && (e.FirstEntryID != 0 || e.Offset != 0):
			d.fail("first block at entry %d offset %d, want 0 and 0", e.FirstEntryID, e.Offset)
		case i > 0 && e.FirstEntryID <= x.Blocks[i-1].FirstEntryID:
			d.fail("block %d first entry %d not after %d", i, e.FirstEntryID, x.Blocks[i-1].FirstEntryID)
		case i > 0 && e.Offset-x.Blocks[i-1].Offset < MinBlockSize:
			d.fail("block %d at offset %d overlaps block %d at %d", i, e.Offset, i-1, x.Blocks[i-1].Offset)
		case e.FirstEntryID > md.LastEntryID:
			d.fail("block %d starts at entry %d past the last entry %d", i, e.FirstEntryID, md.LastEntryID)
		}
		if d.err != nil {
			return nil, d.err
		}
		d.off = at + IndexEntryLen
		x.Blocks = append(x.Blocks, e)
	}
	switch n := len(x.Blocks); {
	case n == 0 && (md.LastEntryID != -1 || dataLen != 0):
		d.fail("no blocks for a ledger ending at entry %d with %d data bytes", md.LastEntryID, dataLen)
	case n > 0 && dataLen-x.Blocks[n-1].Offset < MinBlockSize:
		d.fail("last block at offset %d beyond the data object's %d bytes", x.Blocks[n-1].Offset, dataLen)
	}
	if d.err != nil {
		return nil, d.err
	}
	return x, nil
}

// checkBlock checks that decoded block i agrees with the index: same first entry, and
// exactly the entries up to the next block's first (or the ledger's last entry).
func (x *Index) checkBlock(i int, blk Block, key string) error {
	first, last := x.blockEntries(i)
	off, _ := x.blockSpan(i)
	if blk.FirstEntryID != first || int64(len(blk.Entries)) != last-first+1 {
		return &CorruptionError{Key: key, Offset: off, Reason: fmt.Sprintf(
			"block %d holds entries %d..%d, the index says %d..%d",
			i, blk.FirstEntryID, blk.FirstEntryID+int64(len(blk.Entries))-1, first, last)}
	}
	return nil
}

// maxIndexLen bounds the index object a reader accepts: a ledger of 2^31 blocks is not
// offloaded by this package, and reading a huge corrupt object would exhaust memory.
const maxIndexLen = 64 << 20
