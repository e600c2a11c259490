// Package compression decompresses Pulsar entry payloads: the codecs a Pulsar client may
// name in MessageMetadata.compression (NONE, LZ4, ZLIB, ZSTD, SNAPPY), bounded by the
// metadata's uncompressed_size so that a small entry cannot claim (or expand to) more than
// the caller's limit.
//
// # Formats
//
// The payload of a compressed entry (a single message, or the whole batch of
// SingleMessageMetadata records) is compressed as one unit; uncompressed_size is its size
// before compression. The codecs' formats, as pulsar-client-go and the Java client write
// them:
//
//	LZ4     the raw LZ4 block format (no frame header, no checksum)
//	ZLIB    RFC 1950: a zlib header, deflate data and an Adler-32 checksum
//	ZSTD    one or more Zstandard frames
//	SNAPPY  the raw Snappy block format (a varint length, then the elements; no framing)
//
// # Usage
//
//	payload, err := compression.Decompress(meta, payload, maxMessageSize)
//	if err != nil {
//		// errors.Is(err, compression.ErrTooLarge / ErrCorrupt / ErrUnsupported)
//	}
//	msgs, err := pulsar.ParseBatch(payload, pulsar.NumMessages(meta))
//
// The caller's obligations:
//
//  1. Decompress only unencrypted payloads: an encrypted entry is compressed before it is
//     encrypted, so it must be decrypted first.
//  2. Pass the largest uncompressed payload it accepts as the limit (the broker's
//     max_message_size); larger claims fail with ErrTooLarge before any allocation.
//
// # Invariants
//
// A successful Decompress of a compressed payload returns a new slice of exactly
// uncompressed_size bytes; for NONE it returns the payload itself. Output is never written
// past uncompressed_size, whatever the input claims.
//
// # Concurrency
//
// Decompress is safe for concurrent use and starts no goroutines: the ZSTD decoder is one
// shared, synchronous decoder (DecodeAll is safe for concurrent calls).
package compression
