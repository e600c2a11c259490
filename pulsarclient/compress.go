package pulsarclient

import (
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/proto/pulsar/compression"
	"github.com/magnetar-io/magnetar/proto/pulsar/pb"
)

// decompress returns an entry's payload uncompressed, always in a new slice (the frame's
// bytes are reused by the connection); limit bounds the uncompressed size.
func decompress(meta *pb.MessageMetadata, payload []byte, limit int) ([]byte, error) {
	if meta.GetCompression() == pb.CompressionType_NONE {
		return slices.Clone(payload), nil
	}
	out, err := compression.Decompress(meta, payload, limit)
	if errors.Is(err, compression.ErrUnsupported) {
		return nil, fmt.Errorf("%w: %w", ErrUnsupportedCompression, err)
	}
	return out, err
}
