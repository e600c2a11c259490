// Package bk is the bookie wire protocol: the binary TCP framing spoken between ledger clients
// and bookies, the BookKeeper entry format, and the explicit-LAC body. It is a pure codec: it
// does no I/O beyond reading an io.Reader in FrameReader, starts no goroutines, and every
// function is safe for concurrent use (FrameReader itself is owned by one goroutine).
//
// # Usage
//
//	// client side
//	buf = bk.AppendRequest(buf[:0], &req)  // whole frame, length prefix included
//	conn.Write(buf)
//	fr := bk.NewFrameReader(conn, bk.MaxFrameLen)
//	frame, err := fr.Next()                // valid until the next Next
//	resp, err := bk.DecodeResponse(frame)  // resp.Body aliases frame: copy to keep it
//
// Caller obligations:
//  1. Copy any decoded byte slice (Request.Body, Response.Body, Response.LACBody,
//     Entry.Payload) that must outlive the frame buffer it was decoded from.
//  2. Close the connection on any FrameReader or Decode error: the stream cannot be
//     resynchronised, and a peer that sent a malformed frame is not trusted further.
//  3. Keep encoded frames within MaxFrameLen; the encoders do not check.
//
// # Frames
//
// All integers are fixed-width big-endian; i64 is two's complement. A byte string is a u32
// length followed by that many bytes. A u32 length or count with the top bit set is rejected
// as negative (peers may read it as a signed int32). Every frame starts with a u32 length of
// the bytes that follow it; a length above the receiver's limit (MaxFrameLen by default)
// closes the connection.
//
// Request frame:
//
//	+----------+-------+---------+---------------+------------------+
//	| length   | op    | flags   | request id    | body (per op)    |
//	| u32      | u8    | u8      | u64           |                  |
//	+----------+-------+---------+---------------+------------------+
//	            \____________ length bytes ______________________/
//
// Response frame (flags is always exactly FlagResponse = 0x80, so a response can never be
// mistaken for a request, whose flags never have that bit):
//
//	+----------+-------+---------+---------------+--------+-----------+----------+---------+
//	| length   | op    | flags   | request id    | status | ledger id | entry id | tail    |
//	| u32      | u8    | u8=0x80 | u64           | u8     | i64       | i64      | per op  |
//	+----------+-------+---------+---------------+--------+-----------+----------+---------+
//
// A response echoes the op and request id of its request. The tail is present only when
// status is StatusOK; an error response ends after the entry id.
//
// # Request bodies
//
//	AddEntry     (flags: FlagRecovery)
//	+-----------+----------+----------------+--------+-------------------------+
//	| ledger id | entry id | master key     | digest | entry (byte string)     |
//	| i64       | i64      | [20]byte       | u8     | u32 len | header|dig|pl |
//	+-----------+----------+----------------+--------+-------------------------+
//
//	ReadEntry    (flags: FlagFence; entry id -1 = the last entry the bookie holds;
//	              master key is checked when fencing)
//	+-----------+----------+----------------+
//	| ledger id | entry id | master key     |
//	| i64       | i64      | [20]byte       |
//	+-----------+----------+----------------+
//
//	WriteLAC
//	+-----------+----------+----------------+------------------------------+
//	| ledger id | lac      | master key     | LAC body (byte string)       |
//	| i64       | i64      | [20]byte       | u32 len | ledger|lac|digest  |
//	+-----------+----------+----------------+------------------------------+
//
//	LongPoll     (flags: FlagPiggyback = also return entry previousLAC+1 if present)
//	+-----------+--------------+------------+
//	| ledger id | previous lac | timeout ms |
//	| i64       | i64          | u32        |
//	+-----------+--------------+------------+
//
//	ReadLAC, Force, ListEntries
//	+-----------+
//	| ledger id |
//	| i64       |
//	+-----------+
//
// A flag an op does not list makes the request malformed.
//
// # Response tails (StatusOK only)
//
//	ReadEntry, LongPoll             ReadLAC
//	+---------+------------------+  +--------------------+---------------------+
//	| max lac | entry (bytes)    |  | LAC body (bytes)   | last entry (bytes)  |
//	| i64     | u32 len | ...    |  | u32 len | ...      | u32 len | ...       |
//	+---------+------------------+  +--------------------+---------------------+
//	(LongPoll without piggyback, or without entry previousLAC+1: empty entry)
//	(ReadLAC: either byte string may be empty)
//
//	ListEntries                                  AddEntry, WriteLAC, Force
//	+-------+-------------+-----+-------------+  (no tail)
//	| count | first, last | ... | first, last |
//	| u32   | i64, i64    |     | i64, i64    |
//	+-------+-------------+-----+-------------+
//	(inclusive ranges, first >= 0, first <= last, sorted, non-overlapping)
//
// # Entry format (as BookKeeper's DigestManager)
//
//	+-----------+----------+--------------------+-----------+--------+---------+
//	| ledger id | entry id | last add confirmed | length    | digest | payload |
//	| i64       | i64      | i64                | i64       | 0 or 4 |         |
//	+-----------+----------+--------------------+-----------+--------+---------+
//	 \______________ header, EntryHeaderLen = 32 ____________/
//
// length is the cumulative ledger length in bytes including this entry's payload; last add
// confirmed is the writer's LAC when it sent the entry (the piggybacked LAC). The digest is
// absent for DigestNone and, for DigestCRC32C, the u32 CRC32C (Castagnoli) of header then
// payload. The client packages the entry; the bookie stores and returns the entry bytes
// exactly as the client sent them, and readers verify the digest and the ids (VerifyEntry).
//
// # Explicit LAC body
//
//	+-----------+----------+--------+
//	| ledger id | lac      | digest |   digest: CRC32C over the 16 bytes before it
//	| i64       | i64      | 0 or 4 |   (absent for DigestNone)
//	+-----------+----------+--------+
//
// # Frozen constants
//
// Op, flag, Status and DigestType values, FlagResponse, MasterKeyLen, EntryHeaderLen,
// LACBodyLen and the layouts above are on the wire and in stored entries: never renumber or
// reorder them. New ops, flags or statuses get new values; peers reject values they do not
// know.
//
// # Errors
//
// Decoders return errors wrapping ErrMalformed (structure), ErrDigest (integrity) or
// ErrFrameTooLarge (framing). Status.Err maps each wire status to one sentinel error in a single
// table, and IsRetriable is the retry classifier.
package bk
