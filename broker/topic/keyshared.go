package topic

import (
	"github.com/magnetar-io/magnetar/broker/topic/dispatch"
	"github.com/magnetar-io/magnetar/internal/murmur3"
)

// keyHashRange is the size of the sticky-key hash space (see dispatch.KeyHashRange).
const keyHashRange = dispatch.KeyHashRange

// noKeyHash is the slot of messages without a key (Pulsar hashes "NONE_KEY").
var noKeyHash = stickyHash([]byte("NONE_KEY"))

// stickyHash returns the slot of a sticky key (ordering key, else partition key).
func stickyHash(key []byte) uint32 {
	return (murmur3.Sum32(key, 0) & 0x7fffffff) % keyHashRange
}
