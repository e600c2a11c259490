package ledger

import "github.com/magnetar-io/magnetar/internal/inbox"

// OwnerOf returns a writer handle's owner (tests wait for it to park).
func OwnerOf(h *Handle) *inbox.Owner { return h.owner }
