package offload

import (
	"context"
	"errors"
	"fmt"

	"gocloud.dev/gcerrors"
)

// Errors. Callers test them with errors.Is.
var (
	// ErrUnavailable: the object store failed a request (network, throttling, a 5xx, an
	// expired credential). It is retryable: the same call may succeed later. Readers back
	// off before retrying; the offloaded copy is not known to be damaged.
	ErrUnavailable = errors.New("offload: object store unavailable")
	// ErrNotFound: an object of the offloaded ledger does not exist (never written, an
	// offload that did not complete, or deleted). Not retryable.
	ErrNotFound = errors.New("offload: object not found")
	// ErrCorrupt: an object does not decode: bad magic, lengths that disagree, entry ids out
	// of sequence, a checksum mismatch. Not retryable; the offloaded copy is unusable.
	ErrCorrupt = errors.New("offload: corrupt object")
	// ErrUnsupportedFormat: an object was written in a format version this code does not
	// read.
	ErrUnsupportedFormat = errors.New("offload: unsupported format version")
	// ErrSourceMismatch: the entries handed to Offload disagree with the ledger metadata
	// (an id out of sequence, a count or byte length other than the metadata's). Nothing
	// is left in the object store.
	ErrSourceMismatch = errors.New("offload: entries disagree with the ledger metadata")
	// ErrInvalidArgument: a bad entry range, ledger id or option.
	ErrInvalidArgument = errors.New("offload: invalid argument")
	// ErrBadConfig: a configuration key has a bad or missing value. The error is a
	// *ConfigError naming the key.
	ErrBadConfig = errors.New("offload: bad configuration")
	// ErrClosed: the Offloader or ReadHandle is closed.
	ErrClosed = errors.New("offload: closed")
)

// IsRetryable reports whether err is worth retrying after a backoff: an object-store
// failure (ErrUnavailable). Corruption, a missing object and bad arguments are final.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnavailable)
}

// CorruptionError describes a corrupt object: which key, where, and what.
type CorruptionError struct {
	Key    string // object key ("" when decoding bytes with no key, as the fuzzer does)
	Offset int64  // byte offset in the object where the problem was found
	Reason string
}

// Error implements error.
func (e *CorruptionError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("offload: corrupt object at offset %d: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("offload: corrupt object %s at offset %d: %s", e.Key, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// storeError classifies an error of the blob library for operation op on key. The caller's
// context ending is returned as ctx.Err(); a missing object wraps ErrNotFound; every other
// failure wraps ErrUnavailable (retryable).
func storeError(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("%w: %s %s: %w", ErrNotFound, op, key, err)
	default:
		// Unknown, Internal, ResourceExhausted (throttling), PermissionDenied (an expired or
		// not yet propagated credential), DeadlineExceeded of a request, FailedPrecondition:
		// all may clear up without a change on our side, so they are retryable.
		return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, op, key, err)
	}
}
