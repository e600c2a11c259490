// Package offload is the object-store side of tiered storage: it writes a closed ledger's
// entries to an object store, reads ranges of them back, and deletes them, in the layout of
// Pulsar's jcloud offloader (a data object of blocks and an index object per ledger and
// offload attempt). The managed ledger decides what to offload and when; this package only
// moves bytes.
//
// One blob interface, gocloud.dev/blob, serves every driver, opened by Pulsar's driver names
// and broker.conf keys (Config, Open): "aws-s3" or "S3" (the AWS SDK v2, any S3-compatible
// server through s3ManagedLedgerOffloadServiceEndpoint with path-style addressing),
// "google-cloud-storage", "azureblob", and "filesystem" (a local directory named by
// fileSystemURI; Pulsar's filesystem offloader writes Hadoop files instead, this one writes
// the same objects as the others, one file each). Tests use gocloud's memblob through New.
//
// ManagedLedgerPort adapts an Offloader to the managed ledger's port (mledger.Offloader):
// the broker passes NewManagedLedgerPort(o, cfg.Driver) as mledger's Config.Offloader.
//
// # Usage
//
//	o, err := offload.Open(ctx, cfg, registerer) // cfg from broker.conf via Config.Set
//	attempt := uuid.New()                        // a fresh uuid per offload attempt
//	res, err := o.Offload(ctx, ledgerID, attempt, md, offload.RangeEntries(readFromBookies, md.LastEntryID, 100))
//	// … record (ledgerID, attempt) as complete in the ledger's metadata, then later:
//	h, err := o.OpenLedger(ctx, ledgerID, attempt)
//	entries, err := h.Read(ctx, first, last)
//	err = o.Delete(ctx, ledgerID, attempt) // when retention trims the ledger
//
// # Caller's obligations
//
//  1. Offload only closed ledgers, with md.LastEntryID and md.Length as recorded when the
//     ledger closed; Offload checks the entries against them.
//  2. Use a new attempt uuid for every Offload call, and record it before calling Offload
//     (so an attempt that crashes half-way can be found and deleted) — a retried offload
//     then never overwrites a completed one.
//  3. Treat an offload as complete only when Offload returned nil: the index is written
//     last, and a reader finds no index before then.
//  4. Retry errors for which IsRetryable is true (ErrUnavailable) after a backoff; the
//     others (ErrCorrupt, ErrNotFound, ErrSourceMismatch, ErrInvalidArgument) are final.
//  5. Close the Offloader when done; Close waits for the background fetches.
//
// # Object naming
//
// An offload attempt (a random uuid) of ledger L writes two objects:
//
//	<uuid>-ledger-<L>         the data object: blocks of entries
//	<uuid>-ledger-<L>-index   the index object: where each block starts, and L's metadata
//
// Both carry the user metadata role=data|index and
// s3managedledgeroffloaderformatversion=1 (OpenLedger rejects another version), plus
// Options.UserMetadata.
//
// # Data object
//
// The data object is a sequence of blocks. On S3 it is a multipart upload whose part n is
// block n (the AWS SDK's multipart API, so the block buffer is the part and a failed upload
// is aborted); on the other drivers it is one streamed gocloud upload (part size
// Options.PartSize). Every block is exactly MaxBlockSize bytes except the last one (as long as its
// entries) and a block holding a single entry too large for a block (as long as that
// entry). All integers are big-endian.
//
//	block:
//	 0       4 magic         0xFBDBABCB
//	 4       8 headerLen     128
//	12       8 blockLen      length of the whole block, header and padding included
//	20       8 firstEntryId  id of the block's first entry
//	28       4 extMagic      0x4D474E31 "MGN1" (0 in blocks written without the extension)
//	32       4 crc32c        CRC32C (Castagnoli) of bytes [128, blockLen) when extMagic is set
//	36      92 zero
//	128        entries, each:
//	           +0  4 entryLen  payload length (>= 0)
//	           +4  8 entryId   firstEntryId, firstEntryId+1, … (consecutive)
//	           +12 entryLen bytes of payload
//	           padding to blockLen: the bytes FE DC DE AD repeated (read as an int32, the
//	           first four are negative, so they cannot be taken for an entry length)
//
// A block holds at least one entry. The writer keeps one block in memory; an Offloader keeps
// up to two whole-block buffers of finished offloads for the next ones (a fresh buffer per
// ledger costs its page faults and zeroing again).
//
// # Index object
//
//	 0       4 magic          0xDE47DE47
//	 4       4 indexLen       length of the whole index object
//	 8       8 dataObjectLen  length of the data object
//	16       8 dataHeaderLen  128
//	24       4 blockCount     n
//	28       4 metadataLen    m
//	32       m ledger metadata: BookKeeper's LedgerMetadataFormat protobuf (quorumSize,
//	           ensembleSize, length, lastEntryId, state CLOSED, segments, digestType,
//	           ackQuorumSize, ctime, customMetadata; never the password)
//	32+m  n×20 one record per block, in order:
//	           +0 8 firstEntryId   +8 4 partId (1, 2, …)   +12 8 blockOffset
//	end-8    4 extMagic       0x4D474E31 "MGN1"
//	end-4    4 crc32c         CRC32C of every byte before the trailer
//
// Block i spans [blockOffset(i), blockOffset(i+1)), the last one up to dataObjectLen. An
// empty ledger has no blocks and an empty data object. The checksum extension sits where a
// reader of Pulsar's layout does not look (header padding, after the last record), and this
// package reads objects without it (DecodeIndex, DecodeBlock).
//
// # Reads
//
// OpenLedger fetches the index once (one GET). ReadHandle.Read of entries [a, b] finds the
// blocks holding them from the index (the last block starting at or before a, through the
// one holding b) and fetches each with one ranged GET of exactly that block — never the
// whole object — unless the block is cached or already being fetched; it then starts
// fetching up to Options.ReadAheadBlocks following blocks in the background, as many as fit
// in the cache beside the ones being read. Decoded blocks go into an LRU cache bounded by
// Options.CacheSize bytes, shared by all the Offloader's handles. Every block is checked
// against its header, its checksum and the index before it is used or cached; a failed
// fetch is not cached.
//
// # Goroutines
//
// The package starts one kind of goroutine: a block fetch (runFetch), one per block being
// fetched, started by Read (for the blocks it needs and for read-ahead) and owned by the
// Offloader. It waits for one of Options.ReadConcurrency GET slots, performs one ranged GET
// under the Offloader's context, and completes a fetch that any number of reads wait on.
// Close cancels that context and waits for them. The blob drivers run goroutines of their
// own (the GCS and Azure uploads of a data object stream through one).
//
// # Concurrency
//
// Offloader and ReadHandle are safe for concurrent use. Offloader.mu guards the cache and
// the in-flight fetches and is a leaf lock; Throttle.mu guards a throttle's token bucket and
// is a leaf lock too.
//
// # Throttle
//
// Offloading costs CPU (reading the ledger back from the bookies, building and checksumming
// blocks, signing and sending the uploads) that the publish path needs on a small machine.
// Options.OffloadBytesPerSecond (broker.conf's managedLedgerOffloadFlowPermitsPerSecond, the
// name of Pulsar's offload read throttle; Config defaults it to DefaultFlowPermitsPerSecond,
// -1 for none) bounds the bytes per second that all the managed ledgers' offloads through one
// Offloader read from the bookies together: ManagedLedgerPort.Offload waits on the Offloader's
// Throttle before each bookie read, charged with the read's estimated bytes (the ledger's
// average entry size times the entries). Reads of offloaded data are not throttled.
package offload
